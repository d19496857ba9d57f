//! [`DynCollectives`]: the object-safe mirror of [`Collectives`], for a communicator
//! chosen at run time (`Box<dyn DynCollectives>`: the host [`Communicator`] or the GPU
//! `commhal_cuda_coll::Comm`, picked by a flag or a config file).
//!
//! [`Collectives`] has associated types for what differs between communicators (host
//! slices or device addresses, no queue or a CUDA stream), so it cannot be a trait
//! object. Here the buffers are descriptors that say which memory they are in
//! ([`DynSend`], [`DynRecv`]) and the queue is type-erased ([`DynQueue`]). Every
//! `Collectives` whose types convert from them ([`FromDynSend`], [`FromDynRecv`],
//! [`FromDynQueue`]: host [`SendBuf`]/[`RecvBuf`], device addresses as `u64`, `()` and
//! `&T` queues) is a `DynCollectives` through a blanket impl, and
//! `Box<dyn DynCollectives>` is a `Collectives` again, so generic code runs over a
//! run-time choice unchanged.
//!
//! A descriptor of the wrong kind — a device address handed to the host communicator,
//! a host slice to the GPU one, a missing queue or a queue of another type — is a
//! [`DynError`] on the calling rank before the call reaches the communicator (nothing
//! is queued, no peer is contacted), never a panic. Like any argument mistake that
//! only some ranks make, the ranks that did call then wait out their bound.
//!
//! [`Communicator`]: crate::comm::Communicator

use std::any::Any;
use std::fmt;

use crate::comm::{Buffer, Collectives, RecvBuf, SendBuf};
use crate::dtype::{DataType, RedOp};
use commhal_hal::Rank;

/// Where a communicator's buffers live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Memory {
    /// Host memory: slices or registered [`Buffer`]s (the host [`crate::comm::Communicator`]).
    Host,
    /// Device memory, by address (the GPU communicator).
    Device,
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Memory::Host => "host memory (a slice or a registered Buffer)",
            Memory::Device => "device memory (an address)",
        })
    }
}

/// An input buffer of a [`DynCollectives`] call: host memory or a device address.
#[derive(Debug, Clone, Copy)]
pub enum DynSend<'a> {
    /// A host slice or registered buffer.
    Host(SendBuf<'a>),
    /// A device address (for the GPU communicator: device memory of its device).
    Device(u64),
}

/// An output buffer of a [`DynCollectives`] call: host memory or a device address.
#[derive(Debug)]
pub enum DynRecv<'a> {
    /// A host slice or registered buffer.
    Host(RecvBuf<'a>),
    /// A device address.
    Device(u64),
}

impl DynSend<'_> {
    /// The memory it is in.
    pub fn memory(&self) -> Memory {
        match self {
            DynSend::Host(_) => Memory::Host,
            DynSend::Device(_) => Memory::Device,
        }
    }
}

impl DynRecv<'_> {
    /// The memory it is in.
    pub fn memory(&self) -> Memory {
        match self {
            DynRecv::Host(_) => Memory::Host,
            DynRecv::Device(_) => Memory::Device,
        }
    }
}

impl<'a> From<SendBuf<'a>> for DynSend<'a> {
    fn from(b: SendBuf<'a>) -> Self {
        DynSend::Host(b)
    }
}
impl<'a> From<&'a [u8]> for DynSend<'a> {
    fn from(s: &'a [u8]) -> Self {
        DynSend::Host(SendBuf::Slice(s))
    }
}
impl<'a> From<&'a Buffer> for DynSend<'a> {
    fn from(b: &'a Buffer) -> Self {
        DynSend::Host(SendBuf::Buffer(b))
    }
}
impl<'a> From<RecvBuf<'a>> for DynRecv<'a> {
    fn from(b: RecvBuf<'a>) -> Self {
        DynRecv::Host(b)
    }
}
impl<'a> From<&'a mut [u8]> for DynRecv<'a> {
    fn from(s: &'a mut [u8]) -> Self {
        DynRecv::Host(RecvBuf::Slice(s))
    }
}
impl<'a> From<&'a mut Buffer> for DynRecv<'a> {
    fn from(b: &'a mut Buffer) -> Self {
        DynRecv::Host(RecvBuf::Buffer(b))
    }
}

/// Where a [`DynCollectives`] call is queued, type-erased: none (a host communicator
/// runs each call to the end) or a reference to the communicator's queue type (a
/// `commhal_cuda_rt::Stream` for the GPU one), checked by type when the call converts
/// it.
#[derive(Clone, Copy)]
pub struct DynQueue<'q> {
    queue: Option<(&'q dyn Any, &'static str)>,
}

