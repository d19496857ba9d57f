//! host-emu, quick tier: every claimed guarantee passes, with ranks as threads and with
//! ranks as two processes (this test binary re-executed as `child_entry`).

use commhal_conformance::{Mode, Report, RunOptions, Status, child_main_if_requested, run};

/// The child rank entry: a no-op in a normal test run; in a re-executed rank process
/// (env `COMMHAL_CONFORMANCE_CHILD` set) it runs the rank and exits.
#[test]
fn child_entry() {
    if let Some(code) = child_main_if_requested() {
        std::process::exit(code);
    }
}

fn opts(mode: Mode, ranks: u32) -> RunOptions {
    RunOptions::for_test("host-emu", ranks, mode, &[])
}

fn check_clean(r: &Report) {
    println!("{}", r.table());
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.failed, 0, "host-emu must pass everything it claims");
    assert!(r.passed >= 60, "only {} cases passed", r.passed);
    for c in &r.cases {
        if c.status != Status::Pass {
            assert_eq!(c.status, Status::NotSupported, "{}", c.id);
            assert!(
                c.id.contains("peers-independent") || c.id.ends_with("all/graph-capture"),
                "unexpected not-supported: {} ({})",
                c.id,
                c.detail
            );
        }
    }
    assert!(r.table().ends_with(&format!("{}\n", r.summary_line())));
    let line = r.summary_line();
    assert_eq!(
        line,
        format!("{} passed, 0 failed, {} skipped", r.passed, r.skipped)
    );
}

#[test]
fn host_emu_quick_threads() {
    check_clean(&run(&opts(Mode::Threads, 2)));
}

#[test]
fn host_emu_quick_two_processes() {
    let r = run(&opts(Mode::Processes, 2));
    assert_eq!(r.mode, "processes");
    check_clean(&r);
}

#[test]
fn three_ranks_run_peer_independence() {
    let mut o = opts(Mode::Threads, 3);
    o.filter = vec!["peers-independent".into(), "signal-counting".into()];
    let r = run(&o);
    println!("{}", r.table());
    assert_eq!(r.failed, 0);
    assert_eq!(r.skipped, 0);
    assert_eq!(r.passed, 2 + 6);
}

#[test]
fn json_report_round_trips() {
    let mut o = opts(Mode::Threads, 2);
    o.filter = vec!["switch/".into()];
    let r = run(&o);
    let back: Report = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(back.summary_line(), r.summary_line());
    assert_eq!(back.cases.len(), 6);
}

#[test]
fn unknown_backend_and_one_rank_fail_cleanly() {
    let r = run(&opts(Mode::Threads, 2).clone_with_backend("no-such-backend"));
    assert!(r.failed > 0 && r.passed == 0, "{}", r.table());
    assert!(
        r.errors.iter().any(|e| e.contains("no-such-backend")),
        "{:?}",
        r.errors
    );
    let r = run(&opts(Mode::Threads, 1));
    assert!(r.failed > 0, "{}", r.table());
}

trait WithBackend {
    fn clone_with_backend(&self, b: &str) -> RunOptions;
}
impl WithBackend for RunOptions {
    fn clone_with_backend(&self, b: &str) -> RunOptions {
        let mut o = self.clone();
        o.backend = b.into();
        o
    }
}
