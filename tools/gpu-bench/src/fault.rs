//! The fault checks (`--dead-rank`, `--stop-rank`, `--abort-after-ms`): one rank dies,
//! stops or aborts on purpose, and every other rank must get its error within a bound,
//! never a hang or wrong data.

use std::time::Duration;

use commhal_cuda_coll::comm::Comm;
use commhal_cuda_coll::error::{CollError, Result};

use crate::bench::{Outcome, Rows};
use crate::cli::{self, Args, Fault};

/// How long after its abort an aborted rank's error may come: the watchdog polls the
/// flag every 2 ms, its stream write lands while the kernels spin, and they read the
/// error word every 1024 spins — milliseconds; a second is the bound.
pub const ABORT_BOUND: Duration = Duration::from_secs(1);

/// The bound on a survivor's error in the dead- and stopped-peer checks: about the
/// device wait bound (twice it, and 5 s for launch and sync).
pub fn fault_wait_bound(device_timeout: Duration) -> Duration {
    device_timeout * 2 + Duration::from_secs(5)
}

/// How long `--stop-rank`'s rank stays stopped: past [`fault_wait_bound`], so every
/// other rank has reported (or is wrong) before it runs again.
pub fn stop_duration(device_timeout: Duration) -> Duration {
    fault_wait_bound(device_timeout) + Duration::from_secs(2)
}

/// Whether a fault check's error is the expected one: a device error code the fault
/// may end the waits with, `took` at most `bound` — the time from the launch (for
/// `--abort-after-ms`, from the abort; `None` when the error came before it).
fn expected_error(fault: Fault, res: &Result<()>, took: Option<Duration>, bound: Duration) -> bool {
    use commhal_cuda_coll::layout::{ERR_PACKET_TIMEOUT, ERR_PEER_GONE, ERR_WAIT_TIMEOUT};
    let codes: &[u32] = match fault {
        // the watchdog when the bootstrap sees the rank go, else the waits' own bound
        Fault::DeadRank(_) => &[ERR_WAIT_TIMEOUT, ERR_PACKET_TIMEOUT, ERR_PEER_GONE],
        // the process lives on, silent: only the waits' own bound ends them
        Fault::StopRank(_) => &[ERR_WAIT_TIMEOUT, ERR_PACKET_TIMEOUT],
        // the watchdog, on this communicator's abort flag
        Fault::AbortAfter(_) => &[ERR_PEER_GONE],
    };
    matches!(res, Err(CollError::Device { code, .. }) if codes.contains(code))
        && took.is_some_and(|t| t <= bound)
}

