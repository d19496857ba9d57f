//! GPU tests: one rank (the degenerate copy path of every kernel: all-reduce,
//! all-gather, reduce-scatter, broadcast, reduce, all-to-all, send/recv) through the
//! real driver. Without a GPU each test prints SKIPPED and checks nothing; with
//! `COMMHAL_REQUIRE_GPU=1` a missing GPU (or NVRTC) fails instead. Multi-GPU runs are
//! covered by `scripts/gpu-bench.sh` (checks every size on every rank).

use std::time::Duration;

use commhal_cuda_coll::Comm;
use commhal_cuda_coll::kernels::ReduceOp;
use commhal_cuda_rt::copy;
use commhal_gpu_bench::check;
use commhal_gpu_bench::cli::{Collective, Dtype};
use commhal_hal::bootstrap::InProcBootstrap;

fn gpu_or_skip(test: &str) -> bool {
    let require = commhal_hal::settings::tests::REQUIRE_GPU
        .flag()
        .unwrap_or_else(|e| panic!("{e}"));
    let ok = commhal_cuda_rt::probe().is_available() && commhal_cuda_rt::nvrtc_available();
    if !ok {
        assert!(!require, "{test}: COMMHAL_REQUIRE_GPU=1 but no GPU/NVRTC");
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: no GPU or NVRTC");
    }
    ok
}

#[test]
fn one_rank_collectives_copy_exactly() {
    if !gpu_or_skip("one_rank_collectives_copy_exactly") {
        return;
    }
    let boot = InProcBootstrap::create(1).pop().expect("bootstrap");
    let comm = Comm::new(&boot, 0, 4 << 20, None, Duration::from_secs(5)).expect("comm");
    for dtype in [Dtype::Half, Dtype::Bfloat16, Dtype::Float] {
        let cap = comm.capacity() / dtype.size();
        comm.write_input(0, &check::input_bytes(dtype, ReduceOp::Sum, 0, cap))
            .expect("input");
        for coll in Collective::ALL {
            // LL (small), two-shot (large), an uneven count
            for bytes in [1024u64, 1 << 20, 1000 * dtype.size() + 2] {
                let (count, per) = commhal_gpu_bench::cli::counts(coll, bytes, dtype, 1);
                let len = count * dtype.size();
                // SAFETY: within the output allocation (capacity 4 MiB).
                unsafe { copy::memset_async(comm.stream(), comm.output_addr(), 0xff, len) }
                    .expect("poison");
                let c = if coll.count_is_per_rank() { per } else { count };
                comm.launch_rooted(coll, dtype, ReduceOp::Sum, c, 0, false)
                    .expect("launch");
                comm.sync("test").expect("sync");
                let mut out = vec![0u8; len as usize];
                // SAFETY: within the output allocation.
                unsafe { copy::read(comm.context(), comm.output_addr(), &mut out) }.expect("read");
                assert_eq!(
                    check::count_wrong(coll, dtype, ReduceOp::Sum, 0, 1, 0, count, per, &out),
                    0,
                    "{coll:?} {dtype:?} {bytes} B"
                );
            }
        }
    }
}

/// Argument errors of the new collectives come back as errors, not launches.
#[test]
fn rooted_and_out_of_place_only_collectives_reject_bad_arguments() {
    if !gpu_or_skip("rooted_and_out_of_place_only_collectives_reject_bad_arguments") {
        return;
    }
    let boot = InProcBootstrap::create(1).pop().expect("bootstrap");
    let comm = Comm::new(&boot, 0, 1 << 20, None, Duration::from_secs(5)).expect("comm");
    for coll in [Collective::Broadcast, Collective::Reduce] {
        let e = comm.launch_rooted(coll, Dtype::Half, ReduceOp::Sum, 512, 1, false);
        assert!(e.is_err(), "{coll:?} root 1 of 1 rank must fail");
    }
    for coll in [Collective::Alltoall, Collective::Sendrecv] {
        let e = comm.launch_rooted(coll, Dtype::Half, ReduceOp::Sum, 512, 0, true);
        assert!(e.is_err(), "{coll:?} in place must fail");
    }
    let too_big = comm.capacity() / 2 + 1;
    assert!(
        comm.launch_rooted(
            Collective::Broadcast,
            Dtype::Half,
            ReduceOp::Sum,
            too_big,
            0,
            false
        )
        .is_err()
    );
    comm.sync("nothing queued").expect("sync");
}

