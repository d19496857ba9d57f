// port_channel.h — device side of a PortChannel: one thread pushes 16-byte triggers
// into a host-pinned FIFO; the host proxy performs them with a PortMapped transport.
//
// Protocol (see Trigger in handles.h for the bit layout and the proxy's side):
//   1. slot = atomic add 1 on *head (relaxed): reserves a slot; any number of
//      threads may push concurrently.
//   2. wait (bounded) until slot < *tail + fifo_depth (acquire): the ring has room
//      (fifo_room; a cached tail in device memory spares the read of the pinned one).
//   3. store w0 (relaxed), then w1 with the valid bit (release, system scope). The
//      release orders every write this thread did or observed (e.g. the block's data
//      after __syncthreads) before the proxy's copy.
// flush(): push FLUSH and wait (bounded) until *tail > slot.
// After any false return the channel is broken (a reserved slot may stay empty):
// the host must read *error_flag and tear the channel down.
#pragma once
#include "commhal/handles.h"
#include "commhal/semaphore.h"

namespace commhal {

// Wait (bounded, `code` stored on give-up) until the proxy's tail satisfies `ready`.
// `seen`, where not null, is a word of device memory that caches the highest tail these
// waits read: tails only grow, so a cached tail that satisfies `ready` spares the read
// of the host-pinned one (a round trip over PCIe, 1-2 us), and a read raises it.
template <typename Ready>
COMMHAL_DEVICE bool fifo_wait_tail(PortChannelHandle& h, u64* seen, u32 code, Ready ready) {
  if (seen != nullptr && ready(load_acquire(seen))) return true;
  u64 t = 0;
  if (!wait_until(channel_bound(h), code, [&] {
        t = load_acquire(h.tail);
        return ready(t);
      }))
    return false;
  if (seen != nullptr) fetch_max_release(seen, t);
  return true;
}

// Wait until the ring has room for slot `last` (`seen`: fifo_wait_tail). Sets
// ERR_FIFO_FULL_TIMEOUT on a ring that never drained.
COMMHAL_DEVICE bool fifo_room(PortChannelHandle& h, u64 last, u64* seen) {
  return fifo_wait_tail(h, seen, ERR_FIFO_FULL_TIMEOUT,
                        [&](u64 t) { return last < t + h.fifo_depth; });
}

// Push one trigger. Returns false on a full ring that never drained (sets
// ERR_FIFO_FULL_TIMEOUT). On success *slot_out holds the slot's sequence number.
// `seen`: fifo_wait_tail.
COMMHAL_DEVICE bool fifo_push(PortChannelHandle& h, Trigger t, u64* slot_out,
                              u64* seen = nullptr) {
  const u64 slot = fetch_add_relaxed(h.head, 1);
  if (!fifo_room(h, slot, seen)) return false;
  Trigger* p = h.fifo + (slot % h.fifo_depth);
  store_relaxed(&p->w0, t.w0);
  store_release(&p->w1, t.w1);
  if (slot_out) *slot_out = slot;
  return true;
}

// Push two triggers into consecutive slots, the second stored first: once the proxy
// sees the first valid, the second is too, so it may perform them as one (the plans'
// put and its signal: one send on host-tcp). Same bound and errors as fifo_push;
// *slot_out: the second's sequence number.
COMMHAL_DEVICE bool fifo_push2(PortChannelHandle& h, Trigger first, Trigger second,
                               u64* slot_out = nullptr, u64* seen = nullptr) {
  const u64 slot = fetch_add_relaxed(h.head, 2);
  if (!fifo_room(h, slot + 1, seen)) return false;
  Trigger* p1 = h.fifo + ((slot + 1) % h.fifo_depth);
  store_relaxed(&p1->w0, second.w0);
  store_release(&p1->w1, second.w1);
  Trigger* p0 = h.fifo + (slot % h.fifo_depth);
  store_relaxed(&p0->w0, first.w0);
  store_release(&p0->w1, first.w1);
  if (slot_out) *slot_out = slot + 1;
  return true;
}

// Wait until the proxy finished the trigger with sequence number `slot` (`seen`:
// fifo_wait_tail).
COMMHAL_DEVICE bool fifo_wait_done(PortChannelHandle& h, u64 slot, u64* seen = nullptr) {
  return fifo_wait_tail(h, seen, ERR_FLUSH_TIMEOUT, [&](u64 t) { return t > slot; });
}

// Build and push a trigger; rejects offsets/lengths that do not fit 32 bits.
COMMHAL_DEVICE bool port_push(PortChannelHandle& h, u64 type, u64 dst_off, u64 src_off,
                              u64 len, u64* slot_out, u64* seen = nullptr) {
  if (dst_off > 0xffffffffull || src_off > 0xffffffffull || len > 0xffffffffull) {
    set_error_once(h.error_flag, ERR_TRIGGER_RANGE);
    return false;
  }
  return fifo_push(h,
                   make_trigger(type, (u32)dst_off, (u32)src_off, (u32)len, h.remote_memory_id,
                                h.local_memory_id, h.semaphore_id),
                   slot_out, seen);
}

// Ask the proxy to copy local[src_off..+len] to remote[dst_off..]. One thread.
COMMHAL_DEVICE bool port_put(PortChannelHandle& h, u64 dst_off, u64 src_off, u64 len) {
  return port_push(h, TRIGGER_PUT, dst_off, src_off, len, 0);
}
// Ask the proxy to increment the peer's semaphore (ordered per the backend's
// Guarantees::signal). One thread.
COMMHAL_DEVICE bool port_signal(PortChannelHandle& h) {
  return port_push(h, TRIGGER_SIGNAL, 0, 0, 0, 0);
}
COMMHAL_DEVICE bool port_put_with_signal(PortChannelHandle& h, u64 dst_off, u64 src_off,
                                         u64 len) {
  return port_push(h, TRIGGER_PUT | TRIGGER_SIGNAL, dst_off, src_off, len, 0);
}
// Push FLUSH and wait until the proxy's flush completed (Guarantees::flush says what
// that means: source reusable and/or remote visible).
COMMHAL_DEVICE bool port_flush(PortChannelHandle& h) {
  u64 slot;
  if (!port_push(h, TRIGGER_FLUSH, 0, 0, 0, &slot)) return false;
  return fifo_wait_done(h, slot);
}
COMMHAL_DEVICE bool port_put_with_signal_and_flush(PortChannelHandle& h, u64 dst_off,
                                                   u64 src_off, u64 len) {
  u64 slot;
  if (!port_push(h, TRIGGER_PUT | TRIGGER_SIGNAL | TRIGGER_FLUSH, dst_off, src_off, len, &slot))
    return false;
  return fifo_wait_done(h, slot);
}
// Wait for the next signal the peer's proxy delivered into local_semaphore.
COMMHAL_DEVICE bool port_wait(PortChannelHandle& h) {
  return semaphore_wait(h.local_semaphore, h.expected, channel_bound(h), true,
                        ERR_WAIT_TIMEOUT);
}
COMMHAL_DEVICE bool port_poll(PortChannelHandle& h) {
  return semaphore_poll(h.local_semaphore, h.expected);
}

}  // namespace commhal
