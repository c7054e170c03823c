//! A tunnel to an add-on: one TCP connection carried over a WebSocket as binary frames both
//! ways. The daemon's end (`GET /api/addons/{addonId}/tunnel`, `api::addons::tunnel`)
//! connects to the add-on's address and port from the host, as the readiness probe does, and
//! pumps; the CLI's end (`slipway db proxy|connect`, `client::db`) pumps between a local
//! connection and its WebSocket with the same [`pump`].
//!
//! Bounded: a frame read from either side is written to the other before the next read
//! (the WebSocket's own buffers are capped by [`socket_config`]), so a slow side slows the
//! other instead of filling a queue. When either side ends, both are closed: the WebSocket
//! with a close frame, the TCP connection with a FIN.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::store::addons::AddonRecord;

/// How long connecting to the add-on may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The most bytes read from the TCP side into one frame.
const CHUNK_BYTES: usize = 16 * 1024;
/// The largest frame or message taken from the WebSocket side.
const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// The WebSocket limits of both ends: messages of at most 1 MiB, a write buffer of a few
/// frames.
pub fn socket_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES))
        .write_buffer_size(CHUNK_BYTES * 2)
        .max_write_buffer_size(MAX_MESSAGE_BYTES * 2)
}

/// Connects to `addon`'s address and port; why not, in words.
pub async fn connect(addon: &AddonRecord) -> Result<TcpStream, String> {
    let address = std::net::SocketAddr::from((addon.address, addon.port));
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(error)) => Err(format!("{address}: {error}")),
        Err(_) => Err(format!(
            "{address}: no answer within {} s",
            CONNECT_TIMEOUT.as_secs()
        )),
    }
}

/// Carries bytes between `socket` (binary frames) and `tcp` until either side ends or fails,
/// then closes both. Text frames are ignored; pings are answered by the WebSocket itself.
pub async fn pump<S, T>(socket: WebSocketStream<S>, tcp: T)
where
    S: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    let (mut sink, mut frames) = socket.split();
    let (mut tcp_read, mut tcp_write) = tokio::io::split(tcp);
    {
        let to_tcp = async {
            while let Some(frame) = frames.next().await {
                match frame {
                    Ok(Message::Binary(bytes)) => {
                        if tcp_write.write_all(&bytes).await.is_err() {
                            return;
                        }
                    }
                    Ok(Message::Close(_)) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        let to_socket = async {
            let mut buffer = vec![0u8; CHUNK_BYTES];
            loop {
                match tcp_read.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        let frame = Message::binary(buffer[..n].to_vec());
                        if sink.send(frame).await.is_err() {
                            return;
                        }
                    }
                }
            }
        };
        tokio::select! {
            () = to_tcp => {}
            () = to_socket => {}
        }
    }
    let _ = tcp_write.shutdown().await;
    // A close frame, then the WebSocket's end of the connection (bounded: a peer that never
    // answers the close does not hold the task).
    let _ = tokio::time::timeout(Duration::from_secs(5), sink.close()).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_tungstenite::tungstenite::protocol::Role;

    /// A WebSocket pair over an in-memory pipe, and a pumped "TCP" pipe on the server's side.
    #[tokio::test]
    async fn bytes_go_both_ways_and_either_end_closes_the_other() {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let (tcp_near, mut tcp_far) = tokio::io::duplex(64 * 1024);
        let server = WebSocketStream::from_raw_socket(server_io, Role::Server, None).await;
        let pumped = tokio::spawn(pump(server, tcp_near));
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;

        client
            .send(Message::binary(b"PING\r\n".to_vec()))
            .await
            .unwrap();
        let mut got = [0u8; 6];
        tcp_far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"PING\r\n");
        // More than one chunk comes back, in order, whatever the frames' sizes.
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        tcp_far.write_all(&big).await.unwrap();
        let mut back = Vec::new();
        while back.len() < big.len() {
            match client.next().await.unwrap().unwrap() {
                Message::Binary(bytes) => {
                    assert!(bytes.len() <= CHUNK_BYTES);
                    back.extend_from_slice(&bytes);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(back, big);

        // The add-on's side ends: the client sees a close, the pump ends.
        drop(tcp_far);
        let mut closed = false;
        while let Some(frame) = client.next().await {
            if matches!(frame, Ok(Message::Close(_))) {
                closed = true;
            }
        }
        assert!(closed, "no close frame");
        tokio::time::timeout(Duration::from_secs(5), pumped)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn the_client_closing_ends_the_tcp_connection() {
        let (client_io, server_io) = tokio::io::duplex(1024);
        let (tcp_near, mut tcp_far) = tokio::io::duplex(1024);
        let server = WebSocketStream::from_raw_socket(server_io, Role::Server, None).await;
        let pumped = tokio::spawn(pump(server, tcp_near));
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        client.close(None).await.unwrap();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), tcp_far.read_to_end(&mut rest));
        assert_eq!(read.await.unwrap().unwrap(), 0, "the TCP side saw EOF");
        tokio::time::timeout(Duration::from_secs(5), pumped)
            .await
            .unwrap()
            .unwrap();
    }
}
