//! `/mcp`: Agentry as an MCP server (Streamable HTTP), for other MCP clients (DESIGN §6, issue 5
//! item 7). rmcp's transport is mounted in actix by `rmcp-actix-web`; the server behind it is
//! the same [`ToolServer`] `agentry tool-server` runs over stdio, fed by [`CallerToolSource`]:
//!
//! - the calling user's built-in tools (the registry the agent loop mounts, in the user's
//!   workspace with the tenant's quota), narrowed by the tenant's RBAC permissions for the
//!   caller's role;
//! - one `ask_<assistant>` tool per assistant of the tenant ([`AskAssistant`]): a real chat run
//!   through the engine, its approvals and questions put to the MCP client's user by
//!   elicitation, an MCP cancel cancelling the run;
//! - the caller's own MCP servers' tools, from the tenant's pool, under the names the agent sees
//!   (`<server>__<tool>`), narrowed by the same permissions, and their resources, templates and
//!   prompts ([`reexport`]).
//!
//! OAuth-first clients get `WWW-Authenticate: Bearer resource_metadata="…"` on every 401 and the
//! RFC 9728 protected-resource metadata at `/.well-known/oauth-protected-resource[/mcp]`; the
//! bearer tokens are the tenant's API keys and, when `[mcp.oauth]` names one, the access tokens
//! of an external authorization server, which the metadata then lists (`crate::auth::oauth`).
//!
//! Every request is authenticated by [`guard`] before rmcp reads its body: the API key (the
//! same as the REST API's), then the MCP session: a session id belongs to the tenant user whose
//! `initialize` created it, and is "not found" for every other key. Calls go through the same
//! tool-call pipeline as the agent loop's (`agentry_tools::pipeline`): built-in tools that need
//! approval are asked by elicitation, refused when the client cannot ask; their timeout stands
//! still while an elicitation waits; every built-in call that got past its arguments writes an
//! execution and a tool-call audit row ([`McpAudit`]).

pub mod reexport;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{Method, StatusCode, header};
use actix_web::middleware::{Next, from_fn};
use actix_web::{FromRequest, HttpMessage, HttpResponse, ResponseError, web};
use agentry_actors::tools::{PlatformTools, role_policy};
use agentry_actors::{ChatCommand, CreateSession, Engine, EngineError, ToolPolicy};
use agentry_mcp::server::{
    CallAudit, CallRecord, CallerTools, Presenter, ToolServer, ToolSource, approval_question,
    is_yes, to_mcp_result,
};
use agentry_schema::error::ErrorCode;
use agentry_schema::events::{DoneStatus, EventPayload, HitlKind, HitlRequestData};
use agentry_schema::frames::Decision;
use agentry_schema::ids::{
    ApprovalId, AssistantId, RunId, SessionId, TenantId, UserId, VirtualServerName,
};
use agentry_store::executions::{self, ExecutionStatus, NewExecution};
use agentry_store::tenants::Tenant;
use agentry_store::{UserScope, assistants, sessions, tool_calls};
use agentry_tools::pipeline::Retry;
use agentry_tools::tool::{
    CompiledTool, InteractionError, RegistryError, Tool, ToolContext, ToolError, ToolOutput,
    ToolSpec, WorkspaceInfo,
};
use async_trait::async_trait;
use futures::StreamExt;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp_actix_web::transport::{StreamableHttpService, on_request_extensions};
use sea_orm::DatabaseConnection;
use serde_json::{Value, json};

use crate::auth::TenantCaller;
use crate::error::ApiError;
use crate::routes::resource::endpoint;
use crate::settings::Settings;

/// The RBAC service of the `ask_<assistant>` tools.
const ASSISTANTS_SERVICE: &str = "assistants";
/// The MCP session header.
const SESSION_HEADER: &str = "mcp-session-id";
/// MCP session bindings older than this are forgotten; the client then gets 404 and starts a
/// new session, as the MCP spec has clients do for an expired session.
const BINDING_TTL: Duration = Duration::from_secs(24 * 3600);
/// How long a cancelled `ask_<assistant>` call waits for its run's `done`.
const CANCEL_WAIT: Duration = Duration::from_millis(1500);

const INSTRUCTIONS: &str = "Agentry: your built-in tools (files in your workspace, shell, web, \
system, services, todos, memory, questions), the tools of your own MCP servers (named \
<server>__<tool>), and one ask_<assistant> tool per assistant of your tenant, which runs a full chat with that assistant and returns its answer (pass the returned \
session_id to continue the conversation). Tools marked destructive ask you for approval first. \
Your MCP servers' resources are under agentry://mcp/<server>/<uri>, their prompts named \
<server>__<prompt>.";

/// Everything `/mcp` needs, built once at start-up and shared by every worker.
pub struct McpEndpoint {
    service: StreamableHttpService<ToolServer, LocalSessionManager>,
    bindings: web::Data<SessionBindings>,
    peers: Option<web::Data<McpPeers>>,
}

/// Cluster mode: an MCP session lives on the replica whose `initialize` made it (rmcp keeps it
/// in that process). Each replica records its sessions in Redis (`<prefix>:mcp:<session id>`:
/// the replica, where to reach it, whose session it is); a request for a session held by
/// another replica is proxied there over HTTP, its answer (an event stream included) streamed
/// back. So `/mcp` works behind a load balancer without stickiness.
pub struct McpPeers {
    coordination: agentry_store::coordination::Coordination,
    /// This replica's id and advertised base URL (`cluster.advertise_url`).
    me: String,
    url: String,
    /// Sent with proxied requests: the replica that proxied one admitted it already.
    secret: String,
    http: reqwest::Client,
}

/// Where an MCP session lives, as Redis holds it.
#[derive(serde::Serialize, serde::Deserialize)]
struct RemoteBinding {
    replica: String,
    url: String,
    tenant: TenantId,
    user: UserId,
}

