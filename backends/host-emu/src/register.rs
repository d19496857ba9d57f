//! host-emu's entry in the built-in backend registry.

use std::sync::Arc;

use commhal_hal::registry::{Availability, Backend, BackendDescriptor, BackendOptions};
use commhal_hal::{Guarantees, HalError, Result, TransportKinds};

use crate::BACKEND;
use crate::faults::Faults;
use crate::transport::HostEmu;

fn probe() -> Availability {
    if cfg!(target_os = "linux") {
        Availability::Available
    } else {
        Availability::Unavailable("host-emu needs Linux (memfd_create)".into())
    }
}

/// Build the backend. Options (`[backend.host-emu]` in `COMMHAL_CONFIG`):
/// `faults = "signal-before-data,..."` (test-only, see [`crate::faults`]); without it
/// `COMMHAL_HOST_EMU_FAULTS` is read.
fn create(options: &BackendOptions) -> Result<Backend> {
    let faults = match options.get("faults").map(|v| (v.as_str(), v)) {
        None => Faults::from_env()?,
        Some((Some(spec), _)) => Faults::parse(spec)?,
        Some((None, other)) => {
            return Err(HalError::Config(format!(
                "[backend.host-emu] faults must be a string like \"early-flush\", got {other}"
            )));
        }
    };
    let t = Arc::new(HostEmu::with_faults(faults));
    Ok(Backend {
        name: BACKEND.into(),
        memory: Some(t.clone()),
        port: Some(t.clone()),
        switch: Some(t),
    })
}

inventory::submit! {
    BackendDescriptor {
        name: BACKEND,
        description: "CPU emulation: memfd shared memory as device memory, host threads as blocks",
        kinds: TransportKinds { memory: true, port: true, switch: true },
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
        assert!(b.port.is_some() && b.switch.is_some());
    }

    #[test]
    fn faults_option_is_parsed() {
        let d = registry::builtin()
            .into_iter()
            .find(|d| d.name == "host-emu")
            .unwrap();
        let mut opts = commhal_hal::registry::BackendOptions::new();
        opts.insert("faults".into(), "bogus".into());
        assert!((d.create)(&opts).is_err());
        opts.insert("faults".into(), 3.into());
        assert!((d.create)(&opts).is_err());
        opts.insert("faults".into(), "early-flush".into());
        assert!((d.create)(&opts).is_ok());
    }
}
