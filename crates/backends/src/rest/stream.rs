//! Streamed webhook answers: JSON lines (`application/x-ndjson`,
//! `application/jsonl`) and Server-Sent Events (`text/event-stream`). Each
//! complete line (each SSE `data:` line) is reported as an output chunk as
//! it arrives; the final result is assembled from the same bytes.

use joch_core::OutputChunks;
use serde_json::Value;

/// How a response streams, by its media type; `None` if it does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Streaming {
    JsonLines,
    EventStream,
}

impl Streaming {
    pub(super) fn of(media_type: Option<&str>) -> Option<Self> {
        let essence = joch_core::artifact::media_essence(media_type?);
        match essence.as_str() {
            "application/x-ndjson" | "application/jsonl" | "application/jsonlines" => {
                Some(Self::JsonLines)
            }
            "text/event-stream" => Some(Self::EventStream),
            _ => None,
        }
    }

    /// The chunk a complete line carries, if any: a JSON line as its value
    /// (text when it is not JSON); an SSE `data:` line as its data.
    fn chunk_of(self, line: &[u8]) -> Option<Value> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let payload = match self {
            Self::JsonLines => line,
            Self::EventStream => {
                let data = line.strip_prefix(b"data:")?;
                data.strip_prefix(b" ").unwrap_or(data)
            }
        };
        if payload.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        Some(
            serde_json::from_slice(payload)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(payload).into_owned())),
        )
    }

    /// The final result of a whole event stream: its data, in order. (JSON
    /// lines stay text, as any other line-oriented answer does.)
    pub(super) fn assemble_events(body: &[u8]) -> Value {
        Value::Array(
            body.split(|b| *b == b'\n')
                .filter_map(|line| Self::EventStream.chunk_of(line))
                .collect(),
        )
    }
}

/// Splits a body into lines as it arrives and reports each complete one.
pub(super) struct LineReporter<'a> {
    streaming: Streaming,
    sink: &'a dyn OutputChunks,
    /// Where the first line not yet reported starts in the body.
    reported_up_to: usize,
}

impl<'a> LineReporter<'a> {
    pub(super) fn new(streaming: Streaming, sink: &'a dyn OutputChunks) -> Self {
        Self {
            streaming,
            sink,
            reported_up_to: 0,
        }
    }

    /// Reports the lines `body` completed since the last look.
    pub(super) fn advance(&mut self, body: &[u8]) {
        while let Some(end) = body[self.reported_up_to..].iter().position(|b| *b == b'\n') {
            let line = &body[self.reported_up_to..self.reported_up_to + end];
            if let Some(chunk) = self.streaming.chunk_of(line) {
                self.sink.chunk(chunk);
            }
            self.reported_up_to += end + 1;
        }
    }

    /// Reports a last line that had no newline.
    pub(super) fn finish(mut self, body: &[u8]) {
        self.advance(body);
        let rest = &body[self.reported_up_to..];
        if let Some(chunk) = self.streaming.chunk_of(rest) {
            self.sink.chunk(chunk);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;

    #[derive(Debug, Default)]
    struct Seen(Mutex<Vec<Value>>);

    impl OutputChunks for Seen {
        fn chunk(&self, data: Value) {
            self.0.lock().unwrap().push(data);
        }
    }

    #[test]
    fn lines_are_reported_once_complete_whatever_the_packet_boundaries() {
        let seen = Seen::default();
        let mut reporter = LineReporter::new(Streaming::JsonLines, &seen);
        let mut body = Vec::new();
        for piece in [
            &b"{\"a\":"[..],
            b"1}\n{\"a\"",
            b":2}\r\n\nplain text\n{\"a\":3}",
        ] {
            body.extend_from_slice(piece);
            reporter.advance(&body);
        }
        assert_eq!(
            seen.0.lock().unwrap().len(),
            3,
            "the last line is not complete yet"
        );
        reporter.finish(&body);
        assert_eq!(
            *seen.0.lock().unwrap(),
            [
                json!({"a": 1}),
                json!({"a": 2}),
                json!("plain text"),
                json!({"a": 3})
            ]
        );
    }

    #[test]
    fn server_sent_events_report_their_data_lines_only() {
        let body = b"event: progress\ndata: {\"done\": 1}\n\n: comment\ndata: almost\n\n";
        let seen = Seen::default();
        LineReporter::new(Streaming::EventStream, &seen).finish(body);
        assert_eq!(
            *seen.0.lock().unwrap(),
            [json!({"done": 1}), json!("almost")]
        );
        assert_eq!(
            Streaming::assemble_events(body),
            json!([{"done": 1}, "almost"])
        );
        assert_eq!(
            Streaming::of(Some("text/event-stream; charset=utf-8")),
            Some(Streaming::EventStream)
        );
        assert_eq!(Streaming::of(Some("application/json")), None);
    }
}
