//! Setting up one `host-tcp` connection through the bootstrap.
//!
//! Of the two ranks, the **lower rank listens**:
//! 1. it binds a TCP listener (loopback when both ranks are on one host, otherwise all
//!    interfaces), draws a random 128-bit per-connection token and sends an
//!    [`Invitation`] (addresses + token + ranks + tag + its transport instance) to the
//!    peer through the bootstrap under the connection's tag;
//! 2. the higher rank receives it, connects to the first address that answers and
//!    sends a [`Hello`] presenting the token;
//! 3. the listener answers [`ACCEPTED`], or [`REFUSED`] plus a reason and closes, then
//!    keeps waiting for the right peer. Wrong tokens, wrong ranks/tags and garbage are
//!    refused and logged; only the bootstrap timeout ends the wait.
//!
//! **Addresses offered across hosts**: `COMMHAL_HOST_TCP_ADDR` (an IP of this host the
//! peers can reach) if set, else the addresses the host name resolves to (IPv4,
//! loopback excluded); the listener then binds all IPv4 interfaces.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use commhal_hal::settings::launch::HOST_TCP_ADDR;
use commhal_hal::transport::PeerContext;
use commhal_hal::{HalError, Rank, Result};

/// The listener's answer to a good [`Hello`].
pub const ACCEPTED: &[u8; 8] = b"HTCPOK01";
/// The listener's answer to a bad [`Hello`]; a short UTF-8 reason follows, then EOF.
pub const REFUSED: &[u8; 8] = b"HTCPNO01";

const INVITATION_MAGIC: &[u8; 8] = b"HTCPINV1";
const HELLO_MAGIC: &[u8; 8] = b"HTCPHLO1";
/// Longest a single accepted socket may take to present its hello.
const HELLO_WAIT: Duration = Duration::from_secs(5);
const MAX_ADDRS: usize = 16;

/// What the listening rank sends through the bootstrap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invitation {
    /// The secret the connector must present.
    pub token: [u8; 16],
    /// The listening rank.
    pub listener: Rank,
    /// The rank expected to connect.
    pub connector: Rank,
    /// The connection's tag ([`PeerContext::tag`]).
    pub tag: u64,
    /// The listener's transport instance (owner of its exports).
    pub instance: u64,
    /// Where to connect, in order of preference.
    pub addrs: Vec<SocketAddr>,
}

impl Invitation {
    /// Bytes for the bootstrap message.
    pub fn encode(&self) -> Vec<u8> {
        let mut m = INVITATION_MAGIC.to_vec();
        m.extend_from_slice(&self.token);
        m.extend_from_slice(&self.listener.to_le_bytes());
        m.extend_from_slice(&self.connector.to_le_bytes());
        m.extend_from_slice(&self.tag.to_le_bytes());
        m.extend_from_slice(&self.instance.to_le_bytes());
        m.push(self.addrs.len().min(MAX_ADDRS) as u8);
        for a in self.addrs.iter().take(MAX_ADDRS) {
            let s = a.to_string();
            m.push(s.len() as u8);
            m.extend_from_slice(s.as_bytes());
        }
        m
    }

    /// Parse a bootstrap message from `from`.
    pub fn decode(from: Rank, m: &[u8]) -> Result<Invitation> {
        let bad = |what: &str| {
            HalError::Bootstrap(format!(
                "rank {from} sent a malformed host-tcp invitation ({what}); do both ranks run the same commhal version and use the same tag?"
            ))
        };
        let mut r = Cursor { m, at: 0 };
        if r.take(8).ok_or_else(|| bad("short"))? != INVITATION_MAGIC {
            return Err(bad("wrong magic"));
        }
        let mut token = [0u8; 16];
        token.copy_from_slice(r.take(16).ok_or_else(|| bad("short"))?);
        let listener = r.u32().ok_or_else(|| bad("short"))?;
        let connector = r.u32().ok_or_else(|| bad("short"))?;
        let tag = r.u64().ok_or_else(|| bad("short"))?;
        let instance = r.u64().ok_or_else(|| bad("short"))?;
        let n = *r.take(1).ok_or_else(|| bad("short"))?.first().unwrap_or(&0) as usize;
        let mut addrs = Vec::with_capacity(n);
        for _ in 0..n {
            let len = *r.take(1).ok_or_else(|| bad("short"))?.first().unwrap_or(&0) as usize;
            let s = r.take(len).ok_or_else(|| bad("short address"))?;
            let a = std::str::from_utf8(s)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad("unparsable address"))?;
            addrs.push(a);
        }
        if r.at != m.len() {
            return Err(bad("trailing bytes"));
        }
        Ok(Invitation {
            token,
            listener,
            connector,
            tag,
            instance,
            addrs,
        })
    }
}

