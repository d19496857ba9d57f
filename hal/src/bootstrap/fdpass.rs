//! File descriptors between processes of one host (`SCM_RIGHTS` over Unix sockets).
//!
//! Two public primitives, [`send_with_fds`] and [`recv_with_fds`], work on any
//! connected Unix stream socket. The TCP bootstrap builds on them: every rank listens
//! on an abstract Unix socket named `commhal-fd-<digest of the job secret>-<rank>`
//! (so unrelated jobs never collide and the name reveals nothing usable about the
//! secret), binds it before it joins the job (so nobody can take the name afterwards),
//! and connects to a peer's socket the first time it sends that peer descriptors.
//! Each connection starts with a hello carrying the job secret; a wrong secret is
//! refused and logged. Abstract sockets live in the network namespace, so this only
//! reaches peers on the same host (and in the same network namespace).

use std::collections::HashMap;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

use crate::bootstrap::gate::{Gate, HELLO_WAIT, Pass};
use crate::bootstrap::mailbox::Mailbox;
use crate::bootstrap::unique_id::{digest, hex, secrets_equal};
use crate::error::{HalError, Result};
use crate::topology::Rank;

/// Most descriptors in one message (the kernel's `SCM_MAX_FD`).
pub const MAX_FDS: usize = 253;

const MAGIC: [u8; 4] = *b"CMFD";
const VERSION: u16 = 1;
pub(crate) const HELLO_LEN: usize = 4 + 2 + 4 + 16;
pub(crate) const HEADER_LEN: usize = 24;

/// Send `data` (at least one byte) with `fds` attached, in one `sendmsg`. The
/// descriptors stay open here; the receiver gets its own copies.
pub fn send_with_fds(sock: &impl AsFd, data: &[u8], fds: &[OwnedFd]) -> Result<()> {
    if data.is_empty() {
        return Err(HalError::invalid(
            "send_with_fds needs at least one data byte",
        ));
    }
    if fds.len() > MAX_FDS {
        return Err(HalError::invalid(format!(
            "{} descriptors in one message; the kernel passes at most {MAX_FDS}: split them",
            fds.len()
        )));
    }
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let cmsgs = if raw.is_empty() {
        vec![]
    } else {
        vec![ControlMessage::ScmRights(&raw)]
    };
    let fd = sock.as_fd().as_raw_fd();
    let mut sent = loop {
        match sendmsg::<()>(
            fd,
            &[IoSlice::new(data)],
            &cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Err(Errno::EINTR) => continue,
            r => break r.map_err(|e| HalError::io("sending descriptors", e.into()))?,
        }
    };
    // The descriptors went with the first byte; finish any short write plainly.
    while sent < data.len() {
        match nix::sys::socket::send(fd, &data[sent..], MsgFlags::MSG_NOSIGNAL) {
            Err(Errno::EINTR) => continue,
            Ok(n) => sent += n,
            Err(e) => return Err(HalError::io("sending descriptors", e.into())),
        }
    }
    Ok(())
}

/// Receive into `buf` with up to [`MAX_FDS`] descriptors attached. Returns the bytes
/// read (0: the peer closed) and the descriptors, owned by the caller and
/// close-on-exec. Fewer than `buf.len()` bytes may arrive.
pub fn recv_with_fds(sock: &impl AsFd, buf: &mut [u8]) -> Result<(usize, Vec<OwnedFd>)> {
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let fd = sock.as_fd().as_raw_fd();
    loop {
        let mut iov = [IoSliceMut::new(buf)];
        let msg = match recvmsg::<()>(fd, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Err(Errno::EINTR) => continue,
            r => r.map_err(|e| HalError::io("receiving descriptors", e.into()))?,
        };
        let mut fds = Vec::new();
        for c in msg
            .cmsgs()
            .map_err(|e| HalError::io("reading control messages", e.into()))?
        {
            if let ControlMessageOwned::ScmRights(raw) = c {
                fds.extend(raw.into_iter().map(owned));
            }
        }
        if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
            return Err(HalError::Bootstrap(format!(
                "descriptors were truncated (more than {MAX_FDS} in one message)"
            )));
        }
        return Ok((msg.bytes, fds));
    }
}