impl McpPeers {
    pub fn new(
        coordination: agentry_store::coordination::Coordination,
        url: String,
        secret: String,
    ) -> anyhow::Result<McpPeers> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()?;
        Ok(McpPeers {
            me: coordination.replica_id().to_string(),
            coordination,
            url,
            secret,
            http,
        })
    }

    fn key(session: &str) -> String {
        format!("mcp:{session}")
    }

    /// Say that this replica holds `session`, for `owner`.
    fn publish(&self, session: &str, owner: &Owner) {
        let binding = RemoteBinding {
            replica: self.me.clone(),
            url: self.url.clone(),
            tenant: owner.tenant,
            user: owner.user,
        };
        let Ok(value) = serde_json::to_string(&binding) else {
            return;
        };
        let (c, key) = (self.coordination.clone(), Self::key(session));
        actix_web::rt::spawn(async move {
            if let Err(e) = c.put(&key, &value, BINDING_TTL).await {
                tracing::warn!(error = %e, "recording an MCP session in Redis failed; other replicas answer 404 for it");
            }
        });
    }

    fn withdraw(&self, session: &str) {
        let (c, key) = (self.coordination.clone(), Self::key(session));
        actix_web::rt::spawn(async move {
            let _ = c.forget(&key).await;
        });
    }

    /// The replica URL of `owner`'s `session` when another replica holds it.
    async fn elsewhere(&self, session: &str, owner: &Owner) -> Option<String> {
        let value = self.coordination.get(&Self::key(session)).await.ok()??;
        let b: RemoteBinding = serde_json::from_str(&value).ok()?;
        (b.replica != self.me && b.tenant == owner.tenant && b.user == owner.user).then_some(b.url)
    }

    /// Send `req` to the replica at `base` and stream its answer back.
    async fn proxy(&self, req: ServiceRequest, base: &str) -> ServiceResponse<BoxBody> {
        let (http_req, mut payload) = req.into_parts();
        let body = match web::Bytes::from_request(&http_req, &mut payload).await {
            Ok(b) => b,
            Err(e) => return ServiceResponse::new(http_req, e.error_response()),
        };
        let path = http_req
            .uri()
            .path_and_query()
            .map_or("/mcp", |p| p.as_str());
        let url = format!("{}{path}", base.trim_end_matches('/'));
        let method = reqwest::Method::from_bytes(http_req.method().as_str().as_bytes())
            .unwrap_or(reqwest::Method::POST);
        let mut out = self.http.request(method, url);
        for (name, value) in http_req.headers() {
            if !hop_by_hop(name.as_str()) && name.as_str() != crate::cluster::PEER_HEADER {
                out = out.header(name.as_str(), value.as_bytes());
            }
        }
        let sent = out
            .header(crate::cluster::PEER_HEADER, &self.secret)
            .body(body)
            .send()
            .await;
        let res = match sent {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, replica_url = %base, "proxying an /mcp request to the replica that holds its session failed");
                let err = mcp_error(
                    ErrorCode::CoordinationUnavailable,
                    "the replica that holds this MCP session does not answer; retry, or send a \
                     new initialize without the Mcp-Session-Id header",
                )
                .with_retry_after(2);
                return ServiceResponse::new(http_req, err.error_response());
            }
        };
        let status = StatusCode::from_u16(res.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let mut answer = HttpResponse::build(status);
        for (name, value) in res.headers() {
            if !hop_by_hop(name.as_str()) {
                answer.append_header((name.as_str(), value.as_bytes()));
            }
        }
        let stream = res
            .bytes_stream()
            .map(|chunk| chunk.map_err(actix_web::error::ErrorBadGateway));
        ServiceResponse::new(http_req, answer.streaming(stream))
    }
}

/// Headers that belong to one connection, not to the request or answer being proxied.
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "content-length"
    )
}

impl McpEndpoint {
    /// `peers`: cluster mode (MCP sessions of other replicas are proxied to them).
    pub fn new(
        settings: &Settings,
        engine: Engine,
        tools: Arc<PlatformTools>,
        db: DatabaseConnection,
        peers: Option<McpPeers>,
    ) -> Self {
        let source = CallerToolSource {
            engine: engine.clone(),
            db: db.clone(),
            tools,
            hitl_timeout_secs: settings.hitl.timeout_secs,
            sessions: Arc::default(),
            ask_template: Mutex::default(),
        };
        let server = ToolServer::with_source("agentry", INSTRUCTIONS, Arc::new(source));
        let hosts = &settings.mcp.server_allowed_hosts;
        // `*` accepts any Host header (behind a proxy that checks it); rmcp's empty list means
        // the same, which is why an empty list is refused at start instead.
        let allowed_hosts: Vec<String> = if hosts.iter().any(|h| h == "*") {
            Vec::new()
        } else {
            hosts.clone()
        };
        let service = StreamableHttpService::builder()
            .service_factory(Arc::new(move || Ok(server.clone())))
            .session_manager(Arc::new(LocalSessionManager::default()))
            .allowed_hosts(allowed_hosts)
            .max_request_body_bytes(settings.server.body_limit_bytes)
            .on_request_fn(|req, ext| {
                if let Some(caller) = req.extensions().get::<TenantCaller>() {
                    ext.insert(caller.clone());
                }
                if let Some(path) = req.extensions().get::<VirtualPath>() {
                    ext.insert(path.clone());
                }
            })
            .build();
        McpEndpoint {
            service,
            bindings: web::Data::new(SessionBindings::default()),
            peers: peers.map(web::Data::new),
        }
    }

    /// Mount `/mcp` (call once per worker).
    /// `/mcp/{name}` (a tenant's virtual server) comes first: the `/mcp` scope would take its
    /// requests otherwise and find no route.
    pub fn configure(&self, cfg: &mut web::ServiceConfig) {
        for path in [VIRTUAL_PATH, "/mcp"] {
            let mut scope = self
                .service
                .clone()
                .scope_with_path(path)
                .app_data(self.bindings.clone());
            if let Some(peers) = &self.peers {
                scope = scope.app_data(peers.clone());
            }
            cfg.service(scope.wrap(from_fn(guard)));
        }
        cfg.service(endpoint(RESOURCE_METADATA).get(root_resource_metadata))
            .service(endpoint(MCP_RESOURCE_METADATA).get(mcp_resource_metadata))
            .service(endpoint(VIRTUAL_RESOURCE_METADATA).get(virtual_resource_metadata));
    }
}

