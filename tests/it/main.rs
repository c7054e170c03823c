//! The one integration-test crate: every test drives the real `slipway` binary (or the
//! library's runners and TLS manager) over real sockets and processes. A module per area.

mod api;
mod architecture;
mod build_cache;
mod client;
mod connections;
mod dashboard;
mod dashboard_env;
mod dashboard_formation;
mod dashboard_forms;
mod dev_mode;
mod domain_proofs;
mod domains;
mod flood;
mod forwarding;
mod frameworks;
mod git_deploys;
mod git_secrets;
mod grants;
mod logs;
mod notifications;
mod observability;
mod operator;
mod pipeline;
mod reliability;
mod restarts;
mod router_threads;
mod sandbox;
mod sandboxed;
mod scopes;
mod server_sources;
mod slow_uploads;
mod support;
mod tls;
mod tls_daemon;
mod zero_config;
