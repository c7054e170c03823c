//! The one integration-test crate: every test drives the real `slipway` binary over sockets.

mod api;
mod logs;
mod pipeline;
mod support;
mod vite;
