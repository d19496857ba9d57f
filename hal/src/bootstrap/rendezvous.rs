//! How TCP ranks find each other.
//!
//! 1. The root (rank 0) listens at the unique id's address. Every other rank binds its
//!    own mesh listener, connects to the root and sends a hello (rank, world size,
//!    secret, mesh port, host).
//! 2. The root accepts until every rank has joined or the timeout passes. A connection
//!    with a wrong secret, a wrong world size, an unknown or duplicate rank, or a bad
//!    frame is refused, logged with `tracing::warn`, and does not disturb the others.
//!    On timeout the root sends every joined rank an abort naming the missing ranks,
//!    so every rank fails with the same message.
//! 3. The root sends the table of everyone's mesh address and host. Rank `i` then
//!    connects to every rank `0 < j < i` and accepts from every `j > i`; the
//!    connection to the root is the one from step 1.
//!
//! Every step is bounded by the bootstrap timeout and its error names the rank that
//! did not show up.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::bootstrap::gate::{Gate, HELLO_WAIT};
use crate::bootstrap::unique_id::{UniqueId, parse_secret_hex, secrets_equal};
use crate::bootstrap::wire::{
    self, Abort, Hello, Kind, MAX_CONTROL, MAX_HELLO, PeerInfo, WireError,
};
use crate::error::{HalError, Result};
use crate::topology::{Rank, host_id};

/// A rank that connected and proved it belongs to the job.
#[derive(Debug)]
pub(crate) struct Joined {
    pub stream: TcpStream,
    pub hello: Hello,
    pub peer: SocketAddr,
}

/// "rank 3" / "ranks 2, 3".
pub(crate) fn name_ranks(ranks: &[Rank]) -> String {
    let list = ranks
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if ranks.len() == 1 {
        format!("rank {list}")
    } else {
        format!("ranks {list}")
    }
}

/// The unspecified address of `ip`'s family (to listen on every interface).
pub(crate) fn unspecified_like(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    }
}

/// The address a non-root rank's mesh listener binds: the interface this host uses
/// to reach the root (loopback for a job on loopback), so peers can connect while
/// other networks cannot. Falls back to the wildcard address only when the route to
/// the root cannot be determined.
pub(crate) fn mesh_bind_ip(root: SocketAddr) -> IpAddr {
    let ip = root.ip();
    if ip.is_loopback() {
        return ip;
    }
    // A UDP "connect" sends nothing; it only picks the route and its source address.
    let local = SocketAddr::new(unspecified_like(ip), 0);
    std::net::UdpSocket::bind(local)
        .and_then(|u| u.connect(root).and_then(|()| u.local_addr()))
        .map(|a| a.ip())
        .ok()
        .filter(|a| !a.is_unspecified())
        .unwrap_or_else(|| unspecified_like(ip))
}

/// Time left until `deadline`, at least 1 ms (socket timeouts reject zero).
fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Read and decode the hello of a fresh connection.
fn read_hello(stream: &mut TcpStream, deadline: Instant) -> std::result::Result<Hello, WireError> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(left(deadline)))?;
    match wire::read_frame(stream, MAX_HELLO)? {
        Some(f) if f.kind == Kind::Hello => wire::decode("hello", &f.payload),
        Some(f) => Err(WireError::Malformed(format!(
            "expected a hello, got a {:?} frame",
            f.kind
        ))),
        None => Err(WireError::Malformed("closed before saying hello".into())),
    }
}

/// Tell a refused or abandoned connection why, best effort.
fn send_abort(stream: &mut TcpStream, what: &str, millis: Option<u64>) {
    let msg = wire::encode(&Abort {
        what: what.to_string(),
        millis,
        origin: None,
    });
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = wire::write_frame(stream, Kind::Abort, 0, &msg);
}

/// Authenticated connections by rank.
pub(crate) type Accepted = BTreeMap<Rank, Joined>;

/// Why a hello is refused, if it is.
fn refusal(
    hello: &Hello,
    id: &UniqueId,
    me: Rank,
    size: u32,
    expected: &BTreeSet<Rank>,
    joined: &Accepted,
) -> Option<String> {
    let secret_ok = parse_secret_hex(&hello.secret).is_some_and(|s| secrets_equal(&s, id.secret()));
    let r = hello.rank;
    if !secret_ok {
        Some(format!(
            "claims rank {r} but presented the wrong job secret (another job, or a stale COMMHAL_UNIQUE_ID?)"
        ))
    } else if hello.size != size {
        Some(format!(
            "rank {r} believes the world has {} ranks, this job has {size}: start every rank with the same world size",
            hello.size
        ))
    } else if joined.contains_key(&r) {
        Some(format!("rank {r} has already joined (started twice?)"))
    } else if !expected.contains(&r) {
        Some(format!("rank {r} is not expected to connect to rank {me}"))
    } else {
        None
    }
}

