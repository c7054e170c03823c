//! An incremental parser for `text/event-stream` (the daemon's log stream): bytes in as they
//! arrive, whole events out. Follows the WHATWG rules the daemon relies on: `field: value`
//! lines, `:` comments (keepalives), `data` lines joined with `\n`, a blank line dispatches.
//! Pure; `client::follow` feeds it.

/// The longest line kept while waiting for its end (log lines are at most 16 KiB).
const MAX_LINE: usize = 4 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `event:`; "message" when the event named none.
    pub name: String,
    pub id: Option<String>,
    pub data: String,
}

#[derive(Debug, thiserror::Error)]
#[error("the event stream sent a line longer than {MAX_LINE} bytes")]
pub struct LineTooLong;

#[derive(Debug, Default)]
pub struct Parser {
    pending: Vec<u8>,
    name: Option<String>,
    id: Option<String>,
    data: Option<String>,
}

impl Parser {
    /// Feeds a chunk and returns the events it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<Event>, LineTooLong> {
        self.pending.extend_from_slice(chunk);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(offset) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let end = start + offset;
            let line = &self.pending[start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let line = String::from_utf8_lossy(line).into_owned();
            start = end + 1;
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.pending.drain(..start);
        if self.pending.len() > MAX_LINE {
            return Err(LineTooLong);
        }
        Ok(events)
    }

    fn line(&mut self, line: &str) -> Option<Event> {
        if line.is_empty() {
            let data = self.data.take();
            let name = self.name.take();
            // An event with no data is not dispatched (the WHATWG rule); its id still counts.
            return data.map(|data| Event {
                name: name.unwrap_or_else(|| "message".into()),
                id: self.id.clone(),
                data,
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.name = Some(value.to_owned()),
            "id" => self.id = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_come_out_whole() {
        let stream = ": connected\nretry: 2000\n\nevent: status\ndata: {\"a\":1}\n\n\
                      id: 7\nevent: log\ndata: {\"seq\":7}\n\n: keepalive\n\nevent: end\ndata: {}\n\n";
        let bytes = stream.as_bytes();
        for split in [1, 3, 10, bytes.len()] {
            let mut parser = Parser::default();
            let mut events = Vec::new();
            for chunk in bytes.chunks(split) {
                events.extend(parser.feed(chunk).unwrap());
            }
            assert_eq!(
                events,
                vec![
                    Event {
                        name: "status".into(),
                        id: None,
                        data: "{\"a\":1}".into()
                    },
                    Event {
                        name: "log".into(),
                        id: Some("7".into()),
                        data: "{\"seq\":7}".into()
                    },
                    Event {
                        name: "end".into(),
                        id: Some("7".into()),
                        data: "{}".into()
                    },
                ],
                "chunks of {split}"
            );
        }
    }

    #[test]
    fn crlf_multi_line_data_and_default_names() {
        let mut parser = Parser::default();
        let events = parser.feed(b"data: one\r\ndata:two\r\n\r\n").unwrap();
        assert_eq!(events[0].name, "message");
        assert_eq!(events[0].data, "one\ntwo");
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut parser = Parser::default();
        let chunk = vec![b'x'; 1 << 20];
        let mut refused = false;
        for _ in 0..5 {
            if parser.feed(&chunk).is_err() {
                refused = true;
                break;
            }
        }
        assert!(refused);
    }
}
