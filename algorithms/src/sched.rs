//! The symbolic scheduler: runs a plan's blocks in some legal interleaving, honouring
//! program order, signal/wait semaphores, packet arrival and intra-rank barriers.
//!
//! Used by the validator (deadlock check, no data) and by the simulator (with data). A
//! block may run its next op unless that op is a `Wait` with no unconsumed signal, a
//! `ReadReducePackets` whose packets have not all arrived, or a `Barrier` some block of
//! the rank has not reached. When no block can run and some are unfinished, the plan
//! deadlocks and [`Stuck`] lists every blocked op.

use crate::error::Location;
use crate::plan::{ChannelKind, Op, Plan};
use std::collections::HashMap;

/// Semaphore identity: `(src rank, dst rank, channel, tag)`.
pub type SemKey = (u32, u32, ChannelKind, u32);
/// Packet slot identity: `(sender, receiver, scratch chunk index, chunk count)`.
pub type PacketKey = (u32, u32, u32, u32);

/// Order in which runnable blocks are picked. Different policies expose races in the
/// simulator (a plan's result must not depend on the interleaving).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Lowest (rank, block) first, each run as far as it can go.
    InOrder,
    /// Highest (rank, block) first, each run as far as it can go.
    Reverse,
    /// Pseudo-random choice of one op at a time (xorshift from this seed).
    Seeded(u64),
}

/// The blocked ops of a deadlocked plan.
#[derive(Debug, Clone)]
pub struct Stuck {
    /// `(where, op)` for every unfinished block.
    pub blocked: Vec<(Location, Op)>,
}

impl std::fmt::Display for Stuck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "deadlock: no block can advance; blocked: ")?;
        for (i, (l, o)) in self.blocked.iter().enumerate() {
            if i > 0 {
                write!(f, "; ")?;
            }
            write!(f, "[{l}] {o:?}")?;
        }
        Ok(())
    }
}

/// Why a run ended early.
#[derive(Debug)]
pub enum RunError<E> {
    /// Deadlock.
    Stuck(Stuck),
    /// The op callback failed.
    Exec(E),
}

/// Scheduler state over a flattened plan.
#[derive(Debug)]
pub struct Scheduler {
    flat: Vec<Vec<Vec<(Location, Op)>>>,
    pc: Vec<Vec<usize>>,
    barriers: Vec<Vec<usize>>,
    sems: HashMap<SemKey, (u64, u64)>,
    packets: HashMap<PacketKey, (u64, u64)>,
    rng: u64,
}

impl Scheduler {
    /// A scheduler at the start of `plan`.
    pub fn new(plan: &Plan) -> Scheduler {
        let flat = plan.flatten();
        let pc = flat.iter().map(|r| vec![0; r.len()]).collect();
        let barriers = flat.iter().map(|r| vec![0; r.len()]).collect();
        Scheduler {
            flat,
            pc,
            barriers,
            sems: HashMap::new(),
            packets: HashMap::new(),
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    fn next(&self, r: usize, b: usize) -> Option<&(Location, Op)> {
        self.flat[r][b].get(self.pc[r][b])
    }

    fn runnable(&self, r: usize, b: usize) -> bool {
        let Some((_, op)) = self.next(r, b) else {
            return false;
        };
        let me = r as u32;
        match op {
            Op::Wait { peer, channel, tag } => {
                let (s, c) = self
                    .sems
                    .get(&(*peer, me, *channel, *tag))
                    .copied()
                    .unwrap_or((0, 0));
                s > c
            }
            Op::ReadReducePackets { packets, .. } => packets.iter().all(|(p, c)| {
                let (a, used) = self
                    .packets
                    .get(&(*p, me, c.index, c.count))
                    .copied()
                    .unwrap_or((0, 0));
                a > used
            }),
            Op::Barrier => {
                let k = self.barriers[r][b];
                (0..self.flat[r].len()).all(|o| {
                    self.barriers[r][o] > k
                        || (self.barriers[r][o] == k
                            && matches!(self.next(r, o), Some((_, Op::Barrier))))
                })
            }
            _ => true,
        }
    }

    fn advance(&mut self, r: usize, b: usize) {
        let me = r as u32;
        let op = self.flat[r][b][self.pc[r][b]].1.clone();
        match &op {
            Op::Signal { peer, channel, tag } => {
                self.sems.entry((me, *peer, *channel, *tag)).or_default().0 += 1
            }
            Op::Wait { peer, channel, tag } => {
                self.sems.entry((*peer, me, *channel, *tag)).or_default().1 += 1
            }
            Op::PutPackets { peer, dst, .. } => {
                self.packets
                    .entry((me, *peer, dst.index, dst.count))
                    .or_default()
                    .0 += 1
            }
            Op::ReadReducePackets { packets, .. } => {
                for (p, c) in packets {
                    self.packets
                        .entry((*p, me, c.index, c.count))
                        .or_default()
                        .1 += 1;
                }
            }
            Op::Barrier => self.barriers[r][b] += 1,
            _ => {}
        }
        self.pc[r][b] += 1;
    }

    fn rand(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Run to completion, calling `exec` on each op just before it takes effect.
    pub fn run<E>(
        &mut self,
        policy: Policy,
        mut exec: impl FnMut(&Location, &Op) -> Result<(), E>,
    ) -> Result<(), RunError<E>> {
        if let Policy::Seeded(s) = policy {
            self.rng = s.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
        }
        loop {
            let ready: Vec<(usize, usize)> = (0..self.flat.len())
                .flat_map(|r| (0..self.flat[r].len()).map(move |b| (r, b)))
                .filter(|&(r, b)| self.runnable(r, b))
                .collect();
            if ready.is_empty() {
                let blocked: Vec<(Location, Op)> = (0..self.flat.len())
                    .flat_map(|r| (0..self.flat[r].len()).map(move |b| (r, b)))
                    .filter_map(|(r, b)| self.next(r, b).cloned())
                    .collect();
                return if blocked.is_empty() {
                    Ok(())
                } else {
                    Err(RunError::Stuck(Stuck { blocked }))
                };
            }
            let (r, b, run_far) = match policy {
                Policy::InOrder => (ready[0].0, ready[0].1, true),
                Policy::Reverse => (ready[ready.len() - 1].0, ready[ready.len() - 1].1, true),
                Policy::Seeded(_) => {
                    let i = (self.rand() % ready.len() as u64) as usize;
                    (ready[i].0, ready[i].1, false)
                }
            };
            loop {
                let (loc, op) = self.flat[r][b][self.pc[r][b]].clone();
                exec(&loc, &op).map_err(RunError::Exec)?;
                self.advance(r, b);
                if !run_far || !self.runnable(r, b) {
                    break;
                }
            }
        }
    }

    /// Unconsumed signals and packets after a run: `(semaphores, packet slots)` whose
    /// producer count exceeds the consumer count.
    pub fn leftovers(&self) -> (Vec<SemKey>, Vec<PacketKey>) {
        let mut s: Vec<_> = self
            .sems
            .iter()
            .filter(|(_, (a, c))| a > c)
            .map(|(k, _)| *k)
            .collect();
        let mut p: Vec<_> = self
            .packets
            .iter()
            .filter(|(_, (a, c))| a > c)
            .map(|(k, _)| *k)
            .collect();
        s.sort();
        p.sort();
        (s, p)
    }
}
