//! [`CudaDma`]: the transport, its promises and its `PortMapped` side.

use std::time::Duration;

use commhal_backend_cuda_nvlink::driver::{self, to_hal};
use commhal_backend_cuda_nvlink::memory as nvmem;
use commhal_backend_cuda_nvlink::transport::options_device_and_legacy;
use commhal_cuda_rt::Stream;
use commhal_hal::registry::BackendOptions;
use commhal_hal::settings::gpu::CUDA_DMA_FLUSH_TIMEOUT_MS;
use commhal_hal::settings::{Env, process_env};
use commhal_hal::transport::PeerContext;
use commhal_hal::{
    Endpoint, Export, FlushMeaning, Guarantees, HalError, PortMapped, Reach, Region, Result,
    SignalStrength, Transport,
};

use crate::BACKEND;
use crate::port::DmaPort;
use crate::region::{DmaLocal, DmaRemote};
use crate::stream_port::StreamPort;

/// Depth of the proxy FIFO cuda-dma is used with.
pub const FIFO_DEPTH: u32 = 512;

/// What cuda-dma promises, and why:
///
/// * `signal: Strong` — a signal is a `cuStreamWriteValue64` queued after the copies on
///   the same stream, with the default memory barrier: seen ⇒ every earlier put landed.
/// * `put_put_ordered: true` — one stream: a copy starts after the previous finished.
/// * `flush: source reusable + remote visible` — flush returns when the stream drained.
/// * `write_copies_source: false` — `write` queues a `cuMemcpyAsync`: the copy engine
///   reads the source after `write` returned, until the stream drains (flush).
/// * no `get` (`Port::read` returns `Unsupported`), no LL packets (the copy engine moves
///   whole buffers; packets need 8/16-byte single stores), no graph capture (the proxy is
///   a host thread).
pub const GUARANTEES: Guarantees = Guarantees {
    signal: SignalStrength::Strong,
    put_put_ordered: true,
    flush: FlushMeaning {
        source_reusable: true,
        remote_visible: true,
    },
    write_copies_source: false,
    get: false,
    ll8: false,
    ll16: false,
    graph_capture: false,
    max_transfer: u64::MAX,
    fifo_depth: FIFO_DEPTH,
};

/// The cuda-dma transport: ports, imports and streams live on [`CudaDma::device`].
#[derive(Debug, Clone)]
pub struct CudaDma {
    device: u32,
    flush_timeout: Duration,
}

impl CudaDma {
    /// A transport on CUDA device `device` whose flushes give up after `flush_timeout`.
    pub fn new(device: u32, flush_timeout: Duration) -> Result<CudaDma> {
        if flush_timeout.is_zero() {
            return Err(HalError::invalid("the flush timeout must be positive"));
        }
        let n = driver::device_count(BACKEND)?;
        if device >= n {
            return Err(HalError::invalid(format!(
                "CUDA device {device} does not exist: this process sees {n} device(s)"
            )));
        }
        Ok(CudaDma {
            device,
            flush_timeout,
        })
    }

    /// Build from `[backend.cuda-dma]` options (`device = N`, `flush_timeout_ms = N`),
    /// falling back to `COMMHAL_CUDA_DEVICE` / `COMMHAL_LOCAL_RANK` and
    /// `COMMHAL_CUDA_DMA_FLUSH_TIMEOUT_MS`.
    pub fn from_options(options: &BackendOptions) -> Result<CudaDma> {
        let (device, _) = options_device_and_legacy(BACKEND, options)?;
        let ms = match options.get("flush_timeout_ms") {
            Some(v) => match v.as_integer() {
                Some(ms) if ms > 0 => ms as u64,
                _ => {
                    return Err(HalError::Config(format!(
                        "[backend.cuda-dma] flush_timeout_ms must be a positive integer, got {v}"
                    )));
                }
            },
            None => flush_timeout_from_env()?,
        };
        CudaDma::new(device, Duration::from_millis(ms))
    }

    /// The device of this transport's streams and imports.
    pub fn device(&self) -> u32 {
        self.device
    }
}

fn flush_timeout_from_env() -> Result<u64> {
    flush_timeout_in(&process_env)
}

/// `COMMHAL_CUDA_DMA_FLUSH_TIMEOUT_MS` from `env` (its declared default when unset).
fn flush_timeout_in(env: Env<'_>) -> Result<u64> {
    Ok(CUDA_DMA_FLUSH_TIMEOUT_MS.number_or_default_in(env)?)
}

