//! Skills: the agent-framework folder format (a `SKILL.md` with YAML front matter `name` and
//! `description`, then instructions, plus any files beside it), per tenant (admin-managed) or
//! per user. Everything is in the database (`skills` and `skill_files`), so every replica of a
//! cluster serves the same skills. The gateway checks an upload (limits, paths, front matter)
//! before it reaches [`put`]; this module stores and reads what it is given.
//!
//! A user sees the tenant's skills and their own. When both have a skill of the same name, the
//! user's own is the one they see ([`find_visible`], [`list_visible`]).

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set, TransactionSession, TransactionTrait,
};

use agentry_schema::entities::{skill, skill_file};
use agentry_schema::ids::{SkillName, TenantId, UserId};

use crate::{Result, StoreError, TenantScope, corrupt, now, sanitize_text};

/// `owner` of the tenant's own skills (a user's are their id, which never reads `tenant`).
const TENANT_OWNER: &str = "tenant";

/// Whose a skill is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkillOwner {
    /// The tenant's: every user of the tenant sees it; tenant admins manage it.
    Tenant,
    /// One user's: only they see it.
    User(UserId),
}

impl SkillOwner {
    fn key(&self) -> String {
        match self {
            SkillOwner::Tenant => TENANT_OWNER.to_string(),
            SkillOwner::User(u) => u.to_string(),
        }
    }

    fn parse(raw: &str) -> Result<Self> {
        if raw == TENANT_OWNER {
            return Ok(SkillOwner::Tenant);
        }
        raw.parse::<UserId>()
            .map(SkillOwner::User)
            .map_err(|e| corrupt("skill.owner", e))
    }

    /// `tenant` or `user`.
    pub fn scope_name(&self) -> &'static str {
        match self {
            SkillOwner::Tenant => "tenant",
            SkillOwner::User(_) => "user",
        }
    }
}

/// A checked upload: the front matter's name and description, the instructions (the body of
/// `SKILL.md`) and every file by relative path, `SKILL.md` included.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSkill {
    pub name: SkillName,
    pub description: String,
    pub instructions: String,
    pub files: Vec<(String, Vec<u8>)>,
}

