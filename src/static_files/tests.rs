//! Static serving over real sockets: a site in a temp dir, loaded and served by a hyper front
//! server on 127.0.0.1:0, queried with an HTTP client.

use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use super::{decode_path, PathRefused, StaticLimits, StaticSite};
use crate::proxy::test_harness::{fetch, front_server};

const DATA_LEN: usize = 1000;

fn data() -> Vec<u8> {
    (0..DATA_LEN).map(|index| (index % 251) as u8).collect()
}

/// A small build output with every kind of file the tests need.
fn write_site(root: &Path, with_404: bool) {
    let write = |path: &str, contents: &[u8]| {
        let path = root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, contents).unwrap();
    };
    write("index.html", b"<h1>home</h1>");
    write("about.html", b"<h1>about</h1>");
    write("docs/index.html", b"<h1>docs</h1>");
    write("style.css", b"body{}");
    write("app.js", b"console.log('plain')");
    write("app.js.gz", b"GZIP-BYTES");
    write("app.js.br", b"BROTLI-BYTES");
    write("logo.png", b"\x89PNG");
    write("data.bin", &data());
    write("big.bin", &vec![7u8; 64 * 1024]);
    write("hello world.txt", b"spaced");
    write(".env", b"SECRET=1");
    write(".git/config", b"[core]");
    write(".well-known/security.txt", b"Contact: x");
    if with_404 {
        write("404.html", b"<h1>custom missing</h1>");
    }
    std::os::unix::fs::symlink("/etc/passwd", root.join("passwd")).unwrap();
    std::os::unix::fs::symlink(root.join("style.css"), root.join("linked.css")).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
    std::os::unix::fs::symlink(root.join(".env"), root.join("env.txt")).unwrap();
}

/// Serves `site` on a front server; only `big.bin` (64 KiB) goes to disk under these limits.
async fn serve(with_404: bool) -> (tempfile::TempDir, SocketAddr) {
    let directory = tempfile::tempdir().unwrap();
    write_site(directory.path(), with_404);
    let limits = StaticLimits {
        max_file_in_memory: 16 * 1024,
        ..StaticLimits::STANDARD
    };
    let site = Arc::new(StaticSite::load_with_limits(directory.path(), &limits).unwrap());
    assert!(
        site.bytes_in_memory() < 16 * 1024,
        "big.bin must be served from disk"
    );
    let address = front_server(move |request, _peer| {
        let response = site.serve(&request);
        async move { response }
    })
    .await;
    (directory, address)
}

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

#[tokio::test]
async fn missing_files_use_the_builds_404_page() {
    let (_directory, address) = serve(true).await;
    let missing = fetch(address, "GET", "/nope", &[]).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.text(), "<h1>custom missing</h1>");
    assert_eq!(
        missing.header("content-type"),
        Some("text/html; charset=utf-8")
    );

    // Without a 404.html: a missing file is a 404, an extension-less path is the app's
    // index.html (single-page apps route on the client).
    let (_other, plain_address) = serve(false).await;
    let plain = fetch(plain_address, "GET", "/nope.txt", &[]).await;
    assert_eq!(plain.status, 404);
    assert!(plain.text().contains("Not found"));
    let deep = fetch(plain_address, "GET", "/some/deep/link", &[]).await;
    assert_eq!(deep.status, 200);
    assert_eq!(deep.text(), "<h1>home</h1>");
}

#[tokio::test]
async fn traversal_hidden_files_and_outside_symlinks_are_refused() {
    let (_directory, address) = serve(false).await;
    for path in [
        "/../etc/passwd",
        "/%2e%2e/etc/passwd",
        "/docs/%2E%2E/%2e%2e/etc/passwd",
        "/a%00b",
        "/.%2e/x",
        "/a%5c..%5cb",
    ] {
        assert_eq!(fetch(address, "GET", path, &[]).await.status, 400, "{path}");
    }
    for path in [
        "/.env",
        "/.git/config",
        "/passwd",
        "/etc/passwd",
        "/etc/hostname",
        "/%2fetc%2fpasswd",
        "/%ff",
    ] {
        let fetched = fetch(address, "GET", path, &[]).await;
        // 404, or (extension-less, no 404.html) the site's own index.html: never the file.
        let index = fetched.status == 200 && fetched.text() == "<h1>home</h1>";
        assert!(fetched.status == 404 || index, "{path}: {}", fetched.status);
        assert!(!fetched.text().contains("root:"), "{path}");
    }
    assert_eq!(
        fetch(address, "GET", "/linked.css", &[]).await.text(),
        "body{}"
    );
}