/// Accept connections on `listener` until every rank in `expected` has joined with the
/// right secret and world size. On timeout returns the ranks still missing, with the
/// ones that did join (so the caller can tell them).
pub(crate) fn accept_ranks(
    listener: &TcpListener,
    id: &UniqueId,
    me: Rank,
    size: u32,
    expected: &BTreeSet<Rank>,
    deadline: Instant,
) -> std::result::Result<Accepted, (Accepted, Vec<Rank>)> {
    let mut joined = Accepted::new();
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::warn!("rank {me}: cannot poll the bootstrap listener: {e}");
    }
    let (tx, rx) =
        mpsc::channel::<(TcpStream, SocketAddr, std::result::Result<Hello, WireError>)>();
    let gate = Gate::new(size);
    while !expected.iter().all(|r| joined.contains_key(r)) {
        // Take every pending connection; each one's hello is read on its own thread
        // so a silent client cannot hold up the others, with at most `gate.cap()`
        // such threads (extra connections are closed at once).
        loop {
            match listener.accept() {
                Ok((mut s, peer)) => {
                    let Some(pass) = gate.enter() else {
                        tracing::warn!(
                            "rank {me}: dropped a bootstrap connection from {peer}: {} connections are already waiting to say hello",
                            gate.cap()
                        );
                        continue;
                    };
                    let tx = tx.clone();
                    let until = deadline.min(Instant::now() + HELLO_WAIT);
                    let spawned = thread::Builder::new()
                        .name(format!("commhal-hello-r{me}"))
                        .spawn(move || {
                            let r = read_hello(&mut s, until);
                            drop(pass);
                            let _ = tx.send((s, peer, r));
                        });
                    if let Err(e) = spawned {
                        tracing::warn!("rank {me}: cannot start a thread for {peer}: {e}");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!("rank {me}: accepting a bootstrap connection failed: {e}");
                    break;
                }
            }
        }
        let now = Instant::now();
        if now >= deadline {
            let missing: Vec<Rank> = expected
                .iter()
                .copied()
                .filter(|r| !joined.contains_key(r))
                .collect();
            return Err((joined, missing));
        }
        let Ok((mut s, peer, hello)) =
            rx.recv_timeout((deadline - now).min(Duration::from_millis(10)))
        else {
            continue;
        };
        let refuse = |s: &mut TcpStream, why: String| {
            tracing::warn!("rank {me}: refused bootstrap connection from {peer}: {why}");
            send_abort(
                s,
                &format!("rank {me} refused this connection: {why}"),
                None,
            );
        };
        let hello = match hello {
            Ok(h) => h,
            Err(e) => {
                refuse(&mut s, e.to_string());
                continue;
            }
        };
        match refusal(&hello, id, me, size, expected, &joined) {
            Some(why) => refuse(&mut s, why),
            None => {
                let _ = s.set_read_timeout(None);
                let _ = s.set_nodelay(true);
                let rank = hello.rank;
                joined.insert(
                    rank,
                    Joined {
                        stream: s,
                        hello,
                        peer,
                    },
                );
            }
        }
    }
    Ok(joined)
}

/// Bind the root's listener at `addr`; if that IP is not local (a name that resolves
/// elsewhere, NAT), listen on every interface at the same port instead.
pub(crate) fn bind_root(addr: SocketAddr) -> Result<TcpListener> {
    match TcpListener::bind(addr) {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => {
            let any = SocketAddr::new(unspecified_like(addr.ip()), addr.port());
            tracing::info!("{addr} is not a local address; the bootstrap root listens on {any}");
            TcpListener::bind(any)
                .map_err(|e| HalError::io(format!("binding the bootstrap root at {any}"), e))
        }
        Err(e) => Err(HalError::io(
            format!(
                "binding the bootstrap root at {addr} (port taken? choose another, or let UniqueId::bind pick one)"
            ),
            e,
        )),
    }
}

