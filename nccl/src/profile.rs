//! `COMMHAL_NCCL_PROFILE=1`: how often each exported function ran and how much host
//! time it took, so that an application's per-call cost can be split between commhal
//! and its caller (PyTorch's own work around every collective, say). The table goes to
//! stderr when a communicator is destroyed (cumulative) and at process exit.
//!
//! Off (the default), a call costs one load of a flag read once.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Mutex, Once, OnceLock};
use std::time::Instant;

use commhal_hal::settings::nccl::NCCL_PROFILE;

/// Per function: calls and nanoseconds inside.
type Census = BTreeMap<&'static str, (u64, u64)>;

fn census() -> &'static Mutex<Census> {
    static CENSUS: OnceLock<Mutex<Census>> = OnceLock::new();
    CENSUS.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Whether the census is on (`COMMHAL_NCCL_PROFILE`, read once; a bad value: off).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let on = NCCL_PROFILE.flag().unwrap_or(false);
        if on {
            at_exit();
        }
        on
    })
}

/// Run `f` as one call of `name`, counted when the census is on.
pub fn timed<R>(name: &'static str, f: impl FnOnce() -> R) -> R {
    if !enabled() {
        return f();
    }
    let t0 = Instant::now();
    let r = f();
    let ns = t0.elapsed().as_nanos() as u64;
    if let Ok(mut c) = census().lock() {
        let e = c.entry(name).or_insert((0, 0));
        e.0 += 1;
        e.1 += ns;
    }
    r
}

/// The census as a table, one function per line (None when off or empty).
pub fn table() -> Option<String> {
    if !enabled() {
        return None;
    }
    let c = census().lock().ok()?;
    if c.is_empty() {
        return None;
    }
    let mut s = format!(
        "commhal-nccl: profile (pid {}): function, calls, host us in total, us per call\n",
        std::process::id()
    );
    for (name, (calls, ns)) in c.iter() {
        s.push_str(&format!(
            "commhal-nccl:   {name:<28} {calls:>9} {:>12.1} {:>9.2}\n",
            *ns as f64 / 1e3,
            *ns as f64 / 1e3 / (*calls).max(1) as f64
        ));
    }
    Some(s)
}

/// Write [`table`] to stderr (nothing when off, or when no call ran since the last
/// report: the exit report after a communicator's destroy).
pub fn report() {
    static LAST: Mutex<u64> = Mutex::new(0);
    let calls: u64 = match census().lock() {
        Ok(c) => c.values().map(|v| v.0).sum(),
        Err(_) => return,
    };
    if let Ok(mut last) = LAST.lock() {
        if *last == calls {
            return;
        }
        *last = calls;
    }
    if let Some(t) = table() {
        let _ = std::io::stderr().lock().write_all(t.as_bytes());
    }
}

extern "C" fn report_at_exit() {
    report();
}

fn at_exit() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain function of this library with no arguments; it only
        // reads the census and writes to stderr. glibc ties a shared object's atexit
        // handler to that object, so a dlclose runs it then rather than after unmapping.
        unsafe { libc::atexit(report_at_exit) };
    });
}
