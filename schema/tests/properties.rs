//! Properties of the wire types (seed 000, properties 1–6 and 26).

use agentry_schema::error::ErrorCode;
use agentry_schema::events::*;
use agentry_schema::frames::{ClientFrame, FrameError, parse_client_frame};
use proptest::prelude::*;
use serde_json::{Value, json};

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        (-1e12f64..1e12f64).prop_map(|f| json!(f)),
        ".{0,20}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// How a generated bad frame must be refused.
#[derive(Debug, Clone)]
enum BadFrame {
    /// Not JSON at all (the parser's own message says where).
    InvalidJson,
    /// Exactly this error.
    Exactly(FrameError),
    /// A known type whose payload does not fit it.
    InvalidPayload(String),
}

const FRAME_TYPES: [&str; 5] = ["chat", "hitl_decision", "cancel", "ping", "resume"];

fn json_object() -> impl Strategy<Value = serde_json::Map<String, Value>> {
    prop::collection::btree_map("[a-z_]{1,8}", json_value(), 0..4)
        .prop_map(|m| m.into_iter().collect())
}

/// Raw frames that are wrong in one known way, each with the error it must get.
fn bad_frame() -> impl Strategy<Value = (String, BadFrame)> {
    let unknown_type =
        "[a-z_]{0,12}".prop_filter("a known type", |t| !FRAME_TYPES.contains(&t.as_str()));
    prop_oneof![
        // A JSON object cut before its closing brace is never valid JSON.
        json_object().prop_map(|o| {
            let mut raw = Value::Object(o).to_string();
            raw.pop();
            (raw, BadFrame::InvalidJson)
        }),
        json_value()
            .prop_filter("an object", |v| !v.is_object())
            .prop_map(|v| (v.to_string(), BadFrame::Exactly(FrameError::NotAnObject))),
        // No "type", or a "type" that is not a string.
        (
            json_object(),
            proptest::option::of(json_value().prop_filter("a string", |v| !v.is_string()))
        )
            .prop_map(|(mut o, ty)| {
                o.remove("type");
                if let Some(ty) = ty {
                    o.insert("type".into(), ty);
                }
                (
                    Value::Object(o).to_string(),
                    BadFrame::Exactly(FrameError::MissingType),
                )
            }),
        // A string "type" but no "payload" object.
        (
            any::<prop::sample::Index>(),
            unknown_type.clone(),
            any::<bool>(),
            proptest::option::of(json_value().prop_filter("an object", |v| !v.is_object()))
        )
            .prop_map(|(i, other, known, payload)| {
                let ty = if known {
                    i.get(&FRAME_TYPES).to_string()
                } else {
                    other
                };
                let mut o = serde_json::Map::new();
                o.insert("type".into(), json!(ty));
                if let Some(p) = payload {
                    o.insert("payload".into(), p);
                }
                (
                    Value::Object(o).to_string(),
                    BadFrame::Exactly(FrameError::MissingPayload),
                )
            }),
        (unknown_type, json_object()).prop_map(|(ty, payload)| {
            let raw = json!({"type": ty, "payload": payload}).to_string();
            (raw, BadFrame::Exactly(FrameError::UnknownType(ty)))
        }),
        // Known types with payloads that cannot be theirs.
        json_value()
            .prop_filter("a string", |v| !v.is_string())
            .prop_map(|message| {
                let raw = json!({"type": "chat", "payload": {"message": message}}).to_string();
                (raw, BadFrame::InvalidPayload("chat".into()))
            }),
        json_object().prop_map(|mut payload| {
            payload.remove("request_id");
            let raw = json!({"type": "hitl_decision", "payload": payload}).to_string();
            (raw, BadFrame::InvalidPayload("hitl_decision".into()))
        }),
        json_value()
            .prop_filter("a u64", |v| !v.is_u64())
            .prop_map(|after| {
                let raw = json!({"type": "resume", "payload": {"after_seq": after}}).to_string();
                (raw, BadFrame::InvalidPayload("resume".into()))
            }),
    ]
}

