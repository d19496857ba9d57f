//! The TCP bootstrap's wire format. Every frame is a 24-byte header followed by a
//! payload:
//!
//! | bytes | field                                             |
//! |-------|---------------------------------------------------|
//! | 0..4  | magic `CMHL`                                      |
//! | 4..6  | version (little-endian u16, currently 1)          |
//! | 6..8  | kind (hello, table, abort, data, leave)           |
//! | 8..16 | tag (little-endian u64; data frames only)         |
//! | 16..24| payload length (little-endian u64)                |
//!
//! Nothing read from a socket is trusted: bad magic, an unknown version or kind, or a
//! length above the cap for the connection's state is an error and the connection is
//! dropped. Unauthenticated connections may only send a hello of at most
//! [`MAX_HELLO`] bytes, so a stranger cannot make a rank allocate memory.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use crate::topology::Rank;

/// Largest payload of one bootstrap message (256 MiB). Larger messages are refused on
/// send and on receipt; bulk data belongs to a transport, not the bootstrap.
pub const MAX_MESSAGE: u64 = 256 << 20;

/// Largest hello (the first frame of a connection, before it is authenticated).
pub(crate) const MAX_HELLO: u64 = 4096;

/// Largest table or abort frame (sent by the root to authenticated ranks).
pub(crate) const MAX_CONTROL: u64 = 64 << 20;

pub(crate) const MAGIC: [u8; 4] = *b"CMHL";
pub(crate) const VERSION: u16 = 1;
pub(crate) const HEADER_LEN: usize = 24;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// First frame of every connection: who I am, and the job secret.
    Hello = 1,
    /// Root → rank: every rank's listening address and host.
    Table = 2,
    /// Root → rank: the job cannot start (a rank is missing, or this one was refused).
    Abort = 3,
    /// Rank → rank: a `send` payload under a tag.
    Data = 4,
    /// Rank → rank: this rank dropped its bootstrap on purpose; the close that follows
    /// is a departure, not a failure.
    Leave = 5,
}

impl Kind {
    fn from_u16(v: u16) -> Option<Kind> {
        match v {
            1 => Some(Kind::Hello),
            2 => Some(Kind::Table),
            3 => Some(Kind::Abort),
            4 => Some(Kind::Data),
            5 => Some(Kind::Leave),
            _ => None,
        }
    }
}

/// A received frame.
#[derive(Debug)]
pub(crate) struct Frame {
    pub kind: Kind,
    pub tag: u64,
    pub payload: Vec<u8>,
}

/// Why a frame was not accepted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("malformed frame: {0}")]
    Malformed(String),
}

/// Write one frame. Small frames go out in one write.
pub(crate) fn write_frame(
    w: &mut impl Write,
    kind: Kind,
    tag: u64,
    payload: &[u8],
) -> io::Result<()> {
    let mut header = [0u8; HEADER_LEN];
    header[0..4].copy_from_slice(&MAGIC);
    header[4..6].copy_from_slice(&VERSION.to_le_bytes());
    header[6..8].copy_from_slice(&(kind as u16).to_le_bytes());
    header[8..16].copy_from_slice(&tag.to_le_bytes());
    header[16..24].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    if payload.len() <= 64 * 1024 {
        let mut buf = Vec::with_capacity(HEADER_LEN + payload.len());
        buf.extend_from_slice(&header);
        buf.extend_from_slice(payload);
        w.write_all(&buf)
    } else {
        w.write_all(&header)?;
        w.write_all(payload)
    }
}

/// Read one frame whose payload may be at most `max_len` bytes. `Ok(None)` is a clean
/// end of stream (the peer closed between frames).
pub(crate) fn read_frame(r: &mut impl Read, max_len: u64) -> Result<Option<Frame>, WireError> {
    let mut header = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(WireError::Malformed(format!(
                    "connection closed after {got} of {HEADER_LEN} header bytes"
                )));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    if header[0..4] != MAGIC {
        return Err(WireError::Malformed(format!(
            "bad magic {:02x?} (expected {:02x?}): not a commhal bootstrap peer",
            &header[0..4],
            MAGIC
        )));
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    if version != VERSION {
        return Err(WireError::Malformed(format!(
            "protocol version {version}, this build speaks {VERSION}: run the same commhal version on every rank"
        )));
    }
    let raw_kind = u16::from_le_bytes([header[6], header[7]]);
    let kind = Kind::from_u16(raw_kind)
        .ok_or_else(|| WireError::Malformed(format!("unknown frame kind {raw_kind}")))?;
    let tag = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
    let len = u64::from_le_bytes(header[16..24].try_into().expect("8 bytes"));
    if len > max_len {
        return Err(WireError::Malformed(format!(
            "{kind:?} frame announces {len} bytes, more than the {max_len} allowed here"
        )));
    }
    // Grow as bytes arrive rather than trusting `len` for one allocation.
    let mut payload = Vec::with_capacity(len.min(1 << 20) as usize);
    r.take(len).read_to_end(&mut payload)?;
    if payload.len() as u64 != len {
        return Err(WireError::Malformed(format!(
            "connection closed after {} of {len} payload bytes",
            payload.len()
        )));
    }
    Ok(Some(Frame { kind, tag, payload }))
}

/// The first frame of every connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Hello {
    /// Sender's rank.
    pub rank: Rank,
    /// Sender's idea of the world size.
    pub size: u32,
    /// The job secret, hex.
    pub secret: String,
    /// Port of the sender's mesh listener (to the root only; 0 otherwise).
    pub port: u16,
    /// Sender's host id ([`crate::topology::host_id`]).
    pub host: String,
}

