//! Router threads: the visitor listeners served by one single-threaded runtime per core.
//!
//! A visitor's request is read, routed, forwarded to the app and answered by tasks of one
//! connection; on the daemon's work-stealing runtime those tasks (an HTTP/2 connection's
//! streams, the connection itself) wake each other across threads, and every hop parks and
//! unparks a worker. Each router thread runs its own current-thread runtime instead, with its
//! own copy of each listener (the same socket: whichever thread is free accepts), its own
//! timers and its own pool of connections to apps (`proxy::pools_per_thread`): a
//! connection's tasks never leave the thread that accepted it.
//!
//! Placement: a listener's readiness wakes every thread and the first one free accepts, so on
//! its own a burst of new connections can land mostly on one thread while another idles (in a
//! wrk run, 64 connections split 14/50 as often as 32/32, and the p99 doubled). The thread that
//! accepts keeps the connection only if no other thread serves fewer; otherwise it hands the
//! socket to the least loaded one ([`spawn_connection`]), which registers it with its own
//! runtime. Load is the count of open connections, like HAProxy's per-thread listener queues.
//!
//! The rest of the daemon (the API's handlers, builds, the supervisor) stays on the main
//! runtime: the control host's requests are handed over to it (`Dispatch::control_runtime`).
//!
//! Shutdown: the listeners drain as on the main runtime; each thread reports when its
//! listeners are done ([`RouterThreads::drained`]) and keeps its runtime (WebSocket tunnels
//! still run there) until [`RouterThreads::release`].

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{serve, ConnectionBudget, ConnectionLimits, ListenerKind};
use crate::dispatch::Dispatch;
use crate::metrics::RouterLoad;

thread_local! {
    static ROUTER_THREAD: RefCell<Option<(usize, Arc<Placement>)>> = const { RefCell::new(None) };
}

/// Serves an accepted connection: `serve` gets the stream registered with the runtime that
/// runs it. On a router thread that is the least loaded router thread (this one on a tie);
/// elsewhere, this runtime.
pub fn spawn_connection<F, Fut>(stream: TcpStream, serve: F)
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let placed = ROUTER_THREAD.with(|thread| {
        thread
            .borrow()
            .as_ref()
            .map(|(index, placement)| (*index, placement.clone()))
    });
    let Some((here, placement)) = placed else {
        tokio::spawn(serve(stream));
        return;
    };
    let target = placement.load.least_loaded(here);
    placement.load.opened(target);
    let load = Load {
        load: placement.load.clone(),
        thread: target,
    };
    if target == here {
        tokio::spawn(load.around(serve(stream)));
        return;
    }
    let handoff = stream.into_std().map(|stream| Handoff {
        stream,
        serve: Box::new(move |stream| Box::pin(load.around(serve(stream)))),
    });
    match handoff {
        Ok(handoff) => {
            // The receiver lives as long as its thread's runtime, which outlives the listeners.
            let _ = placement.queues[target].send(handoff);
        }
        Err(error) => tracing::debug!(%error, "an accepted connection could not be handed over"),
    }
}

/// Open connections per router thread, and the way to hand one a connection.
struct Placement {
    load: Arc<RouterLoad>,
    queues: Vec<mpsc::UnboundedSender<Handoff>>,
}

/// A connection on its way to another router thread.
struct Handoff {
    stream: std::net::TcpStream,
    serve: ServeOn,
}

/// Serves a connection once it is registered with the runtime of the thread that runs it.
type ServeOn = Box<dyn FnOnce(TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// One connection counted on its thread while it is served.
struct Load {
    load: Arc<RouterLoad>,
    thread: usize,
}

impl Load {
    async fn around(self, serving: impl Future<Output = ()>) {
        serving.await;
        drop(self);
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.load.closed(self.thread);
    }
}

/// Serves the connections other threads hand to this one.
async fn receive(mut queue: mpsc::UnboundedReceiver<Handoff>) {
    while let Some(Handoff { stream, serve }) = queue.recv().await {
        match TcpStream::from_std(stream) {
            Ok(stream) => {
                tokio::spawn(serve(stream));
            }
            Err(error) => tracing::warn!(%error, "a handed-over connection cannot be registered"),
        }
    }
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
    /// One slot per router thread: how many threads start.
    pub load: Arc<RouterLoad>,
}

/// The running router threads.
pub struct RouterThreads {
    drained: Vec<oneshot::Receiver<()>>,
    release: CancellationToken,
}

impl RouterThreads {
    /// Starts one thread per slot of `shared.load`, each serving every listener until
    /// `shutdown`.
    pub fn start(listeners: Vec<Listener>, shared: Shared) -> std::io::Result<RouterThreads> {
        let count = shared.load.threads();
        let (queues, mut receivers): (Vec<_>, Vec<_>) =
            (0..count).map(|_| mpsc::unbounded_channel()).unzip();
        let placement = Arc::new(Placement {
            load: shared.load.clone(),
            queues,
        });
        let shared = Arc::new(shared);
        let release = CancellationToken::new();
        let mut drained = Vec::new();
        for index in 0..count {
            let queue = receivers.remove(0);
            let placement = placement.clone();
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
                    ROUTER_THREAD.with(|thread| *thread.borrow_mut() = Some((index, placement)));
                    crate::proxy::pools_per_thread();
                    runtime.block_on(async {
                        tokio::spawn(receive(queue));
                        run(copies, &shared, done, release).await
                    });
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