fn tool_status() -> impl Strategy<Value = ToolStatus> {
    prop_oneof![Just(ToolStatus::Success), Just(ToolStatus::Error)]
}

fn done_status() -> impl Strategy<Value = DoneStatus> {
    prop_oneof![
        Just(DoneStatus::Completed),
        Just(DoneStatus::Cancelled),
        Just(DoneStatus::Rejected),
        Just(DoneStatus::Failed),
        Just(DoneStatus::Timeout),
        Just(DoneStatus::Interrupted),
    ]
}

fn payload() -> impl Strategy<Value = EventPayload> {
    let text = (".{0,40}", any::<bool>()).prop_map(|(c, f)| EventPayload::text(c, f));
    let call = ("[a-z_]{1,20}", json_value(), "[a-z0-9_]{1,12}").prop_map(|(n, a, id)| {
        EventPayload::ToolCall(ToolCallData {
            tool_name: n,
            tool_args: a,
            tool_call_id: id,
        })
    });
    let result = ("[a-z0-9_]{1,12}", json_value(), tool_status()).prop_map(|(id, r, s)| {
        EventPayload::ToolResult(ToolResultData {
            tool_call_id: id,
            result: r,
            status: s,
        })
    });
    let approval = (
        "[a-z0-9-]{1,36}",
        prop::collection::vec(
            (
                "[a-z_]{1,12}",
                json_value(),
                ".{0,20}",
                proptest::option::of("[a-z0-9]{1,8}"),
            ),
            1..3,
        ),
    )
        .prop_map(|(id, reqs)| {
            EventPayload::HitlRequest(HitlRequestData {
                request_id: id,
                kind: HitlKind::Approval,
                action_requests: reqs
                    .into_iter()
                    .map(|(name, args, description, tool_call_id)| ActionRequest {
                        name,
                        args,
                        description,
                        tool_call_id,
                    })
                    .collect(),
                question: None,
            })
        });
    let question = (
        "[a-z0-9-]{1,36}",
        ".{0,30}",
        prop::collection::vec("[a-z]{1,6}", 0..4),
        0u64..10_000,
        proptest::option::of(json_value()),
    )
        .prop_map(|(id, text, options, timeout, schema)| {
            EventPayload::HitlRequest(HitlRequestData {
                request_id: id,
                kind: HitlKind::Question,
                action_requests: vec![],
                question: Some(Question {
                    text,
                    question_type: "text".into(),
                    options,
                    timeout,
                    schema,
                    function_call: None,
                }),
            })
        });
    let todos = prop::collection::vec(
        (
            ".{0,20}",
            prop_oneof![
                Just(TodoStatus::Pending),
                Just(TodoStatus::InProgress),
                Just(TodoStatus::Completed)
            ],
        ),
        0..5,
    )
    .prop_map(|items| {
        EventPayload::TodoUpdate(TodoUpdateData {
            todos: items
                .into_iter()
                .map(|(content, status)| Todo { content, status })
                .collect(),
        })
    });
    let file = (
        prop_oneof![
            Just(FileOperationKind::Read),
            Just(FileOperationKind::Write),
            Just(FileOperationKind::Edit)
        ],
        "[a-z/._]{1,30}",
        (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()),
        proptest::option::of(".{0,60}"),
        tool_status(),
    )
        .prop_map(|(operation, file_path, (r, w, a, d), diff, status)| {
            EventPayload::FileOperation(FileOperationData {
                operation,
                file_path,
                metrics: FileMetrics {
                    lines_read: r.into(),
                    lines_written: w.into(),
                    lines_added: a.into(),
                    lines_removed: d.into(),
                },
                diff,
                status,
            })
        });
    let progress = (
        "[a-z0-9]{1,8}",
        0f64..1e6,
        proptest::option::of(0f64..1e6),
        proptest::option::of(".{0,10}"),
    )
        .prop_map(|(id, p, t, m)| {
            EventPayload::Progress(ProgressData {
                tool_call_id: id,
                progress: p,
                total: t,
                message: m,
            })
        });
    let error = (
        "[a-z_]{1,20}",
        ".{0,40}",
        any::<bool>(),
        proptest::option::of(json_value()),
    )
        .prop_map(|(code, msg, rec, details)| {
            EventPayload::Error(ErrorData {
                error: msg,
                error_code: code,
                recoverable: rec,
                details,
            })
        });
    let done = (
        done_status(),
        proptest::option::of("[a-z_]{1,20}"),
        0u64..1 << 40,
        0u64..1 << 40,
    )
        .prop_map(|(s, r, i, o)| EventPayload::Done(DoneData::new(s, r, TokenUsage::new(i, o))));
    prop_oneof![
        text, call, result, approval, question, todos, file, progress, error, done
    ]
}

