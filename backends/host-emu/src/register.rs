//! host-emu's entry in the built-in backend registry.

use std::sync::Arc;

use commhal_hal::registry::{Availability, Backend, BackendDescriptor, BackendOptions};
use commhal_hal::{Guarantees, Result, TransportKinds};

use crate::BACKEND;
use crate::transport::HostEmu;

fn probe() -> Availability {
    if cfg!(target_os = "linux") {
        Availability::Available
    } else {
        Availability::Unavailable("host-emu needs Linux (memfd_create)".into())
    }
}

/// Build the backend. Options (`[backend.host-emu]` in `COMMHAL_CONFIG`): none yet.
fn create(_options: &BackendOptions) -> Result<Backend> {
    let t = Arc::new(HostEmu::new());
    Ok(Backend {
        name: BACKEND.into(),
        memory: Some(t),
        port: None,
        switch: None,
    })
}

inventory::submit! {
    BackendDescriptor {
        name: BACKEND,
        description: "CPU emulation: memfd shared memory as device memory, host threads as blocks",
        kinds: TransportKinds { memory: true, port: false, switch: false },
        guarantees: || -> Guarantees { HostEmu::GUARANTEES },
        probe,
        create,
    }
}

#[cfg(test)]
mod tests {
    use commhal_hal::registry;

    #[test]
    fn registered_and_constructible() {
        let d = registry::builtin()
            .into_iter()
            .find(|d| d.name == "host-emu")
            .expect("host-emu is registered");
        assert!((d.probe)().is_available());
        let b = (d.create)(&Default::default()).unwrap();
        assert_eq!(b.name, "host-emu");
        let m = b.memory.expect("memory transport");
        assert_eq!(m.name(), "host-emu");
        assert_eq!(m.guarantees(), (d.guarantees)());
    }
}
