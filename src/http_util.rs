//! Small shared HTTP pieces: the one response body type every handler returns, helpers to
//! build bodies, and percent-decoding. Used by the API, the router, the proxy and static
//! serving.

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full};

/// Error type carried by streamed bodies.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// The response body type of every handler in the daemon.
pub type Body = BoxBody<Bytes, BodyError>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// `%XX` escapes decoded (`+` stays `+`); `None` for a malformed escape.
pub fn percent_decode(input: &[u8]) -> Option<Vec<u8>> {
    let mut output = Vec::with_capacity(input.len());
    let mut index = 0;
    while index < input.len() {
        match input[index] {
            b'%' => {
                let high = crate::ids::hex_digit(*input.get(index + 1)?)?;
                let low = crate::ids::hex_digit(*input.get(index + 2)?)?;
                output.push(high << 4 | low);
                index += 3;
            }
            byte => {
                output.push(byte);
                index += 1;
            }
        }
    }
    Some(output)
}

pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// Wraps a hyper body (a request or an upstream response) as a [`Body`].
pub fn from_incoming(body: hyper::body::Incoming) -> Body {
    body.map_err(|error| Box::new(error) as BodyError).boxed()
}

/// A streamed response body fed by a channel (server-sent events).
pub struct ChannelBody(pub tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BodyError>>> {
        self.0
            .poll_recv(cx)
            .map(|item| item.map(|bytes| Ok(hyper::body::Frame::data(bytes))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode(b"a%20b%2Fc").unwrap(), b"a b/c");
        assert_eq!(percent_decode(b"A%5f").unwrap(), b"A_");
        assert_eq!(percent_decode(b"100%"), None);
        assert_eq!(percent_decode(b"%zz"), None);
    }
}