/// Where OAuth clients look for the protected-resource metadata (RFC 9728 §3): at the root for
/// the origin, and with the resource's path appended for `/mcp` (what the MCP authorization
/// spec has clients try first, and what a 401 of `/mcp` names in `WWW-Authenticate`).
pub const RESOURCE_METADATA: &str = "/.well-known/oauth-protected-resource";
pub const MCP_RESOURCE_METADATA: &str = "/.well-known/oauth-protected-resource/mcp";
/// A virtual server's metadata: the same resource as `/mcp` (a token for `/mcp` is good on
/// every virtual server of the caller's tenant).
pub const VIRTUAL_RESOURCE_METADATA: &str = "/.well-known/oauth-protected-resource/mcp/{name}";
/// Where a tenant's virtual servers are served.
const VIRTUAL_PATH: &str = "/mcp/{virtual_server}";

/// The base URL clients reach this server by: `mcp.public_url`, else the request's own scheme
/// and host (`Forwarded`/`X-Forwarded-*` behind a proxy).
pub(crate) fn public_base(req: &actix_web::HttpRequest) -> String {
    configured_base(req).unwrap_or_else(|| {
        let info = req.connection_info();
        format!("{}://{}", info.scheme(), info.host())
    })
}

/// `mcp.public_url` without its trailing `/`, when set.
fn configured_base(req: &actix_web::HttpRequest) -> Option<String> {
    req.app_data::<web::Data<crate::state::AppState>>()
        .map(|s| {
            s.settings
                .mcp
                .public_url
                .trim()
                .trim_end_matches('/')
                .to_string()
        })
        .filter(|u| !u.is_empty())
}

/// The RFC 9728 metadata of `resource`. `oauth`: it is `/mcp` and an external authorization
/// server is trusted there (`[mcp.oauth]`), which it then names; otherwise it names none, as
/// the bearer tokens are Agentry API keys (docs/mcp.md, "OAuth").
fn resource_metadata(
    req: &actix_web::HttpRequest,
    resource: String,
    base: &str,
    oauth: bool,
) -> HttpResponse {
    let mut res = HttpResponse::Ok();
    if configured_base(req).is_none() {
        // Built from the request's own headers (`Host`, `X-Forwarded-*`): no shared cache may
        // keep one client's answer for another.
        res.insert_header((header::CACHE_CONTROL, "no-store"));
    }
    let mut doc = json!({
        "resource": resource,
        "bearer_methods_supported": ["header"],
        "resource_name": "Agentry",
        "resource_documentation": format!("{base}/docs"),
    });
    if let Some(v) = verifier(req).filter(|_| oauth) {
        doc["authorization_servers"] = json!([v.issuer()]);
        if !v.scopes_supported().is_empty() {
            doc["scopes_supported"] = json!(v.scopes_supported());
        }
    }
    res.json(doc)
}

/// The external authorization server `/mcp` trusts, when `[mcp.oauth]` names one.
fn verifier(req: &actix_web::HttpRequest) -> Option<Arc<crate::auth::oauth::OAuthVerifier>> {
    req.app_data::<web::Data<crate::state::AppState>>()
        .and_then(|s| s.oauth.clone())
}

/// The OAuth protected-resource metadata of this server's origin (RFC 9728). No key needed.
#[utoipa::path(
    get,
    path = "/.well-known/oauth-protected-resource",
    tag = "mcp-server",
    security(()),
    responses((status = 200, description = "RFC 9728 metadata: `resource` (this server's base URL: `mcp.public_url`, or the request's scheme and host), `bearer_methods_supported: [\"header\"]`, `resource_name`, `resource_documentation`. No `authorization_servers`: the origin's bearer tokens are Agentry API keys (an external authorization server is trusted on `/mcp` only)", body = Object))
)]
pub async fn root_resource_metadata(req: actix_web::HttpRequest) -> HttpResponse {
    let base = public_base(&req);
    resource_metadata(&req, base.clone(), &base, false)
}

/// The OAuth protected-resource metadata of `/mcp` (RFC 9728, path-suffixed form; the URL a 401
/// of `/mcp` names in `WWW-Authenticate: Bearer resource_metadata="…"`). No key needed.
#[utoipa::path(
    get,
    path = "/.well-known/oauth-protected-resource/mcp",
    tag = "mcp-server",
    security(()),
    responses((status = 200, description = "RFC 9728 metadata of `/mcp`: `resource` (`<base URL>/mcp`), `bearer_methods_supported: [\"header\"]`, `resource_name`, `resource_documentation`; `authorization_servers` (and `scopes_supported`) when `[mcp.oauth]` trusts an external authorization server, none otherwise (the bearer tokens are then Agentry API keys only)", body = Object))
)]
pub async fn mcp_resource_metadata(req: actix_web::HttpRequest) -> HttpResponse {
    let base = public_base(&req);
    resource_metadata(&req, format!("{base}/mcp"), &base, true)
}