/// Rank 0: wait for everyone, then hand out the table. Returns one stream per rank
/// (None for rank 0 itself) and the table.
pub(crate) fn serve_root(
    listener: &TcpListener,
    id: &UniqueId,
    size: u32,
    timeout: Duration,
) -> Result<(Vec<Option<TcpStream>>, Vec<PeerInfo>)> {
    let millis = timeout.as_millis() as u64;
    let deadline = Instant::now() + timeout;
    let expected: BTreeSet<Rank> = (1..size).collect();
    let joined = match accept_ranks(listener, id, 0, size, &expected, deadline) {
        Ok(j) => j,
        Err((joined, missing)) => {
            let what = format!(
                "{} of {size} to join the bootstrap at {} (did not join within {millis} ms; was it started, with the same unique id, and can it reach the root?)",
                name_ranks(&missing),
                id.addr()
            );
            for (_, mut j) in joined {
                send_abort(&mut j.stream, &what, Some(millis));
            }
            return Err(HalError::Timeout { what, millis });
        }
    };
    let root_addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let mut table = vec![PeerInfo {
        addr: root_addr,
        host: host_id(),
    }];
    let mut streams: Vec<Option<TcpStream>> = vec![None];
    for (rank, j) in joined {
        debug_assert_eq!(rank as usize, table.len());
        table.push(PeerInfo {
            // The address the root saw it connect from: routable at least from here.
            addr: SocketAddr::new(j.peer.ip(), j.hello.port).to_string(),
            host: j.hello.host,
        });
        streams.push(Some(j.stream));
    }
    let msg = wire::encode(&table);
    for (rank, s) in streams.iter_mut().enumerate() {
        if let Some(s) = s {
            s.set_write_timeout(Some(timeout))
                .and_then(|_| wire::write_frame(s, Kind::Table, 0, &msg))
                .map_err(|e| HalError::PeerDead {
                    rank: rank as Rank,
                    detail: format!("could not receive the address table: {e}"),
                })?;
        }
    }
    Ok((streams, table))
}

/// Connect to `addr`, retrying refusals (the listener may not be up yet) until the
/// deadline; the timeout error says it waited for `what`.
pub(crate) fn connect_with_retry(
    addr: SocketAddr,
    deadline: Instant,
    millis: u64,
    what: &dyn Fn() -> String,
) -> Result<TcpStream> {
    loop {
        let err =
            match TcpStream::connect_timeout(&addr, left(deadline).min(Duration::from_secs(2))) {
                Ok(s) => return Ok(s),
                Err(e) => e,
            };
        if Instant::now() >= deadline {
            return Err(HalError::Timeout {
                what: format!("{} (last error: {err})", what()),
                millis,
            });
        }
        thread::sleep(Duration::from_millis(20).min(left(deadline)));
    }
}

/// Send our hello on a fresh connection.
pub(crate) fn say_hello(
    s: &mut TcpStream,
    id: &UniqueId,
    rank: Rank,
    size: u32,
    port: u16,
    timeout: Duration,
) -> io::Result<()> {
    let hello = Hello {
        rank,
        size,
        secret: id.secret_hex(),
        port,
        host: host_id(),
    };
    s.set_nodelay(true)?;
    s.set_write_timeout(Some(timeout))?;
    wire::write_frame(s, Kind::Hello, 0, &wire::encode(&hello))?;
    s.flush()
}

/// A non-root rank: join at the root and wait for the table.
pub(crate) fn join_root(
    id: &UniqueId,
    rank: Rank,
    size: u32,
    mesh_port: u16,
    timeout: Duration,
) -> Result<(TcpStream, Vec<PeerInfo>)> {
    let millis = timeout.as_millis() as u64;
    let root = id.addr();
    let mut s = connect_with_retry(root, Instant::now() + timeout, millis, &|| {
        format!("root rank 0 of {size} to accept a connection at {root}")
    })?;
    say_hello(&mut s, id, rank, size, mesh_port, timeout)
        .map_err(|e| HalError::io(format!("greeting root rank 0 at {root}"), e))?;
    // The root may wait up to its own timeout for the slowest rank and then tell us
    // who is missing; wait a little longer than that so its verdict arrives.
    let patience = timeout + timeout.min(Duration::from_secs(5));
    s.set_read_timeout(Some(patience))
        .map_err(|e| HalError::io("setting a socket timeout", e))?;
    let frame = match wire::read_frame(&mut s, MAX_CONTROL) {
        Ok(Some(f)) => f,
        Ok(None) => {
            return Err(HalError::PeerDead {
                rank: 0,
                detail: format!(
                    "the root at {root} closed the connection before sending the address table"
                ),
            });
        }
        Err(WireError::Io(e)) if is_timeout(&e) => {
            return Err(HalError::Timeout {
                what: format!("the address table from root rank 0 of {size} at {root}"),
                millis: patience.as_millis() as u64,
            });
        }
        Err(e) => {
            return Err(HalError::Bootstrap(format!(
                "reading the address table from root rank 0 at {root}: {e}"
            )));
        }
    };
    match frame.kind {
        Kind::Table => {
            let table: Vec<PeerInfo> = wire::decode("address table", &frame.payload)
                .map_err(|e| HalError::Bootstrap(format!("root rank 0 at {root}: {e}")))?;
            if table.len() != size as usize {
                return Err(HalError::Bootstrap(format!(
                    "the root's table lists {} ranks, this rank expects {size}",
                    table.len()
                )));
            }
            let _ = s.set_read_timeout(None);
            Ok((s, table))
        }
        Kind::Abort => {
            let abort: Abort = wire::decode("abort", &frame.payload)
                .map_err(|e| HalError::Bootstrap(format!("root rank 0 at {root}: {e}")))?;
            Err(match abort.millis {
                Some(millis) => HalError::Timeout {
                    what: format!("{} [reported by root rank 0]", abort.what),
                    millis,
                },
                None => {
                    HalError::Bootstrap(format!("the root refused rank {rank}: {}", abort.what))
                }
            })
        }
        other => Err(HalError::Bootstrap(format!(
            "root rank 0 at {root} sent a {other:?} frame instead of the address table"
        ))),
    }
}

