//! The crate's error type. Every message says what was wrong and what to do.

/// Where in a plan a problem is: rank, block and op index (the index in the block's op
/// list; inside a `Loop`, the loop's index plus the body index and iteration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Rank.
    pub rank: u32,
    /// Block (thread block) of that rank.
    pub block: usize,
    /// Op index in the block (of the `Loop` op for ops inside a loop).
    pub op: usize,
    /// For ops inside a loop: (body index, iteration).
    pub in_loop: Option<(usize, u32)>,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rank {}, block {}, op {}",
            self.rank, self.block, self.op
        )?;
        if let Some((i, it)) = self.in_loop {
            write!(f, " (loop body op {i}, iteration {it})")?;
        }
        Ok(())
    }
}

/// Errors of plan building, validation, simulation, selection and reductions.
#[derive(Debug, thiserror::Error)]
pub enum AlgoError {
    /// A bad argument (sizes, names, options).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A plan file written for another schema.
    #[error(
        "plan schema version {found} is not supported (this build reads version {supported}); regenerate the plan with this build"
    )]
    Schema {
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// The plan is wrong at a known place.
    #[error("invalid plan `{plan}` at {at}: {msg}")]
    PlanAt {
        /// Plan name.
        plan: String,
        /// Where.
        at: Location,
        /// What is wrong and what to do.
        msg: String,
    },
    /// The plan as a whole is wrong (collective, rank count, buffer layout, deadlock).
    #[error("invalid plan `{plan}`: {msg}")]
    Plan {
        /// Plan name.
        plan: String,
        /// What is wrong.
        msg: String,
    },
    /// The simulator found the plan computes something else or cannot run.
    #[error("simulation of `{plan}`: {msg}")]
    Sim {
        /// Plan name.
        plan: String,
        /// What happened.
        msg: String,
    },
    /// Tuning table or override string problems.
    #[error("algorithm selection: {0}")]
    Selector(String),
    /// JSON (de)serialisation.
    #[error("plan JSON: {0}")]
    Json(#[from] serde_json::Error),
}
