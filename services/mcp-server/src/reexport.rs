//! What `/mcp` re-exports of the caller's own MCP servers besides their tools: resources,
//! resource templates and prompts, and `completion/complete` for them (docs/mcp.md, "What it
//! serves").
//!
//! Names: a resource `U` of the caller's server `S` is `agentry://mcp/S/U`, a resource template
//! alike (so a URI expanded from it is such a URI too), and a prompt `P` is `S__P` (the naming
//! of the tools). A URI or a name a client sends is resolved against the caller's own servers
//! only — the ones the tenant's pool gives for this tenant user, already narrowed to what the
//! caller's role may see — so nothing a client writes can reach another user's server.
//!
//! Every `resources/read` and `prompts/get` that reaches a server is audited like a re-exported
//! tool call: an execution with one tool-call row (`resources/read` or `prompts/get`).

use std::sync::Arc;
use std::time::Instant;

use agentry_actors::mcp_pool::ServerCatalog;
use agentry_mcp::client::{McpConnection, McpError as ClientError, agent_tool_name};
use agentry_mcp::server::{
    CallAudit, CallRecord, ContentSource, resource_not_found, unknown_prompt,
};
use agentry_tools::tool::{ToolError, ToolOutput, ToolSpec};
use async_trait::async_trait;
use rmcp::ErrorData;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptResult, JsonObject, Prompt, ReadResourceResult,
    Reference, Resource, ResourceContents, ResourceTemplate,
};
use serde_json::{Value, json};

/// Where the URIs of the caller's servers' resources live: `agentry://mcp/<server>/<uri>`.
pub const URI_PREFIX: &str = "agentry://mcp/";
/// The audit's tool names of the two requests that reach a server.
pub const READ: &str = "resources/read";
pub const GET: &str = "prompts/get";

/// The URI `/mcp` shows for `uri` of `server`.
pub fn exported_uri(server: &str, uri: &str) -> String {
    format!("{URI_PREFIX}{server}/{uri}")
}

/// `(server, the server's own URI)` of an exported URI; `None` for any other.
pub fn split_uri(uri: &str) -> Option<(&str, &str)> {
    let rest = uri.strip_prefix(URI_PREFIX)?;
    let (server, inner) = rest.split_once('/')?;
    (!server.is_empty() && !inner.is_empty()).then_some((server, inner))
}

/// The caller's servers whose resources and prompts `/mcp` offers, and where reads and gets are
/// recorded.
pub struct ReExported {
    /// Only the servers the caller's role may see (see `visible`).
    pub servers: Vec<ServerCatalog>,
    pub audit: Option<Arc<dyn CallAudit>>,
}

/// Whether a role sees server `server`'s resources and prompts: it may use at least one of
/// the tools the server serves (after its allow-list), or — for a server that serves no tools —
/// it is granted the server's every tool (`<server>:*`, `*:*`).
pub fn visible(server: &str, tools: &[&ToolSpec], allowed: impl Fn(&ToolSpec) -> bool) -> bool {
    let of_server: Vec<&&ToolSpec> = tools.iter().filter(|t| t.service == server).collect();
    if of_server.is_empty() {
        let whole = ToolSpec::new(server, "*", "", json!({"type": "object"}));
        return allowed(&whole);
    }
    of_server.into_iter().any(|t| allowed(t))
}

fn from_server(uri_or_name: Option<(&str, &str)>, e: ClientError) -> ErrorData {
    match e {
        // The server's own "not found"s name the exported URI or prompt, never its own.
        ClientError::Server {
            code: -32602,
            message,
            ..
        } => match uri_or_name {
            Some((kind, id)) => ErrorData::invalid_params(message, Some(json!({ kind: id }))),
            None => ErrorData::invalid_params(message, None),
        },
        ClientError::Server {
            code,
            message,
            data,
            ..
        } => ErrorData::new(rmcp::model::ErrorCode(code), message, data),
        other => ErrorData::internal_error(other.to_string(), None),
    }
}

