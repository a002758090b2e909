//! The initial schema: every table of DESIGN §9 plus the persisted event stream, with an index
//! on every tenant / user / session lookup.

use sea_orm_migration::prelude::*;

use super::Cols;

#[derive(DeriveMigrationName)]
pub struct Migration;

fn a(name: &str) -> Alias {
    Alias::new(name)
}

async fn create(
    manager: &SchemaManager<'_>,
    table: &str,
    cols: Vec<ColumnDef>,
    pk: &[&str],
) -> Result<(), DbErr> {
    let mut t = Table::create();
    t.table(a(table)).if_not_exists();
    for mut c in cols {
        t.col(&mut c);
    }
    if !pk.is_empty() {
        let mut key = Index::create();
        for col in pk {
            key.col(a(col));
        }
        t.primary_key(&mut key);
    }
    manager.create_table(t).await
}

async fn index(
    manager: &SchemaManager<'_>,
    table: &str,
    cols: &[&str],
    unique: bool,
) -> Result<(), DbErr> {
    let name = format!(
        "{}{}_{}",
        if unique { "ux_" } else { "ix_" },
        table,
        cols.join("_")
    );
    let mut idx = Index::create();
    idx.name(&name).table(a(table)).if_not_exists();
    for col in cols {
        idx.col(a(col));
    }
    if unique {
        idx.unique();
    }
    manager.create_index(idx).await
}

