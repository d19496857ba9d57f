//! The suite can fail: host-emu with each injected fault (test-only, see
//! `backends/host-emu/src/faults.rs`) must fail the cases meant to catch it, and the
//! same cases pass on the clean backend. Ranks are threads; every fault is deterministic
//! (faulty ports queue writes), so these failures are not timing luck.

use std::time::Duration;

use commhal_conformance::{Mode, Report, RunOptions, Status, run};

const MP: &str = "host-emu/port/message-passing/host-shared,n=4099,off=0";
const MP1: &str = "host-emu/port/message-passing/host-shared,n=1,off=3";
const PWS: &str = "host-emu/port/put-with-signal/host-shared";
const STRONG: &str = "host-emu/port/strong-vs-weak-signal/host-shared";
const FLUSH_SRC: &str = "host-emu/port/flush-source-reusable/host-shared";
const FLUSH_VIS: &str = "host-emu/port/flush-remote-visible/host-shared";
const FIFO: &str = "host-emu/port/proxy-fifo/host-shared,depth=4";
const COUNT: &str = "host-emu/port/signal-counting/host-shared,start=0";
const READ: &str = "host-emu/port/port-read/host-shared,n=4099,off=3";
/// A faulty port queues writes and copies their source later: bytes stored over the
/// source after `write` returned are what lands.
const COPIES: &str = "host-emu/port/write-copies-source/host-shared,n=4099,off=3";
/// Memory channels do not go through the faulty port: they must still pass.
const MEM: &str = "host-emu/memory/message-passing/host-shared,n=4099,off=0";

fn run_with(faults: &str, ids: &[&str]) -> Report {
    let mut o = RunOptions::new("host-emu", 2);
    o.quick = true;
    o.mode = Mode::Threads;
    o.backend_options = if faults.is_empty() {
        String::new()
    } else {
        format!("faults = \"{faults}\"")
    };
    o.filter = ids.iter().map(|s| s.to_string()).collect();
    o.wait_timeout = Duration::from_millis(1500);
    o.case_timeout = Duration::from_secs(60);
    let r = run(&o);
    println!("faults = {faults:?}\n{}", r.table());
    r
}

fn status(r: &Report, id: &str) -> Status {
    r.get(id)
        .unwrap_or_else(|| panic!("{id} did not run"))
        .status
}

fn assert_caught(faults: &str, catchers: &[&str]) {
    let mut ids = catchers.to_vec();
    ids.push(MEM);
    let r = run_with(faults, &ids);
    for id in catchers {
        assert_eq!(
            status(&r, id),
            Status::Fail,
            "{id} did not catch `{faults}`"
        );
    }
    assert_eq!(
        status(&r, MEM),
        Status::Pass,
        "memory channels do not use the faulty port"
    );
    assert!(
        r.summary_line()
            .contains(&format!("{} failed", catchers.len()))
    );
    let clean = run_with("", &ids);
    assert_eq!(
        clean.failed, 0,
        "the clean backend must pass the same cases"
    );
    assert_eq!(clean.passed, ids.len());
}

#[test]
fn signal_before_data_is_caught() {
    assert_caught("signal-before-data", &[MP, MP1, PWS, STRONG, COPIES]);
}

#[test]
fn relaxed_signal_is_caught() {
    assert_caught("relaxed-signal", &[MP, MP1, PWS, STRONG, COPIES]);
}

#[test]
fn early_flush_is_caught() {
    assert_caught("early-flush", &[FLUSH_SRC, FLUSH_VIS, READ, COPIES]);
}

#[test]
fn dropped_triggers_are_caught() {
    assert_caught("drop-every-nth-trigger=7", &[FIFO, COUNT]);
}

