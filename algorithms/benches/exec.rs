//! Placeholder bench target: the real benchmark is `commhal bench` (cli/src/bench.rs),
//! which times collectives across processes the way nccl-tests does.
fn main() {
    println!("use `commhal bench allreduce ...` (see README)");
}
