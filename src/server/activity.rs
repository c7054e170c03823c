//! Per-connection guards against clients that hold connections without using them: an idle
//! timer that counts requests in flight (an HTTP/2 connection kept open by pings alone is idle),
//! and `DeadlineIo`, a write deadline on the socket so a client that stops reading cannot pin a
//! response (and its connection) for ever. Used by `server/mod.rs` for every protocol.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Requests in flight on one connection and when the last one ended.
pub struct Activity {
    started: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds after `started` when the connection was last busy.
    last_busy_ms: AtomicU64,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            started: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_busy_ms: AtomicU64::new(0),
        })
    }

    /// Marks a request in flight until the returned guard (carried by the response body) drops.
    pub fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Resolves once no request has been in flight for `timeout`.
    pub async fn idle(&self, timeout: Duration) {
        loop {
            if self.in_flight.load(Ordering::Relaxed) > 0 {
                tokio::time::sleep(timeout).await;
                continue;
            }
            let last = Duration::from_millis(self.last_busy_ms.load(Ordering::Relaxed));
            let deadline = self.started + last + timeout;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// One request in flight; dropped when its response body is finished or abandoned.
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0
            .last_busy_ms
            .store(self.0.now_ms(), Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that keeps its request counted as in flight until it is done.
pub struct TrackedBody<B> {
    inner: B,
    _busy: Busy,
}

impl<B> TrackedBody<B> {
    pub fn new(inner: B, busy: Busy) -> TrackedBody<B> {
        TrackedBody { inner, _busy: busy }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for TrackedBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A socket whose writes fail with `TimedOut` after `timeout` without progress.
pub struct DeadlineIo<T> {
    inner: T,
    timeout: Duration,
    /// Armed while a write is waiting; reset on every bit of progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> DeadlineIo<T> {
    pub fn new(inner: T, timeout: Duration) -> DeadlineIo<T> {
        DeadlineIo {
            inner,
            timeout,
            stalled: None,
        }
    }

    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// Maps a pending write to an error once the deadline passed; clears it on progress.
    fn check<R>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(sleep.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client stopped reading",
        )))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for DeadlineIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for DeadlineIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.check(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.check(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.check(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn idle_waits_for_requests_to_finish() {
        let activity = Activity::new();
        let busy = activity.begin();
        let idle = tokio::spawn({
            let activity = activity.clone();
            async move { activity.idle(Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_secs(25)).await;
        assert!(!idle.is_finished(), "a request in flight keeps it busy");
        drop(busy);
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert!(!idle.is_finished());
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(idle.is_finished());
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_stops_fails_the_write_after_the_deadline() {
        let (client, server) = tokio::io::duplex(1024);
        let mut server = DeadlineIo::new(server, Duration::from_secs(5));
        let started = Instant::now();
        let result = server.write_all(&vec![0u8; 64 * 1024]).await;
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_secs(5));
        drop(client);
    }
}
