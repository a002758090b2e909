//! [`McpTool`]: one tool of an MCP server as a [`Tool`] the agent loop can call.
//!
//! The agent sees it as `<server>__<tool>`. Model APIs accept function names matching
//! `^[a-zA-Z0-9_-]{1,64}$`, so other characters in the server's tool name become `_`, and a name
//! that would be longer than 64 characters is cut and given a short hash of the real name so it
//! stays unique. The real name is kept in [`ToolSpec::service_tool`] and is what the server is
//! called with.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::config::TOOL_NAME_SEPARATOR;
use super::connection::{McpConnection, RemoteTool};
use super::error::McpError;
use agentry_tools::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

/// Longest tool name the model APIs accept.
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// `<server>__<tool>`, made acceptable to model APIs (see the module docs). Deterministic.
pub fn agent_tool_name(server: &str, tool: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let full = format!("{}{TOOL_NAME_SEPARATOR}{}", clean(server), clean(tool));
    if full.len() <= MAX_TOOL_NAME_LEN && !tool.is_empty() {
        return full;
    }
    // Cut (all ASCII now, so byte slicing is safe) and add a hash of the real name.
    let suffix = format!("_{:08x}", fnv1a(tool.as_bytes()) as u32);
    let keep = MAX_TOOL_NAME_LEN
        .saturating_sub(suffix.len())
        .min(full.len());
    format!("{}{suffix}", &full[..keep])
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// A remote tool bound to its connection.
pub struct McpTool {
    spec: ToolSpec,
    conn: McpConnection,
    remote: RemoteTool,
}

impl McpTool {
    /// Wrap `remote` (listed by `conn`) under `name` (normally [`agent_tool_name`]).
    pub fn new(conn: McpConnection, remote: RemoteTool, name: String) -> Self {
        let server = conn.name().to_string();
        let description = remote
            .description
            .clone()
            .or_else(|| remote.title.clone())
            .unwrap_or_else(|| format!("Tool {} of MCP server {server}", remote.name));
        let input_schema = if remote.input_schema.is_object() {
            remote.input_schema.clone()
        } else {
            json!({"type": "object"})
        };
        let spec = ToolSpec {
            name,
            description,
            input_schema,
            service: server,
            service_tool: remote.name.clone(),
            requires_approval: remote.hints.needs_approval(),
            timeout: conn.config().timeout(),
        };
        Self { spec, conn, remote }
    }

    /// The tool as the server described it.
    pub fn remote(&self) -> &RemoteTool {
        &self.remote
    }

    pub fn connection(&self) -> &McpConnection {
        &self.conn
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let started = std::time::Instant::now();
        let result = self.conn.call_tool(&self.remote.name, args, ctx).await;
        // By outcome only: server names are tenants' own, so they would make the series unbounded.
        let outcome = match &result {
            Ok(out) if out.is_error => "tool_error",
            Ok(_) => "ok",
            Err(McpError::Timeout { .. }) => "timeout",
            Err(McpError::Cancelled) => "cancelled",
            Err(e) if e.is_transport() => "transport_error",
            Err(_) => "error",
        };
        metrics::counter!("agentry_mcp_calls_total", "outcome" => outcome).increment(1);
        metrics::histogram!("agentry_mcp_call_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        result.map_err(|e| {
            // This tool stays bound to its connection: once that is dead, every retry would
            // fail the same way at once, so the loop must not retry (see `Disconnected`).
            let e = if e.is_transport() && self.conn.is_closed() {
                ToolError::Disconnected(e.to_string())
            } else {
                ToolError::from(e)
            };
            naming_the_tool(e, &self.spec.service, &self.remote.name)
        })
    }
}

