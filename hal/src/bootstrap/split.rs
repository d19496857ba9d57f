//! Sub-communicators: [`split`] a bootstrap by colour and key, as `ncclCommSplit` and
//! `MPI_Comm_split` do, into [`SplitBootstrap`]s that carry their messages over the
//! parent's.
//!
//! * **Collective over the parent**: every parent rank calls [`split`] (or
//!   [`SplitBootstrap::split`] on a split) in the same order; ranks with the same
//!   colour form one group, ordered by (key, parent rank); `None` as colour joins no
//!   group (NCCL's `NCCL_SPLIT_NOCOLOR`).
//! * **Messages** of a split travel over the root bootstrap under tags of their own:
//!   bit 62 set, the split's id in bits 48..62, the split's own tag in the low 48 bits
//!   (its users' tags must be below 2^48 − 256; the top 256 carry its all-gather,
//!   broadcast and barrier). Splitting a split maps straight onto the root, so nesting
//!   costs nothing per message.
//! * **Ids** are agreed in the split's all-gather: each rank brings the largest id it
//!   has used with this root and the new id is one more than the largest brought. So
//!   two live splits that share a pair of ranks never share an id, whatever other
//!   splits either rank joined in between.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::abort::AbortFlag;
use crate::bootstrap::collectives::{self, Exchange};
use crate::bootstrap::{Bootstrap, RESERVED_TAGS, check_peer};
use crate::error::{HalError, Result};
use crate::topology::Rank;

/// Tags a split's users may pass are below this.
pub const SPLIT_USER_TAGS: u64 = (1 << 48) - 256;
const SPLIT_BIT: u64 = 1 << 62;
const MAX_ID: u64 = (1 << 14) - 1;
/// The parent tag of the split's all-gather of (colour, key, largest id).
const TAG_SPLIT: u64 = 0x5350_4c49_5400; // "SPLIT\0"

/// A group of ranks of a root bootstrap (see the module docs).
#[derive(Debug, Clone)]
pub struct SplitBootstrap {
    root: Arc<dyn Bootstrap>,
    /// Root rank of every member, by rank in this split.
    members: Vec<Rank>,
    me: Rank,
    id: u64,
}

/// The largest split id this process used with each root bootstrap.
fn ids() -> &'static Mutex<HashMap<usize, u64>> {
    static IDS: OnceLock<Mutex<HashMap<usize, u64>>> = OnceLock::new();
    IDS.get_or_init(Default::default)
}

fn root_key(root: &Arc<dyn Bootstrap>) -> usize {
    Arc::as_ptr(root).cast::<()>() as usize
}

/// Split `parent` (a root bootstrap) by `color` and `key`; `None` for a rank whose
/// colour is `None`. Collective over `parent`.
pub fn split(
    parent: Arc<dyn Bootstrap>,
    color: Option<u32>,
    key: u32,
) -> Result<Option<SplitBootstrap>> {
    let all: Vec<Rank> = (0..parent.size()).collect();
    let me = parent.rank();
    split_members(parent, &all, me, color, key)
}

impl SplitBootstrap {
    /// Split this group further (collective over its members); see [`split`].
    pub fn split(&self, color: Option<u32>, key: u32) -> Result<Option<SplitBootstrap>> {
        split_members(self.root.clone(), &self.members, self.me, color, key)
    }

    /// The root rank of this split's rank `r`.
    pub fn root_rank(&self, r: Rank) -> Option<Rank> {
        self.members.get(r as usize).copied()
    }

    fn tag(&self, tag: u64) -> Result<u64> {
        let low = if tag >= RESERVED_TAGS {
            // this split's own collectives
            SPLIT_USER_TAGS + (tag - RESERVED_TAGS).min(255)
        } else if tag < SPLIT_USER_TAGS {
            tag
        } else {
            return Err(HalError::invalid(format!(
                "tag {tag:#x} is too large for a split bootstrap: use tags below {SPLIT_USER_TAGS:#x}"
            )));
        };
        Ok(SPLIT_BIT | (self.id << 48) | low)
    }

    fn peer(&self, p: Rank) -> Result<Rank> {
        check_peer(p, self.members.len() as u32)?;
        Ok(self.members[p as usize])
    }
}

/// The split of `members` (root ranks; this rank is `members[me]`) by colour and key.
fn split_members(
    root: Arc<dyn Bootstrap>,
    members: &[Rank],
    me: Rank,
    color: Option<u32>,
    key: u32,
) -> Result<Option<SplitBootstrap>> {
    let used = ids()
        .lock()
        .map_err(|_| HalError::invalid("split id table poisoned"))?
        .get(&root_key(&root))
        .copied()
        .unwrap_or(0);
    let mut mine = Vec::with_capacity(17);
    mine.push(u8::from(color.is_some()));
    mine.extend_from_slice(&color.unwrap_or(0).to_le_bytes());
    mine.extend_from_slice(&key.to_le_bytes());
    mine.extend_from_slice(&used.to_le_bytes());
    // gather over the group being split, through the root's point-to-point messages
    let n = members.len();
    for (r, &p) in members.iter().enumerate() {
        if r as u32 != me {
            root.send(p, TAG_SPLIT, &mine)?;
        }
    }
    let mut all = Vec::with_capacity(n);
    for (r, &p) in members.iter().enumerate() {
        let b = if r as u32 == me {
            mine.clone()
        } else {
            root.recv(p, TAG_SPLIT)?
        };
        let field = |at: usize, len: usize| b.get(at..at + len).map(<[u8]>::to_vec);
        let parsed = (|| {
            let has = *b.first()?;
            let c = u32::from_le_bytes(field(1, 4)?.try_into().ok()?);
            let k = u32::from_le_bytes(field(5, 4)?.try_into().ok()?);
            let u = u64::from_le_bytes(field(9, 8)?.try_into().ok()?);
            Some(((has != 0).then_some(c), k, u))
        })();
        all.push(parsed.ok_or_else(|| {
            HalError::invalid(format!(
                "split: root rank {p} sent a malformed (colour, key): every rank must run the same commhal build"
            ))
        })?);
    }
    let id = all.iter().map(|&(_, _, u)| u).max().unwrap_or(0) + 1;
    if id > MAX_ID {
        return Err(HalError::invalid(format!(
            "split: {MAX_ID} splits of one bootstrap are the most this process supports"
        )));
    }
    ids()
        .lock()
        .map_err(|_| HalError::invalid("split id table poisoned"))?
        .insert(root_key(&root), id);
    let Some(color) = color else {
        return Ok(None);
    };
    let mut group: Vec<(u32, Rank, usize)> = all
        .iter()
        .enumerate()
        .filter(|(_, (c, _, _))| *c == Some(color))
        .map(|(r, &(_, k, _))| (k, members[r], r))
        .collect();
    group.sort_unstable();
    let new_me = group
        .iter()
        .position(|&(_, _, r)| r as u32 == me)
        .ok_or_else(|| HalError::invalid("split: this rank is missing from its own group"))?;
    Ok(Some(SplitBootstrap {
        root,
        members: group.iter().map(|&(_, p, _)| p).collect(),
        me: new_me as Rank,
        id,
    }))
}

