// coll/ll16.cuh — LL16 slots and the bounded wait for one LL16 packet.
#pragma once
#include "coll/protocol.cuh"

// LL16 slots: slot(owner, sender) = scratch[owner] + LL + (parity * MAX_RANKS + sender)
// * slot_bytes, where `sender`'s packets for `owner` land.

COMMHAL_DEVICE u8* ll_slot(const CollArgs& a, u32 owner, u32 sender, u64 parity) {
  return reinterpret_cast<u8*>(a.scratch[owner] + COLL_OFF_LL +
                               (parity * COLL_MAX_RANKS + sender) * a.ll_slot_bytes);
}

// Bounded wait for LL16 packet `pk` with `flag`; returns its 8 data bytes.
COMMHAL_DEVICE uint2 ll_wait(const CollArgs& a, const u8* pk, u32 flag, bool& ok) {
  u32 d0 = 0, f0 = 0, d1 = 0, f1 = 0;
  u64 t0 = 0;
  for (u32 s = 0; ok; ++s) {
    load_volatile_v4u32(pk, d0, f0, d1, f1);
    if (f0 == flag && f1 == flag) break;
    if (spin_expired(a, s, t0, COLL_ERR_PACKET_TIMEOUT)) ok = false;
  }
  return make_uint2(d0, d1);
}