/// A connected pair of `SOCK_SEQPACKET` Unix sockets (message boundaries kept,
/// close-on-exec), each send and receive bounded by `timeout` (then an error, never a
/// hang: two ranks that both send more than the socket buffers hold before either
/// receives would otherwise wait on each other for ever). One end stays; the other
/// goes to a peer of the same host with [`crate::bootstrap::Bootstrap::send_fds`] (and
/// [`set_timeouts`] there), after which the two pass descriptors directly with
/// [`send_with_fds`] / [`recv_with_fds`].
pub fn seqpacket_pair(timeout: Duration) -> Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| HalError::io("creating a Unix socket pair", e.into()))?;
    set_timeouts(&a, timeout)?;
    set_timeouts(&b, timeout)?;
    Ok((a, b))
}

/// Bound every send and receive on `sock` by `timeout` (at least 1 ms).
pub fn set_timeouts(sock: &impl AsFd, timeout: Duration) -> Result<()> {
    use nix::sys::socket::{setsockopt, sockopt::ReceiveTimeout, sockopt::SendTimeout};
    use nix::sys::time::TimeVal;
    let t = timeout.max(Duration::from_millis(1));
    let tv = TimeVal::new(
        t.as_secs().min(i64::MAX as u64) as i64,
        i64::from(t.subsec_micros()),
    );
    setsockopt(sock, ReceiveTimeout, &tv)
        .and_then(|()| setsockopt(sock, SendTimeout, &tv))
        .map_err(|e| HalError::io("bounding a socket's sends and receives", e.into()))
}

/// Take ownership of a descriptor the kernel just installed for us.
fn owned(raw: RawFd) -> OwnedFd {
    // SAFETY: `raw` came out of an SCM_RIGHTS control message of our own recvmsg: the
    // kernel installed it in this process's table just now and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(raw) }
}

/// The abstract socket name of `rank` in the job with `secret`.
pub(crate) fn socket_name(secret: &[u8; 16], rank: Rank) -> String {
    let d = digest(&[b"commhal fd socket v1", secret]);
    format!("commhal-fd-{}-{rank}", hex(&d[..12]))
}

fn unix_addr(name: &str) -> std::io::Result<UnixAddr> {
    UnixAddr::from_abstract_name(name.as_bytes())
}

/// A rank's bound descriptor socket, before it knows the world.
#[derive(Debug)]
pub(crate) struct FdListener {
    listener: UnixListener,
    name: String,
}

impl FdListener {
    /// Bind `rank`'s abstract socket. Fails if another process holds the name (the
    /// same rank of the same job started twice).
    pub fn bind(secret: &[u8; 16], rank: Rank) -> Result<FdListener> {
        let name = socket_name(secret, rank);
        let listener = unix_addr(&name)
            .and_then(|a| UnixListener::bind_addr(&a))
            .map_err(|e| {
                HalError::io(
                    format!(
                        "binding rank {rank}'s descriptor socket @{name} (is rank {rank} of this job already running?)"
                    ),
                    e,
                )
            })?;
        Ok(FdListener { listener, name })
    }

