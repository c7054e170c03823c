//! Bodies of the routes no token opens (`RouteSpec::public`). A webhook's body is read only
//! once its handler has found the project, the provider and the project's secret, into a
//! buffer of its own (never pieces of the connection's read buffer), with a cap
//! (`limits.public_body_kb`), a deadline (`limits.public_body_timeout_s`) and one budget of
//! bytes shared by every such body being read at once (`limits.public_bodies_kb`), so that
//! anonymous uploads can neither fill the daemon's memory nor be held open. Deploy hooks read
//! no body at all. Called by `git::webhook`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::BodyExt;
use hyper::body::Body;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{ApiError, ErrorCode};
use crate::config::Limits;

/// The cap, deadline and shared budget of public bodies, from `[limits]`.
pub struct PublicBodies {
    budget: Arc<Semaphore>,
    max_bytes: usize,
    deadline: Duration,
}

/// A body read whole. Its buffer counts against the shared budget until it is dropped.
pub struct PublicBody {
    pub bytes: Vec<u8>,
    held: Option<OwnedSemaphorePermit>,
}

impl PublicBodies {
    pub fn new(limits: &Limits) -> PublicBodies {
        PublicBodies {
            budget: Arc::new(Semaphore::new(limits.public_bodies_kb * 1024)),
            max_bytes: limits.public_body_kb * 1024,
            deadline: Duration::from_secs(limits.public_body_timeout_s),
        }
    }

    /// Reads `body`: 413 `PAYLOAD_TOO_LARGE` past the cap (from `Content-Length` before a byte
    /// is read), 408 `REQUEST_TIMEOUT` past the deadline, 429 `RATE_LIMITED` when the bodies
    /// being read already hold the whole budget.
    pub async fn read<B>(&self, headers: &HeaderMap, body: B) -> Result<PublicBody, ApiError>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        let declared = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_bytes as u64) {
            return Err(self.too_large());
        }
        match tokio::time::timeout(self.deadline, self.collect(body, declared)).await {
            Ok(result) => result,
            Err(_) => Err(ApiError::new(
                ErrorCode::RequestTimeout,
                format!(
                    "the request body did not arrive within {} s",
                    self.deadline.as_secs_f64()
                ),
            )),
        }
    }

    async fn collect<B>(&self, mut body: B, declared: Option<u64>) -> Result<PublicBody, ApiError>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        let mut read = PublicBody {
            bytes: Vec::new(),
            held: None,
        };
        if let Some(length) = declared {
            self.grow(&mut read, length as usize)?;
        }
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|error| {
                ApiError::new(
                    ErrorCode::InvalidBody,
                    format!("could not read the request body: {error}"),
                )
            })?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let length = read.bytes.len() + data.len();
            if length > self.max_bytes {
                return Err(self.too_large());
            }
            if length > read.bytes.capacity() {
                // Double, as a Vec would, but within the cap and paid for first.
                let doubled = (read.bytes.capacity() * 2).min(self.max_bytes);
                self.grow(&mut read, length.max(doubled))?;
            }
            read.bytes.extend_from_slice(&data);
        }
        Ok(read)
    }

    /// Takes budget for a buffer of `capacity` bytes, then makes the buffer that large.
    fn grow(&self, read: &mut PublicBody, capacity: usize) -> Result<(), ApiError> {
        let held = read.held.as_ref().map_or(0, |permit| permit.num_permits());
        if capacity > held {
            let more = u32::try_from(capacity - held).map_err(|_| self.too_large())?;
            let permit = self
                .budget
                .clone()
                .try_acquire_many_owned(more)
                .map_err(|_| self.busy())?;
            match &mut read.held {
                Some(held) => held.merge(permit),
                None => read.held = Some(permit),
            }
        }
        read.bytes.reserve_exact(capacity - read.bytes.len());
        Ok(())
    }

    fn too_large(&self) -> ApiError {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "request body is larger than the limit of {} bytes for routes without a token",
                self.max_bytes
            ),
        )
    }

    fn busy(&self) -> ApiError {
        let retry = self.deadline.as_secs().max(1);
        ApiError::new(
            ErrorCode::RateLimited,
            format!(
                "the daemon is reading as many bodies of routes without a token as it holds at once; retry in {retry} s"
            ),
        )
        .with_header("retry-after", retry.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Full, StreamBody};
    use hyper::body::Frame;

    fn bodies(max_bytes: usize, budget: usize) -> PublicBodies {
        PublicBodies {
            budget: Arc::new(Semaphore::new(budget)),
            max_bytes,
            deadline: Duration::from_millis(200),
        }
    }

    fn length(n: usize) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_LENGTH, n.into());
        headers
    }

    #[tokio::test]
    async fn the_cap_holds_with_and_without_a_length() {
        let bodies = bodies(100, 1000);
        let read = bodies
            .read(&length(100), Full::new(Bytes::from(vec![7; 100])))
            .await
            .unwrap();
        assert_eq!(read.bytes, vec![7; 100]);
        let declared = bodies.read(&length(101), Full::new(Bytes::new())).await;
        assert_eq!(declared.err().unwrap().code, ErrorCode::PayloadTooLarge);
        let sent = bodies
            .read(&HeaderMap::new(), Full::new(Bytes::from(vec![7; 101])))
            .await;
        assert_eq!(sent.err().unwrap().code, ErrorCode::PayloadTooLarge);
    }

    #[tokio::test]
    async fn bodies_share_one_budget_until_dropped() {
        let bodies = bodies(600, 1000);
        let first = bodies
            .read(&length(600), Full::new(Bytes::from(vec![1; 600])))
            .await
            .unwrap();
        // Without a length the buffer grows, and is paid for, as the bytes arrive.
        let chunks = (0..6)
            .map(|_| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(vec![2; 100]))));
        let refused = bodies
            .read(
                &HeaderMap::new(),
                StreamBody::new(futures_util::stream::iter(chunks)),
            )
            .await;
        let refused = refused.err().unwrap();
        assert_eq!(refused.code, ErrorCode::RateLimited);
        drop(first);
        assert_eq!(bodies.budget.available_permits(), 1000);
        let chunks = (0..6)
            .map(|_| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(vec![2; 100]))));
        let second = bodies
            .read(
                &HeaderMap::new(),
                StreamBody::new(futures_util::stream::iter(chunks)),
            )
            .await
            .unwrap();
        assert_eq!(second.bytes.len(), 600);
        assert_eq!(second.bytes.capacity(), 600);
    }

    #[tokio::test]
    async fn a_body_that_never_ends_times_out_and_gives_its_budget_back() {
        let bodies = bodies(600, 1000);
        let first = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(Frame::data(
            Bytes::from(vec![3; 10]),
        ))]);
        let never = futures_util::stream::pending();
        let body = StreamBody::new(futures_util::StreamExt::chain(first, never));
        let error = bodies.read(&length(500), body).await.err().unwrap();
        assert_eq!(error.code, ErrorCode::RequestTimeout);
        assert_eq!(bodies.budget.available_permits(), 1000);
    }
}
