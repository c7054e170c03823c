//! Every page an app visitor can get from Slipway itself rather than from the app: one enum,
//! one status for each, one renderer. Used by the router (`dispatch.rs`), the proxy, static
//! serving and the dashboard's unknown paths. A static site's own `404.html` is the site's
//! content and is served by `static_files`, not here.

use http::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER, X_CONTENT_TYPE_OPTIONS};
use http::{HeaderValue, Response, StatusCode};

use crate::error_code::ErrorCode;
use crate::http_util::{full, Body};

/// What went wrong, as a visitor sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisitorPage<'a> {
    /// No project answers at this host.
    UnknownHost,
    /// The project exists but nothing is live yet.
    NotDeployedYet { slug: &'a str },
    /// A static site has nothing at this path (and no `404.html` of its own).
    NotFound,
    /// Plain HTTP asked for an ACME HTTP-01 token this daemon does not hold.
    NoSuchChallenge,
    /// A path of the control host that is not the API, `/healthz` or the dashboard.
    NoSuchControlPage,
    /// Static sites answer GET and HEAD only.
    MethodNotAllowed,
    /// `CONNECT` through the router.
    ConnectNotAllowed,
    /// A path that climbs out of the site, or a request target that cannot be forwarded.
    BadRequest,
    /// The app refused or dropped the connection.
    AppNotAnswering,
    /// The app did not send its response head in time.
    AppTooSlow,
    /// A WebSocket upgrade on a connection served without upgrades.
    UpgradeUnavailable,
    /// The daemon is stopping: no new WebSocket tunnels.
    ShuttingDown,
    /// A connection from the control host's reserve asked for another host.
    Busy,
    /// The app stopped and the supervisor is starting it again.
    AppRestarting,
    /// A sleeping app is starting (issue 35): the page reloads itself every second.
    AppStarting,
}