impl ReExported {
    fn server(&self, name: &str) -> Option<&ServerCatalog> {
        self.servers.iter().find(|s| s.server == name)
    }

    fn connection(&self, server: &ServerCatalog) -> Result<McpConnection, ErrorData> {
        server
            .connection()
            .map_err(|why| ErrorData::internal_error(why, None))
    }

    /// The server and its own name of the prompt exported as `name`.
    async fn prompt(&self, name: &str) -> Option<(&ServerCatalog, String)> {
        for s in &self.servers {
            let catalog = s.catalog().await;
            if let Some(p) = catalog
                .prompts
                .iter()
                .find(|p| agent_tool_name(&s.server, &p.name) == name)
            {
                return Some((s, p.name.clone()));
            }
        }
        None
    }

    /// Record one request that reached `server` as an execution with its tool-call row.
    async fn audited<T>(
        &self,
        server: &str,
        method: &str,
        target: &str,
        args: Value,
        run: impl std::future::Future<Output = Result<T, ErrorData>>,
        summary: impl Fn(&T) -> Value,
    ) -> Result<T, ErrorData> {
        let mut spec = ToolSpec::new(server, method, "", json!({"type": "object"}));
        spec.service_tool = target.to_string();
        let ids = match &self.audit {
            Some(a) => a
                .begin(&spec, &args)
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?,
            None => None,
        };
        let started = Instant::now();
        let result = run.await;
        if let (Some(audit), Some(ids)) = (&self.audit, ids) {
            let recorded = match &result {
                Ok(r) => Ok(ToolOutput::ok(summary(r))),
                Err(e) => Err(ToolError::failed(e.message.to_string())),
            };
            audit
                .record(
                    ids,
                    CallRecord {
                        tool: spec,
                        tool_call_id: format!("mcp_{}", uuid::Uuid::new_v4().simple()),
                        args,
                        result: recorded,
                        duration: started.elapsed(),
                        approved: None,
                    },
                )
                .await;
        }
        result
    }
}

fn rename_contents(server: &str, contents: &mut [ResourceContents]) {
    for c in contents {
        match c {
            ResourceContents::TextResourceContents { uri, .. }
            | ResourceContents::BlobResourceContents { uri, .. } => {
                *uri = exported_uri(server, uri);
            }
            #[allow(unreachable_patterns)]
            _ => {}
        }
    }
}

#[async_trait]
impl ContentSource for ReExported {
    async fn resources(&self) -> Vec<Resource> {
        let mut out = Vec::new();
        for s in &self.servers {
            for r in &s.catalog().await.resources {
                let mut r = r.clone();
                r.uri = exported_uri(&s.server, &r.uri);
                out.push(r);
            }
        }
        out
    }

    async fn resource_templates(&self) -> Vec<ResourceTemplate> {
        let mut out = Vec::new();
        for s in &self.servers {
            for t in &s.catalog().await.templates {
                let mut t = t.clone();
                t.uri_template = exported_uri(&s.server, &t.uri_template);
                out.push(t);
            }
        }
        out
    }

    async fn prompts(&self) -> Vec<Prompt> {
        let mut out = Vec::new();
        for s in &self.servers {
            for p in &s.catalog().await.prompts {
                let mut p = p.clone();
                p.name = agent_tool_name(&s.server, &p.name);
                out.push(p);
            }
        }
        out
    }

