//! `commhal conformance --backend cuda-nvlink --ranks N`: start N rank processes (one
//! per GPU) of the current binary running [`super::run`], the way `commhal launch`
//! would, and print rank 0's report. The ranks are this binary re-executed with
//! `COMMHAL_GPU_CONFORMANCE_CHILD` set; [`child_main_if_requested`] dispatches them.

use std::process::{Command, Stdio};

use commhal_hal::bootstrap::UniqueId;
use commhal_hal::settings::launch::{LOCAL_RANK, RANK, UNIQUE_ID, WORLD_SIZE};
use commhal_hal::settings::tests::GPU_CONFORMANCE_CHILD;

/// Run the GPU suite for `backend` (`cuda-nvlink`, `cuda-dma` or `all`) over `ranks`
/// processes of this binary. Returns the worst exit code of the ranks.
pub fn run_processes(backend: &str, ranks: u32, quick: bool, json: bool) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gpu conformance: cannot find this program to start its ranks: {e}");
            return 2;
        }
    };
    let id = match UniqueId::new_local() {
        Ok(id) => id.to_string(),
        Err(e) => {
            eprintln!("gpu conformance: cannot create a bootstrap id: {e}");
            return 2;
        }
    };
    let marker = format!("{backend},{},{}", u8::from(quick), u8::from(json));
    let mut children = Vec::new();
    for rank in 0..ranks {
        let mut cmd = Command::new(&exe);
        cmd.env(GPU_CONFORMANCE_CHILD.env, &marker)
            .env(RANK.env, rank.to_string())
            .env(WORLD_SIZE.env, ranks.to_string())
            .env(LOCAL_RANK.env, rank.to_string())
            .env(UNIQUE_ID.env, &id)
            .stdin(Stdio::null());
        if rank != 0 {
            // Every rank reaches the same verdict; rank 0 prints the report.
            cmd.stdout(Stdio::null());
        }
        match cmd.spawn() {
            Ok(c) => children.push((rank, c)),
            Err(e) => {
                eprintln!("gpu conformance: cannot start rank {rank}: {e}");
                for (_, c) in &mut children {
                    let _ = c.kill();
                }
                return 2;
            }
        }
    }
    let mut code = 0;
    for (rank, mut c) in children {
        match c.wait() {
            Ok(s) if s.success() => {}
            Ok(s) => {
                eprintln!("gpu conformance: rank {rank} exited with {s}");
                code = code.max(s.code().unwrap_or(1));
            }
            Err(e) => {
                eprintln!("gpu conformance: waiting for rank {rank}: {e}");
                code = code.max(1);
            }
        }
    }
    code
}

/// In a rank started by [`run_processes`]: run it and return its exit code.
pub fn child_main_if_requested() -> Option<i32> {
    let marker = GPU_CONFORMANCE_CHILD.text()?;
    let mut parts = marker.split(',');
    let backend = parts.next().unwrap_or_default().to_string();
    let quick = parts.next() == Some("1");
    let json = parts.next() == Some("1");
    Some(super::run(&backend, quick, json, None))
}
