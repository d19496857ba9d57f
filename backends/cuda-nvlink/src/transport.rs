//! [`CudaNvlink`]: the transport, its promises and its `MemoryMapped` side.

use commhal_hal::registry::BackendOptions;
use commhal_hal::settings::gpu::{CUDA_DEVICE, CUDA_LEGACY_IPC};
use commhal_hal::settings::launch::LOCAL_RANK;
use commhal_hal::settings::{Env, process_env};
use commhal_hal::{
    Device, DeviceKind, Endpoint, Export, FlushMeaning, Guarantees, HalError, MemoryMapped, Reach,
    Result, SignalStrength, Transport,
};

use crate::BACKEND;
use crate::driver;
use crate::memory::{self, NvlinkMapping, NvlinkMemory};

/// What cuda-nvlink promises, and why (the device code is `device-src`'s
/// `memory_channel.h` and `packets.h`):
///
/// * `signal: Strong` — `signal()` is `atom.release.sys.add` after the block's
///   `__syncthreads()`, `wait()` is `ld.acquire.sys`: every put of the block before the
///   signal is visible after the wait.
/// * `put_put_ordered: false` — a put is many threads' weak stores; two puts are not
///   ordered for an observer without a fence or signal between them.
/// * `flush: source reusable, not remote visible` — a put's loads of the source are
///   complete when its threads pass the next `__syncthreads()`, so the source may be
///   overwritten; but `flush()` is a no-op (no system fence), so it says nothing about
///   when the peer sees the data. Use signal/wait for that.
/// * `get`, `ll8`, `ll16` — loads from the mapping; 8-byte `st.volatile.v2` and 16-byte
///   `st.volatile.v4` packet stores (readers check every flag).
/// * `graph_capture: true` — kernels using the mapping can be captured and replayed
///   (the GPU conformance case `graph-capture` checks it).
/// * `write_copies_source: false` — a property of `Port::write`, and this backend has
///   no port transport.
pub const GUARANTEES: Guarantees = Guarantees {
    signal: SignalStrength::Strong,
    put_put_ordered: false,
    flush: FlushMeaning {
        source_reusable: true,
        remote_visible: false,
    },
    write_copies_source: false,
    get: true,
    ll8: true,
    ll16: true,
    graph_capture: true,
    max_transfer: u64::MAX,
    fifo_depth: 0,
};

/// The variable that forces legacy CUDA IPC instead of cuMem VMM fds (declared as
/// [`CUDA_LEGACY_IPC`]; read it with [`legacy_ipc_from_env`]).
pub const LEGACY_ENV: &str = CUDA_LEGACY_IPC.env;

/// `COMMHAL_CUDA_LEGACY_IPC`: whether legacy CUDA IPC is forced; an error names a value
/// that is not a flag.
pub fn legacy_ipc_from_env() -> Result<bool> {
    Ok(CUDA_LEGACY_IPC.flag_in(&process_env)?)
}

/// The cuda-nvlink transport. `alloc` takes the device explicitly; `map` maps for
/// [`CudaNvlink::device`].
#[derive(Debug, Clone)]
pub struct CudaNvlink {
    device: u32,
    legacy_ipc: bool,
}

impl CudaNvlink {
    /// A transport mapping peers' memory for device `device`; `legacy_ipc` forces the
    /// legacy CUDA IPC path even where VMM fds work (to test the fallback).
    pub fn new(device: u32, legacy_ipc: bool) -> Result<CudaNvlink> {
        let n = driver::device_count(BACKEND)?;
        if device >= n {
            return Err(HalError::invalid(format!(
                "CUDA device {device} does not exist: this process sees {n} device(s)"
            )));
        }
        Ok(CudaNvlink { device, legacy_ipc })
    }

