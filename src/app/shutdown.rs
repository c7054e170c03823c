//! The daemon's one shutdown tree and the order it stops in.
//!
//! `root` is the token `app::run` was given: listeners, renewals, deliveries, the admin socket
//! and maintenance watch it; `runs` (the builds in flight) is its child. The log hub's token is
//! the one thing outside the tree: logs flush last, after the apps have stopped, so nothing an
//! app or a build wrote on its way out is lost. `app::stop` runs the stop in its order.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(super) struct Shutdown {
    pub root: CancellationToken,
    /// Builds and deploys in flight: they end INTERRUPTED.
    pub runs: CancellationToken,
    /// The log hub's flusher, cancelled last.
    pub logs: CancellationToken,
    /// How long open connections (and WebSocket tunnels) may take to finish.
    pub drain: Duration,
    tasks: TaskTracker,
}

impl Shutdown {
    pub fn new(root: CancellationToken, drain: Duration) -> Shutdown {
        Shutdown {
            runs: root.child_token(),
            root,
            logs: CancellationToken::new(),
            drain,
            tasks: TaskTracker::new(),
        }
    }

    /// Runs a task that ends when `root` is cancelled; the stop waits for it.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(task);
    }

    /// Waits for every spawned task to end (they watch `root`).
    pub async fn wait_for_tasks(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }
}
