//! What a run saves after every step so a restarted process can resume it.

use agentry_llm::ToolCall;
use agentry_schema::events::{Todo, TokenUsage};
use agentry_schema::ids::UserId;
use serde::{Deserialize, Serialize};

/// The run's state machine (DESIGN §4): `reason -> (act | approve | respond)`, `act -> reason`,
/// `approve -> reason`, `respond -> end`. `approve` is part of acting on one call, so a
/// checkpoint records `Reason` or `Act`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Node {
    Reason,
    Act,
    Approve,
    Respond,
    End,
}

impl Node {
    pub fn as_str(self) -> &'static str {
        match self {
            Node::Reason => "reason",
            Node::Act => "act",
            Node::Approve => "approve",
            Node::Respond => "respond",
            Node::End => "end",
        }
    }

    /// The allowed transitions of the run state machine.
    pub fn can_go_to(self, next: Node) -> bool {
        matches!(
            (self, next),
            (Node::Reason, Node::Act)
                | (Node::Reason, Node::Respond)
                | (Node::Reason, Node::End)
                | (Node::Act, Node::Approve)
                | (Node::Act, Node::Act)
                | (Node::Act, Node::Reason)
                | (Node::Act, Node::End)
                | (Node::Approve, Node::Act)
                | (Node::Approve, Node::Reason)
                | (Node::Approve, Node::End)
                | (Node::Respond, Node::End)
        )
    }
}

pub const CHECKPOINT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunCheckpoint {
    pub version: u32,
    /// Model calls made so far.
    pub step: u32,
    /// Where to continue.
    pub node: Node,
    /// Id of the first stored message of the conversation the model sees; resuming reloads the
    /// session's messages from here (every message of the run is stored as it happens).
    pub window_start: i64,
    /// Tool calls of the last model answer that have not run yet, in order.
    pub pending: Vec<ToolCall>,
    pub todos: Vec<Todo>,
    pub usage: TokenUsage,
    /// The tool call that was started when this checkpoint was saved (written just before the
    /// call runs). On resume, if its result is not stored, the call is not run again: the
    /// model gets an `interrupted` result (at most once, DESIGN §4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<InFlight>,
}

/// A tool call being run, as the audit will record it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InFlight {
    pub call: ToolCall,
    /// The arguments it runs with (an approval may have edited them).
    pub args: serde_json::Value,
    pub approved: Option<bool>,
    pub approved_by: Option<UserId>,
}

impl RunCheckpoint {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    pub fn from_json(v: &serde_json::Value) -> Result<Self, String> {
        let cp: RunCheckpoint = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
        if cp.version != CHECKPOINT_VERSION {
            return Err(format!(
                "checkpoint version {} is not supported",
                cp.version
            ));
        }
        Ok(cp)
    }
}