    /// Start accepting peers' descriptor connections into `mailbox`.
    pub fn start(
        self,
        me: Rank,
        size: u32,
        secret: [u8; 16],
        timeout: Duration,
        mailbox: Arc<Mailbox>,
    ) -> Result<FdEndpoint> {
        let shutdown = Arc::new(AtomicBool::new(false));
        let stop = shutdown.clone();
        let listener = self.listener;
        let gate = Gate::new(size);
        thread::Builder::new()
            .name(format!("commhal-fd-accept-r{me}"))
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    match conn {
                        Ok(s) => {
                            let Some(pass) = gate.enter() else {
                                tracing::warn!(
                                    "rank {me}: dropped a descriptor connection: {} connections are already waiting to say hello",
                                    gate.cap()
                                );
                                continue;
                            };
                            let mb = mailbox.clone();
                            let spawned = thread::Builder::new()
                                .name(format!("commhal-fd-recv-r{me}"))
                                .spawn(move || {
                                    serve_fd_conn(s, me, size, secret, timeout, pass, mb)
                                });
                            if let Err(e) = spawned {
                                tracing::warn!(
                                    "rank {me}: cannot start a descriptor reader thread: {e}"
                                );
                            }
                        }
                        Err(e) => {
                            tracing::warn!(
                                "rank {me}: accepting a descriptor connection failed: {e}"
                            );
                            thread::sleep(Duration::from_millis(10));
                        }
                    }
                }
            })
            .map_err(|e| HalError::io("starting the descriptor acceptor thread", e))?;
        Ok(FdEndpoint {
            me,
            secret,
            timeout,
            own_name: self.name,
            shutdown,
            out: Mutex::new(HashMap::new()),
        })
    }
}

/// Read a peer's hello, then file every descriptor batch it sends.
fn serve_fd_conn(
    mut s: UnixStream,
    me: Rank,
    size: u32,
    secret: [u8; 16],
    timeout: Duration,
    pass: Pass,
    mailbox: Arc<Mailbox>,
) {
    let mut hello = [0u8; HELLO_LEN];
    let read = s
        .set_read_timeout(Some(timeout.min(HELLO_WAIT)))
        .and_then(|_| s.read_exact(&mut hello));
    // Authenticated or refused below: either way no longer a pending hello.
    drop(pass);
    if let Err(e) = read {
        tracing::warn!("rank {me}: refused a descriptor connection that sent no hello: {e}");
        return;
    }
    let from = match parse_hello(&hello, &secret, size) {
        Ok(from) => from,
        Err(why) => {
            tracing::warn!("rank {me}: refused a descriptor connection: {why}");
            return;
        }
    };
    if s.set_read_timeout(None).is_err() {
        return;
    }
    mailbox.fd_link(from, true);
    loop {
        match read_fd_message(&mut s) {
            Ok(Some((tag, fds))) => mailbox.put_fds(from, tag, fds),
            Ok(None) => break,
            Err(e) => {
                tracing::warn!("rank {me}: dropping rank {from}'s descriptor connection: {e}");
                break;
            }
        }
    }
    mailbox.fd_link(from, false);
}

/// One (tag, descriptors) message, or `None` at end of stream.
fn read_fd_message(s: &mut UnixStream) -> Result<Option<(u64, Vec<OwnedFd>)>> {
    let mut header = [0u8; HEADER_LEN];
    let (n, fds) = recv_with_fds(s, &mut header)?;
    if n == 0 {
        return Ok(None);
    }
    if n < HEADER_LEN {
        s.read_exact(&mut header[n..])
            .map_err(|e| HalError::io("reading a descriptor message header", e))?;
    }
    let tag = parse_header(&header, fds.len())?;
    Ok(Some((tag, fds)))
}

/// Check a descriptor connection's hello: the rank it claims, or why it is refused.
pub(crate) fn parse_hello(
    hello: &[u8; HELLO_LEN],
    secret: &[u8; 16],
    size: u32,
) -> std::result::Result<Rank, String> {
    let from = u32::from_le_bytes([hello[6], hello[7], hello[8], hello[9]]);
    if hello[0..4] != MAGIC || u16::from_le_bytes([hello[4], hello[5]]) != VERSION {
        return Err("bad magic or version".into());
    }
    if !secrets_equal(&hello[10..26], secret) {
        return Err(format!("claims rank {from} with the wrong job secret"));
    }
    if from >= size {
        return Err(format!("claims rank {from} of a {size}-rank job"));
    }
    Ok(from)
}

