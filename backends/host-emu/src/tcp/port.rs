//! [`TcpPort`]: the sending side of one `host-tcp` connection, called by the proxy.
//!
//! * `write` checks both ranges, then streams the source bytes as `WRITE` frames of at
//!   most [`MAX_CHUNK`] bytes. It returns once the bytes are in the kernel's socket
//!   buffers, so the **source is reusable as soon as `write` returns**.
//! * `signal` checks the range and alignment and sends one `SIGNAL` frame; the peer
//!   applies it after every earlier frame (**strong signal**; puts are ordered too).
//! * `write_signal` checks both, then sends the `SIGNAL` frame in the same socket send
//!   as the write's last `WRITE` frame: the same frames in the same order as `write`
//!   then `signal`, for one system call and one wake-up of the peer's receiver fewer.
//! * `read` checks both ranges, then sends `READ` frames of at most [`MAX_CHUNK`]
//!   bytes; the peer's receiver answers each, after applying every earlier frame, with
//!   a `READ_DATA` frame that this side's receiver copies into the destination. It
//!   returns once the requests are sent (waiting, bounded, while more than
//!   `MAX_READS_IN_FLIGHT` bytes are unanswered).
//! * `flush` sends `FLUSH { seq }` and waits for `ACK { seq }`, which the peer's
//!   receiver sends after applying every earlier frame (and answering every earlier
//!   `READ`, whose data this side applied before the `ACK`): **remote visible** (and
//!   source reusable, and earlier reads landed) when it returns. Bounded:
//!   [`HalError::Timeout`] after the transport's timeout, [`HalError::PeerDead`] as soon
//!   as the connection is known closed.
//!
//! Dropping the port half-closes the connection; operations not followed by a
//! successful `flush` may be lost if the peer goes away.

use std::sync::Arc;
use std::time::Duration;

use commhal_hal::error::{Transfer, check_semaphore_offset, check_transfer};
use commhal_hal::transport::Port;
use commhal_hal::{HalError, Rank, Result};

use crate::tcp::link::{Link, PendingRead};
use crate::tcp::regions::{Mem, TcpLocal, TcpRemote};
use crate::tcp::wire::{HEADER_LEN, Header, MAX_CHUNK};

/// A connection to one peer. Owned by one (proxy) thread.
#[derive(Debug)]
pub struct TcpPort {
    link: Arc<Link>,
    /// Transport instance of the peer (owner of every valid [`TcpRemote`] for it).
    peer_instance: u64,
    /// This side's transport instance (owner of every valid [`TcpLocal`]).
    local_instance: u64,
    next_seq: u64,
    /// Number of the next `READ` frame (the peer numbers its answers the same way).
    next_read: u64,
    timeout: Duration,
    buf: Vec<u8>,
}

impl TcpPort {
    pub(crate) fn new(
        link: Arc<Link>,
        peer_instance: u64,
        local_instance: u64,
        timeout: Duration,
    ) -> TcpPort {
        TcpPort {
            link,
            peer_instance,
            local_instance,
            next_seq: 1,
            next_read: 1,
            timeout,
            buf: Vec::new(),
        }
    }

    /// The peer rank this port writes to.
    pub fn peer(&self) -> Rank {
        self.link.peer
    }

    fn check_remote(&self, r: &TcpRemote) -> Result<()> {
        if r.owner() == self.peer_instance {
            Ok(())
        } else {
            Err(HalError::invalid(format!(
                "the remote buffer (region {}) was exported by another host-tcp transport than rank {}'s, which this port connects to: import the export of the rank you write to",
                r.id(),
                self.link.peer
            )))
        }
    }
}

impl TcpPort {
    /// Everything `write` checks before sending.
    fn check_write(
        &self,
        dst: &TcpRemote,
        dst_off: u64,
        src: &TcpLocal,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        self.link.check()?;
        self.check_remote(dst)?;
        if src.owner() != self.local_instance {
            return Err(HalError::invalid(
                "the source buffer was registered with another host-tcp transport than this port's: register it with the transport you connected with",
            ));
        }
        let peer = self.link.peer;
        check_transfer(
            "host-tcp",
            Transfer::Write,
            len,
            (
                &format_args!("rank {peer}'s region {}", dst.id()),
                dst_off,
                dst.len(),
            ),
            (src_off, src.mem().len()),
        )
    }

    /// Everything `signal` checks; its encoded `SIGNAL` frame.
    fn check_signal(&self, sem: &TcpRemote, off: u64, add: u64) -> Result<[u8; HEADER_LEN]> {
        self.check_remote(sem)?;
        check_semaphore_offset(
            &format!(
                "host-tcp semaphore (rank {}'s region {})",
                self.link.peer,
                sem.id()
            ),
            off,
            sem.len(),
        )?;
        Ok(Header::Signal {
            region: sem.id(),
            offset: off,
            add,
        }
        .encode())
    }

