//! A live app that crashes (issue 9): while the supervisor restarts it, its route points at
//! nothing (its sandbox address is about to be free for another project's sandbox), visitors
//! get a 503 "restarting" page with `Retry-After`, and the app answers again after.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::TestDaemon;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_app_is_unrouted_until_it_is_healthy_again() {
    if crate::support::missing_tool("node", "the app is a node server") {
        return;
    }
    let daemon = TestDaemon::start();
    daemon
        .deploy(
            "crashy",
            &[("server.js", crate::pipeline::NODE_APP, 0o644)],
            json!({"startCommand": "node server.js"}),
        )
        .await;
    assert_eq!(daemon.app_get("crashy", "/", &[]).await.status, 200);
    // `/crash` answers, then the process exits 10 ms later; the restart waits 1 s.
    assert_eq!(daemon.app_get("crashy", "/crash", &[]).await.status, 200);
    let crashed = Instant::now();
    let mut saw_restarting = false;
    loop {
        let page = daemon.app_get("crashy", "/", &[]).await;
        match page.status {
            503 => {
                assert_eq!(page.header("retry-after"), Some("5"));
                assert!(page.text().contains("Restarting"), "{}", page.text());
                saw_restarting = true;
            }
            200 if saw_restarting => break,
            // Before the exit is noticed the old process may still answer (or refuse).
            200 | 502 => {}
            other => panic!("unexpected {other}: {}", page.text()),
        }
        assert!(
            crashed.elapsed() < Duration::from_secs(20),
            "the app did not come back; log:\n{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(saw_restarting, "visitors never saw the restarting page");
}