/// Check a descriptor message's header against the `nfds` descriptors that came
/// with it; returns its tag.
pub(crate) fn parse_header(header: &[u8; HEADER_LEN], nfds: usize) -> Result<u64> {
    if header[0..4] != MAGIC || u16::from_le_bytes([header[4], header[5]]) != VERSION {
        return Err(HalError::Bootstrap("bad descriptor message header".into()));
    }
    let mut tag = [0u8; 8];
    tag.copy_from_slice(&header[8..16]);
    let count = u32::from_le_bytes([header[16], header[17], header[18], header[19]]) as usize;
    if count != nfds {
        return Err(HalError::Bootstrap(format!(
            "message announced {count} descriptors but carried {nfds}"
        )));
    }
    Ok(u64::from_le_bytes(tag))
}

/// A rank's side of descriptor passing: its accepting socket (served by a background
/// thread) and its connections to peers, opened on first use.
#[derive(Debug)]
pub(crate) struct FdEndpoint {
    me: Rank,
    secret: [u8; 16],
    timeout: Duration,
    own_name: String,
    shutdown: Arc<AtomicBool>,
    out: Mutex<HashMap<Rank, Arc<Mutex<UnixStream>>>>,
}

impl FdEndpoint {
    /// Send `fds` to `peer` under `tag`. Batches to one (peer, tag) arrive in order.
    pub fn send(&self, peer: Rank, tag: u64, fds: &[OwnedFd]) -> Result<()> {
        if fds.len() > MAX_FDS {
            return Err(HalError::invalid(format!(
                "{} descriptors in one send_fds; at most {MAX_FDS}: split them",
                fds.len()
            )));
        }
        let conn = self.connection(peer)?;
        let mut header = [0u8; HEADER_LEN];
        header[0..4].copy_from_slice(&MAGIC);
        header[4..6].copy_from_slice(&VERSION.to_le_bytes());
        header[8..16].copy_from_slice(&tag.to_le_bytes());
        header[16..20].copy_from_slice(&(fds.len() as u32).to_le_bytes());
        let s = conn.lock().unwrap_or_else(|p| p.into_inner());
        send_with_fds(&*s, &header, fds).map_err(|e| HalError::PeerDead {
            rank: peer,
            detail: format!("sending descriptors failed: {e}"),
        })
    }

    fn connection(&self, peer: Rank) -> Result<Arc<Mutex<UnixStream>>> {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = out.get(&peer) {
            return Ok(c.clone());
        }
        let name = socket_name(&self.secret, peer);
        let mut s = unix_addr(&name)
            .and_then(|a| UnixStream::connect_addr(&a))
            .map_err(|e| {
                HalError::Bootstrap(format!(
                    "cannot reach rank {peer}'s descriptor socket @{name}: {e}; descriptors pass only between processes on the same host and network namespace"
                ))
            })?;
        let mut hello = [0u8; HELLO_LEN];
        hello[0..4].copy_from_slice(&MAGIC);
        hello[4..6].copy_from_slice(&VERSION.to_le_bytes());
        hello[6..10].copy_from_slice(&self.me.to_le_bytes());
        hello[10..26].copy_from_slice(&self.secret);
        s.set_write_timeout(Some(self.timeout))
            .and_then(|_| s.write_all(&hello))
            .map_err(|e| HalError::io(format!("greeting rank {peer}'s descriptor socket"), e))?;
        let c = Arc::new(Mutex::new(s));
        out.insert(peer, c.clone());
        Ok(c)
    }
}

