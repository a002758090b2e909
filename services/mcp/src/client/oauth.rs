//! OAuth 2.1 for Streamable HTTP servers, as the MCP authorization spec (2025-11-25, 2026-07-28)
//! describes it, on rmcp's `AuthorizationManager` (RFC 9728 protected-resource metadata, RFC 8414
//! / OIDC discovery, PKCE, dynamic client registration, Client ID Metadata Documents, RFC 8707
//! resource indicators, RFC 9207 `iss` checks, refresh).
//!
//! What this module owns, and what it leaves to the platform:
//!
//! - **Connecting** ([`authorized_manager`], used by `McpConnection::connect` for
//!   `auth: {type: oauth}`): tokens come from an [`OAuthTokenStore`] the caller hands in through
//!   [`ClientHooks::oauth_tokens`](super::ClientHooks). A `client_credentials` server gets its
//!   token by itself; an `authorization_code` server with no usable token fails at once with
//!   [`McpError::AuthorizationRequired`] (no retry loop against the server): a person has to sign
//!   in. Expired tokens are refreshed before use and once more after a 401.
//! - **Signing in** ([`begin_sign_in`] → the person opens `authorization_url` →
//!   [`finish_sign_in`] with the `code` and `state` of the redirect): the state between the two
//!   steps is a [`PendingSignIn`], a value the platform keeps (sealed, with an expiry, in its
//!   database) so any replica can finish what another began. The tokens come back as
//!   [`OAuthTokens`], which the platform seals and stores per user and server.
//!
//! Every request of the OAuth machinery (discovery, registration, token) goes through the same
//! network guard as the MCP traffic when there is one (users' own servers).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry_builtin::net_guard::GuardedResolver;
use agentry_schema::secret::Secret;
use async_trait::async_trait;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, ClientCredentialsConfig,
    CredentialStore, OAuthClientConfig, OAuthHttpClient, OAuthHttpClientFuture,
    OAuthHttpRedirectPolicy, OAuthHttpRequest, StateStore, StoredAuthorizationState,
    StoredCredentials,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::config::{HttpConfig, OAuthConfig, OAuthGrant};
use super::error::McpError;

/// The client name sent in dynamic client registration.
pub const CLIENT_NAME: &str = "Agentry";
/// Largest OAuth response body read (metadata, registration, token).
const MAX_OAUTH_BODY: usize = 1024 * 1024;
/// Timeout of one OAuth HTTP request when rmcp suggests none.
const OAUTH_HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// A user's tokens for one server: what the platform stores (sealed) per user and server. The
/// fields are private: it is persisted with [`OAuthTokens::to_json`] and read back with
/// [`OAuthTokens::from_json`]; [`OAuthTokens::summary`] says what may be shown.
#[derive(Clone, Serialize, Deserialize)]
pub struct OAuthTokens {
    credentials: StoredCredentials,
    /// The secret the authorization server gave a dynamically registered client, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_secret: Option<String>,
    /// The redirect URI the client was registered with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    redirect_uri: Option<String>,
    /// The server's `WWW-Authenticate` challenge at sign-in: where its metadata is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    challenge: Option<String>,
}

impl std::fmt::Debug for OAuthTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthTokens")
            .field("summary", &self.summary())
            .finish_non_exhaustive()
    }
}

/// What may be shown about a user's tokens (never the tokens).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenSummary {
    pub client_id: String,
    pub scopes: Vec<String>,
    /// Unix seconds when the access token expires, when the server said.
    pub expires_at: Option<u64>,
    pub refreshable: bool,
    pub issuer: Option<String>,
}

impl OAuthTokens {
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    pub fn from_json(v: Value) -> Result<Self, String> {
        serde_json::from_value(v).map_err(|e| format!("stored OAuth tokens are unreadable: {e}"))
    }

    fn token_field(&self, name: &str) -> Option<Value> {
        let t = serde_json::to_value(self.credentials.token_response.as_ref()?).ok()?;
        t.get(name).cloned()
    }

