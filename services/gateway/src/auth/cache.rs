//! [`KeyResolver`]: turns a presented key into a [`Resolution`], remembering tenant keys for
//! `auth.cache_ttl_secs` so authentication is not a database round trip per request.
//!
//! The cache is a [`moka`] cache bounded to [`MAX_ENTRIES`] keys (least-used keys go first) whose
//! entries live `auth.cache_ttl_secs`, or less when the key itself expires sooner. Entries are
//! keyed by the SHA-256 of the key (the key itself is not kept). A revocation, a
//! suspension, a disabled or deleted user made through this replica's API forgets the affected
//! entries at once ([`KeyResolver::forget_tenant`], [`KeyResolver::forget_key`]); one made through
//! another replica takes effect here when the entry expires, so the TTL bounds it everywhere.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry_schema::ids::{ApiKeyId, TenantId};
use agentry_store::api_keys::{self, KeyCheck};
use agentry_store::{PlatformScope, UserScope, platform_admin_key, tenants, users};
use chrono::{DateTime, Utc};
use moka::Expiry;
use moka::sync::Cache;
use sea_orm::DatabaseConnection;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::Resolution;
use super::oauth::OAuthVerifier;
use crate::error::ApiError;

/// At most this many distinct keys are remembered; past it the cache evicts the keys used least
/// (it only saves round trips, so an evicted key costs one database check).
const MAX_ENTRIES: u64 = 10_000;

type Digest32 = [u8; 32];

fn digest(s: &str) -> Digest32 {
    Sha256::digest(s.as_bytes()).into()
}

#[derive(Clone)]
struct Entry {
    resolution: Resolution,
    tenant_id: TenantId,
    /// `None` for an OAuth access token.
    key_id: Option<ApiKeyId>,
    /// An external authorization server's token, good on `/mcp` only.
    oauth: bool,
    /// The key's own expiry: a cached key stops working on time, not up to a TTL late.
    expires_at: Option<DateTime<Utc>>,
}

/// An entry lives the TTL, or until its key expires when that comes first.
struct EntryLifetime {
    ttl: Duration,
}

impl Expiry<Digest32, Entry> for EntryLifetime {
    fn expire_after_create(
        &self,
        _key: &Digest32,
        entry: &Entry,
        _created_at: Instant,
    ) -> Option<Duration> {
        let key_left = entry
            .expires_at
            .map(|t| (t - Utc::now()).to_std().unwrap_or(Duration::ZERO));
        Some(key_left.map_or(self.ttl, |left| left.min(self.ttl)))
    }
}

/// What this replica was told to forget: the keys of a tenant (a suspension, a deletion, a user
/// disabled or removed) or one key (a revocation). Open WebSockets listen, to check their key
/// again at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forgotten {
    Tenant(TenantId),
    Key(ApiKeyId),
}

/// Where the platform admin key comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminKeySource<'a> {
    /// `auth.admin_key`, configured.
    Configured(&'a str),
    /// The key generated at the first start, stored hashed in the database
    /// ([`agentry_store::platform_admin_key`]).
    Stored,
    /// None: the admin API is off.
    Off,
}

impl<'a> AdminKeySource<'a> {
    /// The configured key wins; without one, the stored key when generating is allowed.
    pub fn of(configured: &'a str, generate: bool) -> Self {
        match (configured.is_empty(), generate) {
            (false, _) => AdminKeySource::Configured(configured),
            (true, true) => AdminKeySource::Stored,
            (true, false) => AdminKeySource::Off,
        }
    }
}

/// How this replica checks the platform admin key.
enum AdminCheck {
    /// SHA-256 of the configured key; digests compare in constant time whatever the lengths.
    Configured(Digest32),
    /// The stored key, with the digest of the last key it matched and when: a replaced key
    /// stops working here within the TTL, as a revoked tenant key does.
    Stored(Mutex<Option<(Digest32, Instant)>>),
    Off,
}

pub struct KeyResolver {
    ttl: Duration,
    forgotten: tokio::sync::broadcast::Sender<Forgotten>,
    admin: AdminCheck,
    /// `None` when the TTL is zero: every check goes to the database.
    entries: Option<Cache<Digest32, Entry>>,
}

