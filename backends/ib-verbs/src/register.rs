//! ib-verbs' entry in the built-in backend registry, and its probe.

use std::sync::Arc;

use commhal_hal::registry::{Availability, Backend, BackendDescriptor, BackendOptions};
use commhal_hal::{Guarantees, Result, TransportKinds};

use crate::BACKEND;
use crate::device::{self, Wanted};
use crate::transport::{GUARANTEES, IbVerbs};

/// Can ib-verbs run here? libibverbs loads (`COMMHAL_IBVERBS_LIB` or
/// `libibverbs.so.1`), lists at least one device, and one has an active port with an
/// address (opens and closes device contexts; no other side effect).
pub fn probe() -> Availability {
    let path = crate::sys::library_path(None);
    let verbs = match device::load(&path) {
        Ok(v) => v,
        Err(reason) => return Availability::Unavailable(reason),
    };
    let want = match Wanted::default().with_env() {
        Ok(w) => w,
        Err(e) => return Availability::Unavailable(e.to_string()),
    };
    match device::choose(verbs, &want) {
        Ok(_) => Availability::Available,
        Err(commhal_hal::HalError::Unavailable { reason, .. }) => Availability::Unavailable(reason),
        Err(e) => Availability::Unavailable(e.to_string()),
    }
}

fn create(options: &BackendOptions) -> Result<Backend> {
    let t = IbVerbs::from_options(options)?;
    Ok(Backend {
        name: BACKEND.into(),
        memory: None,
        port: Some(Arc::new(t)),
        switch: None,
    })
}

inventory::submit! {
    BackendDescriptor {
        name: BACKEND,
        description: "RDMA verbs port transport (RC queue pairs: RDMA WRITE, atomic fetch-add signals) over libibverbs, host memory (GPU memory registers as dma-buf; ports serve host ranks); tested only against a stub provider, never run on RDMA hardware",
        kinds: TransportKinds { memory: false, port: true, switch: false },
        guarantees: || -> Guarantees { GUARANTEES },
        probe,
        create,
    }
}
