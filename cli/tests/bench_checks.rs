//! `commhal bench` on host-emu: its checker, and the warnings and errors it gives for
//! a doubtful environment.

use std::process::{Command, Output};

use commhal_hal::settings::host::{ALGO, BACKENDS, CONFIG, PLUGIN_PATH, WAIT_TIMEOUT_MS};
use commhal_hal::settings::launch::{
    BOOTSTRAP_TIMEOUT_MS, LAUNCH_PREFIX, LOCAL_RANK, RANK, SECRET, UNIQUE_ID, WORLD_SIZE,
};

fn commhal() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_commhal"));
    for v in [
        BACKENDS.env,
        CONFIG.env,
        PLUGIN_PATH.env,
        ALGO.env,
        WAIT_TIMEOUT_MS.env,
        SECRET.env,
        UNIQUE_ID.env,
        RANK.env,
        WORLD_SIZE.env,
        LOCAL_RANK.env,
        BOOTSTRAP_TIMEOUT_MS.env,
        LAUNCH_PREFIX.env,
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
    ] {
        c.env_remove(v);
    }
    c
}

fn small_bench(extra: &[&str]) -> Command {
    let mut c = commhal();
    c.args([
        "bench",
        "allreduce",
        "-b",
        "1K",
        "-e",
        "1K",
        "-n",
        "1",
        "-w",
        "0",
    ])
    .args(extra);
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Unsigned min/max: the checker's expected values were computed from negative
/// inputs, so every element counted as wrong although the library was right.
#[test]
fn unsigned_min_and_max_check_clean() {
    for dtype in ["u8", "u32", "u64"] {
        for op in ["min", "max"] {
            let out = small_bench(&["--ranks", "2", "-d", dtype, "-o", op, "--json"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{dtype} {op}: {}", text(&out));
            let stdout = String::from_utf8_lossy(&out.stdout);
            let v: serde_json::Value = serde_json::from_str(&stdout)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out)));
            let row = &v[0];
            assert_eq!(row["oop_wrong"], 0, "{dtype} {op}: {row}");
            assert_eq!(row["ip_wrong"], 0, "{dtype} {op}: {row}");
        }
    }
}

#[test]
fn bad_wait_timeouts_are_rejected() {
    for bad in ["abc", "-5", "0"] {
        let out = small_bench(&[])
            .env(WAIT_TIMEOUT_MS.env, bad)
            .output()
            .unwrap();
        let t = text(&out);
        assert!(!out.status.success(), "{bad}: {t}");
        assert!(t.contains(WAIT_TIMEOUT_MS.env), "{bad}: {t}");
    }
    let out = small_bench(&[])
        .env(WAIT_TIMEOUT_MS.env, "20000")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn a_secret_derived_from_torchrun_variables_is_warned_about() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = small_bench(&[])
        .env("RANK", "0")
        .env("WORLD_SIZE", "1")
        .env("LOCAL_RANK", "0")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert_eq!(t.matches(SECRET.env).count(), 1, "{t}");
}

#[test]
fn bench_warns_about_plugins_that_failed_to_load() {
    let dir = std::env::temp_dir().join(format!("commhal-bench-plugins-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("libcommhal_plugin_broken.so"), "not a library\n").unwrap();
    let out = small_bench(&[])
        .env(PLUGIN_PATH.env, &dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("libcommhal_plugin_broken.so"), "{t}");
}

/// A value its declaration refuses stops the benchmark with a message naming the
/// variable, where it used to be ignored or named only by what it broke.
#[test]
fn values_outside_their_declaration_are_refused_by_name() {
    let refused = |env: &[(&str, &str)], args: &[&str], want: &str| {
        let out = small_bench(args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let t = text(&out);
        assert!(!out.status.success(), "{env:?}: {t}");
        assert!(t.contains(want), "{env:?}: wanted {want:?} in: {t}");
    };
    refused(
        &[(ALGO.env, "allreduce:no-such-plan")],
        &[],
        "COMMHAL_ALGO: ",
    );
    let one_rank = [(RANK.env, "0"), (WORLD_SIZE.env, "1")];
    refused(
        &[one_rank[0], one_rank[1], (LOCAL_RANK.env, "first")],
        &[],
        "COMMHAL_LOCAL_RANK=\"first\" is not valid: expected a whole number",
    );
    refused(
        &[
            one_rank[0],
            one_rank[1],
            (BOOTSTRAP_TIMEOUT_MS.env, "90000000"),
        ],
        &[],
        "COMMHAL_BOOTSTRAP_TIMEOUT_MS=\"90000000\" is not valid: expected a whole number in 1..=86400000 ms",
    );
    refused(
        &[(LAUNCH_PREFIX.env, "maybe")],
        &["--json"],
        "COMMHAL_LAUNCH_PREFIX=\"maybe\" is not valid: expected 0 or 1",
    );
}

/// A list or a path that is not UTF-8 is refused, naming the variable.
#[test]
fn non_utf8_lists_and_paths_are_refused_by_name() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    for var in [BACKENDS.env, PLUGIN_PATH.env, CONFIG.env] {
        let out = small_bench(&[])
            .env(var, OsStr::from_bytes(b"host-emu\xff"))
            .output()
            .unwrap();
        let t = text(&out);
        assert!(!out.status.success(), "{var}: {t}");
        assert!(t.contains(var) && t.contains("in UTF-8"), "{var}: {t}");
    }
}
