//! Variables the test suite sets for itself and for the child processes it starts. They
//! are not settings a user should touch; they are declared so that every `COMMHAL_*`
//! name the code reads is in one table.

use super::{FileKey, Kind, SetBy, Setting};

/// `COMMHAL_RERENDER`: tests that compare a committed file with its rendering write the
/// rendering over it instead of failing.
pub static RERENDER: Setting = Setting {
    env: "COMMHAL_RERENDER",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::Tests,
    read_by: "hal, cuda-coll (tests)",
    doc: "1: tests that compare a committed file (docs/tuning.md's table, the GPU tuning file) with its rendering overwrite it instead of failing; then check git diff",
};

/// `COMMHAL_REQUIRE_NVRTC`: tests that need NVRTC fail without it.
pub static REQUIRE_NVRTC: Setting = Setting {
    env: "COMMHAL_REQUIRE_NVRTC",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::Tests,
    read_by: "cuda-rt, cuda-coll, conformance (tests)",
    doc: "1: a test that needs NVRTC fails when it is missing instead of printing SKIPPED (scripts/test.sh sets it)",
};

/// `COMMHAL_FUZZ_WRITE_SEEDS`: the fuzz replay tests rewrite the seed files.
pub static FUZZ_WRITE_SEEDS: Setting = Setting {
    env: "COMMHAL_FUZZ_WRITE_SEEDS",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::Tests,
    read_by: "hal (fuzz replay tests)",
    doc: "1: the fuzz corpus replay tests rewrite the committed seed files from the real encoders before replaying them; then check git diff",
};

/// `COMMHAL_EXAMPLE_LOOPBACK_DISABLE`: the example plugin says it is unavailable.
pub static EXAMPLE_LOOPBACK_DISABLE: Setting = Setting {
    env: "COMMHAL_EXAMPLE_LOOPBACK_DISABLE",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::Tests,
    read_by: "example-plugin",
    doc: "1: the example plugin's backend (example-loopback) probes as unavailable, for the plugin walkthrough test",
};

/// `COMMHAL_CONFORMANCE_CHILD`: marks a conformance rank process.
pub static CONFORMANCE_CHILD: Setting = Setting {
    env: "COMMHAL_CONFORMANCE_CHILD",
    key: FileKey::None,
    kind: Kind::Text("a file path"),
    default: "",
    set_by: SetBy::Tests,
    read_by: "conformance",
    doc: "set by the conformance runner in each rank process it starts: the file the rank writes its JSON results to",
};

/// `COMMHAL_CONFORMANCE_PLAN`: the plan of a conformance rank process.
pub static CONFORMANCE_PLAN: Setting = Setting {
    env: "COMMHAL_CONFORMANCE_PLAN",
    key: FileKey::None,
    kind: Kind::Text("JSON"),
    default: "",
    set_by: SetBy::Tests,
    read_by: "conformance",
    doc: "set by the conformance runner in each rank process it starts: the cases to run, as JSON",
};

/// `COMMHAL_GPU_CONFORMANCE_CHILD`: marks a GPU conformance rank process.
pub static GPU_CONFORMANCE_CHILD: Setting = Setting {
    env: "COMMHAL_GPU_CONFORMANCE_CHILD",
    key: FileKey::None,
    kind: Kind::Text("BACKEND,QUICK,JSON (QUICK and JSON: 0 or 1)"),
    default: "",
    set_by: SetBy::Tests,
    read_by: "conformance",
    doc: "set by the GPU conformance runner in each rank process it starts: the backend and how to report",
};

/// `COMMHAL_TEST_ROLE`: the role of a bootstrap test process.
pub static TEST_ROLE: Setting = Setting {
    env: "COMMHAL_TEST_ROLE",
    key: FileKey::None,
    kind: Kind::Text("rank or impostor"),
    default: "",
    set_by: SetBy::Tests,
    read_by: "hal (tests)",
    doc: "set by hal's TCP bootstrap test in the processes it starts: the role the process plays",
};

/// `COMMHAL_TEST_SCENARIO`: the scenario of a bootstrap test rank.
pub static TEST_SCENARIO: Setting = Setting {
    env: "COMMHAL_TEST_SCENARIO",
    key: FileKey::None,
    kind: Kind::Text("a scenario name of the test"),
    default: "",
    set_by: SetBy::Tests,
    read_by: "hal (tests)",
    doc: "set by hal's TCP bootstrap test in the rank processes it starts: the scenario to run",
};