/// The caller's buffers and stream: every collective on cuMemAlloc'd buffers, aligned
/// (direct / mapped) and 2 bytes off (staged), out of place and in place, checked
/// exactly; then the bad inputs of the GPU communicator, each a clear error.
#[test]
fn caller_buffers_and_bad_input() {
    use commhal_cuda_coll::CallBufs;
    use commhal_cuda_coll::kernels::ReduceOp;
    use commhal_cuda_rt::{DeviceBuffer, PinnedHostBuffer, Stream};
    if !gpu_or_skip("caller_buffers_and_bad_input") {
        return;
    }
    let boot = InProcBootstrap::create(1).pop().expect("bootstrap");
    let comm = Comm::new(&boot, 0, 4 << 20, None, Duration::from_secs(5)).expect("comm");
    let ctx = comm.context();
    let stream = Stream::new(ctx).expect("stream");
    let inp = DeviceBuffer::new(ctx, (4 << 20) + 16).expect("input");
    let out = DeviceBuffer::new(ctx, (4 << 20) + 16).expect("output");
    let dtype = Dtype::Float;
    let pattern = check::input_bytes(dtype, ReduceOp::Sum, 0, (4 << 20) / 4);
    for off in [0u64, 2] {
        inp.write(off, &pattern).expect("input");
        for coll in Collective::ALL {
            for bytes in [1024u64, 1 << 20, 1000 * dtype.size() + 4] {
                let (count, per) = commhal_gpu_bench::cli::counts(coll, bytes, dtype, 1);
                let len = count * dtype.size();
                let c = if coll.count_is_per_rank() { per } else { count };
                for in_place in [false, true] {
                    if in_place && !coll.in_place_supported() {
                        continue;
                    }
                    let (o, i) = (out.addr() + off, inp.addr() + off);
                    // SAFETY: within the output allocation.
                    unsafe { copy::memset_async(&stream, out.addr(), 0xff, len + off) }
                        .expect("poison");
                    if in_place {
                        // SAFETY: both within their allocations.
                        unsafe { copy::copy_async(&stream, o, i, len) }.expect("copy");
                    }
                    let b = if in_place {
                        CallBufs { send: o, recv: o }
                    } else {
                        CallBufs { send: i, recv: o }
                    };
                    let path = comm
                        .launch_on(coll, dtype, ReduceOp::Sum, c, 0, b, &stream)
                        .unwrap_or_else(|e| panic!("{coll:?} {bytes} B off {off}: {e}"));
                    comm.sync_stream(&stream, "test").expect("sync");
                    let mut host = vec![0u8; len as usize];
                    out.read(off, &mut host).expect("read");
                    assert_eq!(
                        check::count_wrong(coll, dtype, ReduceOp::Sum, 0, 1, 0, count, per, &host),
                        0,
                        "{coll:?} {bytes} B off {off} in place {in_place} ({path:?})"
                    );
                }
            }
        }
    }
    let ar = |send: u64, recv: u64, count: u64| {
        comm.launch_on(
            Collective::Allreduce,
            dtype,
            ReduceOp::Sum,
            count,
            0,
            CallBufs { send, recv },
            &stream,
        )
        .map(|_| ())
        .unwrap_err()
        .to_string()
    };
    let e = ar(0, out.addr(), 16);
    assert!(e.contains("send buffer is null"), "{e}");
    let e = ar(inp.addr(), out.addr(), (4 << 20) / 4 + 5);
    assert!(e.contains("bytes left in its allocation"), "{e}");
    let host = vec![0u8; 4096];
    let e = ar(host.as_ptr() as u64, out.addr(), 16);
    assert!(e.contains("is not device memory"), "{e}");
    let pinned = PinnedHostBuffer::new(ctx, 4096).expect("pinned");
    let e = ar(pinned.device_addr(), out.addr(), 16);
    assert!(e.contains("is not device memory"), "{e}");
    let freed = DeviceBuffer::new(ctx, 4096).expect("freed").addr();
    let e = ar(freed, out.addr(), 16);
    assert!(e.contains("not device memory"), "{e}");
    let e = ar(inp.addr(), inp.addr() + 8, 64);
    assert!(e.contains("overlap"), "{e}");
    // point-to-point to this rank itself: a local copy, matched in order
    use commhal_cuda_coll::P2pOp;
    let (src, dst) = (inp.addr(), out.addr() + 16);
    let ops = [
        P2pOp::Send {
            buf: src,
            count: 1000,
            dtype,
            peer: 0,
        },
        P2pOp::Recv {
            buf: dst,
            count: 1000,
            dtype,
            peer: 0,
        },
    ];
    comm.p2p(&ops, &stream).expect("p2p to self");
    comm.sync_stream(&stream, "p2p").expect("sync");
    let (mut a, mut b) = (vec![0u8; 4000], vec![0u8; 4000]);
    inp.read(0, &mut a).expect("read");
    out.read(16, &mut b).expect("read");
    assert_eq!(a, b, "p2p to self copies");
    let bad = [P2pOp::Send {
        buf: src,
        count: 4,
        dtype,
        peer: 1,
    }];
    let e = comm.p2p(&bad, &stream).unwrap_err().to_string();
    assert!(e.contains("peer 1 is not a rank"), "{e}");
    // registration: cuMemAlloc memory registers; host memory and short ranges do not
    let m = comm.mem_alloc(1 << 20).expect("mem_alloc");
    let r = comm.register(m.addr(), 1 << 20).expect("register");
    assert_eq!((r.ptr, r.len), (m.addr(), 1 << 20));
    assert!(comm.register(host.as_ptr() as u64, 16).is_err());
    let e = comm
        .register(m.addr(), (1 << 20) + 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("bytes left in its allocation"), "{e}");
    // cuMem VMM memory in pieces (as PyTorch's expandable segments): registers, and
    // is found piece by piece; a range running past the mapped pieces is refused
    let ctx = comm.context();
    let v =
        commhal_cuda_rt::pieces::PieceMapping::create(ctx, 8 << 20, 2 << 20).expect("VMM pieces");
    let r = comm
        .register(v.addr() + 4096, (6 << 20) - 4096)
        .expect("register VMM");
    assert_eq!(r.ptr, v.addr() + 4096);
    let p = commhal_cuda_rt::pieces::pieces_of(ctx, v.addr() + 4096, 6 << 20)
        .expect("pieces")
        .expect("exportable VMM pieces");
    assert_eq!(p.len(), 4);
    assert!(p.windows(2).all(|w| w[0].base + w[0].size == w[1].base));
    assert!(
        comm.peers_can_map(v.addr(), 8 << 20)
            .expect("peers_can_map")
    );
    assert!(comm.register(v.addr(), (8 << 20) + 1).is_err());
    comm.sync_stream(&stream, "nothing queued").expect("sync");
}