/// What the connecting rank sends first on the TCP connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The token from the [`Invitation`].
    pub token: [u8; 16],
    /// The connecting rank.
    pub connector: Rank,
    /// The rank it means to reach.
    pub listener: Rank,
    /// The connection's tag.
    pub tag: u64,
    /// The connector's transport instance.
    pub instance: u64,
}

impl Hello {
    /// Bytes of a hello.
    pub const LEN: usize = 48;

    /// The wire form.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut h = [0u8; Self::LEN];
        h[0..8].copy_from_slice(HELLO_MAGIC);
        h[8..24].copy_from_slice(&self.token);
        h[24..28].copy_from_slice(&self.connector.to_le_bytes());
        h[28..32].copy_from_slice(&self.listener.to_le_bytes());
        h[32..40].copy_from_slice(&self.tag.to_le_bytes());
        h[40..48].copy_from_slice(&self.instance.to_le_bytes());
        h
    }

    /// Parse a hello; `None` when the magic is wrong.
    pub fn decode(h: &[u8; Self::LEN]) -> Option<Hello> {
        let mut r = Cursor { m: h, at: 0 };
        if r.take(8)? != HELLO_MAGIC {
            return None;
        }
        let mut token = [0u8; 16];
        token.copy_from_slice(r.take(16)?);
        Some(Hello {
            token,
            connector: r.u32()?,
            listener: r.u32()?,
            tag: r.u64()?,
            instance: r.u64()?,
        })
    }
}

struct Cursor<'a> {
    m: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.m.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)?.try_into().ok().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)?.try_into().ok().map(u64::from_le_bytes)
    }
}

/// `N` random bytes from the kernel.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| HalError::io("host-tcp: reading /dev/urandom for a token", e))?;
    Ok(b)
}

