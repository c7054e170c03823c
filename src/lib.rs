//! Slipway: a self-hosted deployment daemon.
//!
//! Reading order: [`config`] → [`app`] (wiring, shutdown) → [`server`] (listeners) →
//! [`router`] (host dispatch) → [`api`] (the REST API) → [`store`] (redb) → [`pipeline`]
//! (provisioning runs) → [`sandbox`] (running untrusted commands) → [`supervisor`] (live apps).

pub mod admin;
pub mod api;
pub mod app;
pub mod auth;
pub mod cli;
pub mod config;
pub mod dashboard;
pub mod dispatch;
pub mod http_util;
pub mod ids;
pub mod notify;
pub mod ratelimit;
pub mod router;
pub mod sandbox;
pub mod secrets;
pub mod server;
pub mod static_files;
pub mod store;
pub mod logs;
pub mod pipeline;
pub mod supervisor;
pub mod tls;
