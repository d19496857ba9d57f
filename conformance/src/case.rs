//! What a conformance case is: an id, the guarantees it needs, the property it asserts
//! in one line, and a body that every rank runs (SPMD) with a [`Ctx`].
//!
//! A body returns `Ok(note)` (passed on this rank, with an optional note such as a
//! latency), or a [`Failure`]: `Fail` (the property was violated or an operation
//! failed) or `NotSupported` (decided at run time, e.g. no host access to the memory).
//! Guarantees the backend does not claim are decided before the body runs (see
//! [`Case::needs`]).

use std::sync::Arc;

use commhal_hal::HalError;
use serde::{Deserialize, Serialize};

use crate::world::Ctx;

/// Which channel kind a case exercises (`all`: backend-wide cases).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChannelKind {
    /// `MemoryChannel` over the backend's `MemoryMapped` transport.
    Memory,
    /// `PortChannel` + proxy over the backend's `PortMapped` transport.
    Port,
    /// `SwitchChannel` over the backend's `SwitchMapped` transport.
    Switch,
    /// Backend-wide checks.
    All,
}

impl ChannelKind {
    /// The id segment.
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Memory => "memory",
            ChannelKind::Port => "port",
            ChannelKind::Switch => "switch",
            ChannelKind::All => "all",
        }
    }
}

/// Why a rank did not pass a case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The property does not hold, or an operation failed unexpectedly.
    Fail(String),
    /// The case cannot run here (never counted as passed).
    NotSupported(String),
}

impl From<HalError> for Failure {
    fn from(e: HalError) -> Self {
        Failure::Fail(e.to_string())
    }
}

/// What a case body returns on one rank: `Ok(note)` when the property held.
pub type CaseResult = Result<Option<String>, Failure>;

/// A case body, run by every rank.
pub type CaseFn = Arc<dyn Fn(&Ctx) -> CaseResult + Send + Sync>;

/// Fail the case with a formatted message unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::case::Failure::Fail(format!($($arg)+)));
        }
    };
}

/// Fail the case with a formatted message.
#[macro_export]
macro_rules! fail {
    ($($arg:tt)+) => {
        return Err($crate::case::Failure::Fail(format!($($arg)+)))
    };
}

/// One conformance case, already specialised to its parameters.
#[derive(Clone)]
pub struct Case {
    /// Channel kind it runs on.
    pub channel: ChannelKind,
    /// Case name (`message-passing`, ...).
    pub name: &'static str,
    /// Parameters as `k=v` items joined by `,` (memory kind first); may be empty.
    pub params: String,
    /// `docs/conformance.md` number.
    pub number: u32,
    /// Guarantee claims (names from `Guarantees::claims()`) the case needs: any that
    /// the transport does not claim makes it not-supported.
    pub needs: Vec<&'static str>,
    /// Claims the case exercises (for the honest-capabilities check); includes `needs`.
    pub covers: Vec<&'static str>,
    /// Fewest ranks it needs (fewer: not-supported with that reason).
    pub min_ranks: u32,
    /// The property it asserts, in one line.
    pub property: &'static str,
    /// The body.
    pub run: CaseFn,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("channel", &self.channel)
            .field("name", &self.name)
            .field("params", &self.params)
            .finish()
    }
}

impl Case {
    /// A case with no needs and two ranks minimum.
    pub fn new(
        channel: ChannelKind,
        number: u32,
        name: &'static str,
        property: &'static str,
        run: impl Fn(&Ctx) -> CaseResult + Send + Sync + 'static,
    ) -> Case {
        Case {
            channel,
            name,
            params: String::new(),
            number,
            needs: Vec::new(),
            covers: Vec::new(),
            min_ranks: 2,
            property,
            run: Arc::new(run),
        }
    }

    /// Add a needed claim (also covered).
    pub fn needs(mut self, claim: &'static str) -> Case {
        self.needs.push(claim);
        self.covers.push(claim);
        self
    }

    /// Add a covered claim that is not needed (the case adapts to it).
    pub fn covers(mut self, claim: &'static str) -> Case {
        self.covers.push(claim);
        self
    }

    /// Set the parameters string.
    pub fn params(mut self, params: impl Into<String>) -> Case {
        self.params = params.into();
        self
    }

    /// Set the minimum rank count.
    pub fn min_ranks(mut self, n: u32) -> Case {
        self.min_ranks = n;
        self
    }

    /// `<backend>/<channel>/<case>[/<params>]`.
    pub fn id(&self, backend: &str) -> String {
        let mut id = format!("{backend}/{}/{}", self.channel.as_str(), self.name);
        if !self.params.is_empty() {
            id.push('/');
            id.push_str(&self.params);
        }
        id
    }
}
