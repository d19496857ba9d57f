//! [`TcpBootstrap`]: one rank per process, ranks on any hosts.
//!
//! Setup ([`crate::bootstrap::rendezvous`]) leaves one authenticated TCP connection
//! between every pair of ranks (a full mesh, made eagerly). Each connection has a
//! receiver thread that files incoming messages into the rank's mailbox by
//! (peer, tag); `recv` waits there with the timeout. Sends write on the connection
//! under a per-peer lock, so messages of one (peer, tag) keep their order.
//!
//! When a peer's connection closes (its process exited, or it dropped its bootstrap),
//! messages it sent before are still delivered, then `recv` from it fails with
//! [`HalError::PeerDead`]. A malformed frame from a peer is logged and treated the
//! same way: nothing from that connection is trusted afterwards.
//!
//! Dropping a `TcpBootstrap` half-closes its connections; its receiver threads end
//! when the peers close theirs.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::abort::AbortFlag;
use crate::bootstrap::collectives::{self, Exchange};
use crate::bootstrap::env::LaunchEnv;
use crate::bootstrap::fdpass::{FdEndpoint, FdListener};
use crate::bootstrap::mailbox::Mailbox;
use crate::bootstrap::rendezvous;
use crate::bootstrap::unique_id::UniqueId;
use crate::bootstrap::wire::{self, Kind, MAX_MESSAGE, WireError};
use crate::bootstrap::{Bootstrap, check_peer, check_user_tag};
use crate::error::{HalError, Result};
use crate::topology::{Rank, host_id};

/// A rank's TCP bootstrap. See the module docs for the protocol.
#[derive(Debug)]
pub struct TcpBootstrap {
    rank: Rank,
    size: u32,
    timeout: Duration,
    /// Connection to each peer (None for this rank).
    links: Vec<Option<Mutex<TcpStream>>>,
    /// Each rank's host id, from the root's table.
    hosts: Vec<String>,
    mailbox: Arc<Mailbox>,
    fds: FdEndpoint,
}

impl TcpBootstrap {
    /// Join the job named by `id` as `rank` of `size`. Rank 0 listens at `id.addr()`
    /// (or uses the listener [`UniqueId::bind`] left in this process); every step
    /// gives up after `timeout` with an error naming the rank that did not arrive.
    pub fn new(rank: Rank, size: u32, id: &UniqueId, timeout: Duration) -> Result<TcpBootstrap> {
        if size == 0 || rank >= size {
            return Err(HalError::invalid(format!(
                "rank {rank} of world size {size}: need 0 <= rank < size"
            )));
        }
        if timeout.is_zero() {
            return Err(HalError::invalid("the bootstrap timeout must be positive"));
        }
        let mailbox = Arc::new(Mailbox::default());
        let fds = FdListener::bind(id.secret(), rank)?.start(
            rank,
            size,
            *id.secret(),
            timeout,
            mailbox.clone(),
        )?;

        let (streams, table) = if size == 1 {
            (vec![None], vec![host_id()])
        } else if rank == 0 {
            let listener = match id.take_prebound() {
                Some(l) => l,
                None => rendezvous::bind_root(id.addr())?,
            };
            let (streams, table) = rendezvous::serve_root(&listener, id, size, timeout)?;
            (streams, table.into_iter().map(|p| p.host).collect())
        } else {
            let at = SocketAddr::new(rendezvous::mesh_bind_ip(id.addr()), 0);
            let listener = TcpListener::bind(at)
                .map_err(|e| HalError::io(format!("binding rank {rank}'s mesh listener"), e))?;
            let port = listener
                .local_addr()
                .map_err(|e| HalError::io("reading the mesh listener's port", e))?
                .port();
            let (root, table) = rendezvous::join_root(id, rank, size, port, timeout)?;
            let mut streams = rendezvous::build_mesh(rank, size, id, &table, &listener, timeout)?;
            streams[0] = Some(root);
            (streams, table.into_iter().map(|p| p.host).collect())
        };

        let mut links = Vec::with_capacity(size as usize);
        for (peer, s) in streams.into_iter().enumerate() {
            let Some(s) = s else {
                links.push(None);
                continue;
            };
            let peer = peer as Rank;
            let reader = s
                .try_clone()
                .map_err(|e| HalError::io(format!("cloning the connection to rank {peer}"), e))?;
            s.set_write_timeout(Some(timeout))
                .map_err(|e| HalError::io("setting a socket timeout", e))?;
            let mb = mailbox.clone();
            thread::Builder::new()
                .name(format!("commhal-boot-r{rank}-from{peer}"))
                .spawn(move || receive_loop(rank, peer, reader, mb))
                .map_err(|e| HalError::io("starting a bootstrap receiver thread", e))?;
            links.push(Some(Mutex::new(s)));
        }
        tracing::debug!("rank {rank} of {size}: bootstrap ready");
        Ok(TcpBootstrap {
            rank,
            size,
            timeout,
            links,
            hosts: table,
            mailbox,
            fds,
        })
    }

