//! Client frames on the WebSocket: `{"type": …, "payload": {…}}` (DESIGN §5).
//!
//! [`parse_client_frame`] turns raw text into a typed [`ClientFrame`] or a typed [`FrameError`];
//! it never panics, whatever the input.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ErrorCode;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload", rename_all = "snake_case")]
pub enum ClientFrame {
    Chat(ChatFrame),
    HitlDecision(HitlDecisionFrame),
    Cancel(CancelFrame),
    Ping(PingFrame),
    Resume(ResumeFrame),
}

impl ClientFrame {
    pub fn type_name(&self) -> &'static str {
        match self {
            ClientFrame::Chat(_) => "chat",
            ClientFrame::HitlDecision(_) => "hitl_decision",
            ClientFrame::Cancel(_) => "cancel",
            ClientFrame::Ping(_) => "ping",
            ClientFrame::Resume(_) => "resume",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatFrame {
    pub message: String,
    /// Queue the message behind an active run instead of refusing it with `run_in_progress`.
    #[serde(default)]
    pub enqueue: bool,
}

/// A decision on a pending `hitl_request`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HitlDecisionFrame {
    pub request_id: String,
    #[serde(flatten)]
    pub decision: Decision,
}

/// What a human decided. `type` is `approve`, `edit`, `reject` or `answer`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Decision {
    Approve {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// Approve with new arguments for the tool.
    Edit {
        #[cfg_attr(feature = "openapi", schema(value_type = Object))]
        args: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    Reject {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The answer to a question (kind `question`). `answer` is text, or JSON for elicitation.
    Answer {
        // Any JSON value: a string for a question, an object for an elicitation.
        #[cfg_attr(feature = "openapi", schema(value_type = Value))]
        answer: Value,
    },
}

impl Decision {
    pub fn kind(&self) -> &'static str {
        match self {
            Decision::Approve { .. } => "approve",
            Decision::Edit { .. } => "edit",
            Decision::Reject { .. } => "reject",
            Decision::Answer { .. } => "answer",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CancelFrame {
    /// Optional, for clients that send it (the seed protocol does); the socket's session wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PingFrame {}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResumeFrame {
    /// The last `seq` the client saw; everything after it is replayed.
    #[serde(default)]
    pub after_seq: u64,
}

/// Why a client frame was refused. Each maps to one error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("frame must be a JSON object with \"type\" and \"payload\"")]
    NotAnObject,
    #[error("frame has no \"type\" string field")]
    MissingType,
    #[error("frame has no \"payload\" object field")]
    MissingPayload,
    #[error("unknown frame type {0:?}; expected chat, hitl_decision, cancel, ping or resume")]
    UnknownType(String),
    #[error("invalid payload for {frame_type:?}: {reason}")]
    InvalidPayload { frame_type: String, reason: String },
    #[error("frame of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
}

impl FrameError {
    pub fn code(&self) -> ErrorCode {
        match self {
            FrameError::InvalidJson(_) => ErrorCode::InvalidJson,
            FrameError::TooLarge { .. } => ErrorCode::PayloadTooLarge,
            _ => ErrorCode::InvalidFrame,
        }
    }
}

const FRAME_TYPES: [&str; 5] = ["chat", "hitl_decision", "cancel", "ping", "resume"];

/// Parse one text frame from a client.
pub fn parse_client_frame(text: &str) -> Result<ClientFrame, FrameError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| FrameError::InvalidJson(e.to_string()))?;
    let Value::Object(map) = &value else {
        return Err(FrameError::NotAnObject);
    };
    let frame_type = match map.get("type") {
        Some(Value::String(t)) => t.clone(),
        _ => return Err(FrameError::MissingType),
    };
    match map.get("payload") {
        Some(Value::Object(_)) => {}
        _ => return Err(FrameError::MissingPayload),
    }
    if !FRAME_TYPES.contains(&frame_type.as_str()) {
        return Err(FrameError::UnknownType(frame_type));
    }
    serde_json::from_value(value).map_err(|e| FrameError::InvalidPayload {
        frame_type,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_every_frame_type() {
        assert_eq!(
            parse_client_frame(r#"{"type":"chat","payload":{"message":"hi"}}"#).unwrap(),
            ClientFrame::Chat(ChatFrame {
                message: "hi".into(),
                enqueue: false
            })
        );
        assert_eq!(
            parse_client_frame(
                r#"{"type":"hitl_decision","payload":{"request_id":"r1","type":"edit","args":{"a":1}}}"#
            )
            .unwrap(),
            ClientFrame::HitlDecision(HitlDecisionFrame {
                request_id: "r1".into(),
                decision: Decision::Edit {
                    args: json!({"a":1}),
                    message: None
                }
            })
        );
        assert!(matches!(
            parse_client_frame(r#"{"type":"cancel","payload":{}}"#).unwrap(),
            ClientFrame::Cancel(_)
        ));
        assert!(matches!(
            parse_client_frame(r#"{"type":"ping","payload":{}}"#).unwrap(),
            ClientFrame::Ping(_)
        ));
        assert_eq!(
            parse_client_frame(r#"{"type":"resume","payload":{"after_seq":42}}"#).unwrap(),
            ClientFrame::Resume(ResumeFrame { after_seq: 42 })
        );
    }

    #[test]
    fn bad_frames_get_typed_errors() {
        assert!(matches!(
            parse_client_frame("{nope"),
            Err(FrameError::InvalidJson(_))
        ));
        assert_eq!(parse_client_frame("[1]"), Err(FrameError::NotAnObject));
        assert_eq!(
            parse_client_frame(r#"{"payload":{}}"#),
            Err(FrameError::MissingType)
        );
        assert_eq!(
            parse_client_frame(r#"{"type":"chat"}"#),
            Err(FrameError::MissingPayload)
        );
        assert_eq!(
            parse_client_frame(r#"{"type":"dance","payload":{}}"#),
            Err(FrameError::UnknownType("dance".into()))
        );
        assert!(matches!(
            parse_client_frame(r#"{"type":"chat","payload":{}}"#),
            Err(FrameError::InvalidPayload { .. })
        ));
        assert!(matches!(
            parse_client_frame(
                r#"{"type":"hitl_decision","payload":{"request_id":"x","type":"maybe"}}"#
            ),
            Err(FrameError::InvalidPayload { .. })
        ));
    }
}
