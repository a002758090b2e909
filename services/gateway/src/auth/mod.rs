//! Authentication and tenancy (CONVENTIONS §10).
//!
//! A request's key is resolved once, by the [`authenticate`] middleware, before routing runs
//! any extractor; the outcome waits in the request's extensions. Handlers then take one of the
//! typed extractors, which only read that outcome and so answer at once — before a `Json` body
//! extractor next to them has read a byte of the body:
//!
//! | extractor | who gets through | otherwise |
//! |---|---|---|
//! | [`Caller`] | the platform admin or any tenant key | 401 |
//! | [`TenantCaller`] | a tenant key (member or tenant admin) | 401; 403 for the platform admin key |
//! | [`TenantAdmin`] | a tenant key whose role is admin | 401; 403 |
//! | [`PlatformAdmin`] | the platform admin key (`auth.admin_key`, or the one generated at the first start) | 404 while the admin API is off; 401; 403 |
//!
//! A missing, unknown, expired or revoked key and a disabled user all answer 401 with the same
//! message, so a caller cannot tell which. A suspended tenant answers 403 `tenant_suspended`.
//! None of these types can be built outside this module: holding one is proof of the check.

pub mod cache;
pub mod credentials;
pub mod oauth;

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpMessage, HttpRequest, ResponseError, web};
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::{ApiKeyId, TenantId, UserId};
use agentry_schema::roles::{RestArea, RoleName};
use agentry_schema::tenancy::{Role, TenantStatus};
use agentry_store::tenants::Tenant;
use agentry_store::{PlatformScope, TenantScope, UserScope};

pub use cache::{AdminKeySource, Forgotten, KeyResolver};
pub use credentials::{Presented, WS_KEY_PROTOCOL_PREFIX, WS_PROTOCOL};

use crate::error::ApiError;
use crate::state::AppState;

/// The one answer to every unusable key.
pub const INVALID_KEY: &str =
    "the API key is invalid, expired or revoked; ask your tenant admin for a new key";
pub const MISSING_KEY: &str =
    "an API key is required: send `Authorization: Bearer <key>` or `X-API-Key: <key>`";

pub(crate) fn invalid_key() -> ApiError {
    ApiError::new(ErrorCode::Unauthorized, INVALID_KEY)
}

/// Who is calling. Built only by this module.
#[derive(Debug, Clone)]
pub enum Caller {
    PlatformAdmin(PlatformAdmin),
    Tenant(TenantCaller),
}

/// The holder of the platform admin key.
#[derive(Debug, Clone)]
pub struct PlatformAdmin {
    _sealed: (),
}

impl PlatformAdmin {
    /// The operator at the server's machine with its configuration (`agentry admin --direct`):
    /// whoever can open the database already holds every tenant's rows, so no key proves more.
    pub(crate) fn at_the_console(_reason: &'static str) -> Self {
        PlatformAdmin { _sealed: () }
    }

    /// The scope that may read and change across tenants.
    pub fn scope(&self) -> PlatformScope {
        PlatformScope::new()
    }
}

/// A tenant's user, acting with an API key (or, on `/mcp`, an OAuth access token naming them).
#[derive(Debug, Clone)]
pub struct TenantCaller {
    tenant: Arc<Tenant>,
    user: UserScope,
    /// `None` for an OAuth access token.
    key_id: Option<ApiKeyId>,
}

impl TenantCaller {
    /// The tenant as it was when the key was resolved (at most `auth.cache_ttl_secs` ago).
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    pub fn tenant_arc(&self) -> Arc<Tenant> {
        self.tenant.clone()
    }

    pub fn tenant_id(&self) -> TenantId {
        self.tenant.id
    }

    /// The scope every repository call of this request takes.
    pub fn scope(&self) -> TenantScope {
        self.user.tenant
    }

    /// The user and their effective role: admin only when both the user and the key are admin.
    pub fn user(&self) -> UserScope {
        self.user
    }

    pub fn user_id(&self) -> UserId {
        self.user.user_id
    }

    pub fn role(&self) -> Role {
        self.user.role
    }

    /// The caller's custom role (then [`Self::role`] is `Member`).
    pub fn custom_role(&self) -> Option<RoleName> {
        self.user.custom_role
    }

    /// The name of the caller's role: `admin`, `member` or the custom role's.
    pub fn role_name(&self) -> String {
        match self.user.custom_role {
            Some(n) => n.to_string(),
            None => self.user.role.to_string(),
        }
    }

