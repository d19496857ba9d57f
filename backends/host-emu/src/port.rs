//! host-emu's [`PortMapped`] side: the proxy thread `memcpy`s into the peer's mapped
//! shared memory and signals with an atomic add.
//!
//! * `register` accepts host-emu memory only ([`ShmRegion`] or [`ShmMapping`], also
//!   behind `Box<dyn Region>`); anything else is [`HalError::Unregistered`].
//! * `export`/`import` are the memory exports of [`crate::memory`]: `import` maps the
//!   peer's memfd (or shares the buffer in one process).
//! * [`HostPort::write`] is a bounds-checked copy performed on the calling (proxy)
//!   thread: complete when it returns; [`HostPort::read`] is the same copy out of the
//!   peer's mapping into the local buffer. [`HostPort::signal`] is
//!   `AtomicU64::fetch_add(add, Release)` on an 8-byte-aligned word of the peer buffer.
//!   Because every earlier write completed in program order before the release,
//!   signals are strong and puts are ordered; [`HostPort::flush`] is a fence.
//!
//! Test-only [`Faults`] change these paths on purpose (see [`crate::faults`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};

use commhal_hal::error::{Transfer, check_transfer};
use commhal_hal::transport::{PeerContext, Port, PortMapped};
use commhal_hal::{Export, HalError, Rank, Reach, Region, Result, Transport};

use crate::BACKEND;
use crate::faults::Faults;
use crate::memory::{ShmBuf, ShmMapping, ShmRegion};
use crate::transport::HostEmu;

impl PortMapped for HostEmu {
    type Local = ShmRegion;
    type Remote = ShmMapping;
    type Port = HostPort;

    fn register(&self, region: &dyn Region) -> Result<ShmRegion> {
        let any = region.as_any();
        if let Some(r) = any.downcast_ref::<ShmRegion>() {
            Ok(r.clone())
        } else if let Some(m) = any.downcast_ref::<ShmMapping>() {
            Ok(ShmRegion(m.buf().clone()))
        } else {
            Err(HalError::Unregistered {
                backend: BACKEND.into(),
                addr: region.addr(),
                len: region.len(),
            })
        }
    }

    fn export(&self, local: &ShmRegion) -> Result<Export> {
        local.export()
    }

    fn import(&self, export: Export) -> Result<ShmMapping> {
        ShmMapping::map(export)
    }

    /// No setup traffic is needed: the port only needs the peer to be reachable.
    fn connect(&self, ctx: &PeerContext<'_>) -> Result<HostPort> {
        if let Reach::No(why) = Transport::reach(self, ctx.local, ctx.remote) {
            return Err(HalError::unsupported(
                BACKEND,
                format!("a port to rank {}: {why}", ctx.remote.rank),
            ));
        }
        Ok(HostPort {
            peer: ctx.remote.rank,
            faults: self.faults,
            pending: VecDeque::new(),
            land_on_next_call: false,
            triggers: 0,
        })
    }
}

/// A copy queued by a fault (never used without faults): a `write` (local `src` into
/// the peer's `dst`) or a `read` (the peer's `src` into local `dst`), both buffers kept
/// alive until it lands.
#[derive(Debug)]
struct Pending {
    dst: Arc<ShmBuf>,
    dst_off: u64,
    src: Arc<ShmBuf>,
    src_off: u64,
    len: u64,
}

impl Pending {
    fn land(self) {
        // Bounds were checked when the copy was accepted.
        let _ = self
            .dst
            .copy_from(self.dst_off, &self.src, self.src_off, self.len);
    }
}

/// A port to one peer. Operations are performed synchronously on the calling thread.
#[derive(Debug)]
pub struct HostPort {
    peer: Rank,
    faults: Faults,
    pending: VecDeque<Pending>,
    land_on_next_call: bool,
    triggers: u64,
}

impl HostPort {
    /// The peer rank this port writes to.
    pub fn peer(&self) -> Rank {
        self.peer
    }