/// The OAuth protected-resource metadata of a virtual server `/mcp/{name}`: that of `/mcp`,
/// whose part every virtual server is (its `resource` is `<base URL>/mcp`, a prefix of the
/// virtual server's URL, so one token serves `/mcp` and every virtual server). No key needed;
/// the same for any name (which tenant's server is meant is known only with a key).
#[utoipa::path(
    get,
    path = "/.well-known/oauth-protected-resource/mcp/{name}",
    tag = "mcp-server",
    security(()),
    params(("name" = String, Path, description = "A virtual server's name")),
    responses(
        (status = 200, description = "The metadata of `/mcp` (see `/.well-known/oauth-protected-resource/mcp`)", body = Object),
        (status = 400, description = "`name` is not a virtual server name", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn virtual_resource_metadata(
    req: actix_web::HttpRequest,
    _name: crate::extract::ApiPath<crate::extract::param::VirtualServer>,
) -> HttpResponse {
    mcp_resource_metadata(req).await
}

/// A 401 of `/mcp` with `WWW-Authenticate` (RFC 6750 §3, RFC 9728 §5.1): the scheme, where the
/// resource's metadata is, the scopes to ask for (with `[mcp.oauth]`), and `invalid_token` when
/// credentials were sent but are not valid; a 403 for a token without a required scope says
/// `insufficient_scope` (RFC 6750 §3.1), so a client can ask for more.
fn with_challenge(
    req: &actix_web::HttpRequest,
    mut res: HttpResponse,
    error: &ApiError,
) -> HttpResponse {
    let insufficient = res.status() == StatusCode::FORBIDDEN
        && error.details["oauth_error"] == "insufficient_scope";
    if res.status() != StatusCode::UNAUTHORIZED && !insufficient {
        return res;
    }
    let sent = req.headers().contains_key(header::AUTHORIZATION)
        || req.headers().contains_key("x-api-key");
    let mut challenge = format!(
        "Bearer resource_metadata=\"{}{MCP_RESOURCE_METADATA}\"",
        public_base(req)
    );
    if let Some(v) = verifier(req)
        && !v.challenge_scopes().is_empty()
    {
        challenge.push_str(&format!(", scope=\"{}\"", v.challenge_scopes().join(" ")));
    }
    if insufficient {
        challenge.push_str(", error=\"insufficient_scope\"");
    } else if sent {
        challenge.push_str(", error=\"invalid_token\"");
    }
    if let Ok(v) = header::HeaderValue::from_str(&challenge) {
        res.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    res
}

/// Which tenant user each MCP session belongs to.
#[derive(Default)]
pub struct SessionBindings(Mutex<HashMap<String, (Owner, Instant)>>);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Owner {
    tenant: TenantId,
    user: UserId,
    /// The virtual server the session was opened on (`/mcp/{name}`); `None` for `/mcp`.
    path: Option<VirtualServerName>,
}

/// The virtual server a request names (`/mcp/{name}`), for the tool source.
#[derive(Debug, Clone)]
struct VirtualPath(VirtualServerName);

impl SessionBindings {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Owner, Instant)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn owner(&self, session: &str) -> Option<Owner> {
        let now = Instant::now();
        self.lock()
            .get(session)
            .filter(|(_, at)| now.duration_since(*at) < BINDING_TTL)
            .map(|(o, _)| o.clone())
    }

    fn bind(&self, session: String, owner: Owner) {
        let now = Instant::now();
        let mut map = self.lock();
        map.retain(|_, (_, at)| now.duration_since(*at) < BINDING_TTL);
        map.insert(session, (owner, now));
    }

    fn forget(&self, session: &str) {
        self.lock().remove(session);
    }
}

fn mcp_error(code: ErrorCode, message: impl Into<String>) -> ApiError {
    ApiError::new(code, message)
}

fn session_not_found(id: &str) -> ApiError {
    mcp_error(
        ErrorCode::NotFound,
        format!(
            "MCP session {id:?} not found (it ended, expired, or belongs to another key); send a \
             new initialize without the Mcp-Session-Id header"
        ),
    )
}

/// Middleware around rmcp: the method, the key, then the session's owner — all before rmcp
/// reads a byte of the body. Afterwards a new session is bound to its creator, and rmcp's plain
/// text errors become our error JSON.
async fn guard(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let method = req.method().clone();
    if !matches!(method, Method::GET | Method::POST | Method::DELETE) {
        let err = mcp_error(
            ErrorCode::MethodNotAllowed,
            format!("{method} is not allowed on /mcp; use POST, GET or DELETE"),
        );
        let mut res = err.error_response();
        res.headers_mut().insert(
            header::ALLOW,
            header::HeaderValue::from_static("GET, POST, DELETE"),
        );
        return Ok(req.into_response(res));
    }
    let caller = match TenantCaller::extract(req.request()).await {
        Ok(c) => c,
        Err(e) => {
            let res = with_challenge(req.request(), e.error_response(), &e);
            return Ok(req.into_response(res));
        }
    };
    let path = match virtual_server(&req, &caller) {
        Ok(path) => path,
        Err(e) => return Ok(req.into_response(e.error_response())),
    };
    let owner = Owner {
        tenant: caller.tenant_id(),
        user: caller.user_id(),
        path: path.clone(),
    };
    let Some(bindings) = req.app_data::<web::Data<SessionBindings>>().cloned() else {
        let e = ApiError::internal("mcp", "the MCP session bindings are not registered");
        return Ok(req.into_response(e.error_response()));
    };
    let session = match req.headers().get(SESSION_HEADER).map(|v| v.to_str()) {
        None => None,
        Some(Ok(s)) => Some(s.to_string()),
        Some(Err(_)) => {
            let e = mcp_error(ErrorCode::BadRequest, "Mcp-Session-Id is not valid text");
            return Ok(req.into_response(e.error_response()));
        }
    };
    let peers = req.app_data::<web::Data<McpPeers>>().cloned();
    if let Some(id) = &session
        && bindings.owner(id).as_ref() != Some(&owner)
    {
        // Cluster mode: a session another replica holds is served there (never passed on
        // twice: a request from a peer is answered here).
        let from_peer = req
            .app_data::<web::Data<crate::state::AppState>>()
            .is_some_and(|s| s.cluster.from_peer(req.request()));
        if let Some(p) = peers.as_ref().filter(|_| !from_peer)
            && bindings.owner(id).is_none()
            && let Some(url) = p.elsewhere(id, &owner).await
        {
            return Ok(p.proxy(req, &url).await);
        }
        // Another tenant's (or user's) session is as unknown as a made-up one.
        return Ok(req.into_response(session_not_found(id).error_response()));
    }
    req.extensions_mut().insert(caller);
    if let Some(path) = path {
        req.extensions_mut().insert(VirtualPath(path));
    }
    let res = next.call(req).await?.map_into_boxed_body();
    let status = res.status();
    if status.is_success() {
        match (&session, res.headers().get(SESSION_HEADER)) {
            (None, Some(new)) => {
                if let Ok(new) = new.to_str() {
                    if let Some(p) = &peers {
                        p.publish(new, &owner);
                    }
                    bindings.bind(new.to_string(), owner);
                }
            }
            (Some(id), _) if method == Method::DELETE => {
                bindings.forget(id);
                if let Some(p) = &peers {
                    p.withdraw(id);
                }
            }
            _ => {}
        }
        if method == Method::DELETE && status == StatusCode::ACCEPTED {
            // rmcp answers a terminated session 202, which the official Python SDK logs as a
            // failed termination; the session is gone, so say so: 204.
            let (req, _) = res.into_parts();
            return Ok(ServiceResponse::new(
                req,
                HttpResponse::NoContent().finish(),
            ));
        }
        return Ok(res);
    }
    if !(status.is_client_error() || status.is_server_error()) || is_json(&res) {
        // JSON-RPC errors are the MCP client's business: left as rmcp wrote them.
        return Ok(res);
    }
    Ok(as_error_json(res, session.as_deref()).await)
}

/// The virtual server a request to `/mcp/{name}` names, checked against the caller's tenant
/// (404 naming it when the tenant has none of that name); `None` for `/mcp`.
fn virtual_server(
    req: &ServiceRequest,
    caller: &TenantCaller,
) -> Result<Option<VirtualServerName>, ApiError> {
    let Some(raw) = req.match_info().get("virtual_server") else {
        return Ok(None);
    };
    let missing = || {
        mcp_error(
            ErrorCode::NotFound,
            format!(
                "MCP virtual server {raw:?} not found: your tenant's admins define virtual \
                 servers with POST /api/v1/tenant/mcp-virtual-servers; /mcp serves every tool \
                 you may use"
            ),
        )
    };
    let name = VirtualServerName::try_from(raw).map_err(|_| missing())?;
    if caller.tenant_arc().mcp_virtual_servers.contains_key(&name) {
        Ok(Some(name))
    } else {
        Err(missing())
    }
}

fn is_json(res: &ServiceResponse<BoxBody>) -> bool {
    res.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// rmcp answers transport errors in plain text; ours are `{error_code, message, details}`.
async fn as_error_json(res: ServiceResponse<BoxBody>, session: Option<&str>) -> ServiceResponse {
    let status = res.status();
    let (req, res) = res.into_parts();
    let allow = res.headers().get(header::ALLOW).cloned();
    let text = actix_web::body::to_bytes_limited(res.into_body(), 2048)
        .await
        .ok()
        .and_then(|b| b.ok())
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let err = match status.as_u16() {
        404 => session_not_found(session.unwrap_or_default()),
        403 => mcp_error(
            ErrorCode::Forbidden,
            format!(
                "{text}: the Host of this request is not in mcp.server_allowed_hosts (add the \
                 name clients use to reach this server, or `*` behind a proxy that checks it)"
            ),
        ),
        405 => mcp_error(ErrorCode::MethodNotAllowed, text),
        406 => mcp_error(
            ErrorCode::NotAcceptable,
            format!("{text} (send `Accept: application/json, text/event-stream`)"),
        ),
        413 => mcp_error(ErrorCode::PayloadTooLarge, text),
        415 => mcp_error(ErrorCode::UnsupportedMediaType, text),
        422 => mcp_error(ErrorCode::ValidationError, text),
        s if s >= 500 => ApiError::internal("mcp transport", text),
        _ => mcp_error(ErrorCode::BadRequest, text),
    };
    let mut out = err.error_response();
    if let Some(allow) = allow {
        out.headers_mut().insert(header::ALLOW, allow);
    }
    ServiceResponse::new(req, out)
}

/// The tools of the request's caller.
struct CallerToolSource {
    engine: Engine,
    db: DatabaseConnection,
    /// The platform's tools, built once at start and shared with the engine.
    tools: Arc<PlatformTools>,
    hitl_timeout_secs: u64,
    /// The session each (tenant, user, MCP session) records its built-in calls under.
    sessions: Arc<Mutex<HashMap<AuditKey, SessionId>>>,
    /// An `ask_<assistant>` tool compiled once (see [`CallerToolSource::compiled_ask`]).
    ask_template: Mutex<Option<CompiledTool>>,
}

type AuditKey = (TenantId, UserId, Option<String>);

impl CallerToolSource {
    /// An `ask_<assistant>` tool with its schema compiled: every one has the same arguments,
    /// so the schema is compiled once, not per assistant per request.
    fn compiled_ask(&self, ask: Arc<dyn Tool>) -> Result<CompiledTool, RegistryError> {
        let mut template = self.ask_template.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(compiled) = template
            .as_ref()
            .and_then(|t| CompiledTool::reusing(ask.clone(), t))
        {
            return Ok(compiled);
        }
        let compiled = CompiledTool::compile(ask)?;
        *template = Some(compiled.clone());
        Ok(compiled)
    }
}

impl CallerToolSource {
    /// Re-export the caller's own MCP servers (theirs and the platform's, as their runs see
    /// them): each tool under the name the agent sees (`<server>__<tool>`), kept only when the
    /// caller's role may use it, and never over a built-in or `ask_<assistant>` name. Servers
    /// that are down are left out, as in a run (the pool reports them as warnings).
    ///
    /// Returns the servers whose resources and prompts the caller may see
    /// ([`self::reexport::visible`]).
    async fn add_user_servers(
        &self,
        tenant: &Tenant,
        user: UserScope,
        allowed: &(dyn Fn(&ToolSpec) -> bool + Sync),
        registry: &mut agentry_tools::tool::ToolRegistry,
    ) -> Vec<agentry_actors::mcp_pool::ServerCatalog> {
        let pool = match self.engine.mcp_pool(tenant).await {
            Ok(Some(pool)) => pool,
            Ok(None) => return Vec::new(),
            Err(e) => {
                tracing::warn!(error = %e, "the MCP pool is not available; /mcp serves no MCP server tools");
                return Vec::new();
            }
        };
        let reply = match pool
            .send(agentry_actors::mcp_pool::UserTools {
                user: user.user_id,
                // `/mcp` has no assistant: every server of the caller may be used.
                patterns: None,
            })
            .await
        {
            Ok(reply) => reply,
            Err(e) => {
                tracing::warn!(error = %e, "the MCP pool did not answer; /mcp serves no MCP server tools");
                return Vec::new();
            }
        };
        for warning in &reply.warnings {
            tracing::debug!(%warning, "an MCP server of the caller is left out of /mcp");
        }
        let specs: Vec<&ToolSpec> = reply.tools.iter().map(|t| t.spec()).collect();
        let servers: Vec<_> = reply
            .servers
            .iter()
            .filter(|s| self::reexport::visible(&s.server, &specs, allowed))
            .cloned()
            .collect();
        for tool in reply.tools {
            let name = tool.spec().name.clone();
            if !allowed(tool.spec()) {
                continue;
            }
            if registry.contains(&name) {
                tracing::warn!(tool = %name, "an MCP server tool clashes with a built-in tool; left out of /mcp");
                continue;
            }
            if let Err(e) = registry.register_compiled(tool) {
                tracing::warn!(tool = %name, error = %e, "an MCP server tool is left out of /mcp");
            }
        }
        servers
    }
}

fn internal(message: impl Into<String>) -> rmcp::ErrorData {
    rmcp::ErrorData::internal_error(message.into(), None)
}

#[async_trait]
impl ToolSource for CallerToolSource {
    /// The caller's servers' resources and prompts (and completions for them).
    fn serves_content(&self) -> bool {
        true
    }

    async fn tools_for(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallerTools, rmcp::ErrorData> {
        let caller = on_request_extensions(&context.extensions)
            .and_then(|e| e.get::<TenantCaller>())
            .cloned()
            // The guard puts the caller on every request before rmcp sees it.
            .ok_or_else(|| internal("the request reached the MCP server unauthenticated"))?;
        // rmcp hands the handler the request's HTTP parts; `None` on a sessionless request.
        let mcp_session = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.headers.get(SESSION_HEADER))
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let tenant = caller.tenant_arc();
        let user = caller.user();
        let policy = role_policy(&tenant, user.role, user.custom_role);
        // `/mcp/{name}`: only the virtual server's tools, of those the role may use.
        let narrowed =
            match on_request_extensions(&context.extensions).and_then(|e| e.get::<VirtualPath>()) {
                None => None,
                Some(VirtualPath(name)) => Some(
                    agentry_domain::virtual_servers::tools_of(&tenant, name).ok_or_else(|| {
                        rmcp::ErrorData::invalid_request(
                            format!("the MCP virtual server {name:?} no longer exists"),
                            None,
                        )
                    })?,
                ),
            };
        let allowed = |spec: &ToolSpec| {
            policy.check(spec).is_ok()
                && narrowed
                    .as_ref()
                    .is_none_or(|p| p.allows(&spec.service, &spec.service_tool))
        };
        let mut registry = self.tools.builtin_tools().clone();
        registry.retain(|spec| allowed(spec));
        let assistants = assistants::list(&self.db, &caller.scope())
            .await
            .map_err(|e| internal(format!("loading the tenant's assistants: {e}")))?;
        for a in assistants {
            let effective = agentry_actors::profiles::effective(&self.db, &caller.scope(), &a)
                .await
                .map_err(|e| internal(format!("loading an assistant's profile: {e}")))?;
            let ask = AskAssistant::new(
                self.engine.clone(),
                tenant.clone(),
                user,
                a.id.clone(),
                &a.spec.name,
                &a.spec.description,
                Duration::from_secs(
                    u64::from(effective.timeout_secs) + 4 * self.hitl_timeout_secs + 60,
                ),
            );
            let name = ask.spec.name.clone();
            if !allowed(&ask.spec) {
                continue;
            }
            let ask = match self.compiled_ask(Arc::new(ask)) {
                Ok(ask) => ask,
                Err(e) => {
                    tracing::error!(tool = %name, error = %e, "assistant left out of /mcp");
                    continue;
                }
            };
            if let Err(e) = registry.register_compiled(ask) {
                // Two ids that sanitize to the same name: the first keeps it.
                tracing::warn!(tool = %name, error = %e, "assistant left out of /mcp");
            }
        }
        let servers = self
            .add_user_servers(&tenant, user, &allowed, &mut registry)
            .await;
        let workspace = WorkspaceInfo {
            root: self.engine.deps().workspace_root(&tenant, user.user_id),
            quota_bytes: tenant.quotas.workspace_quota_bytes,
            sandbox: (&tenant.policy().sandbox).into(),
        };
        if let Err(e) = std::fs::create_dir_all(&workspace.root) {
            return Err(internal(format!("preparing the user's workspace: {e}")));
        }
        let mut context = ToolContext::standalone(workspace);
        context.tenant_id = tenant.id;
        context.user_id = user.user_id;
        context.role = user.role;
        context.custom_role = user.custom_role;
        // `/mcp` has no assistant: the memory tools see the user's and the tenant's memories.
        let presenter: Presenter = Arc::new(present);
        let audit: Arc<dyn CallAudit> = Arc::new(McpAudit {
            engine: self.engine.clone(),
            db: self.db.clone(),
            tenant: tenant.clone(),
            user,
            key: (tenant.id, user.user_id, mcp_session),
            sessions: self.sessions.clone(),
        });
        Ok(CallerTools {
            registry,
            context,
            enforce_approval: true,
            approval_timeout_secs: self.hitl_timeout_secs,
            audit: Some(audit.clone()),
            owner: format!("{}/{}", tenant.id, user.user_id),
            presenter: Some(presenter),
            policy: Arc::new(policy),
            retry: Retry::default(),
            content: Some(Arc::new(self::reexport::ReExported {
                servers,
                audit: Some(audit),
            })),
        })
    }
}

/// An `ask_<assistant>` result shows the assistant's answer as text, with the ids to continue
/// in `structuredContent`; every other tool's result is the standard one.
fn present(spec: &ToolSpec, result: Result<ToolOutput, ToolError>) -> CallToolResponse {
    match result {
        Ok(out) if spec.service == ASSISTANTS_SERVICE => {
            let text = out.content["text"].as_str().unwrap_or_default().to_string();
            let structured = json!({
                "session_id": out.content["session_id"],
                "run_id": out.content["run_id"],
                "status": out.content["status"],
            });
            let mut r = if out.is_error {
                CallToolResult::error(vec![ContentBlock::text(text)])
            } else {
                CallToolResult::success(vec![ContentBlock::text(text)])
            };
            r.structured_content = Some(structured);
            r.into()
        }
        other => to_mcp_result(other),
    }
}

/// The audit of `/mcp` calls: each built-in call is one execution (so it shows under
/// `GET /api/v1/executions` with its tool-call row), in one session per MCP session of the user
/// (metadata `{"source": "mcp"}`), made on the first call.
struct McpAudit {
    engine: Engine,
    db: DatabaseConnection,
    tenant: Arc<Tenant>,
    user: UserScope,
    key: AuditKey,
    sessions: Arc<Mutex<HashMap<AuditKey, SessionId>>>,
}

impl McpAudit {
    fn known_session(&self) -> Option<SessionId> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&self.key)
            .copied()
    }

    async fn session(&self) -> Result<SessionId, ToolError> {
        let scope = self.tenant.scope();
        if let Some(id) = self.known_session() {
            match sessions::get(&self.db, &scope, id).await {
                Ok(Some(_)) => return Ok(id),
                // Deleted (by the user, or as expired): record into a new one.
                Ok(None) => {}
                Err(e) => return Err(ToolError::Unavailable(format!("the audit store: {e}"))),
            }
        }
        let created = self
            .engine
            .create_session(
                &self.tenant,
                &self.user,
                CreateSession {
                    metadata: Some(json!({"source": "mcp", "mcp_session_id": self.key.2})),
                    ..Default::default()
                },
            )
            .await
            .map_err(engine_tool_error)?;
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.key.clone(), created.id);
        Ok(created.id)
    }

    async fn write(
        &self,
        (session, run): (SessionId, RunId),
        call: CallRecord,
    ) -> Result<(), String> {
        let scope = self.tenant.scope();
        let (status, output, error) = match &call.result {
            Ok(out) if !out.is_error => {
                (ExecutionStatus::Completed, Some(out.content.clone()), None)
            }
            Ok(out) => (
                ExecutionStatus::Failed,
                Some(out.content.clone()),
                Some(out.content.to_string()),
            ),
            Err(ToolError::Cancelled) => {
                (ExecutionStatus::Cancelled, None, Some("cancelled".into()))
            }
            Err(e) if call.approved == Some(false) => {
                (ExecutionStatus::Rejected, None, Some(e.to_string()))
            }
            Err(ToolError::Timeout(_)) => {
                (ExecutionStatus::Timeout, None, Some("timed out".into()))
            }
            Err(e) => (ExecutionStatus::Failed, None, Some(e.to_string())),
        };
        // A run recorded beside the session's actor: its start-up must read what is stored.
        self.engine.run_recorded_outside(session);
        executions::create(
            &self.db,
            &scope,
            NewExecution {
                id: run,
                user_id: self.user.user_id,
                session_id: session,
                assistant_id: AssistantId::DEFAULT.to_string(),
                input: match call.tool.name.as_str() {
                    // A resource read or prompt get re-exported from a server of the caller.
                    m @ (self::reexport::READ | self::reexport::GET) => {
                        format!("MCP {m} {}", call.tool.service_tool)
                    }
                    name => format!("MCP tools/call {name}"),
                },
                trace_id: None,
                status: ExecutionStatus::Running,
                role: Some(self.user.grant()),
            },
        )
        .await
        .map_err(|e| e.to_string())?;
        tool_calls::insert(
            &self.db,
            &scope,
            tool_calls::NewToolCallLog {
                session_id: session,
                execution_id: run,
                tool_call_id: call.tool_call_id,
                tool_name: call.tool.name.clone(),
                input: call.args,
                output,
                error: error.clone(),
                duration_ms: u64::try_from(call.duration.as_millis()).unwrap_or(u64::MAX),
                approved: call.approved,
                // The caller is the one the MCP client asked.
                approved_by: call.approved.map(|_| self.user.user_id),
            },
        )
        .await
        .map_err(|e| e.to_string())?;
        executions::update(
            &self.db,
            &scope,
            run,
            status,
            1,
            Default::default(),
            error.as_deref(),
        )
        .await
        .map_err(|e| e.to_string())
    }
}

