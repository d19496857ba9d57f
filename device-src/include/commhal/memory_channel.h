// memory_channel.h — device functions of a MemoryChannel (thread-copy over a peer
// mapping).
//
// Ordering contract:
//   * put/get are weak copies. To publish a put, every thread that copied must be
//     ordered before the signalling thread (caller's job: __syncthreads() when the
//     copy was spread over a block), then ONE thread calls signal().
//   * signal() is a system-scope release add on the peer's semaphore: every write this
//     thread did or observed before it is visible to the peer after its wait().
//   * wait() is an acquire: after it returns true, the peer's released writes are
//     visible to this thread (share them with the block via __syncthreads()).
//   * relaxed_signal/relaxed_wait order nothing but the counter (barriers without data).
//   * Only one thread may wait/poll on a handle at a time (it updates `expected`).
#pragma once
#include "commhal/copy.h"
#include "commhal/handles.h"
#include "commhal/semaphore.h"

namespace commhal {

// local_buf + src_off -> remote_buf + dst_off, `bytes` bytes, cooperatively.
COMMHAL_DEVICE void put(const MemoryChannelHandle& h, u64 dst_off, u64 src_off, u64 bytes,
                        u32 tid, u32 nthreads) {
  copy_cooperative(reinterpret_cast<u8*>(h.remote_buf) + dst_off,
                   reinterpret_cast<const u8*>(h.local_buf) + src_off, bytes, tid, nthreads);
}

// remote_buf + src_off -> local_buf + dst_off, `bytes` bytes, cooperatively. The caller
// must know the peer's data is ready (a wait() on a signal the peer sent after writing).
COMMHAL_DEVICE void get(const MemoryChannelHandle& h, u64 dst_off, u64 src_off, u64 bytes,
                        u32 tid, u32 nthreads) {
  copy_cooperative(reinterpret_cast<u8*>(h.local_buf) + dst_off,
                   reinterpret_cast<const u8*>(h.remote_buf) + src_off, bytes, tid, nthreads);
}

// Increment the peer's semaphore with release (one thread).
COMMHAL_DEVICE void signal(const MemoryChannelHandle& h) {
  fetch_add_release(h.remote_semaphore, 1);
}

// Increment the peer's semaphore without ordering earlier writes (one thread).
COMMHAL_DEVICE void relaxed_signal(const MemoryChannelHandle& h) {
  fetch_add_relaxed(h.remote_semaphore, 1);
}

// Wait (acquire, bounded: commhal/wait.h) for the next signal. false = gave up, and
// *error_flag holds ERR_WAIT_TIMEOUT (or the error that ended the wait).
COMMHAL_DEVICE bool wait(MemoryChannelHandle& h) {
  return semaphore_wait(h.local_semaphore, h.expected, channel_bound(h), true,
                        ERR_WAIT_TIMEOUT);
}

// As wait() but relaxed: no visibility of the peer's data is promised.
COMMHAL_DEVICE bool relaxed_wait(MemoryChannelHandle& h) {
  return semaphore_wait(h.local_semaphore, h.expected, channel_bound(h), false,
                        ERR_WAIT_TIMEOUT);
}

// Consume the next signal if it already arrived (acquire); never blocks.
COMMHAL_DEVICE bool poll(MemoryChannelHandle& h) {
  return semaphore_poll(h.local_semaphore, h.expected);
}

// Memory channels complete stores synchronously from the issuing thread's view:
// nothing to flush. Kept so generic code can call flush() on every channel kind.
COMMHAL_DEVICE bool flush(const MemoryChannelHandle&) { return true; }

}  // namespace commhal
