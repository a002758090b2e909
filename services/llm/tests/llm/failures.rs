//! Failures through the real clients over real HTTP: retries (429 with Retry-After, 5xx, timeouts,
//! connection refused), non-retryable 4xx with the provider's message, streams that break.

use crate::common;

use std::time::{Duration, Instant, SystemTime};

use agentry_fake_model::{FakeConfig, FakeModelServer, FakeReply};
use agentry_llm::{LlmError, StreamEvent};
use common::{Wire, build, call, cases, config, drain, model, server, text_of, user};

#[tokio::test]
async fn rate_limit_with_retry_after_waits_then_succeeds() {
    for (wire, stream) in cases() {
        let server = server();
        server.push(FakeReply::rate_limited(Some("1")));
        server.push(FakeReply::text("after the wait"));
        let started = Instant::now();
        let events = call(&*model(&server, wire, stream), user("x"))
            .await
            .unwrap();
        let waited = started.elapsed();
        let case = format!("{wire:?} stream={stream}");
        assert_eq!(text_of(&events), "after the wait", "{case}");
        assert_eq!(server.request_count(), 2, "{case}");
        // Retry-After (1 s) wins over base_delay (10 ms).
        assert!(
            waited >= Duration::from_millis(950),
            "{case}: waited {waited:?}"
        );
        assert!(waited < Duration::from_secs(8), "{case}: waited {waited:?}");
    }
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_honoured() {
    let server = server();
    let when = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(2));
    server.push(FakeReply::rate_limited(Some(&when)));
    server.push(FakeReply::text("ok"));
    let started = Instant::now();
    let events = call(&*model(&server, Wire::Anthropic, true), user("x"))
        .await
        .unwrap();
    assert_eq!(text_of(&events), "ok");
    assert_eq!(server.request_count(), 2);
    // The date has one-second resolution: between 1 and 2 s from now.
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(900), "waited {waited:?}");
    assert!(waited < Duration::from_secs(8), "waited {waited:?}");
}

#[tokio::test]
async fn rate_limits_that_persist_are_returned_after_the_retries() {
    for wire in common::WIRES {
        let server = server();
        let mut cfg = config(&server, wire, true);
        cfg.max_retries = 1;
        server.push_all([
            FakeReply::rate_limited(Some("0")),
            FakeReply::rate_limited(Some("0")),
        ]);
        let error = call(&*build(&cfg), user("x")).await.unwrap_err();
        assert_eq!(
            error,
            LlmError::RateLimited {
                retry_after: Some(Duration::ZERO)
            },
            "{wire:?}"
        );
        assert_eq!(server.request_count(), 2);
    }
}

#[tokio::test]
async fn server_errors_are_retried_up_to_max_retries_then_returned() {
    for (wire, stream) in cases() {
        let server = server();
        let mut cfg = config(&server, wire, stream);
        cfg.max_retries = 2;
        cfg.base_delay_ms = 20;
        server.push_all([
            FakeReply::error(503, "upstream overloaded"),
            FakeReply::error(500, "internal failure"),
            FakeReply::error(529, "Overloaded"),
            FakeReply::text("never reached"),
        ]);
        let started = Instant::now();
        let error = call(&*build(&cfg), user("x")).await.unwrap_err();
        let case = format!("{wire:?} stream={stream}");
        assert_eq!(
            error,
            LlmError::Server {
                status: 529,
                message: "Overloaded".into()
            },
            "{case}"
        );
        assert_eq!(
            server.request_count(),
            3,
            "{case}: max_retries + 1 requests"
        );
        assert_eq!(server.pending(), 1, "{case}");
        // 20 ms, then 40 ms.
        assert!(started.elapsed() >= Duration::from_millis(60), "{case}");
    }
}

#[tokio::test]
async fn server_error_then_success_is_invisible_to_the_caller() {
    for wire in common::WIRES {
        let server = server();
        server.push_all([
            FakeReply::error(502, "bad gateway"),
            FakeReply::text("fine"),
        ]);
        let events = call(&*model(&server, wire, true), user("x")).await.unwrap();
        assert_eq!(text_of(&events), "fine");
        assert_eq!(server.request_count(), 2);
    }
}