#[test]
fn paths_decode() {
    assert_eq!(decode_path("/a%20b").unwrap(), "/a b");
    assert_eq!(decode_path("/plain").unwrap(), "/plain");
    assert_eq!(decode_path("/%2e%2e/x"), Err(PathRefused::Traversal));
    assert_eq!(decode_path("/%zz"), Err(PathRefused::Traversal));
    assert_eq!(decode_path("/%ff"), Err(PathRefused::NotUtf8));
    assert_eq!(decode_path("relative"), Err(PathRefused::Traversal));
}

#[test]
fn loading_is_bounded() {
    let directory = tempfile::tempdir().unwrap();
    write_site(directory.path(), false);
    let too_few = StaticLimits {
        max_files: 3,
        ..StaticLimits::STANDARD
    };
    assert!(StaticSite::load_with_limits(directory.path(), &too_few).is_err());
    let tiny_budget = StaticLimits {
        memory_budget: 100,
        ..StaticLimits::STANDARD
    };
    let site = StaticSite::load_with_limits(directory.path(), &tiny_budget).unwrap();
    assert!(site.bytes_in_memory() <= 100);
    assert!(StaticSite::load(&directory.path().join("index.html")).is_err());
}

/// Sites share one budget: loading takes up to half of it, the second site gets what the
/// first left, serves the rest from disk with the same bodies until a file turns hot and moves
/// into memory, and a dropped site gives everything back.
#[test]
fn sites_share_one_memory_budget() {
    use super::MemoryBudget;
    use http::Request;
    let directory = tempfile::tempdir().unwrap();
    let root = directory.path();
    std::fs::write(root.join("index.html"), "x".repeat(600)).unwrap();
    std::fs::write(root.join("small.css"), "y".repeat(300)).unwrap();
    let budget = MemoryBudget::new(2000);
    let first = StaticSite::load_shared(root, &budget).unwrap();
    assert_eq!(first.bytes_in_memory(), 900);
    let second = StaticSite::load_shared(root, &budget).unwrap();
    assert_eq!(
        second.bytes_in_memory(),
        0,
        "loading stops at half the budget"
    );
    assert_eq!(budget.used(), 900);
    let get = |site: &StaticSite| {
        let response = site.serve(&Request::builder().uri("/").body(()).unwrap());
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-length"], "600");
    };
    for _ in 0..7 {
        get(&second);
    }
    assert_eq!(budget.used(), 900, "not hot yet");
    get(&second);
    assert_eq!(budget.used(), 1500, "hot: read into memory");
    drop(first);
    assert_eq!(budget.used(), 600);
    drop(second);
    assert_eq!(budget.used(), 0);
}

