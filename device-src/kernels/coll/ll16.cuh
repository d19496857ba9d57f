// coll/ll16.cuh — where the collectives' LL16 packets (commhal/packets.h) land.
#pragma once
#include "coll/protocol.cuh"
#include "commhal/packets.h"

// LL16 slots: slot(owner, sender) = scratch[owner] + LL + (parity * MAX_RANKS + sender)
// * slot_bytes, where `sender`'s packets for `owner` land.

COMMHAL_DEVICE u8* ll_slot(const CollArgs& a, u32 owner, u32 sender, u64 parity) {
  return reinterpret_cast<u8*>(a.scratch[owner] + COLL_OFF_LL +
                               (parity * COLL_MAX_RANKS + sender) * a.ll_slot_bytes);
}

// This rank's slots of one parity, in registers: sender p's packets start at from(p),
// ll_slot(a, rank, p, parity). For receive loops, where the packet asm's memory clobber
// would make ll_slot read `a` again after every wait.
struct LlInbox {
  u32 me;
  const u8* base;
  u64 slot_bytes;
  COMMHAL_DEVICE const u8* from(u32 p) const { return base + p * slot_bytes; }
};
COMMHAL_DEVICE LlInbox ll_inbox(const CollArgs& a, u64 parity) {
  return LlInbox{a.rank, ll_slot(a, a.rank, 0, parity), a.ll_slot_bytes};
}