    /// Join using the launcher's environment ([`LaunchEnv::detect`]): rank and world
    /// size from commhal/torchrun/Open MPI/Slurm variables, the job from
    /// `COMMHAL_UNIQUE_ID` or `MASTER_ADDR`/`MASTER_PORT`, the timeout from
    /// `COMMHAL_BOOTSTRAP_TIMEOUT_MS`.
    pub fn from_env() -> Result<TcpBootstrap> {
        let env = LaunchEnv::detect()?.ok_or_else(|| {
            HalError::Config(
                "no launcher environment found: set COMMHAL_RANK, COMMHAL_WORLD_SIZE and COMMHAL_UNIQUE_ID (or run under `commhal launch`, torchrun, mpirun or srun)".into(),
            )
        })?;
        let id = env.unique_id()?;
        TcpBootstrap::new(env.rank, env.world_size, &id, env.timeout)
    }

    /// `peer`'s host id ([`crate::topology::host_id`]) as it reported it.
    pub fn host_of(&self, peer: Rank) -> Option<&str> {
        self.hosts.get(peer as usize).map(String::as_str)
    }

    fn link(&self, peer: Rank) -> Result<&Mutex<TcpStream>> {
        check_peer(peer, self.size)?;
        self.links[peer as usize]
            .as_ref()
            .ok_or_else(|| HalError::invalid("no connection to self"))
    }

    fn millis(&self) -> u64 {
        self.timeout.as_millis() as u64
    }
}

/// File every frame from `peer` into the mailbox until the connection ends.
fn receive_loop(me: Rank, peer: Rank, mut s: TcpStream, mailbox: Arc<Mailbox>) {
    let mut left = false;
    let why = loop {
        match wire::read_frame(&mut s, MAX_MESSAGE) {
            Ok(Some(f)) if f.kind == Kind::Data => mailbox.put(peer, f.tag, f.payload),
            Ok(Some(f)) if f.kind == Kind::Leave => left = true,
            Ok(Some(f)) if f.kind == Kind::Abort => {
                let abort = wire::decode::<wire::Abort>("abort", &f.payload);
                let what = match &abort {
                    Ok(a) => a.what.clone(),
                    Err(e) => e.to_string(),
                };
                // The peer gave up because `origin` failed: blame the origin.
                if let Ok(wire::Abort {
                    origin: Some(o), ..
                }) = abort
                    && o != me
                    && o != peer
                {
                    mailbox
                        .failure
                        .peer_dead(o, format!("reported by rank {peer}: {what}"));
                }
                break format!("aborted the job: {what}");
            }
            Ok(Some(f)) => {
                tracing::warn!(
                    "rank {me}: rank {peer} sent an unexpected {:?} frame; dropping its connection",
                    f.kind
                );
                break format!("protocol error: unexpected {:?} frame", f.kind);
            }
            Ok(None) if left => {
                let _ = s.shutdown(std::net::Shutdown::Read);
                mailbox.mark_left(
                    peer,
                    "left the job (it dropped its bootstrap after its work)",
                );
                return;
            }
            Ok(None) => {
                break "closed its bootstrap connection (process exited or dropped its bootstrap)"
                    .into();
            }
            Err(WireError::Malformed(m)) => {
                tracing::warn!(
                    "rank {me}: rank {peer} sent a malformed frame ({m}); dropping its connection"
                );
                break format!("protocol error: {m}");
            }
            Err(WireError::Io(e)) => break format!("connection failed: {e}"),
        }
    };
    let _ = s.shutdown(std::net::Shutdown::Read);
    mailbox.mark_dead(peer, why);
}

