//! MemoryChannel over host-emu, ranks as threads: message passing, get, packets,
//! errors; run both with the static transport and with `Arc<dyn DynMemoryMapped>`.

mod common;

use std::sync::Arc;

use commhal_backend_host_emu::HostEmu;
use commhal_channels::handles::error_code;
use commhal_channels::{LlFormat, MemoryChannel, MemoryDevice, MemorySemaphore, PacketEpoch};
use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::dynamic::DynMemoryMapped;
use commhal_hal::{Device, HalError, MemoryMapped, Region};
use common::{pattern, ranks, short};

const BUF: u64 = (1 << 20) + 64;

fn connect<M: MemoryMapped>(t: &M, b: &dyn Bootstrap, len: u64) -> MemoryChannel<M> {
    let peer = 1 - b.rank();
    let local = t.alloc(Device::HOST, len).unwrap();
    MemoryChannel::connect(t, b, peer, 100, local).unwrap()
}

/// put(n bytes of round-dependent data) + signal; the peer waits and checks every
/// byte (scanning from the end), then acknowledges with a signal.
fn message_passing<M: MemoryMapped>(make: impl Fn() -> M + Sync) {
    let sizes = [1u64, 7, 16, 4099, 1 << 20];
    let (dst_off, src_off) = (3u64, 5u64);
    ranks(2, |r, b| {
        let t = make();
        let ch = connect(&t, b, BUF);
        for (round, &n) in sizes.iter().cycle().take(15).enumerate() {
            let data = pattern(round as u64, n as usize);
            if r == 0 {
                ch.write_local(src_off, &data).unwrap();
                if round % 2 == 0 {
                    ch.put(dst_off, src_off, n).unwrap();
                    ch.signal().unwrap();
                } else {
                    // Four cooperating "device threads" copy their shares, join (the
                    // block barrier), then one signals.
                    let dev = ch.device().unwrap();
                    std::thread::scope(|s| {
                        for tid in 0..4 {
                            s.spawn(move || dev.put(dst_off, src_off, n, tid, 4).unwrap());
                        }
                    });
                    dev.signal().unwrap();
                }
                ch.wait().unwrap(); // ack: the peer has checked, the buffer is reusable
            } else {
                ch.wait().unwrap();
                let mut got = vec![0u8; n as usize];
                ch.read_local(dst_off, &mut got).unwrap();
                for i in (0..n as usize).rev() {
                    assert_eq!(got[i], data[i], "round {round}, size {n}, byte {i}");
                }
                ch.signal().unwrap();
            }
        }
        assert!(!ch.poll().unwrap(), "no signal left over");
    });
}

#[test]
fn message_passing_static_transport() {
    message_passing(HostEmu::new);
}

#[test]
fn message_passing_dyn_transport() {
    message_passing(|| Arc::new(HostEmu::new()) as Arc<dyn DynMemoryMapped>);
}

#[test]
fn get_after_signal_sees_new_data() {
    ranks(2, |r, b| {
        let t = HostEmu::new();
        let ch = connect(&t, b, 8192);
        for round in 0..5u64 {
            let data = pattern(round, 4099);
            if r == 1 {
                ch.write_local(11, &data).unwrap();
                ch.signal().unwrap();
                ch.wait().unwrap();
            } else {
                ch.wait().unwrap();
                ch.get(1, 11, 4099).unwrap();
                let mut got = vec![0u8; 4099];
                ch.read_local(1, &mut got).unwrap();
                assert_eq!(got, data, "round {round}");
                ch.signal().unwrap();
            }
        }
    });
}

/// LL packets ping-pong with a double-buffered scratch, crossing the flag wrap:
/// rank 0 sends, rank 1 unpacks and echoes back, rank 0 checks the echo.
fn packets(fmt: LlFormat) {
    let n = 1000u64; // payload bytes (not a multiple of 8: the last packet is padded)
    let half = fmt.scratch_bytes(n).next_multiple_of(16);
    let (data_off, echo_off, scratch_off) = (0u64, 2048u64, 4096u64);
    ranks(2, |r, b| {
        let t = HostEmu::new();
        let ch = connect(&t, b, scratch_off + 2 * half);
        let mut epoch = PacketEpoch::starting_at(u32::MAX as u64 - 3);
        for _ in 0..8 {
            let data = pattern(epoch.round(), n as usize);
            let pkt = scratch_off + epoch.offset(half);
            let flag = epoch.flag();
            if r == 0 {
                ch.write_local(data_off, &data).unwrap();
                ch.put_packets(fmt, pkt, data_off, n, flag).unwrap();
                let mut echo = vec![0u8; n as usize];
                ch.read_packets(fmt, pkt, &mut echo, flag).unwrap();
                assert_eq!(echo, data, "{fmt:?} echo, flag {flag}");
            } else {
                // Two cooperating threads unpack their shares.
                let dev = ch.device().unwrap();
                std::thread::scope(|s| {
                    for tid in 0..2 {
                        s.spawn(move || {
                            dev.unpack_packets(fmt, echo_off, pkt, n, flag, tid, 2)
                                .unwrap()
                        });
                    }
                });
                let mut got = vec![0u8; n as usize];
                ch.read_local(echo_off, &mut got).unwrap();
                assert_eq!(got, data, "{fmt:?} unpack, flag {flag}");
                ch.put_packets(fmt, pkt, echo_off, n, flag).unwrap();
            }
            epoch.advance();
        }
    });
}

