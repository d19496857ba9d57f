//! Every environment variable the library reads, declared once, and the log it writes.

use std::sync::OnceLock;
use std::time::Duration;

/// One setting: its variable, default and meaning (the README's table is this list).
#[derive(Debug)]
pub struct Setting {
    /// The environment variable.
    pub name: &'static str,
    /// Its value when unset, as text.
    pub default: &'static str,
    /// What it does.
    pub doc: &'static str,
}

/// The settings, in the order the docs list them.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "COMMHAL_NCCL_FALLBACK",
        default: "",
        doc: "path of the real libnccl.so.2; every communicator then also makes an NCCL communicator, and calls commhal does not run go there (unset: they fail with ncclInvalidUsage)",
    },
    Setting {
        name: "COMMHAL_DEBUG",
        default: "0",
        doc: "1: log every call to stderr with where it ran (commhal and its buffer path, or NCCL and why)",
    },
    Setting {
        name: "COMMHAL_NCCL_BUFFER_BYTES",
        default: "67108864",
        doc: "bytes of the registered input and output regions per communicator: the largest call that can be staged (unaligned pointers, cuMem VMM memory)",
    },
    Setting {
        name: "COMMHAL_NCCL_WAIT_S",
        default: "600",
        doc: "seconds a device wait or a bootstrap step may last before the call fails (a dead peer is seen at once: this bounds only a peer that is alive but never calls)",
    },
    Setting {
        name: "COMMHAL_NCCL_DISABLE",
        default: "0",
        doc: "1: commhal runs nothing; every communicator is the fallback NCCL's (needs COMMHAL_NCCL_FALLBACK): an A/B switch without changing the preload",
    },
    Setting {
        name: "COMMHAL_BOOTSTRAP_IP",
        default: "",
        doc: "address rank 0's bootstrap listens on (unset: the address of the default route, else loopback)",
    },
];

fn var(name: &str) -> Option<String> {
    debug_assert!(
        SETTINGS.iter().any(|s| s.name == name),
        "{name} is not declared"
    );
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `COMMHAL_NCCL_FALLBACK`.
pub fn fallback_path() -> Option<String> {
    var("COMMHAL_NCCL_FALLBACK")
}

/// `COMMHAL_DEBUG`, read once.
pub fn debug() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        var("COMMHAL_DEBUG").is_some_and(|v| !matches!(v.trim(), "0" | "off" | "OFF" | "WARN"))
    })
}

/// `COMMHAL_NCCL_DISABLE`.
pub fn disabled() -> bool {
    var("COMMHAL_NCCL_DISABLE").is_some_and(|v| v.trim() == "1")
}

/// `COMMHAL_BOOTSTRAP_IP`.
pub fn bootstrap_ip() -> Option<String> {
    var("COMMHAL_BOOTSTRAP_IP")
}

fn number(name: &str, default: u64) -> Result<u64, String> {
    match var(name) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{name}={v}: expected a positive integer")),
    }
}

/// `COMMHAL_NCCL_BUFFER_BYTES`.
pub fn buffer_bytes() -> Result<u64, String> {
    number("COMMHAL_NCCL_BUFFER_BYTES", 64 << 20)
}

/// `COMMHAL_NCCL_WAIT_S`.
pub fn wait_bound() -> Result<Duration, String> {
    number("COMMHAL_NCCL_WAIT_S", 600).map(Duration::from_secs)
}

/// Write `msg` to stderr when [`debug`] is on.
pub fn log(msg: impl FnOnce() -> String) {
    if debug() {
        use std::io::Write;
        // one write per line, so that ranks sharing a terminal do not interleave
        let line = format!("commhal-nccl: {}\n", msg());
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}
