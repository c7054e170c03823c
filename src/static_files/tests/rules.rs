//! The site's own rules files: `_redirects` and `_headers`.

use super::*;

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