/// With the budget full, a file that turns hot takes the place of promoted files nobody asked
/// for since the clock last passed; the ones still asked for stay.
#[test]
fn hot_files_evict_cold_promoted_ones() {
    use super::MemoryBudget;
    use http::Request;
    let directory = tempfile::tempdir().unwrap();
    let root = directory.path();
    for name in ["a", "b", "c"] {
        std::fs::write(root.join(format!("{name}.txt")), name.repeat(400)).unwrap();
    }
    // Half of 1000 for loading: a.txt is preloaded, b and c are not.
    let budget = MemoryBudget::new(1000);
    let filler = tempfile::tempdir().unwrap();
    std::fs::write(filler.path().join("f.txt"), "f".repeat(500)).unwrap();
    let _preloaded = StaticSite::load_shared(filler.path(), &budget).unwrap();
    let site = StaticSite::load_shared(root, &budget).unwrap();
    assert_eq!((site.bytes_in_memory(), budget.used()), (0, 500));
    let get = |path: &str, times: usize| {
        for _ in 0..times {
            let response = site.serve(&Request::builder().uri(path).body(()).unwrap());
            assert_eq!(response.status(), 200);
        }
    };
    let in_memory = || {
        (
            site.serves_from_memory("/b.txt"),
            site.serves_from_memory("/c.txt"),
        )
    };
    get("/b.txt", 7);
    assert_eq!(in_memory(), (false, false));
    get("/b.txt", 1);
    assert_eq!(
        (in_memory(), budget.used()),
        ((true, false), 900),
        "b promoted"
    );
    get("/c.txt", 8);
    assert_eq!(
        (in_memory(), budget.used()),
        ((false, true), 900),
        "c took b's place: b was not asked for since"
    );
    get("/c.txt", 1);
    get("/b.txt", 8);
    assert_eq!(
        (in_memory(), budget.used()),
        ((true, false), 900),
        "b is back: c was referenced, passed, then evicted on the second turn"
    );
    drop(site);
    assert_eq!(budget.used(), 500);
}

/// `_redirects` (redirects with the query kept, placeholders, splats, 200 rewrites that never
/// shadow a file unless forced) and `_headers` through `serve`; the rules files are not served.
#[test]
fn redirects_rewrites_and_headers_from_the_sites_own_files() {
    use http::{Request, StatusCode};
    let directory = tempfile::tempdir().unwrap();
    let root = directory.path();
    let write = |name: &str, body: &str| {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    };
    write("index.html", "<h1>home</h1>");
    write("404.html", "<h1>missing</h1>");
    write("app/index.html", "<h1>the app shell</h1>");
    write("kept.html", "<h1>kept</h1>");
    write("assets/app.js", "console.log(1)");
    write(
        "_redirects",
        "/old /new\n/blog/:year/:slug /posts/:year-:slug 302\n/app/* /app/index.html 200\n/kept /elsewhere\n/forced /kept.html 200!\n",
    );
    write(
        "_headers",
        "/*\n  X-Frame-Options: DENY\n/assets/*\n  Cache-Control: public, max-age=31536000, immutable\n",
    );
    let site = StaticSite::load(root).unwrap();
    let get = |path: &str| site.serve(&Request::builder().uri(path).body(()).unwrap());
    let moved = get("/old?ref=x");
    assert_eq!(moved.status(), StatusCode::MOVED_PERMANENTLY);
    assert_eq!(moved.headers()["location"], "/new?ref=x");
    assert_eq!(moved.headers()["x-frame-options"], "DENY");
    let post = get("/blog/2024/hello");
    assert_eq!(post.status(), StatusCode::FOUND);
    assert_eq!(post.headers()["location"], "/posts/2024-hello");
    let rewritten = get("/app/settings/profile");
    assert_eq!(rewritten.status(), StatusCode::OK);
    assert_eq!(
        rewritten.headers()["content-length"],
        "<h1>the app shell</h1>".len().to_string().as_str()
    );
    assert_eq!(
        get("/kept").status(),
        StatusCode::OK,
        "a file wins over an unforced rule"
    );
    let forced = get("/forced");
    assert_eq!(forced.status(), StatusCode::OK);
    assert_eq!(
        forced.headers()["content-length"],
        "<h1>kept</h1>".len().to_string().as_str()
    );
    let asset = get("/assets/app.js");
    assert_eq!(
        asset.headers()["cache-control"],
        "public, max-age=31536000, immutable"
    );
    assert_eq!(get("/_redirects").status(), StatusCode::NOT_FOUND);
    assert_eq!(get("/_headers").status(), StatusCode::NOT_FOUND);
    // With a 404.html there is no single-page fallback.
    assert_eq!(get("/unknown/route").status(), StatusCode::NOT_FOUND);
}
