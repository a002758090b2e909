//! Data sources: a tenant's databases the data tools may query (issue 17 item 2). The URL is
//! stored sealed (`agentry_sealing::SecretBox`, by the caller) with a redacted copy to show:
//! this module never sees credentials in the clear. The catalog `describe_data_source` reads
//! is cached here, so every replica shares it, and cleared when the URL changes.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, Set,
};
use serde_json::Value;

use agentry_schema::entities::data_source;
use agentry_schema::ids::{DataSourceId, TenantId};

use crate::{Result, StoreError, TenantScope, corrupt, now, sanitize_text};

/// What a tenant admin sets on a data source; the URL already sealed.
#[derive(Clone, PartialEq, Eq)]
pub struct DataSourceSpec {
    pub name: String,
    /// `postgres`, `mysql` or `sqlite`.
    pub engine: String,
    pub url_redacted: String,
    /// The whole URL, sealed (`v1:<key id>:…`).
    pub url_sealed: String,
    pub password_set: bool,
    pub allowed_roles: Vec<String>,
}

impl std::fmt::Debug for DataSourceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataSourceSpec")
            .field("name", &self.name)
            .field("engine", &self.engine)
            .field("url", &self.url_redacted)
            .field("password_set", &self.password_set)
            .field("allowed_roles", &self.allowed_roles)
            .finish_non_exhaustive()
    }
}

impl DataSourceSpec {
    /// Whether a caller of `role` may use the source.
    pub fn allows(&self, role: &str) -> bool {
        self.allowed_roles.iter().any(|r| r == role)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct DataSource {
    pub tenant_id: TenantId,
    pub id: DataSourceId,
    pub spec: DataSourceSpec,
    /// The cached catalog and when it was read.
    pub catalog: Option<(Value, DateTime<Utc>)>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<data_source::Model> for DataSource {
    type Error = StoreError;
    fn try_from(m: data_source::Model) -> Result<Self> {
        let allowed_roles: Vec<String> = serde_json::from_value(m.allowed_roles)
            .map_err(|e| corrupt("data_source.allowed_roles", e))?;
        Ok(DataSource {
            tenant_id: m.tenant_id.into(),
            id: DataSourceId::try_from(m.id).map_err(|e| corrupt("data_source.id", e))?,
            spec: DataSourceSpec {
                name: m.name,
                engine: m.engine,
                url_redacted: m.url_redacted,
                url_sealed: m.url_sealed,
                password_set: m.password_set,
                allowed_roles,
            },
            catalog: m.catalog.zip(m.catalog_at),
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

fn active(scope: &TenantScope, id: &DataSourceId, s: DataSourceSpec) -> data_source::ActiveModel {
    let ts = now();
    data_source::ActiveModel {
        tenant_id: Set(scope.uuid()),
        id: Set(id.to_string()),
        name: Set(sanitize_text(s.name)),
        engine: Set(s.engine),
        url_redacted: Set(s.url_redacted),
        url_sealed: Set(s.url_sealed),
        password_set: Set(s.password_set),
        allowed_roles: Set(Value::from(s.allowed_roles)),
        catalog: Set(None),
        catalog_at: Set(None),
        created_at: Set(ts),
        updated_at: Set(ts),
    }
}

pub async fn create(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &DataSourceId,
    spec: DataSourceSpec,
) -> Result<DataSource> {
    active(scope, id, spec)
        .insert(db)
        .await
        .map_err(|e| {
            StoreError::conflict_on_unique(e, || format!("data source {id:?} already exists"))
        })?
        .try_into()
}

pub async fn get(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &DataSourceId,
) -> Result<Option<DataSource>> {
    data_source::Entity::find_by_id((scope.uuid(), id.to_string()))
        .one(db)
        .await?
        .map(DataSource::try_from)
        .transpose()
}

/// The tenant's data sources, by id.
pub async fn list(db: &impl ConnectionTrait, scope: &TenantScope) -> Result<Vec<DataSource>> {
    data_source::Entity::find()
        .filter(data_source::Column::TenantId.eq(scope.uuid()))
        .order_by_asc(data_source::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(DataSource::try_from)
        .collect()
}

pub async fn count(db: &impl ConnectionTrait, scope: &TenantScope) -> Result<u64> {
    Ok(data_source::Entity::find()
        .filter(data_source::Column::TenantId.eq(scope.uuid()))
        .count(db)
        .await?)
}

/// Replace a source's settings. The cached catalog is kept only when the URL is unchanged
/// (the same database).
pub async fn update(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &DataSourceId,
    spec: DataSourceSpec,
    same_database: bool,
) -> Result<DataSource> {
    let Some(current) = data_source::Entity::find_by_id((scope.uuid(), id.to_string()))
        .one(db)
        .await?
    else {
        return Err(StoreError::NotFound(format!("data source {id}")));
    };
    let mut am = active(scope, id, spec);
    am.created_at = Set(current.created_at);
    if same_database {
        am.catalog = Set(current.catalog);
        am.catalog_at = Set(current.catalog_at);
    }
    am.update(db).await?.try_into()
}

/// Store the catalog just read.
pub async fn set_catalog(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &DataSourceId,
    catalog: Value,
) -> Result<DateTime<Utc>> {
    let at = now();
    let res = data_source::Entity::update_many()
        .col_expr(
            data_source::Column::Catalog,
            sea_orm::sea_query::Expr::value(catalog),
        )
        .col_expr(
            data_source::Column::CatalogAt,
            sea_orm::sea_query::Expr::value(at),
        )
        .filter(data_source::Column::TenantId.eq(scope.uuid()))
        .filter(data_source::Column::Id.eq(id.to_string()))
        .exec(db)
        .await?;
    if res.rows_affected == 0 {
        return Err(StoreError::NotFound(format!("data source {id}")));
    }
    Ok(at)
}

pub async fn delete(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &DataSourceId,
) -> Result<bool> {
    Ok(
        data_source::Entity::delete_by_id((scope.uuid(), id.to_string()))
            .exec(db)
            .await?
            .rows_affected
            > 0,
    )
}