#[async_trait]
impl CallAudit for McpAudit {
    async fn begin(
        &self,
        tool: &ToolSpec,
        _args: &Value,
    ) -> Result<Option<(SessionId, RunId)>, ToolError> {
        if tool.service == ASSISTANTS_SERVICE {
            // The assistant's run is its own execution, its tool calls audited by the loop.
            return Ok(None);
        }
        Ok(Some((self.session().await?, RunId::new())))
    }

    async fn record(&self, ids: (SessionId, RunId), call: CallRecord) {
        let tool = call.tool.name.clone();
        if let Err(e) = self.write(ids, call).await {
            tracing::error!(tool = %tool, error = %e, "writing the audit of an /mcp call failed");
        }
    }
}

fn engine_tool_error(e: EngineError) -> ToolError {
    match e {
        EngineError::NotFound(what) => ToolError::NotFound(what),
        EngineError::BadRequest(m) => ToolError::invalid(m),
        EngineError::Validation { field, message } => ToolError::InvalidArguments {
            message,
            details: json!({ "field": field }),
        },
        EngineError::Quota { .. } => ToolError::QuotaExceeded(e.to_string()),
        EngineError::Forbidden(m) => ToolError::PermissionDenied(m),
        EngineError::Unavailable | EngineError::DatabaseUnavailable | EngineError::ShuttingDown => {
            ToolError::Unavailable(e.to_string())
        }
        other => ToolError::failed(other.to_string()),
    }
}

