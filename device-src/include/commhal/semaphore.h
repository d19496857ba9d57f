// semaphore.h — bounded waits on 64-bit inbound semaphores.
//
// A semaphore is a u64 counter in the waiter's memory. A peer (its device code or its
// proxy) adds 1 per signal. The waiter keeps `expected` = signals consumed so far and
// waits until the counter reaches expected + 1. Counters wrap at 2^64: "reached" is a
// signed difference (as in the Rust semaphores), so a counter started near 2^64 works.
#pragma once
#include "commhal/handles.h"

namespace commhal {

// True when counter value `v` has reached `target`, modulo 2^64.
COMMHAL_DEVICE bool counter_reached(u64 v, u64 target) {
  return static_cast<long long>(v - target) >= 0;
}

// Wait for one more signal. acquire = true: loads with acquire, so every write the
// signaller released before its signal is visible after this returns true.
// Spins at most spin_limit times; on timeout stores `timeout_error` into *error_flag
// (first error wins), leaves `expected` unchanged and returns false.
COMMHAL_DEVICE bool semaphore_wait(const u64* sem, u64& expected, u64 spin_limit,
                                   u32* error_flag, bool acquire, u32 timeout_error) {
  const u64 target = expected + 1;
  u64 spins = 0;
  for (;;) {
    const u64 v = acquire ? load_acquire(sem) : load_relaxed(sem);
    if (counter_reached(v, target)) break;
    if (++spins >= spin_limit) {
      set_error_once(error_flag, timeout_error);
      return false;
    }
  }
  expected = target;
  return true;
}

// Non-blocking: consume one signal if it has arrived (acquire), else return false.
COMMHAL_DEVICE bool semaphore_poll(const u64* sem, u64& expected) {
  if (counter_reached(load_acquire(sem), expected + 1)) {
    expected += 1;
    return true;
  }
  return false;
}

}  // namespace commhal
