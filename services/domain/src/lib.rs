//! agentry-domain: the operations every transport shares, below them and above the engine:
//! tenants, users and keys ([`tenancy`]), custom roles ([`roles`]), MCP virtual servers
//! ([`virtual_servers`]), the retention sweep ([`retention`]), skill bundles ([`skill_bundle`])
//! and cross-replica invalidation ([`invalidate`]). The REST routes, the admin CLI and any
//! protocol call them; nothing here knows HTTP. Failures are [`DomainError`]s (an error code of
//! the one table, a message, details), which each transport maps onto its own error shape.

pub mod error;
pub mod invalidate;
pub mod retention;
pub mod roles;
pub mod skill_bundle;
pub mod tenancy;
pub mod virtual_servers;

use agentry_actors::Engine;
use agentry_schema::ids::{ApiKeyId, TenantId};
use agentry_store::coordination::Coordination;
use sea_orm::DatabaseConnection;

pub use error::{DomainError, DomainResult};

/// What a change of tenants, users or keys must make forget: the transport's cache of resolved
/// credentials (the gateway's key cache).
pub trait Credentials: Send + Sync {
    /// Every cached credential of the tenant (its row, its users' roles changed).
    fn forget_tenant(&self, tenant: TenantId);
    /// One key (revoked).
    fn forget_key(&self, key: ApiKeyId);
    /// Everything (changes may have been missed).
    fn forget_all(&self);
}

/// What the domain operations work on, borrowed from whoever composes the process: the
/// database, the engine, the cluster's coordination (Redis, in cluster mode) and the
/// credentials cache.
#[derive(Clone, Copy)]
pub struct Domain<'a> {
    pub db: &'a DatabaseConnection,
    pub engine: &'a Engine,
    /// `None` on a single node.
    pub coordination: Option<&'a Coordination>,
    pub credentials: &'a dyn Credentials,
}

/// A long-lived owner of a [`Domain`] (the gateway's state), for the background work that
/// outlives a request: the retention sweep, the invalidation listener.
pub trait HasDomain: Send + Sync + 'static {
    fn domain(&self) -> Domain<'_>;
}
