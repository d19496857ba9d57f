//! Every bad-argument class returns a clear error (on every rank where ranks are
//! involved), and a failed collective leaves the communicator refusing further calls.

mod common;

use std::sync::Arc;
use std::time::Duration;

use commhal_algorithms::comm::{CommError, CommOptions, Communicator};
use commhal_algorithms::{DataType, RedOp};
use commhal_channels::WaitPolicy;
use commhal_hal::bootstrap::{Bootstrap, InProcBootstrap};
use common::with_ranks;

#[test]
fn local_argument_errors() {
    with_ranks(2, 2, None, |comm| {
        let mut out = vec![0u8; 16];
        let inp = vec![0u8; 16];
        // count × size overflows.
        let e = comm
            .all_reduce(&inp, &mut out, u64::MAX / 2, DataType::F32, RedOp::Sum)
            .unwrap_err();
        assert!(
            matches!(e, CommError::Invalid(ref m) if m.contains("overflows")),
            "{e}"
        );
        // count exceeds the buffer.
        let e = comm
            .all_reduce(&inp, &mut out, 5, DataType::F32, RedOp::Sum)
            .unwrap_err();
        assert!(
            matches!(e, CommError::Invalid(ref m) if m.contains("needs 20")),
            "{e}"
        );
        let e = comm
            .all_gather(&inp, &mut out, 4, DataType::F32)
            .unwrap_err();
        assert!(e.to_string().contains("receive buffer has 16 bytes"), "{e}");
        // root out of range.
        let e = comm
            .broadcast(&inp, &mut out, 1, DataType::F32, 2)
            .unwrap_err();
        assert!(e.to_string().contains("root 2"), "{e}");
        let e = comm
            .reduce(&inp, &mut out, 1, DataType::F32, RedOp::Max, 7)
            .unwrap_err();
        assert!(e.to_string().contains("root 7"), "{e}");
        // send/recv peers.
        let me = comm.rank();
        assert!(comm.send(me, &inp).is_err());
        assert!(comm.recv(5, &mut out).is_err());
        // The communicator still works after argument errors (nothing was sent).
        comm.all_reduce(&inp, &mut out, 4, DataType::F32, RedOp::Sum)
            .expect("usable after argument errors");
    });
}

#[test]
fn buffers_of_another_communicator_are_unregistered() {
    // Two communicators over two independent groups of threads; a buffer of one is
    // refused by the other (same rank).
    let boots_a = InProcBootstrap::create(1);
    let boots_b = InProcBootstrap::create(1);
    let mk = |b: InProcBootstrap| {
        let boot: Arc<dyn Bootstrap> = Arc::new(b);
        Communicator::new(
            boot,
            CommOptions {
                backends: Some(vec!["host-emu".into()]),
                ..Default::default()
            },
        )
        .unwrap()
    };
    let mut a = mk(boots_a.into_iter().next().unwrap());
    let mut b = mk(boots_b.into_iter().next().unwrap());
    let buf = a.alloc(64).unwrap();
    let mut out = vec![0u8; 64];
    let e = b
        .all_reduce(&buf, &mut out, 16, DataType::F32, RedOp::Sum)
        .unwrap_err();
    assert!(matches!(e, CommError::Unregistered(_)), "{e}");
    // And it is fine on its own communicator.
    a.all_reduce(&buf, &mut out, 16, DataType::F32, RedOp::Sum)
        .unwrap();
}

#[test]
fn mismatched_arguments_fail_on_every_rank_naming_the_rank() {
    for (what, n) in [
        ("count", 3u32),
        ("dtype", 3),
        ("op", 2),
        ("root", 4),
        ("collective", 2),
    ] {
        with_ranks(n, n, None, |comm| {
            let r = comm.rank();
            let odd = r == n - 1;
            let inp = vec![0u8; 4096];
            let mut out = vec![0u8; 4096];
            let res = match what {
                "count" => comm.all_reduce(
                    &inp,
                    &mut out,
                    if odd { 12 } else { 10 },
                    DataType::F32,
                    RedOp::Sum,
                ),
                "dtype" => comm.all_reduce(
                    &inp,
                    &mut out,
                    8,
                    if odd { DataType::I32 } else { DataType::F32 },
                    RedOp::Sum,
                ),
                "op" => comm.all_reduce(
                    &inp,
                    &mut out,
                    8,
                    DataType::F32,
                    if odd { RedOp::Max } else { RedOp::Sum },
                ),
                "root" => comm.broadcast(&inp, &mut out, 8, DataType::F32, if odd { 1 } else { 0 }),
                _ => {
                    if odd {
                        comm.all_gather(&inp, &mut out, 8, DataType::F32)
                    } else {
                        comm.all_reduce(&inp, &mut out, 8, DataType::F32, RedOp::Sum)
                    }
                }
            };
            match res {
                Err(CommError::Mismatch { rank, detail }) => {
                    assert_eq!(rank, n - 1, "{what}: {detail}");
                    assert!(detail.contains(&format!("rank {}", n - 1)), "{detail}");
                }
                other => panic!("{what}: rank {r} expected a mismatch error, got {other:?}"),
            }
            // Agreeing calls still work afterwards.
            comm.all_reduce(&inp, &mut out, 8, DataType::F32, RedOp::Sum)
                .expect("usable after a detected mismatch");
        });
    }
}

#[test]
fn a_missing_rank_times_out_and_breaks_the_communicator() {
    let boots = InProcBootstrap::create_with_timeout(2, Duration::from_secs(5));
    std::thread::scope(|s| {
        let hs: Vec<_> = boots
            .into_iter()
            .map(|b| {
                s.spawn(move || {
                    let rank = b.rank();
                    let boot: Arc<dyn Bootstrap> = Arc::new(b);
                    let mut comm = Communicator::new(
                        boot,
                        CommOptions {
                            backends: Some(vec!["host-emu".into()]),
                            wait: Some(WaitPolicy {
                                spin_for: Duration::from_micros(2),
                                yield_for: Duration::ZERO,
                                timeout: Duration::from_millis(300),
                                ..WaitPolicy::for_host(1)
                            }),
                            ..Default::default()
                        },
                    )
                    .unwrap();
                    let inp = vec![0u8; 64];
                    let mut out = vec![0u8; 64];
                    // Agree on the signature once, together.
                    comm.all_reduce(&inp, &mut out, 16, DataType::F32, RedOp::Sum)
                        .unwrap();
                    comm.bootstrap().barrier().unwrap();
                    if rank == 0 {
                        // Rank 1 never joins this call: a bounded wait, then an error.
                        let e = comm
                            .all_reduce(&inp, &mut out, 16, DataType::F32, RedOp::Sum)
                            .unwrap_err();
                        assert!(e.to_string().contains("timed out"), "{e}");
                        let e = comm
                            .all_reduce(&inp, &mut out, 16, DataType::F32, RedOp::Sum)
                            .unwrap_err();
                        assert!(matches!(e, CommError::Broken(_)), "{e}");
                    }
                    comm.bootstrap().barrier().unwrap();
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
}
