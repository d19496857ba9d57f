//! `host-tcp` with in-process ranks (threads, `InProcBootstrap`) on two virtual nodes:
//! data and signals land, ordering and flush hold, bad input is refused, and rogue
//! clients, dropped regions and dead peers give errors instead of hangs or corruption.

use std::any::Any;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use commhal_backend_host_emu::tcp::handshake::{ACCEPTED, Hello, Invitation, REFUSED};
use commhal_backend_host_emu::tcp::wire::{HEADER_LEN, Header};
use commhal_backend_host_emu::{
    HostEmu, HostRegion, HostTcp, ShmRegion, TcpLocal, TcpPort, TcpRemote,
};
use commhal_hal::bootstrap::{Bootstrap, InProcBootstrap};
use commhal_hal::dynamic::DynPortMapped;
use commhal_hal::transport::{PeerContext, Port, PortMapped};
use commhal_hal::{
    Device, DeviceKind, Endpoint, HalError, MemoryKind, MemoryMapped, Rank, Reach, Region, Result,
    StagedAccess, Transport,
};

const TAG: u64 = 40;
const SEM: u64 = 0;
/// A safety net against hangs, not a timing assertion.
const BOUND: Duration = Duration::from_secs(20);

fn ep(rank: Rank) -> Endpoint {
    let mut e = Endpoint::this_process(rank, Device::HOST);
    e.node = rank; // every rank on its own virtual node
    e
}

fn boots() -> Vec<InProcBootstrap> {
    InProcBootstrap::create_with_timeout(2, Duration::from_secs(10))
}

/// One rank's view after setup.
struct Side {
    t: HostTcp,
    port: TcpPort,
    /// This rank's registered buffer (peers write here; also the put source).
    buf: TcpLocal,
    /// The peer's buffer.
    remote: TcpRemote,
}

fn connect(t: &HostTcp, b: &dyn Bootstrap, me: Rank) -> Result<TcpPort> {
    let (local, remote) = (ep(me), ep(1 - me));
    PortMapped::connect(
        t,
        &PeerContext {
            bootstrap: b,
            local: &local,
            remote: &remote,
            tag: TAG,
        },
    )
}

/// Two ranks; rank r registers `mems[r]`; exports are swapped; ports connected.
fn world(mems: [Box<dyn Region>; 2]) -> [Side; 2] {
    world_with(mems, None)
}

/// The receivers' two ways of waiting for bytes, each alone: always blocking in a
/// read, and polling for longer than any test runs.
const RECEIVE_MODES: [(&str, Duration); 2] = [
    ("blocking", Duration::ZERO),
    ("polling", Duration::from_secs(3600)),
];

/// [`world`] whose receivers poll for `spin` after traffic (`None`: the default).
fn world_with(mems: [Box<dyn Region>; 2], spin: Option<Duration>) -> [Side; 2] {
    let b = boots();
    let t = || {
        let t = HostTcp::new().unwrap();
        match spin {
            Some(s) => t.with_receive_spin(s),
            None => t,
        }
    };
    let ts = [t(), t()];
    let bufs: Vec<TcpLocal> = (0..2)
        .map(|r| PortMapped::register(&ts[r], &mems[r]).unwrap())
        .collect();
    let remotes: Vec<TcpRemote> = (0..2)
        .map(|r| {
            let peer = 1 - r;
            PortMapped::import(&ts[r], PortMapped::export(&ts[peer], &bufs[peer]).unwrap()).unwrap()
        })
        .collect();
    let (p0, p1) = thread::scope(|s| {
        let h = s.spawn(|| connect(&ts[1], &b[1], 1).unwrap());
        (connect(&ts[0], &b[0], 0).unwrap(), h.join().unwrap())
    });
    let [t0, t1] = ts;
    let mut bufs = bufs.into_iter();
    let mut remotes = remotes.into_iter();
    [
        Side {
            t: t0,
            port: p0,
            buf: bufs.next().unwrap(),
            remote: remotes.next().unwrap(),
        },
        Side {
            t: t1,
            port: p1,
            buf: bufs.next().unwrap(),
            remote: remotes.next().unwrap(),
        },
    ]
}

fn shm(len: u64) -> Box<dyn Region> {
    Box::new(ShmRegion::alloc(len).unwrap())
}

fn host(len: u64) -> Box<dyn Region> {
    Box::new(HostRegion::alloc(len).unwrap())
}

fn wait_at_least(word: &AtomicU64, v: u64) {
    let give_up = Instant::now() + BOUND;
    while word.load(Ordering::Acquire) < v {
        assert!(Instant::now() < give_up, "semaphore never reached {v}");
        thread::yield_now();
    }
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed as u64) as u8 ^ (i >> 12) as u8)
        .collect()
}

fn bytes(l: &TcpLocal, off: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0; n];
    l.read(off, &mut v).unwrap();
    v
}

#[test]
fn write_and_signal_land_in_the_peers_shared_memory_both_ways() {
    for (mode, spin) in RECEIVE_MODES {
        eprintln!("receivers {mode}");
        let r0 = ShmRegion::alloc(4096).unwrap();
        let r1 = ShmRegion::alloc(4096).unwrap();
        let [mut a, mut b] = world_with([Box::new(r0.clone()), Box::new(r1.clone())], Some(spin));
        a.buf.write(1000, b"from rank 0").unwrap();
        b.buf.write(2000, b"from rank 1").unwrap();
        thread::scope(|s| {
            s.spawn(|| {
                b.port.write(&b.remote, 100, &b.buf, 2000, 11).unwrap();
                b.port.signal(&b.remote, SEM, 5).unwrap();
            });
            a.port.write(&a.remote, 64, &a.buf, 1000, 11).unwrap();
            a.port.signal(&a.remote, SEM, 1).unwrap();
            a.port.signal(&a.remote, SEM, 2).unwrap();
        });
        // The semaphore lives in the host-emu memory itself: wait there, read there.
        wait_at_least(r1.atomic_u64(SEM).unwrap(), 3);
        let mut got = [0u8; 11];
        r1.read(64, &mut got).unwrap();
        assert_eq!(&got, b"from rank 0");
        wait_at_least(r0.atomic_u64(SEM).unwrap(), 5);
        r0.read(100, &mut got).unwrap();
        assert_eq!(&got, b"from rank 1");
        assert_eq!(r1.atomic_u64(SEM).unwrap().load(Ordering::Acquire), 3);
    }
}