/// `COMMHAL_HOST_EMU_TEST_CHILD`: marks host-emu's cross-process test child.
pub static HOST_EMU_TEST_CHILD: Setting = Setting {
    env: "COMMHAL_HOST_EMU_TEST_CHILD",
    key: FileKey::None,
    kind: Kind::Text("a file path"),
    default: "",
    set_by: SetBy::Tests,
    read_by: "host-emu (tests)",
    doc: "set by host-emu's cross-process test in the process it starts: the file that process shares",
};

/// `COMMHAL_TCP_TEST_ROLE`: the role of a host-tcp test process.
pub static TCP_TEST_ROLE: Setting = Setting {
    env: "COMMHAL_TCP_TEST_ROLE",
    key: FileKey::None,
    kind: Kind::Text("a role of the test"),
    default: "",
    set_by: SetBy::Tests,
    read_by: "host-emu (tests)",
    doc: "set by host-emu's host-tcp cross-process test in the processes it starts: the role the process plays",
};

/// `COMMHAL_DEAD_PEER_TEST_CHILD`: marks a rank of the algorithms' dead-peer test.
pub static DEAD_PEER_TEST_CHILD: Setting = Setting {
    env: "COMMHAL_DEAD_PEER_TEST_CHILD",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::Tests,
    read_by: "algorithms (tests)",
    doc: "set by the algorithms' dead-peer test in the rank processes it starts",
};

/// `COMMHAL_EXEC_TEST_CHILD`: marks a rank of the algorithms' multi-process test.
pub static EXEC_TEST_CHILD: Setting = Setting {
    env: "COMMHAL_EXEC_TEST_CHILD",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::Tests,
    read_by: "algorithms (tests)",
    doc: "set by the algorithms' multi-process executor test in the rank processes it starts",
};

/// `COMMHAL_TEST_IBVERBS_SUITE`: runs the ib-verbs port cases.
pub static TEST_IBVERBS_SUITE: Setting = Setting {
    env: "COMMHAL_TEST_IBVERBS_SUITE",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::Tests,
    read_by: "conformance (tests)",
    doc: "set by the ib-verbs conformance test in the copy of itself that runs the port cases over the stub provider",
};

/// `COMMHAL_TEST_IBVERBS_COLLECTIVES`: runs the ib-verbs collective cases.
pub static TEST_IBVERBS_COLLECTIVES: Setting = Setting {
    env: "COMMHAL_TEST_IBVERBS_COLLECTIVES",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::Tests,
    read_by: "conformance (tests)",
    doc: "set by the ib-verbs conformance test in the copy of itself that runs the collective cases over the stub provider",
};

/// `COMMHAL_WALKTHROUGH_CHILD`: the scenario of a plugin walkthrough process.
pub static WALKTHROUGH_CHILD: Setting = Setting {
    env: "COMMHAL_WALKTHROUGH_CHILD",
    key: FileKey::None,
    kind: Kind::Text("a scenario name of the test"),
    default: "",
    set_by: SetBy::Tests,
    read_by: "example-plugin (tests)",
    doc: "set by the plugin walkthrough test in the copies of itself it starts: the scenario to run",
};

/// `COMMHAL_REQUIRE_GPU`: GPU tests fail instead of skipping.
pub static REQUIRE_GPU: Setting = Setting {
    env: "COMMHAL_REQUIRE_GPU",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::Tests,
    read_by: "cuda-rt, cuda-dma, nccl, gpu-bench (tests)",
    doc: "1: a GPU test without a GPU (or NVRTC) fails instead of printing SKIPPED (scripts/gpu-check.sh on GPU hosts)",
};

/// `COMMHAL_TEST_STOP_CHILD`: marks the child process of a gpu-bench test.
pub static TEST_STOP_CHILD: Setting = Setting {
    env: "COMMHAL_TEST_STOP_CHILD",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::Tests,
    read_by: "gpu-bench (tests)",
    doc: "1: the process is the child a gpu-bench test stops and expects its timer to continue",
};

/// This component's settings, in the order the docs list them.
pub const ALL: &[&Setting] = &[
    &REQUIRE_GPU,
    &TEST_STOP_CHILD,
    &RERENDER,
    &REQUIRE_NVRTC,
    &FUZZ_WRITE_SEEDS,
    &EXAMPLE_LOOPBACK_DISABLE,
    &CONFORMANCE_CHILD,
    &CONFORMANCE_PLAN,
    &GPU_CONFORMANCE_CHILD,
    &TEST_ROLE,
    &TEST_SCENARIO,
    &HOST_EMU_TEST_CHILD,
    &TCP_TEST_ROLE,
    &DEAD_PEER_TEST_CHILD,
    &EXEC_TEST_CHILD,
    &TEST_IBVERBS_SUITE,
    &TEST_IBVERBS_COLLECTIVES,
    &WALKTHROUGH_CHILD,
];
