//! Access tokens of an external OAuth authorization server, accepted by `/mcp` beside the API
//! keys (`[mcp.oauth]`, docs/mcp.md "OAuth").
//!
//! A token is a JWT the configured issuer signed: its signature is checked against the issuer's
//! published keys (a JWKS, fetched through the same outbound-address policy as every URL the
//! server fetches, kept [`McpOAuthSettings::jwks_cache_secs`], fetched again for an unknown
//! `kid` at most once a second), then `iss` (exactly the issuer), `aud` (the `/mcp` resource),
//! `exp`/`nbf` and the required scopes. HMAC and `none` tokens are never accepted, and a token's
//! algorithm must be its key's. With an introspection endpoint (RFC 7662), an opaque token is
//! what that endpoint says it is (active, then the same claim checks), and with
//! `introspect_jwts` a JWT must be active there too (so a revocation counts).
//!
//! The token then names its tenant (`tenant_claim`, by id or name) and a user **of that tenant**
//! (`user_claim`, by id or name): the user is looked up only inside the tenant the token names,
//! so no claim value can reach another tenant's user. The caller is that user with their own
//! role, exactly as one of their API keys with the same role: quotas, rate limits and RBAC apply
//! unchanged. A token naming no enabled user is 403 (not 401: the token itself is good, and a
//! 401 would send an OAuth client round its login again).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry_builtin::BuiltinConfig;
use agentry_builtin::net_guard::{GuardedResolver, check_parsed};
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::{TenantId, UserId};
use agentry_store::{PlatformScope, UserScope, tenants, users};
use chrono::{DateTime, Utc};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{AlgorithmFamily, DecodingKey, Validation};
use sea_orm::DatabaseConnection;
use serde_json::{Map, Value, json};
use url::Url;

use super::Resolution;
use crate::error::ApiError;
use crate::settings::{ClaimMatch, McpOAuthSettings, Settings};

/// The signing keys are fetched again for an unknown `kid` at most this often (a stream of
/// made-up `kid`s must not become a stream of requests to the authorization server).
const REFETCH_AFTER: Duration = Duration::from_secs(1);
/// How long one fetch of metadata or keys may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a token the introspection endpoint called inactive is refused without asking again.
const INACTIVE_KEPT: Duration = Duration::from_secs(60);
/// Seconds a client is asked to wait when the keys cannot be fetched.
const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 5;

/// The `/mcp` resource's trust in one external authorization server.
pub struct OAuthVerifier {
    settings: McpOAuthSettings,
    issuer: String,
    audience: String,
    network: BuiltinConfig,
    http: reqwest::Client,
    /// Signing keys by `kid` (a key without one under ""), each kept `jwks_cache_secs`.
    keys: moka::sync::Cache<String, Arc<Jwk>>,
    /// One fetch at a time: when the last one was, and the JWKS URL once discovered.
    fetch: tokio::sync::Mutex<FetchState>,
    /// Tokens the introspection endpoint called inactive (by SHA-256), for a minute: a stream
    /// of made-up bearer tokens must not become a stream of introspection requests.
    inactive: moka::sync::Cache<Vec<u8>, ()>,
}

#[derive(Default)]
struct FetchState {
    last: Option<Instant>,
    jwks_url: Option<Url>,
}

impl std::fmt::Debug for OAuthVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthVerifier")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

/// A 401 for a token that is not good: the client may get a new one.
fn invalid(why: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        ErrorCode::Unauthorized,
        format!("the bearer token is not valid for /mcp: {why}"),
    )
}

/// A good token that names nobody who may use `/mcp`.
fn not_a_user(message: String) -> ApiError {
    ApiError::forbidden(message)
}

fn unavailable(why: impl std::fmt::Display) -> ApiError {
    unavailable_for("the authorization server's signing keys", why)
}

/// A 503: `what` (the signing keys, the introspection endpoint) cannot be reached now.
fn unavailable_for(what: &str, why: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        ErrorCode::ServiceUnavailable,
        format!(
            "cannot check the bearer token: {what} cannot be reached ({why}); try again shortly"
        ),
    )
    .with_retry_after(UNAVAILABLE_RETRY_AFTER_SECS)
}

