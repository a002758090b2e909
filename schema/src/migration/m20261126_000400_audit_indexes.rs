//! Indexes for the audit queries (issue 17): `GET /tool-calls?tool_name=` and `GET
//! /executions?tool_name=` look calls up by tool within a tenant, and `?assistant_id=` looks runs
//! up by assistant; without these both scan the tenant's whole audit.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const INDEXES: [(&str, &str, &[&str]); 2] = [
    (
        "ix_tool_call_logs_tenant_id_tool_name_created_at",
        "tool_call_logs",
        &["tenant_id", "tool_name", "created_at"],
    ),
    (
        "ix_executions_tenant_id_assistant_id_started_at",
        "executions",
        &["tenant_id", "assistant_id", "started_at"],
    ),
];

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (name, table, cols) in INDEXES {
            let mut idx = Index::create();
            idx.name(name).table(Alias::new(table)).if_not_exists();
            for c in cols {
                idx.col(Alias::new(*c));
            }
            manager.create_index(idx).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (name, table, _) in INDEXES {
            manager
                .drop_index(Index::drop().name(name).table(Alias::new(table)).to_owned())
                .await?;
        }
        Ok(())
    }
}