impl<'q> DynQueue<'q> {
    /// No queue: for a communicator whose calls complete before they return.
    pub const NONE: DynQueue<'static> = DynQueue { queue: None };

    /// `queue`, e.g. `DynQueue::of(&stream)`.
    pub fn of<T: Any>(queue: &'q T) -> DynQueue<'q> {
        DynQueue {
            queue: Some((queue, std::any::type_name::<T>())),
        }
    }

    /// The type name of the queue it holds, if any.
    pub fn type_name(&self) -> Option<&'static str> {
        self.queue.map(|(_, name)| name)
    }
}

impl fmt::Debug for DynQueue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.type_name() {
            None => f.write_str("DynQueue::NONE"),
            Some(name) => write!(f, "DynQueue({name})"),
        }
    }
}

/// Why a [`DynCollectives`] call failed.
#[derive(Debug, thiserror::Error)]
pub enum DynError {
    /// A buffer in the other memory than the communicator's.
    #[error(
        "the {what} is {given}, but this communicator takes {wants}: pass buffers of the communicator's memory (DynCollectives::memory)"
    )]
    WrongMemory {
        /// `send buffer` or `receive buffer`.
        what: &'static str,
        /// The memory of the buffer passed.
        given: Memory,
        /// The memory the communicator takes.
        wants: Memory,
    },
    /// No queue, or a queue of another type than the communicator's.
    #[error("the call was given {}, but this communicator {}", describe_queue(*given), describe_wanted(*wants))]
    WrongQueue {
        /// The type of the queue passed (`None`: [`DynQueue::NONE`]).
        given: Option<&'static str>,
        /// The queue type the communicator takes (`None`: none).
        wants: Option<&'static str>,
    },
    /// The communicator's own error.
    #[error(transparent)]
    Call(Box<dyn std::error::Error + Send + Sync + 'static>),
}

fn describe_queue(q: Option<&'static str>) -> String {
    match q {
        None => "no queue (DynQueue::NONE)".into(),
        Some(t) => format!("a queue of type `{t}`"),
    }
}

fn describe_wanted(q: Option<&'static str>) -> String {
    match q {
        None => "runs each call to the end and takes no queue: pass DynQueue::NONE".into(),
        Some(t) => format!("queues its calls on a `{t}`: pass DynQueue::of(&queue)"),
    }
}

impl DynError {
    /// The communicator's own error, if the call got that far (downcast it to the
    /// communicator's `Collectives::Error`).
    pub fn call_error(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match self {
            DynError::Call(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

/// A [`Collectives::Send`] type that a [`DynSend`] converts into.
pub trait FromDynSend<'a>: Sized {
    /// The memory this buffer type is in.
    const MEMORY: Memory;
    /// `b` as this type, or [`DynError::WrongMemory`].
    fn from_dyn(b: DynSend<'a>) -> Result<Self, DynError>;
}

/// A [`Collectives::Recv`] type that a [`DynRecv`] converts into.
pub trait FromDynRecv<'a>: Sized {
    /// `b` as this type, or [`DynError::WrongMemory`].
    fn from_dyn(b: DynRecv<'a>) -> Result<Self, DynError>;
}

/// A [`Collectives::Queue`] type that a [`DynQueue`] converts into.
pub trait FromDynQueue<'q>: Sized {
    /// `q` as this type, or [`DynError::WrongQueue`].
    fn from_dyn(q: DynQueue<'q>) -> Result<Self, DynError>;
}

const SEND: &str = "send buffer";
const RECV: &str = "receive buffer";

impl<'a> FromDynSend<'a> for SendBuf<'a> {
    const MEMORY: Memory = Memory::Host;
    fn from_dyn(b: DynSend<'a>) -> Result<Self, DynError> {
        match b {
            DynSend::Host(b) => Ok(b),
            other => Err(DynError::WrongMemory {
                what: SEND,
                given: other.memory(),
                wants: Memory::Host,
            }),
        }
    }
}

impl<'a> FromDynRecv<'a> for RecvBuf<'a> {
    fn from_dyn(b: DynRecv<'a>) -> Result<Self, DynError> {
        match b {
            DynRecv::Host(b) => Ok(b),
            other => Err(DynError::WrongMemory {
                what: RECV,
                given: other.memory(),
                wants: Memory::Host,
            }),
        }
    }
}

/// A device address.
impl FromDynSend<'_> for u64 {
    const MEMORY: Memory = Memory::Device;
    fn from_dyn(b: DynSend<'_>) -> Result<Self, DynError> {
        match b {
            DynSend::Device(addr) => Ok(addr),
            other => Err(DynError::WrongMemory {
                what: SEND,
                given: other.memory(),
                wants: Memory::Device,
            }),
        }
    }
}

/// A device address.
impl FromDynRecv<'_> for u64 {
    fn from_dyn(b: DynRecv<'_>) -> Result<Self, DynError> {
        match b {
            DynRecv::Device(addr) => Ok(addr),
            other => Err(DynError::WrongMemory {
                what: RECV,
                given: other.memory(),
                wants: Memory::Device,
            }),
        }
    }
}