impl Exchange for SplitBootstrap {
    fn me(&self) -> Rank {
        self.me
    }
    fn n(&self) -> u32 {
        self.members.len() as u32
    }
    fn limit(&self) -> Duration {
        self.root.timeout()
    }
    fn raw_send(&self, peer: Rank, tag: u64, data: &[u8]) -> Result<()> {
        self.root.send(self.peer(peer)?, self.tag(tag)?, data)
    }
    fn raw_recv(
        &self,
        peer: Rank,
        tag: u64,
        _deadline: Instant,
        _what: &dyn Fn() -> String,
    ) -> Result<Vec<u8>> {
        // bounded by the root's own timeout
        self.root.recv(self.peer(peer)?, self.tag(tag)?)
    }
}

impl Bootstrap for SplitBootstrap {
    fn rank(&self) -> Rank {
        self.me
    }
    fn size(&self) -> u32 {
        self.members.len() as u32
    }
    fn timeout(&self) -> Duration {
        self.root.timeout()
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
        self.root.send_fds(self.peer(peer)?, self.tag(tag)?, fds)
    }
    fn recv_fds(&self, peer: Rank, tag: u64) -> Result<Vec<OwnedFd>> {
        self.root.recv_fds(self.peer(peer)?, self.tag(tag)?)
    }
    fn peer_failure(&self) -> Option<Arc<AbortFlag>> {
        self.root.peer_failure()
    }
    fn abort_job(&self, origin: Option<Rank>, why: &str) {
        let origin = origin.and_then(|r| self.root_rank(r));
        self.root.abort_job(origin, why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::InProcBootstrap;

    /// `f(rank, bootstrap)` on every rank of an in-process world of `n`, as threads.
    fn world<T: Send>(n: u32, f: impl Fn(Rank, Arc<dyn Bootstrap>) -> T + Sync) -> Vec<T> {
        InProcBootstrap::run(n, |b| f(b.rank(), Arc::new(b)))
    }

    #[test]
    fn colours_form_groups_ordered_by_key() {
        let got = world(6, |r, b| {
            // even / odd ranks, reversed by key; rank 5 joins no group
            let color = (r != 5).then_some(r % 2);
            let s = split(b, color, 10 - r).expect("split");
            s.map(|s| {
                let all = s.all_gather(&[r as u8]).expect("all_gather");
                s.barrier().expect("barrier");
                (s.rank(), s.size(), all.concat())
            })
        });
        assert_eq!(got[0], Some((2, 3, vec![4, 2, 0])));
        assert_eq!(got[4], Some((0, 3, vec![4, 2, 0])));
        assert_eq!(got[1], Some((1, 2, vec![3, 1])));
        assert_eq!(got[5], None);
    }

    #[test]
    fn splits_of_splits_and_live_siblings_do_not_mix_messages() {
        let got = world(4, |r, b| {
            let whole = split(b.clone(), Some(0), r)
                .expect("split")
                .expect("member");
            let pairs = whole.split(Some(r / 2), r).expect("split").expect("member");
            // the same user tag on both live splits, to the same root peers where they overlap
            let peer = r ^ 1;
            whole.send(peer, 7, &[1, r as u8]).expect("send");
            pairs
                .send(pairs.rank() ^ 1, 7, &[2, r as u8])
                .expect("send");
            let a = pairs.recv(pairs.rank() ^ 1, 7).expect("recv");
            let b2 = whole.recv(peer, 7).expect("recv");
            let bc = pairs.broadcast(0, &[9, r as u8]).expect("broadcast");
            (a, b2, bc)
        });
        for (r, (a, b, bc)) in got.iter().enumerate() {
            let peer = (r ^ 1) as u8;
            assert_eq!(a, &vec![2, peer], "rank {r}: the pair's message");
            assert_eq!(b, &vec![1, peer], "rank {r}: the whole split's message");
            assert_eq!(bc[0], 9);
            assert_eq!(bc[1], (r as u8) & !1, "broadcast from the pair's rank 0");
        }
    }

    #[test]
    fn large_tags_are_refused() {
        let got = world(2, |r, b| {
            let s = split(b, Some(0), r).expect("split").expect("member");
            s.send(1 - r, SPLIT_USER_TAGS, &[0])
                .unwrap_err()
                .to_string()
        });
        assert!(got[0].contains("too large for a split"), "{}", got[0]);
    }
}