    /// Refuse a REST area the caller's custom role does not list (built-in roles use every
    /// area their rights allow). A custom role the tenant no longer defines lists none.
    pub fn may_use(&self, area: RestArea) -> Result<(), ApiError> {
        let Some(name) = self.user.custom_role else {
            return Ok(());
        };
        if self
            .tenant
            .custom_role(name)
            .is_some_and(|d| d.allows_area(area))
        {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "the {name} role may not use the {area} part of the API; a tenant admin can add `{area}` to the role's areas"
        ))
        .with_details(serde_json::json!({ "role": name, "area": area })))
    }

    pub fn is_admin(&self) -> bool {
        self.user.is_admin()
    }

    /// The API key, or `None` when an OAuth access token authenticated the caller.
    pub fn key_id(&self) -> Option<ApiKeyId> {
        self.key_id
    }

    /// May this caller see rows owned by `owner`? Admins see the tenant's, members their own.
    pub fn can_see(&self, owner: UserId) -> bool {
        self.is_admin() || owner == self.user.user_id
    }
}

/// A tenant caller whose effective role is admin.
#[derive(Debug, Clone)]
pub struct TenantAdmin(TenantCaller);

impl Deref for TenantAdmin {
    type Target = TenantCaller;
    fn deref(&self) -> &TenantCaller {
        &self.0
    }
}

impl TenantAdmin {
    pub fn into_inner(self) -> TenantCaller {
        self.0
    }
}

/// The outcome of resolving a request's credentials, kept in the request's extensions.
#[derive(Debug, Clone)]
pub(crate) enum Authentication {
    Anonymous,
    Authenticated(Caller),
    Rejected(ApiError),
}

impl Authentication {
    /// The tenant of an authenticated tenant caller (for the access log).
    pub(crate) fn tenant_id(&self) -> Option<TenantId> {
        match self {
            Authentication::Authenticated(Caller::Tenant(t)) => Some(t.tenant_id()),
            _ => None,
        }
    }

    fn into_caller(self) -> Result<Caller, ApiError> {
        match self {
            Authentication::Anonymous => Err(ApiError::new(ErrorCode::Unauthorized, MISSING_KEY)),
            Authentication::Authenticated(c) => Ok(c),
            Authentication::Rejected(e) => Err(e),
        }
    }
}

/// Resolve the credentials of a request (no caching of the request itself: the resolver caches
/// keys). `path`: OAuth access tokens are good on `/mcp` only.
async fn resolve(
    state: &AppState,
    headers: &actix_web::http::header::HeaderMap,
    path: &str,
) -> Authentication {
    match credentials::presented(headers) {
        Presented::None => Authentication::Anonymous,
        Presented::Malformed => Authentication::Rejected(invalid_key()),
        Presented::Key(k) => {
            let oauth = state.oauth.as_deref().filter(|_| is_mcp_path(path));
            resolve_key(state, k, oauth).await
        }
    }
}

/// `/mcp` and below: where an external authorization server's tokens are accepted.
pub fn is_mcp_path(path: &str) -> bool {
    path == "/mcp" || path.starts_with("/mcp/")
}

/// Check a tenant caller's key again, as a new request would (through the same cache): an open
/// WebSocket does so before it starts work. The answer is the caller as of now (a changed role
/// included), or the error a request would get: 401 for a key that is revoked or expired or
/// whose user is disabled or gone, 403 `tenant_suspended`, 503 when the database cannot say.
pub async fn recheck(state: &AppState, key: &WsKey) -> Result<TenantCaller, ApiError> {
    match resolve_key(state, &key.0, None).await.into_caller()? {
        // A role changed while the socket is open bites on its next message.
        Caller::Tenant(t) => t.may_use(RestArea::Chat).map(|()| t),
        Caller::PlatformAdmin(_) => Err(tenant_only()),
    }
}

/// The key an open WebSocket was opened with, kept to check it again; never printed.
#[derive(Clone)]
pub struct WsKey(String);

impl WsKey {
    /// The key of an upgrade request, when it presented one.
    pub fn of(headers: &actix_web::http::header::HeaderMap) -> Option<WsKey> {
        match credentials::presented(headers) {
            Presented::Key(k) => Some(WsKey(k.to_string())),
            _ => None,
        }
    }
}

impl std::fmt::Debug for WsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WsKey(…)")
    }
}

async fn resolve_key(
    state: &AppState,
    key: &str,
    oauth: Option<&oauth::OAuthVerifier>,
) -> Authentication {
    match state.auth.resolve(&state.db, key, oauth).await {
        Ok(Resolution::PlatformAdmin) => {
            Authentication::Authenticated(Caller::PlatformAdmin(PlatformAdmin { _sealed: () }))
        }
        Ok(Resolution::Tenant {
            tenant,
            user,
            key_id,
        }) => {
            if tenant.status == TenantStatus::Suspended {
                return Authentication::Rejected(ApiError::new(
                    ErrorCode::TenantSuspended,
                    format!(
                        "tenant {:?} is suspended; contact the platform administrator",
                        tenant.name
                    ),
                ));
            }
            Authentication::Authenticated(Caller::Tenant(TenantCaller {
                tenant,
                user,
                key_id,
            }))
        }
        Ok(Resolution::Invalid) => Authentication::Rejected(invalid_key()),
        Err(e) => Authentication::Rejected(e),
    }
}

