//! What a run saves after every step so a restarted process can resume it.

use agentry_llm::ToolCall;
use agentry_schema::api::ClientTool;
use agentry_schema::events::{Todo, TokenUsage};
use agentry_schema::ids::UserId;
use serde::{Deserialize, Serialize};

use super::state::RunState;

pub const CHECKPOINT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunCheckpoint {
    pub version: u32,
    /// Model calls made so far.
    pub step: u32,
    /// Where to continue: `Reason` or `Act`.
    pub node: RunState,
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
    /// The W3C `traceparent` of the run's span (when traces are exported): a run resumed after
    /// a restart continues this trace as a child of it, so the execution's `trace_id` names
    /// the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
    /// The functions the run's client declared (the Responses API's function tools): a resumed
    /// run offers them again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_tools: Vec<ClientTool>,
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