#[tokio::test]
async fn bad_requests_are_not_retried_and_carry_the_provider_message() {
    for (wire, stream) in cases() {
        let server = server();
        server.push_all([
            FakeReply::error(400, "Invalid value for 'temperature': must be <= 2"),
            FakeReply::text("never reached"),
        ]);
        let error = call(&*model(&server, wire, stream), user("x"))
            .await
            .unwrap_err();
        let case = format!("{wire:?} stream={stream}");
        assert_eq!(
            error,
            LlmError::BadRequest {
                status: 400,
                message: "Invalid value for 'temperature': must be <= 2".into()
            },
            "{case}"
        );
        assert!(!error.is_retryable());
        assert_eq!(server.request_count(), 1, "{case}");
    }
}

#[tokio::test]
async fn a_request_the_provider_rejects_is_a_bad_request() {
    // A real validation failure of the fake server (not a scripted error): no `model`.
    let server = server();
    let model = agentry_llm::AnthropicModel::new(
        reqwest::Client::new(),
        &server.base_url_anthropic(),
        None,
        "",
    );
    let error = call(&model, user("x")).await.unwrap_err();
    assert_eq!(
        error,
        LlmError::BadRequest {
            status: 400,
            message: "you must provide a model parameter".into()
        }
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn wrong_keys_are_auth_errors_and_not_retried() {
    for (wire, stream) in cases() {
        let server = FakeModelServer::start(FakeConfig {
            api_key: Some("the-right-key".into()),
            ..FakeConfig::default()
        });
        let error = call(&*model(&server, wire, stream), user("x"))
            .await
            .unwrap_err();
        let expected_message = match wire {
            Wire::OpenAi => "Incorrect API key provided.",
            Wire::Anthropic => "invalid x-api-key",
        };
        assert_eq!(
            error,
            LlmError::Auth {
                status: 401,
                message: expected_message.into()
            },
            "{wire:?} stream={stream}"
        );
        assert_eq!(server.request_count(), 1);

        // The right key gets through.
        server.set_api_key(Some("test-key"));
        let events = call(&*model(&server, wire, stream), user("hello"))
            .await
            .unwrap();
        assert_eq!(text_of(&events), "(scripted) You said: hello");
    }
}

#[tokio::test]
async fn forbidden_is_an_auth_error_with_the_raw_body_message() {
    let server = server();
    server.push(FakeReply::raw_error(403, "{\"error\":\"key disabled\"}"));
    let error = call(&*model(&server, Wire::OpenAi, false), user("x"))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        LlmError::Auth {
            status: 403,
            message: "key disabled".into()
        }
    );
}

#[tokio::test]
async fn a_slow_response_head_times_out_and_is_retried() {
    for (wire, stream) in [(Wire::OpenAi, true), (Wire::Anthropic, false)] {
        let server = server();
        let mut cfg = config(&server, wire, stream);
        cfg.timeout_secs = 1;
        cfg.max_retries = 1;
        server.push_all([
            FakeReply::text("late").with_latency(Duration::from_secs(4)),
            FakeReply::text("late").with_latency(Duration::from_secs(4)),
        ]);
        let started = Instant::now();
        let error = call(&*build(&cfg), user("x")).await.unwrap_err();
        let took = started.elapsed();
        assert_eq!(error, LlmError::Timeout(Duration::from_secs(1)), "{wire:?}");
        assert!(error.is_retryable());
        assert_eq!(server.request_count(), 2, "{wire:?}");
        assert!(took >= Duration::from_secs(2), "{wire:?}: {took:?}");
        assert!(took < Duration::from_secs(4), "{wire:?}: {took:?}");
    }
}

#[tokio::test]
async fn a_stalled_stream_times_out_after_its_first_chunks() {
    for wire in common::WIRES {
        let server = server();
        let mut cfg = config(&server, wire, true);
        cfg.timeout_secs = 1;
        server.push(
            FakeReply::text("first second third")
                .in_chunks(3)
                .with_chunk_delay(Duration::from_secs(3)),
        );
        let stream = build(&cfg).stream(&user("x")).await.unwrap();
        let (events, error) = drain(stream).await;
        assert_eq!(
            error,
            Some(LlmError::Timeout(Duration::from_secs(1))),
            "{wire:?}"
        );
        assert!(
            !events.iter().any(|e| matches!(e, StreamEvent::Done(_))),
            "{wire:?}"
        );
        // No retry once the answer has started.
        assert_eq!(server.request_count(), 1);
    }
}

#[tokio::test]
async fn connection_refused_is_retried_then_reported() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    for wire in common::WIRES {
        let server = server();
        let mut cfg = config(&server, wire, true);
        cfg.base_url = Some(format!("http://127.0.0.1:{port}"));
        cfg.max_retries = 2;
        cfg.base_delay_ms = 50;
        let started = Instant::now();
        let error = call(&*build(&cfg), user("x")).await.unwrap_err();
        match &error {
            LlmError::Connect(message) => {
                assert!(
                    message.to_lowercase().contains("refused"),
                    "{wire:?}: {message}"
                )
            }
            other => panic!("{wire:?}: expected a connect error, got {other:?}"),
        }
        assert!(error.is_retryable());
        // 50 ms + 100 ms of backoff between the three attempts.
        assert!(started.elapsed() >= Duration::from_millis(150), "{wire:?}");
    }
}

