//! Long-term memory with scopes and vectors (issue 17, item 1): `memories` gets its `scope`
//! (`user`, `assistant`, `tenant`; existing rows are users' own), the embedding of its content
//! with the model that made it (vectors of different models do not compare), and where it came
//! from (the session and run that stored it). `user_id` stays the owner of a `user` memory and
//! the author of a shared one. A tenant's model connection may name an embeddings model
//! (`model_connections.embedding_model`), used for that tenant's memories.

use sea_orm_migration::prelude::*;

use super::Cols;

#[derive(DeriveMigrationName)]
pub struct Migration;

fn a(name: &str) -> Alias {
    Alias::new(name)
}

const INDEX: &str = "ix_memories_tenant_scope";

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let c = Cols::new(manager);
        let mysql = manager.get_database_backend() == sea_orm::DatabaseBackend::MySql;
        let mut embedding = ColumnDef::new(a("embedding"));
        if mysql {
            // As every byte column on MySQL (`Cols::blob`): its BLOB stops at 64 KiB.
            embedding.custom(a("LONGBLOB"));
        } else {
            embedding.blob();
        }
        embedding.null();
        let columns = [
            (
                "scope",
                ColumnDef::new(a("scope"))
                    .string_len(16)
                    .not_null()
                    .default("user")
                    .take(),
            ),
            ("embedding", embedding),
            ("embedding_model", c.string_null("embedding_model", 200)),
            ("source_session_id", c.uuid_null("source_session_id")),
            ("source_run_id", c.uuid_null("source_run_id")),
        ];
        // One column per statement: SQLite alters one column at a time.
        for (name, mut col) in columns {
            if !manager.has_column("memories", name).await? {
                manager
                    .alter_table(
                        Table::alter()
                            .table(a("memories"))
                            .add_column(&mut col)
                            .take(),
                    )
                    .await?;
            }
        }
        if !manager
            .has_column("model_connections", "embedding_model")
            .await?
        {
            manager
                .alter_table(
                    Table::alter()
                        .table(a("model_connections"))
                        .add_column(c.string_null("embedding_model", 200))
                        .take(),
                )
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name(INDEX)
                    .table(a("memories"))
                    .col(a("tenant_id"))
                    .col(a("scope"))
                    .col(a("assistant_id"))
                    .if_not_exists()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(Index::drop().name(INDEX).table(a("memories")).to_owned())
            .await?;
        if manager
            .has_column("model_connections", "embedding_model")
            .await?
        {
            manager
                .alter_table(
                    Table::alter()
                        .table(a("model_connections"))
                        .drop_column(a("embedding_model"))
                        .take(),
                )
                .await?;
        }
        for name in [
            "source_run_id",
            "source_session_id",
            "embedding_model",
            "embedding",
            "scope",
        ] {
            if manager.has_column("memories", name).await? {
                manager
                    .alter_table(
                        Table::alter()
                            .table(a("memories"))
                            .drop_column(a(name))
                            .take(),
                    )
                    .await?;
            }
        }
        Ok(())
    }
}