#[test]
fn expectations_turn_failures_into_known_failures_and_flag_unexpected_passes() {
    let dir = std::env::temp_dir().join(format!("commhal-conf-exp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("host-emu.toml");
    std::fs::write(
        &file,
        format!(
            "[[known-failure]]\nid = \"{FLUSH_SRC}\"\nreason = \"injected early-flush\"\n[[known-failure]]\nid = \"{MEM}\"\nreason = \"wrongly listed\"\n"
        ),
    )
    .unwrap();
    let mut o = RunOptions::new("host-emu", 2);
    o.quick = true;
    o.mode = Mode::Threads;
    o.backend_options = "faults = \"early-flush\"".into();
    o.filter = vec![FLUSH_SRC.into(), MEM.into()];
    o.wait_timeout = Duration::from_millis(1500);
    o.expectations = Some(file);
    let r = run(&o);
    println!("{}", r.table());
    assert_eq!(status(&r, FLUSH_SRC), Status::KnownFailure);
    assert_eq!(status(&r, MEM), Status::UnexpectedPass);
    assert_eq!(r.summary_line(), "0 passed, 1 failed, 1 skipped");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `detached-mapping` breaks what the port faults leave alone: memory channels, the
/// emulated switch and collectives (their peer mappings are private snapshots, so puts
/// and signals are lost and reads are stale). Every case meant to catch it fails within
/// the wait bound (never a hang, never a pass), and the same cases pass without it.
#[test]
fn detached_mapping_is_caught_in_memory_switch_and_collectives() {
    let catchers = [
        MEM,
        "host-emu/memory/get-after-signal/host-shared",
        "host-emu/switch/reduce/host-shared,dtype=u32",
        "host-emu/switch/broadcast/host-shared",
        "host-emu/switch/barriers/host-shared",
        "host-emu/all/collective/coll=allreduce,algo=1pa,nodes=1",
        "host-emu/all/collective/coll=allreduce,algo=ring,nodes=1",
        "host-emu/all/collective/coll=allgather,algo=allpairs,nodes=1",
        "host-emu/all/collective/coll=broadcast,algo=chain,nodes=1",
        "host-emu/all/collective/coll=alltoall,algo=allpairs,nodes=1",
        "host-emu/all/collective/coll=sendrecv,algo=direct,nodes=1",
    ];
    let started = std::time::Instant::now();
    let r = run_with("detached-mapping", &catchers);
    let took = started.elapsed();
    for id in catchers {
        assert_eq!(
            status(&r, id),
            Status::Fail,
            "{id} did not catch `detached-mapping`"
        );
    }
    // Each failure is a bounded wait (1.5 s here), not a hang: generous margin.
    assert!(
        took < Duration::from_secs(120),
        "detecting the fault took {took:?}"
    );
    let clean = run_with("", &catchers);
    assert_eq!(
        clean.failed, 0,
        "the clean backend must pass the same cases"
    );
    assert_eq!(clean.passed, catchers.len());
}

/// `switch-drop-member` corrupts the emulated switch without any error or timeout: a
/// reduce that misses a member and counts another twice, a broadcast that never reaches
/// a member. The exact checks of case 15 must see the wrong data.
#[test]
fn switch_drop_member_is_caught_by_exact_results() {
    let catchers = [
        "host-emu/switch/reduce/host-shared,dtype=u32",
        "host-emu/switch/reduce/host-shared,dtype=i64",
        "host-emu/switch/reduce/host-shared,dtype=f64",
        "host-emu/switch/broadcast/host-shared",
    ];
    let r = run_with("switch-drop-member", &catchers);
    for id in catchers {
        assert_eq!(
            status(&r, id),
            Status::Fail,
            "{id} did not catch `switch-drop-member`"
        );
        let detail = &r.get(id).map(|c| c.detail.clone()).unwrap_or_default();
        assert!(
            detail.contains("expected"),
            "{id} must fail on wrong data, not an error: {detail}"
        );
    }
    let clean = run_with("", &catchers);
    assert_eq!(
        clean.failed, 0,
        "the clean backend must pass the same cases"
    );
    assert_eq!(clean.passed, catchers.len());
}

/// `detached-tail-page` loses only the last page of each peer mapping: a put that ends
/// there arrives short while other signals still arrive, so data checks (not only
/// timeouts) must see it; a collective whose semaphore lands in such a page fails
/// within the wait bound.
#[test]
fn detached_tail_page_short_puts_are_caught() {
    let flush_vis = "host-emu/memory/flush-remote-visible/host-shared";
    let stress = "host-emu/memory/stress-message-passing/host-shared,rounds=200";
    let coll = "host-emu/all/collective/coll=allgather,algo=ring,nodes=1";
    let catchers = [MEM, flush_vis, stress, coll];
    let r = run_with("detached-tail-page", &catchers);
    for id in catchers {
        assert_eq!(
            status(&r, id),
            Status::Fail,
            "{id} did not catch `detached-tail-page`"
        );
    }
    let detail = |id: &str| r.get(id).map(|c| c.detail.clone()).unwrap_or_default();
    assert!(detail(flush_vis).contains("byte"), "{}", detail(flush_vis));
    assert!(
        detail(stress).contains("weak-behaviour"),
        "{}",
        detail(stress)
    );
    let clean = run_with("", &catchers);
    assert_eq!(
        clean.failed, 0,
        "the clean backend must pass the same cases"
    );
    assert_eq!(clean.passed, catchers.len());
}
