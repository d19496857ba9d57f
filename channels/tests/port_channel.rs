//! PortChannel through the proxy over host-emu, ranks as threads.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use commhal_backend_host_emu::HostEmu;
use commhal_channels::fifo::Trigger;
use commhal_channels::handles::error_code;
use commhal_channels::proxy::{ProxyBuilder, ProxyContext, TriggerHandler};
use commhal_channels::{PortDevice, WaitPolicy};
use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::{HalError, Result};
use common::{pattern, port_channel, ranks, short};

const DEPTH: u64 = 4;

/// 200 puts (50× the FIFO depth) then a put-with-signal: the peer sees every byte.
#[test]
fn more_triggers_than_fifo_depth_all_arrive() {
    ranks(2, |r, b| {
        let t = HostEmu::new();
        let mut builder = ProxyBuilder::<HostEmu>::new("host-emu", DEPTH).unwrap();
        let (ch, data) = port_channel(&t, b, &mut builder, r, 1 - r, 8192, 10);
        let _proxy = builder.start().unwrap();
        let expect = pattern(7, 4000);
        let dev = ch.device().unwrap();
        if r == 0 {
            write(&data, 0, &expect);
            for i in 0..200u64 {
                dev.put(i * 20 + 1, i * 20, 20).unwrap();
            }
            dev.put(0, 0, 0).unwrap(); // zero-size trigger: travels, copies nothing
            dev.put_with_signal(4001, 0, 1).unwrap();
            dev.wait().unwrap();
        } else {
            dev.wait().unwrap();
            let got = read(&data, 1, 4000);
            assert_eq!(got, expect);
            assert_eq!(read(&data, 4001, 1), expect[..1]);
            dev.signal().unwrap();
        }
        dev.flush().unwrap();
        assert!(ch.device_error().is_none());
    });
}

/// Several producer threads push at once through a depth-2 ring; flush from several
/// threads; put-with-signal-and-flush.
#[test]
fn concurrent_producers_and_flushes() {
    ranks(2, |r, b| {
        let t = HostEmu::new();
        let mut builder = ProxyBuilder::<HostEmu>::new("host-emu", 2).unwrap();
        let (ch, data) = port_channel(&t, b, &mut builder, r, 1 - r, 4096, 10);
        let _proxy = builder.start().unwrap();
        let dev = ch.device().unwrap();
        if r == 0 {
            write(&data, 0, &pattern(3, 1024));
            std::thread::scope(|s| {
                for tid in 0..4u64 {
                    s.spawn(move || {
                        for k in 0..64u64 {
                            let off = tid * 256 + k * 4;
                            dev.put(2048 + off, off, 4).unwrap();
                        }
                        dev.flush().unwrap();
                    });
                }
            });
            dev.put_with_signal_and_flush(0, 0, 0).unwrap();
        } else {
            dev.wait().unwrap();
            assert_eq!(read(&data, 2048, 1024), pattern(3, 1024));
        }
    });
}

/// Ping-pong both ways through the proxies.
#[test]
fn ping_pong() {
    ranks(2, |r, b| {
        let t = HostEmu::new();
        let mut builder = ProxyBuilder::<HostEmu>::new("host-emu", 8).unwrap();
        let (ch, _data) = port_channel(&t, b, &mut builder, r, 1 - r, 64, 10);
        let _proxy = builder.start().unwrap();
        for _ in 0..500 {
            if r == 0 {
                ch.signal().unwrap();
                ch.wait().unwrap();
            } else {
                ch.wait().unwrap();
                ch.signal().unwrap();
            }
        }
        assert!(!ch.poll().unwrap());
    });
}

/// A trigger naming memory the proxy does not have: the proxy stores the first error
/// and every later channel call returns it; a bounded wait never hangs.
#[test]
fn port_errors_are_stored_and_reported() {
    ranks(2, |r, b| {
        let t = HostEmu::new();
        let mut builder = ProxyBuilder::<HostEmu>::new("host-emu", 4).unwrap();
        let (mut ch, _data) = port_channel(&t, b, &mut builder, r, 1 - r, 64, 10);
        ch.set_policy(short());
        let proxy = builder.start().unwrap();
        if r == 0 {
            let bad = Trigger::put(0, 99, 0, 0, 0, 8);
            ch.push(&bad).unwrap();
            let e = ch.flush().unwrap_err();
            assert!(e.to_string().contains("99"), "{e}");
            assert!(ch.put(0, 0, 8).is_err());
            assert!(proxy.error().is_some());
            assert!(proxy.stop().is_err());
        } else {
            // Out of range on the host side: never pushed.
            let e = ch.put(60, 0, 8).unwrap_err();
            assert!(matches!(e, HalError::OutOfRange { .. }), "{e}");
            // Nobody signals us: a bounded wait fails and sets the device error flag.
            assert!(matches!(ch.wait().unwrap_err(), HalError::Timeout { .. }));
            assert_eq!(
                ch.device_error().map(|e| e.0),
                Some(error_code::WAIT_TIMEOUT)
            );
        }
        b.barrier().unwrap();
    });
}