impl KeyResolver {
    pub fn new(admin_key: AdminKeySource<'_>, ttl: Duration) -> Self {
        Self::with_capacity(admin_key, ttl, MAX_ENTRIES)
    }

    fn with_capacity(admin_key: AdminKeySource<'_>, ttl: Duration, capacity: u64) -> Self {
        let admin = match admin_key {
            AdminKeySource::Configured(k) if !k.is_empty() => AdminCheck::Configured(digest(k)),
            AdminKeySource::Stored => AdminCheck::Stored(Mutex::new(None)),
            AdminKeySource::Configured(_) | AdminKeySource::Off => AdminCheck::Off,
        };
        Self {
            ttl,
            forgotten: tokio::sync::broadcast::channel(64).0,
            admin,
            entries: (!ttl.is_zero()).then(|| {
                Cache::builder()
                    .max_capacity(capacity)
                    .expire_after(EntryLifetime { ttl })
                    .build()
            }),
        }
    }

    /// Is there a platform admin key at all (is the admin API on)?
    pub fn admin_api_on(&self) -> bool {
        !matches!(self.admin, AdminCheck::Off)
    }

    /// Is `key` the stored (generated) platform admin key? `None` when it cannot be one.
    async fn stored_admin(
        &self,
        db: &DatabaseConnection,
        key: &str,
        d: &Digest32,
    ) -> Option<Result<bool, ApiError>> {
        let AdminCheck::Stored(last) = &self.admin else {
            return None;
        };
        if !platform_admin_key::looks_like(key) {
            return None;
        }
        {
            let last = last.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((seen, at)) = &*last
                && bool::from(seen.ct_eq(d))
                && at.elapsed() < self.ttl
            {
                return Some(Ok(true));
            }
        }
        let matched = platform_admin_key::matches(db, &PlatformScope::new(), key).await;
        if let Ok(true) = matched {
            *last.lock().unwrap_or_else(|p| p.into_inner()) = Some((*d, Instant::now()));
        }
        Some(matched.map_err(ApiError::from))
    }

    /// Resolve `key`. `Ok(Resolution::Invalid)` covers unknown, wrong, expired and revoked keys,
    /// a user that is gone or disabled, and a tenant that is gone.
    ///
    /// `oauth`: the request is for `/mcp` and an external authorization server is trusted there;
    /// a JWT-shaped bearer token is then checked as its access token ([`OAuthVerifier`]). A
    /// remembered OAuth token is [`Resolution::Invalid`] anywhere else.
    pub async fn resolve(
        &self,
        db: &DatabaseConnection,
        key: &str,
        oauth: Option<&OAuthVerifier>,
    ) -> Result<Resolution, ApiError> {
        let d = digest(key);
        if let AdminCheck::Configured(admin) = &self.admin
            && bool::from(d.ct_eq(admin))
        {
            return Ok(Resolution::PlatformAdmin);
        }
        // A generated admin key (`aga_…`) is never a tenant key: it is the admin or nothing.
        if let Some(matched) = self.stored_admin(db, key, &d).await {
            return Ok(if matched? {
                Resolution::PlatformAdmin
            } else {
                Resolution::Invalid
            });
        }
        if let Some(entry) = self.entries.as_ref().and_then(|c| c.get(&d)) {
            if entry.oauth && oauth.is_none() {
                return Ok(Resolution::Invalid);
            }
            return Ok(entry.resolution);
        }
        // A JWT, or with an introspection endpoint any token that is not an API key, is the
        // authorization server's to judge.
        let verifier = oauth.filter(|v| {
            super::oauth::looks_like_jwt(key)
                || (v.introspects() && !key.starts_with(agentry_store::api_keys::KEY_PREFIX))
        });
        let (resolution, expires_at) = match verifier {
            Some(v) => v.resolve(db, key).await?,
            None => Self::from_database(db, key).await?,
        };
        if let Resolution::Tenant { tenant, key_id, .. } = &resolution
            && let Some(entries) = &self.entries
        {
            entries.insert(
                d,
                Entry {
                    resolution: resolution.clone(),
                    tenant_id: tenant.id,
                    key_id: *key_id,
                    oauth: verifier.is_some(),
                    expires_at,
                },
            );
        }
        Ok(resolution)
    }

