//! A session's messages and runs indexed by `(tenant_id, session_id, …)` (issue 24).
//!
//! Every read of a session's messages or runs filters on the tenant and the session and orders
//! by `id` (messages) or `started_at` (runs). SQLite answered those through an index with the
//! tenant first and the order second — `ix_messages_tenant_id` (whose entries hold the rowid,
//! `id`, so it also gives the order) and `ix_executions_tenant_id_started_at` — over the
//! session's own index: it read every message or run of the tenant to find one session's
//! (19 000 messages after ten seconds of a ten-client benchmark; the history read was 15% of
//! the server's CPU, and a new session's three start-up reads of its unfinished runs grew with
//! the tenant's runs). An index on `(tenant_id, session_id, order)` matches both equalities and
//! the order, so the planner walks exactly the session's rows on every backend. It replaces:
//! - `messages (tenant_id)` and `messages (session_id, id)`: every read of messages names the
//!   tenant, and the new index has it first, so an insert now updates one index instead of two;
//! - `executions (tenant_id, session_id)`: the new index has those columns first.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// `(table, the new index, its columns, the indexes it replaces with their columns)`.
type Change = (
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [(&'static str, &'static [&'static str])],
);

const CHANGES: [Change; 2] = [
    (
        "messages",
        "ix_messages_tenant_id_session_id_id",
        &["tenant_id", "session_id", "id"],
        &[
            ("ix_messages_tenant_id", &["tenant_id"]),
            ("ix_messages_session_id_id", &["session_id", "id"]),
        ],
    ),
    (
        "executions",
        "ix_executions_tenant_id_session_id_started_at",
        &["tenant_id", "session_id", "started_at"],
        &[(
            "ix_executions_tenant_id_session_id",
            &["tenant_id", "session_id"],
        )],
    ),
];

async fn create(
    manager: &SchemaManager<'_>,
    table: &str,
    name: &str,
    cols: &[&str],
) -> Result<(), DbErr> {
    let mut index = Index::create();
    index.name(name).table(Alias::new(table)).if_not_exists();
    for col in cols {
        index.col(Alias::new(*col));
    }
    manager.create_index(index).await
}

async fn drop(manager: &SchemaManager<'_>, table: &str, name: &str) -> Result<(), DbErr> {
    if !manager.has_index(table, name).await? {
        return Ok(());
    }
    manager
        .drop_index(Index::drop().name(name).table(Alias::new(table)).to_owned())
        .await
}

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// The new index first, then the old ones go: a read always has an index to use.
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (table, new, cols, old) in CHANGES {
            create(manager, table, new, cols).await?;
            for (name, _) in old {
                drop(manager, table, name).await?;
            }
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (table, new, _, old) in CHANGES {
            for (name, cols) in old {
                create(manager, table, name, cols).await?;
            }
            drop(manager, table, new).await?;
        }
        Ok(())
    }
}
