//! Slipway: a self-hosted deployment daemon.
//!
//! Reading order: [`config`] → [`app`] (wiring, shutdown) → [`server`] (listeners) →
//! [`router`] (host dispatch) → [`api`] (the REST API) → [`store`] (redb) → [`pipeline`]
//! (provisioning runs) → [`sandbox`] (running untrusted commands) → [`supervisor`] (live apps).

pub mod config;
pub mod http_util;
pub mod router;
pub mod sandbox;
pub mod static_files;
pub mod tls;
