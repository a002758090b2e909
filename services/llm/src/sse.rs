//! `text/event-stream` bodies as the model providers send them, parsed by `sse-stream`.
//!
//! [`events`] adds what we need on top of the library: the final event of a body that ends
//! without its blank line is still dispatched (some servers close the stream right after the
//! last `data:` line; `sse-stream` alone drops it), events without `data` (`event: ping` with
//! nothing else) are skipped, and a failure of the body itself comes back as the body's own
//! error so the caller can tell a stalled stream from a broken one.

use bytes::Bytes;
use futures::{Stream, StreamExt};

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field; `None` for the default `message` type.
    pub event: Option<String>,
    pub data: String,
}

/// Why the event stream stopped early.
#[derive(Debug)]
pub enum SseError<E> {
    /// The body failed (E is the body stream's own error).
    Body(E),
    /// The bytes are not a valid event stream (a line without a colon, an unknown field, a
    /// repeated `event:` line, bytes that are not UTF-8).
    Malformed(String),
}

/// The events of `body`, in order. Ends after the first error item.
pub fn events<S, E>(body: S) -> impl Stream<Item = Result<SseEvent, SseError<E>>> + Send
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    // Two line ends after the body: finish an unterminated line, then dispatch the event it
    // belongs to. After a complete body they are empty lines, which dispatch nothing.
    let body = body.chain(futures::stream::once(async {
        Ok(Bytes::from_static(b"\n\n"))
    }));
    sse_stream::SseStream::from_bytes_stream(body)
        .scan(false, |failed, item| {
            // sse-stream drops the rest of a chunk it could not parse: stop at the first error.
            if *failed {
                return futures::future::ready(None);
            }
            *failed = item.is_err();
            futures::future::ready(Some(item))
        })
        .filter_map(|item| {
            futures::future::ready(match item {
                Ok(sse) => sse.data.map(|data| {
                    Ok(SseEvent {
                        event: sse.event,
                        data,
                    })
                }),
                Err(sse_stream::Error::Body(e)) => Some(Err(match e.downcast::<E>() {
                    Ok(e) => SseError::Body(*e),
                    Err(other) => SseError::Malformed(other.to_string()),
                })),
                Err(other) => Some(Err(SseError::Malformed(other.to_string()))),
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `body` cut into pieces of `piece` bytes, parsed to the end.
    pub(crate) fn parse_in_pieces(body: &str, piece: usize) -> Vec<SseEvent> {
        let chunks: Vec<Result<Bytes, std::io::Error>> = body
            .as_bytes()
            .chunks(piece)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        futures::executor::block_on(
            events(futures::stream::iter(chunks))
                .map(|e| e.expect("a valid stream"))
                .collect(),
        )
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
        for body in [
            "data: a\n\ndata: b",
            "data: a\n\ndata: b\n",
            "data: a\n\ndata: b\r",
        ] {
            for piece in 1..body.len() {
                assert_eq!(
                    parse_in_pieces(body, piece),
                    vec![
                        SseEvent {
                            event: None,
                            data: "a".into()
                        },
                        SseEvent {
                            event: None,
                            data: "b".into()
                        }
                    ],
                    "{body:?} in pieces of {piece}"
                );
            }
        }
    }

    #[test]
    fn events_without_data_are_not_dispatched() {
        assert_eq!(parse_in_pieces("event: ping\n\n:comment\n\n", 4), vec![]);
    }

    #[test]
    fn data_without_space_and_empty_data() {
        assert_eq!(
            parse_in_pieces("data:x\n\ndata:\n\n", 2),
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

    #[test]
    fn a_malformed_stream_and_a_broken_body_end_with_their_error() {
        // What came in earlier chunks arrives; the bad line ends the stream with an error.
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"data: a\n\n")),
            Ok(Bytes::from_static(b"not a field\n\ndata: b\n\n")),
        ];
        let items: Vec<_> =
            futures::executor::block_on(events(futures::stream::iter(chunks)).collect());
        assert_eq!(items.len(), 2, "{items:?}");
        assert_eq!(items[0].as_ref().unwrap().data, "a");
        assert!(matches!(items[1], Err(SseError::Malformed(_))), "{items:?}");

        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"data: a\n\n")),
            Err(std::io::Error::other("reset")),
        ];
        let items: Vec<_> =
            futures::executor::block_on(events(futures::stream::iter(chunks)).collect());
        assert_eq!(items.len(), 2, "{items:?}");
        assert!(
            matches!(&items[1], Err(SseError::Body(e)) if e.to_string() == "reset"),
            "{items:?}"
        );
    }
}