#[test]
fn ll8_round_trips_across_flag_wrap() {
    packets(LlFormat::Ll8);
}

#[test]
fn ll16_round_trips_across_flag_wrap() {
    packets(LlFormat::Ll16);
}

#[test]
fn stale_packets_are_not_read_and_time_out_with_error_flag() {
    ranks(2, |r, b| {
        let t = HostEmu::new();
        let mut ch = connect(&t, b, 4096);
        ch.set_policy(short());
        if r == 0 {
            ch.write_local(0, &[9; 16]).unwrap();
            ch.put_packets(LlFormat::Ll8, 1024, 0, 16, 5).unwrap();
            ch.signal().unwrap();
        } else {
            ch.wait().unwrap();
            let mut out = [0u8; 16];
            ch.read_packets(LlFormat::Ll8, 1024, &mut out, 5).unwrap();
            assert_eq!(out, [9; 16]);
            // Flag 6 was never written: timeout, error flag set.
            let e = ch
                .read_packets(LlFormat::Ll8, 1024, &mut out, 6)
                .unwrap_err();
            assert!(matches!(e, HalError::Timeout { .. }), "{e}");
            assert_eq!(
                ch.device_error().map(|e| e.0),
                Some(error_code::PACKET_TIMEOUT)
            );
        }
    });
}

#[test]
fn signal_counting_timeout_leaves_semaphore_usable() {
    ranks(2, |r, b| {
        let t = HostEmu::new();
        let mut ch = connect(&t, b, 64);
        if r == 1 {
            ch.set_policy(short());
        }
        if r == 0 {
            // k signals from several threads at once.
            let dev = ch.device().unwrap();
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(move || (0..25).for_each(|_| dev.signal().unwrap()));
                }
            });
            ch.wait().unwrap(); // peer done counting
            ch.signal().unwrap();
        } else {
            for _ in 0..100 {
                ch.wait().unwrap();
            }
            assert!(!ch.poll().unwrap(), "exactly 100 signals");
            let e = ch.wait().unwrap_err();
            assert!(matches!(e, HalError::Timeout { .. }), "{e}");
            assert_eq!(
                ch.device_error().map(|e| e.0),
                Some(error_code::WAIT_TIMEOUT)
            );
            ch.signal().unwrap();
            ch.wait().unwrap(); // still counts correctly after the timeout
            assert!(!ch.poll().unwrap());
        }
    });
}

#[test]
fn bad_input_is_rejected_with_errors() {
    ranks(2, |_r, b| {
        let t = HostEmu::new();
        let ch = connect(&t, b, 256);
        let e = ch.put(250, 0, 7).unwrap_err();
        assert!(matches!(e, HalError::OutOfRange { .. }), "{e}");
        let e = ch.get(0, u64::MAX, 2).unwrap_err();
        assert!(matches!(e, HalError::OutOfRange { .. }), "{e}");
        // Zero bytes: a no-op even at the very end of the buffer.
        ch.put(256, 256, 0).unwrap();
        // Packets: misaligned scratch and flag 0.
        let e = ch.put_packets(LlFormat::Ll16, 8, 0, 8, 1).unwrap_err();
        assert!(matches!(e, HalError::Unaligned { .. }), "{e}");
        assert!(ch.put_packets(LlFormat::Ll8, 0, 0, 8, 0).is_err());
        // Cooperative call with a bad thread index.
        assert!(ch.device().unwrap().put(0, 0, 8, 4, 4).is_err());
        // Unaligned semaphore counters.
        let r: Arc<dyn Region> = Arc::new(MemoryMapped::alloc(&t, Device::HOST, 64).unwrap());
        let e = MemorySemaphore::new(r.clone(), 3, r.clone(), 0).unwrap_err();
        assert!(matches!(e, HalError::Unaligned { .. }), "{e}");
        let e = MemorySemaphore::new(r.clone(), 0, r.clone(), 60).unwrap_err();
        assert!(matches!(e, HalError::OutOfRange { .. }), "{e}");
        b.barrier().unwrap();
    });
}

#[test]
fn bare_handle_executor_matches_channel() {
    ranks(2, |r, b| {
        let t = HostEmu::new();
        let ch = connect(&t, b, 4096);
        let mut h = ch.device_handle();
        assert_eq!(h.local_buf, ch.local().addr());
        assert_eq!(h.expected, 0);
        let len = ch.local().len();
        // SAFETY: `h` comes from `ch`, which outlives `dev`; lengths are the buffers'.
        let dev = unsafe { MemoryDevice::from_handle(&mut h, len, len, short()) }.unwrap();
        if r == 0 {
            dev.write_local(0, &[1, 2, 3]).unwrap();
            dev.put_with_signal(100, 0, 3).unwrap();
        } else {
            dev.wait().unwrap();
            let mut got = [0u8; 3];
            dev.read_local(100, &mut got).unwrap();
            assert_eq!(got, [1, 2, 3]);
        }
        let _ = dev;
        if r == 1 {
            assert_eq!(h.expected, 1, "the handle's expected advanced");
        }
        b.barrier().unwrap();
    });
}
