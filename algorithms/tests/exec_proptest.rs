//! Random sizes, rank counts and algorithms: builder → validator → real executor,
//! compared with `sim::reference`.

mod common;

use commhal_algorithms::builders::Algorithm;
use commhal_algorithms::{DataType, RedOp};
use common::{Case, check_case, with_ranks};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn executor_matches_reference(
        algo in 0usize..Algorithm::ALL.len() - 1,
        n in 1u32..=6,
        count in 0u64..3000,
        in_place in any::<bool>(),
        registered in any::<bool>(),
        op in 0usize..RedOp::ALL.len(),
        seed in any::<u64>(),
    ) {
        let algo = Algorithm::ALL[algo];
        prop_assume!(!matches!(algo, Algorithm::SendRecv | Algorithm::AllReduce2phHb | Algorithm::AllReduce2phLl));
        let spec = format!("{}:{}", algo.collective().name(), algo.short_name());
        let coll = algo.collective();
        let op = RedOp::ALL[op];
        with_ranks(n, n, Some(&spec), |comm| {
            let case = Case { coll, count, dtype: DataType::F32, op, root: seed as u32 % n, in_place, registered, seed };
            check_case(comm, &case).unwrap_or_else(|e| panic!("{spec} n={n} {case:?}: {e}"));
        });
    }
}
