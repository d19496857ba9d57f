//! What a backend promises. The conformance suite asserts every claimed guarantee and
//! reports unclaimed ones as *not supported* (never as passed).

use serde::{Deserialize, Serialize};

/// What a `signal` orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SignalStrength {
    /// A signal seen by the peer implies every earlier put on the same channel is
    /// visible to the peer (MSCCL++ semantics; memory channels with release stores).
    Strong,
    /// Only the data fused into the same operation (`put_with_signal`) is ordered
    /// before the signal; separate earlier puts may still be in flight.
    Weak,
}

/// What a completed `flush` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushMeaning {
    /// After flush the source buffers of earlier puts may be overwritten (a port
    /// transport claiming [`Guarantees::write_copies_source`] allows it sooner: when
    /// `write` returns).
    pub source_reusable: bool,
    /// After flush earlier puts are visible in the peer's memory (without a signal).
    pub remote_visible: bool,
}

/// A backend's promises. Each `true` is a claim the conformance suite checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guarantees {
    /// What a signal orders.
    pub signal: SignalStrength,
    /// Two puts to the same peer on one channel land in issue order
    /// (a reader that sees the second sees the first).
    pub put_put_ordered: bool,
    /// What flush guarantees.
    pub flush: FlushMeaning,
    /// When [`crate::Port::write`] returns, its source has been read: the caller may
    /// overwrite it at once, and `flush` is needed only for what the peer sees
    /// ([`FlushMeaning::remote_visible`]). False where the transport reads the source
    /// after `write` returns (copy engines, RDMA), and for a backend with no port
    /// transport. Missing from a serialized descriptor, it reads as false, the safe
    /// default.
    #[serde(default)]
    pub write_copies_source: bool,
    /// One-sided `get` is supported: a memory channel's `get` (a load through the
    /// peer mapping) on a memory transport, [`crate::Port::read`] on a port transport.
    /// Where it is false, `Port::read` returns [`crate::HalError::Unsupported`].
    pub get: bool,
    /// LL8 packets (4 data + 4 flag bytes in one 8-byte store) are delivered atomically.
    pub ll8: bool,
    /// LL16 packets (two LL8 words in one 16-byte store) are delivered atomically.
    pub ll16: bool,
    /// Operations can be captured into a CUDA/HIP graph and replayed.
    pub graph_capture: bool,
    /// Largest single transfer in bytes.
    pub max_transfer: u64,
    /// Depth of the proxy FIFO (port-mapped transports); 0 where there is none.
    pub fifo_depth: u32,
}

impl Guarantees {
    /// The weakest promise: useful as a starting point for a new backend.
    pub const fn minimal() -> Self {
        Guarantees {
            signal: SignalStrength::Weak,
            put_put_ordered: false,
            flush: FlushMeaning {
                source_reusable: true,
                remote_visible: false,
            },
            write_copies_source: false,
            get: false,
            ll8: false,
            ll16: false,
            graph_capture: false,
            max_transfer: u64::MAX,
            fifo_depth: 0,
        }
    }

    /// The claims as `(name, claimed)` pairs, in a stable order (for `commhal info` and
    /// for the conformance suite's "honest capabilities" check).
    pub fn claims(&self) -> Vec<(&'static str, bool)> {
        vec![
            ("strong-signal", self.signal == SignalStrength::Strong),
            ("put-put-ordered", self.put_put_ordered),
            ("flush-source-reusable", self.flush.source_reusable),
            ("flush-remote-visible", self.flush.remote_visible),
            ("get", self.get),
            ("ll8", self.ll8),
            ("ll16", self.ll16),
            ("graph-capture", self.graph_capture),
            ("write-copies-source", self.write_copies_source),
        ]
    }
}
