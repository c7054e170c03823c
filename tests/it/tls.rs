//! Tests of the `tls` module against real sockets, real curl and a real ACME CA (Pebble).

mod acme;
pub(crate) mod files;
mod internal;
pub(crate) mod pebble;
pub(crate) mod support;
