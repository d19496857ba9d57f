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
