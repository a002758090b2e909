//! Usage per day for the admin API: runs, tokens and tool calls.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect};
use serde::Serialize;

use agentry_schema::entities::{execution, tool_call_log};

use crate::{Result, TenantScope};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DailyUsage {
    pub day: NaiveDate,
    pub runs: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    pub tool_calls: u64,
}

/// Usage of the tenant between `from` (inclusive) and `to` (exclusive), one entry per UTC day
/// that had any activity, oldest first.
/// A run as the daily usage reads it: start, input, output and total tokens, and its parent
/// (a `task` child's tokens are counted in its parent's).
type RunRow = (DateTime<Utc>, i64, i64, i64, Option<uuid::Uuid>);

pub async fn by_day(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<DailyUsage>> {
    let runs: Vec<RunRow> = execution::Entity::find()
        .select_only()
        .column(execution::Column::StartedAt)
        .column(execution::Column::InputTokens)
        .column(execution::Column::OutputTokens)
        .column(execution::Column::TotalTokens)
        .column(execution::Column::ParentExecutionId)
        .filter(execution::Column::TenantId.eq(scope.uuid()))
        .filter(execution::Column::StartedAt.gte(from))
        .filter(execution::Column::StartedAt.lt(to))
        .into_tuple()
        .all(db)
        .await?;
    let calls: Vec<DateTime<Utc>> = tool_call_log::Entity::find()
        .select_only()
        .column(tool_call_log::Column::CreatedAt)
        .filter(tool_call_log::Column::TenantId.eq(scope.uuid()))
        .filter(tool_call_log::Column::CreatedAt.gte(from))
        .filter(tool_call_log::Column::CreatedAt.lt(to))
        .into_tuple()
        .all(db)
        .await?;
    let mut days: BTreeMap<NaiveDate, DailyUsage> = BTreeMap::new();
    let u = |v: i64| u64::try_from(v).unwrap_or(0);
    for (at, i, o, t, parent) in runs {
        let d = days.entry(at.date_naive()).or_insert_with(|| DailyUsage {
            day: at.date_naive(),
            ..Default::default()
        });
        d.runs += 1;
        // A `task` child's tokens are in its parent's usage already (they roll up).
        if parent.is_some() {
            continue;
        }
        d.input_tokens += u(i);
        d.output_tokens += u(o);
        d.total_tokens += u(t);
    }
    for at in calls {
        days.entry(at.date_naive())
            .or_insert_with(|| DailyUsage {
                day: at.date_naive(),
                ..Default::default()
            })
            .tool_calls += 1;
    }
    Ok(days.into_values().collect())
}
