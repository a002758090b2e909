//! Checkpoints: the state of a run after each step, so a restarted process can resume it.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use serde_json::Value;

use agentry_schema::entities::checkpoint;
use agentry_schema::ids::{RunId, SessionId};

use crate::{Result, TenantScope, now, sanitize_json};

#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub id: i64,
    pub session_id: SessionId,
    pub execution_id: RunId,
    pub step: u32,
    /// The state-machine node the run is about to enter (`reason`, `act`, `approve`, …).
    pub node: String,
    pub state: Value,
    pub created_at: DateTime<Utc>,
}

impl From<checkpoint::Model> for Checkpoint {
    fn from(m: checkpoint::Model) -> Self {
        Checkpoint {
            id: m.id,
            session_id: m.session_id.into(),
            execution_id: m.execution_id.into(),
            step: u32::try_from(m.step).unwrap_or(0),
            node: m.node,
            state: m.state,
            created_at: m.created_at,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewCheckpoint {
    pub session_id: SessionId,
    pub execution_id: RunId,
    pub step: u32,
    pub node: String,
    pub state: Value,
}

fn row(scope: &TenantScope, new: NewCheckpoint) -> checkpoint::ActiveModel {
    checkpoint::ActiveModel {
        tenant_id: Set(scope.uuid()),
        session_id: Set(new.session_id.0),
        execution_id: Set(new.execution_id.0),
        step: Set(i32::try_from(new.step).unwrap_or(i32::MAX)),
        node: Set(new.node),
        state: Set(sanitize_json(new.state)),
        created_at: Set(now()),
        ..Default::default()
    }
}

/// Store a checkpoint and return it as stored.
pub async fn save(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: NewCheckpoint,
) -> Result<Checkpoint> {
    Ok(row(scope, new).insert(db).await?.into())
}

/// Store a checkpoint without reading it back (a run's steps: nothing is parsed again).
pub async fn write(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    new: NewCheckpoint,
) -> Result<()> {
    // Inside the writer's transaction: with the other jobs' checkpoints, before the commit.
    let Some(row) = crate::writer::Deferred::checkpoint(row(scope, new)) else {
        return Ok(());
    };
    insert_rows(db, vec![row]).await
}

/// Checkpoint rows, in as few statements as the parameter limits allow.
pub(crate) async fn insert_rows(
    db: &impl ConnectionTrait,
    rows: Vec<checkpoint::ActiveModel>,
) -> Result<()> {
    for chunk in crate::writer::per_insert(rows) {
        checkpoint::Entity::insert_many(chunk)
            .exec_without_returning(db)
            .await?;
    }
    Ok(())
}

/// The newest checkpoint of a run.
pub async fn latest(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    execution_id: RunId,
) -> Result<Option<Checkpoint>> {
    Ok(checkpoint::Entity::find()
        .filter(checkpoint::Column::TenantId.eq(scope.uuid()))
        .filter(checkpoint::Column::ExecutionId.eq(execution_id.0))
        .order_by_desc(checkpoint::Column::Id)
        .one(db)
        .await?
        .map(Checkpoint::from))
}

/// Every checkpoint of a run, oldest first.
pub async fn list(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    execution_id: RunId,
) -> Result<Vec<Checkpoint>> {
    Ok(checkpoint::Entity::find()
        .filter(checkpoint::Column::TenantId.eq(scope.uuid()))
        .filter(checkpoint::Column::ExecutionId.eq(execution_id.0))
        .order_by_asc(checkpoint::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(Checkpoint::from)
        .collect())
}

/// Keep the newest `keep` checkpoints of a run and delete the rest. Returns how many went.
pub async fn prune(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    execution_id: RunId,
    keep: u64,
) -> Result<u64> {
    let keep_ids: Vec<i64> = checkpoint::Entity::find()
        .select_only()
        .column(checkpoint::Column::Id)
        .filter(checkpoint::Column::TenantId.eq(scope.uuid()))
        .filter(checkpoint::Column::ExecutionId.eq(execution_id.0))
        .order_by_desc(checkpoint::Column::Id)
        .limit(keep)
        .into_tuple()
        .all(db)
        .await?;
    let mut q = checkpoint::Entity::delete_many()
        .filter(checkpoint::Column::TenantId.eq(scope.uuid()))
        .filter(checkpoint::Column::ExecutionId.eq(execution_id.0));
    if let Some(min_kept) = keep_ids.iter().min() {
        q = q.filter(checkpoint::Column::Id.lt(*min_kept));
    }
    Ok(q.exec(db).await?.rows_affected)
}
