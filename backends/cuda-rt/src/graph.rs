//! [`Graph`]: work captured from a stream once and replayed with one launch.

use std::sync::Arc;

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver::check;
use crate::error::CudaError;
use crate::stream::Stream;

/// A captured and instantiated CUDA graph. Owners synchronise the stream it was
/// replayed on before dropping it.
#[derive(Debug)]
pub struct Graph {
    ctx: Arc<Context>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

// SAFETY: graph handles are process-wide driver objects usable from any thread.
unsafe impl Send for Graph {}

impl Graph {
    /// Capture everything `record` queues on `stream` (thread-local capture mode),
    /// then instantiate it; nothing recorded runs until [`Graph::launch`]. The stream
    /// must be idle and not capturing. On any error (from `record` or the driver) the
    /// capture is ended and discarded, and `record`'s error wins.
    pub fn capture<E: From<CudaError>>(
        stream: &Stream,
        record: impl FnOnce() -> Result<(), E>,
    ) -> Result<Graph, E> {
        let ctx = stream.context().clone();
        ctx.bind()?;
        // SAFETY: the stream is alive and idle (the caller's contract).
        let r = unsafe {
            sys::cuStreamBeginCapture_v2(
                stream.raw(),
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        };
        check(r, "cuStreamBeginCapture", || {
            "starting a graph capture".into()
        })?;
        let recorded = record();
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        ctx.bind()?;
        // SAFETY: capture was begun on this stream by this thread; out-pointer valid.
        let r = unsafe { sys::cuStreamEndCapture(stream.raw(), &mut graph) };
        let ended = check(r, "cuStreamEndCapture", || "ending a graph capture".into());
        if recorded.is_err() || ended.is_err() {
            if !graph.is_null() {
                // SAFETY: the graph came from cuStreamEndCapture and is destroyed once.
                let _ = unsafe { sys::cuGraphDestroy(graph) };
            }
            recorded?;
            ended?;
        }
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: `graph` is a valid captured graph; out-pointer valid.
        let r = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) };
        if let Err(e) = check(r, "cuGraphInstantiateWithFlags", || {
            "instantiating the captured graph".into()
        }) {
            // SAFETY: as above, destroyed once.
            let _ = unsafe { sys::cuGraphDestroy(graph) };
            return Err(e.into());
        }
        Ok(Graph { ctx, graph, exec })
    }

    /// Queue one replay on `stream` (a stream of the graph's context).
    pub fn launch(&self, stream: &Stream) -> Result<(), CudaError> {
        self.ctx.bind()?;
        // SAFETY: exec and stream alive, same context.
        let r = unsafe { sys::cuGraphLaunch(self.exec, stream.raw()) };
        check(r, "cuGraphLaunch", || "replaying a graph".into())
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: created in `capture`, destroyed once, exec before graph; owners
            // synchronise their stream before dropping.
            unsafe {
                let _ = sys::cuGraphExecDestroy(self.exec);
                let _ = sys::cuGraphDestroy(self.graph);
            }
        }
    }
}