#[test]
fn bad_fifo_depth_is_rejected() {
    for d in [0, 1, 3, 12] {
        let e = ProxyBuilder::<HostEmu>::new("host-emu", d).unwrap_err();
        assert!(e.to_string().contains("power of two"), "{e}");
    }
}

/// A custom trigger handler sees every trigger and can delegate to the default.
#[derive(Debug)]
struct Counting(Arc<AtomicU64>);

impl TriggerHandler<HostEmu> for Counting {
    fn handle(&mut self, t: &Trigger, ctx: &mut ProxyContext<HostEmu>) -> Result<()> {
        self.0.fetch_add(1, Ordering::Relaxed);
        ctx.perform(t)
    }
}

#[test]
fn custom_trigger_handler() {
    ranks(2, |r, b| {
        let t = HostEmu::new();
        let mut builder = ProxyBuilder::<HostEmu>::new("host-emu", 4).unwrap();
        let (ch, _data) = port_channel(&t, b, &mut builder, r, 1 - r, 64, 10);
        let count = Arc::new(AtomicU64::new(0));
        let proxy = builder.start_with(Counting(count.clone())).unwrap();
        ch.put_with_signal(0, 0, 8).unwrap();
        ch.wait().unwrap();
        ch.flush().unwrap();
        assert_eq!(count.load(Ordering::Relaxed), 2);
        proxy.stop().unwrap();
        // Stopped proxy: pushes fail at once.
        assert!(ch.signal().is_err());
    });
}

/// The bare-handle executor pushes into the same ring.
#[test]
fn bare_handle_executor() {
    ranks(2, |r, b| {
        let t = HostEmu::new();
        let mut builder = ProxyBuilder::<HostEmu>::new("host-emu", 4).unwrap();
        let (ch, data) = port_channel(&t, b, &mut builder, r, 1 - r, 64, 10);
        let _proxy = builder.start().unwrap();
        let mut h = ch.device_handle();
        assert_eq!(h.fifo_depth, 4);
        // SAFETY: `h` comes from `ch`, whose proxy and semaphore outlive `dev`.
        let dev =
            unsafe { PortDevice::from_handle(&mut h, 64, 64, WaitPolicy::default()) }.unwrap();
        write(&data, 0, &[r as u8 + 1; 8]);
        dev.put_with_signal(8, 0, 8).unwrap();
        dev.wait().unwrap();
        dev.flush().unwrap();
        assert_eq!(read(&data, 8, 8), vec![(1 - r) as u8 + 1; 8]);
        b.barrier().unwrap();
    });
}

fn write(r: &Arc<dyn commhal_hal::Region>, off: u64, data: &[u8]) {
    r.as_any()
        .downcast_ref::<commhal_backend_host_emu::ShmRegion>()
        .unwrap()
        .write(off, data)
        .unwrap();
}

fn read(r: &Arc<dyn commhal_hal::Region>, off: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    r.as_any()
        .downcast_ref::<commhal_backend_host_emu::ShmRegion>()
        .unwrap()
        .read(off, &mut v)
        .unwrap();
    v
}

/// A signal pushed just before the proxy is dropped is still performed: stopping
/// drains every trigger pushed before `stop` (this once lost the last signal of a
/// ping-pong when the proxy thread raced between its peek and its stop check).
#[test]
fn stopping_the_proxy_performs_what_was_pushed() {
    ranks(2, |r, b| {
        let t = HostEmu::new();
        for round in 0..2000u64 {
            let mut builder = ProxyBuilder::<HostEmu>::new("host-emu", 8).unwrap();
            let (ch, _data) = port_channel(&t, b, &mut builder, r, 1 - r, 64, 100 + 10 * round);
            let proxy = builder.start().unwrap();
            if r == 0 {
                ch.signal().unwrap();
                drop(proxy);
            } else {
                ch.wait().unwrap();
                drop(proxy);
            }
            b.barrier().unwrap();
        }
    });
}
