//! host-emu's [`SwitchMapped`] side: an emulated multicast group.
//!
//! `create_group`: every member allocates `len` bytes of shared memory (its *unicast*
//! buffer), sends its export to every other member through the bootstrap
//! ([`send_export`]/[`recv_export`] under the caller's `tag`), maps every peer's buffer,
//! then exchanges a "ready" message with every member (same tag), so when it returns on
//! one member every member has mapped — or the others fail with the bootstrap's timeout.
//!
//! **The multicast address** ([`HostSwitchGroup::multicast_addr`]) points at a small
//! read-only descriptor in this process, `u64` words:
//! `[MCAST_MAGIC, n, len, base_0, …, base_{n-1}]` — member count, bytes per member, and
//! every member's buffer address *as mapped in this process*, in group order (own buffer
//! included). Host "device code" reduces across the bases; [`HostSwitchGroup::reduce_into`]
//! and [`HostSwitchGroup::broadcast_from`] do it for Rust callers.
//!
//! **Consistency of the emulated switch** (weaker than nothing it claims, as strong as
//! the [`SwitchMapped`] contract needs):
//! * `reduce_into` reads each member's bytes with plain loads, member after member, at
//!   the time of the call. It returns the reduction of each member's data as of that
//!   member's last release the caller acquired — so synchronise first (group barrier or
//!   semaphores). It is not atomic across members or elements: a member writing while
//!   it runs gives torn, unspecified (but memory-safe) results.
//! * `broadcast_from` stores into every member's buffer in group order with plain stores;
//!   a member sees them after the broadcaster's next release and its own acquire (the
//!   next group barrier). Concurrent broadcasts to the same bytes race (last one wins,
//!   per member, unspecified).

use std::sync::Arc;

use commhal_hal::bootstrap::{Bootstrap, recv_export, send_export};
use commhal_hal::transport::{MemoryMapped, SwitchGroup, SwitchMapped};
use commhal_hal::{HalError, Rank, Region, Result};

use crate::memory::{ShmBuf, ShmMapping, ShmRegion};
use crate::transport::HostEmu;

/// First word of the multicast descriptor ("HEMUMCST").
pub const MCAST_MAGIC: u64 = u64::from_le_bytes(*b"HEMUMCST");
/// Words before the base addresses in the multicast descriptor.
pub const MCAST_HEADER_WORDS: usize = 3;

/// One member's view of an emulated multicast group.
#[derive(Debug)]
pub struct HostSwitchGroup {
    members: Vec<Rank>,
    me: usize,
    local: ShmRegion,
    /// Every member's buffer in group order; `[me]` is `local`'s.
    bufs: Vec<Arc<ShmBuf>>,
    /// Peer mappings (kept alive with the group), group order, own slot `None`.
    _peers: Vec<Option<ShmMapping>>,
    desc: Box<[u64]>,
}

impl SwitchMapped for HostEmu {
    type Group = HostSwitchGroup;

    fn create_group(
        &self,
        bootstrap: &dyn Bootstrap,
        members: &[Rank],
        len: u64,
        tag: u64,
    ) -> Result<HostSwitchGroup> {
        let me_rank = bootstrap.rank();
        let me = validate_members(members, me_rank, bootstrap.size())?;
        let local = ShmRegion::alloc(len)?;
        for (i, &peer) in members.iter().enumerate() {
            if i != me {
                send_export(bootstrap, peer, tag, &local.export()?)?;
            }
        }
        let mut peers = Vec::with_capacity(members.len());
        for (i, &peer) in members.iter().enumerate() {
            if i == me {
                peers.push(None);
                continue;
            }
            let e = recv_export(bootstrap, peer, tag)?;
            if e.len != len {
                return Err(HalError::invalid(format!(
                    "switch group (tag {tag}): rank {peer} bound {} bytes but rank {me_rank} bound {len}: every member must pass the same len",
                    e.len
                )));
            }
            peers.push(Some(MemoryMapped::map(self, e)?));
        }
        for (i, &peer) in members.iter().enumerate() {
            if i != me {
                bootstrap.send(peer, tag, b"ready")?;
            }
        }
        for (i, &peer) in members.iter().enumerate() {
            if i != me && bootstrap.recv(peer, tag)? != b"ready" {
                return Err(HalError::Bootstrap(format!(
                    "switch group (tag {tag}): unexpected message from rank {peer} instead of `ready`; do two groups share a tag?"
                )));
            }
        }
        let mut bufs: Vec<Arc<ShmBuf>> = peers
            .iter()
            .map(|p| {
                p.as_ref()
                    .map_or_else(|| local.buf().clone(), |m| m.buf().clone())
            })
            .collect();
        if self.faults.switch_drop_member
            && let Some(k) = (0..members.len()).rev().find(|&i| i != me)
        {
            // Test-only fault: this member's own buffer stands in for its last peer's.
            bufs[k] = local.buf().clone();
        }
        let mut desc = vec![MCAST_MAGIC, members.len() as u64, len];
        desc.extend(bufs.iter().map(|b| b.addr()));
        Ok(HostSwitchGroup {
            members: members.to_vec(),
            me,
            local,
            bufs,
            _peers: peers,
            desc: desc.into_boxed_slice(),
        })
    }
}

