//! [`Comm`] as a [`Collectives`]: device addresses for buffers, a CUDA stream for the
//! queue; each call is [`Comm::launch_on`] (see `commhal_algorithms::comm::Collectives`
//! for the shape every communicator shares).

use commhal_algorithms::comm::Collectives;
use commhal_algorithms::{DataType, RedOp};
use commhal_cuda_rt::Stream;

use crate::comm::{CallBufs, Comm};
use crate::error::{CollError, Result};
use crate::kernels::ReduceOp;
use crate::types::{Collective, Dtype};

impl Dtype {
    /// The datatype of a host-side [`DataType`] (the inverse of [`Dtype::data_type`]).
    pub fn of(t: DataType) -> Dtype {
        Dtype::ALL
            .into_iter()
            .find(|d| d.data_type() == t)
            .unwrap_or(Dtype::Uint8)
    }
}

impl From<RedOp> for ReduceOp {
    fn from(op: RedOp) -> ReduceOp {
        match op {
            RedOp::Sum => ReduceOp::Sum,
            RedOp::Prod => ReduceOp::Prod,
            RedOp::Min => ReduceOp::Min,
            RedOp::Max => ReduceOp::Max,
            RedOp::Avg => ReduceOp::Avg,
        }
    }
}

impl Comm {
    #[allow(clippy::too_many_arguments)]
    fn queue(
        &self,
        coll: Collective,
        send: u64,
        recv: u64,
        count: u64,
        dtype: DataType,
        op: RedOp,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        let bufs = CallBufs { send, recv };
        self.launch_on(coll, Dtype::of(dtype), op.into(), count, root, bufs, stream)
            .map(|_| ())
    }
}

impl Collectives for Comm {
    type Send<'a> = u64;
    type Recv<'a> = u64;
    type Queue<'q> = &'q Stream;
    type Error = CollError;

    fn rank(&self) -> u32 {
        Comm::rank(self)
    }
    fn size(&self) -> u32 {
        Comm::size(self)
    }
    fn all_reduce(
        &mut self,
        send: u64,
        recv: u64,
        count: u64,
        dtype: DataType,
        op: RedOp,
        s: &Stream,
    ) -> Result<()> {
        self.queue(Collective::Allreduce, send, recv, count, dtype, op, 0, s)
    }
    fn all_gather(
        &mut self,
        send: u64,
        recv: u64,
        count: u64,
        dtype: DataType,
        s: &Stream,
    ) -> Result<()> {
        self.queue(
            Collective::Allgather,
            send,
            recv,
            count,
            dtype,
            RedOp::Sum,
            0,
            s,
        )
    }
    fn reduce_scatter(
        &mut self,
        send: u64,
        recv: u64,
        count: u64,
        dtype: DataType,
        op: RedOp,
        s: &Stream,
    ) -> Result<()> {
        self.queue(
            Collective::Reducescatter,
            send,
            recv,
            count,
            dtype,
            op,
            0,
            s,
        )
    }
    fn broadcast(
        &mut self,
        send: u64,
        recv: u64,
        count: u64,
        dtype: DataType,
        root: u32,
        s: &Stream,
    ) -> Result<()> {
        self.queue(
            Collective::Broadcast,
            send,
            recv,
            count,
            dtype,
            RedOp::Sum,
            root,
            s,
        )
    }
    fn reduce(
        &mut self,
        send: u64,
        recv: u64,
        count: u64,
        dtype: DataType,
        op: RedOp,
        root: u32,
        s: &Stream,
    ) -> Result<()> {
        self.queue(Collective::Reduce, send, recv, count, dtype, op, root, s)
    }
    fn all_to_all(
        &mut self,
        send: u64,
        recv: u64,
        count: u64,
        dtype: DataType,
        s: &Stream,
    ) -> Result<()> {
        self.queue(
            Collective::Alltoall,
            send,
            recv,
            count,
            dtype,
            RedOp::Sum,
            0,
            s,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_host_datatype_and_op_has_a_gpu_one() {
        for d in Dtype::ALL {
            assert_eq!(Dtype::of(d.data_type()), d);
        }
        for op in RedOp::ALL {
            assert_eq!(ReduceOp::from(op).name(), op.name());
        }
    }
}