    pub fn summary(&self) -> TokenSummary {
        let expires_in = self.token_field("expires_in").and_then(|v| v.as_u64());
        TokenSummary {
            client_id: self.credentials.client_id.clone(),
            scopes: self.credentials.granted_scopes.clone(),
            expires_at: match (expires_in, self.credentials.token_received_at) {
                (Some(e), Some(at)) => Some(at.saturating_add(e)),
                _ => None,
            },
            refreshable: self
                .token_field("refresh_token")
                .is_some_and(|v| !v.is_null()),
            issuer: self.credentials.issuer.clone(),
        }
    }

    /// There is an access token (it may have expired; a refresh token may renew it).
    pub fn has_token(&self) -> bool {
        self.credentials.token_response.is_some()
    }
}

/// Where one user's tokens for one server live. The platform's implementation seals them in its
/// database; [`MemoryTokenStore`] keeps them for the life of a process. Errors are in words.
#[async_trait]
pub trait OAuthTokenStore: Send + Sync {
    async fn load(&self) -> Result<Option<OAuthTokens>, String>;
    async fn save(&self, tokens: OAuthTokens) -> Result<(), String>;
    async fn clear(&self) -> Result<(), String>;
}

/// Tokens in memory (a `client_credentials` server without a platform store, the conformance
/// client, tests).
#[derive(Default, Clone)]
pub struct MemoryTokenStore(Arc<Mutex<Option<OAuthTokens>>>);

impl MemoryTokenStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self) -> Option<OAuthTokens> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[async_trait]
impl OAuthTokenStore for MemoryTokenStore {
    async fn load(&self) -> Result<Option<OAuthTokens>, String> {
        Ok(self.get())
    }
    async fn save(&self, tokens: OAuthTokens) -> Result<(), String> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(tokens);
        Ok(())
    }
    async fn clear(&self) -> Result<(), String> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(())
    }
}

/// rmcp's credential store over ours: rmcp reads and writes the token part, the client secret,
/// redirect URI and challenge ride along unchanged.
struct CredentialAdapter {
    store: Arc<dyn OAuthTokenStore>,
    client_secret: Option<String>,
    redirect_uri: Option<String>,
    challenge: Option<String>,
    /// `client_credentials`: how to get a new token when this one is about to expire.
    renewal: Option<Arc<Renewal>>,
}

impl CredentialAdapter {
    fn new(store: Arc<dyn OAuthTokenStore>) -> Self {
        CredentialAdapter {
            store,
            client_secret: None,
            redirect_uri: None,
            challenge: None,
            renewal: None,
        }
    }

    async fn stored(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self
            .store
            .load()
            .await
            .map_err(AuthError::CredentialStoreError)?
            .map(|t| t.credentials))
    }
}

/// A `client_credentials` token is renewed when less than this is left of it: more than the
/// 30 s before expiry at which rmcp's manager tries a refresh, which a `client_credentials`
/// token cannot have (there is no refresh token), so without renewal the manager would send
/// requests without a token once it lapses, and every call would fail until a reconnect.
const RENEW_BEFORE: Duration = Duration::from_secs(35);

/// What it takes to fetch a new `client_credentials` token.
struct Renewal {
    server: String,
    url: String,
    guard: Option<Arc<GuardedResolver>>,
    metadata: AuthorizationMetadata,
    config: ClientCredentialsConfig,
    /// One renewal at a time; the others then find the new token.
    running: tokio::sync::Mutex<()>,
}

impl Renewal {
    async fn fetch(&self) -> Result<StoredCredentials, AuthError> {
        let mut manager = new_manager(&self.server, &self.url, self.guard.as_ref())
            .await
            .map_err(|e| AuthError::InternalError(e.to_string()))?;
        manager.set_metadata(self.metadata.clone());
        let fresh = Arc::new(MemoryTokenStore::new());
        manager.set_credential_store(CredentialAdapter::new(fresh.clone()));
        manager.configure_client_credentials(&self.config)?;
        manager.exchange_client_credentials(&self.config).await?;
        fresh.get().map(|t| t.credentials).ok_or_else(|| {
            AuthError::ClientCredentialsError("the token endpoint gave no token".into())
        })
    }
}

