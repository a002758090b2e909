//! OAuth sign-in to MCP servers (issue 18 item 1), for a user's own servers and the platform's
//! (config-file) servers with `auth: {type: oauth, grant: authorization_code}`:
//!
//! - `POST /users/{user_id}/mcp-servers/{name}/sign-in` starts a sign-in and answers
//!   `{authorization_url, expires_at, redirect_uri}`: the user opens the URL in a browser;
//! - `GET /mcp/oauth/callback?code&state[&iss]` is where the authorization server sends the
//!   browser back. It takes no API key: the `state` is the credential (random, stored only as
//!   a hash, bound to the tenant, user and server, used once, expiring after
//!   [`SIGN_IN_TTL`]). It stores the tokens (sealed) and answers a small HTML page;
//! - `DELETE /users/{user_id}/mcp-servers/{name}/sign-in` forgets the user's tokens.
//!
//! The redirect URI is `<mcp.public_url>/api/v1/mcp/oauth/callback` (or the request's own
//! scheme and host when `mcp.public_url` is unset). After a sign-in or sign-out the user's pool
//! connection to the server is closed, so the next run connects with the new tokens.
//!
//! [`DbTokenStore`] is where the pool's connections read and refresh a user's tokens.

use std::sync::Arc;

use actix_web::web::{self, Json};
use actix_web::{HttpRequest, HttpResponse};
use agentry_actors::mcp_pool::UserConfigChanged;
use agentry_mcp::client::oauth::{self, OAuthTokenStore, OAuthTokens, PendingSignIn, TokenSummary};
use agentry_mcp::client::{HttpAuth, HttpConfig, McpServerConfig, McpTransportConfig, OAuthGrant};
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::{TenantId, UserId};
use agentry_sealing::SecretBox;
use agentry_store::{PlatformScope, TenantScope, mcp_oauth, mcp_servers};
use async_trait::async_trait;
use sea_orm::DatabaseConnection;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::TenantCaller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, param};
use crate::routes::resource::endpoint;
use crate::state::AppState;
use crate::wiring::stored_of;

/// How long a started sign-in may take.
pub const SIGN_IN_TTL: chrono::Duration = chrono::Duration::minutes(10);
/// The callback's path.
pub const CALLBACK_PATH: &str = "/api/v1/mcp/oauth/callback";

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        endpoint("/users/{user_id}/mcp-servers/{name}/sign-in")
            .post(start_sign_in)
            .delete(sign_out),
    )
    .service(endpoint("/mcp/oauth/callback").get(callback));
}

/// A user's tokens for one server in the database, sealed, bound to the server's URL (tokens
/// issued for one URL are never sent to another: a changed URL reads as "not signed in").
pub struct DbTokenStore {
    pub db: DatabaseConnection,
    pub secrets: Option<SecretBox>,
    pub scope: TenantScope,
    pub user: UserId,
    pub server: String,
    pub url: String,
}

impl DbTokenStore {
    fn secrets(&self) -> Result<&SecretBox, String> {
        self.secrets.as_ref().ok_or_else(|| {
            "this server has no `mcp.encryption_key`, so it cannot keep OAuth tokens".to_string()
        })
    }
}

