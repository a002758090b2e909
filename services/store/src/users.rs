//! Users of a tenant and their role (memberships).

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect, Set, TransactionSession, TransactionTrait,
};

use agentry_schema::entities::{api_key, membership, user};
use agentry_schema::ids::{TenantId, UserId};
use agentry_schema::roles::{Grant, RoleName};
use agentry_schema::tenancy::Role;

use crate::{PageRequest, Result, StoreError, TenantScope, now, parse_role};

#[derive(Debug, Clone, PartialEq)]
pub struct User {
    pub id: UserId,
    pub tenant_id: TenantId,
    pub name: String,
    pub role: Role,
    /// The user's custom role (then `role` is `Member`).
    pub custom_role: Option<RoleName>,
    pub disabled: bool,
    pub created_at: DateTime<Utc>,
}

impl User {
    pub fn grant(&self) -> Grant {
        Grant {
            role: self.role,
            custom: self.custom_role,
        }
    }
}

fn join(u: user::Model, m: Option<membership::Model>) -> Result<User> {
    let grant = match m {
        Some(m) => parse_role(&m.role)?,
        None => Role::Member.into(),
    };
    Ok(User {
        id: u.id.into(),
        tenant_id: u.tenant_id.into(),
        name: u.name,
        role: grant.role,
        custom_role: grant.custom,
        disabled: u.disabled,
        created_at: u.created_at,
    })
}

pub async fn create<C>(
    db: &C,
    scope: &TenantScope,
    name: &str,
    role: impl Into<Grant>,
) -> Result<User>
where
    C: ConnectionTrait + TransactionTrait,
{
    let role: Grant = role.into();
    let txn = db.begin().await?;
    let ts = now();
    let id = UserId::new();
    let u = user::ActiveModel {
        id: Set(id.0),
        tenant_id: Set(scope.uuid()),
        name: Set(name.to_string()),
        disabled: Set(false),
        created_at: Set(ts),
        updated_at: Set(ts),
    }
    .insert(&txn)
    .await
    .map_err(|e| {
        StoreError::conflict_on_unique(e, || {
            format!("a user named {name:?} already exists in this tenant")
        })
    })?;
    let m = membership::ActiveModel {
        id: Set(uuid::Uuid::now_v7()),
        tenant_id: Set(scope.uuid()),
        user_id: Set(id.0),
        role: Set(role.as_str().to_string()),
        created_at: Set(ts),
    }
    .insert(&txn)
    .await?;
    txn.commit().await?;
    join(u, Some(m))
}

pub async fn get(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: UserId,
) -> Result<Option<User>> {
    let Some(u) = user::Entity::find_by_id(id.0)
        .filter(crate::tenant_of_row(
            db.get_database_backend(),
            user::Column::TenantId,
            scope,
        ))
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let m = membership::Entity::find()
        .filter(membership::Column::TenantId.eq(scope.uuid()))
        .filter(membership::Column::UserId.eq(id.0))
        .one(db)
        .await?;
    join(u, m).map(Some)
}

/// The user of the tenant with this name (names are unique within a tenant).
pub async fn get_by_name(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    name: &str,
) -> Result<Option<User>> {
    let Some(u) = user::Entity::find()
        .filter(user::Column::TenantId.eq(scope.uuid()))
        .filter(user::Column::Name.eq(name))
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    get(db, scope, u.id.into()).await
}

pub async fn list(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    page: PageRequest,
) -> Result<(Vec<User>, u64)> {
    let total = count(db, scope).await?;
    let rows = user::Entity::find()
        .filter(user::Column::TenantId.eq(scope.uuid()))
        .order_by_asc(user::Column::CreatedAt)
        .order_by_asc(user::Column::Id)
        .limit(page.limit)
        .offset(page.offset)
        .all(db)
        .await?;
    let ids: Vec<uuid::Uuid> = rows.iter().map(|u| u.id).collect();
    let roles: std::collections::HashMap<uuid::Uuid, membership::Model> =
        membership::Entity::find()
            .filter(membership::Column::TenantId.eq(scope.uuid()))
            .filter(membership::Column::UserId.is_in(ids))
            .all(db)
            .await?
            .into_iter()
            .map(|m| (m.user_id, m))
            .collect();
    let mut out = Vec::with_capacity(rows.len());
    for u in rows {
        let m = roles.get(&u.id).cloned();
        out.push(join(u, m)?);
    }
    Ok((out, total))
}

/// How many users and unrevoked keys of the tenant hold a custom role (a role in use cannot be
/// deleted).
pub async fn holders_of(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    role: RoleName,
) -> Result<(u64, u64)> {
    let users = membership::Entity::find()
        .filter(membership::Column::TenantId.eq(scope.uuid()))
        .filter(membership::Column::Role.eq(role.as_str()))
        .count(db)
        .await?;
    let keys = api_key::Entity::find()
        .filter(api_key::Column::TenantId.eq(scope.uuid()))
        .filter(api_key::Column::Role.eq(role.as_str()))
        .filter(api_key::Column::RevokedAt.is_null())
        .count(db)
        .await?;
    Ok((users, keys))
}

pub async fn count(db: &impl ConnectionTrait, scope: &TenantScope) -> Result<u64> {
    Ok(user::Entity::find()
        .filter(user::Column::TenantId.eq(scope.uuid()))
        .count(db)
        .await?)
}

/// Change a user's role and/or disabled flag.
pub async fn update(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: UserId,
    role: Option<Grant>,
    disabled: Option<bool>,
) -> Result<User> {
    if get(db, scope, id).await?.is_none() {
        return Err(StoreError::NotFound(format!("user {id}")));
    }
    if let Some(role) = role {
        membership::Entity::update_many()
            .col_expr(membership::Column::Role, Expr::value(role.as_str()))
            .filter(membership::Column::TenantId.eq(scope.uuid()))
            .filter(membership::Column::UserId.eq(id.0))
            .exec(db)
            .await?;
    }
    if let Some(disabled) = disabled {
        user::Entity::update_many()
            .col_expr(user::Column::Disabled, Expr::value(disabled))
            .col_expr(user::Column::UpdatedAt, Expr::value(now()))
            .filter(user::Column::TenantId.eq(scope.uuid()))
            .filter(user::Column::Id.eq(id.0))
            .exec(db)
            .await?;
    }
    get(db, scope, id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("user {id}")))
}

/// Delete a user with their membership and API keys. Their sessions stay until deleted.
pub async fn delete<C>(db: &C, scope: &TenantScope, id: UserId) -> Result<bool>
where
    C: ConnectionTrait + TransactionTrait,
{
    let txn = db.begin().await?;
    let gone = user::Entity::delete_many()
        .filter(user::Column::TenantId.eq(scope.uuid()))
        .filter(user::Column::Id.eq(id.0))
        .exec(&txn)
        .await?
        .rows_affected
        > 0;
    membership::Entity::delete_many()
        .filter(membership::Column::TenantId.eq(scope.uuid()))
        .filter(membership::Column::UserId.eq(id.0))
        .exec(&txn)
        .await?;
    api_key::Entity::delete_many()
        .filter(api_key::Column::TenantId.eq(scope.uuid()))
        .filter(api_key::Column::UserId.eq(id.0))
        .exec(&txn)
        .await?;
    crate::skills::delete_owned_by(&txn, scope, id).await?;
    txn.commit().await?;
    Ok(gone)
}