// The trait's signature elides the lifetime; ours must match it exactly.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let c = Cols::new(manager);

        create(
            manager,
            "tenants",
            vec![
                c.uuid("id"),
                c.string("name", 128),
                c.string("status", 16),
                c.int("max_users"),
                c.int("max_sessions_per_user"),
                c.int("max_mcp_servers"),
                c.bigint("workspace_quota_bytes"),
                c.int("requests_per_minute"),
                c.bigint("tokens_per_day"),
                c.int("max_concurrent_runs"),
                c.json("features_enabled"),
                c.json_null("tool_permissions"),
                c.ts("created_at"),
                c.ts("updated_at"),
            ],
            &["id"],
        )
        .await?;
        index(manager, "tenants", &["name"], true).await?;

        create(
            manager,
            "users",
            vec![
                c.uuid("id"),
                c.uuid("tenant_id"),
                c.string("name", 128),
                c.boolean("disabled"),
                c.ts("created_at"),
                c.ts("updated_at"),
            ],
            &["id"],
        )
        .await?;
        index(manager, "users", &["tenant_id", "name"], true).await?;

        create(
            manager,
            "memberships",
            vec![
                c.uuid("id"),
                c.uuid("tenant_id"),
                c.uuid("user_id"),
                c.string("role", 16),
                c.ts("created_at"),
            ],
            &["id"],
        )
        .await?;
        index(manager, "memberships", &["tenant_id", "user_id"], true).await?;
        index(manager, "memberships", &["user_id"], false).await?;

        create(
            manager,
            "api_keys",
            vec![
                c.uuid("id"),
                c.uuid("tenant_id"),
                c.uuid("user_id"),
                c.string("name", 128),
                c.string("prefix", 32),
                c.string("key_hash", 64),
                c.string("role", 16),
                c.ts_null("expires_at"),
                c.ts_null("revoked_at"),
                c.ts_null("last_used_at"),
                c.ts("created_at"),
            ],
            &["id"],
        )
        .await?;
        index(manager, "api_keys", &["prefix"], true).await?;
        index(manager, "api_keys", &["tenant_id", "user_id"], false).await?;

        create(
            manager,
            "assistants",
            vec![
                c.uuid("tenant_id"),
                c.string("id", 64),
                c.string("name", 128),
                c.text("description"),
                c.text("system_prompt"),
                c.string_null("provider", 32),
                c.string_null("model", 128),
                c.json_null("tools"),
                c.json("interrupt_on"),
                c.boolean("auto_approve"),
                c.string("profile", 32),
                c.int("recursion_limit"),
                c.int("timeout_secs"),
                c.int("max_retries"),
                c.ts("created_at"),
                c.ts("updated_at"),
            ],
            &["tenant_id", "id"],
        )
        .await?;

        create(
            manager,
            "sessions",
            vec![
                c.uuid("id"),
                c.uuid("tenant_id"),
                c.uuid("user_id"),
                c.string("assistant_id", 64),
                c.string("state", 32),
                c.boolean("auto_approve"),
                c.json("metadata"),
                c.ts("created_at"),
                c.ts("last_active"),
            ],
            &["id"],
        )
        .await?;
        index(manager, "sessions", &["tenant_id", "user_id"], false).await?;
        index(manager, "sessions", &["tenant_id", "assistant_id"], false).await?;
        index(manager, "sessions", &["last_active"], false).await?;

        create(
            manager,
            "messages",
            vec![
                c.auto_id("id"),
                c.uuid("tenant_id"),
                c.uuid("session_id"),
                c.uuid_null("run_id"),
                c.string("role", 16),
                c.text("content"),
                c.json_null("tool_calls"),
                c.string_null("tool_call_id", 128),
                c.ts("created_at"),
            ],
            &[],
        )
        .await?;
        index(manager, "messages", &["session_id", "id"], false).await?;
        index(manager, "messages", &["tenant_id"], false).await?;

        create(
            manager,
            "executions",
            vec![
                c.uuid("id"),
                c.uuid("tenant_id"),
                c.uuid("user_id"),
                c.uuid("session_id"),
                c.string("assistant_id", 64),
                c.text("input"),
                c.string("status", 32),
                c.text_null("error"),
                c.bigint("input_tokens"),
                c.bigint("output_tokens"),
                c.bigint("total_tokens"),
                c.int("steps"),
                c.string_null("trace_id", 64),
                c.ts("started_at"),
                c.ts_null("completed_at"),
                c.ts("updated_at"),
            ],
            &["id"],
        )
        .await?;
        index(manager, "executions", &["tenant_id", "user_id"], false).await?;
        index(manager, "executions", &["tenant_id", "session_id"], false).await?;
        index(manager, "executions", &["status"], false).await?;
        index(manager, "executions", &["tenant_id", "started_at"], false).await?;

        create(
            manager,
            "checkpoints",
            vec![
                c.auto_id("id"),
                c.uuid("tenant_id"),
                c.uuid("session_id"),
                c.uuid("execution_id"),
                c.int("step"),
                c.string("node", 32),
                c.json("state"),
                c.ts("created_at"),
            ],
            &[],
        )
        .await?;
        index(manager, "checkpoints", &["execution_id", "id"], false).await?;
        index(manager, "checkpoints", &["session_id"], false).await?;

        create(
            manager,
            "tool_call_logs",
            vec![
                c.uuid("id"),
                c.uuid("tenant_id"),
                c.uuid("session_id"),
                c.uuid("execution_id"),
                c.string("tool_call_id", 128),
                c.string("tool_name", 128),
                c.json("input"),
                c.json_null("output"),
                c.text_null("error"),
                c.bigint("duration_ms"),
                c.boolean_null("approved"),
                c.uuid_null("approved_by"),
                c.ts("created_at"),
            ],
            &["id"],
        )
        .await?;
        index(
            manager,
            "tool_call_logs",
            &["tenant_id", "execution_id"],
            false,
        )
        .await?;
        index(
            manager,
            "tool_call_logs",
            &["tenant_id", "created_at"],
            false,
        )
        .await?;

        create(
            manager,
            "approvals",
            vec![
                c.uuid("id"),
                c.uuid("tenant_id"),
                c.uuid("session_id"),
                c.uuid("execution_id"),
                c.string("kind", 16),
                c.string_null("tool_call_id", 128),
                c.json("request"),
                c.string("status", 16),
                c.json_null("decision"),
                c.uuid_null("decided_by"),
                c.ts("created_at"),
                c.ts_null("decided_at"),
            ],
            &["id"],
        )
        .await?;
        index(manager, "approvals", &["tenant_id", "session_id"], false).await?;
        index(manager, "approvals", &["execution_id"], false).await?;

        create(
            manager,
            "mcp_servers",
            vec![
                c.uuid("id"),
                c.uuid("tenant_id"),
                c.uuid("user_id"),
                c.string("name", 64),
                c.string("transport", 16),
                c.string_null("command", 512),
                c.json("args"),
                c.string_null("url", 2048),
                c.text_null("env_encrypted"),
                c.text_null("headers_encrypted"),
                c.boolean("disabled"),
                c.int("timeout_secs"),
                c.ts("created_at"),
                c.ts("updated_at"),
            ],
            &["id"],
        )
        .await?;
        index(
            manager,
            "mcp_servers",
            &["tenant_id", "user_id", "name"],
            true,
        )
        .await?;

        create(
            manager,
            "memories",
            vec![
                c.uuid("id"),
                c.uuid("tenant_id"),
                c.uuid("user_id"),
                c.string_null("assistant_id", 64),
                c.string("kind", 16),
                c.text("content"),
                c.json("metadata"),
                c.ts_null("expires_at"),
                c.ts("created_at"),
                c.ts("updated_at"),
            ],
            &["id"],
        )
        .await?;
        index(manager, "memories", &["tenant_id", "user_id"], false).await?;

        create(
            manager,
            "session_events",
            vec![
                c.auto_id("id"),
                c.uuid("tenant_id"),
                c.uuid("session_id"),
                c.bigint("seq"),
                c.uuid_null("run_id"),
                c.string("event_type", 32),
                c.text("event"),
                c.ts("created_at"),
            ],
            &[],
        )
        .await?;
        index(manager, "session_events", &["session_id", "seq"], true).await?;
        index(manager, "session_events", &["tenant_id"], false).await?;

        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            "session_events",
            "memories",
            "mcp_servers",
            "approvals",
            "tool_call_logs",
            "checkpoints",
            "executions",
            "messages",
            "sessions",
            "assistants",
            "api_keys",
            "memberships",
            "users",
            "tenants",
        ] {
            manager
                .drop_table(Table::drop().table(a(table)).if_exists().to_owned())
                .await?;
        }
        Ok(())
    }
}
