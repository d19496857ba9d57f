//! `commhal bench` on host-emu: its checker, and the warnings and errors it gives for
//! a doubtful environment.

use std::process::{Command, Output};

fn commhal() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_commhal"));
    for v in [
        "COMMHAL_BACKENDS",
        "COMMHAL_CONFIG",
        "COMMHAL_PLUGIN_PATH",
        "COMMHAL_ALGO",
        "COMMHAL_WAIT_TIMEOUT_MS",
        "COMMHAL_SECRET",
        "COMMHAL_UNIQUE_ID",
        "COMMHAL_RANK",
        "COMMHAL_WORLD_SIZE",
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
            .env("COMMHAL_WAIT_TIMEOUT_MS", bad)
            .output()
            .unwrap();
        let t = text(&out);
        assert!(!out.status.success(), "{bad}: {t}");
        assert!(t.contains("COMMHAL_WAIT_TIMEOUT_MS"), "{bad}: {t}");
    }
    let out = small_bench(&[])
        .env("COMMHAL_WAIT_TIMEOUT_MS", "20000")
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
    assert_eq!(t.matches("COMMHAL_SECRET").count(), 1, "{t}");
}

#[test]
fn bench_warns_about_plugins_that_failed_to_load() {
    let dir = std::env::temp_dir().join(format!("commhal-bench-plugins-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("libcommhal_plugin_broken.so"), "not a library\n").unwrap();
    let out = small_bench(&[])
        .env("COMMHAL_PLUGIN_PATH", &dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("libcommhal_plugin_broken.so"), "{t}");
}
