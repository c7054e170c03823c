//! Apps are siblings of the control host and can set cookies for `apps_domain`, which the
//! browser then sends to the control host too. A cookie bomb (as many cookies as a browser
//! keeps for a site, each as large as it allows) must not lock the operator out of the API
//! or the dashboard, over HTTP/1.1 or HTTP/2 — while an app host still refuses it.

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::support::tls::tls_connect;
use crate::support::{DaemonOptions, TestDaemon, TlsSetup};

/// Chrome and Firefox keep up to 180 cookies per site of up to 4096 bytes each (737 KB).
fn cookie_bomb() -> Vec<String> {
    (0..180)
        .map(|i| format!("bomb{i:03}={}", "x".repeat(4086)))
        .collect()
}

/// GET `https://<host><path>` over HTTP/2 (cookies as separate fields, as RFC 9113 allows) or
/// HTTP/1.1 (one `Cookie` header, as browsers send it); the status, or what went wrong.
async fn get_with_cookies(
    daemon: &TestDaemon,
    host: &str,
    path: &str,
    h2: bool,
) -> Result<u16, String> {
    let alpn: &[u8] = if h2 { b"h2" } else { b"http/1.1" };
    let tls = tls_connect(daemon.https_addr(), host, &[alpn]).await?;
    let io = TokioIo::new(tls);
    let mut request = http::Request::get(format!("https://{host}{path}"));
    if h2 {
        for cookie in cookie_bomb() {
            request = request.header("cookie", cookie);
        }
    } else {
        request = request
            .header("host", host)
            .header("cookie", cookie_bomb().join("; "));
    }
    let request = request.body(Empty::<Bytes>::new()).unwrap();
    let response = if h2 {
        let (mut sender, connection) =
            hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .max_header_list_size(2 << 20)
                .handshake(io)
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        sender.send_request(request).await
    } else {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        sender.send_request(request).await
    };
    let response = response.map_err(|e| format!("{e:?}"))?;
    let status = response.status().as_u16();
    response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(status)
}

#[tokio::test]
async fn a_cookie_bomb_from_an_app_does_not_lock_the_operator_out() {
    let options = DaemonOptions::default()
        .apps_domain("apps.test")
        .tls(TlsSetup::Internal);
    let daemon = TestDaemon::start_with(options);
    let control = daemon.control_host();
    for h2 in [false, true] {
        for path in ["/healthz", "/", "/api/projects"] {
            let status = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                get_with_cookies(&daemon, &control, path, h2),
            )
            .await
            .unwrap_or_else(|_| Err("timed out".into()));
            let expected = if path == "/api/projects" { 401 } else { 200 };
            assert_eq!(
                status,
                Ok(expected),
                "h2={h2} {path}: the control host must ignore cookies, whatever their size"
            );
        }
    }
    // App hosts keep the ordinary header limit: the bomb does not raise it for them.
    daemon.deploy_verified("site", "<h1>site</h1>").await;
    let app = daemon.app_host("site");
    let status = get_with_cookies(&daemon, &app, "/", false).await;
    // The daemon answers 431 at its limit and closes; the client may still be writing.
    let refused = match &status {
        Ok(status) => *status == 431,
        Err(error) => error.contains("BrokenPipe") || error.contains("ConnectionReset"),
    };
    assert!(refused, "an app host keeps max_header_kb: {status:?}");
}
