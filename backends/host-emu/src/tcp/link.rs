//! One `host-tcp` connection: the state shared by the port (sender) and the
//! receiver thread, and the receiver thread itself.
//!
//! **Writing to the socket.** The port writes its frames under the `out` lock. The
//! receiver must never block behind the port (if both ends' receivers waited on their
//! ports while both ports waited on full socket buffers, nothing would move), so it
//! queues its `ACK`s in `control` and only *tries* the lock; whoever holds the lock
//! drains `control` after its own frame and again after unlocking ([`Link::pump`]).
//!
//! **Receiving.** Frames are applied in arrival order, which is send order (one TCP
//! stream): a `SIGNAL` after `WRITE`s is applied after them, a `FLUSH` is acknowledged
//! after everything before it was applied. Every frame is validated (header, region
//! id, bounds, alignment) before anything is written; a bad frame is answered with an
//! `ERROR` frame and the connection is closed, and from then on the port's operations
//! fail with an error naming the peer. The receiver never panics on peer input.
//!
//! **Ending.** EOF or a socket error from the peer marks the link dead
//! ([`HalError::PeerDead`] on the next operation; a waiting flush wakes up). Dropping
//! the port half-closes the socket and sets `closing`; the receiver then ends at the
//! peer's EOF or at its next read-timeout tick.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use commhal_hal::{HalError, Rank, Result};

use crate::tcp::BACKEND;
use crate::tcp::regions::RegionTable;
use crate::tcp::wire::{HEADER_LEN, Header, MAX_CHUNK, error_frame};

/// How often an idle receiver checks whether its port was dropped.
const RECV_TICK: Duration = Duration::from_millis(200);
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

#[derive(Debug, Default)]
struct State {
    /// Highest flush sequence number the peer acknowledged.
    acked: u64,
    broken: Option<Broken>,
}

/// State shared by a port and its receiver thread.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) me: Rank,
    pub(crate) peer: Rank,
    out: Mutex<TcpStream>,
    control: Mutex<VecDeque<Vec<u8>>>,
    state: Mutex<State>,
    cv: Condvar,
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
    /// Wrap a connected stream and start its receiver thread.
    pub(crate) fn start(
        me: Rank,
        peer: Rank,
        stream: TcpStream,
        table: Arc<RegionTable>,
        write_timeout: Duration,
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
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            flush_sent: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            write_timeout,
        });
        let l = link.clone();
        std::thread::Builder::new()
            .name(format!("host-tcp-r{me}-from-r{peer}"))
            .spawn(move || receive(&l, &table, reader))
            .map_err(|e| HalError::io("host-tcp: starting a receiver thread", e))?;
        Ok(link)
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
    }

    /// Send one frame (possibly in several slices) from the port. A failure breaks the
    /// link: the stream may hold half a frame now.
    pub(crate) fn send(&self, parts: &[&[u8]]) -> Result<()> {
        self.check()?;
        let res = {
            let mut s = lock(&self.out);
            let mut r = Ok(());
            for p in parts {
                r = s.write_all(p);
                if r.is_err() {
                    break;
                }
            }
            r.and_then(|()| self.drain_control(&mut s))
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
        loop {
            let Some(f) = lock(&self.control).pop_front() else {
                return Ok(());
            };
            s.write_all(&f)?;
        }
    }

    /// Drain `control` if nobody holds `out`; the holder drains after unlocking, so a
    /// queued frame is always written by someone.
    fn pump(&self) {
        loop {
            if lock(&self.control).is_empty() {
                return;
            }
            let Ok(mut s) = self.out.try_lock() else {
                return;
            };
            let r = self.drain_control(&mut s);
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
        let deadline = Instant::now() + limit;
        let mut st = lock(&self.state);
        loop {
            if st.acked >= seq {
                return Ok(());
            }
            if let Some(b) = &st.broken {
                return Err(self.error_of(b));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(HalError::Timeout {
                    what: format!(
                        "rank {} to acknowledge host-tcp flush #{seq} from rank {} (it has not applied every earlier write yet)",
                        self.peer, self.me
                    ),
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

    /// The port is going away: no more frames from us; let the receiver end.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        let _ = lock(&self.out).shutdown(Shutdown::Write);
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

/// Read exactly `buf.len()` bytes, riding out read-timeout ticks unless the port is
/// closing. `Ok(false)`: clean EOF before the first byte (only allowed at a frame start).
fn read_full(link: &Link, s: &mut TcpStream, buf: &mut [u8]) -> std::result::Result<bool, End> {
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

/// The receiver thread: apply frames until the connection ends, then record why.
fn receive(link: &Link, table: &RegionTable, mut s: TcpStream) {
    let end = serve(link, table, &mut s);
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
            lock(&link.control).push_back(error_frame(&why));
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

fn serve(link: &Link, table: &RegionTable, s: &mut TcpStream) -> End {
    let mut payload = Vec::new();
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
                payload.resize(len as usize, 0);
                match read_full(link, s, &mut payload) {
                    Ok(true) => {}
                    Ok(false) => {
                        return End::Dead("connection closed in the middle of a frame".into());
                    }
                    Err(end) => return end,
                }
                if let Err(why) = table
                    .get(region)
                    .and_then(|r| r.mem().write(offset, &payload).map_err(|e| e.to_string()))
                {
                    return End::Refused(format!("WRITE to region {region}: {why}"));
                }
            }
            Header::Signal {
                region,
                offset,
                add,
            } => {
                let applied = table.get(region).and_then(|r| {
                    r.mem()
                        .atomic_u64(offset)
                        .map(|w| {
                            w.fetch_add(add, Ordering::Release);
                            if let Some(hook) = table.on_signal.get() {
                                hook(w);
                            }
                        })
                        .map_err(|e| e.to_string())
                });
                if let Err(why) = applied {
                    return End::Refused(format!("SIGNAL on region {region}: {why}"));
                }
            }
            Header::Flush { seq } => {
                // Everything before this frame was applied on this thread; publish it
                // to whoever learns of the flush.
                std::sync::atomic::fence(Ordering::Release);
                lock(&link.control).push_back(Header::Ack { seq }.encode().to_vec());
                link.pump();
            }
            Header::Ack { seq } => {
                if seq > link.flush_sent.load(Ordering::Acquire) {
                    return End::Refused(format!("ACK #{seq} for a flush that was never sent"));
                }
                let mut st = lock(&link.state);
                st.acked = st.acked.max(seq);
                link.cv.notify_all();
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
