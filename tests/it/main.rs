//! The integration-test crate: one module per area.

mod tls;
