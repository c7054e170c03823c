//! HTTPS through the real daemon: `slipway serve` in each TLS mode (`acme` against Pebble,
//! `internal`, `files`), projects provisioned by the real pipeline, and clients (curl, a rustls
//! probe) on the daemon's real listeners. The manager-level tests are in `tls`.

mod acme;
mod cookies;
mod domains;
mod files;
mod internal;
mod order_budget;
mod relay;
