//! Router threads: the visitor listeners served by one single-threaded runtime per core.
//!
//! A visitor's request is read, routed, forwarded to the app and answered by tasks of one
//! connection; on the daemon's work-stealing runtime those tasks (an HTTP/2 connection's
//! streams, the connection itself) wake each other across threads, and every hop parks and
//! unparks a worker. Each router thread runs its own current-thread runtime instead, with its
//! own copy of each listener (the same socket: whichever thread is free accepts), its own
//! timers and its own pool of connections to apps ([`current`] tells the proxy which): a
//! connection's tasks never leave the thread that accepted it.
//!
//! The rest of the daemon (the API's handlers, builds, the supervisor) stays on the main
//! runtime: the control host's requests are handed over to it (`Dispatch::control_runtime`).
//!
//! Shutdown: the listeners drain as on the main runtime; each thread reports when its
//! listeners are done ([`RouterThreads::drained`]) and keeps its runtime (WebSocket tunnels
//! still run there) until [`RouterThreads::release`].

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{serve, ConnectionBudget, ConnectionLimits, ListenerKind};
use crate::dispatch::Dispatch;

thread_local! {
    static ROUTER_THREAD: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The index of the router thread running this code, if it is one.
pub fn current() -> Option<usize> {
    ROUTER_THREAD.with(Cell::get)
}

/// A listener the router threads serve.
pub struct Listener {
    pub socket: std::net::TcpListener,
    pub kind: ListenerKind,
    pub dispatch: Arc<Dispatch>,
}

/// What every router thread shares.
pub struct Shared {
    pub budget: Arc<ConnectionBudget>,
    pub limits: ConnectionLimits,
    pub shutdown: CancellationToken,
    pub drain: Duration,
}

/// The running router threads.
pub struct RouterThreads {
    drained: Vec<oneshot::Receiver<()>>,
    release: CancellationToken,
}

impl RouterThreads {
    /// Starts `count` threads (at least one), each serving every listener until `shutdown`.
    pub fn start(
        count: usize,
        listeners: Vec<Listener>,
        shared: Shared,
    ) -> std::io::Result<RouterThreads> {
        let shared = Arc::new(shared);
        let release = CancellationToken::new();
        let mut drained = Vec::new();
        for index in 0..count.max(1) {
            let mut copies = Vec::with_capacity(listeners.len());
            for listener in &listeners {
                copies.push((
                    listener.socket.try_clone()?,
                    listener.kind.clone(),
                    listener.dispatch.clone(),
                ));
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (done, done_rx) = oneshot::channel();
            let shared = shared.clone();
            let release = release.clone();
            std::thread::Builder::new()
                .name(format!("router-{index}"))
                .spawn(move || {
                    ROUTER_THREAD.with(|thread| thread.set(Some(index)));
                    runtime.block_on(run(copies, &shared, done, release));
                })?;
            drained.push(done_rx);
        }
        Ok(RouterThreads { drained, release })
    }

    /// Resolves once every thread's listeners have closed and drained (after `shutdown`).
    pub fn drained(&mut self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let drained = std::mem::take(&mut self.drained);
        async move {
            for done in drained {
                let _ = done.await;
            }
        }
    }

    /// Lets the threads end, dropping what still runs on them (tunnels past their deadline).
    pub fn release(&self) {
        self.release.cancel();
    }
}

async fn run(
    listeners: Vec<(std::net::TcpListener, ListenerKind, Arc<Dispatch>)>,
    shared: &Shared,
    done: oneshot::Sender<()>,
    release: CancellationToken,
) {
    let mut serving = tokio::task::JoinSet::new();
    for (socket, kind, dispatch) in listeners {
        let listener = match tokio::net::TcpListener::from_std(socket) {
            Ok(listener) => listener,
            Err(error) => {
                tracing::error!(%error, "a router thread cannot register its listener");
                continue;
            }
        };
        serving.spawn(serve(
            listener,
            kind,
            dispatch,
            shared.budget.clone(),
            shared.limits,
            shared.shutdown.clone(),
            shared.drain,
        ));
    }
    while serving.join_next().await.is_some() {}
    let _ = done.send(());
    release.cancelled().await;
}