fn event() -> impl Strategy<Value = ExecutionEvent> {
    (
        any::<u64>(),
        "[a-f0-9-]{0,36}",
        "[a-f0-9-]{0,36}",
        0f64..4e9,
        payload(),
    )
        .prop_map(
            |(seq, session_id, run_id, timestamp, payload)| ExecutionEvent {
                seq,
                session_id,
                // Every other event of a random stream belongs to a child run.
                parent_run_id: (seq % 2 == 1).then(|| format!("{run_id}-parent")),
                run_id,
                timestamp,
                payload,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_event_round_trips_through_json_unchanged(ev in event()) {
        let wire = ev.to_json();
        let back: ExecutionEvent = serde_json::from_str(&wire).unwrap();
        prop_assert_eq!(back, ev);
    }

    #[test]
    fn every_serialized_event_is_valid_json_with_type_and_timestamp(ev in event()) {
        let v: Value = serde_json::from_str(&ev.to_json()).unwrap();
        let obj = v.as_object().unwrap();
        prop_assert_eq!(obj.get("event_type").and_then(Value::as_str), Some(ev.event_type()));
        prop_assert!(obj.get("timestamp").and_then(Value::as_f64).is_some());
        prop_assert!(obj.get("seq").and_then(Value::as_u64).is_some());
        prop_assert!(obj.get("data").map(Value::is_object).unwrap_or(false));
    }

    #[test]
    fn required_fields_are_present_per_event_type(ev in event()) {
        let v: Value = serde_json::from_str(&ev.to_json()).unwrap();
        let data = &v["data"];
        let required: &[&str] = match ev.event_type() {
            "text" => &["content", "is_final"],
            "tool_call" => &["tool_name", "tool_args", "tool_call_id"],
            "tool_result" => &["tool_call_id", "result", "status"],
            "hitl_request" => &["request_id", "kind"],
            "todo_update" => &["todos"],
            "file_operation" => &["operation", "file_path", "metrics", "status"],
            "progress" => &["tool_call_id", "progress"],
            "error" => &["error", "error_code", "recoverable"],
            "done" => &["status", "cancelled", "token_usage"],
            other => panic!("unexpected event type {other}"),
        };
        for field in required {
            prop_assert!(data.get(field).is_some(), "{} lacks {}", ev.event_type(), field);
        }
    }

    #[test]
    fn a_bad_client_frame_gives_a_typed_error_never_a_panic((raw, expected) in bad_frame()) {
        // Each bad frame is built to fail one way; the parser must name exactly that way, with
        // the error code the client sees.
        let err = match parse_client_frame(&raw) {
            Ok(frame) => return Err(TestCaseError::fail(format!("{raw:?} was accepted as {frame:?}"))),
            Err(e) => e,
        };
        match (&expected, &err) {
            (BadFrame::InvalidJson, FrameError::InvalidJson(reason)) => {
                prop_assert!(!reason.is_empty());
                prop_assert_eq!(err.code(), ErrorCode::InvalidJson);
            }
            (BadFrame::Exactly(want), got) => {
                prop_assert_eq!(got, want);
                prop_assert_eq!(err.code(), ErrorCode::InvalidFrame);
            }
            (BadFrame::InvalidPayload(want_type), FrameError::InvalidPayload { frame_type, reason }) => {
                prop_assert_eq!(frame_type, want_type);
                prop_assert!(!reason.is_empty());
                prop_assert_eq!(err.code(), ErrorCode::InvalidFrame);
            }
            (want, got) => {
                return Err(TestCaseError::fail(format!("{raw:?}: expected {want:?}, got {got:?}")));
            }
        }
        prop_assert!(!err.to_string().is_empty());
    }

    #[test]
    fn frames_missing_type_or_payload_are_refused(
        ty in proptest::option::of(prop_oneof![Just("chat".to_string()), "[a-z_]{0,10}"]),
        payload in proptest::option::of(json_value()),
        extra in json_value(),
    ) {
        let mut obj = serde_json::Map::new();
        if let Some(t) = &ty { obj.insert("type".into(), json!(t)); }
        if let Some(p) = &payload { obj.insert("payload".into(), p.clone()); }
        obj.insert("extra".into(), extra);
        let raw = Value::Object(obj).to_string();
        let res = parse_client_frame(&raw);
        if ty.is_none() {
            prop_assert_eq!(res, Err(FrameError::MissingType));
        } else if !payload.as_ref().map(Value::is_object).unwrap_or(false) {
            prop_assert_eq!(res, Err(FrameError::MissingPayload));
        } else if let Ok(frame) = res {
            prop_assert_eq!(frame.type_name(), ty.unwrap());
        }
    }

    #[test]
    fn well_formed_frames_round_trip(message in ".{0,50}", enqueue in any::<bool>(), after in any::<u64>()) {
        for frame in [
            ClientFrame::Chat(agentry_schema::frames::ChatFrame { message: message.clone(), enqueue }),
            ClientFrame::Resume(agentry_schema::frames::ResumeFrame { after_seq: after }),
        ] {
            let raw = serde_json::to_string(&frame).unwrap();
            prop_assert_eq!(parse_client_frame(&raw).unwrap(), frame);
        }
    }
}

/// Found by the round-trip property in CI: an explicit `null` schema or error `details` read
/// back as absent. Absent and `null` are now kept apart.
#[test]
fn explicit_null_and_absent_optional_values_stay_apart() {
    let with_null = r#"{"event_type":"hitl_request","seq":0,"session_id":"","run_id":"","timestamp":0.0,
        "data":{"request_id":"-","kind":"question","question":{"text":"","question_type":"text","timeout":0,"schema":null}}}"#;
    let without = with_null.replace(r#","schema":null"#, "");
    let schema_of = |json: &str| match serde_json::from_str::<ExecutionEvent>(json)
        .unwrap()
        .payload
    {
        EventPayload::HitlRequest(h) => h.question.unwrap().schema,
        other => panic!("not a question: {other:?}"),
    };
    assert_eq!(schema_of(with_null), Some(Value::Null));
    assert_eq!(schema_of(&without), None);

    let error = ExecutionEvent {
        seq: 1,
        session_id: "s".into(),
        run_id: "r".into(),
        parent_run_id: None,
        timestamp: 1.5,
        payload: EventPayload::Error(ErrorData {
            error: "e".into(),
            error_code: "c".into(),
            recoverable: true,
            details: Some(Value::Null),
        }),
    };
    let json = serde_json::to_string(&error).unwrap();
    assert!(json.contains(r#""details":null"#), "{json}");
    assert_eq!(
        serde_json::from_str::<ExecutionEvent>(&json).unwrap(),
        error
    );
}
