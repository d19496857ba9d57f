//! The communicator's error type.

use commhal_hal::{HalError, Rank};

use crate::error::AlgoError;

/// Everything a [`super::Communicator`] call can fail with. Messages say what was wrong
/// and what to do.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    /// A bad argument on this rank (sizes, root, buffer).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A buffer this communicator did not allocate.
    #[error(
        "unregistered buffer: {0}; allocate it with Communicator::alloc on this communicator or pass a plain slice"
    )]
    Unregistered(String),
    /// Ranks called the same collective with different arguments.
    #[error("ranks disagree on the call: {detail} (first differing rank: {rank})")]
    Mismatch {
        /// The first rank whose arguments differ from rank 0's (or from this rank's).
        rank: Rank,
        /// Every difference found.
        detail: String,
    },
    /// An earlier call failed mid-way; the ranks' shared state is no longer consistent.
    #[error(
        "this communicator is unusable after an earlier failure ({0}); create a new one on every rank"
    )]
    Broken(String),
    /// A HAL failure (bootstrap, backend, timeout, dead peer).
    #[error(transparent)]
    Hal(#[from] HalError),
    /// An algorithm failure (plan building, selection, dtype).
    #[error(transparent)]
    Algo(#[from] AlgoError),
}
