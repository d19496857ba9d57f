//! The environment variables the library reads, through their declarations in
//! [`commhal_hal::settings::nccl`] (and, for the GPU communicator under it,
//! [`commhal_hal::settings::gpu`]), and the log it writes.

use std::sync::OnceLock;
use std::time::Duration;

use commhal_hal::settings::nccl::{
    BOOTSTRAP_IP, DEBUG, NCCL_BUFFER_BYTES, NCCL_DISABLE, NCCL_FALLBACK, NCCL_WAIT_S,
};
use commhal_hal::settings::{self, Env, SetBy, Setting};

/// `COMMHAL_NCCL_FALLBACK`.
pub fn fallback_path() -> Option<String> {
    NCCL_FALLBACK.text()
}

/// `COMMHAL_DEBUG`, read once. A value that is not a flag is refused by
/// `ncclCommInitRank` ([`check`]); until then it is reported once and logging stays off.
pub fn debug() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        DEBUG.flag().unwrap_or_else(|e| {
            warn(&format!("{e}; logging stays off"));
            false
        })
    })
}

/// `COMMHAL_NCCL_DISABLE`.
pub fn disabled() -> Result<bool, String> {
    NCCL_DISABLE.flag().map_err(|e| e.to_string())
}

/// `COMMHAL_BOOTSTRAP_IP`.
pub fn bootstrap_ip() -> Option<String> {
    BOOTSTRAP_IP.text()
}

/// `COMMHAL_NCCL_BUFFER_BYTES`.
pub fn buffer_bytes() -> Result<u64, String> {
    NCCL_BUFFER_BYTES
        .number_or_default()
        .map_err(|e| e.to_string())
}

/// `COMMHAL_NCCL_WAIT_S`.
pub fn wait_bound() -> Result<Duration, String> {
    NCCL_WAIT_S.duration_or_default().map_err(|e| e.to_string())
}

/// Every setting the library and, unless `COMMHAL_NCCL_DISABLE` is on, the GPU
/// communicator under it read, against its declaration: the first one set to a value
/// its declaration refuses. `ncclCommInitRank` fails with it, rather than falling back
/// to NCCL or running with part of the environment ignored.
pub fn check() -> Result<(), String> {
    check_in(&settings::process_env)
}

/// [`check`] with the environment `env`.
pub fn check_in(env: Env<'_>) -> Result<(), String> {
    let disabled = NCCL_DISABLE.flag_in(env).map_err(|e| e.to_string())?;
    let gpu: &[&[&Setting]] = if disabled {
        &[]
    } else {
        &[settings::gpu::ALL, settings::gpu::THRESHOLDS]
    };
    settings::nccl::ALL
        .iter()
        .chain(gpu.iter().copied().flatten())
        .filter(|s| s.set_by == SetBy::User)
        .try_for_each(|s| s.check_in(env))
        .map_err(|e| e.to_string())
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

/// Write a warning to stderr, whatever [`debug`] says.
fn warn(msg: &str) {
    use std::io::Write;
    let line = format!("commhal-nccl: WARNING: {msg}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn a_valid_environment_passes() {
        check_in(&env_of(&[])).unwrap();
        check_in(&env_of(&[
            ("COMMHAL_DEBUG", "1"),
            ("COMMHAL_NCCL_BUFFER_BYTES", "128M"),
            ("COMMHAL_NCCL_WAIT_S", "60"),
            ("COMMHAL_COLL_LL_MAX", "65536"),
            ("COMMHAL_GPU_PATH", "kernels"),
            ("COMMHAL_NCCL_FALLBACK", "/x/libnccl.so.2"),
        ]))
        .unwrap();
    }

    /// The drop-in's own variables and the GPU communicator's are refused at
    /// `ncclCommInitRank` with a message naming them, not taken for on or off
    /// (`COMMHAL_DEBUG=INFO`, `COMMHAL_NCCL_DISABLE=2`) or ignored.
    #[test]
    fn invalid_values_are_refused_by_name() {
        for (var, bad) in [
            ("COMMHAL_DEBUG", "INFO"),
            ("COMMHAL_NCCL_DISABLE", "2"),
            ("COMMHAL_NCCL_BUFFER_BYTES", "0"),
            ("COMMHAL_NCCL_BUFFER_BYTES", "lots"),
            ("COMMHAL_NCCL_WAIT_S", "-1"),
            ("COMMHAL_COLL_THREADS", "4096"),
            ("COMMHAL_COLL_CHAIN_OVERLAP", "3"),
            ("COMMHAL_GPU_PATH", "ce"),
            ("COMMHAL_PLAN_SCRATCH", "1 MiB"),
        ] {
            let vars = [(var, bad)];
            let e = check_in(&|k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            })
            .unwrap_err();
            assert!(e.contains(var) && e.contains(bad), "{var}={bad}: {e}");
        }
    }

    /// With the drop-in disabled the GPU communicator does not run, and its variables
    /// are not read.
    #[test]
    fn disabled_skips_the_gpu_settings() {
        check_in(&env_of(&[
            ("COMMHAL_NCCL_DISABLE", "1"),
            ("COMMHAL_COLL_THREADS", "4096"),
        ]))
        .unwrap();
        let e = check_in(&env_of(&[
            ("COMMHAL_NCCL_DISABLE", "1"),
            ("COMMHAL_DEBUG", "x"),
        ]))
        .unwrap_err();
        assert!(e.contains("COMMHAL_DEBUG"), "{e}");
    }
}
