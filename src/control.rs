//! The control host (`slipway.<domain>` and the optional `api_listen`): `/api/…` goes to the
//! REST API, `/healthz` answers at once, everything else is the dashboard. `app.rs` builds one
//! `ControlHost` and hands it to `dispatch.rs` as a `dispatch::ControlHandler`, so the app-host
//! request path never sees the API's state (store, tokens, pipeline).

use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;

use crate::api::Context;
use crate::dispatch::ControlHandler;
use crate::http_util::{full, Body};

pub struct ControlHost {
    api: Arc<Context>,
}

impl ControlHost {
    pub fn new(api: Arc<Context>) -> ControlHost {
        ControlHost { api }
    }

    async fn route(&self, mut request: Request<Incoming>, client: SocketAddr) -> Response<Body> {
        // Nothing here uses cookies (the API takes tokens, the dashboard keeps its token in
        // the tab): cookies that apps set for the parent domain are ignored.
        request.headers_mut().remove(http::header::COOKIE);
        let path = request.uri().path();
        if path == "/api" || path.starts_with("/api/") {
            return crate::api::handle(self.api.clone(), request, client).await;
        }
        if path == "/healthz" {
            let mut response = Response::new(full(r#"{"status":"ok"}"#));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return response;
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
        Box::pin(self.route(request, client))
    }
}
