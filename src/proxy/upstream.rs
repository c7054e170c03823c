//! Connections to apps: a pool of idle HTTP/1.1 connections per app address, each driven on
//! the task of the visitor request that uses it. hyper's `client::conn::http1` gives a
//! request sender and the connection's I/O state machine; instead of spawning the latter as a
//! task of its own (and hopping to it through a channel for every request and every body
//! chunk), [`Exchange`] and [`UpstreamBody`] poll it from the visitor's task: the request is
//! written, the response read and its body streamed without waking another task or thread.
//!
//! Invariants:
//! - A connection goes back to the pool only when its response body was read to the end and
//!   the connection did not end; anything else drops (closes) it.
//! - Idle connections older than `pool_idle_timeout` are never used and are closed by the
//!   sweeper within a second of expiring.
//! - A request the connection never wrote is handed back ([`Failure::unsent`]) so that it can
//!   go out on another connection, whatever its method.

use std::collections::HashMap;
use std::future::{poll_fn, Future as _};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::http_util::{Body, BodyError};
use crate::metrics::ProjectMetrics;
use crate::upstreams::InFlight;

/// How long data sent to an app may stay unacknowledged (`TCP_USER_TIMEOUT`) before its
/// connection counts as broken.
const UNACKNOWLEDGED_LIMIT: Duration = Duration::from_secs(5);

