//! The one error type of the HAL. Every variant says what was wrong and what to do.

use crate::topology::Rank;

/// Result with [`HalError`].
pub type Result<T, E = HalError> = std::result::Result<T, E>;

/// Everything that can go wrong below the algorithms. Messages are written for the
/// person who has to act on them.
#[derive(Debug, thiserror::Error)]
pub enum HalError {
    /// The caller passed something the API cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A buffer that was never registered with this transport (or was released).
    #[error(
        "memory at {addr:#x} (+{len} bytes) is not registered with backend `{backend}`: register it first"
    )]
    Unregistered {
        /// Backend that was asked.
        backend: String,
        /// Start address given.
        addr: u64,
        /// Length given.
        len: u64,
    },
    /// An access outside a registered region.
    #[error(
        "out of range: offset {offset} + length {len} exceeds the region's {size} bytes ({what})"
    )]
    OutOfRange {
        /// Which buffer.
        what: String,
        /// Offset requested.
        offset: u64,
        /// Length requested.
        len: u64,
        /// Region size.
        size: u64,
    },
    /// An offset or length that breaks the transport's alignment rule.
    #[error(
        "{what} = {value} is not a multiple of {align}: align it or use a transport without this rule"
    )]
    Unaligned {
        /// Which quantity.
        what: String,
        /// The value given.
        value: u64,
        /// Required alignment.
        align: u64,
    },
    /// The backend does not implement this operation or guarantee.
    #[error("backend `{backend}` does not support {what}")]
    Unsupported {
        /// Backend name.
        backend: String,
        /// What was asked.
        what: String,
    },
    /// The backend cannot run on this machine.
    #[error("backend `{backend}` is unavailable: {reason}")]
    Unavailable {
        /// Backend name.
        backend: String,
        /// Why (no driver, no device, disabled by policy, ...).
        reason: String,
    },
    /// A name that no registered backend has.
    #[error("unknown backend `{name}`; known backends: {known}")]
    UnknownBackend {
        /// The name asked for.
        name: String,
        /// Comma-separated list of every known backend.
        known: String,
    },
    /// A bounded wait ran out.
    #[error("timed out after {millis} ms waiting for {what}")]
    Timeout {
        /// What was awaited (names the rank where one is known).
        what: String,
        /// How long was waited.
        millis: u64,
    },
    /// A peer rank died or closed its connection.
    #[error("rank {rank} is gone: {detail}")]
    PeerDead {
        /// The rank.
        rank: Rank,
        /// What was observed.
        detail: String,
    },
    /// The communicator was aborted ([`crate::AbortFlag::abort`]).
    #[error(
        "aborted: {0}; the communicator cannot be used any more: create a new one on every rank"
    )]
    Aborted(String),
    /// Bootstrap failure (connection, protocol, authentication).
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    /// A plugin library could not be used.
    #[error("plugin {file}: {reason}")]
    Plugin {
        /// Path of the library.
        file: String,
        /// What was wrong with it.
        reason: String,
    },
    /// Bad configuration (COMMHAL_BACKENDS, COMMHAL_CONFIG, CLI flags).
    #[error("configuration: {0}")]
    Config(String),
    /// An error reported by a backend's driver or library.
    #[error("backend `{backend}`: {msg}")]
    Backend {
        /// Backend name.
        backend: String,
        /// Driver/library message.
        msg: String,
    },
    /// An operating-system error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl HalError {
    /// Wrap an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        HalError::Io {
            context: context.into(),
            source,
        }
    }

    /// Shorthand for [`HalError::InvalidArgument`].
    pub fn invalid(msg: impl Into<String>) -> Self {
        HalError::InvalidArgument(msg.into())
    }

    /// Shorthand for [`HalError::Backend`].
    pub fn backend(backend: impl Into<String>, msg: impl Into<String>) -> Self {
        HalError::Backend {
            backend: backend.into(),
            msg: msg.into(),
        }
    }

    /// Shorthand for [`HalError::Unsupported`].
    pub fn unsupported(backend: impl Into<String>, what: impl Into<String>) -> Self {
        HalError::Unsupported {
            backend: backend.into(),
            what: what.into(),
        }
    }
}

