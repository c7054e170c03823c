//! Slipway: a self-hosted deployment daemon.
//!
//! Reading order: [`config`] → [`app`] (wiring, shutdown) → [`server`] (listeners) →
//! [`dispatch`] (host dispatch) → [`router`] (the route snapshot) → [`api`] (the REST API) →
//! [`store`] (redb) → [`pipeline`] (provisioning runs) → [`source`] (archives, git) →
//! [`sandbox`] (running untrusted commands) → [`supervisor`] (live apps) → [`logs`] (the log
//! hub) → [`proxy`] and [`static_files`] (serving apps; [`upstreams`]: which instance of an
//! app a request goes to) → [`tls`] → [`domains`] (custom
//! domains) → [`metrics`] (hot-path
//! counters) → [`usage`] (figures gathered for Prometheus and the usage API) →
//! [`notifications`] (outbound webhooks) → [`sleep`] (idle apps put to sleep, woken by their
//! next request) → [`autodeploy`] (webhooks from git providers,
//! deploy hooks, previews). Apart: [`client`], the
//! `slipway deploy`/`logs`/`env`/`projects`/`rollback` side that talks to the API. At the
//! bottom: `sys`, the only module allowed `unsafe` (safe wrappers of system calls).

pub mod addons;
pub mod admin;
pub mod api;
pub mod app;
pub mod auth;
pub mod autodeploy;
pub mod backup;
pub mod budget;
pub mod build_settings;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod config;
pub mod control;
pub mod dashboard;
pub mod detect;
pub mod disk;
pub mod dispatch;
pub mod doctor;
pub mod domains;
pub mod error_code;
pub mod formation;
pub mod fs_at;
pub mod heap;
pub mod http_util;
pub mod ids;
pub mod jobs;
pub mod logs;
pub mod metrics;
pub mod notifications;
pub mod notify;
pub mod operator;
pub mod pages;
pub mod pipeline;
pub mod proxy;
pub mod ratelimit;
pub mod router;
pub mod sandbox;
pub mod secrets;
pub mod server;
pub mod sleep;
pub mod source;
pub mod static_files;
pub mod store;
pub mod supervisor;
#[allow(unsafe_code)] // the one module that may: safe wrappers of system calls
pub(crate) mod sys;
pub mod tls;
pub mod upstreams;
pub mod urls;
pub mod usage;
pub mod whole_number;