/// Why no response came from the app.
#[derive(Debug, thiserror::Error)]
pub(super) enum SendError {
    #[error("cannot connect to the app: {0}")]
    Connect(#[source] std::io::Error),
    #[error("the app did not accept a connection within {0:?}")]
    ConnectTimedOut(Duration),
    #[error("the app closed the connection before answering: {0}")]
    Closed(#[source] hyper::Error),
    #[error("the exchange with the app failed: {0}")]
    Failed(#[source] hyper::Error),
    #[error("the app did not answer within {0:?}")]
    TimedOut(Duration),
}

/// A failed exchange, with the request when the connection never wrote it.
pub(super) struct Failure {
    pub error: SendError,
    pub unsent: Option<Request<Body>>,
}

type Driver = http1::Connection<TokioIo<TcpStream>, Body>;

/// One connection to an app: the request sender, the I/O state machine behind it and its
/// response timer. Always boxed ([`Conn`]): the state is about a kilobyte, and a connection
/// moves from the pool to the exchange to the response body and back for every request.
pub(super) struct Connection {
    sender: http1::SendRequest<Body>,
    driver: Driver,
    ended: bool,
    /// Armed at or before the current request's deadline; see [`Connection::timed_out`].
    timer: Pin<Box<Sleep>>,
}

pub(super) type Conn = Box<Connection>;

impl Connection {
    /// Makes progress on the connection's I/O; true once the connection has ended (closed by
    /// the app, failed, or upgraded).
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.ended {
            if let Poll::Ready(result) = self.driver.poll_without_shutdown(cx) {
                if let Err(error) = result {
                    tracing::debug!(%error, "proxy: upstream connection ended");
                }
                self.ended = true;
            }
        }
        self.ended
    }

    /// Waits until the connection can take a request; false when it ended first.
    async fn ready(&mut self) -> bool {
        poll_fn(|cx| {
            if self.drive(cx) {
                return Poll::Ready(false);
            }
            self.sender.poll_ready(cx).map(|ready| ready.is_ok())
        })
        .await
    }

    /// Sends `request` and waits, up to `timeout`, for the response head, driving the
    /// connection meanwhile.
    async fn exchange(
        &mut self,
        request: Request<Body>,
        timeout: Duration,
    ) -> Result<Response<Incoming>, Failure> {
        let deadline = Instant::now() + timeout;
        self.arm(deadline);
        let mut response = std::pin::pin!(self.sender.try_send_request(request));
        poll_fn(|cx| {
            let mut drove = false;
            loop {
                if let Poll::Ready(result) = response.as_mut().poll(cx) {
                    return Poll::Ready(result.map_err(Failure::from));
                }
                if self.timed_out(deadline, cx) {
                    return Poll::Ready(Err(Failure {
                        error: SendError::TimedOut(timeout),
                        unsent: None,
                    }));
                }
                if drove && self.ended {
                    // hyper answers every request's callback when its connection ends.
                    return Poll::Ready(Err(Failure {
                        error: SendError::Connect(std::io::ErrorKind::ConnectionAborted.into()),
                        unsent: None,
                    }));
                }
                if drove {
                    return Poll::Pending;
                }
                // Drive the connection once, then look at the response again: it may have
                // read the head.
                self.drive(cx);
                drove = true;
            }
        })
        .await
    }

    /// Makes sure the timer fires no later than `deadline`. A timer still armed for an
    /// earlier deadline (a previous request's) is left alone: it fires early and
    /// [`Connection::timed_out`] moves it on, so requests in quick succession touch the
    /// runtime's timer wheel about once per timeout instead of once each.
    fn arm(&mut self, deadline: Instant) {
        if self.timer.is_elapsed() || self.timer.deadline() > deadline {
            self.timer.as_mut().reset(deadline);
        }
    }

    /// Whether `deadline` has passed; otherwise registers for a wake-up at the latest then.
    fn timed_out(&mut self, deadline: Instant, cx: &mut Context<'_>) -> bool {
        while self.timer.as_mut().poll(cx).is_ready() {
            if Instant::now() >= deadline {
                return true;
            }
            self.timer.as_mut().reset(deadline);
        }
        false
    }
}

impl From<hyper::client::conn::TrySendError<Request<Body>>> for Failure {
    fn from(mut error: hyper::client::conn::TrySendError<Request<Body>>) -> Failure {
        let unsent = error.take_message();
        let error = error.into_error();
        let error = if error.is_incomplete_message() || error.is_canceled() {
            SendError::Closed(error)
        } else {
            SendError::Failed(error)
        };
        Failure { error, unsent }
    }
}

struct Idle {
    conn: Conn,
    since: Instant,
}

/// Idle connections per app address.
pub(super) struct Pool {
    idle: Mutex<HashMap<SocketAddr, Vec<Idle>>>,
    max_idle_per_app: usize,
    idle_timeout: Duration,
    connect_timeout: Duration,
}

impl Pool {
    /// A pool whose sweeper runs on the current runtime (when there is one) for as long as the
    /// pool lives.
    pub(super) fn new(
        max_idle_per_app: usize,
        idle_timeout: Duration,
        connect_timeout: Duration,
    ) -> Arc<Pool> {
        let pool = Arc::new(Pool {
            idle: Mutex::new(HashMap::new()),
            max_idle_per_app,
            idle_timeout,
            connect_timeout,
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(sweep(Arc::downgrade(&pool)));
        }
        pool
    }

    /// The most recently used idle connection to `address` that is still open and ready.
    pub(super) async fn checkout(&self, address: SocketAddr) -> Option<Conn> {
        loop {
            let idle = {
                let mut idle = self.idle.lock().expect("pool lock");
                idle.get_mut(&address)?.pop()?
            };
            if idle.since.elapsed() >= self.idle_timeout {
                continue;
            }
            let mut conn = idle.conn;
            if conn.ready().await {
                return Some(conn);
            }
        }
    }

    fn put(&self, address: SocketAddr, conn: Conn) {
        if conn.ended || conn.sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().expect("pool lock");
        let conns = idle.entry(address).or_default();
        if conns.len() < self.max_idle_per_app {
            conns.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
    }

    /// A new connection to `address` (see [`UNACKNOWLEDGED_LIMIT`]).
    pub(super) async fn connect(&self, address: SocketAddr) -> Result<Conn, SendError> {
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect(address))
            .await
            .map_err(|_| SendError::ConnectTimedOut(self.connect_timeout))?
            .map_err(SendError::Connect)?;
        let _ = stream.set_nodelay(true);
        // Data unacknowledged this long ends the connection: an app on a cluster node that
        // vanished (no answer, no reset) fails the request in seconds instead of after the
        // response timeout. A live peer acknowledges at once, however slow its app.
        let _ = nix::sys::socket::setsockopt(
            &stream,
            nix::sys::socket::sockopt::TcpUserTimeout,
            &(UNACKNOWLEDGED_LIMIT.as_millis() as u32),
        );
        let (sender, driver) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(SendError::Failed)?;
        Ok(Box::new(Connection {
            sender,
            driver,
            ended: false,
            timer: Box::pin(tokio::time::sleep_until(Instant::now())),
        }))
    }

    /// Sends `request` on `conn` and returns the response whose body keeps driving the
    /// connection and gives it back to the pool once read to the end. `timeout` bounds the wait
    /// for the response head.
    pub(super) async fn exchange(
        self: &Arc<Pool>,
        mut conn: Conn,
        address: SocketAddr,
        request: Request<Body>,
        timeout: Duration,
        metrics: Option<Arc<ProjectMetrics>>,
    ) -> Result<Response<UpstreamBody>, Failure> {
        let response = conn.exchange(request, timeout).await?;
        Ok(response.map(|body| UpstreamBody {
            body,
            conn: Some(conn),
            pool: Arc::downgrade(self),
            address,
            metrics,
            in_flight: None,
        }))
    }

    /// Sends a WebSocket handshake on `conn`, a new connection of its own (never pooled),
    /// driven by a task of its own that hands the connection to `hyper::upgrade::on` when the
    /// app switches protocols.
    pub(super) async fn send_upgrade(
        conn: Conn,
        address: SocketAddr,
        request: Request<Body>,
        timeout: Duration,
    ) -> Result<Response<Incoming>, SendError> {
        let Connection {
            mut sender, driver, ..
        } = *conn;
        tokio::spawn(async move {
            if let Err(error) = driver.with_upgrades().await {
                tracing::debug!(%address, %error, "proxy: upgrade connection ended");
            }
        });
        match tokio::time::timeout(timeout, sender.send_request(request)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(error)) => Err(SendError::Failed(error)),
            Err(_) => Err(SendError::TimedOut(timeout)),
        }
    }

    /// The number of idle connections (tests).
    #[cfg(test)]
    pub(super) fn idle_count(&self) -> usize {
        self.idle
            .lock()
            .expect("pool lock")
            .values()
            .map(Vec::len)
            .sum()
    }
}

/// Closes expired idle connections once a second until the pool is gone.
async fn sweep(pool: Weak<Pool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(pool) = pool.upgrade() else { return };
        let expired: Vec<Idle> = {
            let mut idle = pool.idle.lock().expect("pool lock");
            let mut expired = Vec::new();
            idle.retain(|_, conns| {
                let (keep, old): (Vec<Idle>, Vec<Idle>) = std::mem::take(conns)
                    .into_iter()
                    .partition(|conn| conn.since.elapsed() < pool.idle_timeout);
                *conns = keep;
                expired.extend(old);
                !conns.is_empty()
            });
            expired
        };
        drop(expired); // closed outside the lock
    }
}

/// An app's response body, streamed to the visitor; reading it drives the connection it came
/// on, and the connection goes back to the pool when the body was read to the end. Counts the
/// bytes into the project's metrics when given them, and holds the request's place in its
/// instance's load until the body ends or is dropped.
pub(super) struct UpstreamBody {
    body: Incoming,
    conn: Option<Conn>,
    pool: Weak<Pool>,
    address: SocketAddr,
    metrics: Option<Arc<ProjectMetrics>>,
    in_flight: Option<InFlight>,
}

impl UpstreamBody {
    /// Keeps the request counted in its instance's load while the body streams.
    pub(super) fn hold(&mut self, in_flight: InFlight) {
        if !self.body.is_end_stream() {
            self.in_flight = Some(in_flight);
        }
    }

