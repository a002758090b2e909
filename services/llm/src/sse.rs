//! A small incremental parser for `text/event-stream` bodies (the WHATWG server-sent events
//! format) as the model providers send them.
//!
//! Bytes arrive in arbitrary chunks: a line, a `data:` payload, a CRLF pair or a UTF-8 character
//! may be split across two chunks. [`SseParser::feed`] buffers what it cannot use yet and returns
//! every event completed by the chunk. Comments (`: ping`) are skipped, `data:` lines of one event
//! are joined with `\n`, and an event is dispatched on a blank line.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field; `None` for the default `message` type.
    pub event: Option<String>,
    pub data: String,
}

#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`, so a leading `\n` belongs to that line ending.
    after_cr: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed the next chunk of the body; returns the events it completed, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for &byte in chunk {
            if self.after_cr {
                self.after_cr = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\n' => self.end_line(&mut events),
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut events);
                }
                _ => self.line.push(byte),
            }
        }
        events
    }

    /// The body ended. A final event that lacks its blank line is still dispatched: some servers
    /// close the stream right after the last `data:` line.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut events = Vec::new();
        if !self.line.is_empty() {
            self.end_line(&mut events);
        }
        self.end_line(&mut events);
        events.pop()
    }

    fn end_line(&mut self, events: &mut Vec<SseEvent>) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            if self.has_data {
                events.push(SseEvent {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data),
                });
            }
            self.event = None;
            self.data.clear();
            self.has_data = false;
            return;
        }
        let line = String::from_utf8_lossy(&line);
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.find(':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (&line[..], ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            // `id` and `retry` matter for browser reconnection, not for a model answer.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(body: &str, piece: usize) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        for chunk in body.as_bytes().chunks(piece) {
            events.extend(parser.feed(chunk));
        }
        events.extend(parser.finish());
        events
    }

    #[test]
    fn events_survive_any_chunking_and_line_endings() {
        let body = "event: message_start\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n: keep-alive\n\ndata: héllo wörld\n\ndata: [DONE]\r\r";
        let expected = vec![
            SseEvent {
                event: Some("message_start".into()),
                data: "{\"a\":\n1}".into(),
            },
            SseEvent {
                event: None,
                data: "héllo wörld".into(),
            },
            SseEvent {
                event: None,
                data: "[DONE]".into(),
            },
        ];
        for piece in 1..body.len() {
            assert_eq!(parse_in_pieces(body, piece), expected, "piece size {piece}");
        }
    }

    #[test]
    fn last_event_without_blank_line_is_dispatched_at_the_end() {
        assert_eq!(
            parse_in_pieces("data: a\n\ndata: b", 3),
            vec![
                SseEvent {
                    event: None,
                    data: "a".into()
                },
                SseEvent {
                    event: None,
                    data: "b".into()
                }
            ]
        );
    }

    #[test]
    fn events_without_data_are_not_dispatched() {
        assert_eq!(parse_in_pieces("event: ping\n\n:comment\n\n", 4), vec![]);
    }

    #[test]
    fn data_without_space_and_empty_data() {
        assert_eq!(
            parse_in_pieces("data:x\n\ndata\n\n", 2),
            vec![
                SseEvent {
                    event: None,
                    data: "x".into()
                },
                SseEvent {
                    event: None,
                    data: "".into()
                }
            ]
        );
    }
}
