//! The control host (`slipway.<domain>` and the optional `api_listen`): `/api/…` goes to the
//! REST API, `/healthz` answers at once, everything else is the dashboard. `app.rs` builds one
//! `ControlHost` and hands it to `dispatch.rs` as a `dispatch::ControlHandler`, so the app-host
//! request path never sees the API's state (store, tokens, pipeline).

use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use http::{Request, Response};
use hyper::body::Incoming;

use crate::api::Context;
use crate::dispatch::ControlHandler;
use crate::http_util::Body;

/// `/healthz`'s answer.
#[derive(serde::Serialize)]
struct Health {
    status: &'static str,
}

pub struct ControlHost {
    api: Arc<Context>,
    /// The daemon's main runtime: requests arrive on the router threads (`server::threads`),
    /// but the API's work (the store, builds, the supervisor) belongs here.
    runtime: tokio::runtime::Handle,
}

impl ControlHost {
    /// A control host whose requests run on the current runtime.
    pub fn new(api: Arc<Context>) -> ControlHost {
        ControlHost {
            api,
            runtime: tokio::runtime::Handle::current(),
        }
    }

    async fn route(
        api: Arc<Context>,
        mut request: Request<Incoming>,
        client: SocketAddr,
    ) -> Response<Body> {
        // Nothing here uses cookies (the API takes tokens, the dashboard keeps its token in
        // the tab): cookies that apps set for the parent domain are ignored.
        request.headers_mut().remove(http::header::COOKIE);
        let path = request.uri().path();
        if path == "/api" || path.starts_with("/api/") {
            return crate::api::handle(api, request, client).await;
        }
        if path == "/healthz" {
            return crate::api::json_response(http::StatusCode::OK, &Health { status: "ok" });
        }
        crate::dashboard::handle(request).await
    }
}

impl ControlHandler for ControlHost {
    fn handle(
        &self,
        request: Request<Incoming>,
        client: SocketAddr,
    ) -> BoxFuture<'_, Response<Body>> {
        let handled = self
            .runtime
            .spawn(ControlHost::route(self.api.clone(), request, client));
        Box::pin(async move {
            handled.await.unwrap_or_else(|error| {
                // A handler that panicked: the runtime survives it, the client gets a 500.
                tracing::error!(%error, "a control request's task failed");
                crate::api::ApiError::internal("the request's handler failed").into_response()
            })
        })
    }
}