/// Whether `c`'s access token has less than [`RENEW_BEFORE`] left (a token without a known
/// lifetime is kept).
fn expiring(c: &StoredCredentials) -> bool {
    // `expires_in` as the token endpoint sent it (oauth2's accessor is on a trait rmcp keeps
    // to itself).
    let lifetime = c
        .token_response
        .as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
        .and_then(|v| v["expires_in"].as_u64())
        .map(Duration::from_secs);
    let (Some(lifetime), Some(received_at)) = (lifetime, c.token_received_at) else {
        return false;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let left = lifetime
        .as_secs()
        .saturating_sub(now.saturating_sub(received_at));
    left < RENEW_BEFORE.as_secs()
}

#[async_trait]
impl CredentialStore for CredentialAdapter {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let stored = self.stored().await?;
        let Some(renewal) = &self.renewal else {
            return Ok(stored);
        };
        if stored.as_ref().is_some_and(|c| !expiring(c)) {
            return Ok(stored);
        }
        let _one = renewal.running.lock().await;
        // Another request may have renewed it while this one waited.
        let stored = self.stored().await?;
        if stored.as_ref().is_some_and(|c| !expiring(c)) {
            return Ok(stored);
        }
        let fresh = renewal.fetch().await?;
        tracing::debug!(server = %renewal.server, "renewed the client_credentials token");
        self.save(fresh.clone()).await?;
        Ok(Some(fresh))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.store
            .save(OAuthTokens {
                credentials,
                client_secret: self.client_secret.clone(),
                redirect_uri: self.redirect_uri.clone(),
                challenge: self.challenge.clone(),
            })
            .await
            .map_err(AuthError::CredentialStoreError)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.store
            .clear()
            .await
            .map_err(AuthError::CredentialStoreError)
    }
}

/// Holds the one authorization state of a sign-in between rmcp's calls.
#[derive(Default, Clone)]
struct OneState(Arc<Mutex<Option<(String, StoredAuthorizationState)>>>);

impl OneState {
    fn take(&self) -> Option<(String, StoredAuthorizationState)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

#[async_trait]
impl StateStore for OneState {
    async fn save(&self, csrf: &str, state: StoredAuthorizationState) -> Result<(), AuthError> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((csrf.to_string(), state));
        Ok(())
    }
    async fn load(&self, csrf: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        Ok(self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|(k, _)| k == csrf)
            .map(|(_, s)| s.clone()))
    }
    async fn delete(&self, csrf: &str) -> Result<(), AuthError> {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|(k, _)| k == csrf) {
            *slot = None;
        }
        Ok(())
    }
}

/// OAuth HTTP through the network guard: names resolved and checked by it, no proxy, redirects
/// checked (and not followed at all where rmcp asks so).
struct GuardedOAuthHttp {
    follow: reqwest::Client,
    stop: reqwest::Client,
}

impl GuardedOAuthHttp {
    fn new(guard: &Arc<GuardedResolver>) -> Result<Self, reqwest::Error> {
        let base = || {
            reqwest::Client::builder()
                .no_proxy()
                .dns_resolver(guard.clone())
                .timeout(OAUTH_HTTP_TIMEOUT)
        };
        Ok(Self {
            follow: base().redirect(guard.redirect_policy()).build()?,
            stop: base().redirect(reqwest::redirect::Policy::none()).build()?,
        })
    }
}

impl OAuthHttpClient for GuardedOAuthHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let client = match request.redirect_policy {
                OAuthHttpRedirectPolicy::Stop => &self.stop,
                _ => &self.follow,
            };
            let timeout = request.timeout;
            let (parts, body) = request.request.into_parts();
            let mut builder = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body);
            if let Some(t) = timeout {
                builder = builder.timeout(t);
            }
            let mut response = builder.send().await?;
            let mut out = http::Response::builder().status(response.status());
            for (name, value) in response.headers() {
                out = out.header(name, value);
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                if body.len() + chunk.len() > MAX_OAUTH_BODY {
                    return Err(format!("OAuth response larger than {MAX_OAUTH_BODY} bytes").into());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(out.body(body)?)
        })
    }
}

/// A manager for `url` whose HTTP goes through `guard` (users' servers) or, without one
/// (servers an operator configured), through rmcp's client that still refuses link-local and
/// other reserved addresses.
async fn new_manager(
    server: &str,
    url: &str,
    guard: Option<&Arc<GuardedResolver>>,
) -> Result<AuthorizationManager, McpError> {
    let made = match guard {
        Some(g) => {
            let http = GuardedOAuthHttp::new(g).map_err(|e| McpError::OAuth {
                server: server.to_string(),
                reason: format!("could not build the HTTP client: {e}"),
            })?;
            AuthorizationManager::new_with_oauth_http_client(url, Arc::new(http)).await
        }
        None => AuthorizationManager::new_allowing_private_addresses(url).await,
    };
    made.map_err(|e| oauth_error(server, "setting up OAuth", e))
}