/// `e` with the tool named beside its server: `MCP server "fs", tool "read_file": …`.
pub(crate) fn naming_the_tool(e: ToolError, server: &str, tool: &str) -> ToolError {
    let name = |m: String| {
        let at = format!("MCP server {server:?}");
        if m.contains(&at) {
            m.replacen(&at, &format!("{at}, tool {tool:?}"), 1)
        } else {
            format!("{at}, tool {tool:?}: {m}")
        }
    };
    match e {
        ToolError::Unavailable(m) => ToolError::Unavailable(name(m)),
        ToolError::Disconnected(m) => ToolError::Disconnected(name(m)),
        ToolError::NotFound(m) => ToolError::NotFound(name(m)),
        ToolError::Failed { message, retryable } => ToolError::Failed {
            message: name(message),
            retryable,
        },
        other => other,
    }
}

/// The server's tools as agent tools, named `<server>__<tool>` (unique within the server even
/// when two real names sanitize alike).
pub async fn tools_for(conn: &McpConnection) -> Result<Vec<Arc<dyn Tool>>, McpError> {
    let remote = conn.list_tools().await?;
    Ok(wrap_tools(conn, remote))
}

/// [`tools_for`] on a tool list already fetched.
pub fn wrap_tools(conn: &McpConnection, remote: Vec<RemoteTool>) -> Vec<Arc<dyn Tool>> {
    let mut taken = HashSet::new();
    let mut out: Vec<Arc<dyn Tool>> = Vec::with_capacity(remote.len());
    for tool in remote {
        let base = agent_tool_name(conn.name(), &tool.name);
        let mut name = base.clone();
        let mut n = 2;
        while !taken.insert(name.clone()) {
            let suffix = format!("_{n}");
            let keep = MAX_TOOL_NAME_LEN
                .saturating_sub(suffix.len())
                .min(base.len());
            name = format!("{}{suffix}", &base[..keep]);
            n += 1;
        }
        out.push(Arc::new(McpTool::new(conn.clone(), tool, name)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn errors_name_the_server_the_tool_and_the_cause() {
        let e = McpError::TransportClosed {
            server: "fs".into(),
            reason: "the server stopped answering".into(),
        };
        let t = naming_the_tool(ToolError::from(e), "fs", "read_file");
        assert_eq!(
            t.to_string(),
            "unavailable: MCP server \"fs\", tool \"read_file\": connection closed: the server stopped answering"
        );
        let t = naming_the_tool(ToolError::failed("boom"), "fs", "read_file");
        assert_eq!(t.to_string(), "MCP server \"fs\", tool \"read_file\": boom");
        // Without a message of its own there is nothing to add to.
        assert_eq!(
            naming_the_tool(ToolError::Cancelled, "fs", "x"),
            ToolError::Cancelled
        );
    }

    #[test]
    fn names_are_server_double_underscore_tool() {
        assert_eq!(agent_tool_name("everything", "echo"), "everything__echo");
        assert_eq!(agent_tool_name("ev", "get-sum"), "ev__get-sum");
        assert_eq!(agent_tool_name("fs", "read.file v2"), "fs__read_file_v2");
        assert_eq!(agent_tool_name("fs", "ü"), "fs___");
    }

    #[test]
    fn long_names_are_cut_with_a_hash_and_stay_distinct() {
        let a = agent_tool_name("server", &"a".repeat(100));
        let b = agent_tool_name("server", &format!("{}b", "a".repeat(99)));
        assert_eq!(a.len(), MAX_TOOL_NAME_LEN);
        assert!(a.starts_with("server__aaa"));
        assert_ne!(a, b);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn agent_tool_names_are_always_acceptable_to_model_apis(
            server in "[a-zA-Z0-9_-]{1,64}",
            tool in "\\PC{0,80}",
        ) {
            let name = agent_tool_name(&server, &tool);
            prop_assert!(!name.is_empty() && name.len() <= MAX_TOOL_NAME_LEN);
            prop_assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
        }

        #[test]
        fn agent_tool_names_keep_valid_short_names_unchanged(
            server in "[a-z0-9-]{1,20}",
            tool in "[a-zA-Z0-9_-]{1,30}",
        ) {
            prop_assert_eq!(agent_tool_name(&server, &tool), format!("{server}__{tool}"));
        }
    }
}
