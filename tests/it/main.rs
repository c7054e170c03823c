//! Slipway's integration tests: one crate, a module per area.

mod sandbox;
