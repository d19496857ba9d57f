// semaphore.h — the two ways device code learns that a peer got somewhere, both
// bounded by commhal/wait.h.
//
// Counting semaphores (channels). A semaphore is a u64 counter in the waiter's memory.
// A peer (its device code or its proxy) adds 1 per signal. The waiter keeps `expected`
// = signals consumed so far and waits until the counter reaches expected + 1. Counters
// wrap at 2^64: "reached" is a signed difference (as in the Rust semaphores), so a
// counter started near 2^64 works.
//
// Epoch flags (collectives). A u64 word that only grows: the signaller stores its new
// value — a launch epoch e, or (e << 32) | round — with release, and the waiter waits
// until the word is >= the value it needs, with acquire. A store needs no read of the
// remote word (an atomic add over NVLink is a round trip, a store costs the storing
// thread nothing), and a word that only grows never has to be reset between launches.
#pragma once
#include "commhal/handles.h"
#include "commhal/wait.h"

namespace commhal {

// True when counter value `v` has reached `target`, modulo 2^64.
COMMHAL_DEVICE bool counter_reached(u64 v, u64 target) {
  return static_cast<long long>(v - target) >= 0;
}

// Wait for one more signal. acquire = true: loads with acquire, so every write the
// signaller released before its signal is visible after this returns true.
// On give-up (commhal/wait.h) stores `timeout_error`, leaves `expected` unchanged and
// returns false.
COMMHAL_DEVICE bool semaphore_wait(const u64* sem, u64& expected, const WaitBound& b,
                                   bool acquire, u32 timeout_error) {
  const u64 target = expected + 1;
  const bool ok = wait_until(b, timeout_error, [&] {
    return counter_reached(acquire ? load_acquire(sem) : load_relaxed(sem), target);
  });
  if (ok) expected = target;
  return ok;
}

// Non-blocking: consume one signal if it has arrived (acquire), else return false.
COMMHAL_DEVICE bool semaphore_poll(const u64* sem, u64& expected) {
  if (counter_reached(load_acquire(sem), expected + 1)) {
    expected += 1;
    return true;
  }
  return false;
}

// Raise epoch flag `flag` (local or a peer's, mapped) to `value`, releasing every
// write this thread did or observed before (one thread; after __syncthreads when the
// block's writes must be published).
COMMHAL_DEVICE void flag_signal(u64* flag, u64 value) { store_release(flag, value); }

// Wait (acquire) until epoch flag `flag` is >= value. false = gave up
// (ERR_WAIT_TIMEOUT stored).
COMMHAL_DEVICE bool flag_wait(const u64* flag, u64 value, const WaitBound& b) {
  return wait_until(b, ERR_WAIT_TIMEOUT, [&] { return load_acquire(flag) >= value; });
}

// Handshake of this block with the same block of ranks 0..n, but `me` and the ranks in
// `skip` (bit p): after the block's earlier writes (__syncthreads, then a release store),
// thread p raises flag slot(p, me) of rank p to `value` and waits until its own
// slot(me, p) reaches it (acquire), then the block syncs. slot(owner, from) is the flag
// in rank owner's memory that rank `from` raises for this block. The hand-written
// collectives' block barriers and the plans' start / end handshakes (the block's
// same-numbered block on every peer runs the same slice of the work).
template <typename Slot>
COMMHAL_DEVICE void block_handshake(u32 me, u32 n, u32 skip, u64 value, const WaitBound& b,
                                    Slot slot) {
  __syncthreads();
  for (u32 p = threadIdx.x; p < n; p += blockDim.x) {
    if (p == me || ((skip >> p) & 1)) continue;
    flag_signal(slot(p, me), value);
    flag_wait(slot(me, p), value, b);
  }
  __syncthreads();
}

}  // namespace commhal
