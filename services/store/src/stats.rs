//! How many SQL statements this process sent, by kind: the figure the run path is budgeted
//! by (docs/benchmarks.md). Every pool [`crate::connect`] opens counts into it; `/metrics`
//! shows it as `agentry_db_statements_total{kind}`. `BEGIN` and `COMMIT` are not statements
//! here (sea-orm does not report them); everything inside a transaction is.
//!
//! With `RUST_LOG=agentry_store::sql=trace` every statement is also logged, with its time.

use std::sync::atomic::{AtomicU64, Ordering};

/// The kinds counted, in the order of [`StatementCounts::by_kind`].
pub const KINDS: [&str; 5] = ["select", "insert", "update", "delete", "other"];

static COUNTS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

/// Statements sent since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatementCounts {
    pub by_kind: [u64; 5],
}

impl StatementCounts {
    pub fn total(&self) -> u64 {
        self.by_kind.iter().sum()
    }

    /// `(kind, count)` pairs.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        KINDS.iter().copied().zip(self.by_kind.iter().copied())
    }
}

pub fn statement_counts() -> StatementCounts {
    let mut by_kind = [0; 5];
    for (out, c) in by_kind.iter_mut().zip(COUNTS.iter()) {
        *out = c.load(Ordering::Relaxed);
    }
    StatementCounts { by_kind }
}

fn kind_of(sql: &str) -> usize {
    let verb = sql
        .trim_start()
        .split(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or_default();
    KINDS
        .iter()
        .take(4)
        .position(|k| verb.eq_ignore_ascii_case(k))
        .unwrap_or(4)
}

/// The metric callback of every pool.
pub(crate) fn record(info: &sea_orm::metric::Info<'_>) {
    COUNTS[kind_of(&info.statement.sql)].fetch_add(1, Ordering::Relaxed);
    tracing::trace!(
        target: "agentry_store::sql",
        elapsed_us = u64::try_from(info.elapsed.as_micros()).unwrap_or(u64::MAX),
        failed = info.failed,
        "{}",
        info.statement.sql
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_counted_by_their_verb() {
        assert_eq!(kind_of("SELECT 1"), 0);
        assert_eq!(kind_of("  insert INTO t VALUES (1)"), 1);
        assert_eq!(kind_of("UPDATE \"t\" SET a = 1"), 2);
        assert_eq!(kind_of("DELETE FROM t"), 3);
        assert_eq!(kind_of("WITH x AS (SELECT 1) SELECT * FROM x"), 4);
        assert_eq!(kind_of(""), 4);
    }
}
