//! Agent profiles (issue 16): `profiles`, the tenants' own profiles (the built-in ones live in
//! code), and assistants that inherit from their profile.
//!
//! An assistant's `system_prompt`, `interrupt_on`, `recursion_limit` and `timeout_secs` used to
//! be filled with the defaults when a request left them out. From now on a left-out field is
//! inherited from the assistant's profile, stored as an empty prompt, a JSON `null` and 0 (no
//! valid value of these fields). Rows that hold exactly the old defaults were never set by
//! anyone, so they are turned into "inherited" here: the general profile gives them the same
//! values back, and another profile its own.

use sea_orm::{ConnectionTrait, Statement};
use sea_orm_migration::prelude::*;

use super::Cols;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The prompt every assistant got when none was given, before profiles.
const OLD_DEFAULT_PROMPT: &str =
    "You are a helpful assistant. Use the tools when they help, and explain what you did.";

fn a(name: &str) -> Alias {
    Alias::new(name)
}

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let c = Cols::new(manager);
        let mut t = Table::create();
        t.table(a("profiles")).if_not_exists();
        for mut col in [
            c.uuid("tenant_id"),
            c.string("id", 64),
            c.string("name", 200),
            c.text("description"),
            c.text("system_prompt"),
            c.json_null("tools"),
            c.json("interrupt_on"),
            c.int("recursion_limit"),
            c.int("timeout_secs"),
            c.ts("created_at"),
            c.ts("updated_at"),
        ] {
            t.col(&mut col);
        }
        t.primary_key(Index::create().col(a("tenant_id")).col(a("id")));
        manager.create_table(t).await?;

        let db = manager.get_connection();
        let backend = manager.get_database_backend();
        // A profile id is a slug of up to 64 characters (SQLite does not check lengths).
        if backend != sea_orm::DatabaseBackend::Sqlite {
            manager
                .alter_table(
                    Table::alter()
                        .table(a("assistants"))
                        .modify_column(c.string("profile", 64))
                        .to_owned(),
                )
                .await?;
        }
        let inherit = |col: &str, old: SimpleExpr, new: SimpleExpr| {
            Query::update()
                .table(a("assistants"))
                .value(a(col), new)
                .and_where(Expr::col(a(col)).eq(old))
                .to_owned()
        };
        for stmt in [
            inherit(
                "system_prompt",
                OLD_DEFAULT_PROMPT.into(),
                String::new().into(),
            ),
            inherit("recursion_limit", 25.into(), 0.into()),
            inherit("timeout_secs", 600.into(), 0.into()),
        ] {
            db.execute(&stmt).await?;
        }
        // JSON has no equality on every backend (PostgreSQL's `json`): read, then update by key.
        let rows = db
            .query_all_raw(Statement::from_string(
                backend,
                "SELECT tenant_id, id, interrupt_on FROM assistants".to_string(),
            ))
            .await?;
        for row in rows {
            let raw: serde_json::Value = row.try_get("", "interrupt_on")?;
            if raw != serde_json::json!([]) {
                continue;
            }
            let tenant: uuid::Uuid = row.try_get("", "tenant_id")?;
            let id: String = row.try_get("", "id")?;
            let stmt = Query::update()
                .table(a("assistants"))
                .value(a("interrupt_on"), serde_json::Value::Null)
                .and_where(Expr::col(a("tenant_id")).eq(tenant))
                .and_where(Expr::col(a("id")).eq(id))
                .to_owned();
            db.execute(&stmt).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(a("profiles")).if_exists().to_owned())
            .await
    }
}