/// Host memory that another library allocated (a stand-in for CUDA's pinned memory):
/// offered only by address, as [`commhal_hal::Registrable::Host`].
#[derive(Debug)]
struct ByAddress(Arc<Vec<AtomicU64>>);

impl Region for ByAddress {
    fn addr(&self) -> u64 {
        self.0.as_ptr() as u64
    }
    fn len(&self) -> u64 {
        8 * self.0.len() as u64
    }
    fn device(&self) -> Device {
        Device::HOST
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::HostPinned
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn registrable(&self) -> Option<commhal_hal::Registrable> {
        Some(commhal_hal::Registrable::Host {
            owner: self.0.clone(),
        })
    }
}

#[test]
fn host_memory_registered_by_address_sends_and_receives() {
    let words = |n: usize| Arc::new((0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
    let (m0, m1) = (words(64), words(64));
    m0[3].store(u64::from_le_bytes(*b"by-addr!"), Ordering::Relaxed);
    let [mut a, b] = world([
        Box::new(ByAddress(m0.clone())),
        Box::new(ByAddress(m1.clone())),
    ]);
    // the source is read at its address, the bytes and the signal land at the peer's
    a.port
        .write_signal(&a.remote, 40, &a.buf, 24, 8, (&a.remote, 8, 7))
        .unwrap();
    wait_at_least(&m1[1], 7);
    assert_eq!(m1[5].load(Ordering::Relaxed).to_le_bytes(), *b"by-addr!");
    assert_eq!(bytes(&b.buf, 40, 8), b"by-addr!");
    // bounds are checked against the registered length
    let bad = a.port.write(&a.remote, 0, &a.buf, 512, 8);
    assert!(matches!(bad, Err(HalError::OutOfRange { .. })), "{bad:?}");
    assert!(b.buf.atomic_u64(512).is_err() && b.buf.atomic_u64(4).is_err());
}

#[test]
fn write_signal_lands_the_data_before_the_signal_and_checks_first() {
    for (mode, spin) in RECEIVE_MODES {
        eprintln!("receivers {mode}");
        // Over three WRITE chunks, the signal riding in the last chunk's send.
        const N: usize = 2 * (1 << 20) + 4321;
        const SEM_AT: u64 = (N as u64).next_multiple_of(8);
        let r1 = ShmRegion::alloc(SEM_AT + 8).unwrap();
        let [mut a, b] = world_with([host(N as u64), Box::new(r1.clone())], Some(spin));
        let data = pattern(9, N);
        a.buf.write(0, &data).unwrap();
        let p = &mut a.port;
        // A bad semaphore is refused before anything is sent: the data does not land.
        let bad = p.write_signal(
            &a.remote,
            0,
            &a.buf,
            0,
            N as u64,
            (&a.remote, SEM_AT + 8, 1),
        );
        assert!(matches!(bad, Err(HalError::OutOfRange { .. })), "{bad:?}");
        let bad = p.write_signal(&a.remote, 0, &a.buf, 0, N as u64, (&a.remote, 12, 1));
        assert!(matches!(bad, Err(HalError::Unaligned { .. })), "{bad:?}");
        let bad = p.write_signal(&a.remote, 16, &a.buf, 0, N as u64, (&a.remote, SEM_AT, 1));
        assert!(matches!(bad, Err(HalError::OutOfRange { .. })), "{bad:?}");
        p.flush().unwrap();
        assert_eq!(bytes(&b.buf, 0, 64), vec![0; 64]);
        assert_eq!(r1.atomic_u64(SEM_AT).unwrap().load(Ordering::Acquire), 0);
        // The signal is applied after every byte of the write.
        p.write_signal(&a.remote, 0, &a.buf, 0, N as u64, (&a.remote, SEM_AT, 3))
            .unwrap();
        wait_at_least(r1.atomic_u64(SEM_AT).unwrap(), 3);
        assert!(
            bytes(&b.buf, 0, N) == data,
            "a byte of the write is missing at the signal"
        );
        // A zero-length write still sends its signal.
        p.write_signal(&a.remote, 0, &a.buf, 0, 0, (&a.remote, SEM_AT, 2))
            .unwrap();
        wait_at_least(r1.atomic_u64(SEM_AT).unwrap(), 5);
    }
}

#[test]
fn write_signal_puts_the_same_frames_on_the_wire_as_write_then_signal() {
    let t0 = HostTcp::new().unwrap();
    let mem = HostRegion::alloc(64).unwrap();
    mem.write(0, &pattern(5, 64)).unwrap();
    let src = PortMapped::register(&t0, &mem).unwrap();
    let (mut port, mut raw, _b) = with_raw_peer(t0);
    // The raw peer's region 7 (64 bytes): the port only checks the export's length.
    let remote = PortMapped::import(&HostTcp::new().unwrap(), raw_export(77, 7, 64)).unwrap();
    port.write_signal(&remote, 16, &src, 8, 24, (&remote, 40, 9))
        .unwrap();
    let mut h = [0u8; HEADER_LEN];
    raw.read_exact(&mut h).unwrap();
    assert_eq!(
        Header::decode(&h),
        Ok(Header::Write {
            region: 7,
            offset: 16,
            len: 24
        })
    );
    let mut payload = [0u8; 24];
    raw.read_exact(&mut payload).unwrap();
    assert_eq!(&payload[..], &pattern(5, 64)[8..32]);
    raw.read_exact(&mut h).unwrap();
    assert_eq!(
        Header::decode(&h),
        Ok(Header::Signal {
            region: 7,
            offset: 40,
            add: 9
        })
    );
}

#[test]
fn puts_land_in_issue_order() {
    for (mode, spin) in RECEIVE_MODES {
        eprintln!("receivers {mode}");
        const SLOTS: u64 = 2000;
        let [mut a, b] = world_with([host(8 * SLOTS), host(8 * SLOTS + 8)], Some(spin));
        let done = AtomicU64::new(0);
        thread::scope(|s| {
            // Rank 1 watches its buffer while rank 0 fills slot 1, 2, ... in order: reading
            // from the top down, once a filled slot is seen every lower one must be filled.
            let watcher = s.spawn(|| {
                let mut checks = 0u64;
                while done.load(Ordering::Acquire) == 0 || checks == 0 {
                    let mut seen_filled = false;
                    for slot in (1..=SLOTS).rev() {
                        let v = u64::from_le_bytes(bytes(&b.buf, 8 * slot, 8).try_into().unwrap());
                        if seen_filled {
                            assert_eq!(v, slot, "slot {slot} empty although a later put landed");
                        }
                        seen_filled |= v != 0;
                    }
                    checks += 1;
                }
            });
            for slot in 1..=SLOTS {
                a.buf.write(8 * (slot - 1), &slot.to_le_bytes()).unwrap();
                a.port
                    .write(&a.remote, 8 * slot, &a.buf, 8 * (slot - 1), 8)
                    .unwrap();
            }
            a.port.signal(&a.remote, SEM, 1).unwrap();
            wait_at_least(b.buf.atomic_u64(SEM).unwrap(), 1);
            done.store(1, Ordering::Release);
            watcher.join().unwrap();
        });
        for slot in 1..=SLOTS {
            let v = u64::from_le_bytes(bytes(&b.buf, 8 * slot, 8).try_into().unwrap());
            assert_eq!(v, slot);
        }
    }
}

#[test]
fn flush_means_remote_visible_and_source_reusable() {
    const N: usize = 300_000;
    const SEM_AT: u64 = N as u64 + 8;
    let [mut a, b] = world([host(N as u64), shm(SEM_AT + 8)]);
    let data = pattern(3, N);
    a.buf.write(0, &data).unwrap();
    a.port.write(&a.remote, 0, &a.buf, 0, N as u64).unwrap();
    // Reuse the source at once: the bytes were already taken.
    a.buf.write(0, &vec![0xEE; N]).unwrap();
    a.port.flush().unwrap();
    // No signal, no wait: after flush the peer's memory holds the data.
    assert!(
        bytes(&b.buf, 0, N) == data,
        "flushed data not visible at the peer"
    );
    // Flush again with nothing outstanding; and once more after a signal.
    a.port.flush().unwrap();
    a.port.signal(&a.remote, SEM_AT, 9).unwrap();
    a.port.flush().unwrap();
    assert_eq!(b.buf.atomic_u64(SEM_AT).unwrap().load(Ordering::Relaxed), 9);
}

#[test]
fn large_writes_in_both_directions_land_intact() {
    for (mode, spin) in RECEIVE_MODES {
        eprintln!("receivers {mode}");
        const N: u64 = 8 << 20;
        // Each buffer: semaphore, then the target half, then the source half.
        const DST: u64 = 8;
        const SRC: u64 = 8 + N;
        let [mut a, mut b] = world_with([shm(8 + 2 * N), host(8 + 2 * N)], Some(spin));
        let (pa, pb) = (pattern(1, N as usize), pattern(2, N as usize));
        a.buf.write(SRC, &pa).unwrap();
        b.buf.write(SRC, &pb).unwrap();
        // Both ports stream more than the socket buffers hold at the same time, in
        // uneven pieces, then flush: neither side may stall the other.
        thread::scope(|s| {
            s.spawn(|| {
                let mut off = 0;
                for piece in [5u64 << 20, 1, (3 << 20) - 1] {
                    b.port
                        .write(&b.remote, DST + off, &b.buf, SRC + off, piece)
                        .unwrap();
                    off += piece;
                }
                b.port.flush().unwrap();
                b.port.signal(&b.remote, SEM, 1).unwrap();
            });
            a.port.write(&a.remote, DST, &a.buf, SRC, N).unwrap();
            a.port.flush().unwrap();
            a.port.signal(&a.remote, SEM, 1).unwrap();
        });
        wait_at_least(a.buf.atomic_u64(SEM).unwrap(), 1);
        wait_at_least(b.buf.atomic_u64(SEM).unwrap(), 1);
        assert!(
            bytes(&b.buf, DST, N as usize) == pa,
            "rank 0's 8 MiB arrived damaged"
        );
        assert!(
            bytes(&a.buf, DST, N as usize) == pb,
            "rank 1's 8 MiB arrived damaged"
        );
    }
}

/// `read` returns the bytes of the port's earlier writes (no flush in between) and what
/// the peer stored before a signal this side waited for; its data is in place when the
/// next flush returns.
#[test]
fn reads_see_earlier_writes_and_the_peers_stores_before_its_signal() {
    for (mode, spin) in RECEIVE_MODES {
        eprintln!("receivers {mode}");
        let [mut a, mut b] = world_with([shm(1 << 16), host(1 << 16)], Some(spin));
        for round in 1..=30u8 {
            let n = 1000 + usize::from(round) * 7;
            let data = pattern(round, n);
            a.buf.write(64, &data).unwrap();
            a.port.write(&a.remote, 8192, &a.buf, 64, n as u64).unwrap();
            a.port.signal(&a.remote, SEM, 1).unwrap();
            a.port
                .read(&a.buf, 16_384, &a.remote, 8192, n as u64)
                .unwrap();
            a.port.flush().unwrap();
            assert!(
                bytes(&a.buf, 16_384, n) == data,
                "round {round}: the read missed the earlier write"
            );
            wait_at_least(b.buf.atomic_u64(SEM).unwrap(), u64::from(round));
            let fresh = pattern(round ^ 0x5a, n);
            b.buf.write(32_768, &fresh).unwrap();
            b.port.signal(&b.remote, 8, 1).unwrap();
            wait_at_least(a.buf.atomic_u64(8).unwrap(), u64::from(round));
            a.port
                .read(&a.buf, 49_152, &a.remote, 32_768, n as u64)
                .unwrap();
            a.port.flush().unwrap();
            assert!(
                bytes(&a.buf, 49_152, n) == fresh,
                "round {round}: the read after the peer's signal was stale"
            );
        }
        // A 0-byte read is a no-op.
        a.port.read(&a.buf, 0, &a.remote, 0, 0).unwrap();
        a.port.flush().unwrap();
    }
}

/// Both ranks read more from each other than the socket buffers and the in-flight
/// bound hold while both also stream writes, then flush: neither side may stall the
/// other (answers are written by each link's writer thread, never by its receiver).
#[test]
fn large_reads_in_both_directions_while_writing_land_intact() {
    const N: u64 = 20 << 20;
    const W: u64 = 4 << 20;
    // Each buffer: semaphore, the bytes the peer reads, where our reads land, then
    // the landing area of the peer's writes.
    const SRC: u64 = 8;
    const RX: u64 = 8 + N;
    const WX: u64 = 8 + 2 * N;
    let [mut a, mut b] = world([shm(WX + W), host(WX + W)]);
    let (pa, pb) = (pattern(3, N as usize), pattern(4, N as usize));
    a.buf.write(SRC, &pa).unwrap();
    b.buf.write(SRC, &pb).unwrap();
    thread::scope(|s| {
        s.spawn(|| {
            b.port.read(&b.buf, RX, &b.remote, SRC, N).unwrap();
            b.port.write(&b.remote, WX, &b.buf, SRC, W).unwrap();
            b.port.flush().unwrap();
        });
        a.port.write(&a.remote, WX, &a.buf, SRC, W).unwrap();
        a.port.read(&a.buf, RX, &a.remote, SRC, N).unwrap();
        a.port.flush().unwrap();
    });
    assert!(bytes(&a.buf, RX, N as usize) == pb, "rank 0's 20 MiB read");
    assert!(bytes(&b.buf, RX, N as usize) == pa, "rank 1's 20 MiB read");
    assert!(bytes(&b.buf, WX, W as usize) == pa[..W as usize]);
    assert!(bytes(&a.buf, WX, W as usize) == pb[..W as usize]);
}

#[test]
fn a_read_of_a_dropped_region_is_refused_by_the_peer() {
    let [mut a, b] = world([host(64), host(64)]);
    let Side {
        port: _keep, buf, ..
    } = b;
    drop(buf);
    a.port.read(&a.buf, 0, &a.remote, 0, 8).unwrap();
    let msg = a.port.flush().unwrap_err().to_string();
    assert!(
        msg.contains("rank 1") && msg.contains("READ") && msg.contains("dropped"),
        "{msg}"
    );
}

#[test]
fn bad_arguments_are_refused_locally_and_the_port_stays_usable() {
    let [mut a, b] = world([host(256), shm(128)]);
    let p = &mut a.port;
    let out_of_range = [
        p.write(&a.remote, 120, &a.buf, 0, 16),
        p.write(&a.remote, 0, &a.buf, 250, 16),
        p.write(&a.remote, u64::MAX, &a.buf, 0, 2),
        p.signal(&a.remote, 128, 1),
        p.signal(&a.remote, u64::MAX - 7, 1),
        p.read(&a.buf, 0, &a.remote, 120, 16),
        p.read(&a.buf, 250, &a.remote, 0, 16),
        p.read(&a.buf, 0, &a.remote, u64::MAX, 2),
    ];
    for r in out_of_range {
        assert!(matches!(r, Err(HalError::OutOfRange { .. })), "{r:?}");
    }
    assert!(matches!(
        p.signal(&a.remote, 12, 1),
        Err(HalError::Unaligned { .. })
    ));
    // A remote of another transport (here: rank 0's own buffer) is not rank 1's.
    let own = PortMapped::import(&a.t, PortMapped::export(&a.t, &a.buf).unwrap()).unwrap();
    let err = p.write(&own, 0, &a.buf, 0, 8).unwrap_err();
    assert!(err.to_string().contains("rank 1"), "{err}");
    // A source registered with another transport.
    let foreign_src = PortMapped::register(&b.t, &HostRegion::alloc(8).unwrap()).unwrap();
    assert!(p.write(&a.remote, 0, &foreign_src, 0, 8).is_err());
    assert!(p.read(&foreign_src, 0, &a.remote, 0, 8).is_err());
    assert!(p.read(&a.buf, 0, &own, 0, 8).is_err());
    // Nothing of that reached rank 1, and the port still works.
    p.flush().unwrap();
    assert_eq!(bytes(&b.buf, 0, 128), vec![0; 128]);
    a.buf.write(0, b"ok").unwrap();
    p.write(&a.remote, 126, &a.buf, 0, 2).unwrap();
    p.flush().unwrap();
    assert_eq!(bytes(&b.buf, 126, 2), b"ok");
}

#[test]
fn a_write_to_a_dropped_region_is_refused_by_the_peer() {
    let [mut a, b] = world([host(64), host(64)]);
    let Side {
        port: _keep, buf, ..
    } = b;
    drop(buf); // rank 1's only handle: its registration is gone
    a.port.write(&a.remote, 0, &a.buf, 0, 8).unwrap();
    let err = a.port.flush().unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, HalError::Backend { .. }), "{msg}");
    assert!(msg.contains("rank 1") && msg.contains("dropped"), "{msg}");
    // Poisoned: every later operation fails too, naming the peer.
    let again = a.port.signal(&a.remote, SEM, 1).unwrap_err().to_string();
    assert!(again.contains("rank 1"), "{again}");
}

#[test]
fn a_dead_peer_is_peer_dead_not_a_hang() {
    for (mode, spin) in RECEIVE_MODES {
        eprintln!("receivers {mode}");
        let [mut a, b] = world_with([host(64), host(64)], Some(spin));
        drop(b);
        let err = a.port.flush().unwrap_err();
        assert!(matches!(err, HalError::PeerDead { rank: 1, .. }), "{err}");
        let err = a.port.write(&a.remote, 0, &a.buf, 0, 8).unwrap_err();
        assert!(matches!(err, HalError::PeerDead { rank: 1, .. }), "{err}");
    }
}

// ------------------------------------------------------ rogue clients ----

/// Play rank 1 by hand: take rank 0's invitation and connect with its token.
fn raw_peer(b1: &InProcBootstrap) -> TcpStream {
    let inv = Invitation::decode(0, &b1.recv(0, TAG).unwrap()).unwrap();
    let s = TcpStream::connect(inv.addrs[0]).unwrap();
    s.set_read_timeout(Some(BOUND)).unwrap();
    let hello = Hello {
        token: inv.token,
        connector: 1,
        listener: 0,
        tag: TAG,
        instance: 77,
    };
    (&s).write_all(&hello.encode()).unwrap();
    let mut answer = [0u8; 8];
    (&s).read_exact(&mut answer).unwrap();
    assert_eq!(&answer, ACCEPTED);
    s
}

/// Rank 0 (a real port) with a hand-driven rank 1.
fn with_raw_peer(t0: HostTcp) -> (TcpPort, TcpStream, Vec<InProcBootstrap>) {
    let b = boots();
    let (port, raw) = thread::scope(|s| {
        let h = s.spawn(|| connect(&t0, &b[0], 0).unwrap());
        let raw = raw_peer(&b[1]);
        (h.join().unwrap(), raw)
    });
    (port, raw, b)
}

/// Read the ERROR frame rank 0 answers a refused frame with.
fn read_error_frame(s: &mut TcpStream) -> String {
    let mut h = [0u8; HEADER_LEN];
    s.read_exact(&mut h).unwrap();
    let Ok(Header::Error { len }) = Header::decode(&h) else {
        panic!("expected an ERROR frame, got {h:?}");
    };
    let mut text = vec![0u8; len as usize];
    s.read_exact(&mut text).unwrap();
    String::from_utf8(text).unwrap()
}

/// The export a peer of transport `instance` would send for its region `id` of `len`
/// bytes (the format of `tcp::regions`).
fn raw_export(instance: u64, id: u64, len: u64) -> commhal_hal::Export {
    let mut bytes = b"HTCP".to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes());
    for w in [instance, id, len] {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    commhal_hal::Export {
        backend: "host-tcp".into(),
        len,
        bytes,
        fds: Vec::new(),
    }
}

#[test]
fn malformed_frames_from_a_rogue_client_are_refused_without_damage() {
    let t0 = HostTcp::new().unwrap();
    let mem = HostRegion::alloc(64).unwrap();
    let target = PortMapped::register(&t0, &mem).unwrap();
    let overflow = Header::Write {
        region: target.id(),
        offset: 60,
        len: 16,
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            [overflow.encode().to_vec(), vec![0xAB; 16]].concat(),
            "out of range",
        ),
        (
            Header::Signal {
                region: target.id(),
                offset: 4,
                add: 1,
            }
            .encode()
            .to_vec(),
            "not a multiple of 8",
        ),
        (
            Header::Signal {
                region: 999_999,
                offset: 0,
                add: 1,
            }
            .encode()
            .to_vec(),
            "never registered",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: example\r\nAccept: */*\r\n\r\n".to_vec(),
            "magic",
        ),
        (Header::Ack { seq: 5 }.encode().to_vec(), "never sent"),
        (
            Header::Read {
                region: target.id(),
                offset: 60,
                len: 16,
            }
            .encode()
            .to_vec(),
            "out of range",
        ),
        (
            [
                Header::ReadData { seq: 1, len: 4 }.encode().to_vec(),
                vec![0xAB; 4],
            ]
            .concat(),
            "never sent",
        ),
    ];
    for (frame, needle) in cases {
        let (mut port, mut raw, _b) = with_raw_peer(t0.clone());
        raw.write_all(&frame).unwrap();
        let why = read_error_frame(&mut raw);
        assert!(why.contains(needle), "refusal {why:?} lacks {needle:?}");
        // The connection is closed after the refusal.
        let mut rest = Vec::new();
        let _ = raw.read_to_end(&mut rest);
        assert!(rest.is_empty(), "more data after the refusal: {rest:?}");
        let err = port.flush().unwrap_err().to_string();
        assert!(err.contains("rank 1") && err.contains(needle), "{err}");
    }
    let mut all = [0xFFu8; 64];
    mem.read(0, &mut all).unwrap();
    assert_eq!(all, [0; 64], "a refused frame wrote into the region");
    assert_eq!(target.atomic_u64(0).unwrap().load(Ordering::Relaxed), 0);
}

#[test]
fn flush_times_out_when_the_peer_never_acknowledges() {
    let t0 = HostTcp::new()
        .unwrap()
        .with_timeout(Duration::from_millis(300));
    let (mut port, raw, _b) = with_raw_peer(t0);
    let err = port.flush().unwrap_err();
    assert!(matches!(err, HalError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("rank 1"), "{err}");
    drop(raw);
}

/// Dropping a port ends its receiver even while it polls, and though the peer keeps
/// its end open: the connection then closes, which the peer sees as a reset of its
/// next send (until then its frames are taken, ACK #0 being harmless).
#[test]
fn a_dropped_port_ends_its_receiver_in_either_mode() {
    for (mode, spin) in RECEIVE_MODES {
        let t0 = HostTcp::new().unwrap().with_receive_spin(spin);
        let (port, mut raw, _b) = with_raw_peer(t0);
        drop(port);
        let probe = Header::Ack { seq: 0 }.encode();
        let give_up = Instant::now() + BOUND;
        loop {
            assert!(
                Instant::now() < give_up,
                "receivers {mode}: rank 0 kept its connection open after its port was dropped"
            );
            if raw.write_all(&probe).is_err() {
                break;
            }
            // Longer than a blocking receiver's read-timeout tick.
            thread::sleep(Duration::from_millis(300));
            let mut b = [0u8; 1];
            if let Err(e) = raw.read(&mut b) {
                assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
                break;
            }
        }
    }
}

/// Rank 1's bootstrap, tapping the invitation to try impostors before the real
/// connector uses it.
#[derive(Debug)]
struct Spy {
    inner: InProcBootstrap,
    refusals: Mutex<Vec<String>>,
}

impl Spy {
    fn impostor(&self, inv: &Invitation, first: &[u8]) {
        let mut s = TcpStream::connect(inv.addrs[0]).unwrap();
        s.set_read_timeout(Some(BOUND)).unwrap();
        s.write_all(first).unwrap();
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        assert!(
            answer.starts_with(REFUSED),
            "impostor not refused: {answer:?}"
        );
        self.refusals
            .lock()
            .unwrap()
            .push(String::from_utf8_lossy(&answer[REFUSED.len()..]).into_owned());
    }
}

impl Bootstrap for Spy {
    fn rank(&self) -> Rank {
        self.inner.rank()
    }
    fn size(&self) -> u32 {
        self.inner.size()
    }
    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }
    fn send(&self, peer: Rank, tag: u64, data: &[u8]) -> Result<()> {
        self.inner.send(peer, tag, data)
    }
    fn recv(&self, peer: Rank, tag: u64) -> Result<Vec<u8>> {
        let m = self.inner.recv(peer, tag)?;
        let inv = Invitation::decode(peer, &m).unwrap();
        let mut wrong = inv.token;
        wrong[0] ^= 1;
        let bad_token = Hello {
            token: wrong,
            connector: 1,
            listener: 0,
            tag: TAG,
            instance: 1,
        };
        self.impostor(&inv, &bad_token.encode());
        let wrong_tag = Hello {
            tag: TAG + 1,
            ..Hello {
                token: inv.token,
                ..bad_token
            }
        };
        self.impostor(&inv, &wrong_tag.encode());
        self.impostor(&inv, &[b'x'; Hello::LEN]);
        Ok(m)
    }
    fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.inner.all_gather(data)
    }
    fn broadcast(&self, root: Rank, data: &[u8]) -> Result<Vec<u8>> {
        self.inner.broadcast(root, data)
    }
    fn barrier(&self) -> Result<()> {
        self.inner.barrier()
    }
    fn send_fds(&self, peer: Rank, tag: u64, fds: &[OwnedFd]) -> Result<()> {
        self.inner.send_fds(peer, tag, fds)
    }
    fn recv_fds(&self, peer: Rank, tag: u64) -> Result<Vec<OwnedFd>> {
        self.inner.recv_fds(peer, tag)
    }
}

#[test]
fn impostors_are_refused_and_the_real_peer_still_connects() {
    let mut b = boots();
    let spy = Spy {
        inner: b.pop().unwrap(),
        refusals: Mutex::new(Vec::new()),
    };
    let (t0, t1) = (HostTcp::new().unwrap(), HostTcp::new().unwrap());
    let l0 = PortMapped::register(&t0, &HostRegion::alloc(16).unwrap()).unwrap();
    let l1 = PortMapped::register(&t1, &HostRegion::alloc(16).unwrap()).unwrap();
    let r1 = PortMapped::import(&t0, PortMapped::export(&t1, &l1).unwrap()).unwrap();
    let (mut p0, _p1) = thread::scope(|s| {
        let h = s.spawn(|| connect(&t1, &spy, 1).unwrap());
        (connect(&t0, &b[0], 0).unwrap(), h.join().unwrap())
    });
    let refusals = spy.refusals.lock().unwrap().clone();
    assert_eq!(refusals.len(), 3);
    assert!(
        refusals[0].contains("wrong connection token"),
        "{refusals:?}"
    );
    assert!(refusals[1].contains("tag"), "{refusals:?}");
    assert!(refusals[2].contains("bad magic"), "{refusals:?}");
    l0.write(0, b"genuine!").unwrap();
    p0.write(&r1, 8, &l0, 0, 8).unwrap();
    p0.flush().unwrap();
    assert_eq!(bytes(&l1, 8, 8), b"genuine!");
}

// --------------------------------------------------- registration etc. ----

#[derive(Debug)]
struct Foreign;
impl Region for Foreign {
    fn addr(&self) -> u64 {
        0x1000
    }
    fn len(&self) -> u64 {
        64
    }
    fn device(&self) -> Device {
        Device::HOST
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::HostShared
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[test]
fn register_export_import_rules() {
    let t = HostTcp::new().unwrap();
    assert!(matches!(
        PortMapped::register(&t, &Foreign),
        Err(HalError::Unregistered { .. })
    ));
    // host-emu memory (local and mapped), host memory, boxed, and re-registration.
    let shm = ShmRegion::alloc(32).unwrap();
    let emu = HostEmu::new();
    let mapped = MemoryMapped::map(&emu, shm.export().unwrap()).unwrap();
    let a = PortMapped::register(&t, &shm).unwrap();
    let b = PortMapped::register(&t, &mapped).unwrap();
    let c = PortMapped::register(&t, &host(24)).unwrap();
    let d = PortMapped::register(&t, &a).unwrap();
    assert_eq!((a.addr(), a.len()), (shm.addr(), 32));
    assert_eq!(b.addr(), shm.addr());
    assert_eq!(c.len(), 24);
    assert_eq!(d.addr(), a.addr());
    assert_ne!(a.id(), d.id());
    // Exports are bytes only; a host-emu export is not ours.
    let e = PortMapped::export(&t, &c).unwrap();
    assert!(e.fds.is_empty() && e.backend == "host-tcp" && e.len == 24);
    let r = PortMapped::import(&t, e).unwrap();
    assert_eq!((r.id(), r.len(), r.owner()), (c.id(), 24, t.instance()));
    assert!(PortMapped::import(&t, shm.export().unwrap()).is_err());
    // Only the registering transport exports a registration.
    let other = HostTcp::new().unwrap();
    assert!(PortMapped::export(&other, &c).is_err());
}

#[test]
fn reach_is_a_fallback_on_one_node_and_the_way_across_nodes() {
    let t = HostTcp::new().unwrap();
    let same = Endpoint::this_process(1, Device::HOST);
    let here = Endpoint::this_process(0, Device::HOST);
    assert_eq!(Transport::reach(&t, &here, &same), Reach::Yes { cost: 60 });
    assert_eq!(
        Transport::reach(&t, &ep(0), &ep(1)),
        Reach::Yes { cost: 100 }
    );
    let mut far = ep(1);
    far.host = "elsewhere/0".into();
    assert_eq!(Transport::reach(&t, &here, &far), Reach::Yes { cost: 100 });
    // A GPU rank on another node: its device memory travels through copies.
    let mut gpu = ep(1);
    gpu.device = Device {
        kind: DeviceKind::Cuda,
        ordinal: 0,
    };
    assert_eq!(Transport::reach(&t, &ep(0), &gpu), Reach::Yes { cost: 100 });
    let emu = HostEmu::new();
    assert!(
        !Transport::reach(&emu, &ep(0), &ep(1)).is_yes(),
        "host-emu cannot cross nodes"
    );
    let g = Transport::guarantees(&t);
    assert!(g.flush.remote_visible && g.flush.source_reusable && g.put_put_ordered);
    assert!(g.get && !g.ll8 && !g.ll16);
}

#[test]
fn connect_refuses_itself() {
    let t = HostTcp::new().unwrap();
    let b = boots();
    let me = ep(0);
    let ctx = PeerContext {
        bootstrap: &b[0],
        local: &me,
        remote: &me,
        tag: TAG,
    };
    assert!(matches!(
        PortMapped::connect(&t, &ctx),
        Err(HalError::InvalidArgument(_))
    ));
}

// ------------------------------------------- device memory through copies ----

/// "Device memory" a test can look at: host bytes behind [`StagedAccess`] only (the
/// region's address is not one the host may use). As on a GPU, writes and flag stores
/// are queued and land (in order) at `settle` or before a read; every flag store that
/// landed is recorded.
#[derive(Debug, Default)]
struct FakeDevice {
    bytes: Mutex<Vec<u8>>,
    queued: Mutex<Vec<(u64, Vec<u8>, bool)>>,
    stores: Mutex<Vec<(u64, u64)>>,
    /// When set, `settle` fails as a lost GPU would.
    lost: std::sync::atomic::AtomicBool,
    /// Regions whose writes a store here must find landed, and how often it did not.
    others: Mutex<Vec<Arc<FakeDevice>>>,
    unpublished: AtomicU64,
}

impl FakeDevice {
    fn new(len: usize) -> Arc<FakeDevice> {
        Arc::new(FakeDevice {
            bytes: Mutex::new(vec![0; len]),
            ..FakeDevice::default()
        })
    }
    /// What device code would see now (nothing queued applied).
    fn visible(&self, off: u64, len: usize) -> Vec<u8> {
        self.bytes.lock().unwrap()[off as usize..off as usize + len].to_vec()
    }
    fn check(&self, off: u64, len: u64) -> Result<()> {
        let n = self.bytes.lock().unwrap().len() as u64;
        if off + len > n {
            return Err(HalError::invalid(format!("{off}+{len} past {n}")));
        }
        Ok(())
    }
}

impl StagedAccess for FakeDevice {
    fn len(&self) -> u64 {
        self.bytes.lock().unwrap().len() as u64
    }
    fn device(&self) -> (Device, MemoryKind) {
        (
            Device {
                kind: DeviceKind::Cuda,
                ordinal: 3,
            },
            MemoryKind::Device,
        )
    }
    fn read(&self, off: u64, out: &mut [u8]) -> Result<()> {
        self.check(off, out.len() as u64)?;
        out.copy_from_slice(&self.visible(off, out.len()));
        Ok(())
    }
    fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        self.check(off, data.len() as u64)?;
        self.queued
            .lock()
            .unwrap()
            .push((off, data.to_vec(), false));
        Ok(())
    }
    fn store_u64(&self, off: u64, value: u64) -> Result<()> {
        self.check(off, 8)?;
        // Another region's writes must have landed before a store here publishes them.
        for o in self.others.lock().unwrap().iter() {
            if !o.queued.lock().unwrap().is_empty() {
                self.unpublished.fetch_add(1, Ordering::Relaxed);
            }
        }
        let word = value.to_le_bytes().to_vec();
        self.queued.lock().unwrap().push((off, word, true));
        Ok(())
    }
    fn settle(&self) -> Result<()> {
        if self.lost.load(Ordering::Relaxed) {
            return Err(HalError::invalid(
                "staged writes did not finish: the GPU is lost",
            ));
        }
        let mut bytes = self.bytes.lock().unwrap();
        for (off, data, store) in self.queued.lock().unwrap().drain(..) {
            bytes[off as usize..off as usize + data.len()].copy_from_slice(&data);
            if store {
                let v = u64::from_le_bytes(data.try_into().unwrap());
                self.stores.lock().unwrap().push((off, v));
            }
        }
        Ok(())
    }
}

/// A device region that offers copies only.
#[derive(Debug)]
struct DeviceRegion(Arc<FakeDevice>);
impl Region for DeviceRegion {
    fn addr(&self) -> u64 {
        0xdead_0000
    }
    fn len(&self) -> u64 {
        StagedAccess::len(&*self.0)
    }
    fn device(&self) -> Device {
        self.0.device().0
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::Device
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn staged(&self) -> Option<Arc<dyn StagedAccess>> {
        Some(self.0.clone())
    }
}

#[test]
fn device_memory_travels_through_copies() {
    for (mode, spin) in RECEIVE_MODES {
        eprintln!("receivers {mode}");
        let (d0, d1) = (FakeDevice::new(4 << 20), FakeDevice::new(4 << 20));
        let [mut a, b] = world_with(
            [
                Box::new(DeviceRegion(d0.clone())),
                Box::new(DeviceRegion(d1.clone())),
            ],
            Some(spin),
        );
        assert_eq!(a.buf.kind(), MemoryKind::Device);
        assert_eq!(a.buf.device().ordinal, 3);
        // More than one frame (1 MiB) of data, then two signals on one word.
        let data = pattern(5, 3 << 20);
        d0.write(64, &data).unwrap();
        d0.settle().unwrap(); // as device code that finished writing its source
        a.port
            .write(&a.remote, 1024, &a.buf, 64, data.len() as u64)
            .unwrap();
        a.port.signal(&a.remote, 8, 5).unwrap();
        a.port.signal(&a.remote, 8, 2).unwrap();
        // The flush is acknowledged only once everything landed.
        a.port.flush().unwrap();
        assert!(
            d1.queued.lock().unwrap().is_empty(),
            "settled before the ACK"
        );
        assert!(d1.visible(1024, data.len()) == data, "the bytes landed");
        // Each signal stored the word's new value, after the data.
        assert_eq!(*d1.stores.lock().unwrap(), vec![(8, 5), (8, 7)]);
        assert_eq!(d1.visible(8, 8), 7u64.to_le_bytes());
        // A read brings device bytes back the same way.
        a.port.read(&a.buf, 0, &a.remote, 1024, 16).unwrap();
        a.port.flush().unwrap();
        assert_eq!(d0.visible(0, 16), &data[..16]);
        // A read right behind a write on the same connection sees it: the peer's
        // receiver settles its queued writes before answering.
        d0.write(8192, b"0123456789abcdef").unwrap();
        d0.settle().unwrap();
        a.port.write(&a.remote, 2048, &a.buf, 8192, 16).unwrap();
        a.port.read(&a.buf, 4096, &a.remote, 2048, 16).unwrap();
        a.port.flush().unwrap();
        assert_eq!(d0.visible(4096, 16), b"0123456789abcdef");
        // A word's first signal starts from what the device holds there, a queued write
        // included.
        d1.write(32, &40u64.to_le_bytes()).unwrap();
        a.port.signal(&a.remote, 32, 2).unwrap();
        a.port.flush().unwrap();
        assert_eq!(d1.visible(32, 8), 42u64.to_le_bytes());
        // A signal into another region (a plan's flags live apart from its data) stores
        // only once the data written before it landed.
        let flags = FakeDevice::new(64);
        flags.others.lock().unwrap().push(d1.clone());
        let f = PortMapped::register(&b.t, &DeviceRegion(flags.clone())).unwrap();
        let remote_f = PortMapped::import(&a.t, PortMapped::export(&b.t, &f).unwrap()).unwrap();
        for round in 0..20 {
            a.port.write(&a.remote, 0, &a.buf, 64, 4096).unwrap();
            a.port.signal(&remote_f, 0, 1).unwrap();
            a.port.flush().unwrap();
            assert_eq!(flags.visible(0, 8), (round + 1u64).to_le_bytes());
        }
        assert_eq!(flags.unpublished.load(Ordering::Relaxed), 0);
        // The host cannot wait on such a word itself.
        assert!(b.buf.atomic_u64(8).is_err());
        // Out of range and misaligned signals are refused before anything is sent.
        assert!(a.port.signal(&a.remote, 4 << 20, 1).is_err());
        drop(b);
    }
}

#[test]
fn a_device_copy_that_fails_is_an_error_at_the_senders_flush() {
    let (d0, d1) = (FakeDevice::new(4096), FakeDevice::new(4096));
    let [mut a, _b] = world([
        Box::new(DeviceRegion(d0.clone())),
        Box::new(DeviceRegion(d1.clone())),
    ]);
    d1.lost.store(true, Ordering::Relaxed);
    a.port.write(&a.remote, 0, &a.buf, 0, 64).unwrap();
    let err = a.port.flush().unwrap_err().to_string();
    assert!(
        err.contains("rank 1") && err.contains("GPU is lost"),
        "{err}"
    );
    // Later operations fail too, naming the peer.
    let again = a.port.signal(&a.remote, 0, 1).unwrap_err().to_string();
    assert!(again.contains("rank 1"), "{again}");
}

#[test]
fn works_through_the_dyn_mirror() {
    let b = boots();
    let ts: [Arc<dyn DynPortMapped>; 2] = [
        Arc::new(HostTcp::new().unwrap()),
        Arc::new(HostTcp::new().unwrap()),
    ];
    // Both the object-safe mirror and the static trait (implemented for the Arc) are in
    // scope: name the mirror's methods explicitly.
    let src =
        DynPortMapped::register(&*ts[0], &HostRegion::from_bytes(b"dynamic!").unwrap()).unwrap();
    let dst_mem = ShmRegion::alloc(16).unwrap();
    let dst = DynPortMapped::register(&*ts[1], &dst_mem).unwrap();
    let remote = DynPortMapped::import(
        &*ts[0],
        DynPortMapped::export(&*ts[1], dst.as_ref()).unwrap(),
    )
    .unwrap();
    let (mut p0, _p1) = thread::scope(|s| {
        let h = s.spawn(|| {
            let (l, r) = (ep(1), ep(0));
            DynPortMapped::connect(
                &*ts[1],
                &PeerContext {
                    bootstrap: &b[1],
                    local: &l,
                    remote: &r,
                    tag: TAG,
                },
            )
            .unwrap()
        });
        let (l, r) = (ep(0), ep(1));
        let p0 = DynPortMapped::connect(
            &*ts[0],
            &PeerContext {
                bootstrap: &b[0],
                local: &l,
                remote: &r,
                tag: TAG,
            },
        )
        .unwrap();
        (p0, h.join().unwrap())
    });
    // `Box<dyn DynPort>` is also a static `Port` whose handles are the boxes themselves.
    p0.write(&remote, 0, &src, 0, 8).unwrap();
    p0.signal(&remote, 8, 1).unwrap();
    Port::flush(&mut p0).unwrap();
    let mut got = [0u8; 8];
    dst_mem.read(0, &mut got).unwrap();
    assert_eq!(&got, b"dynamic!");
    assert_eq!(dst_mem.atomic_u64(8).unwrap().load(Ordering::Acquire), 1);
    dst_mem.write(0, b"readback").unwrap();
    Port::read(&mut p0, &src, 0, &remote, 0, 8).unwrap();
    Port::flush(&mut p0).unwrap();
    let back = src.as_any().downcast_ref::<TcpLocal>().unwrap();
    assert_eq!(bytes(back, 0, 8), b"readback");
}

/// Rank 1's bootstrap, opening silent connections to the listener (they connect and
/// never say hello) before the real connector uses the invitation.
#[derive(Debug)]
struct Squatter {
    inner: InProcBootstrap,
    silent: Mutex<Vec<TcpStream>>,
}

impl Bootstrap for Squatter {
    fn rank(&self) -> Rank {
        self.inner.rank()
    }
    fn size(&self) -> u32 {
        self.inner.size()
    }
    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }
    fn send(&self, peer: Rank, tag: u64, data: &[u8]) -> Result<()> {
        self.inner.send(peer, tag, data)
    }
    fn recv(&self, peer: Rank, tag: u64) -> Result<Vec<u8>> {
        let m = self.inner.recv(peer, tag)?;
        let inv = Invitation::decode(peer, &m).unwrap();
        let mut silent = self.silent.lock().unwrap();
        for _ in 0..14 {
            silent.push(TcpStream::connect(inv.addrs[0]).unwrap());
        }
        Ok(m)
    }
    fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.inner.all_gather(data)
    }
    fn broadcast(&self, root: Rank, data: &[u8]) -> Result<Vec<u8>> {
        self.inner.broadcast(root, data)
    }
    fn barrier(&self) -> Result<()> {
        self.inner.barrier()
    }
    fn send_fds(&self, peer: Rank, tag: u64, fds: &[OwnedFd]) -> Result<()> {
        self.inner.send_fds(peer, tag, fds)
    }
    fn recv_fds(&self, peer: Rank, tag: u64) -> Result<Vec<OwnedFd>> {
        self.inner.recv_fds(peer, tag)
    }
}

/// Connections that never say hello do not hold up the real one (the listener reads
/// every pending hello at once, each with its own bound).
#[test]
fn silent_connections_do_not_starve_the_real_peer() {
    let mut b = boots();
    let squatter = Squatter {
        inner: b.pop().unwrap(),
        silent: Mutex::new(Vec::new()),
    };
    let (t0, t1) = (HostTcp::new().unwrap(), HostTcp::new().unwrap());
    let start = std::time::Instant::now();
    let (r0, r1) = thread::scope(|s| {
        let h = s.spawn(|| connect(&t1, &squatter, 1));
        (connect(&t0, &b[0], 0), h.join().unwrap())
    });
    r0.expect("rank 0 connects despite the silent connections");
    r1.expect("rank 1 connects despite the silent connections");
    assert_eq!(squatter.silent.lock().unwrap().len(), 14);
    // The bootstrap timeout is 10 s; serial 5 s hello waits would take 70 s.
    assert!(
        start.elapsed() < Duration::from_secs(9),
        "{:?}",
        start.elapsed()
    );
}
