//! `/mcp` and `/mcp/{virtual_server}`: Agentry as an MCP server over Streamable HTTP, for other
//! MCP clients (docs/mcp.md). The server itself — the caller's tools, `ask_<assistant>`, the
//! re-exported MCP servers, the audit, who owns which MCP session — is `agentry_mcp_server`,
//! over the `Engine`; this adapter is its HTTP side: rmcp's transport mounted in actix by
//! `rmcp-actix-web`, each request authenticated before rmcp reads its body, rmcp's errors in
//! our error JSON, the OAuth metadata ([`metadata`]) and, in cluster mode, the proxying of
//! other replicas' sessions ([`proxy`]).
//!
//! Every request is authenticated by [`guard`] before rmcp reads its body: the API key (the
//! same as the REST API's, through the `TenantCaller` extractor), then the MCP session: a
//! session id belongs to the tenant user whose `initialize` created it, and is "not found" for
//! every other key.

pub mod metadata;
pub mod proxy;

use std::sync::Arc;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{Method, StatusCode, header};
use actix_web::middleware::{Next, from_fn};
use actix_web::{FromRequest, HttpMessage, HttpResponse, ResponseError, web};
use agentry_actors::Engine;
use agentry_actors::tools::PlatformTools;
use agentry_mcp::server::ToolServer;
use agentry_mcp_server::{Admission, McpRequest, McpSessions, Owner, SESSION_HEADER};
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::VirtualServerName;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp_actix_web::transport::{StreamableHttpService, on_request_extensions};
use sea_orm::DatabaseConnection;

use self::metadata::{
    MCP_RESOURCE_METADATA, RESOURCE_METADATA, VIRTUAL_RESOURCE_METADATA, mcp_resource_metadata,
    root_resource_metadata, virtual_resource_metadata, with_challenge,
};
pub use self::proxy::McpPeers;
use self::proxy::PeerProxy;
use crate::auth::TenantCaller;
use crate::error::ApiError;
use crate::routes::resource::endpoint;
use crate::settings::Settings;

/// Everything `/mcp` needs, built once at start-up and shared by every worker.
pub struct McpEndpoint {
    service: StreamableHttpService<ToolServer, LocalSessionManager>,
    sessions: web::Data<McpSessions>,
    proxy: Option<web::Data<PeerProxy>>,
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
        let server = agentry_mcp_server::tool_server(
            engine,
            tools,
            db,
            agentry_mcp_server::Config {
                hitl_timeout_secs: settings.hitl.timeout_secs,
                request_extensions: on_request_extensions,
            },
        );
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
                if let Some(caller) = req.extensions().get::<McpRequest>() {
                    ext.insert(caller.clone());
                }
            })
            .build();
        let (directory, proxy) = match peers {
            Some(p) => (Some(p.directory), Some(web::Data::new(p.proxy))),
            None => (None, None),
        };
        McpEndpoint {
            service,
            sessions: web::Data::new(McpSessions::new(directory)),
            proxy,
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
                .app_data(self.sessions.clone());
            if let Some(proxy) = &self.proxy {
                scope = scope.app_data(proxy.clone());
            }
            cfg.service(scope.wrap(from_fn(guard)));
        }
        cfg.service(endpoint(RESOURCE_METADATA).get(root_resource_metadata))
            .service(endpoint(MCP_RESOURCE_METADATA).get(mcp_resource_metadata))
            .service(endpoint(VIRTUAL_RESOURCE_METADATA).get(virtual_resource_metadata));
    }
}

/// Where a tenant's virtual servers are served.
const VIRTUAL_PATH: &str = "/mcp/{virtual_server}";

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
    let Some(sessions) = req.app_data::<web::Data<McpSessions>>().cloned() else {
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
    if let Some(id) = &session {
        // Cluster mode: a session another replica holds is served there (never passed on
        // twice: a request from a peer is answered here).
        let from_peer = req
            .app_data::<web::Data<crate::state::AppState>>()
            .is_some_and(|s| s.cluster.from_peer(req.request()));
        let admission = sessions.admit(id, &owner, from_peer).await;
        if let Admission::Elsewhere(url) = &admission
            && let Some(proxy) = req.app_data::<web::Data<PeerProxy>>().cloned()
        {
            return Ok(proxy.proxy(req, url).await);
        }
        if admission != Admission::Here {
            // Another tenant's (or user's) session is as unknown as a made-up one.
            return Ok(req.into_response(session_not_found(id).error_response()));
        }
    }
    req.extensions_mut().insert(McpRequest {
        tenant: caller.tenant_arc(),
        user: caller.user(),
        virtual_server: path,
    });
    let res = next.call(req).await?.map_into_boxed_body();
    let status = res.status();
    if status.is_success() {
        match (&session, res.headers().get(SESSION_HEADER)) {
            (None, Some(new)) => {
                if let Ok(new) = new.to_str() {
                    sessions.opened(new, owner);
                }
            }
            (Some(id), _) if method == Method::DELETE => sessions.closed(id),
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
