//! One `host-tcp` connection: the state shared by the port (sender) and the
//! receiver thread, and the receiver thread itself.
//!
//! **Writing to the socket.** The port writes its frames under the `out` lock. The
//! receiver must never block behind the port (if both ends' receivers waited on their
//! ports while both ports waited on full socket buffers, nothing would move), so it
//! queues its `ACK`s in `control` and only *tries* the lock; whoever holds the lock
//! drains `control` after its own frame and again after unlocking ([`Link::pump`]).
//!
//! **Read answers.** A `READ_DATA` frame (up to [`MAX_CHUNK`] bytes) is queued in
//! `control` like an `ACK`, but the receiver never writes one itself: writing that much
//! could block it while the peer's receiver, blocked the same way, stops reading, and
//! neither would move. A writer thread per link (or the port, after its own frame)
//! writes it; the receiver writes small control frames only while none of those is
//! ahead of them, so the queue keeps its order. The port bounds the bytes of its reads
//! not yet answered ([`MAX_READS_IN_FLIGHT`]), which bounds what the peer queues.
//!
//! **Receiving.** The receiver reads the socket through a buffer ([`RECV_BUFFER`]), so
//! a small frame and the ones sent with it cost one `recv`, not one per header and
//! payload. Frames are applied in arrival order, which is send order (one TCP
//! stream): a `SIGNAL` after `WRITE`s is applied after them, a `READ` is answered with
//! the bytes after every earlier `WRITE` landed, a `FLUSH` is acknowledged after
//! everything before it was applied (so an `ACK` arrives after the answers of earlier
//! reads, which the receiver copies into their destinations in order). Every frame is
//! validated (header, region id, bounds, alignment) before anything is written; a bad
//! frame is answered with an `ERROR` frame and the connection is closed, and from then
//! on the port's operations fail with an error naming the peer. The receiver never
//! panics on peer input.
//!
//! **Polling.** A receiver blocked in a read is woken by the kernel when bytes arrive:
//! the peer's send pays for waking it, and it runs only once it is scheduled. So for a
//! while after the last bytes arrived ([`crate::tcp::HostTcp::with_receive_spin`],
//! `COMMHAL_HOST_TCP_SPIN_US`; 2 ms unless set, the GPU proxy's window: a collective's
//! frames come in bursts) it polls instead, a `poll` with no timeout and a
//! [`std::thread::yield_now`] after each empty one, a `recv` with `MSG_DONTWAIT` once
//! bytes are there, and blocks only then. The port sends on the same socket, and
//! `recv` and `send` both take the socket's lock, which `poll` does not: with `recv`
//! polls a receiver applied a far signal of the GPU plans in 2–3 µs, with `poll` in
//! 0.2–0.3 µs (2 × H200, two virtual nodes, timestamps in the receiver). On the 2-core
//! host-emu machine (4 ranks on 2 virtual nodes, 1 KiB all-reduce, three traced runs,
//! medians per run) the send of a put with its signal took 13–16 µs and the signal was
//! applied 11–28 µs after the send began with blocking receivers; with polling ones
//! 5–6 µs and 11–15 µs. The yield gives the core to any thread with work (on Linux 6.18
//! eight such pollers on one core cost a busy thread on that core nothing measurable),
//! and the bound lets an idle connection's receiver block, so a machine with more
//! receivers than cores is not kept busy by them. A dropped port ends a polling
//! receiver at its next empty poll.
//!
//! **Ending.** EOF or a socket error from the peer marks the link dead
//! ([`HalError::PeerDead`] on the next operation; a waiting flush wakes up). Dropping
//! the port half-closes the socket and sets `closing`; the receiver then ends at the
//! peer's EOF or at its next read-timeout tick.