    fn land_all(&mut self) {
        while let Some(p) = self.pending.pop_front() {
            p.land();
        }
    }

    /// Start of every port call: writes an `early_flush` left behind land now.
    fn begin_call(&mut self) {
        if std::mem::take(&mut self.land_on_next_call) {
            self.land_all();
        }
    }

    /// Counts write/signal triggers; true when the `drop_every_nth_trigger` fault
    /// swallows this one.
    fn dropped(&mut self) -> bool {
        self.triggers += 1;
        match self.faults.drop_every_nth_trigger {
            Some(n) if n > 0 => self.triggers.is_multiple_of(u64::from(n)),
            _ => false,
        }
    }
}

impl HostPort {
    /// A `write` (the peer's buffer is `dst`) or a `read` (it is `src`): both ranges
    /// checked, then the copy on the calling thread or, under the ordering faults,
    /// queued. A dropped trigger loses writes only.
    fn transfer(
        &mut self,
        t: Transfer,
        (dst, dst_off): (&Arc<ShmBuf>, u64),
        (src, src_off): (&Arc<ShmBuf>, u64),
        len: u64,
    ) -> Result<()> {
        self.begin_call();
        let (dst_range, src_range) = ((dst_off, dst.len()), (src_off, src.len()));
        let (remote, local) = match t {
            Transfer::Write => (dst_range, src_range),
            Transfer::Read => (src_range, dst_range),
        };
        check_transfer(
            "port",
            t,
            len,
            (
                &format_args!("rank {}'s buffer", self.peer),
                remote.0,
                remote.1,
            ),
            local,
        )?;
        if t == Transfer::Write && self.dropped() {
            return Ok(());
        }
        if self.faults.defers_writes() {
            self.pending.push_back(Pending {
                dst: dst.clone(),
                dst_off,
                src: src.clone(),
                src_off,
                len,
            });
            return Ok(());
        }
        dst.copy_from(dst_off, src, src_off, len)
    }
}

impl Port for HostPort {
    type Local = ShmRegion;
    type Remote = ShmMapping;

    fn write(
        &mut self,
        dst: &ShmMapping,
        dst_off: u64,
        src: &ShmRegion,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        self.transfer(
            Transfer::Write,
            (dst.buf(), dst_off),
            (src.buf(), src_off),
            len,
        )
    }

    /// A copy out of the peer's mapping on the calling thread: complete when it
    /// returns, after every earlier write (which completed on return too). Under the
    /// ordering faults it is queued behind the queued writes and lands with them.
    fn read(
        &mut self,
        dst: &ShmRegion,
        dst_off: u64,
        src: &ShmMapping,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        self.transfer(
            Transfer::Read,
            (dst.buf(), dst_off),
            (src.buf(), src_off),
            len,
        )
    }