/// An rmcp auth error in words, for the person who has to act on it.
pub(crate) fn oauth_error(server: &str, doing: &str, e: AuthError) -> McpError {
    let server = server.to_string();
    match e {
        AuthError::AuthorizationRequired => McpError::AuthorizationRequired {
            server,
            reason: "no valid token: sign in again".into(),
            challenge: None,
        },
        other => McpError::OAuth {
            reason: format!("{doing}: {}", super::connection::plain_error_chain(&other)),
            server,
        },
    }
}

fn oauth_of(server: &str, cfg: &HttpConfig) -> Result<OAuthConfig, McpError> {
    match &cfg.auth {
        super::config::HttpAuth::OAuth(o) => Ok(o.clone()),
        _ => Err(McpError::OAuth {
            server: server.to_string(),
            reason: "the server is not configured for OAuth (auth type oauth)".into(),
        }),
    }
}

/// The pre-registered client's secret (literal or from the environment), if it has one.
fn client_secret(server: &str, o: &OAuthConfig) -> Result<Option<Secret>, McpError> {
    if let Some(s) = &o.client_secret {
        return Ok(Some(s.clone()));
    }
    let Some(var) = &o.client_secret_env else {
        return Ok(None);
    };
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Ok(Some(Secret::new(v))),
        _ => Err(McpError::MissingEnv {
            server: server.to_string(),
            var: var.clone(),
            purpose: "OAuth client secret".into(),
        }),
    }
}

/// Ask the server without a token and keep its `WWW-Authenticate` answer: where its
/// protected-resource metadata is and which scope it wants. `None` when it does not challenge.
async fn probe_challenge(url: &str, guard: Option<&Arc<GuardedResolver>>) -> Option<String> {
    // A 2025 server is asked `initialize`; a 2026-07-28 one may refuse that before it looks at
    // the token (400), and is asked `server/discover`.
    for method in ["initialize", "server/discover"] {
        if let Some(c) = probe_once(url, guard, method).await {
            return Some(c);
        }
    }
    None
}

async fn probe_once(
    url: &str,
    guard: Option<&Arc<GuardedResolver>>,
    method: &str,
) -> Option<String> {
    let mut builder = reqwest::Client::builder()
        .timeout(OAUTH_HTTP_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(g) = guard {
        builder = builder.no_proxy().dns_resolver(g.clone());
    }
    let client = builder.build().ok()?;
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": method,
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION")}}
    });
    let response = client
        .post(url)
        .header(http::header::ACCEPT, "application/json, text/event-stream")
        .header(
            "mcp-protocol-version",
            if method == "initialize" {
                "2025-11-25"
            } else {
                "2026-07-28"
            },
        )
        .json(&body)
        .send()
        .await
        .ok()?;
    if !matches!(response.status().as_u16(), 401 | 403) {
        return None;
    }
    response
        .headers()
        .get(http::header::WWW_AUTHENTICATE)?
        .to_str()
        .ok()
        .map(str::to_string)
}

