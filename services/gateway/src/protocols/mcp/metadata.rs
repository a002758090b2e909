//! The OAuth side of `/mcp` (docs/mcp.md, "OAuth"): OAuth-first clients get
//! `WWW-Authenticate: Bearer resource_metadata="…"` on every 401 and the RFC 9728
//! protected-resource metadata at `/.well-known/oauth-protected-resource[/mcp]`; the bearer
//! tokens are the tenant's API keys and, when `[mcp.oauth]` names one, the access tokens of an
//! external authorization server, which the metadata then lists (`crate::auth::oauth`).

use std::sync::Arc;

use actix_web::http::{StatusCode, header};
use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::error::ApiError;

/// Where OAuth clients look for the protected-resource metadata (RFC 9728 §3): at the root for
/// the origin, and with the resource's path appended for `/mcp` (what the MCP authorization
/// spec has clients try first, and what a 401 of `/mcp` names in `WWW-Authenticate`).
pub const RESOURCE_METADATA: &str = "/.well-known/oauth-protected-resource";
pub const MCP_RESOURCE_METADATA: &str = "/.well-known/oauth-protected-resource/mcp";
/// A virtual server's metadata: the same resource as `/mcp` (a token for `/mcp` is good on
/// every virtual server of the caller's tenant).
pub const VIRTUAL_RESOURCE_METADATA: &str = "/.well-known/oauth-protected-resource/mcp/{name}";

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
pub(super) fn with_challenge(
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