/// `ask_<assistant>` as an MCP tool name: `^[a-zA-Z0-9_-]{1,64}$`.
pub fn ask_tool_name(assistant: &str) -> String {
    let clean: String = assistant
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut name = format!("ask_{clean}");
    name.truncate(64);
    name
}

/// One assistant as a tool: `{message, session_id?}` runs a chat to its `done`.
struct AskAssistant {
    spec: ToolSpec,
    engine: Engine,
    tenant: Arc<Tenant>,
    user: UserScope,
    assistant: AssistantId,
}

impl AskAssistant {
    #[allow(clippy::too_many_arguments)]
    fn new(
        engine: Engine,
        tenant: Arc<Tenant>,
        user: UserScope,
        assistant: AssistantId,
        title: &str,
        description: &str,
        timeout: Duration,
    ) -> Self {
        let name = ask_tool_name(assistant.as_str());
        let mut spec = ToolSpec::new(
            ASSISTANTS_SERVICE,
            &name,
            &format!(
                "Ask the assistant {:?} ({title}): {description} Runs a full chat (it may use \
                 its tools, asking you to approve the risky ones) and returns its answer. Pass \
                 the returned session_id to continue the same conversation.",
                assistant.as_str()
            ),
            json!({
                "type": "object",
                "properties": {
                    "message": {"type": "string", "minLength": 1, "description": "What to say to the assistant"},
                    "session_id": {"type": "string", "description": "Continue this conversation (from an earlier answer's structuredContent)"},
                },
                "required": ["message"],
                "additionalProperties": false,
            }),
        )
        .with_timeout(timeout);
        spec.service_tool = assistant.as_str().to_string();
        AskAssistant {
            spec,
            engine,
            tenant,
            user,
            assistant,
        }
    }

