//! Code written once against `Collectives` runs on the host communicator (the GPU one,
//! `commhal_cuda_coll::Comm`, implements the same trait over device addresses and a
//! stream; its GPU tests run it on GPUs), and on a communicator chosen at run time
//! through the object-safe mirror, `DynCollectives`.

mod common;

use std::time::Duration;

use commhal_algorithms::comm::{
    Collectives, DynCollectives, DynError, DynQueue, DynRecv, DynSend, Memory, RecvBuf, SendBuf,
};
use commhal_algorithms::{DataType, RedOp};
use commhal_hal::bootstrap::InProcBootstrap;
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

/// A communicator by name, as a program would pick one from a flag: `host` (every rank
/// on one node) or `host-nodes` (two ranks per virtual node, so traffic between nodes
/// goes over port channels). The GPU communicator is picked the same way where
/// `commhal-cuda-coll` is linked (its GPU tests box a `Comm`).
fn open(kind: &str, boot: InProcBootstrap) -> Result<Box<dyn DynCollectives>, String> {
    match kind {
        "host" => Ok(Box::new(common::communicator(boot, 4, None))),
        "host-nodes" => Ok(Box::new(common::communicator(boot, 2, None))),
        other => Err(format!("no communicator `{other}` here")),
    }
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Written against the trait object only: buffers of whatever memory the chosen
/// communicator takes (host here), a broadcast from the last rank.
fn broadcast_from_last(c: &mut dyn DynCollectives) -> Result<Vec<f32>, DynError> {
    let (me, n) = (c.rank(), c.size());
    let mine = bytes(&[me as f32, 10.0 + me as f32]);
    let mut got = vec![0u8; 8];
    match c.memory() {
        Memory::Host => c.broadcast(
            mine[..].into(),
            (&mut got[..]).into(),
            2,
            DataType::F32,
            n - 1,
            DynQueue::NONE,
        )?,
        Memory::Device => unreachable!("only host communicators are opened here"),
    }
    Ok(floats(&got))
}

#[test]
fn communicator_chosen_at_run_time() {
    assert!(open("nccl", InProcBootstrap::create(1).pop().unwrap()).is_err());
    for kind in ["host", "host-nodes"] {
        let boots = InProcBootstrap::create_with_timeout(4, Duration::from_secs(20));
        std::thread::scope(|s| {
            let hs: Vec<_> = boots
                .into_iter()
                .map(|b| {
                    s.spawn(move || {
                        let mut comm = open(kind, b).expect("open");
                        assert_eq!(comm.memory(), Memory::Host);
                        let (n, me) = (comm.size() as usize, comm.rank() as f32);
                        // the generic code of the first test, on the boxed trait object
                        let x = bytes(&[me + 1.0, 2.0 * me]);
                        let mine = bytes(&[me, -me]);
                        let (mut sum, mut all) = (vec![0u8; 8], vec![0u8; 8 * n]);
                        sum_then_gather(
                            &mut comm,
                            [
                                (DynSend::from(&x[..]), DynRecv::from(&mut sum[..])),
                                (DynSend::from(&mine[..]), DynRecv::from(&mut all[..])),
                            ],
                            2,
                            DynQueue::NONE,
                        )
                        .expect("collectives through the trait object");
                        let total: f32 = (0..n).map(|r| r as f32 + 1.0).sum();
                        let twice: f32 = (0..n).map(|r| 2.0 * r as f32).sum();
                        assert_eq!(floats(&sum), vec![total, twice], "{kind}");
                        let expect: Vec<f32> =
                            (0..n).flat_map(|r| [r as f32, -(r as f32)]).collect();
                        assert_eq!(floats(&all), expect, "{kind}");

                        // a device address, or a queue, handed to the host communicator:
                        // an error on every rank before any traffic, not a panic
                        let e = comm
                            .all_reduce(
                                DynSend::Device(0x7000_0000),
                                (&mut sum[..]).into(),
                                2,
                                DataType::F32,
                                RedOp::Sum,
                                DynQueue::NONE,
                            )
                            .unwrap_err();
                        assert!(
                            matches!(
                                e,
                                DynError::WrongMemory {
                                    given: Memory::Device,
                                    wants: Memory::Host,
                                    ..
                                }
                            ),
                            "{e:?}"
                        );
                        assert!(e.to_string().contains("takes host memory"), "{e}");
                        let stream = 0u64;
                        let e = comm
                            .all_gather(
                                mine[..].into(),
                                (&mut all[..]).into(),
                                2,
                                DataType::F32,
                                DynQueue::of(&stream),
                            )
                            .unwrap_err();
                        assert!(e.to_string().contains("takes no queue"), "{e}");
                        // ...and the communicator goes on
                        let got = broadcast_from_last(comm.as_mut()).expect("broadcast");
                        assert_eq!(got, vec![(n - 1) as f32, 10.0 + (n - 1) as f32]);
                        // the communicator's own errors come back as `DynError::Call`
                        let e = comm
                            .all_reduce(
                                x[..].into(),
                                (&mut sum[..4]).into(),
                                2,
                                DataType::F32,
                                RedOp::Sum,
                                DynQueue::NONE,
                            )
                            .unwrap_err();
                        assert!(
                            e.call_error()
                                .is_some_and(|c| c.is::<commhal_algorithms::comm::CommError>()),
                            "{e:?}"
                        );
                    })
                })
                .collect();
            for h in hs {
                if let Err(p) = h.join() {
                    std::panic::resume_unwind(p);
                }
            }
        });
    }
}