fn same_token(a: &[u8; 16], b: &[u8; 16]) -> bool {
    // Constant time: look at every byte whatever the first difference.
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn timeout_err(what: String, limit: Duration) -> HalError {
    HalError::Timeout {
        what,
        millis: limit.as_millis() as u64,
    }
}

/// Bind the listener and work out the addresses to offer.
fn bind(ctx: &PeerContext<'_>) -> Result<(TcpListener, Vec<SocketAddr>)> {
    let same_host = ctx.local.host == ctx.remote.host;
    let env_ip = match HOST_TCP_ADDR.text() {
        Some(s) => Some(s.parse::<IpAddr>().map_err(|_| {
            HalError::Config(format!("{}={s:?} is not an IP address", HOST_TCP_ADDR.env))
        })?),
        None => None,
    };
    let bind_ip = match (same_host, env_ip) {
        (true, _) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        (false, Some(ip)) => ip,
        (false, None) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    let listener = TcpListener::bind((bind_ip, 0)).map_err(|e| {
        HalError::io(
            format!(
                "host-tcp: binding a listener on {bind_ip} for rank {}",
                ctx.remote.rank
            ),
            e,
        )
    })?;
    let port = listener
        .local_addr()
        .map_err(|e| HalError::io("host-tcp: reading the listener's port", e))?
        .port();
    let addrs: Vec<SocketAddr> = if same_host {
        vec![SocketAddr::new(bind_ip, port)]
    } else if let Some(ip) = env_ip {
        vec![SocketAddr::new(ip, port)]
    } else {
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        (name.trim(), port)
            .to_socket_addrs()
            .map(|it| {
                it.filter(|a| !a.ip().is_loopback() && a.is_ipv4() == bind_ip.is_ipv4())
                    .collect()
            })
            .unwrap_or_default()
    };
    if addrs.is_empty() {
        return Err(HalError::Config(format!(
            "host-tcp: rank {} is on another host but this host's name resolves to no non-loopback IPv4 address; set {} to an IP of this host that rank {} can reach",
            ctx.remote.rank, HOST_TCP_ADDR.env, ctx.remote.rank
        )));
    }
    Ok((listener, addrs))
}

/// Lower rank's side: invite the peer and accept its authenticated connection.
/// Returns the stream and the peer's transport instance.
pub(crate) fn listen(ctx: &PeerContext<'_>, instance: u64) -> Result<(TcpStream, u64)> {
    let limit = ctx.bootstrap.timeout();
    let deadline = Instant::now() + limit;
    let (listener, addrs) = bind(ctx)?;
    let inv = Invitation {
        token: random_bytes()?,
        listener: ctx.local.rank,
        connector: ctx.remote.rank,
        tag: ctx.tag,
        instance,
        addrs,
    };
    ctx.bootstrap
        .send(ctx.remote.rank, ctx.tag, &inv.encode())?;
    listener
        .set_nonblocking(true)
        .map_err(|e| HalError::io("host-tcp: making the listener non-blocking", e))?;
    // Every accepted socket is read without blocking, all at once, each bounded by
    // HELLO_WAIT: connections that never speak cannot delay the real connector.
    let mut pending: Vec<Pending> = Vec::new();
    loop {
        let mut progress = false;
        loop {
            match listener.accept() {
                Ok((s, from)) => {
                    progress = true;
                    if pending.len() >= MAX_PENDING_HELLOS {
                        tracing::warn!(
                            "host-tcp: rank {} dropped a connection from {from}: {MAX_PENDING_HELLOS} connections are already waiting to say hello",
                            inv.listener
                        );
                        continue;
                    }
                    if s.set_nonblocking(true).is_ok() {
                        pending.push(Pending {
                            s,
                            from,
                            got: 0,
                            hello: [0; Hello::LEN],
                            since: Instant::now(),
                        });
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if is_per_connection(&e) => break,
                Err(e) => {
                    return Err(HalError::io(
                        format!("host-tcp: accepting rank {}'s connection", inv.connector),
                        e,
                    ));
                }
            }
        }
        let mut i = 0;
        while i < pending.len() {
            match pending[i].read() {
                Step::More => {
                    if pending[i].since.elapsed() >= HELLO_WAIT {
                        let p = pending.swap_remove(i);
                        refuse(&p, &inv, "no complete hello in time".into());
                    } else {
                        i += 1;
                    }
                }
                Step::Progress => {
                    progress = true;
                    i += 1;
                }
                Step::Failed(why) => {
                    progress = true;
                    let p = pending.swap_remove(i);
                    refuse(&p, &inv, why);
                }
                Step::Complete => {
                    progress = true;
                    let p = pending.swap_remove(i);
                    match check_hello(&p.hello, &inv) {
                        Ok(peer_instance) => {
                            let s = p.s;
                            s.set_nonblocking(false).map_err(|e| {
                                HalError::io("host-tcp: making the connection blocking", e)
                            })?;
                            (&s).write_all(ACCEPTED).map_err(|e| {
                                HalError::io(
                                    format!("host-tcp: answering rank {}", inv.connector),
                                    e,
                                )
                            })?;
                            return Ok((s, peer_instance));
                        }
                        Err(why) => refuse(&p, &inv, why),
                    }
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(timeout_err(
                format!(
                    "rank {} to open its host-tcp connection to rank {} (tag {}){}",
                    inv.connector,
                    inv.listener,
                    inv.tag,
                    if pending.is_empty() {
                        String::new()
                    } else {
                        format!("; {} other connection(s) were still silent", pending.len())
                    }
                ),
                limit,
            ));
        }
        if !progress {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Most accepted connections waiting for their hello at once; more are dropped.
const MAX_PENDING_HELLOS: usize = 64;

/// An accepted socket whose hello is not complete yet.
struct Pending {
    s: TcpStream,
    from: SocketAddr,
    got: usize,
    hello: [u8; Hello::LEN],
    since: Instant,
}

enum Step {
    /// Nothing new.
    More,
    /// Some bytes arrived.
    Progress,
    /// The whole hello is in.
    Complete,
    /// The connection failed or closed early (the reason).
    Failed(String),
}

impl Pending {
    /// Read what has arrived without blocking.
    fn read(&mut self) -> Step {
        let mut moved = false;
        while self.got < Hello::LEN {
            match (&self.s).read(&mut self.hello[self.got..]) {
                Ok(0) => {
                    return Step::Failed(format!(
                        "closed after {} of the hello's {} bytes",
                        self.got,
                        Hello::LEN
                    ));
                }
                Ok(n) => {
                    self.got += n;
                    moved = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return if moved { Step::Progress } else { Step::More };
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Step::Failed(format!("no complete hello ({e})")),
            }
        }
        Step::Complete
    }
}

/// Errors of `accept` that concern one incoming connection, not the listener.
fn is_per_connection(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNABORTED | libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Tell a refused connection why (best effort) and close it.
fn refuse(p: &Pending, inv: &Invitation, why: String) {
    tracing::warn!(
        "host-tcp: rank {} refused a connection from {} (waiting for rank {}, tag {}): {why}",
        inv.listener,
        p.from,
        inv.connector,
        inv.tag
    );
    let mut msg = REFUSED.to_vec();
    msg.extend_from_slice(format!("refused: {why}").as_bytes());
    let _ = (&p.s).write_all(&msg);
    let _ = p.s.shutdown(std::net::Shutdown::Both);
}

/// Check a complete hello; `Err` is the refusal reason.
fn check_hello(h: &[u8; Hello::LEN], inv: &Invitation) -> std::result::Result<u64, String> {
    let hello = Hello::decode(h).ok_or("not a host-tcp hello (bad magic)")?;
    if !same_token(&hello.token, &inv.token) {
        return Err("wrong connection token".into());
    }
    if (hello.connector, hello.listener, hello.tag) != (inv.connector, inv.listener, inv.tag) {
        return Err(format!(
            "hello names rank {} -> rank {} tag {}, expected rank {} -> rank {} tag {}",
            hello.connector, hello.listener, hello.tag, inv.connector, inv.listener, inv.tag
        ));
    }
    Ok(hello.instance)
}

/// Higher rank's side: take the invitation and connect with its token.
pub(crate) fn dial(ctx: &PeerContext<'_>, instance: u64) -> Result<(TcpStream, u64)> {
    let limit = ctx.bootstrap.timeout();
    let deadline = Instant::now() + limit;
    let peer = ctx.remote.rank;
    let inv = Invitation::decode(peer, &ctx.bootstrap.recv(peer, ctx.tag)?)?;
    if (inv.listener, inv.connector, inv.tag) != (peer, ctx.local.rank, ctx.tag) {
        return Err(HalError::Bootstrap(format!(
            "host-tcp invitation is for rank {} -> rank {} tag {}, but this is rank {} connecting to rank {peer} with tag {}: both ranks must call connect with mirrored contexts",
            inv.connector, inv.listener, inv.tag, ctx.local.rank, ctx.tag
        )));
    }
    let hello = Hello {
        token: inv.token,
        connector: ctx.local.rank,
        listener: peer,
        tag: ctx.tag,
        instance,
    };
    let mut tried = Vec::new();
    for addr in &inv.addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let s = match TcpStream::connect_timeout(addr, left.min(HELLO_WAIT)) {
            Ok(s) => s,
            Err(e) => {
                tried.push(format!("{addr}: {e}"));
                continue;
            }
        };
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .map_err(|e| HalError::io("host-tcp: setting a socket timeout", e))?;
        (&s).write_all(&hello.encode())
            .map_err(|e| HalError::io(format!("host-tcp: greeting rank {peer} at {addr}"), e))?;
        let mut answer = [0u8; 8];
        match (&s).read_exact(&mut answer) {
            Ok(()) if &answer == ACCEPTED => return Ok((s, inv.instance)),
            Ok(()) if &answer == REFUSED => {
                let mut why = Vec::new();
                let _ = (&s).take(512).read_to_end(&mut why);
                return Err(HalError::Bootstrap(format!(
                    "rank {peer} refused our host-tcp connection: {}",
                    String::from_utf8_lossy(&why)
                )));
            }
            Ok(()) => tried.push(format!("{addr}: not a host-tcp listener")),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(timeout_err(
                    format!("rank {peer} to accept our host-tcp connection at {addr}"),
                    limit,
                ));
            }
            Err(e) => tried.push(format!("{addr}: {e}")),
        }
    }
    Err(HalError::PeerDead {
        rank: peer,
        detail: format!(
            "none of its host-tcp addresses could be reached ({}); check firewalls or set {} on rank {peer}",
            tried.join("; "),
            HOST_TCP_ADDR.env
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invitation_and_hello_round_trip() {
        let inv = Invitation {
            token: [7; 16],
            listener: 0,
            connector: 3,
            tag: 99,
            instance: 5,
            addrs: vec![
                "127.0.0.1:4000".parse().unwrap(),
                "[::1]:5".parse().unwrap(),
            ],
        };
        assert_eq!(Invitation::decode(0, &inv.encode()).unwrap(), inv);
        let mut m = inv.encode();
        m.push(0);
        assert!(Invitation::decode(0, &m).is_err());
        assert!(Invitation::decode(0, &inv.encode()[..20]).is_err());
        let h = Hello {
            token: [1; 16],
            connector: 3,
            listener: 0,
            tag: 99,
            instance: 8,
        };
        assert_eq!(Hello::decode(&h.encode()), Some(h));
        let mut b = h.encode();
        b[0] = 0;
        assert_eq!(Hello::decode(&b), None);
        assert!(same_token(&[3; 16], &[3; 16]) && !same_token(&[3; 16], &[4; 16]));
    }
}
