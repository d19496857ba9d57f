//! Ranks as processes: the test re-executes its own binary once per rank with
//! `COMMHAL_RANK`/`COMMHAL_WORLD_SIZE`/`COMMHAL_UNIQUE_ID` set; each child joins through
//! `TcpBootstrap` (descriptors travel over the fd-passing socket) and checks a few
//! algorithms through the real executor.

mod common;

use std::sync::Arc;
use std::time::Duration;

use commhal_algorithms::comm::{CommOptions, Communicator};
use commhal_algorithms::plan::Collective;
use commhal_algorithms::{DataType, RedOp};
use commhal_hal::bootstrap::{Bootstrap, TcpBootstrap, UniqueId};
use commhal_hal::settings::host::WAIT_TIMEOUT_MS;
use commhal_hal::settings::tests::EXEC_TEST_CHILD;
use common::{Case, check_case};

/// The body each child runs (a no-op when run directly by the test harness).
#[test]
fn child_rank() {
    if !EXEC_TEST_CHILD.is_set() {
        return;
    }
    let boot: Arc<dyn Bootstrap> = Arc::new(TcpBootstrap::from_env().expect("bootstrap"));
    for algo in [
        "allreduce:1pa",
        "allreduce:2pa-hb",
        "allreduce:ring",
        "allgather:ring",
    ] {
        let mut comm = Communicator::new(
            boot.clone(),
            CommOptions {
                backends: Some(vec!["host-emu".into()]),
                algo: Some(algo.into()),
                ..Default::default()
            },
        )
        .expect("communicator");
        let coll = Collective::from_name(algo.split(':').next().unwrap()).unwrap();
        for (i, count) in [1u64, 1000, 70_001].into_iter().enumerate() {
            for in_place in [false, true] {
                let case = Case {
                    coll,
                    count,
                    dtype: DataType::F32,
                    op: RedOp::Sum,
                    root: 0,
                    in_place,
                    registered: i == 1,
                    seed: count,
                };
                check_case(&mut comm, &case).unwrap_or_else(|e| panic!("{algo} {case:?}: {e}"));
            }
        }
    }
}

fn run_ranks(n: u32) {
    let id = UniqueId::new_local().unwrap().to_string();
    let children: Vec<_> = (0..n)
        .map(|r| {
            common::rank_command("child_rank", EXEC_TEST_CHILD.env, r, n, &id, 20_000)
                .env(WAIT_TIMEOUT_MS.env, "20000")
                .spawn()
                .unwrap()
        })
        .collect();
    for (r, mut c) in children.into_iter().enumerate() {
        let st = c.wait().unwrap();
        assert!(st.success(), "rank {r} of {n} failed: {st}");
    }
    let _ = Duration::ZERO;
}

#[test]
fn two_processes() {
    run_ranks(2);
}

#[test]
fn four_processes() {
    run_ranks(4);
}
