//! Shared helpers: ranks as threads over host-emu with the in-process bootstrap.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use commhal_backend_host_emu::HostEmu;
use commhal_channels::proxy::ProxyBuilder;
use commhal_channels::{PortChannel, SemaphoreSlot, WaitPolicy};
use commhal_hal::bootstrap::InProcBootstrap;
use commhal_hal::transport::PeerContext;
use commhal_hal::{Device, Endpoint, MemoryMapped, Rank, Region};

/// Run `f(rank, bootstrap)` on `n` threads; panics in any rank fail the test.
pub fn ranks<F>(n: u32, f: F)
where
    F: Fn(Rank, &InProcBootstrap) + Sync,
{
    let boots = InProcBootstrap::create_with_timeout(n, Duration::from_secs(20));
    std::thread::scope(|s| {
        let hs: Vec<_> = boots
            .iter()
            .enumerate()
            .map(|(r, b)| {
                let f = &f;
                s.spawn(move || f(r as Rank, b))
            })
            .collect();
        for h in hs {
            h.join().expect("a rank panicked");
        }
    });
}

/// A short policy for tests that expect timeouts.
pub fn short() -> WaitPolicy {
    WaitPolicy::with_timeout(Duration::from_millis(50))
}

/// Fill a byte pattern that depends on the round and the position.
pub fn pattern(round: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (round as usize).wrapping_mul(31).wrapping_add(i * 7) as u8)
        .collect()
}

/// Set up a port channel from `rank` to `peer` on `builder`: `data` bytes of host-emu
/// memory as put source / destination, and an 8-byte semaphore counter.
pub fn port_channel(
    t: &HostEmu,
    b: &InProcBootstrap,
    builder: &mut ProxyBuilder<HostEmu>,
    rank: Rank,
    peer: Rank,
    data_len: u64,
    tag: u64,
) -> (PortChannel<HostEmu>, Arc<dyn Region>) {
    let data: Arc<dyn Region> = Arc::new(MemoryMapped::alloc(t, Device::HOST, data_len).unwrap());
    let sem: Arc<dyn Region> = Arc::new(MemoryMapped::alloc(t, Device::HOST, 8).unwrap());
    let slot = SemaphoreSlot::new(sem, 0).unwrap();
    let local = Endpoint::this_process(rank, Device::HOST);
    let remote = Endpoint::this_process(peer, Device::HOST);
    let ctx = PeerContext {
        bootstrap: b,
        local: &local,
        remote: &remote,
        tag,
    };
    let ch = PortChannel::connect(builder, t, &ctx, data.as_ref(), slot).unwrap();
    (ch, data)
}