/// A manager ready to hand out tokens for `config`'s server: the stored tokens of
/// `store`, or (`client_credentials`) new ones fetched now. An `authorization_code` server
/// without usable tokens is [`McpError::AuthorizationRequired`].
pub(crate) async fn authorized_manager(
    server: &str,
    cfg: &HttpConfig,
    store: Option<Arc<dyn OAuthTokenStore>>,
    guard: Option<&Arc<GuardedResolver>>,
) -> Result<AuthorizationManager, McpError> {
    let oauth = oauth_of(server, cfg)?;
    let secret = client_secret(server, &oauth)?;
    let store: Arc<dyn OAuthTokenStore> = match (store, oauth.grant) {
        (Some(s), _) => s,
        (None, OAuthGrant::ClientCredentials) => Arc::new(MemoryTokenStore::new()),
        (None, OAuthGrant::AuthorizationCode) => {
            return Err(McpError::AuthorizationRequired {
                server: server.to_string(),
                reason: "this server needs a person to sign in, and no sign-in is kept here".into(),
                challenge: None,
            });
        }
    };
    let stored = store.load().await.map_err(|e| McpError::OAuth {
        server: server.to_string(),
        reason: format!("reading the stored tokens: {e}"),
    })?;
    let mut manager = new_manager(server, &cfg.url, guard).await?;
    // A `client_credentials` token is fetched anew at each connect (and renewed before it
    // expires): no person is involved, and a kept one may be about to lapse.
    let stored = stored.filter(|_| oauth.grant == OAuthGrant::AuthorizationCode);
    if let Some(tokens) = stored.filter(OAuthTokens::has_token) {
        let resolution = manager
            .resolve_metadata_from_challenge(tokens.challenge.as_deref())
            .await
            .map_err(|e| oauth_error(server, "discovering the authorization server", e))?;
        manager.set_metadata(resolution.metadata);
        manager.set_credential_store(CredentialAdapter {
            client_secret: tokens.client_secret.clone(),
            redirect_uri: tokens.redirect_uri.clone(),
            challenge: tokens.challenge.clone(),
            ..CredentialAdapter::new(store.clone())
        });
        if manager
            .initialize_from_store()
            .await
            .map_err(|e| oauth_error(server, "loading the stored tokens", e))?
        {
            let id = tokens.credentials.client_id.clone();
            // The pre-registered client's secret, or the one its registration gave.
            let secret = if oauth.client_id.as_deref() == Some(id.as_str()) {
                secret.map(|s| s.expose().to_string())
            } else {
                tokens.client_secret.clone()
            };
            let mut client = OAuthClientConfig::new(
                id,
                tokens
                    .redirect_uri
                    .clone()
                    .unwrap_or_else(|| cfg.url.clone()),
            );
            client.client_secret = secret;
            manager
                .configure_client(client)
                .map_err(|e| oauth_error(server, "configuring the OAuth client", e))?;
            return Ok(manager);
        }
    }
    match oauth.grant {
        // No token: the requests go out without one, and the server decides. One that wants a
        // token answers 401 with its challenge, which comes back as
        // `McpError::AuthorizationRequired` (with the challenge a sign-in starts from); one that
        // lets some requests through without a token works until it does not.
        OAuthGrant::AuthorizationCode => {
            manager.set_credential_store(CredentialAdapter::new(store));
            Ok(manager)
        }
        OAuthGrant::ClientCredentials => {
            let (Some(client_id), Some(secret)) = (oauth.client_id.clone(), secret) else {
                return Err(McpError::OAuth {
                    server: server.to_string(),
                    reason: "client_credentials needs client_id and client_secret".into(),
                });
            };
            let challenge = probe_challenge(&cfg.url, guard).await;
            client_credentials_token(
                server,
                &mut manager,
                &store,
                challenge,
                guard,
                ClientCredentialsRequest {
                    client_id,
                    secret,
                    scopes: oauth.scopes.clone(),
                    url: &cfg.url,
                },
            )
            .await?;
            Ok(manager)
        }
    }
}

struct ClientCredentialsRequest<'a> {
    client_id: String,
    secret: Secret,
    scopes: Vec<String>,
    url: &'a str,
}

/// Fetch a `client_credentials` token into `store` (discovery, then the token request), and
/// have the manager renew it before it expires ([`Renewal`]).
async fn client_credentials_token(
    server: &str,
    manager: &mut AuthorizationManager,
    store: &Arc<dyn OAuthTokenStore>,
    challenge: Option<String>,
    guard: Option<&Arc<GuardedResolver>>,
    request: ClientCredentialsRequest<'_>,
) -> Result<(), McpError> {
    let resolution = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| oauth_error(server, "discovering the authorization server", e))?;
    let resource = request.url.to_string();
    let metadata = resolution.metadata.clone();
    manager.set_metadata(resolution.metadata);
    manager.set_credential_store(CredentialAdapter {
        challenge: challenge.clone(),
        ..CredentialAdapter::new(store.clone())
    });
    let scopes = if request.scopes.is_empty() {
        manager.select_scopes(None, &[])
    } else {
        request.scopes
    };
    let config = ClientCredentialsConfig::ClientSecret {
        client_id: request.client_id,
        client_secret: request.secret.expose().to_string(),
        scopes,
        resource: Some(resource),
    };
    manager
        .configure_client_credentials(&config)
        .map_err(|e| oauth_error(server, "configuring the OAuth client", e))?;
    manager
        .exchange_client_credentials(&config)
        .await
        .map_err(|e| oauth_error(server, "fetching a client_credentials token", e))?;
    manager.set_credential_store(CredentialAdapter {
        challenge,
        renewal: Some(Arc::new(Renewal {
            server: server.to_string(),
            url: request.url.to_string(),
            guard: guard.cloned(),
            metadata,
            config,
            running: tokio::sync::Mutex::new(()),
        })),
        ..CredentialAdapter::new(store.clone())
    });
    Ok(())
}