impl VisitorPage<'_> {
    pub fn status(self) -> StatusCode {
        match self {
            VisitorPage::UnknownHost
            | VisitorPage::NotFound
            | VisitorPage::NoSuchChallenge
            | VisitorPage::NoSuchControlPage => StatusCode::NOT_FOUND,
            VisitorPage::NotDeployedYet { .. }
            | VisitorPage::ShuttingDown
            | VisitorPage::Busy
            | VisitorPage::AppRestarting
            | VisitorPage::AppStarting => StatusCode::SERVICE_UNAVAILABLE,
            VisitorPage::MethodNotAllowed | VisitorPage::ConnectNotAllowed => {
                StatusCode::METHOD_NOT_ALLOWED
            }
            VisitorPage::BadRequest => StatusCode::BAD_REQUEST,
            VisitorPage::AppNotAnswering | VisitorPage::AppTooSlow => StatusCode::BAD_GATEWAY,
            VisitorPage::UpgradeUnavailable => StatusCode::NOT_IMPLEMENTED,
        }
    }

    fn title(self) -> &'static str {
        match self {
            VisitorPage::UnknownHost
            | VisitorPage::NotFound
            | VisitorPage::NoSuchChallenge
            | VisitorPage::NoSuchControlPage => "Not found",
            VisitorPage::NotDeployedYet { .. } => "Not deployed yet",
            VisitorPage::MethodNotAllowed | VisitorPage::ConnectNotAllowed => "Method not allowed",
            VisitorPage::BadRequest => "Bad request",
            VisitorPage::AppNotAnswering | VisitorPage::AppTooSlow => "Bad gateway",
            VisitorPage::UpgradeUnavailable => "Not implemented",
            VisitorPage::ShuttingDown => "Shutting down",
            VisitorPage::Busy => "Busy",
            VisitorPage::AppRestarting => "Restarting",
            VisitorPage::AppStarting => "Starting",
        }
    }

    fn detail(self) -> String {
        match self {
            VisitorPage::UnknownHost => "No application is served at this address.".into(),
            VisitorPage::NotDeployedYet { slug } => {
                format!("The project {slug} has no live deployment yet. Try again in a moment.")
            }
            VisitorPage::NotFound => "There is nothing at this address.".into(),
            VisitorPage::NoSuchChallenge => "No such ACME challenge.".into(),
            VisitorPage::NoSuchControlPage => "There is no such page on the control host.".into(),
            VisitorPage::MethodNotAllowed => "This site answers GET and HEAD only.".into(),
            VisitorPage::ConnectNotAllowed => "CONNECT is not supported.".into(),
            VisitorPage::BadRequest => "The request target is not valid.".into(),
            VisitorPage::AppNotAnswering => {
                "The app is not answering. Please try again shortly.".into()
            }
            VisitorPage::AppTooSlow => {
                "The app did not answer in time. Please try again shortly.".into()
            }
            VisitorPage::UpgradeUnavailable => "WebSocket upgrades are not available here.".into(),
            VisitorPage::ShuttingDown => {
                "The server is restarting. Please reconnect shortly.".into()
            }
            VisitorPage::Busy => {
                "The server is handling too many connections. Please try again shortly.".into()
            }
            VisitorPage::AppRestarting => {
                "The app stopped and is being started again. Please try again shortly.".into()
            }
            VisitorPage::AppStarting => {
                "The app was asleep and is starting. This page reloads by itself.".into()
            }
        }
    }

    /// Seconds a client should wait before retrying, where waiting helps.
    fn retry_after(self) -> Option<u64> {
        match self {
            VisitorPage::NotDeployedYet { .. }
            | VisitorPage::ShuttingDown
            | VisitorPage::Busy
            | VisitorPage::AppRestarting => Some(5),
            VisitorPage::AppStarting => Some(1),
            _ => None,
        }
    }

    /// The `<meta http-equiv="refresh">` of a page that reloads itself.
    fn refresh(self) -> &'static str {
        match self {
            VisitorPage::AppStarting => "<meta http-equiv=\"refresh\" content=\"1\">",
            _ => "",
        }
    }

    /// The methods a 405 names in `Allow`.
    fn allow(self) -> Option<&'static str> {
        match self {
            VisitorPage::MethodNotAllowed => Some("GET, HEAD"),
            _ => None,
        }
    }

    /// The page: a short HTML document (title and detail escaped), `no-store`, `nosniff`,
    /// `Retry-After` and `Allow` where they apply.
    pub fn response(self) -> Response<Body> {
        let status = self.status();
        let code = status.as_u16();
        let title = escape_html(self.title());
        let detail = escape_html(&self.detail());
        let refresh = self.refresh();
        let html = format!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{refresh}\
             <meta name=\"viewport\" content=\"width=device-width\"><title>{code} {title}</title>\
             <style>body{{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:15vh auto;padding:0 1rem;color:#222}}\
             h1{{font-size:1.4rem}}p{{color:#555}}</style></head>\
             <body><h1>{code} &middot; {title}</h1><p>{detail}</p>\
             <p><small>Served by Slipway</small></p></body></html>\n"
        );
        let mut response = Response::new(full(html));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        if let Some(seconds) = self.retry_after() {
            headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(methods) = self.allow() {
            headers.insert(ALLOW, HeaderValue::from_static(methods));
        }
        response
    }
}

/// The answer to a request whose sleeping app did not wake: 503 in the API's error envelope
/// `{"error":{"code":"WAKE_FAILED","message","status":503}}`, the reason as the message.
pub fn wake_failed(reason: &str) -> Response<Body> {
    #[derive(serde::Serialize)]
    struct Envelope<'a> {
        error: EnvelopeBody<'a>,
    }
    #[derive(serde::Serialize)]
    struct EnvelopeBody<'a> {
        code: ErrorCode,
        message: &'a str,
        status: u16,
    }
    let code = ErrorCode::WakeFailed;
    let message = format!("the app was asleep and did not start: {reason}");
    let body = Envelope {
        error: EnvelopeBody {
            code,
            message: &message,
            status: code.status().as_u16(),
        },
    };
    let mut response = Response::new(full(
        serde_json::to_vec(&body).expect("the envelope serializes"),
    ));
    *response.status_mut() = code.status();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Text made safe inside HTML elements and attribute values.
