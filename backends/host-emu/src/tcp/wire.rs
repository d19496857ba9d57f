//! The frames on a `host-tcp` connection (public so the format is documented and can
//! be exercised by tests; applications never build frames themselves).
//!
//! Every frame starts with a 32-byte header, little-endian:
//! `magic "HTF1"`, `kind: u32`, then three `u64` fields `a b c` whose meaning depends on
//! the kind:
//!
//! | kind | a | b | c | payload |
//! |---|---|---|---|---|
//! | 1 `WRITE` | region id | offset | length (1..=[`MAX_CHUNK`]) | `length` bytes |
//! | 2 `SIGNAL` | region id | offset (8-aligned) | add | — |
//! | 3 `FLUSH` | sequence number | 0 | 0 | — |
//! | 4 `ACK` | sequence number | 0 | 0 | — |
//! | 5 `ERROR` | 0 | 0 | text length (≤ [`MAX_ERROR_TEXT`]) | UTF-8 text |
//! | 6 `READ` | region id | offset | length (1..=[`MAX_CHUNK`]) | — |
//! | 7 `READ_DATA` | read number | 0 | length (1..=[`MAX_CHUNK`]) | `length` bytes |
//!
//! Both directions of a connection carry all kinds: each side's port sends
//! `WRITE`/`SIGNAL`/`FLUSH`/`READ`, each side's receiver answers `FLUSH` with `ACK`,
//! `READ` with `READ_DATA` (the bytes of the region at that moment; reads are numbered
//! from 1 in the order they arrive, so the port matches each answer to its read) and a
//! frame it refuses with `ERROR` (then closes the connection).
//! A header with a wrong magic, an unknown kind, non-zero unused fields or an
//! oversized length is malformed: the receiver refuses it before reading any payload.

/// Bytes of a frame header.
pub const HEADER_LEN: usize = 32;
/// Largest payload of one `WRITE` frame; longer writes are split.
pub const MAX_CHUNK: u64 = 1 << 20;
/// Largest text of an `ERROR` frame.
pub const MAX_ERROR_TEXT: u64 = 4096;

const MAGIC: &[u8; 4] = b"HTF1";

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// `len` bytes follow, to be copied into `region` at `offset`.
    Write {
        /// Region id on the receiver.
        region: u64,
        /// Byte offset in the region.
        offset: u64,
        /// Payload length.
        len: u64,
    },
    /// Atomically add `add` (release) to the 8-byte word at `offset` of `region`.
    Signal {
        /// Region id on the receiver.
        region: u64,
        /// Byte offset of the semaphore word.
        offset: u64,
        /// Amount to add.
        add: u64,
    },
    /// Answer with `Ack { seq }` once every earlier frame was applied.
    Flush {
        /// Sequence number chosen by the sender (increasing).
        seq: u64,
    },
    /// Every frame up to the `Flush { seq }` was applied.
    Ack {
        /// The flush's sequence number.
        seq: u64,
    },
    /// The peer refused a frame; `len` bytes of UTF-8 text follow.
    Error {
        /// Text length.
        len: u64,
    },
    /// Answer with `ReadData` carrying `len` bytes of `region` at `offset`, after
    /// applying every earlier frame.
    Read {
        /// Region id on the receiver.
        region: u64,
        /// Byte offset in the region.
        offset: u64,
        /// Bytes wanted.
        len: u64,
    },
    /// The answer to the `seq`-th `Read` of the connection; `len` bytes follow.
    ReadData {
        /// Which read (1 for the first `Read` the peer received, then 2, ...).
        seq: u64,
        /// Payload length (the read's length).
        len: u64,
    },
}

