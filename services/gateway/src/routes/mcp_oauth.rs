//! OAuth sign-in to MCP servers (issue 18 item 1), for a user's own servers and the platform's
//! (config-file) servers with `auth: {type: oauth, grant: authorization_code}`:
//!
//! - `POST /users/{user_id}/mcp-servers/{name}/sign-in` starts a sign-in and answers
//!   `{authorization_url, expires_at, redirect_uri}`: the user opens the URL in a browser;
//! - `GET /mcp/oauth/callback?code&state[&iss]` is where the authorization server sends the
//!   browser back. It takes no API key: the `state` is the credential (random, stored only as
//!   a hash, bound to the tenant, user and server, used once, expiring after
//!   [`SIGN_IN_TTL`]). In the browser that started the sign-in (its cookie) it stores the tokens
//!   (sealed) and answers a small HTML page; any other browser is first asked to confirm whose
//!   account it connects (`POST` to the same path);
//! - `DELETE /users/{user_id}/mcp-servers/{name}/sign-in` forgets the user's tokens.
//!
//! The redirect URI is `<mcp.public_url>/api/v1/mcp/oauth/callback` (or the request's own
//! scheme and host when `mcp.public_url` is unset). After a sign-in or sign-out the user's pool
//! connection to the server is closed, so the next run connects with the new tokens.
//!
//! [`DbTokenStore`] is where the pool's connections read and refresh a user's tokens.

use std::sync::Arc;

use actix_web::web;
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
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::auth::TenantCaller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, param};
use crate::mcp_stored::stored_of;
use crate::routes::resource::endpoint;
use crate::state::AppState;

/// How long a started sign-in may take.
pub const SIGN_IN_TTL: chrono::Duration = chrono::Duration::minutes(10);
/// The callback's path.
pub const CALLBACK_PATH: &str = "/api/v1/mcp/oauth/callback";
/// The cookie that binds a sign-in to the browser that started it (its name ends with part of
/// the state's hash, so several sign-ins can run at once).
const COOKIE_PREFIX: &str = "agentry_sign_in_";

/// What is sealed for a started sign-in: rmcp's pending state (the PKCE verifier among it) and
/// the hash of the nonce the starting browser holds as a cookie.
#[derive(Serialize, Deserialize)]
struct SealedSignIn {
    pending: PendingSignIn,
    browser: String,
}

fn cookie_name(state: &str) -> String {
    format!("{COOKIE_PREFIX}{}", &mcp_oauth::state_hash(state)[..16])
}

