//! `commhal bench` on host-emu read as nccl-tests output: the header, the rows (one
//! per size, nccl-tests' columns and type names), the footer, the flags, and JSON that
//! `commhal launch`'s `[rank K]` prefixes never reach.

use std::process::{Command, Output};

use commhal_hal::settings::host::{ALGO, BACKENDS, CONFIG, PLUGIN_PATH, WAIT_TIMEOUT_MS};
use commhal_hal::settings::launch::{LAUNCH_PREFIX, RANK, UNIQUE_ID, WORLD_SIZE};

fn commhal() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_commhal"));
    for v in [
        BACKENDS.env,
        CONFIG.env,
        PLUGIN_PATH.env,
        ALGO.env,
        WAIT_TIMEOUT_MS.env,
        UNIQUE_ID.env,
        RANK.env,
        WORLD_SIZE.env,
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

const BENCH: [&str; 10] = [
    "bench",
    "allreduce",
    "-b",
    "1K",
    "-e",
    "16K",
    "-f",
    "4",
    "-n",
    "2",
];

/// `commhal launch -n 2 -- commhal bench ... extra`.
fn launched(extra: &[&str]) -> Output {
    let exe = env!("CARGO_BIN_EXE_commhal");
    commhal()
        .args(["launch", "-n", "2", "--", exe])
        .args(BENCH)
        .args(["-w", "1"])
        .args(extra)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn text(o: &Output) -> String {
    format!("{}{}", stdout(o), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn launched_bench_prints_nccl_tests_header_rows_and_footer() {
    let o = launched(&[]);
    let out = stdout(&o);
    assert!(o.status.success(), "{}", text(&o));
    // rank 0 prints the table; every line of it comes through launch's prefix
    let lines: Vec<&str> = out
        .lines()
        .map(|l| l.strip_prefix("[rank 0] ").unwrap_or_else(|| panic!("{l}")))
        .collect();
    assert!(
        lines.contains(
            &"# nThread 1 nGpus 1 minBytes 1024 maxBytes 16384 step: 4(factor) warmup iters: 1 iters: 2 agg iters: 1 validation: 1 graph: 0"
        ),
        "{out}"
    );
    let using = lines.iter().position(|l| *l == "# Using devices").unwrap();
    for (k, rank) in ["#  Rank  0 Group  0 Pid", "#  Rank  1 Group  0 Pid"]
        .iter()
        .enumerate()
    {
        assert!(lines[using + 1 + k].starts_with(rank), "{out}");
    }
    assert!(lines.iter().any(|l| l.starts_with(
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    )));
    let rows: Vec<Vec<&str>> = lines
        .iter()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows.iter().map(|r| r[0]).collect::<Vec<_>>(),
        ["1024", "4096", "16384"],
        "{out}"
    );
    for r in &rows {
        assert_eq!(&r[2..5], &["float", "sum", "-1"], "{out}");
        assert_eq!((r[8], r[12]), ("0", "0"), "#wrong: {out}");
    }
    // the footer: nothing wrong, and the mean busbw of the 6 cells
    let busbw: Vec<f64> = rows
        .iter()
        .flat_map(|r| [r[7], r[11]])
        .map(|v| v.parse::<f64>().unwrap())
        .collect();
    let avg = busbw.iter().sum::<f64>() / busbw.len() as f64;
    let n = lines.len();
    assert_eq!(lines[n - 3], "# Out of bounds values : 0 OK", "{out}");
    let printed: f64 = lines[n - 2]
        .strip_prefix("# Avg bus bandwidth    : ")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // rows are rounded to 2 decimals
    assert!((printed - avg).abs() < 0.01, "{printed} vs {avg}: {out}");
    assert_eq!(lines[n - 1], "#");
}

#[test]
fn json_under_launch_goes_to_a_file_not_a_prefixed_stdout() {
    let o = launched(&["--json"]);
    assert_eq!(o.status.code(), Some(2), "an error: {}", text(&o));
    let t = text(&o);
    assert!(t.contains("-J FILE") && t.contains("--no-prefix"), "{t}");
    // -J: JSON and CSV files from rank 0, as the table still goes to stdout
    let dir = std::env::temp_dir().join(format!("commhal-bench-J-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("out.json");
    let o = launched(&["-J", json.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["dtype"], "float");
    assert!(stdout(&o).contains("[rank 0] # Avg bus bandwidth"));
    let csv = dir.join("out.csv");
    let o = launched(&["-J", csv.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let text_csv = std::fs::read_to_string(&csv).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(text_csv.starts_with("size,count,type,redop,root,"));
    assert_eq!(text_csv.lines().count(), 4, "{text_csv}");
    // launch --no-prefix: JSON on stdout, as --ranks does
    let exe = env!("CARGO_BIN_EXE_commhal");
    let o = commhal()
        .args(["launch", "-n", "2", "--no-prefix", "--", exe])
        .args(BENCH)
        .arg("--json")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(rows.len(), 3);
}

#[test]
fn nccl_tests_flags_run_or_say_what_to_do() {
    // -a 0..3, -z, -C, -T run; -N 2 prints every cycle
    let o = commhal()
        .args(BENCH)
        .args([
            "--ranks", "2", "-a", "3", "-z", "1", "-C", "1", "-T", "20", "-N", "2",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = stdout(&o);
    let sizes: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(sizes, ["1024", "4096", "16384", "1024", "4096", "16384"]);
    assert!(out.contains("max over ranks of the medians"), "{out}");
    for (flags, want) in [
        (
            &["-g", "2"][..],
            "start more ranks with `commhal launch -n N`",
        ),
        (&["-t", "2"][..], "one thread per process"),
        (&["-N", "0"][..], "number of cycles"),
        (&["-G", "2"][..], "add --backend cuda-nvlink"),
    ] {
        let o = commhal().args(BENCH).args(flags).output().unwrap();
        assert!(!o.status.success(), "{flags:?}");
        assert!(
            text(&o).contains(want),
            "{flags:?}: {want:?} not in {}",
            text(&o)
        );
    }
}