impl Header {
    /// The 32 header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let (kind, a, b, c) = match *self {
            Header::Write {
                region,
                offset,
                len,
            } => (1u32, region, offset, len),
            Header::Signal {
                region,
                offset,
                add,
            } => (2, region, offset, add),
            Header::Flush { seq } => (3, seq, 0, 0),
            Header::Ack { seq } => (4, seq, 0, 0),
            Header::Error { len } => (5, 0, 0, len),
            Header::Read {
                region,
                offset,
                len,
            } => (6, region, offset, len),
            Header::ReadData { seq, len } => (7, seq, 0, len),
        };
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(MAGIC);
        h[4..8].copy_from_slice(&kind.to_le_bytes());
        h[8..16].copy_from_slice(&a.to_le_bytes());
        h[16..24].copy_from_slice(&b.to_le_bytes());
        h[24..32].copy_from_slice(&c.to_le_bytes());
        h
    }

    /// Decode and validate a header; the error says what was malformed.
    pub fn decode(h: &[u8; HEADER_LEN]) -> Result<Header, String> {
        if &h[0..4] != MAGIC {
            return Err(format!("bad frame magic {:02x?}", &h[0..4]));
        }
        let kind = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&h[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let (a, b, c) = (word(8), word(16), word(24));
        let unused_zero = |fields: &[u64]| {
            if fields.iter().all(|&f| f == 0) {
                Ok(())
            } else {
                Err(format!("frame kind {kind} with non-zero unused fields"))
            }
        };
        match kind {
            1 if c == 0 || c > MAX_CHUNK => Err(format!(
                "WRITE frame of {c} bytes (must be 1..={MAX_CHUNK})"
            )),
            1 => Ok(Header::Write {
                region: a,
                offset: b,
                len: c,
            }),
            2 => Ok(Header::Signal {
                region: a,
                offset: b,
                add: c,
            }),
            3 => unused_zero(&[b, c]).map(|()| Header::Flush { seq: a }),
            4 => unused_zero(&[b, c]).map(|()| Header::Ack { seq: a }),
            5 if c > MAX_ERROR_TEXT => Err(format!(
                "ERROR frame with {c} bytes of text (at most {MAX_ERROR_TEXT})"
            )),
            5 => unused_zero(&[a, b]).map(|()| Header::Error { len: c }),
            6 | 7 if c == 0 || c > MAX_CHUNK => Err(format!(
                "{} frame of {c} bytes (must be 1..={MAX_CHUNK})",
                if kind == 6 { "READ" } else { "READ_DATA" }
            )),
            6 => Ok(Header::Read {
                region: a,
                offset: b,
                len: c,
            }),
            7 => unused_zero(&[b]).map(|()| Header::ReadData { seq: a, len: c }),
            k => Err(format!("unknown frame kind {k}")),
        }
    }
}

/// A complete `ERROR` frame carrying `text` (truncated to [`MAX_ERROR_TEXT`] bytes at
/// a character boundary).
pub fn error_frame(text: &str) -> Vec<u8> {
    let mut end = text.len().min(MAX_ERROR_TEXT as usize);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let body = &text.as_bytes()[..end];
    let mut f = Header::Error {
        len: body.len() as u64,
    }
    .encode()
    .to_vec();
    f.extend_from_slice(body);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_kind() {
        for h in [
            Header::Write {
                region: 3,
                offset: 9,
                len: MAX_CHUNK,
            },
            Header::Signal {
                region: 1,
                offset: 16,
                add: u64::MAX,
            },
            Header::Flush { seq: 7 },
            Header::Ack { seq: 7 },
            Header::Error { len: 12 },
            Header::Read {
                region: 2,
                offset: 5,
                len: MAX_CHUNK,
            },
            Header::ReadData { seq: 9, len: 1 },
        ] {
            assert_eq!(Header::decode(&h.encode()), Ok(h));
        }
    }

    #[test]
    fn malformed_headers_are_named() {
        let mut h = Header::Flush { seq: 1 }.encode();
        h[0] = b'X';
        assert!(Header::decode(&h).unwrap_err().contains("magic"));
        let mut h = Header::Flush { seq: 1 }.encode();
        h[4] = 77;
        assert!(
            Header::decode(&h)
                .unwrap_err()
                .contains("unknown frame kind")
        );
        let mut h = Header::Flush { seq: 1 }.encode();
        h[20] = 1;
        assert!(Header::decode(&h).unwrap_err().contains("unused"));
        let big = Header::Write {
            region: 1,
            offset: 0,
            len: MAX_CHUNK + 1,
        };
        assert!(Header::decode(&big.encode()).is_err());
        let empty = Header::Write {
            region: 1,
            offset: 0,
            len: 0,
        };
        assert!(Header::decode(&empty.encode()).is_err());
        assert!(Header::decode(&Header::Error { len: 1 << 20 }.encode()).is_err());
        for bad in [
            Header::Read {
                region: 1,
                offset: 0,
                len: 0,
            },
            Header::Read {
                region: 1,
                offset: 0,
                len: MAX_CHUNK + 1,
            },
            Header::ReadData { seq: 1, len: 0 },
        ] {
            assert!(Header::decode(&bad.encode()).unwrap_err().contains("READ"));
        }
        let mut h = Header::ReadData { seq: 1, len: 4 }.encode();
        h[16] = 1;
        assert!(Header::decode(&h).unwrap_err().contains("unused"));
    }

    #[test]
    fn error_text_is_capped_at_a_char_boundary() {
        let f = error_frame(&"é".repeat(5000));
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(&f[..HEADER_LEN]);
        let Ok(Header::Error { len }) = Header::decode(&h) else {
            panic!("not an error frame")
        };
        assert!(len <= MAX_ERROR_TEXT);
        assert!(std::str::from_utf8(&f[HEADER_LEN..]).is_ok());
    }
}