pub fn escape_html(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '&' => escaped.push_str("&amp;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            other => escaped.push(other),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// The whole table: page → status, title and the headers beyond the ones every page has.
    /// A new page must be added here too.
    #[test]
    fn every_page_has_its_status_title_and_headers() {
        type Headers = &'static [(&'static str, &'static str)];
        const RETRY: Headers = &[("retry-after", "5")];
        let table: &[(VisitorPage, u16, &str, Headers)] = &[
            (VisitorPage::UnknownHost, 404, "Not found", &[]),
            (
                VisitorPage::NotDeployedYet { slug: "web" },
                503,
                "Not deployed yet",
                RETRY,
            ),
            (VisitorPage::NotFound, 404, "Not found", &[]),
            (VisitorPage::NoSuchChallenge, 404, "Not found", &[]),
            (VisitorPage::NoSuchControlPage, 404, "Not found", &[]),
            (
                VisitorPage::MethodNotAllowed,
                405,
                "Method not allowed",
                &[("allow", "GET, HEAD")],
            ),
            (
                VisitorPage::ConnectNotAllowed,
                405,
                "Method not allowed",
                &[],
            ),
            (VisitorPage::BadRequest, 400, "Bad request", &[]),
            (VisitorPage::AppNotAnswering, 502, "Bad gateway", &[]),
            (VisitorPage::AppTooSlow, 502, "Bad gateway", &[]),
            (VisitorPage::UpgradeUnavailable, 501, "Not implemented", &[]),
            (VisitorPage::ShuttingDown, 503, "Shutting down", RETRY),
            (VisitorPage::Busy, 503, "Busy", RETRY),
            (VisitorPage::AppRestarting, 503, "Restarting", RETRY),
            (
                VisitorPage::AppStarting,
                503,
                "Starting",
                &[("retry-after", "1")],
            ),
        ];
        for (page, status, title, extra) in table {
            assert_eq!(page.status().as_u16(), *status, "{page:?}");
            assert_eq!(page.title(), *title, "{page:?}");
            let response = page.response();
            assert_eq!(response.status().as_u16(), *status);
            let mut expected = vec![
                ("cache-control", "no-store"),
                ("content-type", "text/html; charset=utf-8"),
                ("x-content-type-options", "nosniff"),
            ];
            expected.extend_from_slice(extra);
            expected.sort_unstable();
            let mut headers: Vec<(&str, &str)> = response
                .headers()
                .iter()
                .map(|(name, value)| (name.as_str(), value.to_str().unwrap()))
                .collect();
            headers.sort_unstable();
            assert_eq!(headers, expected, "{page:?}");
        }
    }

    #[tokio::test]
    async fn the_starting_page_reloads_and_a_failed_wake_is_an_envelope() {
        let body = VisitorPage::AppStarting.response().into_body();
        let body = body.collect().await.unwrap().to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("http-equiv=\"refresh\""));
        let failed = wake_failed("exited with 1");
        assert_eq!(failed.status(), 503);
        let body = failed.into_body().collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"]["code"], ErrorCode::WakeFailed.as_str());
        assert_eq!(json["error"]["status"], 503);
        assert!(json["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("exited with 1"));
    }

    #[tokio::test]
    async fn details_are_escaped() {
        let response = VisitorPage::NotDeployedYet { slug: "<b>&" }.response();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8(body.to_vec()).unwrap();
        assert!(body.contains("503 &middot; Not deployed yet"), "{body}");
        assert!(body.contains("&lt;b&gt;&amp;"), "{body}");
    }
}