/// Is `token` shaped like a JWT (three base64url parts)? API keys are not.
pub fn looks_like_jwt(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    parts.len() == 3
        && parts[..2].iter().all(|p| !p.is_empty())
        && parts.iter().all(|p| {
            p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl OAuthVerifier {
    /// The verifier `settings` configure, or `None` while `mcp.oauth.issuer` is empty.
    pub fn new(settings: &Settings) -> Option<Arc<Self>> {
        let o = &settings.mcp.oauth;
        if !o.enabled() {
            return None;
        }
        let audience = match o.audience.trim() {
            "" => format!(
                "{}/mcp",
                settings.mcp.public_url.trim().trim_end_matches('/')
            ),
            a => a.to_string(),
        };
        let guard = Arc::new(GuardedResolver::new(&settings.tools));
        let http = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(guard.clone())
            .redirect(guard.redirect_policy())
            .timeout(FETCH_TIMEOUT)
            .build()
            .unwrap_or_default();
        Some(Arc::new(OAuthVerifier {
            issuer: o.issuer.trim().to_string(),
            audience,
            network: settings.tools.clone(),
            http,
            keys: moka::sync::Cache::builder()
                .max_capacity(256)
                .time_to_live(Duration::from_secs(o.jwks_cache_secs))
                .build(),
            fetch: tokio::sync::Mutex::new(FetchState {
                last: None,
                jwks_url: Url::parse(o.jwks_url.trim()).ok(),
            }),
            settings: o.clone(),
            inactive: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(INACTIVE_KEPT)
                .build(),
        }))
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn scopes_supported(&self) -> &[String] {
        &self.settings.scopes_supported
    }

    /// The scopes a client should ask for (the `scope` of a 401's challenge).
    pub fn challenge_scopes(&self) -> &[String] {
        if self.settings.required_scopes.is_empty() {
            &self.settings.scopes_supported
        } else {
            &self.settings.required_scopes
        }
    }

    /// GET `url` as JSON, through the outbound-address policy.
    async fn get_json(&self, url: &Url) -> Result<Value, String> {
        check_parsed(url.clone(), &self.network)
            .await
            .map_err(|e| e.to_string())?;
        let res = self
            .http
            .get(url.clone())
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !res.status().is_success() {
            return Err(format!("{url} answered {}", res.status()));
        }
        res.json()
            .await
            .map_err(|e| format!("{url} did not answer JSON: {e}"))
    }

    /// The JWKS URL: configured, or from the issuer's metadata (RFC 8414, then OpenID).
    async fn discover_jwks_url(&self) -> Result<Url, String> {
        let issuer = Url::parse(&self.issuer).map_err(|e| e.to_string())?;
        let path = issuer.path().trim_end_matches('/');
        let mut rfc8414 = issuer.clone();
        rfc8414.set_path(&format!("/.well-known/oauth-authorization-server{path}"));
        let mut openid = issuer.clone();
        openid.set_path(&format!("{path}/.well-known/openid-configuration"));
        let mut why = Vec::new();
        for url in [rfc8414, openid] {
            match self.get_json(&url).await {
                Ok(doc) if doc["issuer"].as_str() != Some(self.issuer.as_str()) => {
                    why.push(format!(
                        "{url} names issuer {} (RFC 8414 §3.3)",
                        doc["issuer"]
                    ));
                }
                Ok(doc) => match doc["jwks_uri"].as_str().map(Url::parse) {
                    Some(Ok(u)) => return Ok(u),
                    _ => why.push(format!("{url} has no jwks_uri")),
                },
                Err(e) => why.push(e),
            }
        }
        Err(why.join("; "))
    }

    /// Fetch the signing keys into the cache (one fetch at a time, at most once a second).
    async fn refresh_keys(&self, kid: &str) -> Result<(), ApiError> {
        let mut state = self.fetch.lock().await;
        if self.keys.contains_key(kid) {
            return Ok(()); // fetched while this request waited
        }
        if state.last.is_some_and(|t| t.elapsed() < REFETCH_AFTER) {
            return Ok(());
        }
        state.last = Some(Instant::now());
        let url = match &state.jwks_url {
            Some(u) => u.clone(),
            None => {
                let u = self.discover_jwks_url().await.map_err(unavailable)?;
                state.jwks_url = Some(u.clone());
                u
            }
        };
        let set = self.get_json(&url).await.map_err(unavailable)?;
        let Some(keys) = set["keys"].as_array() else {
            return Err(unavailable(format!("{url} is not a JWKS (no `keys`)")));
        };
        // Keys of a type this server cannot use are skipped, not fatal.
        let keys: Vec<Jwk> = keys
            .iter()
            .filter_map(|k| serde_json::from_value(k.clone()).ok())
            .collect();
        for k in &keys {
            let kid = k.common.key_id.clone().unwrap_or_default();
            self.keys.insert(kid, Arc::new(k.clone()));
        }
        if let [only] = keys.as_slice() {
            // A token without `kid` may use the one key of a one-key set.
            self.keys.insert(String::new(), Arc::new(only.clone()));
        }
        Ok(())
    }

    async fn key(&self, kid: &str) -> Result<Arc<Jwk>, ApiError> {
        if let Some(k) = self.keys.get(kid) {
            return Ok(k);
        }
        self.refresh_keys(kid).await?;
        self.keys.get(kid).ok_or_else(|| {
            invalid(format!(
                "it is signed with a key (kid {kid:?}) the authorization server {} does not publish",
                self.issuer
            ))
        })
    }

    /// Whether opaque tokens are checked at the introspection endpoint.
    pub fn introspects(&self) -> bool {
        !self.settings.introspection_url.trim().is_empty()
    }

    /// The claims of `token` when it is a good token of the issuer for `/mcp`: a JWT checked
    /// here (and at the introspection endpoint too with `introspect_jwts`), or an opaque token
    /// the introspection endpoint says is active.
    pub async fn verify(&self, token: &str) -> Result<Map<String, Value>, ApiError> {
        if !looks_like_jwt(token) {
            if !self.introspects() {
                return Err(invalid("it is not a signed JWT"));
            }
            let claims = self.introspect(token).await?;
            self.check_scopes(&claims)?;
            return Ok(claims);
        }
        let claims = self.verify_jwt(token).await?;
        if self.settings.introspect_jwts {
            self.introspect(token).await?;
        }
        self.check_scopes(&claims)?;
        Ok(claims)
    }

    /// RFC 7662: ask the authorization server whether `token` is active, as the configured
    /// client; then check what it says as a JWT's claims are checked (`iss` when given, `aud`,
    /// `exp`, `nbf`). The answer's fields are the token's claims.
    async fn introspect(&self, token: &str) -> Result<Map<String, Value>, ApiError> {
        use sha2::Digest as _;
        let not_active = || {
            invalid("the authorization server says it is not active (expired, revoked or unknown)")
        };
        let digest = sha2::Sha256::digest(token.as_bytes()).to_vec();
        if self.inactive.contains_key(&digest) {
            return Err(not_active());
        }
        let s = &self.settings;
        let url = Url::parse(s.introspection_url.trim())
            .map_err(|e| unavailable_for("the introspection endpoint", e))?;
        check_parsed(url.clone(), &self.network)
            .await
            .map_err(|e| unavailable_for("the introspection endpoint", e))?;
        let body =
            serde_urlencoded::to_string([("token", token), ("token_type_hint", "access_token")])
                .map_err(|e| unavailable_for("the introspection endpoint", e))?;
        let res = self
            .http
            .post(url.clone())
            .basic_auth(
                s.introspection_client_id.trim(),
                Some(s.introspection_client_secret.expose()),
            )
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| unavailable_for("the introspection endpoint", e))?;
        if !res.status().is_success() {
            return Err(unavailable_for(
                "the introspection endpoint",
                format!("{url} answered {}", res.status()),
            ));
        }
        let answer: Map<String, Value> = res
            .json()
            .await
            .map_err(|e| unavailable_for("the introspection endpoint", format!("not JSON: {e}")))?;
        if answer.get("active") != Some(&Value::Bool(true)) {
            self.inactive.insert(digest, ());
            return Err(not_active());
        }
        if let Some(iss) = answer.get("iss")
            && iss.as_str() != Some(self.issuer.as_str())
        {
            return Err(invalid(format!("it was not issued by {}", self.issuer)));
        }
        let audience_ok = match answer.get("aud") {
            Some(Value::String(a)) => *a == self.audience,
            Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(&self.audience)),
            _ => false,
        };
        if !audience_ok {
            return Err(invalid(format!(
                "its audience (aud) is not {}",
                self.audience
            )));
        }
        let now = Utc::now().timestamp();
        let leeway = i64::try_from(s.leeway_secs).unwrap_or(i64::MAX);
        if let Some(exp) = answer.get("exp").and_then(Value::as_i64)
            && exp.saturating_add(leeway) < now
        {
            return Err(invalid("it has expired"));
        }
        if let Some(nbf) = answer.get("nbf").and_then(Value::as_i64)
            && nbf.saturating_sub(leeway) > now
        {
            return Err(invalid("it is not valid yet (nbf)"));
        }
        Ok(answer)
    }

    /// The required scopes are all in the token's `scope`; else 403 `insufficient_scope`.
    fn check_scopes(&self, claims: &Map<String, Value>) -> Result<(), ApiError> {
        let granted: Vec<&str> = claims
            .get("scope")
            .and_then(Value::as_str)
            .map(|s| s.split_whitespace().collect())
            .unwrap_or_default();
        let missing: Vec<&str> = self
            .settings
            .required_scopes
            .iter()
            .map(String::as_str)
            .filter(|s| !granted.contains(s))
            .collect();
        if !missing.is_empty() {
            return Err(ApiError::forbidden(format!(
                "the token lacks the scope {} that /mcp requires; ask the authorization server for it",
                missing.join(" ")
            ))
            .with_details(json!({"oauth_error": "insufficient_scope", "missing_scopes": missing})));
        }
        Ok(())
    }

    /// The claims of a JWT the issuer signed, for `/mcp`.
    async fn verify_jwt(&self, token: &str) -> Result<Map<String, Value>, ApiError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| invalid(format!("it is not a signed JWT ({e})")))?;
        if header.alg.family() == AlgorithmFamily::Hmac {
            return Err(invalid(
                "HMAC-signed tokens are not accepted; the authorization server must sign with a published public key",
            ));
        }
        let jwk = self.key(header.kid.as_deref().unwrap_or_default()).await?;
        if let Some(alg) = jwk.common.key_algorithm
            && format!("{alg:?}") != format!("{:?}", header.alg)
        {
            return Err(invalid(format!(
                "it says {:?} but its key is for {alg:?}",
                header.alg
            )));
        }
        let key = DecodingKey::from_jwk(&jwk)
            .map_err(|e| invalid(format!("its key cannot be used ({e})")))?;
        if key.family() != header.alg.family() {
            return Err(invalid(format!(
                "it says {:?}, which its key cannot verify",
                header.alg
            )));
        }
        let mut v = Validation::new(header.alg);
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        v.validate_nbf = true;
        v.leeway = self.settings.leeway_secs;
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &v).map_err(|e| {
            invalid(match e.kind() {
                ErrorKind::ExpiredSignature => "it has expired".to_string(),
                ErrorKind::ImmatureSignature => "it is not valid yet (nbf)".into(),
                ErrorKind::InvalidSignature => "its signature does not verify".into(),
                ErrorKind::InvalidIssuer => format!("it was not issued by {}", self.issuer),
                ErrorKind::InvalidAudience => {
                    format!("its audience (aud) is not {}", self.audience)
                }
                ErrorKind::MissingRequiredClaim(c) => format!("it has no `{c}` claim"),
                _ => format!("it cannot be decoded ({e})"),
            })
        })?;
        Ok(data.claims)
    }

    /// The tenant user a good token names, and when the token expires.
    pub async fn resolve(
        &self,
        db: &DatabaseConnection,
        token: &str,
    ) -> Result<(Resolution, Option<DateTime<Utc>>), ApiError> {
        let claims = self.verify(token).await?;
        let expires_at = claims
            .get("exp")
            .and_then(Value::as_i64)
            .and_then(|s| DateTime::from_timestamp(s, 0));
        let claim = |name: &str| -> Result<String, ApiError> {
            match claims.get(name) {
                Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
                Some(Value::Number(n)) => Ok(n.to_string()),
                _ => Err(not_a_user(format!(
                    "the token has no `{name}` claim, which names your Agentry {}; ask the \
                     authorization server's administrator to add it",
                    if name == self.settings.tenant_claim {
                        "tenant"
                    } else {
                        "user"
                    }
                ))),
            }
        };
        let platform = PlatformScope::new();
        let tenant_value = claim(&self.settings.tenant_claim)?;
        let no_tenant = || {
            not_a_user(format!(
                "the token's `{}` claim ({tenant_value:?}) names no Agentry tenant",
                self.settings.tenant_claim
            ))
        };
        let tenant = match self.settings.tenant_match {
            ClaimMatch::Id => match tenant_value.parse::<uuid::Uuid>() {
                Ok(id) => tenants::get(db, &platform, TenantId(id)).await?,
                Err(_) => None,
            },
            ClaimMatch::Name => tenants::get_by_name(db, &platform, &tenant_value).await?,
        }
        .ok_or_else(no_tenant)?;
        let scope = tenant.scope();
        let user_value = claim(&self.settings.user_claim)?;
        // Looked up inside the token's tenant only: another tenant's user is never found.
        let user = match self.settings.user_match {
            ClaimMatch::Id => match user_value.parse::<uuid::Uuid>() {
                Ok(id) => users::get(db, &scope, UserId(id)).await?,
                Err(_) => None,
            },
            ClaimMatch::Name => users::get_by_name(db, &scope, &user_value).await?,
        }
        .filter(|u| !u.disabled)
        .ok_or_else(|| {
            not_a_user(format!(
                "the token's `{}` claim ({user_value:?}) is not an enabled user of the tenant {:?}; a tenant admin adds users under /api/v1/tenant/users",
                self.settings.user_claim, tenant.name
            ))
        })?;
        let resolution = Resolution::Tenant {
            user: UserScope {
                tenant: scope,
                user_id: user.id,
                role: user.role,
                custom_role: user.custom_role,
            },
            tenant: Arc::new(tenant),
            key_id: None,
        };
        Ok((resolution, expires_at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_three_base64url_parts_look_like_a_jwt() {
        assert!(looks_like_jwt("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"));
        // An unsigned token still has the shape; verification refuses it.
        assert!(looks_like_jwt("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."));
        assert!(!looks_like_jwt("agk_abcdef0123456789"));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt("a b.c.d"));
        assert!(!looks_like_jwt(".b.c"));
    }
}
