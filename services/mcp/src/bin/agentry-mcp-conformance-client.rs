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
//!
//! The `auth/*` scenarios run the OAuth client (`client::oauth`) the way the platform does, with
//! the browser step done here: the scenario's authorization server approves at once, so the
//! client fetches the authorization URL itself (without following the redirect), takes `code`,
//! `state` and `iss` from the `Location`, and finishes the sign-in. A 403 `insufficient_scope`
//! signs in again with the scope asked for (at most [`MAX_SIGN_INS`] sign-ins in all).

use std::process::ExitCode;
use std::sync::Arc;

use agentry_mcp::client::oauth::{self, MemoryTokenStore, OAuthTokenStore};
use agentry_mcp::client::{
    ClientHooks, HttpAuth, McpConnection, McpError, McpServerConfig, McpTransportConfig,
    OAuthConfig, OAuthGrant,
};
use agentry_schema::events::{EventPayload, Question};
use agentry_schema::ids::{RunId, SessionId, TenantId, UserId};
use agentry_schema::secret::Secret;
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

/// Where the scenario's authorization server sends the browser back to (never visited).
const REDIRECT_URI: &str = "http://localhost:3000/callback";
/// The Client ID Metadata Document the suite's authorization servers accept.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";
/// Sign-ins one scenario may make (the first one, step-ups, a moved authorization server)
/// before the client gives up: a server that keeps asking is not followed forever.
const MAX_SIGN_INS: usize = 3;

fn launch() -> agentry_mcp::client::StdioLaunch {
    agentry_mcp::client::StdioLaunch::unconfined(std::env::temp_dir())
}

/// The server's config for an `auth/*` scenario: OAuth, with the pre-registered client of the
/// scenario's context when it gives one, else a Client ID Metadata Document (or dynamic
/// registration where the authorization server does not take those).
fn oauth_config(url: &str, scenario: &str, context: &Value) -> McpServerConfig {
    let mut config = McpServerConfig::http("conformance", url);
    config.timeout_secs = 20;
    config.connect_timeout_secs = 20;
    let text = |k: &str| context.get(k).and_then(Value::as_str).map(str::to_string);
    let client_id = text("client_id");
    let oauth = OAuthConfig {
        grant: if scenario.starts_with("auth/client-credentials") {
            OAuthGrant::ClientCredentials
        } else {
            OAuthGrant::AuthorizationCode
        },
        client_secret: text("client_secret").map(Secret::new),
        client_metadata_url: client_id.is_none().then(|| CLIENT_METADATA_URL.to_string()),
        client_id,
        ..OAuthConfig::default()
    };
    if let McpTransportConfig::Http(h) = &mut config.transport {
        h.auth = HttpAuth::OAuth(oauth);
    }
    config
}

/// The browser step against an authorization server that approves at once: fetch the
/// authorization URL, read `code`, `state` and `iss` from the redirect.
async fn approve(authorization_url: &str) -> Result<(String, String, Option<String>), String> {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| e.to_string())?;
    let response = http
        .get(authorization_url)
        .send()
        .await
        .map_err(|e| format!("authorization request: {e}"))?;
    let location = response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            format!(
                "authorization answered {} without a redirect",
                response.status()
            )
        })?;
    let url = url::Url::parse(location).map_err(|e| format!("redirect {location:?}: {e}"))?;
    let param = |k: &str| {
        url.query_pairs()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.to_string())
    };
    if let Some(error) = param("error") {
        return Err(format!("the authorization server refused: {error}"));
    }
    Ok((
        param("code").ok_or("the redirect has no code")?,
        param("state").ok_or("the redirect has no state")?,
        param("iss"),
    ))
}

/// One sign-in, as a person would do it through the platform, into `tokens`.
async fn sign_in(
    config: &McpServerConfig,
    challenge: Option<String>,
    more_scopes: &[String],
    tokens: &MemoryTokenStore,
) -> Result<(), String> {
    let McpTransportConfig::Http(http) = &config.transport else {
        return Err("not an HTTP server".into());
    };
    let started = oauth::begin_sign_in(
        &config.name,
        http,
        REDIRECT_URI,
        challenge,
        more_scopes,
        None,
    )
    .await
    .map_err(|e| e.to_string())?;
    eprintln!("sign in: {}", started.authorization_url);
    let (code, state, iss) = approve(&started.authorization_url).await?;
    let got = oauth::finish_sign_in(
        &config.name,
        http,
        started.pending,
        &code,
        &state,
        iss.as_deref(),
        None,
    )
    .await
    .map_err(|e| e.to_string())?;
    eprintln!("signed in: {:?}", got.summary());
    tokens.save(got).await
}

