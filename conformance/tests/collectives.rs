//! Collective cases (21, 22): every collective × algorithm on host-emu (one node) and
//! host-tcp (two virtual nodes, port channels between them); every combination runs
//! and passes on both. Also host-tcp's port reads (23), which its `get` claim needs,
//! and its writes that copy their source (24, the `write-copies-source` claim).

use commhal_conformance::{Mode, Report, RunOptions, Status, run};

fn run_coll(backend: &str, ranks: u32) -> Report {
    let o = RunOptions::for_test(backend, ranks, Mode::Threads, &["/all/collective"]);
    let r = run(&o);
    println!("{}", r.table());
    r
}

fn check(r: &Report, not_supported: &[&str]) {
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.failed, 0, "{}", r.table());
    // every algorithm + the dead-peer case
    assert_eq!(
        r.cases.len(),
        commhal_algorithms::builders::Algorithm::ALL.len() + 1,
        "{}",
        r.table()
    );
    for c in &r.cases {
        let listed = not_supported.iter().any(|a| c.id.contains(a));
        if listed {
            assert_eq!(c.status, Status::NotSupported, "{}", c.id);
            assert!(!c.detail.is_empty(), "{}: no reason", c.id);
        } else {
            assert_eq!(c.status, Status::Pass, "{}: {}", c.id, c.detail);
        }
    }
}

#[test]
fn every_collective_and_algorithm_on_one_node() {
    let r = run_coll("host-emu", 3);
    check(&r, &[]);
}

#[test]
fn multi_node_algorithms_over_host_tcp() {
    let r = run_coll("host-tcp", 4);
    check(&r, &[]);
}

/// The child rank entry for the processes test (a no-op in a normal test run).
#[test]
fn child_entry() {
    if let Some(code) = commhal_conformance::child_main_if_requested() {
        std::process::exit(code);
    }
}

/// Two virtual nodes as two processes: the port paths between processes.
#[test]
fn multi_node_algorithms_as_processes() {
    let filter = ["algo=ring", "algo=2ph-ll", "algo=chain,"];
    let o = RunOptions::for_test("host-tcp", 2, Mode::Processes, &filter);
    let r = run(&o);
    println!("{}", r.table());
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.failed, 0, "{}", r.table());
    assert_eq!(r.passed, 5, "{}", r.table());
}

/// Case 23 on host-tcp, two rank processes: `Port::read` is a `READ` request the
/// peer's receiver answers; the claim is exercised (honest capabilities).
#[test]
fn host_tcp_port_reads_as_processes() {
    let filter = ["host-tcp/port/port-read", "honest-capabilities"];
    let o = RunOptions::for_test("host-tcp", 2, Mode::Processes, &filter);
    let r = run(&o);
    println!("{}", r.table());
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!((r.passed, r.failed), (4, 0), "{}", r.table());
}

/// Case 24 on host-tcp, two rank processes: `write` sends its source before it
/// returns, so bytes stored over the source right after never reach the peer; the
/// claim is exercised (honest capabilities).
#[test]
fn host_tcp_write_copies_source_as_processes() {
    let filter = ["host-tcp/port/write-copies-source", "honest-capabilities"];
    let o = RunOptions::for_test("host-tcp", 2, Mode::Processes, &filter);
    let r = run(&o);
    println!("{}", r.table());
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!((r.passed, r.failed), (4, 0), "{}", r.table());
}
