//! A response body that counts the bytes it passes on into its project's
//! [`ProjectMetrics`]: the app's streamed response, wrapped by `from_upstream` when request
//! metrics are on. One atomic add per data frame; no allocation of its own.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::http_util::BodyError;
use crate::metrics::ProjectMetrics;

pub(super) struct Counted {
    inner: Incoming,
    metrics: Arc<ProjectMetrics>,
}

impl Counted {
    pub(super) fn new(inner: Incoming, metrics: Arc<ProjectMetrics>) -> Counted {
        Counted { inner, metrics }
    }
}

impl Body for Counted {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.metrics.add_response_bytes(data.len() as u64);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(Box::new(error)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