/// The GPU communicator through the `Collectives` trait the host one shares: device
/// addresses and a stream, on one rank (a copy).
#[test]
fn collectives_trait_on_one_gpu() {
    use commhal_algorithms::comm::Collectives;
    use commhal_algorithms::{DataType, RedOp};
    use commhal_cuda_rt::{DeviceBuffer, Stream};
    if !gpu_or_skip("collectives_trait_on_one_gpu") {
        return;
    }
    let boot = InProcBootstrap::create(1).pop().expect("bootstrap");
    let mut comm = Comm::new(&boot, 0, 1 << 20, None, Duration::from_secs(5)).expect("comm");
    let ctx = comm.context().clone();
    let stream = Stream::new(&ctx).expect("stream");
    let send = DeviceBuffer::new(&ctx, 4096).expect("send");
    let recv = DeviceBuffer::new(&ctx, 4096).expect("recv");
    let data: Vec<u8> = (0..1024u32)
        .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
        .collect();
    send.write(0, &data).expect("write");
    Collectives::all_reduce(
        &mut comm,
        send.addr(),
        recv.addr(),
        1024,
        DataType::F32,
        RedOp::Sum,
        &stream,
    )
    .expect("all-reduce through the trait");
    comm.sync_stream(&stream, "all-reduce").expect("sync");
    let mut got = vec![0u8; 4096];
    recv.read(0, &mut got).expect("read");
    assert_eq!(got, data, "one rank: the all-reduce is a copy");
}

