//! Skills (issue 16, item 3): `skills` and `skill_files`, per tenant or per user, in the
//! database so that every replica serves them; and `assistants.skills`, which skills an
//! assistant sees (JSON `null` = all, `[]` = none, or a list of names).

use sea_orm_migration::prelude::*;

use super::Cols;

#[derive(DeriveMigrationName)]
pub struct Migration;

fn a(name: &str) -> Alias {
    Alias::new(name)
}

#[allow(elided_lifetimes_in_paths)] // the trait's signature, as sea-orm-migration declares it
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let c = Cols::new(manager);
        let mut t = Table::create();
        t.table(a("skills")).if_not_exists();
        for mut col in [
            c.uuid("tenant_id"),
            c.string("owner", 64),
            c.string("name", 64),
            c.text("description"),
            c.text("instructions"),
            c.int("file_count"),
            c.bigint("total_bytes"),
            c.uuid_null("created_by"),
            c.ts("created_at"),
            c.ts("updated_at"),
        ] {
            t.col(&mut col);
        }
        t.primary_key(
            Index::create()
                .col(a("tenant_id"))
                .col(a("owner"))
                .col(a("name")),
        );
        manager.create_table(t).await?;

        let mut f = Table::create();
        f.table(a("skill_files")).if_not_exists();
        for mut col in [
            c.uuid("tenant_id"),
            c.string("owner", 64),
            c.string("skill", 64),
            c.string("path", 255),
            c.bigint("size"),
            c.blob("content"),
        ] {
            f.col(&mut col);
        }
        f.primary_key(
            Index::create()
                .col(a("tenant_id"))
                .col(a("owner"))
                .col(a("skill"))
                .col(a("path")),
        );
        manager.create_table(f).await?;

        if !manager.has_column("assistants", "skills").await? {
            manager
                .alter_table(
                    Table::alter()
                        .table(a("assistants"))
                        .add_column(c.json_null("skills"))
                        .take(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.has_column("assistants", "skills").await? {
            manager
                .alter_table(
                    Table::alter()
                        .table(a("assistants"))
                        .drop_column(a("skills"))
                        .take(),
                )
                .await?;
        }
        for table in ["skill_files", "skills"] {
            manager
                .drop_table(Table::drop().table(a(table)).if_exists().to_owned())
                .await?;
        }
        Ok(())
    }
}