/// Index of `me` in `members`, after checking the list.
fn validate_members(members: &[Rank], me: Rank, size: u32) -> Result<usize> {
    if members.is_empty() {
        return Err(HalError::invalid(
            "switch group with no members: list at least this rank",
        ));
    }
    for (i, m) in members.iter().enumerate() {
        if *m >= size {
            return Err(HalError::invalid(format!(
                "switch group member {m} is not a rank of this {size}-rank communicator"
            )));
        }
        if members[..i].contains(m) {
            return Err(HalError::invalid(format!(
                "switch group lists rank {m} twice"
            )));
        }
    }
    members.iter().position(|&m| m == me).ok_or_else(|| {
        HalError::invalid(format!(
            "rank {me} called create_group for members {members:?} without being one: only members call it"
        ))
    })
}

impl HostSwitchGroup {
    /// This member's position in [`SwitchGroup::members`].
    pub fn member_index(&self) -> usize {
        self.me
    }

    /// Bytes bound per member.
    pub fn len(&self) -> u64 {
        self.local.len()
    }

    /// True when the group binds 0 bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Member `i`'s buffer (group order) as mapped here; `None` if `i` is out of range.
    pub fn member(&self, i: usize) -> Option<&ShmBuf> {
        self.bufs.get(i).map(|b| &**b)
    }

    /// The multicast descriptor words (see the module docs); `multicast_addr` points here.
    pub fn descriptor(&self) -> &[u64] {
        &self.desc
    }

    /// Reduce `out.len()` bytes at `offset` across every member into `out`: `out` starts
    /// as member 0's bytes, then `op(acc, member_i_bytes)` folds in members 1.. in group
    /// order. `op` interprets the bytes (element type, operation); it sees equal-length
    /// slices. Synchronise before calling (module docs).
    pub fn reduce_into<F>(&self, offset: u64, out: &mut [u8], mut op: F) -> Result<()>
    where
        F: FnMut(&mut [u8], &[u8]),
    {
        commhal_hal::error::check_range("switch reduce", offset, out.len() as u64, self.len())?;
        let mut tmp = vec![0u8; out.len()];
        for (i, b) in self.bufs.iter().enumerate() {
            if i == 0 {
                b.read(offset, out)?;
            } else {
                b.read(offset, &mut tmp)?;
                op(out, &tmp);
            }
        }
        Ok(())
    }

    /// Store `src` at `offset` in every member's buffer (own included), group order.
    pub fn broadcast_from(&self, offset: u64, src: &[u8]) -> Result<()> {
        commhal_hal::error::check_range("switch broadcast", offset, src.len() as u64, self.len())?;
        for b in &self.bufs {
            b.write(offset, src)?;
        }
        Ok(())
    }
}

impl SwitchGroup for HostSwitchGroup {
    fn unicast(&self) -> &dyn Region {
        &self.local
    }

    fn multicast_addr(&self) -> u64 {
        self.desc.as_ptr() as u64
    }