    /// Put a `hitl_request` of the run to the MCP client's user and send the decision back.
    async fn decide(&self, session: SessionId, req: &HitlRequestData, ctx: &ToolContext) {
        let Ok(request_id) = req.request_id.parse::<ApprovalId>() else {
            tracing::warn!(request_id = %req.request_id, "a hitl_request with a bad id");
            return;
        };
        let decision = match (req.kind, &req.question) {
            (HitlKind::Question, Some(q)) => match ctx.interaction.ask(q.clone()).await {
                Ok(answer) => Decision::Answer { answer },
                Err(e) => Decision::Reject {
                    message: Some(no_answer(&e)),
                },
            },
            _ => {
                let calls: Vec<String> = req
                    .action_requests
                    .iter()
                    .map(|a| format!("{} {}", a.name, a.args))
                    .collect();
                let q = approval_question(
                    format!(
                        "The assistant {:?} wants to call: {}. Allow it?",
                        self.assistant.as_str(),
                        calls.join("; ")
                    ),
                    req.question.as_ref().map(|q| q.timeout).unwrap_or(300),
                );
                match ctx.interaction.ask(q).await {
                    Ok(a) if is_yes(&a) => Decision::Approve { message: None },
                    Ok(_) => Decision::Reject {
                        message: Some("rejected by the MCP client's user".into()),
                    },
                    // Never approve for a user who could not be asked.
                    Err(e) => Decision::Reject {
                        message: Some(no_answer(&e)),
                    },
                }
            }
        };
        if let Err(e) = self
            .engine
            .decide(&self.tenant, &self.user, session, request_id, decision)
            .await
        {
            // Timed out or the run ended meanwhile: its `done` says how.
            tracing::debug!(error = %e, "an /mcp decision was not taken");
        }
    }
}

