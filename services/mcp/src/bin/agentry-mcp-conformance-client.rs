//! The client under test for `@modelcontextprotocol/conformance client`.
//!
//! The conformance runner starts a scenario server, then runs this program with the server's URL
//! as its last argument and the scenario's name in `MCP_CONFORMANCE_SCENARIO`. It connects with
//! Agentry's MCP client ([`McpConnection`], the same code the agent uses), does what the scenario
//! expects of a client, and exits 0 on success. The runner judges the protocol traffic.
//!
//! ```text
//! conformance client --command target/debug/agentry-mcp-conformance-client --scenario tools_call
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use agentry_mcp::client::{ClientHooks, McpConnection, McpError, McpServerConfig};
use agentry_schema::events::{EventPayload, Question};
use agentry_schema::ids::{RunId, SessionId, TenantId, UserId};
use agentry_tools::tool::{
    EventSink, InteractionError, ToolContext, UserInteraction, WorkspaceInfo,
};
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Accepts every elicitation with an empty form, so the schema's defaults are what is sent.
struct AcceptDefaults;

#[async_trait]
impl UserInteraction for AcceptDefaults {
    async fn ask(&self, question: Question) -> Result<Value, InteractionError> {
        eprintln!("elicitation: {}", question.text);
        Ok(json!({}))
    }
}

struct PrintEvents;

impl EventSink for PrintEvents {
    fn emit(&self, payload: EventPayload) {
        eprintln!("event: {payload:?}");
    }
}

fn context(call: &str) -> ToolContext {
    ToolContext {
        tenant_id: TenantId::new(),
        user_id: UserId::new(),
        role: agentry_schema::tenancy::Role::Member,
        custom_role: None,
        session_id: SessionId::new(),
        run_id: RunId::new(),
        tool_call_id: call.to_string(),
        assistant_id: None,
        workspace: WorkspaceInfo {
            root: std::env::temp_dir(),
            quota_bytes: 0,
            sandbox: Default::default(),
        },
        cancel: CancellationToken::new(),
        interaction: Arc::new(AcceptDefaults),
        events: Arc::new(PrintEvents),
    }
}

/// Arguments for a tool the scenario lists: numbers for `add_numbers`, nothing otherwise.
fn arguments_for(tool: &str) -> Value {
    match tool {
        "add_numbers" => json!({"a": 5, "b": 3}),
        _ => json!({}),
    }
}

async fn run(url: &str, scenario: &str) -> Result<(), String> {
    let mut config = McpServerConfig::http("conformance", url);
    config.timeout_secs = 20;
    config.connect_timeout_secs = 20;
    let conn = McpConnection::connect(
        &config,
        ClientHooks::default(),
        &agentry_mcp::client::StdioLaunch::unconfined(std::env::temp_dir()),
    )
    .await
    .map_err(|e| e.to_string())?;
    eprintln!(
        "connected: protocol {} to {:?}",
        conn.protocol_version(),
        conn.server_details().name
    );
    let tools = conn.list_tools().await.map_err(|e| e.to_string())?;
    eprintln!(
        "tools: {:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    // What to call: the calls the scenario asks for in its context (conformance 0.2), a
    // scenario's own instructions, or every tool it offers. `initialize` only needs the
    // handshake.
    let calls: Vec<(String, Value)> = match scenario_calls() {
        Some(calls) => calls,
        None if scenario == "initialize" => Vec::new(),
        // Round-trip the focal tool's input schema as received, so the scenario sees what the
        // client kept of it (JSON Schema 2020-12 keywords).
        None if scenario == "json-schema-2020-12-preservation" => {
            let focal = tools
                .iter()
                .find(|t| t.name == "json_schema_2020_12_tool")
                .ok_or("the scenario did not list json_schema_2020_12_tool")?;
            vec![(
                "json_schema_echo".to_string(),
                json!({"schema": focal.input_schema}),
            )]
        }
        None => tools
            .iter()
            .map(|t| (t.name.clone(), arguments_for(&t.name)))
            .collect(),
    };
    for (name, arguments) in calls {
        match conn.call_tool(&name, arguments, &context(&name)).await {
            Ok(out) => eprintln!("{name} -> {}", out.content),
            // An error answer is an answer: the scenario judges the traffic.
            Err(e @ McpError::Server { .. }) => eprintln!("{name} -> error answer: {e}"),
            Err(e) => return Err(format!("{name}: {e}")),
        }
    }
    conn.close().await;
    Ok(())
}

/// The tool calls in `MCP_CONFORMANCE_CONTEXT` (`{"toolCalls": [{"name", "arguments"}]}`), when
/// the scenario gives any.
fn scenario_calls() -> Option<Vec<(String, Value)>> {
    let context: Value =
        serde_json::from_str(&std::env::var("MCP_CONFORMANCE_CONTEXT").ok()?).ok()?;
    let calls = context.get("toolCalls")?.as_array()?;
    Some(
        calls
            .iter()
            .filter_map(|c| {
                Some((
                    c.get("name")?.as_str()?.to_string(),
                    c.get("arguments").cloned().unwrap_or_else(|| json!({})),
                ))
            })
            .collect(),
    )
}

#[tokio::main]
async fn main() -> ExitCode {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: agentry-mcp-conformance-client <server-url>");
        return ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    match run(&url, &scenario).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scenario {scenario}: {e}");
            ExitCode::FAILURE
        }
    }
}