/// What a key resolved to, before the per-request checks.
#[derive(Debug, Clone)]
pub enum Resolution {
    PlatformAdmin,
    Tenant {
        tenant: Arc<Tenant>,
        user: UserScope,
        /// `None` for an OAuth access token.
        key_id: Option<ApiKeyId>,
    },
    Invalid,
}

/// Middleware: resolve the request's key (if it has one) before routing, record the tenant and
/// user on the request's span, and leave the outcome for the extractors. It never rejects: a
/// route that needs no key (health, metrics) does not care.
pub async fn authenticate(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    if let Some(state) = req.app_data::<web::Data<AppState>>().cloned() {
        let outcome = resolve(&state, req.headers(), req.path()).await;
        if let Authentication::Authenticated(Caller::Tenant(t)) = &outcome {
            let span = tracing::Span::current();
            span.record("tenant_id", tracing::field::display(t.tenant_id()));
            span.record("user_id", tracing::field::display(t.user_id()));
            // A custom role's REST areas, before any handler (or WebSocket upgrade) runs.
            if t.custom_role().is_some()
                && let Some(area) = RestArea::of_path(req.path())
                && let Err(e) = t.may_use(area)
            {
                return Ok(req.into_response(e.error_response()));
            }
            // The tenant's requests_per_minute, for every request its keys make (a request
            // another replica proxied here was counted there).
            if !state.cluster.from_peer(req.request())
                && let Err(e) = state.engine.admit_request(t.tenant()).await
            {
                let err = ApiError::from(e);
                return Ok(req.into_response(err.error_response()));
            }
        }
        req.extensions_mut().insert(outcome);
    }
    next.call(req)
        .await
        .map(ServiceResponse::map_into_boxed_body)
}

type ExtractFuture<T> = Pin<Box<dyn Future<Output = Result<T, ApiError>>>>;

/// The caller of a request: from the middleware's outcome, or resolved here when the route was
/// mounted without the middleware.
fn caller_of(req: &HttpRequest) -> ExtractFuture<Caller> {
    let req = req.clone();
    Box::pin(async move {
        let known = req.extensions().get::<Authentication>().cloned();
        let outcome = match known {
            Some(a) => a,
            None => {
                let Some(state) = req.app_data::<web::Data<AppState>>().cloned() else {
                    return Err(ApiError::internal(
                        "authentication",
                        "the application state is not registered",
                    ));
                };
                let a = resolve(&state, req.headers(), req.path()).await;
                req.extensions_mut().insert(a.clone());
                a
            }
        };
        outcome.into_caller()
    })
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = ExtractFuture<Self>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        caller_of(req)
    }
}

fn tenant_only() -> ApiError {
    ApiError::new(
        ErrorCode::Forbidden,
        "the platform admin key has no tenant; use a key of a tenant's user (create one under /api/v1/admin/tenants/{id}/api-keys)",
    )
}

impl FromRequest for TenantCaller {
    type Error = ApiError;
    type Future = ExtractFuture<Self>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let caller = caller_of(req);
        Box::pin(async move {
            match caller.await? {
                Caller::Tenant(t) => Ok(t),
                Caller::PlatformAdmin(_) => Err(tenant_only()),
            }
        })
    }
}

impl FromRequest for TenantAdmin {
    type Error = ApiError;
    type Future = ExtractFuture<Self>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let caller = caller_of(req);
        Box::pin(async move {
            match caller.await? {
                Caller::Tenant(t) if t.is_admin() => Ok(TenantAdmin(t)),
                Caller::Tenant(_) => Err(ApiError::new(
                    ErrorCode::Forbidden,
                    "only a tenant admin may do this; ask one of your tenant's admins",
                )),
                Caller::PlatformAdmin(_) => Err(tenant_only()),
            }
        })
    }
}

/// Is the admin API on (an admin key configured)?
pub fn admin_api_enabled(state: &AppState) -> bool {
    state.auth.admin_api_on()
}

impl FromRequest for PlatformAdmin {
    type Error = ApiError;
    type Future = ExtractFuture<Self>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let enabled = req
            .app_data::<web::Data<AppState>>()
            .is_some_and(|s| admin_api_enabled(s));
        let caller = caller_of(req);
        Box::pin(async move {
            if !enabled {
                return Err(ApiError::new(
                    ErrorCode::NotFound,
                    "the admin API is off: set AGENTRY_AUTH__ADMIN_KEY (16+ characters), or AGENTRY_AUTH__GENERATE_ADMIN_KEY=true, and restart to enable it",
                ));
            }
            match caller.await? {
                Caller::PlatformAdmin(p) => Ok(p),
                Caller::Tenant(_) => Err(ApiError::new(
                    ErrorCode::Forbidden,
                    "this route needs the platform admin key; tenant admins manage their users and keys under /api/v1/tenant/",
                )),
            }
        })
    }
}
