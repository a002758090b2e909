//! Database migrations for SQLite, PostgreSQL and MySQL/MariaDB (DESIGN §9).
//!
//! Run by `agentry serve` and `agentry migrate` through [`Migrator`].

use sea_orm_migration::prelude::*;

mod m20261122_000001_initial;
mod m20261125_000010_tenant_policy;
mod m20261125_000020_durable_runs;
mod m20261125_000030_platform_admin_key;
mod m20261125_000100_server_leases;
mod m20261125_000110_session_fence;
mod m20261126_000300_profiles;
mod m20261126_000400_audit_indexes;
mod m20261126_000410_retention_indexes;
mod m20261126_000500_model_connections;
mod m20261126_000600_skills;
mod m20261126_000700_data_sources;
mod m20261126_000800_task_runs;
mod m20261126_000900_memory_scopes;
mod m20261126_001000_custom_roles;
mod m20261126_001100_mcp_server_policy;
mod m20261126_001200_execution_role;
mod m20261127_001300_mcp_oauth;
mod m20261127_001400_mcp_virtual_servers;
mod m20261129_001500_stateless_sessions;
mod m20261129_001600_session_scoped_indexes;
mod m20261129_001700_child_runs_index;
mod m20261130_001800_webhooks;
mod m20261130_001900_remote_agents;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261122_000001_initial::Migration),
            Box::new(m20261125_000010_tenant_policy::Migration),
            Box::new(m20261125_000020_durable_runs::Migration),
            Box::new(m20261125_000030_platform_admin_key::Migration),
            Box::new(m20261125_000100_server_leases::Migration),
            Box::new(m20261125_000110_session_fence::Migration),
            Box::new(m20261126_000300_profiles::Migration),
            Box::new(m20261126_000400_audit_indexes::Migration),
            Box::new(m20261126_000410_retention_indexes::Migration),
            Box::new(m20261126_000500_model_connections::Migration),
            Box::new(m20261126_000600_skills::Migration),
            Box::new(m20261126_000700_data_sources::Migration),
            Box::new(m20261126_000800_task_runs::Migration),
            Box::new(m20261126_000900_memory_scopes::Migration),
            Box::new(m20261126_001000_custom_roles::Migration),
            Box::new(m20261126_001100_mcp_server_policy::Migration),
            Box::new(m20261126_001200_execution_role::Migration),
            Box::new(m20261127_001300_mcp_oauth::Migration),
            Box::new(m20261127_001400_mcp_virtual_servers::Migration),
            Box::new(m20261129_001500_stateless_sessions::Migration),
            Box::new(m20261129_001600_session_scoped_indexes::Migration),
            Box::new(m20261129_001700_child_runs_index::Migration),
            Box::new(m20261130_001800_webhooks::Migration),
            Box::new(m20261130_001900_remote_agents::Migration),
        ]
    }
}

/// Column helpers that pick the right type per backend: MySQL needs `DATETIME(6)` for
/// microsecond timestamps past 2038 and `LONGTEXT` for messages beyond 64 KiB.
pub(crate) struct Cols {
    backend: sea_orm::DatabaseBackend,
}

impl Cols {
    pub(crate) fn new(manager: &SchemaManager<'_>) -> Self {
        Self {
            backend: manager.get_database_backend(),
        }
    }

    fn is_mysql(&self) -> bool {
        self.backend == sea_orm::DatabaseBackend::MySql
    }

    pub(crate) fn uuid(&self, name: impl IntoIden) -> ColumnDef {
        ColumnDef::new(name).uuid().not_null().take()
    }

    pub(crate) fn uuid_null(&self, name: impl IntoIden) -> ColumnDef {
        ColumnDef::new(name).uuid().null().take()
    }

    pub(crate) fn ts(&self, name: impl IntoIden) -> ColumnDef {
        self.ts_base(name).not_null().take()
    }

    pub(crate) fn ts_null(&self, name: impl IntoIden) -> ColumnDef {
        self.ts_base(name).null().take()
    }

    fn ts_base(&self, name: impl IntoIden) -> ColumnDef {
        let mut c = ColumnDef::new(name);
        if self.is_mysql() {
            c.custom(Alias::new("DATETIME(6)"));
        } else {
            c.timestamp_with_time_zone();
        }
        c
    }

    pub(crate) fn string(&self, name: impl IntoIden, len: u32) -> ColumnDef {
        ColumnDef::new(name).string_len(len).not_null().take()
    }

    pub(crate) fn string_null(&self, name: impl IntoIden, len: u32) -> ColumnDef {
        ColumnDef::new(name).string_len(len).null().take()
    }

    pub(crate) fn text(&self, name: impl IntoIden) -> ColumnDef {
        self.text_base(name).not_null().take()
    }

    pub(crate) fn text_null(&self, name: impl IntoIden) -> ColumnDef {
        self.text_base(name).null().take()
    }

    fn text_base(&self, name: impl IntoIden) -> ColumnDef {
        let mut c = ColumnDef::new(name);
        if self.is_mysql() {
            c.custom(Alias::new("LONGTEXT"));
        } else {
            c.text();
        }
        c
    }

    pub(crate) fn json(&self, name: impl IntoIden) -> ColumnDef {
        ColumnDef::new(name).json().not_null().take()
    }

    pub(crate) fn json_null(&self, name: impl IntoIden) -> ColumnDef {
        ColumnDef::new(name).json().null().take()
    }

    /// Bytes: `bytea` on PostgreSQL, `LONGBLOB` on MySQL (its `BLOB` stops at 64 KiB).
    pub(crate) fn blob(&self, name: impl IntoIden) -> ColumnDef {
        let mut c = ColumnDef::new(name);
        if self.is_mysql() {
            c.custom(Alias::new("LONGBLOB"));
        } else {
            c.blob();
        }
        c.not_null().take()
    }

    pub(crate) fn int(&self, name: impl IntoIden) -> ColumnDef {
        ColumnDef::new(name).integer().not_null().take()
    }

    pub(crate) fn bigint(&self, name: impl IntoIden) -> ColumnDef {
        ColumnDef::new(name).big_integer().not_null().take()
    }

    pub(crate) fn boolean(&self, name: impl IntoIden) -> ColumnDef {
        ColumnDef::new(name).boolean().not_null().take()
    }

    pub(crate) fn boolean_null(&self, name: impl IntoIden) -> ColumnDef {
        ColumnDef::new(name).boolean().null().take()
    }

    pub(crate) fn auto_id(&self, name: impl IntoIden) -> ColumnDef {
        ColumnDef::new(name)
            .big_integer()
            .not_null()
            .auto_increment()
            .primary_key()
            .take()
    }
}