/// A skill without its files' contents.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub tenant_id: TenantId,
    pub owner: SkillOwner,
    pub name: SkillName,
    pub description: String,
    pub instructions: String,
    pub file_count: u32,
    pub total_bytes: u64,
    pub created_by: Option<UserId>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<skill::Model> for Skill {
    type Error = StoreError;
    fn try_from(m: skill::Model) -> Result<Self> {
        Ok(Skill {
            tenant_id: m.tenant_id.into(),
            owner: SkillOwner::parse(&m.owner)?,
            name: SkillName::try_from(m.name).map_err(|e| corrupt("skill.name", e))?,
            description: m.description,
            instructions: m.instructions,
            file_count: u32::try_from(m.file_count).unwrap_or(0),
            total_bytes: u64::try_from(m.total_bytes).unwrap_or(0),
            created_by: m.created_by.map(UserId),
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

/// What the system prompt lists of a skill.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillSummary {
    pub owner: SkillOwner,
    pub name: SkillName,
    pub description: String,
}

/// One file of a skill, without its content.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillFileInfo {
    pub path: String,
    pub size: u64,
}

fn i64_of(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Store a skill. `replace`: an existing skill of the same owner and name is replaced (its
/// files included) in the same transaction; otherwise it is a conflict.
pub async fn put<C>(
    db: &C,
    scope: &TenantScope,
    owner: SkillOwner,
    skill: NewSkill,
    created_by: Option<UserId>,
    replace: bool,
) -> Result<Skill>
where
    C: ConnectionTrait + TransactionTrait,
{
    let key = owner.key();
    let name = skill.name.to_string();
    // Read outside the transaction, so that its first statement is a write: on SQLite a
    // transaction that reads and then writes fails at once ("database is locked") when another
    // connection wrote in between, where a first write waits its turn (the busy timeout).
    let created_at = if replace {
        skill::Entity::find_by_id((scope.uuid(), key.clone(), name.clone()))
            .one(db)
            .await?
            .map(|e| e.created_at)
    } else {
        None
    };
    let txn = db.begin().await?;
    if replace {
        skill::Entity::delete_by_id((scope.uuid(), key.clone(), name.clone()))
            .exec(&txn)
            .await?;
        skill_file::Entity::delete_many()
            .filter(skill_file::Column::TenantId.eq(scope.uuid()))
            .filter(skill_file::Column::Owner.eq(key.as_str()))
            .filter(skill_file::Column::Skill.eq(name.as_str()))
            .exec(&txn)
            .await?;
    }
    let created_at = created_at.unwrap_or_else(now);
    let total: usize = skill.files.iter().map(|(_, c)| c.len()).sum();
    let row = skill::ActiveModel {
        tenant_id: Set(scope.uuid()),
        owner: Set(key.clone()),
        name: Set(name.clone()),
        description: Set(sanitize_text(skill.description)),
        instructions: Set(sanitize_text(skill.instructions)),
        file_count: Set(i32::try_from(skill.files.len()).unwrap_or(i32::MAX)),
        total_bytes: Set(i64_of(total)),
        created_by: Set(created_by.map(|u| u.0)),
        created_at: Set(created_at),
        updated_at: Set(now()),
    }
    .insert(&txn)
    .await
    .map_err(|e| {
        StoreError::conflict_on_unique(e, || {
            format!(
                "a {} skill named {name:?} already exists",
                owner.scope_name()
            )
        })
    })?;
    // One row at a time: a batch of large blobs could pass MySQL's `max_allowed_packet`.
    for (path, content) in skill.files {
        skill_file::ActiveModel {
            tenant_id: Set(scope.uuid()),
            owner: Set(key.clone()),
            skill: Set(name.clone()),
            path: Set(path),
            size: Set(i64_of(content.len())),
            content: Set(content),
        }
        .insert(&txn)
        .await?;
    }
    txn.commit().await?;
    row.try_into()
}

/// One skill of `owner`.
pub async fn get(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    owner: SkillOwner,
    name: &SkillName,
) -> Result<Option<Skill>> {
    skill::Entity::find_by_id((scope.uuid(), owner.key(), name.to_string()))
        .one(db)
        .await?
        .map(Skill::try_from)
        .transpose()
}

/// The skills of `owner`, by name.
pub async fn list(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    owner: SkillOwner,
) -> Result<Vec<Skill>> {
    skill::Entity::find()
        .filter(skill::Column::TenantId.eq(scope.uuid()))
        .filter(skill::Column::Owner.eq(owner.key()))
        .order_by_asc(skill::Column::Name)
        .all(db)
        .await?
        .into_iter()
        .map(Skill::try_from)
        .collect()
}

/// What `user` sees, by name: the tenant's skills and their own (their own wins a name both
/// have). Names and descriptions only: what the system prompt lists.
pub async fn list_visible(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user: UserId,
) -> Result<Vec<SkillSummary>> {
    let rows: Vec<(String, String, String)> = skill::Entity::find()
        .select_only()
        .column(skill::Column::Owner)
        .column(skill::Column::Name)
        .column(skill::Column::Description)
        .filter(skill::Column::TenantId.eq(scope.uuid()))
        .filter(skill::Column::Owner.is_in([TENANT_OWNER.to_string(), user.to_string()]))
        .order_by_asc(skill::Column::Name)
        .into_tuple()
        .all(db)
        .await?;
    let mut out: Vec<SkillSummary> = Vec::with_capacity(rows.len());
    for (owner, name, description) in rows {
        let owner = SkillOwner::parse(&owner)?;
        let name = SkillName::try_from(name).map_err(|e| corrupt("skill.name", e))?;
        match out.iter_mut().find(|s| s.name == name) {
            Some(seen) => {
                if owner != SkillOwner::Tenant {
                    *seen = SkillSummary {
                        owner,
                        name,
                        description,
                    };
                }
            }
            None => out.push(SkillSummary {
                owner,
                name,
                description,
            }),
        }
    }
    Ok(out)
}

/// The skill called `name` that `user` sees: their own, else the tenant's.
pub async fn find_visible(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user: UserId,
    name: &SkillName,
) -> Result<Option<Skill>> {
    if let Some(own) = get(db, scope, SkillOwner::User(user), name).await? {
        return Ok(Some(own));
    }
    get(db, scope, SkillOwner::Tenant, name).await
}

/// The files of a skill, by path.
pub async fn files(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    owner: SkillOwner,
    name: &SkillName,
) -> Result<Vec<SkillFileInfo>> {
    let rows: Vec<(String, i64)> = skill_file::Entity::find()
        .select_only()
        .column(skill_file::Column::Path)
        .column(skill_file::Column::Size)
        .filter(skill_file::Column::TenantId.eq(scope.uuid()))
        .filter(skill_file::Column::Owner.eq(owner.key()))
        .filter(skill_file::Column::Skill.eq(name.to_string()))
        .into_tuple()
        .all(db)
        .await?;
    // Sorted here, byte-wise: MySQL's collation would sort `SKILL.md` after `data.bin`.
    let mut out: Vec<SkillFileInfo> = rows
        .into_iter()
        .map(|(path, size)| SkillFileInfo {
            path,
            size: u64::try_from(size).unwrap_or(0),
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// One file's content.
pub async fn file(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    owner: SkillOwner,
    name: &SkillName,
    path: &str,
) -> Result<Option<Vec<u8>>> {
    Ok(skill_file::Entity::find_by_id((
        scope.uuid(),
        owner.key(),
        name.to_string(),
        path.to_string(),
    ))
    .one(db)
    .await?
    .map(|f| f.content))
}

/// Delete a skill and its files.
pub async fn delete<C>(
    db: &C,
    scope: &TenantScope,
    owner: SkillOwner,
    name: &SkillName,
) -> Result<bool>
where
    C: ConnectionTrait + TransactionTrait,
{
    let txn = db.begin().await?;
    let gone = skill::Entity::delete_by_id((scope.uuid(), owner.key(), name.to_string()))
        .exec(&txn)
        .await?
        .rows_affected
        > 0;
    skill_file::Entity::delete_many()
        .filter(skill_file::Column::TenantId.eq(scope.uuid()))
        .filter(skill_file::Column::Owner.eq(owner.key()))
        .filter(skill_file::Column::Skill.eq(name.to_string()))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    Ok(gone)
}

/// Delete every skill of a user (the user is being deleted), inside the caller's transaction.
pub(crate) async fn delete_owned_by(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    user: UserId,
) -> Result<()> {
    skill::Entity::delete_many()
        .filter(skill::Column::TenantId.eq(scope.uuid()))
        .filter(skill::Column::Owner.eq(user.to_string()))
        .exec(db)
        .await?;
    skill_file::Entity::delete_many()
        .filter(skill_file::Column::TenantId.eq(scope.uuid()))
        .filter(skill_file::Column::Owner.eq(user.to_string()))
        .exec(db)
        .await?;
    Ok(())
}