    /// The resolution and the key's expiry.
    async fn from_database(
        db: &DatabaseConnection,
        key: &str,
    ) -> Result<(Resolution, Option<DateTime<Utc>>), ApiError> {
        const INVALID: (Resolution, Option<DateTime<Utc>>) = (Resolution::Invalid, None);
        let platform = PlatformScope::new();
        let row = match api_keys::authenticate(db, &platform, key).await? {
            KeyCheck::Valid(row) => row,
            KeyCheck::Invalid | KeyCheck::Expired | KeyCheck::Revoked => return Ok(INVALID),
        };
        let Some(tenant) = tenants::get(db, &platform, row.tenant_id).await? else {
            return Ok(INVALID);
        };
        let scope = tenant.scope();
        let Some(user) = users::get(db, &scope, row.user_id).await? else {
            return Ok(INVALID);
        };
        if user.disabled {
            return Ok(INVALID);
        }
        // A key never gives more than its user has: an admin's key has its own role (admin,
        // member or a custom role); anyone else's key has the user's role, whatever the key
        // says (a user demoted after the key was made).
        let grant = row.grant().under(user.grant());
        // `last_used_at` is best effort and must not slow the request down; the store writes it
        // at most once a minute per key.
        let touch_db = db.clone();
        let touch_row = row.clone();
        tokio::spawn(async move {
            if let Err(e) = api_keys::touch_last_used(&touch_db, &touch_row).await {
                tracing::warn!(error = %e, key_id = %touch_row.id, "could not record the key's last use");
            }
        });
        let resolution = Resolution::Tenant {
            tenant: Arc::new(tenant),
            user: UserScope {
                tenant: scope,
                user_id: user.id,
                role: grant.role,
                custom_role: grant.custom,
            },
            key_id: Some(row.id),
        };
        Ok((resolution, row.expires_at))
    }

    /// Forget every cached key of a tenant (after a suspension, a user change, a deletion).
    pub fn forget_tenant(&self, tenant: TenantId) {
        self.forget_where(|e| e.tenant_id == tenant);
        let _ = self.forgotten.send(Forgotten::Tenant(tenant));
    }

    /// Forget one key (after its revocation).
    pub fn forget_key(&self, key: ApiKeyId) {
        self.forget_where(|e| e.key_id == Some(key));
        let _ = self.forgotten.send(Forgotten::Key(key));
    }

    /// Forget every cached key (changes may have been missed: another replica's announcements
    /// while Redis was away).
    pub fn forget_all(&self) {
        if let Some(entries) = &self.entries {
            entries.invalidate_all();
        }
    }