    /// Send a checked write as `WRITE` frames of at most [`MAX_CHUNK`] bytes, one send
    /// each; `tail` (a complete frame) goes in the last chunk's send, behind it.
    fn send_write(
        &mut self,
        dst: &TcpRemote,
        dst_off: u64,
        src: &TcpLocal,
        src_off: u64,
        len: u64,
        tail: Option<[u8; HEADER_LEN]>,
    ) -> Result<()> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(MAX_CHUNK);
            let header = Header::Write {
                region: dst.id(),
                offset: dst_off + done,
                len: n,
            }
            .encode();
            let at = src_off + done;
            done += n;
            let tail: &[u8] = match &tail {
                Some(t) if done == len => t,
                _ => &[],
            };
            if let Mem::Host(h) = src.mem() {
                self.link.send_with(|fd| h.send(fd, &header, at, n, tail))?;
                continue;
            }
            // Memory the host reads through copies: into the reused buffer first.
            let end = HEADER_LEN + n as usize;
            if self.buf.len() < end {
                self.buf.resize(end, 0);
            }
            self.buf[..HEADER_LEN].copy_from_slice(&header);
            src.mem().read(at, &mut self.buf[HEADER_LEN..end])?;
            self.link.send(&[&self.buf[..end], tail])?;
        }
        match tail {
            // a zero-length write sends no frame; the signal still goes
            Some(t) if len == 0 => self.link.send(&[&t]),
            _ => Ok(()),
        }
    }
}

impl Port for TcpPort {
    type Local = TcpLocal;
    type Remote = TcpRemote;

    fn write(
        &mut self,
        dst: &TcpRemote,
        dst_off: u64,
        src: &TcpLocal,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        self.check_write(dst, dst_off, src, src_off, len)?;
        self.send_write(dst, dst_off, src, src_off, len, None)
    }

    /// The `WRITE` frames and the `SIGNAL` frame in one send (the signal's header
    /// rides behind the last chunk), so the peer's receiver applies both after one
    /// wake-up; the stream and the frames are the same as for the two calls.
    fn write_signal(
        &mut self,
        dst: &TcpRemote,
        dst_off: u64,
        src: &TcpLocal,
        src_off: u64,
        len: u64,
        signal: (&TcpRemote, u64, u64),
    ) -> Result<()> {
        self.check_write(dst, dst_off, src, src_off, len)?;
        let signal = self.check_signal(signal.0, signal.1, signal.2)?;
        self.send_write(dst, dst_off, src, src_off, len, Some(signal))
    }

    fn read(
        &mut self,
        dst: &TcpLocal,
        dst_off: u64,
        src: &TcpRemote,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        self.link.check()?;
        self.check_remote(src)?;
        if dst.owner() != self.local_instance {
            return Err(HalError::invalid(
                "the read's destination buffer was registered with another host-tcp transport than this port's: register it with the transport you connected with",
            ));
        }
        let peer = self.link.peer;
        check_transfer(
            "host-tcp",
            Transfer::Read,
            len,
            (
                &format_args!("rank {peer}'s region {}", src.id()),
                src_off,
                src.len(),
            ),
            (dst_off, dst.mem().len()),
        )?;
        let mut done = 0;
        while done < len {
            let n = (len - done).min(MAX_CHUNK);
            let seq = self.next_read;
            // Recorded before sending: the answer may arrive before `send` returns.
            self.link.expect_read(
                PendingRead {
                    seq,
                    dst: dst.clone(),
                    off: dst_off + done,
                    len: n,
                },
                self.timeout,
            )?;
            self.next_read += 1;
            let h = Header::Read {
                region: src.id(),
                offset: src_off + done,
                len: n,
            };
            self.link.send(&[&h.encode()])?;
            done += n;
        }
        Ok(())
    }

    fn signal(&mut self, sem: &TcpRemote, off: u64, add: u64) -> Result<()> {
        self.link.check()?;
        let h = self.check_signal(sem, off, add)?;
        self.link.send(&[&h])
    }

    fn flush(&mut self) -> Result<()> {
        self.link.check()?;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.link.flush_sent(seq);
        self.link.send(&[&Header::Flush { seq }.encode()])?;
        self.link.wait_ack(seq, self.timeout)
    }
}

impl Drop for TcpPort {
    fn drop(&mut self) {
        self.link.close();
    }
}