#[tokio::test]
async fn a_stream_that_breaks_mid_way_ends_with_an_error_item() {
    for wire in common::WIRES {
        let server = server();
        // message_start/ping (Anthropic) or the role chunk (OpenAI) plus some text, then a break.
        server.push(FakeReply::broken("one two three four five six", 4));
        let stream = model(&server, wire, true).stream(&user("x")).await.unwrap();
        let (events, error) = drain(stream).await;
        assert!(
            !text_of(&events).is_empty(),
            "{wire:?}: some text came before the break"
        );
        assert!(
            !events.iter().any(|e| matches!(e, StreamEvent::Done(_))),
            "{wire:?}"
        );
        match error {
            Some(LlmError::Connect(message)) => {
                assert!(message.contains("stream broke"), "{wire:?}: {message}")
            }
            other => panic!("{wire:?}: expected a broken-stream error, got {other:?}"),
        }
        assert_eq!(server.request_count(), 1);
    }
}

#[tokio::test]
async fn a_stream_that_ends_early_is_a_decode_error() {
    for wire in common::WIRES {
        let server = server();
        server.push(FakeReply::truncated("one two three", 3));
        let stream = model(&server, wire, true).stream(&user("x")).await.unwrap();
        let (events, error) = drain(stream).await;
        assert!(
            !events.iter().any(|e| matches!(e, StreamEvent::Done(_))),
            "{wire:?}"
        );
        match error {
            Some(LlmError::Decode(message)) => {
                assert!(message.contains("ended before"), "{wire:?}: {message}")
            }
            other => panic!("{wire:?}: expected a decode error, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_non_streamed_body_that_breaks_is_an_error_of_the_call() {
    for wire in common::WIRES {
        let server = server();
        server.push(FakeReply::broken("a whole answer", 1));
        let error = call(&*model(&server, wire, false), user("x"))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, LlmError::Connect(m) if m.contains("broke")),
            "{wire:?}: {error:?}"
        );
        server.push(FakeReply::truncated("a whole answer", 1));
        let error = call(&*model(&server, wire, false), user("x"))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, LlmError::Decode(m) if m.contains("not JSON")),
            "{wire:?}: {error:?}"
        );
    }
}

#[tokio::test]
async fn dropping_the_call_cancels_the_retry_wait() {
    let server = server();
    server.push(FakeReply::rate_limited(Some("30")));
    let model = model(&server, Wire::OpenAi, true);
    let started = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_millis(300), model.stream(&user("x"))).await;
    assert!(outcome.is_err(), "the call should still be waiting");
    assert!(started.elapsed() < Duration::from_secs(5));
    // Nothing is retried once the call is gone.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.request_count(), 1);
}