fn no_answer(e: &InteractionError) -> String {
    format!("the MCP client's user could not be asked or did not answer: {e}")
}

#[async_trait]
impl Tool for AskAssistant {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let message = args["message"].as_str().unwrap_or_default().to_string();
        let session_id = match args.get("session_id").and_then(Value::as_str) {
            Some(raw) => {
                let id: SessionId = raw
                    .parse()
                    .map_err(|e| ToolError::invalid(format!("session_id: {e}")))?;
                let existing = self
                    .engine
                    .load_session(&self.tenant, &self.user, id)
                    .await
                    .map_err(engine_tool_error)?;
                if existing.assistant_id != self.assistant {
                    return Err(ToolError::invalid(format!(
                        "session {id} is a conversation with {:?}; use ask_{} for it, or leave \
                         session_id out to start a new one",
                        existing.assistant_id.as_str(),
                        existing.assistant_id.as_str()
                    )));
                }
                Some(id)
            }
            None => None,
        };
        // rmcp runs calls on plain tokio tasks: the run's stream needs no actor.
        let mut run = self
            .engine
            .stream_run(
                &self.tenant,
                &self.user,
                ChatCommand {
                    session_id,
                    new_session: CreateSession {
                        assistant_id: Some(self.assistant.clone()),
                        metadata: Some(json!({"source": "mcp"})),
                        ..Default::default()
                    },
                    message,
                    enqueue: false,
                    subscriber: None,
                    request_id: None,
                },
            )
            .await
            .map_err(engine_tool_error)?;
        let (session, run_id) = (run.session_id(), run.run_id().to_string());
        let mut text = String::new();
        let mut errors = Vec::new();
        let mut status = None;
        loop {
            let ev = tokio::select! {
                ev = run.next() => ev,
                _ = ctx.cancel.cancelled() => {
                    // An MCP cancel of the call cancels the run; its `done` follows within a second.
                    let _ = self.engine.cancel(&self.tenant, &self.user, session).await;
                    let _ = tokio::time::timeout(CANCEL_WAIT, run.finish()).await;
                    return Err(ToolError::Cancelled);
                }
            };
            let Some(ev) = ev else { break };
            // A `task` child run's events: its questions and approvals are the caller's to
            // decide like the run's own; its text, errors and `done` are its parent's business.
            let child = ev.event.parent_run_id.is_some();
            match &ev.event.payload {
                _ if child && !matches!(ev.event.payload, EventPayload::HitlRequest(_)) => {}
                EventPayload::Text(t) if t.is_final => text = t.content.clone(),
                EventPayload::Error(e) => errors.push(e.error.clone()),
                EventPayload::HitlRequest(req) => {
                    tokio::select! {
                        _ = self.decide(session, req, ctx) => {}
                        _ = ctx.cancel.cancelled() => {}
                    }
                }
                EventPayload::Done(d) => status = Some(d.status),
                _ => {}
            }
        }
        let Some(status) = status else {
            return Err(ToolError::failed(
                "the session stopped before its run ended; see GET /api/v1/sessions/{id}/events",
            ));
        };
        let run = run_id;
        if text.is_empty() && status != DoneStatus::Completed {
            text = match errors.last() {
                Some(e) => format!("The run ended {}: {e}", status.as_str()),
                None => format!("The run ended {}.", status.as_str()),
            };
        }
        let content = json!({
            "text": text,
            "session_id": session.to_string(),
            "run_id": run,
            "status": status.as_str(),
        });
        Ok(if status == DoneStatus::Completed {
            ToolOutput::ok(content)
        } else {
            ToolOutput::failed(content)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ask_tool_names_fit_the_mcp_pattern() {
        let re = regex_lite_check;
        assert_eq!(ask_tool_name("default"), "ask_default");
        assert_eq!(ask_tool_name("sre.bot/1"), "ask_sre_bot_1");
        let long = "a".repeat(100);
        assert_eq!(ask_tool_name(&long).len(), 64);
        for id in ["default", "x y", "ünïcode", &long] {
            assert!(re(&ask_tool_name(id)), "{id}");
        }
    }

    fn regex_lite_check(name: &str) -> bool {
        (1..=64).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn bindings_belong_to_one_owner() {
        let b = SessionBindings::default();
        let a = Owner {
            tenant: TenantId::new(),
            user: UserId::new(),
            path: None,
        };
        b.bind("s1".into(), a.clone());
        assert_eq!(b.owner("s1"), Some(a.clone()));
        let on_virtual = Owner {
            path: Some(VirtualServerName::try_from("support").unwrap()),
            ..a.clone()
        };
        assert_ne!(b.owner("s1"), Some(on_virtual));
        assert_eq!(b.owner("s2"), None);
        b.forget("s1");
        assert_eq!(b.owner("s1"), None);
    }
}
