//! Code written once against `Collectives` runs on the host communicator (the GPU one,
//! `commhal_cuda_coll::Comm`, implements the same trait over device addresses and a
//! stream; its GPU tests run it on GPUs).

mod common;

use commhal_algorithms::comm::{Collectives, RecvBuf, SendBuf};
use commhal_algorithms::{DataType, RedOp};
use common::with_ranks;

/// Generic over the communicator: an all-reduce then an all-gather of its result.
fn sum_then_gather<C: Collectives>(
    c: &mut C,
    bufs: [(C::Send<'_>, C::Recv<'_>); 2],
    count: u64,
    queue: C::Queue<'_>,
) -> Result<(), C::Error> {
    let [(s0, r0), (s1, r1)] = bufs;
    c.all_reduce(s0, r0, count, DataType::F32, RedOp::Sum, queue)?;
    c.all_gather(s1, r1, count, DataType::F32, queue)
}

#[test]
fn host_communicator_through_the_trait() {
    with_ranks(4, 2, None, |comm| {
        let n = Collectives::size(comm) as usize;
        let me = Collectives::rank(comm) as f32;
        let x: Vec<u8> = [me + 1.0, 2.0 * me]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut sum = vec![0u8; 8];
        let mine: Vec<u8> = [me, -me].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut all = vec![0u8; 8 * n];
        sum_then_gather(
            comm,
            [
                (SendBuf::from(&x[..]), RecvBuf::from(&mut sum[..])),
                (SendBuf::from(&mine[..]), RecvBuf::from(&mut all[..])),
            ],
            2,
            (),
        )
        .expect("collectives through the trait");
        let f = |b: &[u8]| -> Vec<f32> {
            b.chunks(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        let total: f32 = (0..n).map(|r| r as f32 + 1.0).sum();
        let twice: f32 = (0..n).map(|r| 2.0 * r as f32).sum();
        assert_eq!(f(&sum), vec![total, twice]);
        let expect: Vec<f32> = (0..n).flat_map(|r| [r as f32, -(r as f32)]).collect();
        assert_eq!(f(&all), expect);
    });
}
