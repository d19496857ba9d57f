//! `commhal launch` and signals: ranks start with nothing blocked, signals sent to
//! `launch` reach the ranks (whose handlers run) and `launch` exits non-zero, and the
//! ranks die with the launcher. Waits are bounded generously (loaded CI machines).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use commhal_hal::settings::host::{BACKENDS, CONFIG, PLUGIN_PATH};

fn commhal() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_commhal"));
    c.env_remove(BACKENDS.env)
        .env_remove(CONFIG.env)
        .env_remove(PLUGIN_PATH.env);
    c
}

/// Read stdout lines of `child` until `n` of them contain `marker`; returns all lines.
fn lines_until(
    child: &mut Child,
    marker: &str,
    n: usize,
) -> (Vec<String>, BufReader<std::process::ChildStdout>) {
    let mut reader = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut lines = Vec::new();
    let mut seen = 0;
    while seen < n {
        let mut l = String::new();
        if reader.read_line(&mut l).unwrap() == 0 {
            panic!("stdout ended before {n} `{marker}` lines: {lines:?}");
        }
        if l.contains(marker) {
            seen += 1;
        }
        lines.push(l);
    }
    (lines, reader)
}

fn wait_bounded(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("launch still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: i32) -> bool {
    // A zombie has exited; only a running (or sleeping) process counts.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[test]
fn launch_starts_ranks_with_no_signal_blocked() {
    let out = commhal()
        .args([
            "launch",
            "-n",
            "2",
            "--",
            "grep",
            "SigBlk",
            "/proc/self/status",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let masks: Vec<&str> = text.lines().filter(|l| l.contains("SigBlk")).collect();
    assert_eq!(masks.len(), 2, "{text}");
    for m in masks {
        assert!(
            m.ends_with("0000000000000000"),
            "a rank starts with signals blocked: {m}"
        );
    }
}

#[test]
fn launch_forwards_sigterm_to_the_ranks_handlers_and_exits_non_zero() {
    let mut child = commhal()
        .args(["launch", "-n", "2", "--grace", "60", "--", "sh", "-c"])
        .arg(
            "if [ $COMMHAL_RANK = 0 ]; then trap 'echo handler-ran; exit 3' TERM; echo ready; \
             while :; do sleep 0.05; done; else echo ready; exec sleep 120; fi",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (_, mut rest) = lines_until(&mut child, "ready", 2);
    let start = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // Far below the 60 s grace: rank 0's handler ran, rank 1's `sleep` died of the
    // SIGTERM, nobody waited for SIGKILL.
    let status = wait_bounded(&mut child, Duration::from_secs(30));
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "launch waited for the grace"
    );
    assert!(!status.success(), "launch exited 0 after SIGTERM");
    let mut tail = String::new();
    std::io::Read::read_to_string(&mut rest, &mut tail).unwrap();
    assert_eq!(tail.matches("handler-ran").count(), 1, "{tail}");
}

#[test]
fn ranks_die_when_launch_is_killed() {
    let mut child = commhal()
        .args([
            "launch",
            "-n",
            "2",
            "--",
            "sh",
            "-c",
            "echo pid=$$; exec sleep 120",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines, _rest) = lines_until(&mut child, "pid=", 2);
    let pids: Vec<i32> = lines
        .iter()
        .filter_map(|l| l.split("pid=").nth(1))
        .map(|p| p.trim().parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    child.kill().unwrap(); // SIGKILL: launch gets no chance to stop the ranks itself
    child.wait().unwrap();
    let start = Instant::now();
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "ranks {pids:?} outlived the killed launcher"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bench_rejects_sizes_that_cannot_grow() {
    for args in [
        ["-b", "0", "-e", "1K", "-f", "2"],
        ["-b", "1K", "-e", "4K", "-f", "1"],
        ["-b", "1K", "-e", "4K", "-f", "0"],
    ] {
        let mut child = commhal()
            .args(["bench", "allreduce", "-n", "1", "-w", "0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let status = wait_bounded(&mut child, Duration::from_secs(20));
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("-b") || err.contains("-f"), "{args:?}: {err}");
    }
}

#[test]
fn launch_forwards_each_signal_and_exits_with_it() {
    for (sig, code) in [
        (nix::sys::signal::Signal::SIGTERM, 143),
        (nix::sys::signal::Signal::SIGINT, 130),
        (nix::sys::signal::Signal::SIGHUP, 129),
    ] {
        let mut child = commhal()
            .args(["launch", "-n", "2", "--grace", "60", "--", "sh", "-c"])
            .arg("echo ready; exec sleep 120")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (_, _rest) = lines_until(&mut child, "ready", 2);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
        let status = wait_bounded(&mut child, Duration::from_secs(30));
        assert_eq!(status.code(), Some(code), "{sig}");
    }
}

/// After a failure, ranks still running when the report window ends are named as
/// possibly hung, and the first failure is blamed.
#[test]
fn launch_names_the_first_failure_and_the_ranks_that_hang() {
    let out = commhal()
        .args(["launch", "-n", "3", "--grace", "1", "--", "sh", "-c"])
        .arg(
            "case $COMMHAL_RANK in 0) sleep 0.3; exit 4;; 1) exec sleep 60;; \
             2) sleep 0.6; exit 5;; esac",
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank 0 failed (exit code 4) first"), "{err}");
    assert!(err.contains("rank(s) 1 still running"), "{err}");
}

/// A stopped rank (SIGSTOP: a hung peer) does not hold the launch until the grace
/// period's SIGKILL: SIGTERM is followed by SIGCONT, so it terminates at once.
#[test]
fn a_stopped_rank_is_stopped_with_the_others_after_a_failure() {
    let start = Instant::now();
    let out = commhal()
        .args(["launch", "-n", "2", "--grace", "60", "--", "sh", "-c"])
        .arg("case $COMMHAL_RANK in 0) kill -STOP $$; exit 0;; 1) sleep 0.3; exit 3;; esac")
        .output()
        .unwrap();
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank 1 failed (exit code 3) first"), "{err}");
    assert!(err.contains("rank(s) 0 still running"), "{err}");
    assert!(
        took < Duration::from_secs(30),
        "the stopped rank waited for SIGKILL ({took:?})"
    );
}