/// What the sealed sign-in keeps of the browser's nonce: its SHA-256.
fn nonce_hash(nonce: &str) -> String {
    mcp_oauth::state_hash(nonce)
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        endpoint("/users/{user_id}/mcp-servers/{name}/sign-in")
            .post(start_sign_in)
            .delete(sign_out),
    )
    .service(
        endpoint("/mcp/oauth/callback")
            .get(callback)
            .post(confirm_callback),
    );
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
) -> ApiResult<HttpResponse> {
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
    let redirect_uri = format!(
        "{}{CALLBACK_PATH}",
        crate::protocols::mcp::metadata::public_base(&req)
    );
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
    let nonce = {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
    };
    let raw_state = started.pending.state.clone();
    let scopes = started.pending.scopes.clone();
    let sealed = secrets
        .seal_json(&SealedSignIn {
            pending: started.pending,
            browser: nonce_hash(&nonce),
        })
        .map_err(|e| ApiError::internal("sealing the sign-in", e))?;
    mcp_oauth::put_state(
        &state.db,
        &caller.scope(),
        user,
        &name,
        &raw_state,
        &sealed,
        expires_at,
    )
    .await?;
    // A browser that started the sign-in (the console's fetch) finishes it without a question;
    // any other browser is asked to confirm whose account it connects (see `callback`).
    let cookie = actix_web::cookie::Cookie::build(cookie_name(&raw_state), nonce)
        .path(CALLBACK_PATH)
        .http_only(true)
        .same_site(actix_web::cookie::SameSite::Lax)
        .secure(redirect_uri.starts_with("https://"))
        .max_age(actix_web::cookie::time::Duration::seconds(
            SIGN_IN_TTL.num_seconds(),
        ))
        .finish();
    Ok(HttpResponse::Ok().cookie(cookie).json(json!({
        "authorization_url": started.authorization_url,
        "expires_at": expires_at,
        "redirect_uri": redirect_uri,
        "scopes": scopes,
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
#[derive(Debug, Deserialize, utoipa::IntoParams, utoipa::ToSchema)]
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

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn page(status: actix_web::http::StatusCode, title: &str, text: &str) -> HttpResponse {
    page_with(status, title, &format!("<p>{}</p>", esc(text)))
}

/// An HTML page: `body` is trusted HTML (its variable parts escaped by the caller). It may post
/// a form to this origin and nothing else, and no other site may frame it.
fn page_with(status: actix_web::http::StatusCode, title: &str, body: &str) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .insert_header(("Referrer-Policy", "no-referrer"))
        .insert_header((
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ))
        .body(format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title>\
             <style>body{{font-family:sans-serif;max-width:36em;margin:4em auto;padding:0 1em}}</style>\
             </head><body><h1>{t}</h1>{body}</body></html>",
            t = esc(title),
        ))
}

/// A failed sign-in, for a person in a browser. Answered 200: the gateway turns every 4xx body
/// into its JSON error shape, which a browser would show as JSON around the page.
fn failed(text: &str) -> HttpResponse {
    page(actix_web::http::StatusCode::OK, "Sign-in failed", text)
}

/// Where the authorization server sends the browser back after a sign-in.
///
/// The browser that started the sign-in (it holds the sign-in's cookie: the console) is signed
/// in at once. Any other browser — the terminal client's user opening the printed link, or a
/// person someone else sent a sign-in link to — is first shown whose Agentry account the
/// sign-in connects, and continues only by confirming (`POST`, below). So a member cannot send
/// another person their sign-in link and quietly get that person's access at the server.
#[utoipa::path(
    get,
    path = "/api/v1/mcp/oauth/callback",
    tag = "mcp",
    security(()),
    params(CallbackQuery),
    responses(
        (status = 200, description = "HTML for the person in the browser: \"Signed in\" (the browser that started the sign-in; the tab can be closed); \"Confirm the sign-in\" naming the Agentry user, tenant and server, with a button that posts the same fields back (any other browser); or \"Sign-in failed\" with the cause (unknown, used or expired `state`, refused by the authorization server, code exchange failed) and what to do", content_type = "text/html"),
        (status = 503, description = "The database could not be reached (`database_unavailable`, with `Retry-After`): reload the page (a sign-in not yet used is kept)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn callback(
    state: web::Data<AppState>,
    req: HttpRequest,
    query: web::Query<CallbackQuery>,
) -> HttpResponse {
    let q = query.into_inner();
    let Some(raw_state) = q.state.as_deref().filter(|s| !s.is_empty()) else {
        return failed("The link has no sign-in state. Start the sign-in again from Agentry.");
    };
    let peeked = match mcp_oauth::peek_state(&state.db, &PlatformScope::new(), raw_state).await {
        Ok(p) => p,
        Err(e) => return unavailable("reading", e),
    };
    let Some(row) = peeked else {
        return failed(
            "This sign-in link is unknown or was already used. Start the sign-in again from Agentry.",
        );
    };
    if row.expires_at < agentry_store::now() || q.error.is_some() || no_code(&q) {
        // Nothing to confirm: finishing reports why (and forgets the sign-in).
        return finish(&state, q).await;
    }
    let browser = req
        .cookie(&cookie_name(raw_state))
        .map(|c| nonce_hash(c.value()));
    let started_here = state
        .secrets
        .as_ref()
        .and_then(|s| {
            s.open_json::<SealedSignIn>(&row.pending_sealed, "OAuth sign-in")
                .ok()
        })
        .is_some_and(|sealed| Some(sealed.browser) == browser);
    if started_here {
        return finish(&state, q).await;
    }
    confirm_page(&state, &row, &q).await
}

/// The person confirmed a sign-in shown by [`callback`]: the same fields, posted as a form.
#[utoipa::path(
    post,
    path = "/api/v1/mcp/oauth/callback",
    tag = "mcp",
    security(()),
    request_body(content = CallbackQuery, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "HTML: \"Signed in\", or \"Sign-in failed\" with the cause (as for `GET`)", content_type = "text/html"),
        (status = 413, description = "The body is larger than `server.body_limit_bytes` (`payload_too_large`)", body = agentry_schema::ErrorResponse),
        (status = 503, description = "The database could not be reached (`database_unavailable`, with `Retry-After`): reload the page (a sign-in not yet used is kept)", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn confirm_callback(state: web::Data<AppState>, body: web::Bytes) -> HttpResponse {
    match serde_urlencoded::from_bytes::<CallbackQuery>(&body) {
        Ok(q) => finish(&state, q).await,
        Err(_) => {
            failed("The confirmation could not be read. Start the sign-in again from Agentry.")
        }
    }
}

fn no_code(q: &CallbackQuery) -> bool {
    q.code.as_deref().is_none_or(str::is_empty)
}

/// The database could not be reached: the platform's 503 (`database_unavailable`, with
/// `Retry-After`), as on every route; the browser's person reloads the page to retry (the
/// sign-in was not used up).
fn unavailable(what: &str, e: agentry_store::StoreError) -> HttpResponse {
    use actix_web::ResponseError as _;
    tracing::warn!("{what} an OAuth sign-in: {e}");
    ApiError::from(e).error_response()
}

/// "Confirm the sign-in": whose Agentry account, which tenant and server; the fields go back by
/// `POST` when the person confirms.
async fn confirm_page(
    state: &AppState,
    row: &mcp_oauth::PendingState,
    q: &CallbackQuery,
) -> HttpResponse {
    let scope = PlatformScope::new().tenant(row.tenant_id);
    let user = match agentry_store::users::get(&state.db, &scope, row.user_id).await {
        Ok(Some(u)) => u.name,
        Ok(None) => return failed("The Agentry user of this sign-in no longer exists."),
        Err(e) => return unavailable("reading the user of", e),
    };
    let tenant =
        match agentry_store::tenants::get(&state.db, &PlatformScope::new(), row.tenant_id).await {
            Ok(Some(t)) => t.name,
            Ok(None) => return failed("The Agentry tenant of this sign-in no longer exists."),
            Err(e) => return unavailable("reading the tenant of", e),
        };
    let hidden = |name: &str, value: Option<&str>| {
        value.map_or(String::new(), |v| {
            format!(
                "<input type=\"hidden\" name=\"{name}\" value=\"{}\">",
                esc(v)
            )
        })
    };
    let body = format!(
        "<p>This connects the MCP server <b>{server}</b> of the Agentry user <b>{user}</b> \
         (tenant <b>{tenant}</b>) to the account you just signed in with.</p>\
         <p>Continue only if you are {user} and started this sign-in yourself. If someone sent \
         you this link, close this tab: continuing would give their Agentry account your access \
         at that server.</p>\
         <form method=\"post\" action=\"{CALLBACK_PATH}\">{code}{st}{iss}\
         <button type=\"submit\">Connect {server} for {user}</button></form>",
        server = esc(&row.server_name),
        user = esc(&user),
        tenant = esc(&tenant),
        code = hidden("code", q.code.as_deref()),
        st = hidden("state", q.state.as_deref()),
        iss = hidden("iss", q.iss.as_deref()),
    );
    page_with(
        actix_web::http::StatusCode::OK,
        "Confirm the sign-in",
        &body,
    )
}

/// Take the sign-in of `q.state` (once) and finish it: exchange the code, keep the tokens,
/// close the user's connection to the server so the next run uses them.
async fn finish(state: &AppState, q: CallbackQuery) -> HttpResponse {
    let Some(raw_state) = q.state.as_deref().filter(|s| !s.is_empty()) else {
        return failed("The link has no sign-in state. Start the sign-in again from Agentry.");
    };
    let taken = match mcp_oauth::take_state(&state.db, &PlatformScope::new(), raw_state).await {
        Ok(t) => t,
        Err(e) => return unavailable("reading", e),
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
    let sealed: SealedSignIn = match secrets.open_json(&pending_row.pending_sealed, "OAuth sign-in")
    {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!("opening an OAuth sign-in: {e}");
            return failed("The sign-in could not be read. Start it again from Agentry.");
        }
    };
    let (config, platform) = match server_of(state, &scope, user, &name).await {
        Ok(c) => c,
        Err(_) => return failed(&format!("The MCP server {name:?} no longer exists.")),
    };
    let Some((http, _)) = oauth_http(&config) else {
        return failed(&format!("The MCP server {name:?} no longer uses OAuth."));
    };
    let tokens = match oauth::finish_sign_in(
        &name,
        http,
        sealed.pending,
        code,
        raw_state,
        q.iss.as_deref(),
        guard(state, platform).as_ref(),
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
        use actix_web::ResponseError as _;
        tracing::warn!("storing the tokens of an OAuth sign-in: {e}");
        return ApiError::database_unavailable().error_response();
    }
    close(state, pending_row.tenant_id, user, &name).await;
    let mut done = page(
        actix_web::http::StatusCode::OK,
        "Signed in",
        &format!("You are signed in to the MCP server {name:?}. You can close this tab."),
    );
    let mut gone = actix_web::cookie::Cookie::build(cookie_name(raw_state), "")
        .path(CALLBACK_PATH)
        .finish();
    gone.make_removal();
    let _ = done.add_cookie(&gone);
    done
}