    fn members(&self) -> &[Rank] {
        &self.members
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_bootstrap::TestBootstrap;
    use commhal_hal::dynamic::DynSwitchMapped;
    use std::sync::Barrier;

    fn sum_u32(acc: &mut [u8], x: &[u8]) {
        for (a, b) in acc.chunks_exact_mut(4).zip(x.chunks_exact(4)) {
            let s = u32::from_ne_bytes(a.try_into().unwrap())
                .wrapping_add(u32::from_ne_bytes(b.try_into().unwrap()));
            a.copy_from_slice(&s.to_ne_bytes());
        }
    }

    #[test]
    fn three_members_reduce_and_broadcast() {
        // Ranks 0..4, group of [2, 0, 3] (rank 1 stays out), 1000 bytes each.
        let members = [2u32, 0, 3];
        let boots = TestBootstrap::group(4);
        let barrier = Barrier::new(members.len());
        std::thread::scope(|s| {
            for &r in &members {
                let b = &boots[r as usize];
                let barrier = &barrier;
                s.spawn(move || {
                    let t = HostEmu::new();
                    let g = SwitchMapped::create_group(&t, b, &members, 1000, 42).unwrap();
                    assert_eq!(g.members(), &members);
                    assert_eq!(members[g.member_index()], r);
                    // Descriptor: magic, n, len, bases with our own at our index.
                    // SAFETY: multicast_addr points at the group's descriptor, which
                    // lives as long as `g` and has MCAST_HEADER_WORDS + n words.
                    let desc = unsafe {
                        std::slice::from_raw_parts(
                            g.multicast_addr() as *const u64,
                            MCAST_HEADER_WORDS + 3,
                        )
                    };
                    assert_eq!(&desc[..3], &[MCAST_MAGIC, 3, 1000]);
                    assert_eq!(
                        desc[MCAST_HEADER_WORDS + g.member_index()],
                        g.unicast().addr()
                    );

                    let mine: Vec<u8> = (0..250u32)
                        .flat_map(|i| (r * 1000 + i).to_ne_bytes())
                        .collect();
                    g.member(g.member_index()).unwrap().write(0, &mine).unwrap();
                    barrier.wait();
                    let mut out = vec![0u8; 1000];
                    g.reduce_into(0, &mut out, sum_u32).unwrap();
                    for (i, w) in out.chunks_exact(4).enumerate() {
                        let want: u32 = members.iter().map(|m| m * 1000 + i as u32).sum();
                        assert_eq!(u32::from_ne_bytes(w.try_into().unwrap()), want);
                    }
                    barrier.wait();
                    if g.member_index() == 1 {
                        g.broadcast_from(996, &[7, 7, 7, 7]).unwrap();
                    }
                    barrier.wait();
                    let mut tail = [0u8; 4];
                    let own = g.member(g.member_index()).unwrap();
                    own.read(996, &mut tail).unwrap();
                    assert_eq!(tail, [7; 4]);
                    assert!(g.reduce_into(998, &mut [0u8; 4], sum_u32).is_err());
                    assert!(g.broadcast_from(1000, &[1]).is_err());
                    barrier.wait(); // keep every group alive until all have checked
                });
            }
        });
    }

    #[test]
    fn bad_member_lists_are_errors() {
        let boots = TestBootstrap::group(2);
        let t = HostEmu::new();
        assert!(SwitchMapped::create_group(&t, &boots[0], &[], 8, 1).is_err());
        assert!(SwitchMapped::create_group(&t, &boots[0], &[1], 8, 1).is_err());
        assert!(SwitchMapped::create_group(&t, &boots[0], &[0, 0], 8, 1).is_err());
        assert!(SwitchMapped::create_group(&t, &boots[0], &[0, 5], 8, 1).is_err());
        // A group of one works and reduces to its own data.
        let g = SwitchMapped::create_group(&t, &boots[0], &[0], 8, 1).unwrap();
        g.broadcast_from(0, &[1; 8]).unwrap();
        let mut out = [0u8; 8];
        g.reduce_into(0, &mut out, |_, _| unreachable!()).unwrap();
        assert_eq!(out, [1; 8]);
    }

    #[test]
    fn mismatched_lengths_fail_and_dyn_mirror_works() {
        let boots = TestBootstrap::group(2);
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                let d: &dyn DynSwitchMapped = &HostEmu::new();
                d.create_group(&boots[1], &[0, 1], 64, 9)
                    .map(|g| g.unicast().len())
            });
            let r0 = SwitchMapped::create_group(&HostEmu::new(), &boots[0], &[0, 1], 32, 9);
            let e = r0.unwrap_err().to_string();
            assert!(e.contains("same len"), "{e}");
            // Rank 1 sees the mismatch too (or times out waiting for `ready`): an error.
            assert!(h.join().unwrap().is_err());
        });
    }
}