    /// The body has ended: the connection goes back to the pool, the request off the load.
    fn release(&mut self) {
        self.in_flight = None;
        if let (Some(conn), Some(pool)) = (self.conn.take(), self.pool.upgrade()) {
            pool.put(self.address, conn);
        }
    }
}

impl hyper::body::Body for UpstreamBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        let mut drove = false;
        loop {
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let (Some(metrics), Some(data)) = (&this.metrics, frame.data_ref()) {
                        metrics.add_response_bytes(data.len() as u64);
                    }
                    if this.body.is_end_stream() {
                        this.release();
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Poll::Ready(Some(Err(error))) => {
                    this.conn = None;
                    this.in_flight = None;
                    return Poll::Ready(Some(Err(Box::new(error))));
                }
                Poll::Ready(None) => {
                    this.release();
                    return Poll::Ready(None);
                }
                Poll::Pending => {}
            }
            // Drive the connection once, then look at the body again: what it read is there.
            // A connection that ended has given the body its end or its error by then.
            if drove {
                return Poll::Pending;
            }
            drove = true;
            let Some(conn) = &mut this.conn else {
                return Poll::Pending;
            };
            if conn.drive(cx) {
                this.conn = None;
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        // The visitor's connection stops polling a body whose length it knows once it has all
        // of it; only such a complete body leaves its connection reusable.
        if self.body.is_end_stream() {
            self.release();
        }
    }
}