impl Transport for CudaDma {
    fn name(&self) -> &str {
        BACKEND
    }
    fn guarantees(&self) -> Guarantees {
        GUARANTEES
    }
    /// Same host and node, CUDA devices with peer access: cost 50 (copies through a
    /// proxy), 25 in one process.
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        commhal_backend_cuda_nvlink::cuda_reach(BACKEND, local, remote, 50)
    }
}

impl PortMapped for CudaDma {
    type Local = DmaLocal;
    type Remote = DmaRemote;
    type Port = DmaPort;

    fn register(&self, region: &dyn Region) -> Result<DmaLocal> {
        DmaLocal::register(region)
    }

    fn export(&self, local: &DmaLocal) -> Result<Export> {
        nvmem::export(BACKEND, local.export_source()?)
    }

    fn import(&self, export: Export) -> Result<DmaRemote> {
        nvmem::validate_export(BACKEND, &export)?;
        let ctx = driver::context(BACKEND, self.device)?;
        Ok(DmaRemote {
            mapping: nvmem::map_export(BACKEND, &ctx, export)?,
        })
    }

    /// The import itself: a peer allocation mapped for this transport's device.
    fn remote_region<'a>(&self, remote: &'a DmaRemote) -> Option<&'a dyn Region> {
        Some(remote)
    }

    /// No setup traffic: the port needs only reach and a stream.
    fn connect(&self, ctx: &PeerContext<'_>) -> Result<DmaPort> {
        if let Reach::No(why) = Transport::reach(self, ctx.local, ctx.remote) {
            return Err(HalError::unsupported(
                BACKEND,
                format!("a port to rank {}: {why}", ctx.remote.rank),
            ));
        }
        if ctx.local.device.ordinal != self.device {
            return Err(HalError::invalid(format!(
                "the local endpoint drives device {} but this cuda-dma transport is for device {}",
                ctx.local.device.ordinal, self.device
            )));
        }
        let ops = StreamPort::new().map_err(|e| to_hal(BACKEND, e))?;
        let cu = driver::context(BACKEND, self.device)?;
        let stream = Stream::new(&cu).map_err(|e| to_hal(BACKEND, e))?;
        Ok(DmaPort::new(
            stream,
            ops,
            ctx.remote.rank,
            self.flush_timeout,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guarantees_match_one_stream_semantics() {
        let t = CudaDma {
            device: 0,
            flush_timeout: Duration::from_secs(1),
        };
        assert_eq!(
            Transport::guarantees(&t).claims(),
            vec![
                ("strong-signal", true),
                ("put-put-ordered", true),
                ("flush-source-reusable", true),
                ("flush-remote-visible", true),
                ("get", false),
                ("ll8", false),
                ("ll16", false),
                ("graph-capture", false),
                ("write-copies-source", false),
            ]
        );
        assert_eq!(Transport::guarantees(&t).fifo_depth, 512);
    }

    #[test]
    fn options_are_validated() {
        let mut o = BackendOptions::new();
        o.insert("device".into(), 0.into());
        o.insert("flush_timeout_ms".into(), 0.into());
        assert!(matches!(
            CudaDma::from_options(&o),
            Err(HalError::Config(_))
        ));
        o.insert("flush_timeout_ms".into(), "soon".into());
        assert!(matches!(
            CudaDma::from_options(&o),
            Err(HalError::Config(_))
        ));
    }

    #[test]
    fn the_flush_timeout_variable_is_checked() {
        assert_eq!(flush_timeout_in(&|_| None).unwrap(), 30_000);
        assert_eq!(flush_timeout_in(&|_| Some(" 250 ".into())).unwrap(), 250);
        for bad in ["0", "soon", "-1", "1.5"] {
            let e = flush_timeout_in(&|_| Some(bad.into())).unwrap_err();
            let text = e.to_string();
            assert!(matches!(e, HalError::Config(_)), "{e:?}");
            assert!(
                text.contains("COMMHAL_CUDA_DMA_FLUSH_TIMEOUT_MS") && text.contains(bad),
                "{text}"
            );
        }
    }

    #[test]
    fn foreign_exports_are_rejected_before_the_driver() {
        let t = CudaDma {
            device: 0,
            flush_timeout: Duration::from_secs(1),
        };
        let e = Export {
            backend: "cuda-nvlink".into(),
            len: 1,
            bytes: vec![],
            fds: vec![],
        };
        let msg = t.import(e).unwrap_err().to_string();
        assert!(
            msg.contains("cuda-nvlink") && msg.contains("cuda-dma"),
            "{msg}"
        );
    }
}
