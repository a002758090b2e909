//! Properties (proptest, >= 100 cases each): retry delays, the scripted model's determinism and
//! its `/tool` lines, SSE parsing under any chunking.

use std::time::Duration;

use agentry_llm::sse::{SseEvent, events};
use agentry_llm::{
    ChatMessage, ChatRequest, MAX_DELAY, MAX_RETRY_AFTER, RetryPolicy, ScriptedAction, ToolCall,
    retry_delay, scripted_reply, split_words,
};
use proptest::prelude::*;
use serde_json::{Map, Value};

fn policy(base_ms: u64, max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        base_delay: Duration::from_millis(base_ms),
        max_delay: MAX_DELAY,
        max_retry_after: MAX_RETRY_AFTER,
    }
}

/// The backoff step before jitter: `base * 2^n`, capped at [`MAX_DELAY`].
fn step(base_ms: u64, n: u32) -> Duration {
    Duration::from_millis(base_ms)
        .checked_mul(1u32.checked_shl(n).unwrap_or(u32::MAX))
        .unwrap_or(Duration::MAX)
        .min(MAX_DELAY)
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        ".{0,20}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn json_object() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(".{0,8}", json_value(), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>()))
}

fn message() -> impl Strategy<Value = ChatMessage> {
    let text = prop_oneof![
        ".{0,40}",
        "/tool [a-z_]{1,10} \\{\"a\": [0-9]{1,3}\\}",
        "/echo .{0,20}",
        "/sleep [0-9]{1,3}",
        "/tool [a-z]{1,5} \\{oops",
    ];
    prop_oneof![
        text.clone()
            .prop_map(|content| ChatMessage::User { content }),
        (text.clone(), "[a-z]{1,8}", json_object()).prop_map(|(content, name, arguments)| {
            ChatMessage::Assistant {
                content,
                tool_calls: vec![ToolCall {
                    id: format!("id_{name}"),
                    name,
                    arguments,
                }],
            }
        }),
        ("[a-z]{1,8}", text, any::<bool>()).prop_map(|(name, content, is_error)| {
            ChatMessage::Tool {
                images: Vec::new(),
                tool_call_id: format!("id_{name}"),
                name,
                content,
                is_error,
            }
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn retry_delays_are_bounded_doubling_steps_plus_jitter(
        base_ms in 0u64..10_000,
        max_retries in 0u32..12,
    ) {
        let p = policy(base_ms, max_retries);
        let delays: Vec<Duration> = p.delays().collect();
        // Exactly max_retries waits, then the backoff is spent.
        prop_assert_eq!(delays.len(), max_retries as usize);
        for (n, d) in delays.iter().enumerate() {
            let step = step(base_ms, n as u32);
            let slack = step / 100_000 + Duration::from_micros(1);
            prop_assert!(*d + slack >= step, "retry {}: {:?} < {:?}", n, d, step);
            prop_assert!(*d <= step * 2 + slack, "retry {}: {:?} > 2 × {:?}", n, d, step);
        }
        // The loops that count their own attempts get the same bounds.
        for attempt in 0..20u32 {
            let step = step(base_ms, attempt);
            let d = retry_delay(&p, attempt, None);
            let slack = step / 100_000 + Duration::from_micros(1);
            prop_assert!(d + slack >= step && d <= step * 2 + slack, "attempt {}: {:?}", attempt, d);
        }
    }

    #[test]
    fn retry_delays_are_jittered(base_ms in 10u64..10_000, attempt in 0u32..8) {
        // Forty draws of the same wait: with a jitter in [0, step) they cannot all agree.
        let p = policy(base_ms, 3);
        let first = retry_delay(&p, attempt, None);
        prop_assert!((0..40).any(|_| retry_delay(&p, attempt, None) != first));
    }

    #[test]
    fn retry_after_wins_and_is_capped_but_never_adds_a_retry(
        base_ms in 0u64..10_000,
        max_retries in 0u32..6,
        retry_after_ms in 0u64..10_000_000,
    ) {
        let p = policy(base_ms, max_retries);
        let retry_after = Duration::from_millis(retry_after_ms);
        let mut steps = p.delays();
        for _ in 0..max_retries {
            let delay = p.next_delay(steps.next(), Some(retry_after));
            prop_assert_eq!(delay, Some(retry_after.min(MAX_RETRY_AFTER)));
        }
        prop_assert_eq!(p.next_delay(steps.next(), Some(retry_after)), None);
        let delay = retry_delay(&p, 0, Some(retry_after));
        prop_assert_eq!(delay, retry_after.min(MAX_RETRY_AFTER));
    }

    #[test]
    fn scripted_model_is_deterministic(
        messages in prop::collection::vec(message(), 0..6),
        system in proptest::option::of(".{0,20}"),
    ) {
        let request = ChatRequest { system, messages, ..ChatRequest::default() };
        let first = scripted_reply(&request);
        let again = scripted_reply(&request.clone());
        prop_assert_eq!(&first, &again);
        // Tool call ids never repeat within one reply.
        if let ScriptedAction::ToolCalls(calls) = &first.action {
            let mut ids: Vec<_> = calls.iter().map(|c| c.id.clone()).collect();
            ids.sort();
            ids.dedup();
            prop_assert_eq!(ids.len(), calls.len());
        }
    }

    #[test]
    fn a_tool_line_yields_exactly_that_call(
        name in "[A-Za-z_][A-Za-z0-9_.-]{0,30}",
        arguments in json_object(),
        before in "[a-z ]{0,20}",
        after in "[a-z ]{0,20}",
    ) {
        let content = format!("{before}\n/tool {name} {arguments}\n{after}");
        let request = ChatRequest {
            messages: vec![ChatMessage::User { content }],
            ..ChatRequest::default()
        };
        let reply = scripted_reply(&request);
        prop_assert_eq!(
            reply.action,
            ScriptedAction::ToolCalls(vec![ToolCall { id: "call_1".into(), name, arguments }])
        );
    }

    #[test]
    fn text_deltas_rejoin_to_the_text(text in ".{0,80}") {
        prop_assert_eq!(split_words(&text).concat(), text);
    }

    #[test]
    fn sse_events_survive_any_chunking(
        payloads in prop::collection::vec("[^\r\n]{0,30}", 1..6),
        cuts in prop::collection::vec(1usize..16, 1..40),
        crlf in any::<bool>(),
    ) {
        let eol = if crlf { "\r\n" } else { "\n" };
        let body: String = payloads
            .iter()
            .map(|p| format!("event: e{eol}data: {p}{eol}: comment{eol}{eol}"))
            .collect();
        let bytes = body.as_bytes();
        let mut chunks: Vec<Result<bytes::Bytes, std::io::Error>> = Vec::new();
        let mut at = 0;
        for cut in cuts.iter().cycle() {
            if at >= bytes.len() {
                break;
            }
            let end = (at + cut).min(bytes.len());
            chunks.push(Ok(bytes::Bytes::copy_from_slice(&bytes[at..end])));
            at = end;
        }
        let events: Vec<SseEvent> = futures::executor::block_on(
            futures::StreamExt::collect::<Vec<_>>(events(futures::stream::iter(chunks))),
        )
        .into_iter()
        .map(|e| e.expect("a valid stream"))
        .collect();
        // `data: <p>`: the one space after the colon is dropped, the rest is kept.
        let expected: Vec<SseEvent> = payloads
            .iter()
            .map(|p| SseEvent { event: Some("e".into()), data: p.clone() })
            .collect();
        prop_assert_eq!(events, expected);
    }
}
