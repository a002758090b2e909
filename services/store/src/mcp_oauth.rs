//! OAuth for users' MCP servers (issue 18 item 1): each user's tokens per server
//! (`mcp_oauth_tokens`) and the sign-ins in progress (`mcp_oauth_states`). Everything secret
//! arrives sealed (`agentry_sealing::SecretBox`, by the caller): this module never sees a token.
//!
//! A sign-in's `state` is the callback's only credential, so only its SHA-256 is stored, and
//! [`take_state`] deletes the row in the same statement that finds it: a state works once, on
//! one replica, and not after its expiry.

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use sha2::{Digest, Sha256};

use agentry_schema::entities::{mcp_oauth_state, mcp_oauth_token};
use agentry_schema::ids::{TenantId, UserId};

use crate::{PlatformScope, Result, TenantScope, now};

/// A user's stored tokens for one server.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredTokens {
    pub server_url: String,
    pub tokens_sealed: String,
    pub updated_at: DateTime<Utc>,
}

impl std::fmt::Debug for StoredTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredTokens")
            .field("server_url", &self.server_url)
            .field("updated_at", &self.updated_at)
            .finish_non_exhaustive()
    }
}

pub async fn get_tokens(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user: UserId,
    server: &str,
) -> Result<Option<StoredTokens>> {
    Ok(mcp_oauth_token::Entity::find()
        .filter(mcp_oauth_token::Column::TenantId.eq(scope.tenant_id().as_uuid()))
        .filter(mcp_oauth_token::Column::UserId.eq(user.as_uuid()))
        .filter(mcp_oauth_token::Column::ServerName.eq(server))
        .one(db)
        .await?
        .map(|m| StoredTokens {
            server_url: m.server_url,
            tokens_sealed: m.tokens_sealed,
            updated_at: m.updated_at,
        }))
}

/// Store (or replace) a user's tokens for a server.
pub async fn put_tokens(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user: UserId,
    server: &str,
    server_url: &str,
    tokens_sealed: &str,
) -> Result<()> {
    let t = now();
    let existing = mcp_oauth_token::Entity::find()
        .filter(mcp_oauth_token::Column::TenantId.eq(scope.tenant_id().as_uuid()))
        .filter(mcp_oauth_token::Column::UserId.eq(user.as_uuid()))
        .filter(mcp_oauth_token::Column::ServerName.eq(server))
        .one(db)
        .await?;
    match existing {
        Some(m) => {
            let mut am: mcp_oauth_token::ActiveModel = m.into();
            am.server_url = Set(server_url.to_string());
            am.tokens_sealed = Set(tokens_sealed.to_string());
            am.updated_at = Set(t);
            am.update(db).await?;
        }
        None => {
            mcp_oauth_token::ActiveModel {
                tenant_id: Set(scope.tenant_id().as_uuid()),
                user_id: Set(user.as_uuid()),
                server_name: Set(server.to_string()),
                server_url: Set(server_url.to_string()),
                tokens_sealed: Set(tokens_sealed.to_string()),
                created_at: Set(t),
                updated_at: Set(t),
            }
            .insert(db)
            .await?;
        }
    }
    Ok(())
}

/// Forget a user's tokens for a server; whether there were any.
pub async fn delete_tokens(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user: UserId,
    server: &str,
) -> Result<bool> {
    let r = mcp_oauth_token::Entity::delete_many()
        .filter(mcp_oauth_token::Column::TenantId.eq(scope.tenant_id().as_uuid()))
        .filter(mcp_oauth_token::Column::UserId.eq(user.as_uuid()))
        .filter(mcp_oauth_token::Column::ServerName.eq(server))
        .exec(db)
        .await?;
    Ok(r.rows_affected > 0)
}

/// The stored form of a `state`: its SHA-256, hex.
pub fn state_hash(state: &str) -> String {
    hex::encode(Sha256::digest(state.as_bytes()))
}

/// Keep a sign-in in progress until `expires_at`.
pub async fn put_state(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user: UserId,
    server: &str,
    state: &str,
    pending_sealed: &str,
    expires_at: DateTime<Utc>,
) -> Result<()> {
    // Abandoned sign-ins of every tenant go when a new one starts.
    mcp_oauth_state::Entity::delete_many()
        .filter(mcp_oauth_state::Column::ExpiresAt.lt(now()))
        .exec(db)
        .await?;
    mcp_oauth_state::ActiveModel {
        state_hash: Set(state_hash(state)),
        tenant_id: Set(scope.tenant_id().as_uuid()),
        user_id: Set(user.as_uuid()),
        server_name: Set(server.to_string()),
        pending_sealed: Set(pending_sealed.to_string()),
        expires_at: Set(expires_at),
        created_at: Set(now()),
    }
    .insert(db)
    .await?;
    Ok(())
}

/// A sign-in in progress, as the callback finds it.
#[derive(Clone, PartialEq, Eq)]
pub struct PendingState {
    pub tenant_id: TenantId,
    pub user_id: UserId,
    pub server_name: String,
    pub pending_sealed: String,
    pub expires_at: DateTime<Utc>,
}

impl std::fmt::Debug for PendingState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingState")
            .field("tenant_id", &self.tenant_id)
            .field("user_id", &self.user_id)
            .field("server_name", &self.server_name)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// The sign-in of `state` without removing it (any tenant, as [`take_state`]): what the
/// callback shows before the person confirms. `None` when there is none.
pub async fn peek_state(
    db: &impl ConnectionTrait,
    _platform: &PlatformScope,
    state: &str,
) -> Result<Option<PendingState>> {
    Ok(mcp_oauth_state::Entity::find_by_id(state_hash(state))
        .one(db)
        .await?
        .map(PendingState::from))
}

impl From<mcp_oauth_state::Model> for PendingState {
    fn from(m: mcp_oauth_state::Model) -> Self {
        PendingState {
            tenant_id: m.tenant_id.into(),
            user_id: m.user_id.into(),
            server_name: m.server_name,
            pending_sealed: m.pending_sealed,
            expires_at: m.expires_at,
        }
    }
}

/// Find and remove the sign-in of `state` (any tenant: the callback knows no tenant before
/// this, the state is its credential). `None` when there is none, or another request took it
/// first. An expired one is returned too (and removed): the caller says it expired.
pub async fn take_state(
    db: &impl ConnectionTrait,
    _platform: &PlatformScope,
    state: &str,
) -> Result<Option<PendingState>> {
    let hash = state_hash(state);
    let Some(m) = mcp_oauth_state::Entity::find_by_id(hash.clone())
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let r = mcp_oauth_state::Entity::delete_many()
        .filter(mcp_oauth_state::Column::StateHash.eq(hash))
        .exec(db)
        .await?;
    if r.rows_affected == 0 {
        return Ok(None);
    }
    Ok(Some(m.into()))
}
