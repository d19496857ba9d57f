//! Algorithm selection.
