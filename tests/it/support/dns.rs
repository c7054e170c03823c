//! A tiny authoritative DNS server for the tests, on `127.0.0.1:<any>` over UDP: it answers
//! TXT questions from a table the test fills ([`TestDns::set_txt`]), NODATA for every other
//! question about a name it knows and NXDOMAIN for the rest. Enough for hickory-resolver to
//! look up `_slipway-challenge.<name>`; nothing leaves loopback.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::UdpSocket;

type Records = Arc<Mutex<HashMap<String, Vec<String>>>>;

pub struct TestDns {
    pub addr: SocketAddr,
    records: Records,
    task: tokio::task::JoinHandle<()>,
}

impl TestDns {
    pub async fn start() -> TestDns {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let records: Records = Arc::default();
        let table = Arc::clone(&records);
        let task = tokio::spawn(async move {
            let mut buffer = [0u8; 1500];
            loop {
                let Ok((len, peer)) = socket.recv_from(&mut buffer).await else {
                    return;
                };
                if let Some(answer) = answer(&buffer[..len], &table) {
                    let _ = socket.send_to(&answer, peer).await;
                }
            }
        });
        TestDns {
            addr,
            records,
            task,
        }
    }

    /// `[domains]` keys that make a daemon ask this server.
    pub fn nameserver_toml(&self) -> String {
        format!("nameserver = \"{}\"\n", self.addr)
    }

    /// Publishes TXT `value` at `name` (replacing what was there).
    pub fn set_txt(&self, name: &str, value: &str) {
        self.records
            .lock()
            .unwrap()
            .insert(name.to_ascii_lowercase(), vec![value.to_owned()]);
    }
}

impl Drop for TestDns {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The response to one query, or `None` for a packet that is not one.
fn answer(query: &[u8], records: &Records) -> Option<Vec<u8>> {
    if query.len() < 12 || u16::from_be_bytes([query[4], query[5]]) != 1 {
        return None;
    }
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = *query.get(at)? as usize;
        at += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(at..at + len)?).to_ascii_lowercase());
        at += len;
    }
    let question_end = at + 4;
    let qtype = u16::from_be_bytes([*query.get(at)?, *query.get(at + 1)?]);
    let name = labels.join(".");
    let texts = records.lock().unwrap().get(&name).cloned();
    let answers: Vec<String> = match (&texts, qtype) {
        (Some(texts), 16) => texts.clone(),
        _ => Vec::new(),
    };
    let rcode: u8 = if texts.is_some() { 0 } else { 3 };
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(&query[..2]);
    out.extend_from_slice(&[0x84 | (query[2] & 0x01), 0x80 | rcode]);
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&(answers.len() as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(query.get(12..question_end)?);
    for text in answers {
        out.extend_from_slice(&[0xc0, 0x0c, 0, 16, 0, 1, 0, 0, 0, 0]);
        out.extend_from_slice(&((text.len() + 1) as u16).to_be_bytes());
        out.push(text.len() as u8);
        out.extend_from_slice(text.as_bytes());
    }
    Some(out)
}
