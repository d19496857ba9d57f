//! ib-verbs over the stub verbs provider (`backends/ib-verbs/stub`), quick tier: the
//! port cases on two rank processes (the backend's host path with host-emu memory as
//! the companion allocator), and the host communicator's collective cases on four rank
//! processes over two virtual nodes with ib-verbs as the port between the nodes. The
//! stub is shared memory on one host, not an RDMA device: this checks the backend's
//! verbs usage and error paths, never hardware behaviour.

use std::path::PathBuf;
use std::time::Duration;

use commhal_conformance::{Mode, RunOptions, Status, child_main_if_requested, run};
use commhal_hal::settings::Setting;
use commhal_hal::settings::ibverbs::{LIB, STUB_FAULT};
use commhal_hal::settings::tests::{TEST_IBVERBS_COLLECTIVES, TEST_IBVERBS_SUITE};

/// The child rank entry (see `suite.rs`).
#[test]
fn child_entry() {
    if let Some(code) = child_main_if_requested() {
        std::process::exit(code);
    }
}

/// `libcommhal_ibverbs_stub.so`, built by cargo next to this test binary.
fn stub_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("test binary dir").to_path_buf();
    [dir.clone(), dir.join("..")]
        .iter()
        .map(|d| d.join("libcommhal_ibverbs_stub.so"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "libcommhal_ibverbs_stub.so not found next to {}",
                dir.display()
            )
        })
}

/// Runs the suite in a re-executed copy of this binary whose environment names the
/// stub (`COMMHAL_IBVERBS_LIB`, plus `extra`): the backend's probe reads the
/// environment, and the rank processes inherit it.
fn run_suite_with(extra: &[(&str, &str)]) {
    rerun("suite_parent", &TEST_IBVERBS_SUITE, extra);
}

/// Runs the test `parent` in a re-executed copy of this binary with `gate` set and the
/// stub named (see `run_suite_with`).
fn rerun(parent: &str, gate: &Setting, extra: &[(&str, &str)]) {
    let out = std::process::Command::new(std::env::current_exe().expect("current_exe"))
        .args(["--exact", parent, "--nocapture", "--test-threads=1"])
        .env(gate.env, "1")
        .env(LIB.env, stub_lib())
        .envs(extra.iter().copied())
        .output()
        .expect("re-running the test binary");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the ib-verbs suite failed (table above)"
    );
    assert!(text.contains("SUITE-OK"), "the suite did not run");
}

#[test]
fn ib_verbs_port_cases_over_the_stub_two_processes() {
    run_suite_with(&[]);
}

/// The same cases on a device without atomics: signals are 8-byte RDMA WRITEs of a
/// shadow counter whose starting value is read once with an RDMA READ.
#[test]
fn ib_verbs_port_cases_without_device_atomics() {
    run_suite_with(&[(STUB_FAULT.env, "no-atomics")]);
}

/// The suite itself (a no-op unless re-executed by the test above).
#[test]
fn suite_parent() {
    if !TEST_IBVERBS_SUITE.is_set() {
        return;
    }
    let filter = ["ib-verbs/port/", "honest-capabilities"];
    let o = RunOptions::for_test("ib-verbs", 2, Mode::Processes, &filter);
    let r = run(&o);
    println!("{}", r.table());
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.failed, 0, "ib-verbs must pass every port case it claims");
    assert!(r.passed >= 20, "only {} cases passed", r.passed);
    for c in &r.cases {
        if c.status != Status::Pass {
            assert_eq!(c.status, Status::NotSupported, "{}: {}", c.id, c.detail);
            assert!(
                c.id.contains("flush-remote-visible")
                    || c.id.contains("peers-independent")
                    || c.id.contains("write-copies-source"),
                "unexpected not-supported: {} ({})",
                c.id,
                c.detail
            );
        }
    }
    // Peer independence needs a third rank (threads: the stub serves every rank's
    // device context from this one process).
    let filter = ["ib-verbs/port/peers-independent"];
    let r3 = run(&RunOptions::for_test("ib-verbs", 3, Mode::Threads, &filter));
    println!("{}", r3.table());
    assert!(r3.errors.is_empty(), "{:?}", r3.errors);
    assert_eq!(
        (r3.passed, r3.failed),
        (1, 0),
        "peers-independent on 3 ranks"
    );
    println!("SUITE-OK");
}

/// Case 21 (every collective through every algorithm, results checked exactly) and 22
/// (a peer leaves mid-job) on four rank processes over two virtual nodes, ib-verbs over
/// the stub as the port between the nodes; each case checks on every rank that the
/// communicator's cross-node ports are ib-verbs, not host-tcp.
#[test]
fn collectives_across_two_nodes_over_ib_verbs() {
    rerun("collectives_parent", &TEST_IBVERBS_COLLECTIVES, &[]);
}

/// The collective cases themselves (a no-op unless re-executed by the test above).
#[test]
fn collectives_parent() {
    if !TEST_IBVERBS_COLLECTIVES.is_set() {
        return;
    }
    let mut o = RunOptions::for_test("ib-verbs", 4, Mode::Processes, &["ib-verbs/all/collective"]);
    o.case_timeout = Duration::from_secs(120);
    let r = run(&o);
    println!("{}", r.table());
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.failed, 0, "{}", r.table());
    assert_eq!(
        r.cases.len(),
        commhal_algorithms::builders::Algorithm::ALL.len() + 1,
        "every algorithm and the dead-peer case: {}",
        r.table()
    );
    for c in &r.cases {
        assert_eq!(c.status, Status::Pass, "{}: {}", c.id, c.detail);
        if !c.id.contains("collective-dead-peer") {
            assert!(
                c.detail.contains("over ib-verbs:") && !c.detail.contains(" 0 signals"),
                "{}: no signal went over ib-verbs ({})",
                c.id,
                c.detail
            );
        }
        if c.id.contains("algo=2ph") {
            // Hierarchical plans: rank 0 writes its node's data to its peer on the
            // other node.
            assert!(
                !c.detail.contains(" 0 writes"),
                "{}: no bytes went over ib-verbs ({})",
                c.id,
                c.detail
            );
        }
    }
    println!("SUITE-OK");
}
