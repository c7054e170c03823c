//! The web dashboard on the control host (`/`): a client of the public API only, built into
//! the binary (no build step, nothing from other hosts). The page keeps the token the user
//! signs in with in the tab's sessionStorage and sends it as a bearer token, so the dashboard
//! adds no second way to authenticate and an app on a sibling subdomain has nothing to ride:
//! no cookie, and no CORS answer lets another origin read the API.
//!
//! Every response carries a strict Content-Security-Policy (scripts and styles from this
//! origin only, no inline script, no framing), `X-Frame-Options: DENY`, `nosniff` and
//! `Referrer-Policy: no-referrer`.

use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;

use crate::http_util::{full, Body};

/// Path → (content type, contents).
const FILES: &[(&str, &str, &str)] = &[
    ("/", "text/html; charset=utf-8", include_str!("index.html")),
    (
        "/assets/app.css",
        "text/css; charset=utf-8",
        include_str!("app.css"),
    ),
    (
        "/assets/app.js",
        "text/javascript; charset=utf-8",
        include_str!("app.js"),
    ),
    (
        "/assets/api.js",
        "text/javascript; charset=utf-8",
        include_str!("api.js"),
    ),
    (
        "/assets/ui.js",
        "text/javascript; charset=utf-8",
        include_str!("ui.js"),
    ),
    (
        "/assets/project.js",
        "text/javascript; charset=utf-8",
        include_str!("project.js"),
    ),
    (
        "/assets/processes.js",
        "text/javascript; charset=utf-8",
        include_str!("processes.js"),
    ),
    (
        "/assets/jobs.js",
        "text/javascript; charset=utf-8",
        include_str!("jobs.js"),
    ),
    (
        "/assets/runs.js",
        "text/javascript; charset=utf-8",
        include_str!("runs.js"),
    ),
    (
        "/assets/addons.js",
        "text/javascript; charset=utf-8",
        include_str!("addons.js"),
    ),
    (
        "/assets/addon.js",
        "text/javascript; charset=utf-8",
        include_str!("addon.js"),
    ),
    (
        "/assets/backups.js",
        "text/javascript; charset=utf-8",
        include_str!("backups.js"),
    ),
    (
        "/assets/charts.js",
        "text/javascript; charset=utf-8",
        include_str!("charts.js"),
    ),
    (
        "/assets/usage.js",
        "text/javascript; charset=utf-8",
        include_str!("usage.js"),
    ),
    (
        "/assets/progress.js",
        "text/javascript; charset=utf-8",
        include_str!("progress.js"),
    ),
    (
        "/assets/notifications.js",
        "text/javascript; charset=utf-8",
        include_str!("notifications.js"),
    ),
];

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

pub async fn handle(request: Request<Incoming>) -> Response<Body> {
    let path = match request.uri().path() {
        // The old page's addresses still lead to the dashboard.
        "/settings" | "/settings/tokens" => "/",
        other => other,
    };
    let Some((_, content_type, contents)) = FILES.iter().find(|(p, _, _)| *p == path) else {
        return crate::pages::VisitorPage::NoSuchControlPage.response();
    };
    let mut response = Response::new(full(*contents));
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    headers.insert("content-security-policy", HeaderValue::from_static(CSP));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    response
}
