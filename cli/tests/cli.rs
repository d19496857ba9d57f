//! End-to-end tests of the `commhal` binary: `info` and `launch`.

use std::process::Command;
use std::time::{Duration, Instant};

use commhal_hal::settings::host::{BACKENDS, CONFIG, LOG, PLUGIN_PATH};
use commhal_hal::settings::ibverbs::{LIB, PORT, STUB_DEVICES};

fn commhal() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_commhal"));
    c.env_remove(BACKENDS.env)
        .env_remove(CONFIG.env)
        .env_remove(PLUGIN_PATH.env)
        .env_remove(LIB.env);
    c
}

#[test]
fn info_shows_host_emu_available() {
    let out = commhal().arg("info").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("host-emu"))
        .expect("host-emu listed");
    assert!(
        line.contains("available") && !line.contains("unavailable"),
        "{line}"
    );
    assert!(text.contains("+strong-signal"), "{text}");
}

#[test]
fn info_json_is_machine_readable() {
    let out = commhal().args(["info", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let backends = v["backends"].as_array().expect("backends array");
    let host = backends
        .iter()
        .find(|b| b["name"] == "host-emu")
        .expect("host-emu");
    assert_eq!(host["availability"]["status"], "available");
    assert_eq!(v["selection"]["backends"][0], "host-emu");
}

#[test]
fn info_reports_an_unknown_selected_backend() {
    let out = commhal()
        .args(["info"])
        .env(BACKENDS.env, "no-such-net")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("unknown backend `no-such-net`") && text.contains("host-emu"),
        "{text}"
    );
}

#[test]
fn launch_sets_rank_variables_and_prefixes_output() {
    let out = commhal()
        .args(["launch", "-n", "3", "--", "sh", "-c"])
        .arg("echo r=$COMMHAL_RANK n=$COMMHAL_WORLD_SIZE t=$RANK/$WORLD_SIZE id=${COMMHAL_UNIQUE_ID%%@*}")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for r in 0..3 {
        let want = format!("[rank {r}] r={r} n=3 t={r}/3 id=commhal1-");
        assert!(
            text.lines().any(|l| l.starts_with(&want)),
            "missing {want:?} in:\n{text}"
        );
    }
}

#[test]
fn launch_fails_and_stops_the_others_when_one_rank_dies() {
    let start = Instant::now();
    let out = commhal()
        .args(["launch", "-n", "3", "--grace", "1", "--", "sh", "-c"])
        .arg("if [ $COMMHAL_RANK = 1 ]; then echo dying >&2; exit 7; fi; sleep 60")
        .output()
        .unwrap();
    // The sleeping ranks must have been stopped rather than waited for.
    assert!(
        start.elapsed() < Duration::from_secs(50),
        "ranks were not stopped"
    );
    assert_eq!(out.status.code(), Some(7));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("[rank 1] dying"), "{err}");
    assert!(err.contains("rank 1 failed (exit code 7)"), "{err}");
}

#[test]
fn launch_reports_a_missing_program() {
    let out = commhal()
        .args(["launch", "-n", "2", "--", "/no/such/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot start `/no/such/program`"));
}

/// `commhal conformance` end to end through the binary, ranks as processes: every
/// claimed case passes; port-only host-tcp borrows host-emu memory for its buffers.
#[test]
fn conformance_passes_on_host_backends() {
    for (backend, ranks, min_pass) in [("host-emu", "2", 60), ("host-tcp", "3", 25)] {
        let out = commhal()
            .args([
                "conformance",
                "--backend",
                backend,
                "--ranks",
                ranks,
                "--quick",
                "--json",
            ])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{backend}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let text = v.to_string();
        assert!(out.status.success(), "{backend}: {text}");
        let count = |s: &str| {
            v["cases"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["status"] == s)
                .count()
        };
        assert_eq!(count("fail"), 0, "{backend}: {text}");
        assert!(
            count("pass") >= min_pass,
            "{backend}: only {} passed",
            count("pass")
        );
    }
}

/// `--backends` on the command line wins over COMMHAL_BACKENDS, and an unknown name is
/// an error listing the known ones, for `info` and for a benchmark's communicators.
#[test]
fn cli_backends_flag_overrides_the_environment() {
    let out = commhal()
        .args(["--backends", "host-tcp,host-emu", "info"])
        .env(BACKENDS.env, "host-emu")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("selection (Cli): host-tcp, host-emu"),
        "{text}"
    );

    let out = commhal()
        .args([
            "bench",
            "allreduce",
            "--ranks",
            "2",
            "-b",
            "1K",
            "-e",
            "1K",
            "-n",
            "1",
            "-w",
            "0",
        ])
        .args(["--backends", "no-such-net"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown backend `no-such-net`") && err.contains("host-emu"),
        "{err}"
    );
}

/// `info` on a machine without an RDMA device: ib-verbs says why it is unavailable
/// (no library; a library listing no device), and says it never ran on hardware.
#[test]
fn info_explains_ib_verbs_without_a_device() {
    let ib_line = |env: &[(&str, String)]| {
        let out = commhal()
            .arg("info")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = text
            .lines()
            .skip_while(|l| !l.starts_with("ib-verbs"))
            .take(2)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(line.contains("never run on RDMA hardware"), "{text}");
        line
    };
    let missing = ib_line(&[(LIB.env, "/nonexistent/libibverbs.so.1".into())]);
    assert!(
        missing.contains("unavailable: libibverbs not found at /nonexistent/libibverbs.so.1"),
        "{missing}"
    );
    let stub = stub_provider();
    let none = ib_line(&[
        (LIB.env, stub.display().to_string()),
        (STUB_DEVICES.env, "0".into()),
    ]);
    assert!(
        none.contains("unavailable: no RDMA device (libibverbs found 0 devices)"),
        "{none}"
    );
}

/// `libcommhal_ibverbs_stub.so`, built by cargo with the tests.
fn stub_provider() -> std::path::PathBuf {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_commhal"));
    [
        bin.parent().unwrap().join("deps"),
        bin.parent().unwrap().to_path_buf(),
    ]
    .iter()
    .map(|d| d.join("libcommhal_ibverbs_stub.so"))
    .find(|p| p.is_file())
    .expect("the stub verbs provider is built with the tests")
}

/// ib-verbs refuses a port number outside its declaration (its probe says why), and
/// the stub provider, which cannot refuse, says on stderr which value it ignored.
#[test]
fn ib_verbs_variables_outside_their_declaration_are_named() {
    let stub = stub_provider();
    let out = commhal()
        .arg("info")
        .env(LIB.env, &stub)
        .env(PORT.env, "256")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "COMMHAL_IBVERBS_PORT=\"256\" is not valid: expected a whole number in 0..=255"
        ),
        "{text}"
    );
    let out = commhal()
        .arg("info")
        .env(LIB.env, &stub)
        .env(STUB_DEVICES.env, "many")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("commhal-ibverbs-stub: COMMHAL_IBVERBS_STUB_DEVICES=\"many\" is not valid")
            && err.contains("using the default"),
        "{err}"
    );
}

/// A `COMMHAL_LOG` that is not a log filter is warned about; the command still runs.
#[test]
fn a_bad_log_filter_is_warned_about() {
    let out = commhal()
        .arg("info")
        .env(LOG.env, "commhal_hal=loudest")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("COMMHAL_LOG=\"commhal_hal=loudest\" is not a log filter"),
        "{err}"
    );
}
