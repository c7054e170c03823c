//! What a served file's responses say over real sockets: content types, directory indexes
//! and their redirects, conditional requests, byte ranges and precompressed siblings.

use super::*;

#[tokio::test]
async fn content_types_index_and_redirects() {
    let (_directory, address) = serve(false).await;
    let home = fetch(address, "GET", "/", &[]).await;
    assert_eq!(home.status, 200);
    assert_eq!(home.text(), "<h1>home</h1>");
    assert_eq!(
        home.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(home.header("cache-control"), Some("no-cache"));
    assert_eq!(home.header("accept-ranges"), Some("bytes"));
    assert!(home.header("etag").unwrap().starts_with('"'));
    assert!(home.header("last-modified").unwrap().ends_with("GMT"));

    for (path, content_type) in [
        ("/style.css", "text/css; charset=utf-8"),
        ("/app.js", "text/javascript; charset=utf-8"),
        ("/logo.png", "image/png"),
        ("/data.bin", "application/octet-stream"),
        ("/hello%20world.txt", "text/plain; charset=utf-8"),
    ] {
        let fetched = fetch(address, "GET", path, &[]).await;
        assert_eq!(fetched.status, 200, "{path}");
        assert_eq!(fetched.header("content-type"), Some(content_type), "{path}");
    }
    assert_eq!(
        fetch(address, "GET", "/hello%20world.txt", &[])
            .await
            .text(),
        "spaced"
    );

    let docs = fetch(address, "GET", "/docs/", &[]).await;
    assert_eq!(
        (docs.status.as_u16(), docs.text().as_str()),
        (200, "<h1>docs</h1>")
    );
    let redirect = fetch(address, "GET", "/docs?x=1", &[]).await;
    assert_eq!(redirect.status, 308);
    assert_eq!(redirect.header("location"), Some("/docs/?x=1"));
    assert_eq!(
        fetch(address, "GET", "/about", &[]).await.text(),
        "<h1>about</h1>"
    );
    assert_eq!(
        fetch(address, "GET", "/.well-known/security.txt", &[])
            .await
            .status,
        200
    );

    let head = fetch(address, "HEAD", "/data.bin", &[]).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("1000"));
    assert!(head.body.is_empty());

    let post = fetch(address, "POST", "/", &[]).await;
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
}

#[tokio::test]
async fn conditional_requests_answer_304() {
    let (_directory, address) = serve(false).await;
    let first = fetch(address, "GET", "/style.css", &[]).await;
    let etag = first.header("etag").unwrap().to_owned();
    let last_modified = first.header("last-modified").unwrap().to_owned();

    let by_etag = fetch(address, "GET", "/style.css", &[("if-none-match", &etag)]).await;
    assert_eq!(by_etag.status, 304);
    assert!(by_etag.body.is_empty());
    assert_eq!(by_etag.header("etag"), Some(etag.as_str()));
    let weak = format!("\"other\", W/{etag}");
    assert_eq!(
        fetch(address, "GET", "/style.css", &[("if-none-match", &weak)])
            .await
            .status,
        304
    );
    assert_eq!(
        fetch(
            address,
            "GET",
            "/style.css",
            &[("if-none-match", "\"stale\"")]
        )
        .await
        .status,
        200
    );

    let by_date = fetch(
        address,
        "GET",
        "/style.css",
        &[("if-modified-since", &last_modified)],
    )
    .await;
    assert_eq!(by_date.status, 304);
    let long_ago = "Thu, 01 Jan 1970 00:00:01 GMT";
    assert_eq!(
        fetch(
            address,
            "GET",
            "/style.css",
            &[("if-modified-since", long_ago)]
        )
        .await
        .status,
        200
    );
    // If-None-Match wins over If-Modified-Since.
    let both = [
        ("if-none-match", "\"stale\""),
        ("if-modified-since", last_modified.as_str()),
    ];
    assert_eq!(fetch(address, "GET", "/style.css", &both).await.status, 200);
}

#[tokio::test]
async fn byte_ranges_from_memory_and_disk() {
    let (_directory, address) = serve(false).await;
    let data = data();
    let cases: [(&str, std::ops::Range<usize>); 3] = [
        ("bytes=10-19", 10..20),
        ("bytes=990-", 990..1000),
        ("bytes=-5", 995..1000),
    ];
    for (range, expected) in cases {
        let fetched = fetch(address, "GET", "/data.bin", &[("range", range)]).await;
        assert_eq!(fetched.status, 206, "{range}");
        assert_eq!(&fetched.body[..], &data[expected.clone()], "{range}");
        let content_range = format!("bytes {}-{}/1000", expected.start, expected.end - 1);
        assert_eq!(
            fetched.header("content-range"),
            Some(content_range.as_str())
        );
        assert_eq!(
            fetched.header("content-length"),
            Some(expected.len().to_string().as_str())
        );
    }
    let unsatisfiable = fetch(address, "GET", "/data.bin", &[("range", "bytes=1000-")]).await;
    assert_eq!(unsatisfiable.status, 416);
    assert_eq!(unsatisfiable.header("content-range"), Some("bytes */1000"));
    assert_eq!(
        fetch(address, "GET", "/data.bin", &[("range", "bytes=0-1,4-5")])
            .await
            .status,
        200
    );
    let stale = [("range", "bytes=0-9"), ("if-range", "\"stale\"")];
    assert_eq!(fetch(address, "GET", "/data.bin", &stale).await.status, 200);

    let whole = fetch(address, "GET", "/big.bin", &[]).await;
    assert_eq!((whole.status.as_u16(), whole.body.len()), (200, 64 * 1024));
    assert!(whole.body.iter().all(|&byte| byte == 7));
    let part = fetch(address, "GET", "/big.bin", &[("range", "bytes=65530-")]).await;
    assert_eq!((part.status.as_u16(), part.body.len()), (206, 6));
    assert_eq!(
        part.header("content-range"),
        Some("bytes 65530-65535/65536")
    );
}

#[tokio::test]
async fn precompressed_siblings_follow_accept_encoding() {
    let (_directory, address) = serve(false).await;
    let plain = fetch(address, "GET", "/app.js", &[]).await;
    assert_eq!(plain.text(), "console.log('plain')");
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.header("vary"), Some("Accept-Encoding"));

    let gzip = fetch(
        address,
        "GET",
        "/app.js",
        &[("accept-encoding", "gzip, deflate")],
    )
    .await;
    assert_eq!(gzip.text(), "GZIP-BYTES");
    assert_eq!(gzip.header("content-encoding"), Some("gzip"));
    assert_eq!(
        gzip.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert_eq!(gzip.header("vary"), Some("Accept-Encoding"));

    let brotli = fetch(
        address,
        "GET",
        "/app.js",
        &[("accept-encoding", "gzip, br")],
    )
    .await;
    assert_eq!(brotli.text(), "BROTLI-BYTES");
    assert_eq!(brotli.header("content-encoding"), Some("br"));
    assert_ne!(brotli.header("etag"), gzip.header("etag"));
    assert_ne!(plain.header("etag"), gzip.header("etag"));

    let refused = fetch(
        address,
        "GET",
        "/app.js",
        &[("accept-encoding", "br;q=0, gzip")],
    )
    .await;
    assert_eq!(refused.header("content-encoding"), Some("gzip"));
    assert_eq!(
        fetch(address, "GET", "/style.css", &[("accept-encoding", "br")])
            .await
            .header("vary"),
        None
    );
}
