//! The small HTML pages app visitors see when the router cannot answer with the app itself:
//! unknown host (404), app not answering (502), no live deployment yet (503). Used by the
//! router, the proxy and static serving.

use std::time::Duration;

use http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER, X_CONTENT_TYPE_OPTIONS};
use http::{HeaderValue, Response, StatusCode};

use crate::http_util::{full, Body};

/// A short HTML page for `status`; `title` and `detail` are escaped.
pub fn error_page(status: StatusCode, title: &str, detail: &str) -> Response<Body> {
    let code = status.as_u16();
    let title = escape(title);
    let detail = escape(detail);
    let html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>{code} {title}</title>\
         <style>body{{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:15vh auto;padding:0 1rem;color:#222}}\
         h1{{font-size:1.4rem}}p{{color:#555}}</style></head>\
         <body><h1>{code} &middot; {title}</h1><p>{detail}</p></body></html>\n"
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
    response
}

/// A 503 page with `Retry-After` in whole seconds (at least one).
pub fn service_unavailable_page(
    title: &str,
    detail: &str,
    retry_after: Duration,
) -> Response<Body> {
    let mut response = error_page(StatusCode::SERVICE_UNAVAILABLE, title, detail);
    let seconds = retry_after.as_secs().max(1);
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(seconds));
    response
}

fn escape(text: &str) -> String {
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

    #[tokio::test]
    async fn pages_escape_and_carry_retry_after() {
        let response = service_unavailable_page("Not <yet>", "a & b", Duration::from_millis(200));
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[RETRY_AFTER], "1");
        assert_eq!(response.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
        let body = response
            .into_body()
            .collect()
            .await
            .expect("in-memory body")
            .to_bytes();
        let body = String::from_utf8(body.to_vec()).expect("UTF-8 page");
        assert!(body.contains("503 &middot; Not &lt;yet&gt;"), "{body}");
        assert!(body.contains("a &amp; b"), "{body}");
    }
}