/// What survives between [`begin_sign_in`] and [`finish_sign_in`]: the PKCE verifier, the
/// client the sign-in uses and where the server's metadata is. Contains secrets: keep it sealed.
#[derive(Clone, Serialize, Deserialize)]
pub struct PendingSignIn {
    /// The `state` parameter of the authorization request (what the callback brings back).
    pub state: String,
    authorization: StoredAuthorizationState,
    client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_secret: Option<String>,
    redirect_uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    challenge: Option<String>,
    /// The scopes asked for.
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for PendingSignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingSignIn")
            .field("client_id", &self.client_id)
            .field("redirect_uri", &self.redirect_uri)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// A sign-in begun: send the person to `authorization_url`; keep `pending` for the callback.
#[derive(Debug, Clone)]
pub struct SignIn {
    pub authorization_url: String,
    pub pending: PendingSignIn,
}

/// Start an authorization-code sign-in to `cfg`'s server: discover its authorization server
/// (from `challenge`, the `WWW-Authenticate` of its 401 or 403, when known; else by asking it),
/// pick the client (the pre-registered one, a Client ID Metadata Document, or dynamic
/// registration, in the spec's order), and build the authorization URL with PKCE. `more_scopes`
/// are asked for on top of the configured or discovered ones (a step-up after a 403
/// `insufficient_scope`).
pub async fn begin_sign_in(
    server: &str,
    cfg: &HttpConfig,
    redirect_uri: &str,
    challenge: Option<String>,
    more_scopes: &[String],
    guard: Option<&Arc<GuardedResolver>>,
) -> Result<SignIn, McpError> {
    let oauth = oauth_of(server, cfg)?;
    let secret = client_secret(server, &oauth)?;
    let challenge = match challenge {
        Some(c) => Some(c),
        None => probe_challenge(&cfg.url, guard).await,
    };
    let mut manager = new_manager(server, &cfg.url, guard).await?;
    let resolution = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| oauth_error(server, "discovering the authorization server", e))?;
    let metadata = resolution.metadata.clone();
    manager.set_metadata(resolution.metadata);
    let states = OneState::default();
    manager.set_state_store(states.clone());

    let mut scopes: Vec<String> = if oauth.scopes.is_empty() && more_scopes.is_empty() {
        manager.select_scopes(None, &[])
    } else {
        let mut s = oauth.scopes.clone();
        if !more_scopes.is_empty() {
            // A step-up asks for what the server asked for on top of what it wants anyway.
            s.extend(manager.select_scopes(None, &[]));
        }
        s.extend(more_scopes.iter().cloned());
        s
    };
    let mut seen = std::collections::HashSet::new();
    scopes.retain(|s| seen.insert(s.clone()));
    let supported = |scope: &str| {
        metadata
            .scopes_supported
            .as_ref()
            .is_some_and(|s| s.iter().any(|x| x == scope))
    };
    if !scopes.is_empty()
        && !scopes.iter().any(|s| s == "offline_access")
        && supported("offline_access")
    {
        scopes.push("offline_access".into());
    }
    let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();

