//! The web dashboard on the control host (`/`): Settings → API Tokens → Generate New Token.
//! One static page; it talks to the API with a token the operator pastes in once (kept in the
//! browser's sessionStorage), so the dashboard adds no second way to authenticate.

use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;

use crate::http_util::{full, Body};

const PAGE: &str = include_str!("dashboard.html");

pub async fn handle(request: Request<Incoming>) -> Response<Body> {
    match request.uri().path() {
        "/" | "/settings" | "/settings/tokens" => {
            let mut response = Response::new(full(PAGE));
            let headers = response.headers_mut();
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            headers.insert(
                http::header::CACHE_CONTROL,
                HeaderValue::from_static("no-store"),
            );
            headers.insert(
                "content-security-policy",
                HeaderValue::from_static("default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; frame-ancestors 'none'"),
            );
            headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
            response
        }
        _ => crate::pages::VisitorPage::NoSuchControlPage.response(),
    }
}