    fn signal(&mut self, sem: &ShmMapping, off: u64, add: u64) -> Result<()> {
        self.begin_call();
        let word = sem.atomic_u64(off)?;
        if self.dropped() {
            return Ok(());
        }
        if self.faults.signal_before_data {
            word.fetch_add(add, Ordering::Release);
        } else if self.faults.relaxed_signal {
            let newest = self.pending.pop_back();
            self.land_all();
            word.fetch_add(add, Ordering::Relaxed);
            self.pending.extend(newest);
        } else {
            self.land_all();
            word.fetch_add(add, Ordering::Release);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.begin_call();
        if self.faults.early_flush {
            self.land_on_next_call = !self.pending.is_empty();
        } else {
            self.land_all();
        }
        fence(Ordering::SeqCst);
        Ok(())
    }
}

impl Drop for HostPort {
    /// Writes a fault held back still land, so nothing is lost for good.
    fn drop(&mut self) {
        self.land_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_bootstrap::TestBootstrap;
    use commhal_hal::dynamic::DynPortMapped;
    use commhal_hal::{Device, Endpoint, MemoryKind};
    use std::any::Any;

    /// Rank 0's port to rank 1 plus rank 1's buffer (data at 0.., semaphore at 1024).
    pub(crate) struct Pair {
        pub port: HostPort,
        pub src: ShmRegion,
        pub remote: ShmMapping,
        pub peer_buf: ShmRegion,
    }

    pub(crate) fn pair(t: &HostEmu) -> Pair {
        let boots = TestBootstrap::group(2);
        let (e0, e1) = (
            Endpoint::this_process(0, Device::HOST),
            Endpoint::this_process(1, Device::HOST),
        );
        let ctx = PeerContext {
            bootstrap: &boots[0],
            local: &e0,
            remote: &e1,
            tag: 7,
        };
        let port = PortMapped::connect(t, &ctx).unwrap();
        let src = PortMapped::register(t, &ShmRegion::alloc(2048).unwrap()).unwrap();
        let peer_buf = ShmRegion::alloc(2048).unwrap();
        let remote = PortMapped::import(t, PortMapped::export(t, &peer_buf).unwrap()).unwrap();
        Pair {
            port,
            src,
            remote,
            peer_buf,
        }
    }

    fn peek(buf: &ShmRegion, off: u64, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        buf.read(off, &mut v).unwrap();
        v
    }

    #[test]
    fn write_signal_flush_land_in_peer_memory() {
        let t = HostEmu::new();
        let mut p = pair(&t);
        p.src.write(100, b"hello").unwrap();
        p.port.write(&p.remote, 10, &p.src, 100, 5).unwrap();
        assert_eq!(
            peek(&p.peer_buf, 10, 5),
            b"hello",
            "write completes on return"
        );
        p.port.signal(&p.remote, 1024, 3).unwrap();
        p.port.signal(&p.remote, 1024, 4).unwrap();
        p.port.flush().unwrap();
        assert_eq!(
            p.peer_buf.atomic_u64(1024).unwrap().load(Ordering::Acquire),
            7
        );
    }

    #[test]
    fn read_copies_out_of_peer_memory_after_earlier_writes() {
        let t = HostEmu::new();
        let mut p = pair(&t);
        p.peer_buf.write(200, b"peer bytes").unwrap();
        p.port.read(&p.src, 500, &p.remote, 200, 10).unwrap();
        assert_eq!(peek(&p.src, 500, 10), b"peer bytes", "complete on return");
        // A read after a write to the same range returns the written bytes.
        p.src.write(0, b"fresh").unwrap();
        p.port.write(&p.remote, 200, &p.src, 0, 5).unwrap();
        p.port.read(&p.src, 600, &p.remote, 200, 10).unwrap();
        p.port.read(&p.src, 700, &p.remote, 0, 0).unwrap();
        p.port.flush().unwrap();
        assert_eq!(peek(&p.src, 600, 10), b"freshbytes");
        assert_eq!(peek(&p.src, 700, 8), [0; 8], "a 0-byte read is a no-op");
        assert!(matches!(
            p.port.read(&p.src, 0, &p.remote, 2040, 16),
            Err(HalError::OutOfRange { .. })
        ));
        assert!(matches!(
            p.port.read(&p.src, 2047, &p.remote, 0, 2),
            Err(HalError::OutOfRange { .. })
        ));
        assert!(matches!(
            p.port.read(&p.src, 0, &p.remote, u64::MAX, 2),
            Err(HalError::OutOfRange { .. })
        ));
    }

    #[test]
    fn bad_arguments_are_errors() {
        let t = HostEmu::new();
        let mut p = pair(&t);
        assert!(matches!(
            p.port.write(&p.remote, 2040, &p.src, 0, 16),
            Err(HalError::OutOfRange { .. })
        ));
        assert!(matches!(
            p.port.write(&p.remote, 0, &p.src, u64::MAX, 2),
            Err(HalError::OutOfRange { .. })
        ));
        assert!(matches!(
            p.port.signal(&p.remote, 1020, 1),
            Err(HalError::Unaligned { .. })
        ));
        assert!(matches!(
            p.port.signal(&p.remote, 2048, 1),
            Err(HalError::OutOfRange { .. })
        ));
        assert_eq!(peek(&p.peer_buf, 0, 2048), vec![0; 2048], "nothing landed");
    }

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
    fn register_accepts_host_emu_memory_only() {
        let t = HostEmu::new();
        assert!(matches!(
            PortMapped::register(&t, &Foreign),
            Err(HalError::Unregistered { .. })
        ));
        let r = ShmRegion::alloc(8).unwrap();
        let boxed: Box<dyn Region> = Box::new(r.clone());
        assert_eq!(PortMapped::register(&t, &boxed).unwrap().addr(), r.addr());
        let m = ShmMapping::map(r.export().unwrap()).unwrap();
        assert_eq!(PortMapped::register(&t, &m).unwrap().len(), 8);
    }

    #[test]
    fn connect_refuses_unreachable_peers() {
        let t = HostEmu::new();
        let boots = TestBootstrap::group(2);
        let e0 = Endpoint::this_process(0, Device::HOST);
        let mut e1 = Endpoint::this_process(1, Device::HOST);
        e1.node = 3;
        let ctx = PeerContext {
            bootstrap: &boots[0],
            local: &e0,
            remote: &e1,
            tag: 1,
        };
        assert!(PortMapped::connect(&t, &ctx).is_err());
    }

    #[test]
    fn dyn_port_round_trip() {
        let t = HostEmu::new();
        let d: &dyn DynPortMapped = &t;
        let boots = TestBootstrap::group(2);
        let (e0, e1) = (
            Endpoint::this_process(0, Device::HOST),
            Endpoint::this_process(1, Device::HOST),
        );
        let mut port = d
            .connect(&PeerContext {
                bootstrap: &boots[0],
                local: &e0,
                remote: &e1,
                tag: 2,
            })
            .unwrap();
        let src = d.register(&ShmRegion::alloc(16).unwrap()).unwrap();
        let peer = ShmRegion::alloc(16).unwrap();
        let remote = d.import(d.export(&peer).unwrap()).unwrap();
        // `Box<dyn DynPort>` is also a static `Port` whose handles are the boxes.
        port.write(&remote, 0, &src, 0, 16).unwrap();
        port.signal(&remote, 8, 1).unwrap();
        port.flush().unwrap();
        assert_eq!(peer.atomic_u64(8).unwrap().load(Ordering::Acquire), 1);
        peer.write(0, &[9; 4]).unwrap();
        port.read(&src, 4, &remote, 0, 4).unwrap();
        port.flush().unwrap();
        let local = src.as_any().downcast_ref::<ShmRegion>().unwrap();
        let mut got = [0u8; 4];
        local.read(4, &mut got).unwrap();
        assert_eq!(got, [9; 4]);
        // A handle of the wrong kind is an error, not undefined behaviour.
        let bogus: Box<dyn Any + Send + Sync> = Box::new(5u32);
        let e = port.read(&src, 0, &bogus, 0, 4).unwrap_err();
        assert!(e.to_string().contains("was not created by backend"), "{e}");
    }
}

#[cfg(test)]
mod fault_tests {
    //! Each fault must be observable with a single thread, deterministically, so a
    //! conformance check against it fails every time.
    use super::tests::{Pair, pair};
    use super::*;