/// The robustness checks (`--dead-rank`, `--stop-rank`, `--abort-after-ms`): one
/// collective of `args.min_bytes` (whatever path the thresholds pick: kernels or copy
/// engines) that cannot complete, and what each rank's `sync` returns.
///
/// * `--dead-rank R`: rank R exits the process after the setup (no teardown, as a
///   crash); every other rank queues the collective and syncs. Expected: a device
///   error (the watchdog's peer-gone, or a wait timeout) within
///   [`fault_wait_bound`] of the launch.
/// * `--stop-rank R`: rank R stops itself ([`crate::hang::stop_for`], SIGSTOP) for
///   [`stop_duration`], then exits; the others as for a dead rank. Expected: a
///   device wait timeout (nothing tells them the rank hangs) within the same bound.
/// * `--abort-after-ms T`: every rank but 0 queues the collective, which rank 0
///   never joins, and a second thread calls [`Comm::abort`] T ms later; rank 0 aborts
///   at T ms too and polls `sync` on its empty stream. Expected on every rank: the
///   abort's error (the watchdog's code) within [`ABORT_BOUND`] of the abort.
///
/// A host-side sync timeout, which leaves the stream blocked, is never the expected
/// error; `wrong` is set on a rank whose error was not the expected one. No barrier at
/// the end (a dead or stopped rank never reaches one).
pub(crate) fn fault_check(args: &Args, comm: &Comm, n: u32, fault: Fault) -> Result<Outcome> {
    let flag = fault.flag();
    if n < 2 {
        return Err(CollError::invalid(format!(
            "{flag}: a fault check needs at least 2 ranks (start them with `commhal launch -n N`)"
        )));
    }
    if let Fault::DeadRank(r) | Fault::StopRank(r) = fault
        && r >= n
    {
        return Err(CollError::invalid(format!(
            "{flag}: {r} is not a rank of this {n}-rank run"
        )));
    }
    let device_timeout = comm.tuning().device_timeout;
    if let Fault::AbortAfter(t) = fault
        && t >= device_timeout
    {
        return Err(CollError::invalid(format!(
            "{flag}: the abort must come before the device wait bound ({} ms) ends the waits by itself",
            device_timeout.as_millis()
        )));
    }
    let me = comm.rank();
    let mut out = Outcome::of(comm, Rows::empty());
    let (count, per) = cli::counts(args.collective, args.common.min_bytes, args.dtype, n);
    let launch_count = cli::launch_count(args.collective, count, per);
    let (path, _, _) = comm.plan(args.collective, args.dtype, launch_count);
    let call = format!(
        "{} of {} B ({path})",
        args.collective.name(),
        count * args.dtype.size()
    );
    let say = |line: String| {
        use std::io::Write;
        println!("{line}");
        let _ = std::io::stdout().flush();
    };
    let launch_and_sync = || {
        comm.launch_rooted(
            args.collective,
            args.dtype,
            args.reduce_op(),
            launch_count,
            args.common.root,
            false,
        )
        .and_then(|()| comm.sync(&format!("the {flag} check")))
    };
    let wait_bound = fault_wait_bound(device_timeout);
    let (what, res, took, bound) = match fault {
        Fault::DeadRank(r) if r == me => {
            say(format!(
                "# rank {me}: exiting without calling the collective ({flag})"
            ));
            // as a crash would: no teardown, so the peers see a failure, not a departure
            std::process::exit(0);
        }
        Fault::StopRank(r) if r == me => {
            let stop = stop_duration(device_timeout);
            say(format!(
                "# rank {me}: stopping (SIGSTOP) for {:.1} s without calling the collective ({flag})",
                stop.as_secs_f64()
            ));
            let gone = crate::hang::stop_for(stop)
                .map_err(|e| CollError::invalid(format!("{flag}: stopping this process: {e}")))?;
            say(format!(
                "# rank {me}: continued after {:.1} s; exiting",
                gone.as_secs_f64()
            ));
            // as the dead rank: the peers have reported; no teardown
            std::process::exit(0);
        }
        Fault::DeadRank(r) | Fault::StopRank(r) => {
            let gone = if matches!(fault, Fault::DeadRank(_)) {
                "gone"
            } else {
                "stopped"
            };
            let t0 = std::time::Instant::now();
            let res = launch_and_sync();
            let took = t0.elapsed();
            let what = format!("rank {me}: {call} with rank {r} {gone}");
            (what, res, Some(took), wait_bound)
        }
        Fault::AbortAfter(t) if me == 0 => {
            std::thread::sleep(t);
            let at = std::time::Instant::now();
            comm.abort(&flag);
            // nothing queued: the abort shows in the error word the watchdog writes
            let res = loop {
                let r = comm.sync(&format!("the {flag} check"));
                if r.is_err() || at.elapsed() > ABORT_BOUND * 2 {
                    break r;
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            let what = format!(
                "rank {me}: never calls the {call}; aborted after {} ms, then syncs",
                t.as_millis()
            );
            (what, res, Some(at.elapsed()), ABORT_BOUND)
        }
        Fault::AbortAfter(t) => {
            let (res, done, at) = std::thread::scope(|s| {
                let aborter = s.spawn(|| {
                    std::thread::sleep(t);
                    let at = std::time::Instant::now();
                    comm.abort(&flag);
                    at
                });
                let res = launch_and_sync();
                let done = std::time::Instant::now();
                (res, done, aborter.join())
            });
            let at = at
                .map_err(|_| CollError::invalid(format!("{flag}: the aborting thread panicked")))?;
            let what = format!(
                "rank {me}: {call}, which rank 0 never joins, aborted after {} ms",
                t.as_millis()
            );
            (what, res, done.checked_duration_since(at), ABORT_BOUND)
        }
    };
    let when = match (took, fault) {
        (None, _) => "BEFORE the abort".to_string(),
        (Some(d), Fault::AbortAfter(_)) => format!("{:.3} s after the abort", d.as_secs_f64()),
        (Some(d), _) => format!("after {:.3} s", d.as_secs_f64()),
    };
    let ok = expected_error(fault, &res, took, bound);
    match res {
        Err(e) if ok => say(format!("# {what}: error {when}, as expected: {e}")),
        Err(e) => {
            out.wrong = true;
            say(format!(
                "# {what}: error {when}, NOT the expected one within {:.1} s: {e}",
                bound.as_secs_f64()
            ));
        }
        Ok(()) => {
            out.wrong = true;
            say(format!("# {what}: NO ERROR {when}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_checks_expect_their_own_errors_in_bound() {
        use commhal_cuda_coll::layout::{ERR_PACKET_TIMEOUT, ERR_PEER_GONE, ERR_WAIT_TIMEOUT};
        let dev = |code| -> Result<()> {
            Err(CollError::Device {
                rank: 1,
                code,
                desc: "",
                what: String::new(),
            })
        };
        let host = || -> Result<()> { Err(CollError::invalid("host sync timed out")) };
        let b = fault_wait_bound(Duration::from_secs(10));
        assert_eq!(b, Duration::from_secs(25));
        assert!(stop_duration(Duration::from_secs(10)) > b);
        let (soon, late) = (Some(Duration::from_millis(100)), Some(b * 2));
        let dead = Fault::DeadRank(3);
        let stop = Fault::StopRank(3);
        let abort = Fault::AbortAfter(Duration::from_millis(200));
        for code in [ERR_WAIT_TIMEOUT, ERR_PACKET_TIMEOUT, ERR_PEER_GONE] {
            assert!(expected_error(dead, &dev(code), soon, b), "{code}");
            assert!(!expected_error(dead, &dev(code), late, b), "{code}");
        }
        // a stopped peer is not gone: only the waits' own bound may end them
        assert!(expected_error(stop, &dev(ERR_WAIT_TIMEOUT), soon, b));
        assert!(expected_error(stop, &dev(ERR_PACKET_TIMEOUT), soon, b));
        assert!(!expected_error(stop, &dev(ERR_PEER_GONE), soon, b));
        // an abort: the watchdog's code, soon after the abort, never before it
        assert!(expected_error(
            abort,
            &dev(ERR_PEER_GONE),
            soon,
            ABORT_BOUND
        ));
        assert!(!expected_error(
            abort,
            &dev(ERR_WAIT_TIMEOUT),
            soon,
            ABORT_BOUND
        ));
        assert!(!expected_error(
            abort,
            &dev(ERR_PEER_GONE),
            None,
            ABORT_BOUND
        ));
        assert!(!expected_error(
            abort,
            &dev(ERR_PEER_GONE),
            Some(ABORT_BOUND * 2),
            ABORT_BOUND
        ));
        for f in [dead, stop, abort] {
            assert!(!expected_error(f, &Ok(()), soon, b), "no error");
            assert!(!expected_error(f, &host(), soon, b), "a host-side error");
        }
    }
}
