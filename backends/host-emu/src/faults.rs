//! **Test-only** fault injection, so the conformance suite can be seen to fail.
//!
//! Set with [`crate::HostEmu::with_faults`] or, for whole runs, the environment:
//! `COMMHAL_HOST_EMU_FAULTS=signal-before-data,relaxed-signal,early-flush,drop-every-nth-trigger=N,detached-mapping,detached-tail-page,switch-drop-member`
//! (read by the registry's constructor; also `faults = "..."` in the
//! `[backend.host-emu]` config table). Never set them outside tests: a faulty
//! host-emu still *claims* its full [`crate::HostEmu::GUARANTEES`] and breaks them.
//!
//! Faults act in the port ([`crate::port::HostPort`]). Any of the three ordering
//! faults makes `write` *queue* its copy (reading the source later) instead of
//! copying at once, and `read` queue its copy behind them; queued copies land:
//!
//! | fault | effect |
//! |---|---|
//! | `signal_before_data` | `signal` adds first and leaves queued writes queued: they land at the next `flush` (a peer that saw the signal reads stale data) |
//! | `relaxed_signal` | `signal` lands every queued write but the newest, adds with `Relaxed`, and keeps the newest queued until the next `signal`/`flush` |
//! | `early_flush` | `flush` returns with queued copies still queued (stale remote data, source still read later, a read's destination not filled yet); they land at the start of the next port call |
//! | `drop_every_nth_trigger = Some(n)` | every n-th `write`/`signal` (counted together, from 1) is accepted and silently discarded; `Some(0)` means never |
//!
//! Queued writes also land when the port is dropped.
//!
//! The other faults act where memory and switch channels (and the collective executor)
//! meet host-emu: mapping a peer's memory and building a switch group. Those paths copy,
//! reduce and signal with plain host loads, stores and atomics on the mappings, so the
//! backend cannot intercept single operations; it can only hand out a broken mapping or
//! member list:
//!
//! | fault | effect |
//! |---|---|
//! | `detached_tail_page` | like `detached_mapping` for the *last page* only of a peer mapping longer than a page (the rest is shared; within one process the fd is mapped afresh): a put that ends in that page arrives short while signals in one-page semaphore regions still arrive, so only a data check sees it (a signal whose word lies in such a last page is lost, as with `detached_mapping`) |
//! | `switch_drop_member` | a switch group's member list (the multicast descriptor and [`crate::HostSwitchGroup`]'s buffers) has this member's own buffer in place of its last peer's: a switch reduce counts this member twice and misses that peer (a wrong result, no error), a broadcast never reaches it, and a barrier no longer waits for it |
//! | `detached_mapping` | `map` (and a switch group's view of its members) returns a *private snapshot* of the peer's memory, taken at map time (`MAP_PRIVATE`, every page copied): puts and signals into it never reach the peer (a lost put and a lost signal), and reads never see the peer's later writes (a stale get / a stale switch reduce). Within one process the peer's buffer is snapshotted instead of shared |

use commhal_hal::settings::host::HOST_EMU_FAULTS;
use commhal_hal::{HalError, Result};

/// Faults host-emu's port injects (all off by default). Test-only; see the module docs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// A signal lands before the data of earlier writes.
    pub signal_before_data: bool,
    /// A signal is a relaxed add and the newest earlier write lands after it.
    pub relaxed_signal: bool,
    /// Every n-th trigger (write or signal) is silently dropped.
    pub drop_every_nth_trigger: Option<u32>,
    /// `flush` returns before queued writes land.
    pub early_flush: bool,
    /// A peer's memory mapped here is a private snapshot: writes and signals into it are
    /// lost, reads of it are stale (memory and switch channels, collectives).
    pub detached_mapping: bool,
    /// The last page of a peer mapping longer than a page is a private snapshot.
    pub detached_tail_page: bool,
    /// A switch group member's view replaces its last peer's buffer by its own.
    pub switch_drop_member: bool,
}

impl Faults {
    /// True when any fault is set.
    pub fn any(&self) -> bool {
        self.signal_before_data
            || self.relaxed_signal
            || self.early_flush
            || self.detached_mapping
            || self.switch_drop_member
            || self.detached_tail_page
            || self.drop_every_nth_trigger.is_some_and(|n| n > 0)
    }

    /// True when `write` queues instead of copying.
    pub(crate) fn defers_writes(&self) -> bool {
        self.signal_before_data || self.relaxed_signal || self.early_flush
    }

    /// Parse a comma-separated list: `signal-before-data`, `relaxed-signal`,
    /// `early-flush`, `drop-every-nth-trigger=N`, `detached-mapping`, `detached-tail-page`, `switch-drop-member`. Empty means
    /// no faults.
    pub fn parse(spec: &str) -> Result<Faults> {
        let mut f = Faults::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item.split_once('=') {
                None if item == "signal-before-data" => f.signal_before_data = true,
                None if item == "relaxed-signal" => f.relaxed_signal = true,
                None if item == "early-flush" => f.early_flush = true,
                None if item == "detached-mapping" => f.detached_mapping = true,
                None if item == "switch-drop-member" => f.switch_drop_member = true,
                None if item == "detached-tail-page" => f.detached_tail_page = true,
                Some(("drop-every-nth-trigger", n)) => {
                    let n: u32 = n.trim().parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        HalError::Config(format!(
                            "host-emu fault `{item}`: N must be a positive integer"
                        ))
                    })?;
                    f.drop_every_nth_trigger = Some(n);
                }
                _ => {
                    return Err(HalError::Config(format!(
                        "unknown host-emu fault `{item}`; known: signal-before-data, relaxed-signal, early-flush, drop-every-nth-trigger=N, detached-mapping, detached-tail-page, switch-drop-member"
                    )));
                }
            }
        }
        Ok(f)
    }

    /// Faults named by `COMMHAL_HOST_EMU_FAULTS` (none when unset).
    pub fn from_env() -> Result<Faults> {
        match HOST_EMU_FAULTS.text_utf8()? {
            Some(spec) => Faults::parse(&spec)
                .map_err(|e| HalError::Config(format!("{}: {e}", HOST_EMU_FAULTS.env))),
            None => Ok(Faults::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names() {
        assert_eq!(Faults::parse("").unwrap(), Faults::default());
        let f = Faults::parse("signal-before-data, early-flush,drop-every-nth-trigger=3").unwrap();
        assert!(f.signal_before_data && f.early_flush && !f.relaxed_signal);
        assert_eq!(f.drop_every_nth_trigger, Some(3));
        assert!(Faults::parse("relaxed-signal").unwrap().relaxed_signal);
        let d = Faults::parse("detached-mapping").unwrap();
        assert!(d.detached_mapping && d.any() && !d.defers_writes());
        let s = Faults::parse("switch-drop-member").unwrap();
        assert!(s.switch_drop_member && s.any() && !s.defers_writes());
        assert!(
            Faults::parse("detached-tail-page")
                .unwrap()
                .detached_tail_page
        );
        assert!(Faults::parse("bogus").is_err());
        assert!(Faults::parse("drop-every-nth-trigger=0").is_err());
        assert!(Faults::parse("drop-every-nth-trigger=x").is_err());
    }
}
