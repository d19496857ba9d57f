//! A hung process on purpose, for `commhal-gpu-bench --stop-rank` (the only `unsafe` of
//! the benchmark's fault injections).
//!
//! [`stop_for`] stops the whole process with SIGSTOP: every thread halts (the
//! communicator's watchdog and the bootstrap's reader included) while its sockets stay
//! open, so the peers see a rank that is alive but silent — a hang, not a death. A
//! stopped process runs no code, so it cannot wake itself with a thread or `alarm`
//! (SIGALRM stays pending while stopped). It is woken by the kernel instead: a POSIX
//! timer armed before the stop sends SIGCONT, which continues a stopped process at the
//! moment it is sent. The timer repeats every [`RESEND`] after the first expiry, so a
//! stop that lands late (a slow `raise`) is still ended; it is deleted once the process
//! runs again. The launcher need not know: under `commhal launch` or torchrun the rank
//! exits by itself after the stop, and a launcher that stops the ranks early (after
//! another rank failed) ends it with SIGKILL, which works on stopped processes
//! (`commhal launch` also sends SIGCONT after SIGTERM so a stopped rank handles it).

use std::time::{Duration, Instant};

/// How often SIGCONT is sent again after the first expiry, until the timer is deleted.
pub const RESEND: Duration = Duration::from_millis(100);

fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

/// Stop this process (SIGSTOP) and have the kernel continue it (SIGCONT) after `dur`;
/// returns how long it was gone. `dur` must be positive.
pub fn stop_for(dur: Duration) -> std::io::Result<Duration> {
    let dur = dur.max(Duration::from_millis(1));
    // SAFETY: a sigevent is a plain C struct for which all-zero bytes are a valid value
    // (no pointers are followed with SIGEV_SIGNAL); the fields set below are the ones
    // timer_create reads for SIGEV_SIGNAL.
    let mut ev: libc::sigevent = unsafe { std::mem::zeroed() };
    ev.sigev_notify = libc::SIGEV_SIGNAL;
    ev.sigev_signo = libc::SIGCONT;
    let mut timer: libc::timer_t = std::ptr::null_mut();
    // SAFETY: `ev` and `timer` are valid, writable locals for the duration of the call;
    // on success the kernel owns the timer until timer_delete below.
    if unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut timer) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let spec = libc::itimerspec {
        it_interval: timespec(RESEND),
        it_value: timespec(dur),
    };
    let start = Instant::now();
    // SAFETY: `timer` was created above and not deleted; `spec` is a valid itimerspec and
    // the old value is not asked for (null).
    let armed = unsafe { libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) };
    let result = if armed != 0 {
        Err(std::io::Error::last_os_error())
    } else {
        // SAFETY: raise only sends a signal to this process; SIGSTOP cannot be caught,
        // so no handler runs: the process stops here until the timer's SIGCONT.
        if unsafe { libc::raise(libc::SIGSTOP) } != 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(start.elapsed())
        }
    };
    // SAFETY: `timer` was created above and is deleted once, here.
    unsafe { libc::timer_delete(timer) };
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    use commhal_hal::settings::tests::TEST_STOP_CHILD;

    /// The process state letter of `pid` (`T`: stopped).
    fn state(pid: u32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit(')')
            .next()?
            .split_whitespace()
            .next()?
            .chars()
            .next()
    }

    /// Run in a child process by `a_stopped_process_is_continued_by_its_timer` (a no-op
    /// in the test run itself).
    #[test]
    fn stop_child() {
        if !TEST_STOP_CHILD.flag().unwrap_or_else(|e| panic!("{e}")) {
            return;
        }
        let gone = stop_for(Duration::from_millis(400)).expect("stop");
        assert!(gone >= Duration::from_millis(400), "{gone:?}");
        println!("resumed after {gone:?}");
    }

    #[test]
    fn a_stopped_process_is_continued_by_its_timer() {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "hang::tests::stop_child", "--nocapture"])
            .env(TEST_STOP_CHILD.env, "1")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the test binary");
        let (start, mut stopped) = (Instant::now(), false);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            stopped |= state(child.id()) == Some('T');
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the child was not continued"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        let out = std::io::read_to_string(child.stdout.take().unwrap()).unwrap();
        assert!(status.success(), "{status:?}: {out}");
        assert!(stopped, "the child was seen stopped");
        assert!(out.contains("resumed after"), "{out}");
    }
}