/// Check that `offset + len` lies inside a region of `size` bytes, without overflow.
pub fn check_range(what: &str, offset: u64, len: u64, size: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(HalError::OutOfRange {
            what: what.to_string(),
            offset,
            len,
            size,
        }),
    }
}

/// Which way a port transfer goes (for [`check_transfer`]'s messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// From a local buffer into the peer's ([`crate::Port::write`]).
    Write,
    /// From the peer's buffer into a local one ([`crate::Port::read`]).
    Read,
}

/// The two range checks of a port transfer of `len` bytes: `remote` is the peer's
/// buffer (its name in messages, such as `rank 2's buffer`, formatted only on failure;
/// the offset; its size), checked first, `local` this rank's (offset, size). `who`
/// names the backend's side (`port`, `ib-verbs`), so a message reads
/// `ib-verbs read source (rank 2's buffer)` or `port write source (local buffer)`.
pub fn check_transfer(
    who: &str,
    t: Transfer,
    len: u64,
    remote: (&dyn std::fmt::Display, u64, u64),
    local: (u64, u64),
) -> Result<()> {
    let (op, remote_role, local_role) = match t {
        Transfer::Write => ("write", "destination", "source"),
        Transfer::Read => ("read", "source", "destination"),
    };
    let fits = |off: u64, size: u64| off.checked_add(len).is_some_and(|end| end <= size);
    let (name, off, size) = remote;
    if !fits(off, size) {
        return check_range(
            &format!("{who} {op} {remote_role} ({name})"),
            off,
            len,
            size,
        );
    }
    let (off, size) = local;
    if !fits(off, size) {
        return check_range(
            &format!("{who} {op} {local_role} (local buffer)"),
            off,
            len,
            size,
        );
    }
    Ok(())
}

/// Check that `value` (an offset, a length or an address, named by `what`) is a
/// multiple of `align`. `what` is only formatted on failure, so a `format_args!` costs
/// nothing on the fast path.
pub fn check_aligned(what: impl std::fmt::Display, value: u64, align: u64) -> Result<()> {
    if value.is_multiple_of(align) {
        Ok(())
    } else {
        Err(HalError::Unaligned {
            what: what.to_string(),
            value,
            align,
        })
    }
}

/// Check the offset of an 8-byte semaphore word in a region of `size` bytes: 8-byte
/// aligned (else [`HalError::Unaligned`] naming the "semaphore offset"), then inside
/// the region (else [`HalError::OutOfRange`] naming `what`).
pub fn check_semaphore_offset(what: &str, offset: u64, size: u64) -> Result<()> {
    check_aligned("semaphore offset", offset, 8)?;
    check_range(what, offset, 8, size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_checks_name_the_side_that_does_not_fit() {
        let peer = format_args!("rank 2's buffer");
        assert!(check_transfer("port", Transfer::Write, 8, (&peer, 8, 16), (0, 8)).is_ok());
        assert!(check_transfer("port", Transfer::Read, 0, (&peer, 16, 16), (8, 8)).is_ok());
        let e = |t, remote_off, local_off| {
            check_transfer(
                "ib-verbs",
                t,
                8,
                (&"rank 2's buffer", remote_off, 16),
                (local_off, 8),
            )
            .unwrap_err()
            .to_string()
        };
        let w = e(Transfer::Write, 9, 0);
        assert!(
            w.contains("ib-verbs write destination (rank 2's buffer)"),
            "{w}"
        );
        let w = e(Transfer::Write, 0, 1);
        assert!(w.contains("ib-verbs write source (local buffer)"), "{w}");
        let r = e(Transfer::Read, u64::MAX, 0);
        assert!(r.contains("ib-verbs read source (rank 2's buffer)"), "{r}");
        let r = e(Transfer::Read, 0, 1);
        assert!(
            r.contains("ib-verbs read destination (local buffer)"),
            "{r}"
        );
    }
}