/// One rank's entry in the root's table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PeerInfo {
    /// Where its mesh listener accepts connections.
    pub addr: String,
    /// Its host id.
    pub host: String,
}

/// Why the root gave up, sent to every rank that joined (or to a refused client).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Abort {
    /// What is wrong, naming the rank(s) at fault.
    pub what: String,
    /// Set when the cause was a timeout of this many milliseconds.
    pub millis: Option<u64>,
    /// The rank whose failure caused this abort, when the sender knows it (absent in
    /// older peers' messages).
    #[serde(default)]
    pub origin: Option<u32>,
}

/// Encode a control message.
pub(crate) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("control messages always serialize")
}

/// Decode a control message, naming what it was on failure.
pub(crate) fn decode<T: for<'de> Deserialize<'de>>(
    what: &str,
    bytes: &[u8],
) -> Result<T, WireError> {
    serde_json::from_slice(bytes).map_err(|e| WireError::Malformed(format!("bad {what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_bytes(kind: Kind, tag: u64, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        write_frame(&mut v, kind, tag, payload).unwrap();
        v
    }

    #[test]
    fn round_trip_small_and_large() {
        for len in [0usize, 5, 70_000] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let bytes = frame_bytes(Kind::Data, 42, &payload);
            let f = read_frame(&mut &bytes[..], MAX_MESSAGE).unwrap().unwrap();
            assert_eq!(f.kind, Kind::Data);
            assert_eq!(f.tag, 42);
            assert_eq!(f.payload, payload);
        }
    }

    #[test]
    fn clean_eof_is_none() {
        assert!(read_frame(&mut &[][..], MAX_MESSAGE).unwrap().is_none());
    }

    #[test]
    fn rejects_bad_magic() {
        let mut bytes = frame_bytes(Kind::Data, 1, b"x");
        bytes[0] = b'G';
        let e = read_frame(&mut &bytes[..], MAX_MESSAGE).unwrap_err();
        assert!(e.to_string().contains("bad magic"), "{e}");
    }

    #[test]
    fn rejects_http_garbage() {
        let bytes = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        assert!(read_frame(&mut &bytes[..], MAX_HELLO).is_err());
    }

    #[test]
    fn rejects_other_version_and_kind() {
        let mut bytes = frame_bytes(Kind::Data, 1, b"x");
        bytes[4] = 9;
        let e = read_frame(&mut &bytes[..], MAX_MESSAGE).unwrap_err();
        assert!(e.to_string().contains("version 9"), "{e}");
        let mut bytes = frame_bytes(Kind::Data, 1, b"x");
        bytes[6] = 77;
        let e = read_frame(&mut &bytes[..], MAX_MESSAGE).unwrap_err();
        assert!(e.to_string().contains("kind 77"), "{e}");
    }

    #[test]
    fn rejects_oversized_length_without_allocating() {
        let mut bytes = frame_bytes(Kind::Data, 1, b"");
        bytes[16..24].copy_from_slice(&(MAX_MESSAGE + 1).to_le_bytes());
        let e = read_frame(&mut &bytes[..], MAX_MESSAGE).unwrap_err();
        assert!(e.to_string().contains("more than"), "{e}");
        let mut bytes = frame_bytes(Kind::Hello, 0, b"");
        bytes[16..24].copy_from_slice(&(MAX_HELLO + 1).to_le_bytes());
        assert!(read_frame(&mut &bytes[..], MAX_HELLO).is_err());
    }

    #[test]
    fn rejects_truncated() {
        let bytes = frame_bytes(Kind::Data, 1, b"hello");
        let e = read_frame(&mut &bytes[..bytes.len() - 2], MAX_MESSAGE).unwrap_err();
        assert!(e.to_string().contains("3 of 5"), "{e}");
        let e = read_frame(&mut &bytes[..10], MAX_MESSAGE).unwrap_err();
        assert!(e.to_string().contains("10 of 24"), "{e}");
    }

    #[test]
    fn bad_json_is_an_error() {
        assert!(decode::<Hello>("hello", b"{not json").is_err());
    }
}