use std::collections::VecDeque;
use std::io::{BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use commhal_hal::{HalError, Rank, Result};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{MsgFlags, recv};

use crate::tcp::BACKEND;
use crate::tcp::hostmem::send_slices;
use crate::tcp::regions::{Mem, RegionTable, Staged, TcpLocal};
use crate::tcp::wire::{HEADER_LEN, Header, MAX_CHUNK, error_frame};

/// How often an idle receiver checks whether its port was dropped.
const RECV_TICK: Duration = Duration::from_millis(200);
/// Bytes of a port's reads the peer may not have answered yet; a read beyond it waits
/// (bounded) for earlier answers.
pub(crate) const MAX_READS_IN_FLIGHT: u64 = 16 * MAX_CHUNK;
/// How long a failed send waits for the receiver to report why the link broke.
const SEND_FAILURE_GRACE: Duration = Duration::from_millis(200);

/// Why a link can no longer be used.
#[derive(Debug, Clone)]
enum Broken {
    /// The peer closed the connection or the socket failed.
    Dead(String),
    /// A frame was refused (by us or by the peer); nothing on the link is trusted.
    Poisoned(String),
}

/// A read the port sent and the peer has not answered yet.
#[derive(Debug)]
pub(crate) struct PendingRead {
    /// Its number on the connection (1 for the port's first read).
    pub(crate) seq: u64,
    /// Where the answer goes: `len` bytes at `off` of `dst` (bounds checked by the port).
    pub(crate) dst: TcpLocal,
    pub(crate) off: u64,
    pub(crate) len: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Highest flush sequence number the peer acknowledged.
    acked: u64,
    broken: Option<Broken>,
    /// The port's reads not answered yet, oldest first.
    reads: VecDeque<PendingRead>,
    /// Their bytes.
    read_bytes: u64,
}

/// A frame queued for the socket by the receiver.
#[derive(Debug)]
struct Control {
    frame: Vec<u8>,
    /// A `READ_DATA` answer: written by the writer thread or the port, never by the
    /// receiver.
    bulk: bool,
}

/// State shared by a port and its receiver thread.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) me: Rank,
    pub(crate) peer: Rank,
    out: Mutex<TcpStream>,
    control: Mutex<VecDeque<Control>>,
    /// Wakes the writer thread when a `READ_DATA` answer is queued.
    control_cv: Condvar,
    state: Mutex<State>,
    cv: Condvar,
    /// Set when the link broke or is closing: the writer thread ends.
    ended: AtomicBool,
    /// Highest flush sequence number the port sent (an `ACK` beyond it is malformed).
    flush_sent: AtomicU64,
    closing: AtomicBool,
    /// Bound on one send making no progress.
    write_timeout: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its data consistent, so a poisoned lock is usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Link {
    /// Wrap a connected stream and start its receiver thread, which polls for `spin`
    /// after traffic before it blocks.
    pub(crate) fn start(
        me: Rank,
        peer: Rank,
        stream: TcpStream,
        table: Arc<RegionTable>,
        write_timeout: Duration,
        spin: Duration,
    ) -> Result<Arc<Link>> {
        let setup = |e| HalError::io(format!("host-tcp: setting up the socket to rank {peer}"), e);
        stream.set_nodelay(true).map_err(setup)?;
        stream
            .set_write_timeout(Some(write_timeout))
            .map_err(setup)?;
        stream.set_read_timeout(Some(RECV_TICK)).map_err(setup)?;
        let reader = stream.try_clone().map_err(setup)?;
        let link = Arc::new(Link {
            me,
            peer,
            out: Mutex::new(stream),
            control: Mutex::new(VecDeque::new()),
            control_cv: Condvar::new(),
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            ended: AtomicBool::new(false),
            flush_sent: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            write_timeout,
        });
        let l = link.clone();
        std::thread::Builder::new()
            .name(format!("host-tcp-w{me}-to-r{peer}"))
            .spawn(move || write_answers(&l))
            .map_err(|e| HalError::io("host-tcp: starting a writer thread", e))?;
        let l = link.clone();
        std::thread::Builder::new()
            .name(format!("host-tcp-r{me}-from-r{peer}"))
            .spawn(move || receive(&l, &table, reader, spin))
            .map_err(|e| {
                link.end();
                HalError::io("host-tcp: starting a receiver thread", e)
            })?;
        Ok(link)
    }

    /// Let the writer thread end.
    fn end(&self) {
        self.ended.store(true, Ordering::Release);
        let _q = lock(&self.control);
        self.control_cv.notify_all();
    }

    fn error_of(&self, b: &Broken) -> HalError {
        match b {
            Broken::Dead(why) => HalError::PeerDead {
                rank: self.peer,
                detail: format!("its host-tcp connection to rank {}: {why}", self.me),
            },
            Broken::Poisoned(why) => HalError::backend(
                BACKEND,
                format!(
                    "the connection between rank {} and rank {} is unusable: {why}; drop this port and connect again",
                    self.me, self.peer
                ),
            ),
        }
    }

    /// `Err` when the link is dead or poisoned.
    pub(crate) fn check(&self) -> Result<()> {
        match &lock(&self.state).broken {
            Some(b) => Err(self.error_of(b)),
            None => Ok(()),
        }
    }

    /// Record the first reason the link broke and wake a waiting flush.
    fn break_with(&self, b: Broken) {
        let mut st = lock(&self.state);
        if st.broken.is_none() {
            tracing::debug!("host-tcp: rank {} <-> rank {}: {b:?}", self.me, self.peer);
            st.broken = Some(b);
        }
        self.cv.notify_all();
        drop(st);
        self.end();
    }

    /// Send one frame (possibly in several slices) from the port, in as few system
    /// calls as the kernel takes it. A failure breaks the link: the stream may hold
    /// half a frame now.
    pub(crate) fn send(&self, parts: &[&[u8]]) -> Result<()> {
        self.send_with(|fd| send_slices(fd, parts))
    }

    /// Send one frame that `write` writes to the socket's descriptor (see `send`).
    pub(crate) fn send_with(&self, write: impl FnOnce(RawFd) -> std::io::Result<()>) -> Result<()> {
        self.check()?;
        let res = {
            let mut s = lock(&self.out);
            write(s.as_raw_fd()).and_then(|()| self.drain_control(&mut s))
        };
        self.pump();
        res.map_err(|e| self.write_failed(e))
    }

    fn write_failed(&self, e: std::io::Error) -> HalError {
        if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
            let why = "a send made no progress within the timeout (the peer stopped reading)";
            self.break_with(Broken::Dead(why.into()));
            HalError::Timeout {
                what: format!(
                    "rank {} to take host-tcp frames from rank {}",
                    self.peer, self.me
                ),
                millis: self.write_timeout.as_millis() as u64,
            }
        } else {
            // The receiver usually learns why right away (the peer's ERROR frame or
            // EOF), which says more than "connection reset": give it a moment.
            let grace = Instant::now() + SEND_FAILURE_GRACE;
            let mut st = lock(&self.state);
            while st.broken.is_none() {
                let now = Instant::now();
                if now >= grace {
                    break;
                }
                st = self
                    .cv
                    .wait_timeout(st, grace - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            drop(st);
            self.break_with(Broken::Dead(format!("sending failed: {e}")));
            self.check()
                .err()
                .unwrap_or_else(|| HalError::io("host-tcp send", e))
        }
    }

    /// Write queued control frames; called with the `out` lock held.
    fn drain_control(&self, s: &mut TcpStream) -> std::io::Result<()> {
        self.drain(s, true)
    }

    /// Write queued control frames from the front, stopping at the first `READ_DATA`
    /// unless `bulk`; called with the `out` lock held.
    fn drain(&self, s: &mut TcpStream, bulk: bool) -> std::io::Result<()> {
        loop {
            let f = {
                let mut q = lock(&self.control);
                match q.front() {
                    Some(c) if bulk || !c.bulk => q.pop_front(),
                    _ => None,
                }
            };
            let Some(f) = f else {
                return Ok(());
            };
            s.write_all(&f.frame)?;
        }
    }

    /// Queue a control frame for the peer and get it written.
    fn queue(&self, frame: Vec<u8>, bulk: bool) {
        lock(&self.control).push_back(Control { frame, bulk });
        self.pump();
    }

    /// Drain `control` if nobody holds `out`; the holder drains after unlocking, so a
    /// queued frame is always written by someone. A `READ_DATA` at the front is left
    /// to the writer thread (woken here): this may run on the receiver.
    fn pump(&self) {
        loop {
            {
                let q = lock(&self.control);
                match q.front() {
                    None => return,
                    Some(c) if c.bulk => {
                        self.control_cv.notify_all();
                        return;
                    }
                    Some(_) => {}
                }
            }
            let Ok(mut s) = self.out.try_lock() else {
                return;
            };
            let r = self.drain(&mut s, false);
            drop(s);
            if let Err(e) = r {
                self.break_with(Broken::Dead(format!(
                    "sending an acknowledgement failed: {e}"
                )));
                return;
            }
        }
    }

    /// Note that a `FLUSH { seq }` is about to be sent.
    pub(crate) fn flush_sent(&self, seq: u64) {
        self.flush_sent.store(seq, Ordering::Release);
    }

    /// Wait until the peer acknowledged flush `seq`, the link broke, or `limit` passed.
    pub(crate) fn wait_ack(&self, seq: u64, limit: Duration) -> Result<()> {
        self.wait_state(
            limit,
            |st| st.acked >= seq,
            |_| {
                format!(
                    "rank {} to acknowledge host-tcp flush #{seq} from rank {} (it has not applied every earlier write yet)",
                    self.peer, self.me
                )
            },
        )
        .map(drop)
    }

    /// Record a read the port is about to send, first waiting (bounded by `limit`)
    /// until the bytes of unanswered reads leave room for it.
    pub(crate) fn expect_read(&self, read: PendingRead, limit: Duration) -> Result<()> {
        let mut st = self.wait_state(
            limit,
            |st| st.broken.is_none() && st.read_bytes + read.len <= MAX_READS_IN_FLIGHT,
            |st| {
                format!(
                    "rank {} to answer host-tcp reads from rank {} ({} bytes outstanding)",
                    self.peer, self.me, st.read_bytes
                )
            },
        )?;
        st.read_bytes += read.len;
        st.reads.push_back(read);
        Ok(())
    }

    /// Wait on the link's state until `ready` holds (checked first), the link broke
    /// (its error), or `limit` passed (a timeout naming `what`); returns the state
    /// still locked.
    fn wait_state(
        &self,
        limit: Duration,
        ready: impl Fn(&State) -> bool,
        what: impl Fn(&State) -> String,
    ) -> Result<MutexGuard<'_, State>> {
        let deadline = Instant::now() + limit;
        let mut st = lock(&self.state);
        loop {
            if ready(&st) {
                return Ok(st);
            }
            if let Some(b) = &st.broken {
                return Err(self.error_of(b));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(HalError::Timeout {
                    what: what(&st),
                    millis: limit.as_millis() as u64,
                });
            }
            st = self
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The oldest unanswered read, if it is read `seq` of `len` bytes.
    fn answered(&self, seq: u64, len: u64) -> std::result::Result<PendingRead, String> {
        let mut st = lock(&self.state);
        match st.reads.front() {
            Some(r) if r.seq == seq && r.len == len => {}
            Some(r) => {
                return Err(format!(
                    "READ_DATA #{seq} of {len} bytes, but the oldest unanswered read is #{} of {} bytes",
                    r.seq, r.len
                ));
            }
            None => return Err(format!("READ_DATA #{seq} for a read that was never sent")),
        }
        let r = st.reads.pop_front().ok_or("no read")?;
        st.read_bytes -= r.len;
        self.cv.notify_all();
        Ok(r)
    }

    /// The port is going away: no more frames from us; let the receiver end.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        let _ = lock(&self.out).shutdown(Shutdown::Write);
        self.end();
    }
}

/// The writer thread: writes `READ_DATA` answers (and whatever control frames follow
/// them) so the receiver never blocks on a large write. Ends with the link.
fn write_answers(link: &Link) {
    loop {
        {
            let mut q = lock(&link.control);
            loop {
                if link.ended.load(Ordering::Acquire) {
                    return;
                }
                if q.iter().any(|c| c.bulk) {
                    break;
                }
                q = link
                    .control_cv
                    .wait_timeout(q, RECV_TICK)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
        let r = {
            let mut s = lock(&link.out);
            link.drain_control(&mut s)
        };
        if let Err(e) = r {
            link.break_with(Broken::Dead(format!("sending read data failed: {e}")));
            return;
        }
        link.pump();
    }
}

/// How the receive loop ended.
enum End {
    /// The port was dropped.
    Closing,
    /// The peer closed or the socket failed.
    Dead(String),
    /// We refused a frame from the peer.
    Refused(String),
    /// The peer refused one of ours.
    PeerRefused(String),
}

/// Bytes the receiver reads from the socket at once. A small frame (a header, a
/// `WRITE` with its payload, the `SIGNAL` sent in the same send) usually arrives whole,
/// and is then taken in one `recv` instead of one per header and payload; a read at
/// least this long with nothing buffered goes to the socket directly (`BufReader`).
const RECV_BUFFER: usize = 64 * 1024;

/// The receiver's end of the socket.
type Inbound<'a> = BufReader<Socket<'a>>;

/// The socket as the receiver reads it: for `spin` after the last bytes arrived it
/// polls (a non-blocking `recv`, then [`std::thread::yield_now`] when there was
/// nothing), and only then blocks in a read (module docs, "Polling").
struct Socket<'a> {
    stream: TcpStream,
    spin: Duration,
    /// When the last bytes (or EOF) arrived.
    last: Instant,
    /// The link's `closing`: a poll that finds it set reports a timeout at once, as a
    /// blocking read does at its next tick, so the receiver ends.
    closing: &'a AtomicBool,
}

impl Read for Socket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // MSG_DONTWAIT, not O_NONBLOCK: the flag would be shared with the port's
        // blocking, timed writes through the cloned descriptor. An empty poll asks
        // `poll`, which reads the socket's state without its lock; a `recv` takes the
        // lock that the port's sends on the same socket take too (module docs).
        while !self.spin.is_zero() && self.last.elapsed() < self.spin {
            let mut fds = [PollFd::new(self.stream.as_fd(), PollFlags::POLLIN)];
            let ready = match poll(&mut fds, PollTimeout::ZERO) {
                Ok(n) => n > 0,
                Err(Errno::EINTR) => false,
                Err(e) => return Err(e.into()),
            };
            if !ready {
                if self.closing.load(Ordering::Acquire) {
                    return Err(ErrorKind::WouldBlock.into());
                }
                std::thread::yield_now();
                continue;
            }
            match recv(self.stream.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT) {
                Ok(n) => {
                    self.last = Instant::now();
                    return Ok(n);
                }
                Err(Errno::EAGAIN) if self.closing.load(Ordering::Acquire) => {
                    return Err(ErrorKind::WouldBlock.into());
                }
                Err(Errno::EAGAIN) => std::thread::yield_now(),
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let n = self.stream.read(buf)?;
        self.last = Instant::now();
        Ok(n)
    }
}

/// Read exactly `buf.len()` bytes, riding out read-timeout ticks unless the port is
/// closing. `Ok(false)`: clean EOF before the first byte (only allowed at a frame start).
fn read_full(link: &Link, s: &mut Inbound<'_>, buf: &mut [u8]) -> std::result::Result<bool, End> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => {
                return Err(End::Dead(
                    "connection closed in the middle of a frame".into(),
                ));
            }
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if link.closing.load(Ordering::Acquire) {
                    return Err(End::Closing);
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(End::Dead(format!("connection failed: {e}"))),
        }
    }
    Ok(true)
}

/// A frame's `len`-byte payload into `payload` (resized to it); the connection
/// closing before it is whole is a dead peer.
fn read_payload(
    link: &Link,
    s: &mut Inbound<'_>,
    payload: &mut Vec<u8>,
    len: u64,
) -> std::result::Result<(), End> {
    payload.resize(len as usize, 0);
    match read_full(link, s, payload) {
        Ok(true) => Ok(()),
        Ok(false) => Err(End::Dead(
            "connection closed in the middle of a frame".into(),
        )),
        Err(end) => Err(end),
    }
}

/// The receiver thread: apply frames until the connection ends, then record why.
fn receive(link: &Link, table: &RegionTable, s: TcpStream, spin: Duration) {
    let socket = Socket {
        stream: s,
        spin,
        last: Instant::now(),
        closing: &link.closing,
    };
    let mut inbound = BufReader::with_capacity(RECV_BUFFER, socket);
    let end = serve(link, table, &mut inbound);
    let s = &inbound.get_ref().stream;
    match end {
        End::Closing => {}
        End::Dead(why) => {
            link.break_with(Broken::Dead(why));
            let _ = s.shutdown(Shutdown::Both);
        }
        End::Refused(why) => {
            tracing::warn!(
                "host-tcp: rank {} refused a frame from rank {}: {why}; closing the connection",
                link.me,
                link.peer
            );
            link.break_with(Broken::Poisoned(format!(
                "rank {} sent a frame rank {} refused: {why}",
                link.peer, link.me
            )));
            lock(&link.control).push_back(Control {
                frame: error_frame(&why),
                bulk: false,
            });
            // The port cannot send any more (link broken), so this waits at most for
            // one frame it is writing, which is bounded by the write timeout.
            {
                let mut out = lock(&link.out);
                let _ = link.drain_control(&mut out);
            }
            let _ = s.shutdown(Shutdown::Both);
        }
        End::PeerRefused(why) => {
            link.break_with(Broken::Poisoned(format!(
                "rank {} refused a frame from rank {}: {why}",
                link.peer, link.me
            )));
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn serve(link: &Link, table: &RegionTable, s: &mut Inbound<'_>) -> End {
    let mut payload = Vec::new();
    // `READ` frames answered so far (each answer carries its number).
    let mut reads = 0u64;
    // Device memory written through copies since the last FLUSH: settled before its ACK.
    let mut unsettled = Unsettled::default();
    loop {
        let mut h = [0u8; HEADER_LEN];
        match read_full(link, s, &mut h) {
            Ok(true) => {}
            Ok(false) => {
                return End::Dead(
                    "closed the connection (process exited or dropped its port)".into(),
                );
            }
            Err(end) => return end,
        }
        let header = match Header::decode(&h) {
            Ok(h) => h,
            Err(why) => return End::Refused(format!("malformed frame: {why}")),
        };
        match header {
            Header::Write {
                region,
                offset,
                len,
            } => {
                // `decode` bounds `len` by MAX_CHUNK, so this allocation is bounded.
                debug_assert!(len <= MAX_CHUNK);
                let r = match table.get(region) {
                    Ok(r) => r,
                    Err(why) => return End::Refused(format!("WRITE to region {region}: {why}")),
                };
                unsettled.note(r.mem());
                // The payload goes from the socket straight into the buffer the write
                // copies from; a failed read ends the connection with its own reason.
                let mut lost = None;
                let mut fill = |buf: &mut [u8]| match read_full(link, s, buf) {
                    Ok(true) => Ok(()),
                    got => {
                        lost = Some(got.err().unwrap_or_else(|| {
                            End::Dead("connection closed in the middle of a frame".into())
                        }));
                        Err(HalError::invalid("the frame's payload was not read"))
                    }
                };
                let written = r.mem().write_with(offset, len, &mut payload, &mut fill);
                if let Some(end) = lost {
                    return end;
                }
                if let Err(why) = written {
                    return End::Refused(format!("WRITE to region {region}: {why}"));
                }
            }
            Header::Signal {
                region,
                offset,
                add,
            } => {
                let applied = table.get(region).and_then(|r| {
                    unsettled.publish_for(r.mem())?;
                    unsettled.note(r.mem());
                    r.mem()
                        .signal(offset, add, table.on_signal.get())
                        .map_err(|e| e.to_string())
                });
                if let Err(why) = applied {
                    return End::Refused(format!("SIGNAL on region {region}: {why}"));
                }
            }
            Header::Flush { seq } => {
                if let Err(why) = unsettled.settle() {
                    return End::Refused(format!("FLUSH #{seq}: {why}"));
                }
                // Everything before this frame was applied on this thread; publish it
                // to whoever learns of the flush.
                std::sync::atomic::fence(Ordering::Release);
                link.queue(Header::Ack { seq }.encode().to_vec(), false);
            }
            Header::Ack { seq } => {
                if seq > link.flush_sent.load(Ordering::Acquire) {
                    return End::Refused(format!("ACK #{seq} for a flush that was never sent"));
                }
                // The bytes of earlier reads must have landed when the flush returns.
                if let Err(why) = unsettled.settle() {
                    return End::Refused(format!("ACK #{seq}: {why}"));
                }
                let mut st = lock(&link.state);
                st.acked = st.acked.max(seq);
                link.cv.notify_all();
            }
            Header::Read {
                region,
                offset,
                len,
            } => {
                // `decode` bounds `len` by MAX_CHUNK; the peer's port bounds how many
                // answers it waits for (MAX_READS_IN_FLIGHT), so the queue is bounded.
                reads += 1;
                // The answer shows every earlier WRITE of this connection.
                if let Err(why) = unsettled.settle() {
                    return End::Refused(format!("READ of region {region}: {why}"));
                }
                let mut frame = Header::ReadData { seq: reads, len }.encode().to_vec();
                frame.resize(HEADER_LEN + len as usize, 0);
                if let Err(why) = table.get(region).and_then(|r| {
                    r.mem()
                        .read(offset, &mut frame[HEADER_LEN..])
                        .map_err(|e| e.to_string())
                }) {
                    return End::Refused(format!("READ of region {region}: {why}"));
                }
                link.queue(frame, true);
            }
            Header::ReadData { seq, len } => {
                let read = match link.answered(seq, len) {
                    Ok(r) => r,
                    Err(why) => return End::Refused(why),
                };
                if let Err(end) = read_payload(link, s, &mut payload, len) {
                    return end;
                }
                // The port checked the range when it sent the read, and `read.dst`
                // keeps the registration alive.
                unsettled.note(read.dst.mem());
                if let Err(e) = read.dst.write(read.off, &payload) {
                    return End::Refused(format!("READ_DATA #{seq}: {e}"));
                }
            }
            Header::Error { len } => {
                let mut text = vec![0u8; len as usize];
                let why = match read_full(link, s, &mut text) {
                    Ok(true) => String::from_utf8_lossy(&text).into_owned(),
                    _ => "(the reason was cut off)".to_string(),
                };
                return End::PeerRefused(why);
            }
        }
    }
}

/// The device memory (reached through copies) a receiver wrote since the last FLUSH.
#[derive(Default)]
struct Unsettled(Vec<Arc<Staged>>);

impl Unsettled {
    fn note(&mut self, mem: &Mem) {
        if let Mem::Staged(d) = mem
            && !self.0.iter().any(|x| Arc::ptr_eq(x, d))
        {
            self.0.push(d.clone());
        }
    }

    /// Before a signal on `target`: settle every region whose writes a store into
    /// `target` does not order behind it (another queue, or host memory as target).
    fn publish_for(&mut self, target: &Mem) -> std::result::Result<(), String> {
        let mut i = 0;
        while i < self.0.len() {
            let d = &self.0[i];
            let ordered = match target {
                Mem::Staged(t) => Arc::ptr_eq(d, t) || (t.queue() != 0 && d.queue() == t.queue()),
                _ => false,
            };
            if ordered {
                i += 1;
                continue;
            }
            d.settle().map_err(|e| e.to_string())?;
            self.0.swap_remove(i);
        }
        Ok(())
    }

    /// Wait until every write and signal applied to them landed.
    fn settle(&mut self) -> std::result::Result<(), String> {
        for d in self.0.drain(..) {
            d.settle().map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}
