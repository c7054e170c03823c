//! What is not served: missing files (the build's 404 page, or the single-page fallback),
//! traversal, hidden files and symlinks leaving the site, and the paths that never decode.

use super::*;

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
