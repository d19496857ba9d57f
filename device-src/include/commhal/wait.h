// wait.h — the one bounded wait of all commhal device code.
//
// Every device wait (a semaphore, an epoch flag, a packet, a copy-engine flag) spins
// through wait_until() with a WaitBound: it gives up once `limit_ns` nanoseconds of the
// GPU's global timer have passed since its first spin, or as soon as the error word
// is nonzero — set by another wait that gave up, by a peer (set_peer_error in the
// collectives), or by the host (the communicator's abort and its dead-peer watchdog
// write it through a host mapping) — and then stores its own code there (first error
// wins) and returns false. So one timeout, abort or dead peer drains every kernel of
// the rank instead of leaving each wait to run out its own bound. The host reads the
// word after the launch and turns the code into an error (ERR_* in handles.h).
// The clock and the error word are read every 1024th spin only: a spin is one load of
// the awaited word, and the check would otherwise double the traffic of a wait.
#pragma once
#include "commhal/handles.h"

namespace commhal {

// Where a wait reports, and how long it may spin.
struct WaitBound {
  // The rank's error word (device or host-mapped memory): polled, and set on give-up.
  u32* error;
  // Upper bound of one wait in nanoseconds; 0 gives up at the first clock check.
  u64 limit_ns;
};

// Spin s (0, 1, ...) of a wait; t0 is the caller's, set at spin 0. true = give up:
// limit_ns passed since spin 0 or the error word is set; `code` is then stored.
COMMHAL_DEVICE bool wait_expired(const WaitBound& b, u32 s, u64& t0, u32 code) {
  if ((s & 1023) != 0) return false;
  const u64 t = now_ns();
  if (s == 0) {
    t0 = t;
    return false;
  }
  if (t - t0 <= b.limit_ns && load_relaxed_u32(b.error) == 0) return false;
  set_error_once(b.error, code);
  return true;
}

// Spin until ready() returns true (true) or the bound expires (false, `code` stored).
template <typename Ready>
COMMHAL_DEVICE bool wait_until(const WaitBound& b, u32 code, Ready ready) {
  u64 t0 = 0;
  for (u32 s = 0;; ++s) {
    if (ready()) return true;
    if (wait_expired(b, s, t0, code)) return false;
  }
}

// The bound of a channel's waits: its handle's error flag and wait_ns
// (MemoryChannelHandle, PortChannelHandle).
template <typename Handle>
COMMHAL_DEVICE WaitBound channel_bound(const Handle& h) {
  return WaitBound{h.error_flag, h.wait_ns};
}

}  // namespace commhal
