//! `host-tcp`'s entry in the built-in backend registry (port transport only).

use std::sync::Arc;

use commhal_hal::registry::{Availability, Backend, BackendDescriptor, BackendOptions};
use commhal_hal::{Guarantees, HalError, Result, TransportKinds};

use crate::tcp::{BACKEND, HostTcp};

fn probe() -> Availability {
    if !cfg!(target_os = "linux") {
        Availability::Unavailable("host-tcp needs Linux (host-emu memory, /dev/urandom)".into())
    } else if std::fs::metadata("/dev/urandom").is_err() {
        Availability::Unavailable(
            "/dev/urandom is missing: host-tcp draws its tokens from it".into(),
        )
    } else {
        Availability::Available
    }
}

/// Build the backend. Option (`[backend.host-tcp]` in `COMMHAL_CONFIG`):
/// `timeout_ms = N` bounds flush and socket sends (default: the bootstrap's timeout).
fn create(options: &BackendOptions) -> Result<Backend> {
    let mut t = HostTcp::new()?;
    if let Some(v) = options.get("timeout_ms") {
        let ms = v.as_integer().filter(|&ms| ms > 0).ok_or_else(|| {
            HalError::Config(format!(
                "[backend.host-tcp] timeout_ms must be a positive integer, got {v}"
            ))
        })?;
        t = t.with_timeout(std::time::Duration::from_millis(ms as u64));
    }
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
        description: "TCP port transport between ranks on different hosts or virtual nodes: host memory, or GPU memory through driver copies",
        kinds: TransportKinds { memory: false, port: true, switch: false },
        guarantees: || -> Guarantees { HostTcp::GUARANTEES },
        probe,
        create,
    }
}

#[cfg(test)]
mod tests {
    use commhal_hal::registry;

    #[test]
    fn registered_with_port_only() {
        let d = registry::builtin()
            .into_iter()
            .find(|d| d.name == "host-tcp")
            .expect("host-tcp is registered");
        assert!((d.probe)().is_available());
        assert!(d.kinds.port && !d.kinds.memory && !d.kinds.switch);
        let b = (d.create)(&Default::default()).unwrap();
        let p = b.port.expect("port transport");
        assert_eq!(p.name(), "host-tcp");
        assert_eq!(p.guarantees(), (d.guarantees)());
        assert!(b.memory.is_none() && b.switch.is_none());
        let mut opts = registry::BackendOptions::new();
        opts.insert("timeout_ms".into(), "soon".into());
        assert!((d.create)(&opts).is_err());
        opts.insert("timeout_ms".into(), 500.into());
        assert!((d.create)(&opts).is_ok());
    }
}
