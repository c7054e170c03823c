//! A service's output into the deployment's log stream: the engine's service logs
//! (`follow=1`, with the task's details), its 8-byte-framed stdout/stderr split into lines,
//! each tagged with the task's instance (`web.2`, from the task's slot). Followed from the
//! moment the service is made or re-attached; a broken stream (dockerd restarted) is opened
//! again a second later from where it stopped.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::docker::Docker;
use crate::logs::{LogHub, LogStream};

/// What a follower writes to.
pub struct Target {
    pub hub: Arc<LogHub>,
    pub deployment_id: String,
    pub process: String,
}

/// Follows the service's logs into the hub until cancelled.
pub fn follow(docker: Docker, service_id: String, target: Target, cancel: CancellationToken) {
    tokio::spawn(async move {
        let mut since = unix_seconds();
        let mut slots: HashMap<String, u32> = HashMap::new();
        loop {
            let path = format!(
                "/services/{service_id}/logs?follow=1&stdout=1&stderr=1&details=1&since={since}"
            );
            let opened = since;
            if let Ok(body) = docker.stream(&path).await {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = read(&docker, body, &target, &mut slots) => {}
                }
                since = opened.max(unix_seconds().saturating_sub(1));
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    });
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Reads frames until the stream ends.
async fn read(
    docker: &Docker,
    mut body: hyper::body::Incoming,
    target: &Target,
    slots: &mut HashMap<String, u32>,
) {
    let mut frames = Frames::default();
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else {
            continue;
        };
        frames.buffer.extend_from_slice(&data);
        while let Some((stream, payload)) = frames.next() {
            for line in String::from_utf8_lossy(&payload).lines() {
                let (task, message) = split_details(line);
                let instance = match task {
                    Some(task) => slot(docker, slots, task).await,
                    None => None,
                }
                .map(|slot| Arc::<str>::from(format!("{}.{slot}", target.process)));
                target.hub.room(&target.deployment_id).await;
                target
                    .hub
                    .append_from(&target.deployment_id, stream, instance.as_ref(), message);
            }
        }
    }
}

/// The slot of a task, asked of the engine once per task.
async fn slot(docker: &Docker, slots: &mut HashMap<String, u32>, task: &str) -> Option<u32> {
    if let Some(slot) = slots.get(task) {
        return Some(*slot);
    }
    #[derive(Deserialize)]
    struct Task {
        #[serde(rename = "Slot", default)]
        slot: u32,
    }
    let found: Task = docker.get(&format!("/tasks/{task}")).await.ok()?;
    slots.insert(task.to_owned(), found.slot);
    Some(found.slot)
}

/// `com.docker.swarm.node.id=…,com.docker.swarm.task.id=… message`: the task id and the
/// message.
fn split_details(line: &str) -> (Option<&str>, &str) {
    let (details, message) = line.split_once(' ').unwrap_or((line, ""));
    let task = details
        .split(',')
        .find_map(|pair| pair.strip_prefix("com.docker.swarm.task.id="));
    match task {
        Some(task) => (Some(task), message),
        None => (None, line),
    }
}

/// The engine's multiplexed stream: `[kind, 0, 0, 0, len (u32 BE)]` then `len` bytes; kind
/// 1 is stdout, 2 stderr.
#[derive(Default)]
struct Frames {
    buffer: Vec<u8>,
}

impl Frames {
    fn next(&mut self) -> Option<(LogStream, Vec<u8>)> {
        let header: [u8; 8] = self.buffer.get(..8)?.try_into().ok()?;
        let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
        if self.buffer.len() < 8 + len {
            return None;
        }
        let payload = self.buffer[8..8 + len].to_vec();
        self.buffer.drain(..8 + len);
        let stream = match header[0] {
            2 => LogStream::Stderr,
            _ => LogStream::Stdout,
        };
        Some((stream, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_cut_where_the_header_says_even_across_reads() {
        let mut frames = Frames::default();
        let mut bytes = vec![2, 0, 0, 0, 0, 0, 0, 5];
        bytes.extend_from_slice(b"oops\n");
        bytes.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 3]);
        frames.buffer.extend_from_slice(&bytes[..15]);
        assert_eq!(frames.next(), Some((LogStream::Stderr, b"oops\n".to_vec())));
        assert_eq!(frames.next(), None);
        frames.buffer.extend_from_slice(&bytes[15..]);
        frames.buffer.extend_from_slice(b"hi\n");
        assert_eq!(frames.next(), Some((LogStream::Stdout, b"hi\n".to_vec())));
        assert!(frames.buffer.is_empty());
    }

    #[test]
    fn the_task_is_read_from_the_details() {
        let line = "com.docker.swarm.node.id=n1,com.docker.swarm.service.id=s1,\
                    com.docker.swarm.task.id=t9 listening on 8080";
        assert_eq!(split_details(line), (Some("t9"), "listening on 8080"));
        assert_eq!(split_details("plain"), (None, "plain"));
    }
}