    /// Hear of every later [`forget_tenant`](Self::forget_tenant) and
    /// [`forget_key`](Self::forget_key) (a receiver that lags hears `Lagged`: check everything).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Forgotten> {
        self.forgotten.subscribe()
    }

    /// Drop the matching entries now (a walk over at most [`MAX_ENTRIES`]; revocations are rare).
    /// moka's `invalidate_entries_if` would be lazy, and its entry count approximate.
    fn forget_where(&self, matches: impl Fn(&Entry) -> bool) {
        let Some(entries) = &self.entries else {
            return;
        };
        for (d, e) in entries.iter() {
            if matches(&e) {
                entries.invalidate(&*d);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.as_ref().map_or(0, |c| {
            c.run_pending_tasks();
            c.entry_count() as usize
        })
    }
}

/// The domain operations make this cache forget what they changed.
impl agentry_domain::Credentials for KeyResolver {
    fn forget_tenant(&self, tenant: TenantId) {
        KeyResolver::forget_tenant(self, tenant);
    }

    fn forget_key(&self, key: ApiKeyId) {
        KeyResolver::forget_key(self, key);
    }

    fn forget_all(&self) {
        KeyResolver::forget_all(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_schema::tenancy::Role;
    use agentry_store::tenants::{NewTenant, Quotas};
    use agentry_store::testing::{Backend, TestDb};

    async fn tenant_key(db: &DatabaseConnection, role: Role) -> (TenantId, ApiKeyId, String) {
        let t = tenants::create(
            db,
            &PlatformScope::new(),
            NewTenant {
                name: format!("t-{}", uuid::Uuid::new_v4()),
                quotas: Quotas::default(),
                features_enabled: vec![],
                tool_permissions: None,
                policy: Default::default(),
            },
        )
        .await
        .unwrap();
        let u = users::create(db, &t.scope(), "u", role).await.unwrap();
        let k = api_keys::create(db, &t.scope(), u.id, "k", role, None)
            .await
            .unwrap();
        (t.id, k.key.id, k.secret)
    }

    #[actix_web::test]
    async fn keys_resolve_cache_and_forget() {
        let tdb = TestDb::open(Backend::Sqlite).await.unwrap();
        let db = &tdb.db;
        let resolver = KeyResolver::new(
            AdminKeySource::Configured("the-platform-admin-key"),
            Duration::from_secs(60),
        );
        assert!(matches!(
            resolver
                .resolve(db, "the-platform-admin-key", None)
                .await
                .unwrap(),
            Resolution::PlatformAdmin
        ));
        assert!(matches!(
            resolver
                .resolve(db, "the-platform-admin-kez", None)
                .await
                .unwrap(),
            Resolution::Invalid
        ));
        assert!(matches!(
            resolver.resolve(db, "", None).await.unwrap(),
            Resolution::Invalid
        ));

        let (tenant, key_id, secret) = tenant_key(db, Role::Admin).await;
        let Resolution::Tenant {
            tenant: t, user, ..
        } = resolver.resolve(db, &secret, None).await.unwrap()
        else {
            panic!("a fresh key resolves");
        };
        assert_eq!(t.id, tenant);
        assert_eq!(user.role, Role::Admin);
        assert_eq!(resolver.len(), 1);

        // Revoked in the database: the cache still answers until told or expired…
        api_keys::revoke(db, &t.scope(), key_id).await.unwrap();
        assert!(matches!(
            resolver.resolve(db, &secret, None).await.unwrap(),
            Resolution::Tenant { .. }
        ));
        // …and forgets at once when told.
        resolver.forget_key(key_id);
        assert!(matches!(
            resolver.resolve(db, &secret, None).await.unwrap(),
            Resolution::Invalid
        ));

        let (tenant2, _, secret2) = tenant_key(db, Role::Member).await;
        assert!(matches!(
            resolver.resolve(db, &secret2, None).await.unwrap(),
            Resolution::Tenant { .. }
        ));
        resolver.forget_tenant(tenant2);
        assert_eq!(resolver.len(), 0);
    }

    #[actix_web::test]
    async fn a_cached_key_stops_working_at_its_own_expiry_and_the_cache_is_bounded() {
        let tdb = TestDb::open(Backend::Sqlite).await.unwrap();
        let db = &tdb.db;
        // A TTL far longer than the key's life: only the key's expiry can end the entry.
        let resolver = KeyResolver::with_capacity(AdminKeySource::Off, Duration::from_secs(600), 3);
        let (tenant, _, _) = tenant_key(db, Role::Member).await;
        let scope = PlatformScope::new().tenant(tenant);
        let user = users::create(db, &scope, "soon", Role::Member)
            .await
            .unwrap();
        let soon = Utc::now() + chrono::Duration::milliseconds(1500);
        let k = api_keys::create(db, &scope, user.id, "soon", Role::Member, Some(soon))
            .await
            .unwrap();
        assert!(matches!(
            resolver.resolve(db, &k.secret, None).await.unwrap(),
            Resolution::Tenant { .. }
        ));
        assert_eq!(resolver.len(), 1);
        // However late this wakes up, it is after the expiry.
        let left = (soon - Utc::now()).to_std().unwrap_or_default();
        tokio::time::sleep(left + Duration::from_millis(200)).await;
        assert!(matches!(
            resolver.resolve(db, &k.secret, None).await.unwrap(),
            Resolution::Invalid
        ));

        // More live keys than the bound: the cache keeps at most the bound, and every key
        // still resolves (an evicted one from the database).
        let mut secrets = Vec::new();
        for _ in 0..6 {
            secrets.push(tenant_key(db, Role::Member).await.2);
        }
        for secret in secrets.iter().chain(secrets.iter()) {
            assert!(matches!(
                resolver.resolve(db, secret, None).await.unwrap(),
                Resolution::Tenant { .. }
            ));
        }
        assert!(resolver.len() <= 3, "{} entries", resolver.len());
    }

    #[actix_web::test]
    async fn the_generated_admin_key_resolves_from_the_database_and_a_configured_one_wins() {
        let tdb = TestDb::open(Backend::Sqlite).await.unwrap();
        let db = &tdb.db;
        let p = PlatformScope::new();
        let first = platform_admin_key::replace(db, &p).await.unwrap();
        let resolver = KeyResolver::new(AdminKeySource::Stored, Duration::ZERO);
        assert!(resolver.admin_api_on());
        assert!(matches!(
            resolver.resolve(db, &first.secret, None).await.unwrap(),
            Resolution::PlatformAdmin
        ));
        // Replaced (by `agentry admin --direct reset-admin-key`, maybe on another machine):
        // with no cache the old key is refused at once.
        let second = platform_admin_key::replace(db, &p).await.unwrap();
        assert!(matches!(
            resolver.resolve(db, &first.secret, None).await.unwrap(),
            Resolution::Invalid
        ));
        assert!(matches!(
            resolver.resolve(db, &second.secret, None).await.unwrap(),
            Resolution::PlatformAdmin
        ));
        // A configured key wins: the generated one is nobody.
        let configured = KeyResolver::new(
            AdminKeySource::of("the-configured-admin-key", true),
            Duration::ZERO,
        );
        assert!(matches!(
            configured.resolve(db, &second.secret, None).await.unwrap(),
            Resolution::Invalid
        ));
        assert!(matches!(
            configured
                .resolve(db, "the-configured-admin-key", None)
                .await
                .unwrap(),
            Resolution::PlatformAdmin
        ));
        // Generation off and no key: the admin API is off and nothing is the admin.
        let off = KeyResolver::new(AdminKeySource::of("", false), Duration::ZERO);
        assert!(!off.admin_api_on());
        assert!(matches!(
            off.resolve(db, &second.secret, None).await.unwrap(),
            Resolution::Invalid
        ));
    }

    #[actix_web::test]
    async fn a_key_is_never_more_than_its_user_and_disabled_users_are_invalid() {
        let tdb = TestDb::open(Backend::Sqlite).await.unwrap();
        let db = &tdb.db;
        let resolver = KeyResolver::new(AdminKeySource::Off, Duration::ZERO);
        let (tenant, _, _) = tenant_key(db, Role::Member).await;
        let scope = agentry_store::PlatformScope::new().tenant(tenant);
        let member = users::create(db, &scope, "m", Role::Member).await.unwrap();
        // A stale admin key of a user who is now a member acts as a member.
        let k = api_keys::create(db, &scope, member.id, "k", Role::Admin, None)
            .await
            .unwrap();
        let Resolution::Tenant { user, .. } = resolver.resolve(db, &k.secret, None).await.unwrap()
        else {
            panic!("resolves");
        };
        assert_eq!(user.role, Role::Member);
        users::update(db, &scope, member.id, None, Some(true))
            .await
            .unwrap();
        assert!(matches!(
            resolver.resolve(db, &k.secret, None).await.unwrap(),
            Resolution::Invalid
        ));
        // Expired keys are invalid.
        let admin = users::create(db, &scope, "a", Role::Admin).await.unwrap();
        let past = chrono::Utc::now() - chrono::Duration::seconds(1);
        let k = api_keys::create(db, &scope, admin.id, "old", Role::Admin, Some(past))
            .await
            .unwrap();
        assert!(matches!(
            resolver.resolve(db, &k.secret, None).await.unwrap(),
            Resolution::Invalid
        ));
        // With no admin key configured, nothing is the admin key.
        assert!(matches!(
            resolver.resolve(db, "", None).await.unwrap(),
            Resolution::Invalid
        ));
    }
}