/// No queue.
impl FromDynQueue<'_> for () {
    fn from_dyn(q: DynQueue<'_>) -> Result<Self, DynError> {
        match q.queue {
            None => Ok(()),
            Some((_, name)) => Err(DynError::WrongQueue {
                given: Some(name),
                wants: None,
            }),
        }
    }
}

/// A queue object (a CUDA stream), checked by type.
impl<'q, T: Any> FromDynQueue<'q> for &'q T {
    fn from_dyn(q: DynQueue<'q>) -> Result<Self, DynError> {
        let wrong = |given| DynError::WrongQueue {
            given,
            wants: Some(std::any::type_name::<T>()),
        };
        let (any, name) = q.queue.ok_or_else(|| wrong(None))?;
        any.downcast_ref::<T>().ok_or_else(|| wrong(Some(name)))
    }
}

/// Object-safe [`Collectives`] (see the module docs): the same methods, with buffers
/// as [`DynSend`]/[`DynRecv`] and the queue as a [`DynQueue`].
pub trait DynCollectives {
    /// [`Collectives::rank`].
    fn rank(&self) -> Rank;
    /// [`Collectives::size`].
    fn size(&self) -> u32;
    /// The memory this communicator's buffers must be in.
    fn memory(&self) -> Memory;

    /// [`Collectives::all_reduce`].
    fn all_reduce(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError>;

    /// [`Collectives::all_gather`].
    fn all_gather(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError>;

    /// [`Collectives::reduce_scatter`].
    fn reduce_scatter(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError>;

    /// [`Collectives::broadcast`].
    #[allow(clippy::too_many_arguments)]
    fn broadcast(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        root: Rank,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError>;

    /// [`Collectives::reduce`].
    #[allow(clippy::too_many_arguments)]
    fn reduce(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        root: Rank,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError>;

    /// [`Collectives::all_to_all`].
    fn all_to_all(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError>;
}

/// The buffers and queue of one call, converted (the send buffer first, then the
/// receive buffer, then the queue: the first mismatch is the error).
#[allow(clippy::type_complexity)]
fn convert<'a, 'b, 'q, C>(
    send: DynSend<'a>,
    recv: DynRecv<'b>,
    queue: DynQueue<'q>,
) -> Result<(C::Send<'a>, C::Recv<'b>, C::Queue<'q>), DynError>
where
    C: Collectives + ?Sized,
    C::Send<'a>: FromDynSend<'a>,
    C::Recv<'b>: FromDynRecv<'b>,
    C::Queue<'q>: FromDynQueue<'q>,
{
    Ok((
        FromDynSend::from_dyn(send)?,
        FromDynRecv::from_dyn(recv)?,
        FromDynQueue::from_dyn(queue)?,
    ))
}

fn call_error<E: std::error::Error + Send + Sync + 'static>(e: E) -> DynError {
    DynError::Call(Box::new(e))
}

impl<C> DynCollectives for C
where
    C: Collectives,
    for<'a> C::Send<'a>: FromDynSend<'a>,
    for<'a> C::Recv<'a>: FromDynRecv<'a>,
    for<'q> C::Queue<'q>: FromDynQueue<'q>,
{
    fn rank(&self) -> Rank {
        Collectives::rank(self)
    }
    fn size(&self) -> u32 {
        Collectives::size(self)
    }
    fn memory(&self) -> Memory {
        <C::Send<'static> as FromDynSend<'static>>::MEMORY
    }
    fn all_reduce(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError> {
        let (s, r, q) = convert::<C>(send, recv, queue)?;
        Collectives::all_reduce(self, s, r, count, dtype, op, q).map_err(call_error)
    }
    fn all_gather(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError> {
        let (s, r, q) = convert::<C>(send, recv, queue)?;
        Collectives::all_gather(self, s, r, count, dtype, q).map_err(call_error)
    }
    fn reduce_scatter(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError> {
        let (s, r, q) = convert::<C>(send, recv, queue)?;
        Collectives::reduce_scatter(self, s, r, count, dtype, op, q).map_err(call_error)
    }
    fn broadcast(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        root: Rank,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError> {
        let (s, r, q) = convert::<C>(send, recv, queue)?;
        Collectives::broadcast(self, s, r, count, dtype, root, q).map_err(call_error)
    }
    fn reduce(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        root: Rank,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError> {
        let (s, r, q) = convert::<C>(send, recv, queue)?;
        Collectives::reduce(self, s, r, count, dtype, op, root, q).map_err(call_error)
    }
    fn all_to_all(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError> {
        let (s, r, q) = convert::<C>(send, recv, queue)?;
        Collectives::all_to_all(self, s, r, count, dtype, q).map_err(call_error)
    }
}

/// A communicator chosen at run time is a [`Collectives`] again: generic code runs on
/// it with [`DynSend`]/[`DynRecv`] buffers and a [`DynQueue`].
impl<'c> Collectives for Box<dyn DynCollectives + 'c> {
    type Send<'a> = DynSend<'a>;
    type Recv<'a> = DynRecv<'a>;
    type Queue<'q> = DynQueue<'q>;
    type Error = DynError;

    fn rank(&self) -> Rank {
        (**self).rank()
    }
    fn size(&self) -> u32 {
        (**self).size()
    }
    fn all_reduce(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError> {
        (**self).all_reduce(send, recv, count, dtype, op, queue)
    }
    fn all_gather(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError> {
        (**self).all_gather(send, recv, count, dtype, queue)
    }
    fn reduce_scatter(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError> {
        (**self).reduce_scatter(send, recv, count, dtype, op, queue)
    }
    fn broadcast(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        root: Rank,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError> {
        (**self).broadcast(send, recv, count, dtype, root, queue)
    }
    fn reduce(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        root: Rank,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError> {
        (**self).reduce(send, recv, count, dtype, op, root, queue)
    }
    fn all_to_all(
        &mut self,
        send: DynSend<'_>,
        recv: DynRecv<'_>,
        count: u64,
        dtype: DataType,
        queue: DynQueue<'_>,
    ) -> Result<(), DynError> {
        (**self).all_to_all(send, recv, count, dtype, queue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for a GPU communicator: device addresses, a stream-like queue; it
    /// records the calls it gets.
    #[derive(Debug, Default)]
    struct Recorder {
        calls: Vec<(&'static str, u64, u64, u64, u32)>,
    }

    #[derive(Debug)]
    struct FakeStream(u32);

    #[derive(Debug, thiserror::Error)]
    #[error("recorder refuses a count of 0")]
    struct Refused;

    impl Recorder {
        fn record(
            &mut self,
            name: &'static str,
            s: u64,
            r: u64,
            count: u64,
            q: &FakeStream,
        ) -> Result<(), Refused> {
            if count == 0 {
                return Err(Refused);
            }
            self.calls.push((name, s, r, count, q.0));
            Ok(())
        }
    }

    impl Collectives for Recorder {
        type Send<'a> = u64;
        type Recv<'a> = u64;
        type Queue<'q> = &'q FakeStream;
        type Error = Refused;
        fn rank(&self) -> Rank {
            1
        }
        fn size(&self) -> u32 {
            4
        }
        fn all_reduce(
            &mut self,
            s: u64,
            r: u64,
            c: u64,
            _: DataType,
            _: RedOp,
            q: &FakeStream,
        ) -> Result<(), Refused> {
            self.record("all_reduce", s, r, c, q)
        }
        fn all_gather(
            &mut self,
            s: u64,
            r: u64,
            c: u64,
            _: DataType,
            q: &FakeStream,
        ) -> Result<(), Refused> {
            self.record("all_gather", s, r, c, q)
        }
        fn reduce_scatter(
            &mut self,
            s: u64,
            r: u64,
            c: u64,
            _: DataType,
            _: RedOp,
            q: &FakeStream,
        ) -> Result<(), Refused> {
            self.record("reduce_scatter", s, r, c, q)
        }
        fn broadcast(
            &mut self,
            s: u64,
            r: u64,
            c: u64,
            _: DataType,
            _: Rank,
            q: &FakeStream,
        ) -> Result<(), Refused> {
            self.record("broadcast", s, r, c, q)
        }
        fn reduce(
            &mut self,
            s: u64,
            r: u64,
            c: u64,
            _: DataType,
            _: RedOp,
            _: Rank,
            q: &FakeStream,
        ) -> Result<(), Refused> {
            self.record("reduce", s, r, c, q)
        }
        fn all_to_all(
            &mut self,
            s: u64,
            r: u64,
            c: u64,
            _: DataType,
            q: &FakeStream,
        ) -> Result<(), Refused> {
            self.record("all_to_all", s, r, c, q)
        }
    }

    #[test]
    fn device_descriptors_and_the_queue_reach_the_communicator() {
        let stream = FakeStream(7);
        let mut rec = Recorder::default();
        let c: &mut dyn DynCollectives = &mut rec;
        assert_eq!((c.rank(), c.size(), c.memory()), (1, 4, Memory::Device));
        let q = DynQueue::of(&stream);
        let (s, r) = (DynSend::Device(0x1000), || DynRecv::Device(0x2000));
        let (f, op) = (DataType::F32, RedOp::Sum);
        c.all_reduce(s, r(), 8, f, op, q).unwrap();
        c.all_gather(s, r(), 8, f, q).unwrap();
        c.reduce_scatter(s, r(), 8, f, op, q).unwrap();
        c.broadcast(s, r(), 8, f, 0, q).unwrap();
        c.reduce(s, r(), 8, f, op, 2, q).unwrap();
        c.all_to_all(s, r(), 8, f, q).unwrap();
        let names: Vec<_> = rec.calls.iter().map(|c| c.0).collect();
        assert_eq!(
            names,
            [
                "all_reduce",
                "all_gather",
                "reduce_scatter",
                "broadcast",
                "reduce",
                "all_to_all"
            ]
        );
        assert!(
            rec.calls
                .iter()
                .all(|&(_, s, r, n, q)| (s, r, n, q) == (0x1000, 0x2000, 8, 7))
        );
    }

    #[test]
    fn wrong_descriptors_are_errors_before_the_call() {
        let stream = FakeStream(7);
        let mut rec = Recorder::default();
        let c: &mut dyn DynCollectives = &mut rec;
        let q = DynQueue::of(&stream);
        let host = [0u8; 16];
        let mut out = [0u8; 16];
        let (f, op) = (DataType::F32, RedOp::Sum);
        let e = c
            .all_reduce(host[..].into(), DynRecv::Device(8), 4, f, op, q)
            .unwrap_err();
        assert!(matches!(
            e,
            DynError::WrongMemory {
                what: "send buffer",
                given: Memory::Host,
                wants: Memory::Device
            }
        ));
        assert!(e.to_string().contains("takes device memory"), "{e}");
        let e = c
            .all_gather(DynSend::Device(8), (&mut out[..]).into(), 4, f, q)
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the receive buffer is host memory")
        );
        let e = c
            .all_to_all(
                DynSend::Device(8),
                DynRecv::Device(16),
                4,
                f,
                DynQueue::NONE,
            )
            .unwrap_err();
        assert!(e.to_string().contains("no queue"), "{e}");
        assert!(e.to_string().contains("FakeStream"), "{e}");
        let other = 5u32;
        let e = c
            .broadcast(
                DynSend::Device(8),
                DynRecv::Device(16),
                4,
                f,
                0,
                DynQueue::of(&other),
            )
            .unwrap_err();
        assert!(e.to_string().contains("a queue of type `u32`"), "{e}");
        assert!(rec.calls.is_empty(), "nothing reached the communicator");
        // the communicator's own error comes back as it is
        let c: &mut dyn DynCollectives = &mut rec;
        let e = c
            .reduce(DynSend::Device(8), DynRecv::Device(16), 0, f, op, 0, q)
            .unwrap_err();
        assert!(e.call_error().is_some_and(|e| e.is::<Refused>()), "{e:?}");
    }

    #[test]
    fn a_host_communicator_takes_no_queue() {
        let e = <() as FromDynQueue>::from_dyn(DynQueue::of(&FakeStream(1))).unwrap_err();
        assert!(e.to_string().contains("takes no queue"), "{e}");
        assert!(<() as FromDynQueue>::from_dyn(DynQueue::NONE).is_ok());
        let e = <SendBuf as FromDynSend>::from_dyn(DynSend::Device(64)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the send buffer is device memory (an address), but this communicator takes host memory"),
            "{e}"
        );
        assert_eq!(format!("{:?}", DynQueue::NONE), "DynQueue::NONE");
    }
}
