//! builders
