//! Static serving: a site in a temp dir, loaded and served by a hyper front server on
//! 127.0.0.1:0 and queried with an HTTP client (or served directly, request by request).
//! The helpers that build and serve the site are here; the tests are grouped by theme.

use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use super::{decode_path, PathRefused, StaticLimits, StaticSite};
use crate::proxy::test_harness::{fetch, front_server};

mod budget;
mod refusals;
mod responses;
mod rules;

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