    fn with(f: Faults) -> (HostEmu, Pair) {
        let t = HostEmu::with_faults(f);
        let p = pair(&t);
        (t, p)
    }

    fn byte(p: &Pair, off: u64) -> u8 {
        let mut b = [0u8];
        p.peer_buf.read(off, &mut b).unwrap();
        b[0]
    }

    fn sem(p: &Pair) -> u64 {
        p.peer_buf.atomic_u64(1024).unwrap().load(Ordering::Acquire)
    }

    #[test]
    fn no_faults_signal_implies_data() {
        let (_t, mut p) = with(Faults::default());
        p.src.write(0, &[5]).unwrap();
        p.port.write(&p.remote, 0, &p.src, 0, 1).unwrap();
        p.port.signal(&p.remote, 1024, 1).unwrap();
        assert_eq!((sem(&p), byte(&p, 0)), (1, 5));
    }

    #[test]
    fn signal_before_data_is_visible_and_flush_repairs_it() {
        let (_t, mut p) = with(Faults {
            signal_before_data: true,
            ..Faults::default()
        });
        p.src.write(0, &[5]).unwrap();
        p.port.write(&p.remote, 0, &p.src, 0, 1).unwrap();
        p.port.signal(&p.remote, 1024, 1).unwrap();
        assert_eq!(
            (sem(&p), byte(&p, 0)),
            (1, 0),
            "signal landed, data did not"
        );
        p.port.flush().unwrap();
        assert_eq!(byte(&p, 0), 5);
    }

