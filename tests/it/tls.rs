//! Tests of the `tls` module against real sockets, real curl and a real ACME CA (Pebble).

mod acme;
mod files;
mod internal;
mod pebble;
mod support;
