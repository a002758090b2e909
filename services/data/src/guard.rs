//! The first of `run_sql`'s three read-only layers: the statement is parsed (`sqlparser`, in
//! the data source's dialect) and only exactly one `SELECT`, `WITH … SELECT`, `VALUES` or
//! `EXPLAIN` of one passes — no statement of another kind anywhere inside it (a data-modifying
//! `WITH x AS (DELETE … RETURNING …)`), no `SELECT … INTO`, no `FOR UPDATE`/`FOR SHARE`.
//!
//! What this layer cannot see — a function with side effects (`SELECT nextval('s')`, a
//! user-defined function that inserts) — is refused by the next layer, the read-only
//! transaction every statement runs in (`exec`), whose work is rolled back in any case.

use std::ops::ControlFlow;

use sqlparser::ast::{Query, Select, Statement, Visit, Visitor};
use sqlparser::dialect::{Dialect, MySqlDialect, PostgreSqlDialect, SQLiteDialect};
use sqlparser::parser::Parser;

use crate::error::{DataError, Result};
use crate::source::Engine;

/// What passed: a query, or an `EXPLAIN` of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    Query,
    Explain,
}

fn dialect(engine: Engine) -> Box<dyn Dialect> {
    match engine {
        Engine::Postgres => Box::new(PostgreSqlDialect {}),
        Engine::Mysql => Box::new(MySqlDialect {}),
        Engine::Sqlite => Box::new(SQLiteDialect {}),
    }
}

fn refused(why: impl Into<String>) -> DataError {
    DataError::Refused(format!(
        "{}; run_sql runs one read-only SELECT (or WITH … SELECT, or EXPLAIN of one)",
        why.into()
    ))
}

/// A statement's kind in a message: its first words (`INSERT`, `DROP TABLE`, …).
fn kind_of(s: &Statement) -> String {
    let text = s.to_string();
    let words: Vec<&str> = text.split_whitespace().take(2).collect();
    match words.as_slice() {
        [first, second]
            if matches!(
                first.to_ascii_uppercase().as_str(),
                "CREATE" | "DROP" | "ALTER" | "TRUNCATE" | "GRANT" | "REVOKE"
            ) =>
        {
            format!(
                "{} {}",
                first.to_ascii_uppercase(),
                second.to_ascii_uppercase()
            )
        }
        [first, ..] => first.to_ascii_uppercase(),
        [] => "an empty statement".into(),
    }
}

struct ReadOnly;

impl Visitor for ReadOnly {
    type Break = DataError;

    fn pre_visit_statement(&mut self, s: &Statement) -> ControlFlow<DataError> {
        match s {
            Statement::Query(_) | Statement::Explain { .. } => ControlFlow::Continue(()),
            other => ControlFlow::Break(refused(format!(
                "a {} statement is not read-only",
                kind_of(other)
            ))),
        }
    }

    fn pre_visit_query(&mut self, q: &Query) -> ControlFlow<DataError> {
        if !q.locks.is_empty() {
            return ControlFlow::Break(refused(
                "FOR UPDATE / FOR SHARE locks rows, which a read-only query may not",
            ));
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, s: &Select) -> ControlFlow<DataError> {
        if s.into.is_some() {
            return ControlFlow::Break(refused("SELECT … INTO creates a table"));
        }
        ControlFlow::Continue(())
    }
}

/// Check that `sql` is exactly one read-only statement in `engine`'s dialect.
pub fn check(sql: &str, engine: Engine) -> Result<Checked> {
    let trimmed = sql.trim();
    if trimmed.is_empty() {
        return Err(DataError::Invalid("`sql` is empty".into()));
    }
    let statements = Parser::parse_sql(&*dialect(engine), trimmed).map_err(|e| {
        refused(format!(
            "the statement could not be parsed as {} SQL ({e})",
            engine.as_str()
        ))
    })?;
    let statement = match statements.as_slice() {
        [one] => one,
        [] => return Err(DataError::Invalid("`sql` holds no statement".into())),
        many => {
            return Err(refused(format!(
                "{} statements were given; send one at a time",
                many.len()
            )));
        }
    };
    if let ControlFlow::Break(e) = statement.visit(&mut ReadOnly) {
        return Err(e);
    }
    match statement {
        Statement::Query(_) => Ok(Checked::Query),
        Statement::Explain { statement, .. } if matches!(**statement, Statement::Query(_)) => {
            Ok(Checked::Explain)
        }
        other => Err(refused(format!(
            "a {} statement is not read-only",
            kind_of(other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_read_only_query_passes() {
        for engine in [Engine::Postgres, Engine::Mysql, Engine::Sqlite] {
            for ok in [
                "SELECT 1",
                "select region, sum(amount) from sales group by region order by 2 desc",
                "WITH t AS (SELECT 1 AS x) SELECT x FROM t",
                "SELECT * FROM (SELECT 1) AS s UNION ALL SELECT 2",
                "EXPLAIN SELECT * FROM sales",
                "SELECT 1;",
            ] {
                assert!(
                    check(ok, engine).is_ok(),
                    "{engine:?} {ok}: {:?}",
                    check(ok, engine)
                );
            }
            for (bad, why) in [
                ("INSERT INTO sales VALUES (1)", "INSERT"),
                ("UPDATE sales SET amount = 0", "UPDATE"),
                ("DELETE FROM sales", "DELETE"),
                ("DROP TABLE sales", "DROP TABLE"),
                ("SELECT 1; DROP TABLE sales", "2 statements"),
                ("SELECT 1; SELECT 2", "2 statements"),
                ("EXPLAIN DELETE FROM sales", "DELETE"),
                ("CREATE TABLE x (a int)", "CREATE TABLE"),
                ("", "empty"),
            ] {
                let e = check(bad, engine).unwrap_err().to_string();
                assert!(e.contains(why), "{engine:?} {bad}: {e}");
            }
        }
        // Dialect features each database has.
        for (bad, why) in [
            ("SELECT * FROM sales FOR UPDATE", "FOR UPDATE"),
            ("SELECT * FROM sales FOR SHARE", "FOR UPDATE"),
            ("SELECT * INTO copy FROM sales", "INTO"),
            (
                "WITH gone AS (DELETE FROM sales RETURNING *) SELECT * FROM gone",
                "DELETE",
            ),
            ("COPY sales TO '/tmp/x'", "COPY"),
            ("SET default_transaction_read_only = off", "SET"),
            ("BEGIN", "BEGIN"),
        ] {
            let e = check(bad, Engine::Postgres).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let e = check("SELECT * FROM sales FOR UPDATE", Engine::Mysql)
            .unwrap_err()
            .to_string();
        assert!(e.contains("FOR UPDATE"), "{e}");
        // What the parser lets through for the next layer: a function with side effects.
        assert_eq!(
            check("SELECT nextval('s')", Engine::Postgres).unwrap(),
            Checked::Query
        );
    }
}
