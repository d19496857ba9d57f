//! [`Collectives`]: the one shape of every commhal communicator, whatever memory it
//! works on. The host [`Communicator`] takes host slices and runs each call to the end;
//! the GPU communicator (`commhal_cuda_coll::Comm`) takes device addresses and queues
//! each call on a CUDA stream. Code written against the trait runs on either, chosen by
//! where the data lives. For a communicator chosen at run time, its object-safe mirror
//! is [`super::DynCollectives`].
//!
//! Counts are NCCL's: all-reduce, broadcast and reduce count the buffer's elements;
//! all-gather and reduce-scatter the elements per rank; all-to-all the elements per
//! peer. Every rank calls the same collectives with the same count, datatype, op and
//! root, in the same order. In place: the GPU communicator follows NCCL's pointer
//! layouts; the host one has `*_in_place` methods of its own (a slice cannot be both
//! send and receive buffer).

use crate::comm::{CommError, Communicator, RecvBuf, SendBuf};
use crate::dtype::{DataType, RedOp};
use commhal_hal::Rank;

/// The collectives of a communicator (see the module docs).
pub trait Collectives {
    /// An input buffer: a host slice, or a device address.
    type Send<'a>;
    /// An output buffer.
    type Recv<'a>;
    /// Where a call is queued: `()` for a host communicator (calls complete before
    /// they return), a CUDA stream for a GPU one (calls are queued; wait on the stream).
    type Queue<'q>: Copy;
    /// What a call fails with.
    type Error: std::error::Error + Send + Sync + 'static;

    /// This rank.
    fn rank(&self) -> Rank;
    /// Ranks.
    fn size(&self) -> u32;

    /// `op` of every rank's `count` elements, on every rank.
    fn all_reduce(
        &mut self,
        send: Self::Send<'_>,
        recv: Self::Recv<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        queue: Self::Queue<'_>,
    ) -> Result<(), Self::Error>;

    /// Every rank's `count` elements, concatenated in rank order (`recv`: n × count).
    fn all_gather(
        &mut self,
        send: Self::Send<'_>,
        recv: Self::Recv<'_>,
        count: u64,
        dtype: DataType,
        queue: Self::Queue<'_>,
    ) -> Result<(), Self::Error>;

    /// Rank r gets chunk r (`count` elements) of the reduction of every rank's
    /// n × `count` elements.
    fn reduce_scatter(
        &mut self,
        send: Self::Send<'_>,
        recv: Self::Recv<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        queue: Self::Queue<'_>,
    ) -> Result<(), Self::Error>;

    /// `root`'s `count` elements on every rank.
    #[allow(clippy::too_many_arguments)]
    fn broadcast(
        &mut self,
        send: Self::Send<'_>,
        recv: Self::Recv<'_>,
        count: u64,
        dtype: DataType,
        root: Rank,
        queue: Self::Queue<'_>,
    ) -> Result<(), Self::Error>;

    /// `op` of every rank's `count` elements, on `root`.
    #[allow(clippy::too_many_arguments)]
    fn reduce(
        &mut self,
        send: Self::Send<'_>,
        recv: Self::Recv<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        root: Rank,
        queue: Self::Queue<'_>,
    ) -> Result<(), Self::Error>;

    /// Rank r's output chunk p (`count` elements) is rank p's input chunk r.
    fn all_to_all(
        &mut self,
        send: Self::Send<'_>,
        recv: Self::Recv<'_>,
        count: u64,
        dtype: DataType,
        queue: Self::Queue<'_>,
    ) -> Result<(), Self::Error>;
}

impl Collectives for Communicator {
    type Send<'a> = SendBuf<'a>;
    type Recv<'a> = RecvBuf<'a>;
    type Queue<'q> = ();
    type Error = CommError;

    fn rank(&self) -> Rank {
        Communicator::rank(self)
    }
    fn size(&self) -> u32 {
        Communicator::size(self)
    }
    fn all_reduce(
        &mut self,
        send: SendBuf<'_>,
        recv: RecvBuf<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        (): (),
    ) -> Result<(), CommError> {
        Communicator::all_reduce(self, send, recv, count, dtype, op)
    }
    fn all_gather(
        &mut self,
        send: SendBuf<'_>,
        recv: RecvBuf<'_>,
        count: u64,
        dtype: DataType,
        (): (),
    ) -> Result<(), CommError> {
        Communicator::all_gather(self, send, recv, count, dtype)
    }
    fn reduce_scatter(
        &mut self,
        send: SendBuf<'_>,
        recv: RecvBuf<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        (): (),
    ) -> Result<(), CommError> {
        Communicator::reduce_scatter(self, send, recv, count, dtype, op)
    }
    fn broadcast(
        &mut self,
        send: SendBuf<'_>,
        recv: RecvBuf<'_>,
        count: u64,
        dtype: DataType,
        root: Rank,
        (): (),
    ) -> Result<(), CommError> {
        Communicator::broadcast(self, send, recv, count, dtype, root)
    }
    fn reduce(
        &mut self,
        send: SendBuf<'_>,
        recv: RecvBuf<'_>,
        count: u64,
        dtype: DataType,
        op: RedOp,
        root: Rank,
        (): (),
    ) -> Result<(), CommError> {
        Communicator::reduce(self, send, recv, count, dtype, op, root)
    }
    fn all_to_all(
        &mut self,
        send: SendBuf<'_>,
        recv: RecvBuf<'_>,
        count: u64,
        dtype: DataType,
        (): (),
    ) -> Result<(), CommError> {
        Communicator::all_to_all(self, send, recv, count, dtype)
    }
}
