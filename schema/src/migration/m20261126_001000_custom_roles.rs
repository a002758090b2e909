//! Custom roles (issue 17, item 5): `tenants.custom_roles` holds the tenant's role definitions
//! (`{"analyst": {"description", "tools", "areas"}}`; null = none), and `memberships.role` and
//! `api_keys.role` grow from 16 to 64 characters so they can hold a custom role's name (up to
//! 32). SQLite does not enforce a `varchar` length, so only PostgreSQL and MySQL are altered.

use sea_orm_migration::prelude::*;

use super::Cols;

#[derive(DeriveMigrationName)]
pub struct Migration;

fn a(name: &str) -> Alias {
    Alias::new(name)
}

async fn role_width(manager: &SchemaManager<'_>, len: u32) -> Result<(), DbErr> {
    if manager.get_database_backend() == sea_orm::DatabaseBackend::Sqlite {
        return Ok(());
    }
    for table in ["memberships", "api_keys"] {
        manager
            .alter_table(
                Table::alter()
                    .table(a(table))
                    .modify_column(ColumnDef::new(a("role")).string_len(len).not_null())
                    .take(),
            )
            .await?;
    }
    Ok(())
}

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let c = Cols::new(manager);
        if !manager.has_column("tenants", "custom_roles").await? {
            manager
                .alter_table(
                    Table::alter()
                        .table(a("tenants"))
                        .add_column(c.json_null(a("custom_roles")))
                        .take(),
                )
                .await?;
        }
        role_width(manager, 64).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.has_column("tenants", "custom_roles").await? {
            manager
                .alter_table(
                    Table::alter()
                        .table(a("tenants"))
                        .drop_column(a("custom_roles"))
                        .take(),
                )
                .await?;
        }
        role_width(manager, 16).await
    }
}
