//! `commhal bench --backend cuda-nvlink` and `commhal tune` through the binary, on any
//! machine: argument mistakes are reported before any GPU work, and without a GPU
//! both commands stop with the driver probe's reason (exit 2, no panic). The GPU runs
//! themselves need NVIDIA GPUs (scripts/gpu-bench.sh, GPU_BENCH_SET=cli / tune).

use std::process::{Command, Output};

use commhal_hal::settings::host::{BACKENDS, CONFIG, PLUGIN_PATH};
use commhal_hal::settings::launch::{RANK, UNIQUE_ID, WORLD_SIZE};

fn commhal(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_commhal"))
        .args(args)
        .env_remove(BACKENDS.env)
        .env_remove(CONFIG.env)
        .env_remove(PLUGIN_PATH.env)
        .env_remove(RANK.env)
        .env_remove(WORLD_SIZE.env)
        .env_remove(UNIQUE_ID.env)
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .output()
        .expect("run commhal")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// A machine with an NVIDIA driver node: the no-GPU expectations do not hold there.
fn has_gpu() -> bool {
    std::path::Path::new("/dev/nvidiactl").exists()
}

#[test]
fn without_a_gpu_bench_and_tune_say_why_and_fail() {
    if has_gpu() {
        eprintln!("skipped: this machine has an NVIDIA driver");
        return;
    }
    let plot = std::env::temp_dir().join(format!("commhal-nogpu-{}.svg", std::process::id()));
    let plot = plot.to_string_lossy().to_string();
    for args in [
        &[
            "bench",
            "allreduce",
            "--backend",
            "cuda-nvlink",
            "--compare",
            "nccl",
            "-G",
            "--plot",
            plot.as_str(),
        ][..],
        &[
            "bench",
            "allgather",
            "--backend",
            "cuda-nvlink",
            "--ranks",
            "2",
        ][..],
        &[
            "tune",
            "--backend",
            "cuda-nvlink",
            "--ranks",
            "2",
            "--out",
            "/tmp/never.toml",
        ][..],
    ] {
        let o = commhal(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("CUDA is not usable on this machine") && err.contains("nvidia-smi"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(o.stdout.is_empty(), "{args:?}: nothing on stdout");
    }
    assert!(
        !std::path::Path::new(&plot).exists(),
        "no plot without a run"
    );
    assert!(!std::path::Path::new("/tmp/never.toml").exists());
}

#[test]
fn gpu_argument_mistakes_come_first() {
    for (args, want) in [
        (
            &[
                "bench",
                "allreduce",
                "--backend",
                "cuda-nvlink",
                "-d",
                "int4",
            ][..],
            "-d int4",
        ),
        (
            &["bench", "allreduce", "--backend", "cuda-nvlink", "-g", "2"][..],
            "one GPU per process here; start more ranks with `commhal launch -n N`",
        ),
        (
            &["bench", "allreduce", "--backend", "cuda-nvlink", "-z", "1"][..],
            "--batch 1",
        ),
        (
            &[
                "bench",
                "allreduce",
                "--backend",
                "cuda-nvlink",
                "-o",
                "premulsum",
            ][..],
            "-o premulsum",
        ),
        (
            &["bench", "allreduce", "--backend", "hip-xgmi"][..],
            "runs on cuda-nvlink",
        ),
        (
            &["bench", "allreduce", "--backend", "cuda-dma", "-d", "int4"][..],
            "bench --backend cuda-dma: -d int4",
        ),
        (
            &["tune", "--out", "x.toml", "--backend", "cuda-dma"][..],
            "only cuda-nvlink",
        ),
        (
            &["bench", "allreduce", "--compare", "nccl", "-G"][..],
            "--compare, -G: for the GPU collectives only",
        ),
        (
            &["bench", "allreduce", "--compare-lib", "/x.so"][..],
            "--compare-lib: for the GPU collectives only",
        ),
        (
            &[
                "bench",
                "allreduce",
                "--backend",
                "cuda-nvlink",
                "--compare",
                "mscclpp",
                "--compare-lib",
                "/x.so",
            ][..],
            "cannot be used with",
        ),
        (
            &[
                "--backends",
                "host-emu",
                "bench",
                "allreduce",
                "--backend",
                "cuda-nvlink",
            ][..],
            "drop --backends",
        ),
        (
            &["tune", "--out", "x.toml", "--collectives", "alltoall"][..],
            "no kernel choice",
        ),
        (
            &["tune", "--out", "x.toml", "--backend", "host-emu"][..],
            "only cuda-nvlink",
        ),
    ] {
        let o = commhal(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {want:?} not in {err}");
    }
    let o = commhal(&["tune", "--backend", "cuda-nvlink"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--out"), "{}", stderr(&o));
}

#[test]
fn help_lists_the_gpu_flags() {
    let o = commhal(&["bench", "--help"]);
    let text = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--backend",
        "--compare",
        "mscclpp",
        "COMMHAL_MSCCLPP_LIB",
        "--compare-lib",
        "--graph",
        "--plot",
        "--ll-max",
    ] {
        assert!(text.contains(flag), "{flag} missing in:\n{text}");
    }
    let o = commhal(&["tune", "--help"]);
    let text = String::from_utf8_lossy(&o.stdout);
    for flag in ["--out", "--ranks", "--collectives", "--maxbytes"] {
        assert!(text.contains(flag), "{flag} missing in:\n{text}");
    }
}

/// `--backend host-emu` is the host benchmark, as `--backends host-emu` is.
#[test]
fn a_host_backend_name_runs_the_host_benchmark() {
    let o = commhal(&[
        "bench",
        "allreduce",
        "--backend",
        "host-emu",
        "-b",
        "1K",
        "-e",
        "4K",
        "-f",
        "4",
        "-n",
        "2",
        "-w",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON rows");
    let rows = rows.as_array().expect("array");
    assert_eq!(rows.len(), 2, "1K and 4K");
    for r in rows {
        assert_eq!(r["oop_wrong"], 0, "{r}");
        assert_eq!(
            r["dtype"], "float",
            "host default type, nccl-tests' name: {r}"
        );
    }
}
