//! Write coalescing for HTTP/2 connections.
//!
//! An HTTP/2 connection carries many requests at once, each answered by its own task: every
//! answer queues its frames with the connection and wakes the connection's task, which
//! encrypts and writes what is queued. Written at once, a burst of answers that became ready
//! together leaves as one TLS record and one `writev` per answer, and the client wakes for
//! each. [`Coalesced`] holds the first write of each burst until the runtime has run the
//! other tasks that are ready (and polled for new I/O): the answers that became ready meanwhile
//! join the same write. Event-loop servers (HAProxy, nginx) get the same from writing after
//! their whole batch of events. Measured in benches/README.md ("The proxy path, third pass").
//!
//! The wait is `tokio::task::yield_now`'s: the task's wake-up is deferred until its worker
//! has nothing else to run. It costs one more poll of the connection's task per burst, and
//! adds no timer: a burst is never held longer than one turn of the scheduler.

use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection whose first write after each flush waits for one turn of the scheduler.
pub struct Coalesced<T> {
    inner: T,
    state: Hold,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// Writes go out at once (an HTTP/1 connection: one answer at a time).
    Off,
    /// The next write starts a burst: it waits.
    Idle,
    /// A burst's first write is waiting for the deferred wake-up.
    Waiting,
    /// The burst is being written; the next flush ends it.
    Writing,
}

impl<T> Coalesced<T> {
    /// Coalesces the writes of `inner` when `on`; otherwise writes go out at once.
    pub fn new(inner: T, on: bool) -> Coalesced<T> {
        let state = if on { Hold::Idle } else { Hold::Off };
        Coalesced { inner, state }
    }

    /// Pending once per burst, with the task's wake-up deferred; ready after that.
    fn wait_turn(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.state {
            Hold::Off => Poll::Ready(()),
            Hold::Idle => {
                self.state = Hold::Waiting;
                // The first poll of `yield_now` defers this task's waker and returns Pending;
                // dropping the future afterwards does not cancel the wake-up.
                let _ = pin!(tokio::task::yield_now()).poll(cx);
                Poll::Pending
            }
            Hold::Waiting | Hold::Writing => {
                self.state = Hold::Writing;
                Poll::Ready(())
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.wait_turn(cx));
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.wait_turn(cx));
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let flushed = Pin::new(&mut self.inner).poll_flush(cx);
        if flushed.is_ready() && self.state == Hold::Writing {
            self.state = Hold::Idle;
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_first_write_of_each_burst_waits_one_turn() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut coalesced = Coalesced::new(near, true);
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);

        // A burst: the first write waits once, then it and the next go out.
        assert!(Pin::new(&mut coalesced)
            .poll_write(&mut cx, b"a")
            .is_pending());
        let write = Pin::new(&mut coalesced).poll_write(&mut cx, b"a");
        assert!(matches!(write, Poll::Ready(Ok(1))));
        let write = Pin::new(&mut coalesced).poll_write(&mut cx, b"b");
        assert!(matches!(write, Poll::Ready(Ok(1))));
        assert!(Pin::new(&mut coalesced).poll_flush(&mut cx).is_ready());

        // The flush ended the burst: the next one waits again.
        assert!(Pin::new(&mut coalesced)
            .poll_write(&mut cx, b"c")
            .is_pending());
        let write = Pin::new(&mut coalesced).poll_write(&mut cx, b"c");
        assert!(matches!(write, Poll::Ready(Ok(1))));

        let mut written = [0u8; 3];
        far.read_exact(&mut written).await.unwrap();
        assert_eq!(&written, b"abc");
    }

    #[tokio::test]
    async fn a_held_write_is_woken_by_the_runtime() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut coalesced = Coalesced::new(near, true);
        // Would hang if the held write were never woken again.
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            coalesced.write_all(b"hello").await.unwrap();
            coalesced.flush().await.unwrap();
            coalesced.write_all(b" world").await.unwrap();
            coalesced.flush().await.unwrap();
        })
        .await
        .expect("the held writes went out");
        let mut written = [0u8; 11];
        far.read_exact(&mut written).await.unwrap();
        assert_eq!(&written, b"hello world");
    }
}