    #[test]
    fn relaxed_signal_leaves_the_newest_write_behind() {
        let (_t, mut p) = with(Faults {
            relaxed_signal: true,
            ..Faults::default()
        });
        p.src.write(0, &[1, 2]).unwrap();
        p.port.write(&p.remote, 0, &p.src, 0, 1).unwrap();
        p.port.write(&p.remote, 1, &p.src, 1, 1).unwrap();
        p.port.signal(&p.remote, 1024, 1).unwrap();
        assert_eq!((sem(&p), byte(&p, 0), byte(&p, 1)), (1, 1, 0));
        p.port.flush().unwrap();
        assert_eq!(byte(&p, 1), 2);
    }

    #[test]
    fn early_flush_returns_before_data_and_reads_source_late() {
        let (_t, mut p) = with(Faults {
            early_flush: true,
            ..Faults::default()
        });
        p.src.write(0, &[5]).unwrap();
        p.port.write(&p.remote, 0, &p.src, 0, 1).unwrap();
        p.port.flush().unwrap();
        assert_eq!(byte(&p, 0), 0, "flush returned before the data landed");
        p.src.write(0, &[6]).unwrap(); // "reusing" the source too early
        p.port.flush().unwrap(); // lands the held write at the start of this call
        assert_eq!(byte(&p, 0), 6, "the source was read after flush returned");
    }

    #[test]
    fn early_flush_returns_before_a_read_landed() {
        let (_t, mut p) = with(Faults {
            early_flush: true,
            ..Faults::default()
        });
        p.peer_buf.write(0, &[7]).unwrap();
        p.port.read(&p.src, 0, &p.remote, 0, 1).unwrap();
        p.port.flush().unwrap();
        let mut b = [0u8];
        p.src.read(0, &mut b).unwrap();
        assert_eq!(
            b,
            [0],
            "flush returned before the read filled its destination"
        );
        p.port.flush().unwrap();
        p.src.read(0, &mut b).unwrap();
        assert_eq!(b, [7]);
    }

    #[test]
    fn every_nth_trigger_is_dropped() {
        let (_t, mut p) = with(Faults {
            drop_every_nth_trigger: Some(3),
            ..Faults::default()
        });
        for _ in 0..6 {
            p.port.signal(&p.remote, 1024, 1).unwrap();
        }
        assert_eq!(sem(&p), 4, "triggers 3 and 6 dropped");
    }

    #[test]
    fn held_writes_land_when_the_port_is_dropped() {
        let (_t, mut p) = with(Faults {
            early_flush: true,
            ..Faults::default()
        });
        p.src.write(0, &[9]).unwrap();
        p.port.write(&p.remote, 0, &p.src, 0, 1).unwrap();
        let Pair { port, peer_buf, .. } = p;
        drop(port);
        let mut b = [0u8];
        peer_buf.read(0, &mut b).unwrap();
        assert_eq!(b, [9]);
    }
}
