//! `commhal bench --nodes 2` end to end: 4 rank processes on 2 virtual nodes, the
//! hierarchical AllReduce's cross-node traffic over `host-tcp` ports, every result
//! checked by the benchmark itself (`#wrong` must be 0 on every size).

use std::process::Command;

use commhal_hal::settings::host::{ALGO, BACKENDS, CONFIG, PLUGIN_PATH};
use commhal_hal::settings::launch::NODE;

fn commhal() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_commhal"));
    c.env_remove(BACKENDS.env)
        .env_remove(CONFIG.env)
        .env_remove(PLUGIN_PATH.env)
        .env_remove(ALGO.env)
        .env_remove(NODE.env);
    c
}

fn bench(extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec![
        "bench",
        "allreduce",
        "--ranks",
        "4",
        "--nodes",
        "2",
        "-b",
        "1K",
        "-e",
        "1M",
        "-f",
        "32",
        "-n",
        "3",
        "-w",
        "1",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = commhal().args(&args).output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "commhal {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("bench --json output is not JSON ({e}):\n{stdout}"));
    assert_eq!(rows.len(), 3, "1K, 32K, 1M: {stdout}");
    for r in &rows {
        assert_eq!(r["oop_wrong"], 0, "{r}");
        assert_eq!(r["ip_wrong"], 0, "{r}");
    }
    rows
}

#[test]
fn allreduce_on_two_virtual_nodes_is_correct() {
    let rows = bench(&[]);
    for r in &rows {
        let a = r["algorithm"].as_str().unwrap_or_default();
        assert!(
            a.contains("2ph"),
            "the selector picks 2PH across nodes: {r}"
        );
    }
}

#[test]
fn ring_allreduce_on_two_virtual_nodes_is_correct() {
    let rows = bench(&["--algo", "ring"]);
    for r in &rows {
        let a = r["algorithm"].as_str().unwrap_or_default();
        assert!(a.contains("ring"), "{r}");
    }
}
