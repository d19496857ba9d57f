//! What a rank process does between `fork` and `exec` (the only `unsafe` of the CLI).
//!
//! * Its signal mask is emptied: the launcher blocks SIGINT/SIGTERM/SIGHUP to receive
//!   them in a dedicated thread, and a mask survives `fork` and `exec`. A rank that
//!   inherited it could be stopped by neither Ctrl-C nor SIGTERM, and its own handlers
//!   would never run.
//! * It asks the kernel for SIGKILL when the launcher dies (`PR_SET_PDEATHSIG`), so
//!   ranks do not outlive a launcher that was itself SIGKILLed. The signal is tied to
//!   the launcher's *thread* that spawned the rank: ranks are spawned by the thread
//!   that lives as long as the launch. Processes a rank starts itself are not covered.
//! * If the launcher died between `fork` and `prctl` (the child was already re-parented,
//!   so the death signal will never come), it fails the spawn instead of running
//!   orphaned.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Set up `cmd` so that its process starts as described in the module docs.
pub fn prepare(cmd: &mut Command) {
    let launcher = std::process::id() as libc::pid_t;
    // SAFETY: `pre_exec` closures run in the forked child, where only async-signal-safe
    // work is allowed. This one calls sigemptyset, pthread_sigmask, prctl and getppid
    // (all async-signal-safe system calls or pure functions), touches only its own
    // stack, allocates nothing and takes no lock; errors are built from raw errno
    // values, which does not allocate.
    unsafe {
        cmd.pre_exec(move || {
            let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(set.as_mut_ptr());
            let rc = libc::pthread_sigmask(libc::SIG_SETMASK, set.as_ptr(), std::ptr::null_mut());
            if rc != 0 {
                return Err(std::io::Error::from_raw_os_error(rc));
            }
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != launcher {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}