    let cimd = metadata
        .additional_fields
        .get("client_id_metadata_document_supported")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let client = if let Some(id) = &oauth.client_id {
        let mut c = OAuthClientConfig::new(id.clone(), redirect_uri);
        c.client_secret = secret.map(|s| s.expose().to_string());
        c.scopes = scopes.clone();
        c
    } else if let Some(url) = oauth.client_metadata_url.as_ref().filter(|_| cimd) {
        let mut c = OAuthClientConfig::new(url.clone(), redirect_uri);
        c.scopes = scopes.clone();
        c.application_type = Some("native".into());
        c
    } else {
        manager
            .register_client(CLIENT_NAME, redirect_uri, &scope_refs)
            .await
            .map_err(|e| {
                oauth_error(
                    server,
                    "registering Agentry with the authorization server",
                    e,
                )
            })?
    };
    let client_id = client.client_id.clone();
    let client_secret = client.client_secret.clone();
    manager
        .configure_client(client)
        .map_err(|e| oauth_error(server, "configuring the OAuth client", e))?;
    let authorization_url = manager
        .get_authorization_url(&scope_refs)
        .await
        .map_err(|e| oauth_error(server, "building the authorization URL", e))?;
    let Some((state, authorization)) = states.take() else {
        return Err(McpError::OAuth {
            server: server.to_string(),
            reason: "the authorization request kept no state".into(),
        });
    };
    Ok(SignIn {
        authorization_url,
        pending: PendingSignIn {
            state,
            authorization,
            client_id,
            client_secret,
            redirect_uri: redirect_uri.to_string(),
            challenge,
            scopes,
        },
    })
}

/// Finish a sign-in: exchange the `code` of the redirect for tokens (checking `state` against
/// `pending`, and the authorization server's `iss` when it sends one, RFC 9207).
pub async fn finish_sign_in(
    server: &str,
    cfg: &HttpConfig,
    pending: PendingSignIn,
    code: &str,
    state: &str,
    issuer: Option<&str>,
    guard: Option<&Arc<GuardedResolver>>,
) -> Result<OAuthTokens, McpError> {
    if !constant_time_eq(pending.state.as_bytes(), state.as_bytes()) {
        return Err(McpError::OAuth {
            server: server.to_string(),
            reason: "the sign-in answer does not belong to this sign-in (state mismatch)".into(),
        });
    }
    let mut manager = new_manager(server, &cfg.url, guard).await?;
    let resolution = manager
        .resolve_metadata_from_challenge(pending.challenge.as_deref())
        .await
        .map_err(|e| oauth_error(server, "discovering the authorization server", e))?;
    manager.set_metadata(resolution.metadata);
    let mut client =
        OAuthClientConfig::new(pending.client_id.clone(), pending.redirect_uri.clone());
    client.client_secret = pending.client_secret.clone();
    manager
        .configure_client(client)
        .map_err(|e| oauth_error(server, "configuring the OAuth client", e))?;
    let states = OneState::default();
    StateStore::save(&states, &pending.state, pending.authorization.clone())
        .await
        .map_err(|e| oauth_error(server, "restoring the sign-in", e))?;
    manager.set_state_store(states);
    let tokens = MemoryTokenStore::new();
    manager.set_credential_store(CredentialAdapter {
        client_secret: pending.client_secret.clone(),
        redirect_uri: Some(pending.redirect_uri.clone()),
        challenge: pending.challenge.clone(),
        ..CredentialAdapter::new(Arc::new(tokens.clone()))
    });
    manager
        .exchange_code_for_token_with_issuer(code, state, issuer)
        .await
        .map_err(|e| oauth_error(server, "exchanging the authorization code", e))?;
    tokens.get().ok_or_else(|| McpError::OAuth {
        server: server.to_string(),
        reason: "the authorization server answered without a token".into(),
    })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The scope a 403 `insufficient_scope` challenge asks for (`scope="…"`), if it names one.
pub fn challenged_scope(challenge: &str) -> Option<String> {
    let lower = challenge.to_ascii_lowercase();
    let at = lower.find("scope=\"")? + "scope=\"".len();
    let rest = &challenge[at..];
    let end = rest.find('"')?;
    Some(rest[..end].to_string()).filter(|s| !s.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenged_scope_reads_the_scope_parameter() {
        assert_eq!(
            challenged_scope(
                r#"Bearer error="insufficient_scope", scope="mcp:basic mcp:write", resource_metadata="http://x/.well-known/oauth-protected-resource""#
            )
            .as_deref(),
            Some("mcp:basic mcp:write")
        );
        assert_eq!(challenged_scope(r#"Bearer realm="x""#), None);
        assert_eq!(challenged_scope(r#"Bearer scope="""#), None);
    }

    #[test]
    fn state_comparison_is_exact() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