    /// Build from `[backend.cuda-nvlink]` options (`device = N`, `legacy_ipc = true`),
    /// falling back to `COMMHAL_CUDA_DEVICE`, `COMMHAL_LOCAL_RANK`, `COMMHAL_CUDA_LEGACY_IPC`.
    pub fn from_options(options: &BackendOptions) -> Result<CudaNvlink> {
        let (device, legacy) = options_device_and_legacy(BACKEND, options)?;
        CudaNvlink::new(device, legacy)
    }

    /// The device `map` maps for.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// Whether `alloc` always uses legacy IPC.
    pub fn forces_legacy_ipc(&self) -> bool {
        self.legacy_ipc
    }

    /// Map `export` for `device` (instead of [`CudaNvlink::device`]).
    pub fn map_on(&self, device: u32, export: Export) -> Result<NvlinkMapping> {
        memory::validate_export(BACKEND, &export)?;
        let ctx = driver::context(BACKEND, device)?;
        memory::map_export(BACKEND, &ctx, export)
    }
}

/// Resolve `device` and `legacy_ipc` from options, then the environment.
pub fn options_device_and_legacy(backend: &str, options: &BackendOptions) -> Result<(u32, bool)> {
    device_and_legacy_in(backend, options, &process_env)
}

/// [`options_device_and_legacy`] with the environment `env`.
fn device_and_legacy_in(
    backend: &str,
    options: &BackendOptions,
    env: Env<'_>,
) -> Result<(u32, bool)> {
    let device = match options.get("device") {
        Some(v) => match v.as_integer() {
            Some(d) if d >= 0 && d <= i64::from(u32::MAX) => d as u32,
            _ => {
                return Err(HalError::Config(format!(
                    "[backend.{backend}] device must be a CUDA device ordinal (0, 1, ...), got {v}"
                )));
            }
        },
        None => default_device(backend, env)?,
    };
    let legacy = match options.get("legacy_ipc") {
        Some(v) => v.as_bool().ok_or_else(|| {
            HalError::Config(format!(
                "[backend.{backend}] legacy_ipc must be true or false, got {v}"
            ))
        })?,
        None => CUDA_LEGACY_IPC.flag_in(env)?,
    };
    Ok((device, legacy))
}

fn default_device(backend: &str, env: Env<'_>) -> Result<u32> {
    if let Some(d) = CUDA_DEVICE.number_in(env)? {
        return Ok(d as u32); // 0..=u32::MAX
    }
    if let Some(r) = LOCAL_RANK.number_in(env)? {
        let r = r as u32; // declared 0..=u32::MAX
        let n = driver::device_count(backend)?.max(1);
        return Ok(r % n);
    }
    Ok(0)
}

impl Transport for CudaNvlink {
    fn name(&self) -> &str {
        BACKEND
    }
    fn guarantees(&self) -> Guarantees {
        GUARANTEES
    }
    /// Same host and node, CUDA devices with peer access: cost 20 (10 in one process).
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        crate::reach::cuda_reach(BACKEND, local, remote, 20)
    }
}

impl MemoryMapped for CudaNvlink {
    type Memory = NvlinkMemory;
    type Mapping = NvlinkMapping;

    /// cuMem VMM on devices with POSIX-fd handles (length rounded up to the
    /// granularity), `cuMemAlloc` otherwise or when legacy IPC is forced. Zeroed.
    fn alloc(&self, device: Device, len: u64) -> Result<NvlinkMemory> {
        if device.kind != DeviceKind::Cuda {
            return Err(HalError::unsupported(
                BACKEND,
                format!(
                    "memory on {:?} device {} (cuda-nvlink allocates CUDA device memory only)",
                    device.kind, device.ordinal
                ),
            ));
        }
        let ctx = driver::context(BACKEND, device.ordinal)?;
        let vmm = ctx
            .supports_vmm_fd()
            .map_err(|e| driver::to_hal(BACKEND, e))?;
        if !vmm && !self.legacy_ipc {
            tracing::info!(
                "cuda-nvlink: device {} lacks cuMem VMM with POSIX fds; using legacy CUDA IPC",
                device.ordinal
            );
        }
        NvlinkMemory::alloc(BACKEND, &ctx, len, self.legacy_ipc || !vmm)
    }