/// Dropping says goodbye first: the peers see a departure, not a failure (a process
/// that dies without dropping its bootstrap is a failure).
impl Drop for TcpBootstrap {
    fn drop(&mut self) {
        for s in self.links.iter().flatten() {
            let mut s = s.lock().unwrap_or_else(|p| p.into_inner());
            let _ = wire::write_frame(&mut *s, Kind::Leave, 0, &[]);
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
    }
}

impl Exchange for TcpBootstrap {
    fn me(&self) -> Rank {
        self.rank
    }
    fn n(&self) -> u32 {
        self.size
    }
    fn limit(&self) -> Duration {
        self.timeout
    }
    fn raw_send(&self, peer: Rank, tag: u64, data: &[u8]) -> Result<()> {
        check_peer(peer, self.size)?;
        if data.len() as u64 > MAX_MESSAGE {
            return Err(HalError::invalid(format!(
                "bootstrap message of {} bytes exceeds the {MAX_MESSAGE}-byte cap: split it, or move bulk data through a transport",
                data.len()
            )));
        }
        if peer == self.rank {
            self.mailbox.put(peer, tag, data.to_vec());
            return Ok(());
        }
        if let Some(why) = self.mailbox.dead_reason(peer) {
            return Err(HalError::PeerDead {
                rank: peer,
                detail: why,
            });
        }
        let mut s = self.link(peer)?.lock().unwrap_or_else(|p| p.into_inner());
        wire::write_frame(&mut *s, Kind::Data, tag, data).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => HalError::Timeout {
                what: format!(
                    "rank {peer} of {} to take a {}-byte message",
                    self.size,
                    data.len()
                ),
                millis: self.millis(),
            },
            _ => HalError::PeerDead {
                rank: peer,
                detail: format!("sending failed: {e}"),
            },
        })
    }
    fn raw_recv(
        &self,
        peer: Rank,
        tag: u64,
        deadline: Instant,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<u8>> {
        check_peer(peer, self.size)?;
        self.mailbox.take(peer, tag, deadline, self.millis(), what)
    }
}

impl Bootstrap for TcpBootstrap {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn timeout(&self) -> Duration {
        self.timeout
    }
    fn send(&self, peer: Rank, tag: u64, data: &[u8]) -> Result<()> {
        collectives::send(self, peer, tag, data)
    }
    fn recv(&self, peer: Rank, tag: u64) -> Result<Vec<u8>> {
        collectives::recv(self, peer, tag)
    }
    fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        collectives::all_gather(self, data)
    }
    fn broadcast(&self, root: Rank, data: &[u8]) -> Result<Vec<u8>> {
        collectives::broadcast(self, root, data)
    }
    fn barrier(&self) -> Result<()> {
        collectives::barrier(self)
    }
    fn send_fds(&self, peer: Rank, tag: u64, fds: &[OwnedFd]) -> Result<()> {
        check_user_tag(tag)?;
        check_peer(peer, self.size)?;
        if peer == self.rank {
            let dups = fds
                .iter()
                .map(|f| f.try_clone())
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(|e| HalError::io("duplicating descriptors", e))?;
            self.mailbox.put_fds(peer, tag, dups);
            return Ok(());
        }
        let (mine, theirs) = (&self.hosts[self.rank as usize], &self.hosts[peer as usize]);
        if mine != theirs {
            return Err(HalError::Bootstrap(format!(
                "cannot pass descriptors to rank {peer}: it runs on host `{theirs}`, rank {} on `{mine}`; descriptors pass only between processes on the same host (use a transport whose exports need none)",
                self.rank
            )));
        }
        if let Some(why) = self.mailbox.dead_reason(peer) {
            return Err(HalError::PeerDead {
                rank: peer,
                detail: why,
            });
        }
        self.fds.send(peer, tag, fds)
    }
    fn recv_fds(&self, peer: Rank, tag: u64) -> Result<Vec<OwnedFd>> {
        collectives::recv_fds(self, &self.mailbox, peer, tag)
    }
    fn peer_failure(&self) -> Option<Arc<AbortFlag>> {
        Some(self.mailbox.failure.clone())
    }
    fn abort_job(&self, origin: Option<Rank>, why: &str) {
        let msg = wire::encode(&wire::Abort {
            what: format!("rank {} gave up: {why}", self.rank),
            millis: None,
            origin: origin.filter(|&o| o != self.rank && o < self.size),
        });
        for (peer, link) in self.links.iter().enumerate() {
            let Some(link) = link else { continue };
            if self.mailbox.dead_reason(peer as Rank).is_some() {
                continue;
            }
            // A sender busy on this link (or stuck on a full socket) is skipped: the
            // peer then learns of the abort when this process exits.
            if let Ok(mut s) = link.try_lock() {
                let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
                let _ = wire::write_frame(&mut *s, Kind::Abort, 0, &msg);
                let _ = s.set_write_timeout(Some(self.timeout));
            }
        }
    }
}