/// Rank `me` (not the root): connect to ranks `1..me`, accept ranks `me+1..size`.
/// Slot 0 and `me` of the result are `None`.
pub(crate) fn build_mesh(
    me: Rank,
    size: u32,
    id: &UniqueId,
    table: &[PeerInfo],
    listener: &TcpListener,
    timeout: Duration,
) -> Result<Vec<Option<TcpStream>>> {
    let millis = timeout.as_millis() as u64;
    let deadline = Instant::now() + timeout;
    let mut streams: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    for j in 1..me {
        let addr: SocketAddr = table[j as usize].addr.parse().map_err(|_| {
            HalError::Bootstrap(format!(
                "the root's table has a bad address for rank {j}: {:?}",
                table[j as usize].addr
            ))
        })?;
        let mut s = connect_with_retry(addr, deadline, millis, &|| {
            format!("rank {j} of {size} to accept its mesh connection at {addr}")
        })?;
        say_hello(&mut s, id, me, size, 0, timeout).map_err(|e| HalError::PeerDead {
            rank: j,
            detail: format!("greeting it failed: {e}"),
        })?;
        streams[j as usize] = Some(s);
    }
    let expected: BTreeSet<Rank> = (me + 1..size).collect();
    match accept_ranks(listener, id, me, size, &expected, deadline) {
        Ok(joined) => {
            for (r, j) in joined {
                streams[r as usize] = Some(j.stream);
            }
            Ok(streams)
        }
        Err((_, missing)) => Err(HalError::Timeout {
            what: format!(
                "{} of {size} to open its mesh connection to rank {me} (did not connect within {millis} ms)",
                name_ranks(&missing)
            ),
            millis,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connections that never say hello cost no more than a capped number of threads.
    #[test]
    fn silent_connections_to_the_root_are_capped() {
        let _counting = crate::bootstrap::fdpass::tests::COUNTING
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let id = UniqueId::new_local().unwrap();
        let before = crate::bootstrap::fdpass::tests::threads();
        let root = std::thread::spawn(move || {
            let expected: BTreeSet<Rank> = [1].into();
            accept_ranks(
                &listener,
                &id,
                0,
                2,
                &expected,
                Instant::now() + Duration::from_secs(3),
            )
            .map(|_| ())
            .map_err(|(_, missing)| missing)
        });
        let silent: Vec<TcpStream> = (0..300)
            .filter_map(|_| TcpStream::connect(addr).ok())
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let grown = crate::bootstrap::fdpass::tests::threads().saturating_sub(before);
        assert!(
            grown < 150,
            "{} silent connections started {grown} threads",
            silent.len()
        );
        assert_eq!(root.join().unwrap(), Err(vec![1]));
    }

    /// A job on loopback gets a loopback mesh listener, never the wildcard address.
    #[test]
    fn mesh_listener_binds_the_jobs_interface() {
        let ip = mesh_bind_ip("127.0.0.1:5000".parse().unwrap());
        assert_eq!(ip, IpAddr::from([127, 0, 0, 1]));
        let ip = mesh_bind_ip("[::1]:5000".parse().unwrap());
        assert_eq!(ip, "::1".parse::<IpAddr>().unwrap());
    }
}