#[async_trait]
impl OAuthTokenStore for DbTokenStore {
    async fn load(&self) -> Result<Option<OAuthTokens>, String> {
        let Some(row) = mcp_oauth::get_tokens(&self.db, &self.scope, self.user, &self.server)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(None);
        };
        if row.server_url != self.url {
            return Ok(None);
        }
        let v: Value = self
            .secrets()?
            .open_json(&row.tokens_sealed, "OAuth tokens")
            .map_err(|e| e.to_string())?;
        OAuthTokens::from_json(v).map(Some)
    }

    async fn save(&self, tokens: OAuthTokens) -> Result<(), String> {
        let sealed = self
            .secrets()?
            .seal_json(&tokens.to_json())
            .map_err(|e| e.to_string())?;
        mcp_oauth::put_tokens(
            &self.db,
            &self.scope,
            self.user,
            &self.server,
            &self.url,
            &sealed,
        )
        .await
        .map_err(|e| e.to_string())
    }

    async fn clear(&self) -> Result<(), String> {
        mcp_oauth::delete_tokens(&self.db, &self.scope, self.user, &self.server)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// The OAuth HTTP config of a server, if it has `auth: {type: oauth}`.
pub fn oauth_http(config: &McpServerConfig) -> Option<(&HttpConfig, OAuthGrant)> {
    match &config.transport {
        McpTransportConfig::Http(h) => match &h.auth {
            HttpAuth::OAuth(o) => Some((h, o.grant)),
            _ => None,
        },
        _ => None,
    }
}

/// The user's server `name` (their own, else the platform's), and whether it is the platform's.
async fn server_of(
    state: &AppState,
    scope: &TenantScope,
    user: UserId,
    name: &str,
) -> ApiResult<(McpServerConfig, bool)> {
    if let Some(row) = mcp_servers::get_by_name(&state.db, scope, user, name).await? {
        let config =
            agentry_mcp::stored::join_from_storage(&stored_of(&row), state.secrets.as_ref())
                .map_err(|e| ApiError::new(e.code(), e.to_string()))?;
        return Ok((config, false));
    }
    if let Some(entry) = state
        .mcp_file
        .as_ref()
        .and_then(|f| f.current().get(name).cloned())
    {
        return Ok((entry.config, true));
    }
    Err(ApiError::not_found(format!("MCP server {name:?}")))
}

/// The network guard for a user's own server (as the pool connects it); none for the platform's.
fn guard(
    state: &AppState,
    platform: bool,
) -> Option<Arc<agentry_builtin::net_guard::GuardedResolver>> {
    (!platform).then(|| {
        Arc::new(agentry_builtin::net_guard::GuardedResolver::new(
            &state.settings.tools,
        ))
    })
}

/// A sign-in that cannot start: the server or its authorization server does not answer as OAuth
/// needs (not found, refused the registration). The cause is the server's configuration or the
/// remote side, never Agentry's: a 422 naming it.
fn mcp_error(e: agentry_mcp::client::McpError) -> ApiError {
    ApiError::validation("auth", e.to_string())
}

fn no_key() -> ApiError {
    ApiError::new(
        ErrorCode::ServiceUnavailable,
        "this server has no `mcp.encryption_key` (AGENTRY_MCP__ENCRYPTION_KEY), so it cannot keep OAuth tokens; ask the operator",
    )
}

/// Whether `user` is signed in to `config`'s server, for a server's REST view: `None` for a
/// server without OAuth.
pub async fn sign_in_view(
    state: &AppState,
    scope: &TenantScope,
    user: UserId,
    config: &McpServerConfig,
) -> Option<Value> {
    let (h, grant) = oauth_http(config)?;
    if grant == OAuthGrant::ClientCredentials {
        return Some(json!({"grant": "client_credentials", "needs_sign_in": false}));
    }
    let store = DbTokenStore {
        db: state.db.clone(),
        secrets: state.secrets.clone(),
        scope: *scope,
        user,
        server: config.name.clone(),
        url: h.url.clone(),
    };
    let summary: Option<TokenSummary> = store
        .load()
        .await
        .ok()
        .flatten()
        .filter(OAuthTokens::has_token)
        .map(|t| t.summary());
    Some(match summary {
        Some(s) => json!({
            "grant": "authorization_code", "signed_in": true, "needs_sign_in": false,
            "scopes": s.scopes, "expires_at": s.expires_at, "refreshable": s.refreshable,
        }),
        None => json!({"grant": "authorization_code", "signed_in": false, "needs_sign_in": true}),
    })
}

/// Start signing in to an OAuth MCP server.
#[utoipa::path(
    post,
    path = "/api/v1/users/{user_id}/mcp-servers/{name}/sign-in",
    tag = "mcp",
    params(
        ("user_id" = String, Path, description = "User id (UUID)"),
        ("name" = String, Path, description = "Server name"),
    ),
    responses(
        (status = 400, description = "`user_id` is not a UUID, or `name` is not a valid server name", body = agentry_schema::ErrorResponse),
        (status = 200, description = "`{authorization_url, expires_at, redirect_uri, scopes}`: open `authorization_url` in a browser before `expires_at`; the authorization server sends the browser back to `redirect_uri`", body = Object),
        (status = 422, description = "The server does not use OAuth sign-in (`auth.type` is not `oauth`, or its grant is `client_credentials`), or its authorization server could not be discovered or refused the registration (`validation_error`, the cause in `message`)", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user or server visible to the caller", body = agentry_schema::ErrorResponse),
        (status = 503, description = "No `mcp.encryption_key`: tokens cannot be kept", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn start_sign_in(
    caller: TenantCaller,
    state: web::Data<AppState>,
    req: HttpRequest,
    user: ApiPath<param::User>,
    name: ApiPath<param::McpServer>,
) -> ApiResult<Json<Value>> {
    let user = owner(&state, &caller, user.into_inner()).await?;
    let name = name.0.as_str().to_string();
    let (config, platform) = server_of(&state, &caller.scope(), user, &name).await?;
    let Some((http, grant)) = oauth_http(&config) else {
        return Err(ApiError::validation(
            "auth",
            format!(
                "MCP server {name:?} does not use OAuth (auth type oauth): there is nothing to sign in to"
            ),
        ));
    };
    if grant == OAuthGrant::ClientCredentials {
        return Err(ApiError::validation(
            "auth.grant",
            format!(
                "MCP server {name:?} uses client_credentials: Agentry gets its token by itself, no sign-in"
            ),
        ));
    }
    let secrets = state.secrets.as_ref().ok_or_else(no_key)?;
    // A step-up keeps what the user granted before.
    let store = DbTokenStore {
        db: state.db.clone(),
        secrets: state.secrets.clone(),
        scope: caller.scope(),
        user,
        server: name.clone(),
        url: http.url.clone(),
    };
    let granted: Vec<String> = store
        .load()
        .await
        .ok()
        .flatten()
        .map(|t| t.summary().scopes)
        .unwrap_or_default();
    let redirect_uri = format!("{}{CALLBACK_PATH}", crate::mcp_server::public_base(&req));
    let started = oauth::begin_sign_in(
        &name,
        http,
        &redirect_uri,
        None,
        &granted,
        guard(&state, platform).as_ref(),
    )
    .await
    .map_err(mcp_error)?;
    let expires_at = agentry_store::now() + SIGN_IN_TTL;
    let sealed = secrets
        .seal_json(&started.pending)
        .map_err(|e| ApiError::internal("sealing the sign-in", e))?;
    mcp_oauth::put_state(
        &state.db,
        &caller.scope(),
        user,
        &name,
        &started.pending.state,
        &sealed,
        expires_at,
    )
    .await?;
    Ok(Json(json!({
        "authorization_url": started.authorization_url,
        "expires_at": expires_at,
        "redirect_uri": redirect_uri,
        "scopes": started.pending.scopes,
    })))
}

/// Forget the user's OAuth tokens for a server.
#[utoipa::path(
    delete,
    path = "/api/v1/users/{user_id}/mcp-servers/{name}/sign-in",
    tag = "mcp",
    params(
        ("user_id" = String, Path, description = "User id (UUID)"),
        ("name" = String, Path, description = "Server name"),
    ),
    responses(
        (status = 400, description = "`user_id` is not a UUID, or `name` is not a valid server name", body = agentry_schema::ErrorResponse),
        (status = 204, description = "The tokens are forgotten (the server's next connection needs a new sign-in)"),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no tenant)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such user, server, or no sign-in to it", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn sign_out(
    caller: TenantCaller,
    state: web::Data<AppState>,
    user: ApiPath<param::User>,
    name: ApiPath<param::McpServer>,
) -> ApiResult<HttpResponse> {
    let user = owner(&state, &caller, user.into_inner()).await?;
    let name = name.0.as_str().to_string();
    if !mcp_oauth::delete_tokens(&state.db, &caller.scope(), user, &name).await? {
        return Err(ApiError::not_found(format!(
            "a sign-in to MCP server {name:?}"
        )));
    }
    close(&state, caller.tenant_id(), user, &name).await;
    Ok(HttpResponse::NoContent().finish())
}

/// The user whose servers are addressed, if the caller may manage them (as for the servers).
async fn owner(state: &AppState, caller: &TenantCaller, user: UserId) -> ApiResult<UserId> {
    if user != caller.user_id() && !caller.is_admin() {
        return Err(ApiError::not_found(format!("user {user}")));
    }
    if agentry_store::users::get(&state.db, &caller.scope(), user)
        .await?
        .is_none()
    {
        return Err(ApiError::not_found(format!("user {user}")));
    }
    Ok(user)
}

/// Close the user's pool connection to `server`, so the next run connects with the new tokens.
async fn close(state: &AppState, tenant: TenantId, user: UserId, server: &str) {
    let Ok(Some(t)) = agentry_store::tenants::get(&state.db, &PlatformScope::new(), tenant).await
    else {
        return;
    };
    if let Ok(Some(pool)) = state.engine.mcp_pool(&t).await {
        pool.do_send(UserConfigChanged {
            user,
            server: Some(server.to_string()),
        });
    }
}

/// What the authorization server sends the browser back with.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    /// The authorization code.
    pub code: Option<String>,
    /// The sign-in's `state` (its credential).
    pub state: Option<String>,
    /// The authorization server's issuer (RFC 9207), when it sends one.
    pub iss: Option<String>,
    /// Set when the authorization server refused (`access_denied`, …).
    pub error: Option<String>,
    pub error_description: Option<String>,
}

fn page(status: actix_web::http::StatusCode, title: &str, text: &str) -> HttpResponse {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .insert_header(("Referrer-Policy", "no-referrer"))
        .insert_header(("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'"))
        .body(format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title>\
             <style>body{{font-family:sans-serif;max-width:36em;margin:4em auto;padding:0 1em}}</style>\
             </head><body><h1>{t}</h1><p>{x}</p></body></html>",
            t = esc(title),
            x = esc(text)
        ))
}

/// A failed sign-in, for a person in a browser. Answered 200: the gateway turns every 4xx body
/// into its JSON error shape, which a browser would show as JSON around the page.
fn failed(text: &str) -> HttpResponse {
    page(actix_web::http::StatusCode::OK, "Sign-in failed", text)
}

/// Where the authorization server sends the browser back after a sign-in.
#[utoipa::path(
    get,
    path = "/api/v1/mcp/oauth/callback",
    tag = "mcp",
    security(()),
    params(CallbackQuery),
    responses(
        (status = 200, description = "HTML for the person in the browser: \"Signed in\" (the tab can be closed), or \"Sign-in failed\" with the cause (unknown, used or expired `state`, refused by the authorization server, code exchange failed) and what to do", content_type = "text/html"),
    )
)]
pub async fn callback(
    state: web::Data<AppState>,
    query: web::Query<CallbackQuery>,
) -> HttpResponse {
    let q = query.into_inner();
    let Some(raw_state) = q.state.as_deref().filter(|s| !s.is_empty()) else {
        return failed("The link has no sign-in state. Start the sign-in again from Agentry.");
    };
    let taken = match mcp_oauth::take_state(&state.db, &PlatformScope::new(), raw_state).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("reading an OAuth sign-in: {e}");
            return page(
                actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
                "Sign-in failed",
                "Agentry could not read the sign-in right now. Try again in a minute.",
            );
        }
    };
    let Some(pending_row) = taken else {
        return failed(
            "This sign-in link is unknown or was already used. Start the sign-in again from Agentry.",
        );
    };
    if pending_row.expires_at < agentry_store::now() {
        return failed("This sign-in expired. Start the sign-in again from Agentry.");
    }
    if let Some(error) = &q.error {
        return failed(&format!(
            "The authorization server refused the sign-in: {error}{}",
            q.error_description
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        ));
    }
    let Some(code) = q.code.as_deref().filter(|c| !c.is_empty()) else {
        return failed(
            "The authorization server sent no code. Start the sign-in again from Agentry.",
        );
    };
    let scope = PlatformScope::new().tenant(pending_row.tenant_id);
    let user = pending_row.user_id;
    let name = pending_row.server_name.clone();
    let Some(secrets) = state.secrets.as_ref() else {
        return failed("This Agentry server cannot keep OAuth tokens (no encryption key).");
    };
    let pending: PendingSignIn =
        match secrets.open_json(&pending_row.pending_sealed, "OAuth sign-in") {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("opening an OAuth sign-in: {e}");
                return failed("The sign-in could not be read. Start it again from Agentry.");
            }
        };
    let (config, platform) = match server_of(&state, &scope, user, &name).await {
        Ok(c) => c,
        Err(_) => return failed(&format!("The MCP server {name:?} no longer exists.")),
    };
    let Some((http, _)) = oauth_http(&config) else {
        return failed(&format!("The MCP server {name:?} no longer uses OAuth."));
    };
    let tokens = match oauth::finish_sign_in(
        &name,
        http,
        pending,
        code,
        raw_state,
        q.iss.as_deref(),
        guard(&state, platform).as_ref(),
    )
    .await
    {
        Ok(t) => t,
        Err(e) => return failed(&format!("{e}. Start the sign-in again from Agentry.")),
    };
    let store = DbTokenStore {
        db: state.db.clone(),
        secrets: state.secrets.clone(),
        scope,
        user,
        server: name.clone(),
        url: http.url.clone(),
    };
    if let Err(e) = store.save(tokens).await {
        tracing::warn!("storing OAuth tokens: {e}");
        return page(
            actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
            "Sign-in failed",
            "Agentry could not store the sign-in. Try again in a minute.",
        );
    }
    close(&state, pending_row.tenant_id, user, &name).await;
    page(
        actix_web::http::StatusCode::OK,
        "Signed in",
        &format!("You are signed in to the MCP server {name:?}. You can close this tab."),
    )
}