/// A 401 or 403 the client answers by signing in (again).
fn wants_sign_in(e: &McpError) -> bool {
    matches!(
        e,
        McpError::AuthorizationRequired { .. } | McpError::InsufficientScope { .. }
    )
}

/// Sign in as `e` asks (the scope of a 403 on top), counting the sign-ins.
async fn sign_in_for(
    e: &McpError,
    config: &McpServerConfig,
    tokens: &MemoryTokenStore,
    sign_ins: &mut usize,
) -> Result<(), String> {
    if *sign_ins >= MAX_SIGN_INS {
        return Err(format!("{e} (gave up after {MAX_SIGN_INS} sign-ins)"));
    }
    *sign_ins += 1;
    eprintln!("{e}");
    // A step-up keeps what was granted and adds what the server asks for (SEP-2350).
    let more: Vec<String> = match e {
        McpError::InsufficientScope { scope: Some(s), .. } => tokens
            .get()
            .map(|t| t.summary().scopes)
            .unwrap_or_default()
            .into_iter()
            .chain(s.split_whitespace().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    sign_in(
        config,
        e.auth_challenge().map(str::to_string),
        &more,
        tokens,
    )
    .await
}

/// Connect, signing in when the server asks for it.
async fn connect_signed_in(
    config: &McpServerConfig,
    tokens: &MemoryTokenStore,
    sign_ins: &mut usize,
) -> Result<McpConnection, String> {
    loop {
        let hooks = ClientHooks::default().oauth_tokens(Arc::new(tokens.clone()));
        match McpConnection::connect(config, hooks, &launch()).await {
            Ok(conn) => return Ok(conn),
            Err(e) if wants_sign_in(&e) => sign_in_for(&e, config, tokens, sign_ins).await?,
            Err(e) => return Err(e.to_string()),
        }
    }
}

async fn run_auth(url: &str, scenario: &str) -> Result<(), String> {
    let scenario_context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    let config = oauth_config(url, scenario, &scenario_context);
    let tokens = MemoryTokenStore::new();
    let mut sign_ins = 0;
    let mut conn = connect_signed_in(&config, &tokens, &mut sign_ins).await?;
    let tools = loop {
        match conn.list_tools().await {
            Ok(tools) => break tools,
            Err(e) if wants_sign_in(&e) => {
                conn.close().await;
                sign_in_for(&e, &config, &tokens, &mut sign_ins).await?;
                conn = connect_signed_in(&config, &tokens, &mut sign_ins).await?;
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    eprintln!(
        "tools: {:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    for tool in &tools {
        loop {
            match conn
                .call_tool(&tool.name, arguments_for(&tool.name), &context(&tool.name))
                .await
            {
                Ok(out) => {
                    eprintln!("{} -> {}", tool.name, out.content);
                    break;
                }
                Err(e @ McpError::Server { .. }) => {
                    eprintln!("{} -> error answer: {e}", tool.name);
                    break;
                }
                Err(e) if wants_sign_in(&e) => {
                    conn.close().await;
                    sign_in_for(&e, &config, &tokens, &mut sign_ins).await?;
                    conn = connect_signed_in(&config, &tokens, &mut sign_ins).await?;
                }
                Err(e) => {
                    conn.close().await;
                    return Err(format!("{}: {e}", tool.name));
                }
            }
        }
    }
    conn.close().await;
    Ok(())
}

async fn run(url: &str, scenario: &str) -> Result<(), String> {
    if scenario.starts_with("auth/") {
        return run_auth(url, scenario).await;
    }
    let mut config = McpServerConfig::http("conformance", url);
    config.timeout_secs = 20;
    config.connect_timeout_secs = 20;
    let conn = McpConnection::connect(&config, ClientHooks::default(), &launch())
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
