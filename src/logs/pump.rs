//! Reading a child's output into the hub: line by line as it is produced, with backpressure
//! (the pipe fills and the child's writes block while the hub's pending lines are at their
//! bound). Called by the pipeline for build steps and by the supervisor for live apps.

use std::sync::Arc;

use super::{LogHub, LogStream, MAX_MESSAGE_BYTES};

/// Copies a child's output into the hub line by line as it is produced; a line longer than
/// [`MAX_MESSAGE_BYTES`] is split; a live app's lines are tagged with its `instance`.
/// Returns at end of file.
pub async fn pump_lines<R: tokio::io::AsyncRead + Unpin>(
    reader: R,
    hub: Arc<LogHub>,
    deployment_id: String,
    stream: LogStream,
    instance: Option<Arc<str>>,
) {
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::with_capacity(16 * 1024, reader);
    let mut line = Vec::with_capacity(256);
    loop {
        let buffer = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buffer) => buffer,
        };
        let (consumed, complete) = match buffer.iter().position(|&b| b == b'\n') {
            Some(newline) => {
                line.extend_from_slice(&buffer[..newline]);
                (newline + 1, true)
            }
            None => {
                line.extend_from_slice(buffer);
                (buffer.len(), false)
            }
        };
        reader.consume(consumed);
        if complete || line.len() >= MAX_MESSAGE_BYTES {
            hub.room(&deployment_id).await;
            let text = String::from_utf8_lossy(&line);
            hub.append_from(&deployment_id, stream, instance.as_ref(), &text);
            line.clear();
        }
    }
    if !line.is_empty() {
        let text = String::from_utf8_lossy(&line);
        hub.append_from(&deployment_id, stream, instance.as_ref(), &text);
    }
}