impl Drop for FdEndpoint {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Release);
        // Wake the acceptor so it sees the flag; it exits and closes the socket.
        if let Ok(a) = unix_addr(&self.own_name) {
            let _ = UnixStream::connect_addr(&a);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom};

    #[test]
    fn pass_a_pipe_over_a_socketpair() {
        let (a, b) = UnixStream::pair().unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        send_with_fds(&a, b"hi", &[r]).unwrap();
        let mut buf = [0u8; 2];
        let (n, fds) = recv_with_fds(&b, &mut buf).unwrap();
        assert_eq!((n, &buf), (2, b"hi"));
        assert_eq!(fds.len(), 1);
        let mut wf = std::fs::File::from(w);
        wf.write_all(b"through").unwrap();
        drop(wf);
        let mut got = String::new();
        std::fs::File::from(fds.into_iter().next().unwrap())
            .read_to_string(&mut got)
            .unwrap();
        assert_eq!(got, "through");
    }

    #[test]
    fn endpoint_round_trip_and_wrong_secret() {
        let secret = crate::bootstrap::unique_id::random_secret().unwrap();
        let mb = Arc::new(Mailbox::default());
        let l1 = FdListener::bind(&secret, 1).unwrap();
        // Same job, same rank twice: refused.
        assert!(FdListener::bind(&secret, 1).is_err());
        let _e1 = l1
            .start(1, 2, secret, Duration::from_secs(5), mb.clone())
            .unwrap();
        let l0 = FdListener::bind(&secret, 0).unwrap();
        let e0 = l0
            .start(
                0,
                2,
                secret,
                Duration::from_secs(5),
                Arc::new(Mailbox::default()),
            )
            .unwrap();

        // A stranger with another secret is refused and files nothing.
        let mut bad =
            UnixStream::connect_addr(&unix_addr(&socket_name(&secret, 1)).unwrap()).unwrap();
        let mut hello = [0u8; HELLO_LEN];
        hello[0..4].copy_from_slice(&MAGIC);
        hello[4..6].copy_from_slice(&VERSION.to_le_bytes());
        bad.write_all(&hello).unwrap();

        let f = nix::sys::memfd::memfd_create("t", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap();
        let mut file = std::fs::File::from(f);
        file.write_all(b"memfd bytes").unwrap();
        e0.send(1, 9, &[OwnedFd::from(file)]).unwrap();
        let when = std::time::Instant::now() + Duration::from_secs(5);
        let got = mb.take_fds(0, 9, when, 5000, &|| "fds".into()).unwrap();
        let mut f = std::fs::File::from(got.into_iter().next().unwrap());
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "memfd bytes");
        // The stranger's connection was closed by the listener.
        let mut b = [0u8; 1];
        assert_eq!(bad.read(&mut b).unwrap_or(0), 0);
    }

    #[test]
    fn names_differ_by_secret_and_rank() {
        let a = [1u8; 16];
        let b = [2u8; 16];
        assert_ne!(socket_name(&a, 0), socket_name(&b, 0));
        assert_ne!(socket_name(&a, 0), socket_name(&a, 1));
        assert!(!socket_name(&a, 0).contains(&hex(&a)));
    }

    /// Held by tests that count this process's threads, so they do not count each
    /// other's.
    pub(crate) static COUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Threads of this process.
    pub(crate) fn threads() -> usize {
        std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
    }

    /// Connections that never say hello cost no more than a capped number of threads
    /// (each would otherwise hold a thread and a descriptor until the timeout).
    #[test]
    fn silent_connections_are_capped() {
        let _counting = COUNTING.lock().unwrap_or_else(|p| p.into_inner());
        let secret = crate::bootstrap::unique_id::random_secret().unwrap();
        let l = FdListener::bind(&secret, 0).unwrap();
        let _e = l
            .start(
                0,
                2,
                secret,
                Duration::from_secs(20),
                Arc::new(Mailbox::default()),
            )
            .unwrap();
        let before = threads();
        let addr = unix_addr(&socket_name(&secret, 0)).unwrap();
        let silent: Vec<UnixStream> = (0..300)
            .filter_map(|_| UnixStream::connect_addr(&addr).ok())
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let grown = threads().saturating_sub(before);
        assert!(
            grown < 150,
            "{} silent connections started {grown} threads",
            silent.len()
        );
    }
}