    async fn read_resource(&self, uri: &str) -> Result<ReadResourceResult, ErrorData> {
        let Some((name, inner)) = split_uri(uri) else {
            return Err(resource_not_found(uri));
        };
        let Some(server) = self.server(name) else {
            return Err(resource_not_found(uri));
        };
        let conn = self.connection(server)?;
        let args = json!({ "uri": uri, "server_uri": inner });
        self.audited(
            name,
            READ,
            uri,
            args,
            async {
                let mut r = conn
                    .read_resource(inner)
                    .await
                    .map_err(|e| from_server(Some(("uri", uri)), e))?;
                rename_contents(name, &mut r.contents);
                Ok(r)
            },
            |r: &ReadResourceResult| {
                let kinds: Vec<Value> = r
                    .contents
                    .iter()
                    .map(|c| match c {
                        ResourceContents::TextResourceContents {
                            mime_type, text, ..
                        } => json!({"kind": "text", "mime_type": mime_type, "bytes": text.len()}),
                        ResourceContents::BlobResourceContents {
                            mime_type, blob, ..
                        } => json!({"kind": "blob", "mime_type": mime_type, "base64_bytes": blob.len()}),
                        #[allow(unreachable_patterns)]
                        _ => json!({"kind": "other"}),
                    })
                    .collect();
                json!({ "contents": kinds })
            },
        )
        .await
    }

    async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<GetPromptResult, ErrorData> {
        let Some((server, own)) = self.prompt(name).await else {
            return Err(unknown_prompt(name));
        };
        let conn = self.connection(server)?;
        let args = json!({ "name": name, "server_prompt": own, "arguments": arguments });
        self.audited(
            &server.server,
            GET,
            name,
            args,
            async {
                conn.get_prompt(&own, arguments.clone())
                    .await
                    .map_err(|e| from_server(Some(("name", name)), e))
            },
            |r: &GetPromptResult| json!({ "messages": r.messages.len(), "description": r.description }),
        )
        .await
    }

    async fn complete(
        &self,
        mut request: CompleteRequestParams,
    ) -> Result<CompleteResult, ErrorData> {
        let server = match &mut request.r#ref {
            Reference::Prompt(p) => {
                let Some((server, own)) = self.prompt(&p.name).await else {
                    return Err(unknown_prompt(&p.name));
                };
                p.name = own;
                server
            }
            Reference::Resource(t) => {
                let uri = t.uri.clone();
                let Some((name, inner)) = split_uri(&uri) else {
                    return Err(resource_not_found(&uri));
                };
                let Some(server) = self.server(name) else {
                    return Err(resource_not_found(&uri));
                };
                t.uri = inner.to_string();
                server
            }
            #[allow(unreachable_patterns)]
            _ => return Ok(CompleteResult::default()),
        };
        let conn = self.connection(server)?;
        conn.complete(request)
            .await
            .map_err(|e| from_server(None, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exported_uris_name_their_server_and_keep_the_servers_uri() {
        let uri = exported_uri("everything", "demo://resource/static/document/features.md");
        assert_eq!(
            uri,
            "agentry://mcp/everything/demo://resource/static/document/features.md"
        );
        assert_eq!(
            split_uri(&uri),
            Some(("everything", "demo://resource/static/document/features.md"))
        );
        // A template stays a template: only its own `{…}` expressions.
        let t = exported_uri("everything", "demo://resource/dynamic/text/{resourceId}");
        assert_eq!(
            split_uri(&t.replace("{resourceId}", "3")),
            Some(("everything", "demo://resource/dynamic/text/3"))
        );
        for other in [
            "demo://resource/static/document/features.md",
            "agentry://mcp/",
            "agentry://mcp/everything",
            "agentry://mcp/everything/",
            "agentry://mcp//demo://x",
            "agentry://other/everything/demo://x",
        ] {
            assert_eq!(split_uri(other), None, "{other}");
        }
    }

    #[test]
    fn a_role_sees_a_servers_resources_only_when_it_may_use_one_of_its_tools() {
        let echo = ToolSpec::new("everything", "everything__echo", "", json!({}));
        let add = ToolSpec::new("everything", "everything__add", "", json!({}));
        let tools = [&echo, &add];
        assert!(visible("everything", &tools, |_| true));
        assert!(visible("everything", &tools, |t| t.name == "everything__add"));
        assert!(!visible("everything", &tools, |_| false));
        // A server with no tools: only a grant of all of its tools admits it.
        assert!(visible("docs", &tools, |t| t.service == "docs"
            && t.service_tool == "*"));
        assert!(!visible("docs", &tools, |t| t.service != "docs"));
    }
}