    fn export(&self, mem: &NvlinkMemory) -> Result<Export> {
        memory::export(BACKEND, mem.source())
    }

    fn map(&self, export: Export) -> Result<NvlinkMapping> {
        self.map_on(self.device, export)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guarantees_are_what_the_device_code_gives() {
        let t = CudaNvlink {
            device: 0,
            legacy_ipc: false,
        };
        assert_eq!(
            Transport::guarantees(&t).claims(),
            vec![
                ("strong-signal", true),
                ("put-put-ordered", false),
                ("flush-source-reusable", true),
                ("flush-remote-visible", false),
                ("get", true),
                ("ll8", true),
                ("ll16", true),
                ("graph-capture", true),
                ("write-copies-source", false),
            ]
        );
        assert_eq!(Transport::guarantees(&t).fifo_depth, 0);
    }

    #[test]
    fn options_are_validated() {
        let mut o = BackendOptions::new();
        o.insert("device".into(), (-1).into());
        assert!(matches!(
            options_device_and_legacy(BACKEND, &o),
            Err(HalError::Config(_))
        ));
        o.insert("device".into(), "zero".into());
        assert!(options_device_and_legacy(BACKEND, &o).is_err());
        o.insert("device".into(), 2.into());
        o.insert("legacy_ipc".into(), "yes".into());
        assert!(options_device_and_legacy(BACKEND, &o).is_err());
        o.insert("legacy_ipc".into(), true.into());
        assert_eq!(options_device_and_legacy(BACKEND, &o).unwrap(), (2, true));
    }

    /// The variables, where no option says: a value that is not a device ordinal or a
    /// flag is an error naming the variable (`COMMHAL_CUDA_LEGACY_IPC=yes` once meant
    /// off, silently).
    #[test]
    fn the_variables_are_checked() {
        let o = BackendOptions::new();
        let env = |device: &'static str, legacy: &'static str| {
            move |k: &str| match k {
                "COMMHAL_CUDA_DEVICE" => Some(device.to_string()),
                "COMMHAL_CUDA_LEGACY_IPC" => Some(legacy.to_string()),
                _ => None,
            }
        };
        assert_eq!(
            device_and_legacy_in(BACKEND, &o, &env("3", "1")).unwrap(),
            (3, true)
        );
        assert_eq!(
            device_and_legacy_in(BACKEND, &o, &env("0", "")).unwrap(),
            (0, false)
        );
        for (device, legacy, var, bad) in [
            ("gpu1", "0", "COMMHAL_CUDA_DEVICE", "gpu1"),
            ("-1", "0", "COMMHAL_CUDA_DEVICE", "-1"),
            ("1", "maybe", "COMMHAL_CUDA_LEGACY_IPC", "maybe"),
            ("1", "2", "COMMHAL_CUDA_LEGACY_IPC", "2"),
        ] {
            let e = device_and_legacy_in(BACKEND, &o, &env(device, legacy)).unwrap_err();
            let text = e.to_string();
            assert!(matches!(e, HalError::Config(_)), "{e:?}");
            assert!(text.contains(var) && text.contains(bad), "{text}");
        }
        // an option wins over its variable, which is then not read
        let mut o = BackendOptions::new();
        o.insert("device".into(), 1.into());
        o.insert("legacy_ipc".into(), false.into());
        assert_eq!(
            device_and_legacy_in(BACKEND, &o, &env("x", "x")).unwrap(),
            (1, false)
        );
    }

    #[test]
    fn construction_without_a_driver_says_why() {
        if commhal_cuda_rt::probe().is_available() {
            return;
        }
        let e = CudaNvlink::new(0, false).unwrap_err().to_string();
        assert!(e.contains("CUDA"), "{e}");
    }
}
