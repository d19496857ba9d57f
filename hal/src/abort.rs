//! [`AbortFlag`]: how a communicator learns, inside any wait, that it must give up.
//!
//! A flag is raised once, with the reason, by whoever first learns that the job cannot
//! go on: the bootstrap when a peer's connection closes (a process that dies closes
//! its sockets at once, long before any wait would time out), a peer's abort message,
//! or [`AbortFlag::abort`] called by the program (from any thread). Waits poll
//! [`AbortFlag::is_set`] (one relaxed load, cheap enough for a spin loop) and fail
//! with [`AbortFlag::error`], which names the dead rank where one is known. The first
//! reason is kept: later failures are consequences of it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::HalError;
use crate::topology::Rank;

/// Why a flag was raised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbortReason {
    /// A peer rank is gone (its connection closed or it aborted the job).
    PeerDead {
        /// The rank.
        rank: Rank,
        /// What was observed.
        detail: String,
    },
    /// This process asked for the abort.
    Local(String),
}

/// A one-shot "give up" flag shared by every wait of a communicator.
#[derive(Debug, Default)]
pub struct AbortFlag {
    set: AtomicBool,
    why: Mutex<Option<AbortReason>>,
}

impl AbortFlag {
    /// A flag not raised yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the flag was raised (relaxed: pair with [`AbortFlag::error`] for the
    /// reason).
    #[inline]
    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::Relaxed)
    }

    /// Raise the flag with `reason` unless it is already raised; returns whether this
    /// call raised it.
    pub fn raise(&self, reason: AbortReason) -> bool {
        let mut why = self.why.lock().unwrap_or_else(|p| p.into_inner());
        if why.is_some() {
            return false;
        }
        *why = Some(reason);
        self.set.store(true, Ordering::SeqCst);
        true
    }

    /// Raise the flag because `rank` is gone.
    pub fn peer_dead(&self, rank: Rank, detail: impl Into<String>) -> bool {
        self.raise(AbortReason::PeerDead {
            rank,
            detail: detail.into(),
        })
    }

    /// Raise the flag at the program's request (`why` is repeated in every error).
    pub fn abort(&self, why: impl Into<String>) -> bool {
        self.raise(AbortReason::Local(why.into()))
    }

    /// The reason, once raised.
    pub fn reason(&self) -> Option<AbortReason> {
        if !self.is_set() {
            return None;
        }
        self.why.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The error every wait fails with once the flag is raised.
    pub fn error(&self) -> Option<HalError> {
        self.reason().map(|r| match r {
            AbortReason::PeerDead { rank, detail } => HalError::PeerDead { rank, detail },
            AbortReason::Local(why) => HalError::Aborted(why),
        })
    }

    /// `Err` with [`AbortFlag::error`] once raised.
    #[inline]
    pub fn check(&self) -> Result<(), HalError> {
        if self.is_set()
            && let Some(e) = self.error()
        {
            return Err(e);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_reason_wins_and_names_the_rank() {
        let f = AbortFlag::new();
        assert!(f.check().is_ok());
        assert!(f.peer_dead(3, "connection closed"));
        assert!(!f.abort("later"));
        let e = f.check().unwrap_err();
        assert!(matches!(e, HalError::PeerDead { rank: 3, .. }), "{e}");
        assert!(e.to_string().contains("rank 3"), "{e}");
    }

    #[test]
    fn local_abort_says_why() {
        let f = AbortFlag::new();
        f.abort("user pressed stop");
        let e = f.check().unwrap_err();
        assert!(e.to_string().contains("user pressed stop"), "{e}");
    }
}