/// The GPU communicator chosen at run time, through the object-safe mirror
/// `DynCollectives` (as `Box<dyn DynCollectives>`): device descriptors and the stream
/// as a `DynQueue` on one rank (a copy); host slices, no queue or a queue of another
/// type are errors before anything is queued.
#[test]
fn dyn_collectives_on_one_gpu() {
    use commhal_algorithms::comm::{DynCollectives, DynError, DynQueue, DynRecv, DynSend, Memory};
    use commhal_algorithms::{DataType, RedOp};
    use commhal_cuda_rt::{DeviceBuffer, Stream};
    if !gpu_or_skip("dyn_collectives_on_one_gpu") {
        return;
    }
    let boot = InProcBootstrap::create(1).pop().expect("bootstrap");
    let comm = Comm::new(&boot, 0, 1 << 20, None, Duration::from_secs(5)).expect("comm");
    let ctx = comm.context().clone();
    let mut chosen: Box<dyn DynCollectives> = Box::new(comm);
    assert_eq!(chosen.memory(), Memory::Device);
    assert_eq!((chosen.rank(), chosen.size()), (0, 1));
    let stream = Stream::new(&ctx).expect("stream");
    let send = DeviceBuffer::new(&ctx, 4096).expect("send");
    let recv = DeviceBuffer::new(&ctx, 4096).expect("recv");
    let data: Vec<u8> = (0..1024u32)
        .flat_map(|i| (i as f32 * 0.25).to_le_bytes())
        .collect();
    send.write(0, &data).expect("write");
    chosen
        .all_reduce(
            DynSend::Device(send.addr()),
            DynRecv::Device(recv.addr()),
            1024,
            DataType::F32,
            RedOp::Sum,
            DynQueue::of(&stream),
        )
        .expect("all-reduce through the trait object");
    stream.synchronize().expect("sync");
    let mut got = vec![0u8; 4096];
    recv.read(0, &mut got).expect("read");
    assert_eq!(got, data, "one rank: the all-reduce is a copy");

    let host = vec![0u8; 4096];
    let e = chosen
        .all_gather(
            host[..].into(),
            DynRecv::Device(recv.addr()),
            1024,
            DataType::F32,
            DynQueue::of(&stream),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            DynError::WrongMemory {
                given: Memory::Host,
                wants: Memory::Device,
                ..
            }
        ),
        "{e:?}"
    );
    let e = chosen
        .broadcast(
            DynSend::Device(send.addr()),
            DynRecv::Device(recv.addr()),
            1024,
            DataType::F32,
            0,
            DynQueue::NONE,
        )
        .unwrap_err();
    assert!(e.to_string().contains("Stream"), "{e}");
    let e = chosen
        .reduce(
            DynSend::Device(send.addr()),
            DynRecv::Device(recv.addr()),
            1024,
            DataType::F32,
            RedOp::Sum,
            0,
            DynQueue::of(&ctx),
        )
        .unwrap_err();
    assert!(matches!(e, DynError::WrongQueue { .. }), "{e:?}");
    // the communicator's own errors: a null send buffer
    let e = chosen
        .all_reduce(
            DynSend::Device(0),
            DynRecv::Device(recv.addr()),
            16,
            DataType::F32,
            RedOp::Sum,
            DynQueue::of(&stream),
        )
        .unwrap_err();
    let call = e.call_error().expect("the communicator's error");
    assert!(call.is::<commhal_cuda_coll::CollError>(), "{e:?}");
    assert!(e.to_string().contains("send buffer is null"), "{e}");
}
