//! Running read-only SQL on a data source: the second and third layers of `run_sql`.
//!
//! Every statement runs on a fresh connection (no state carries over from one call to the
//! next), inside a transaction the database itself keeps read-only, which is rolled back
//! afterwards whatever happened:
//!
//! | engine | read-only | timeout |
//! |---|---|---|
//! | PostgreSQL | `BEGIN READ ONLY` | `SET LOCAL statement_timeout` |
//! | MySQL | `START TRANSACTION READ ONLY` | `SET SESSION max_execution_time` (ms) |
//! | MariaDB | `START TRANSACTION READ ONLY` | `SET SESSION max_statement_time` (s) |
//! | SQLite | the file opened read-only, `PRAGMA query_only` | an interrupt from the progress handler |
//!
//! Rows are read as a stream and the reading stops at `max_rows` or once the rows' JSON
//! passes `max_bytes`, with `truncated` set. A timer around it all (the timeout plus a few
//! seconds) drops the connection if the database does not stop the statement itself.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use serde::Serialize;
use serde_json::Value;
use sqlx::{
    AssertSqlSafe, Column, ConnectOptions, Connection, Executor, Row, SqlSafeStr, Statement,
    TypeInfo,
};

use crate::error::{DataError, Result, connect_error, query_error};
use crate::source::{Engine, Target};
use crate::value;

/// How much one statement may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_rows: usize,
    pub max_bytes: usize,
    pub timeout: Duration,
    pub connect_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_rows: 1000,
            max_bytes: 1024 * 1024,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ColumnInfo {
    pub name: String,
    /// The database's name for the column's type (SQLite: its declared type, if any).
    #[serde(rename = "type")]
    pub type_name: String,
}

/// What a statement returned: its columns, its rows (each a list in column order), and whether
/// the rows were cut at a cap.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueryOutput {
    pub columns: Vec<ColumnInfo>,
    pub rows: Vec<Vec<Value>>,
    pub row_count: usize,
    pub truncated: bool,
    /// `rows` or `bytes`: which cap cut the result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated_by: Option<&'static str>,
    pub elapsed_ms: u64,
}

/// An open connection to a data source.
pub enum Conn {
    Postgres(sqlx::PgConnection),
    Mysql {
        conn: sqlx::MySqlConnection,
        mariadb: bool,
    },
    Sqlite(sqlx::SqliteConnection),
}

/// Connect to a checked target (see [`crate::source::SourceUrl::check`]).
pub async fn connect(target: &Target, limits: &Limits) -> Result<Conn> {
    let attempt = async {
        match target {
            Target::Server {
                engine: Engine::Postgres,
                url,
                addr,
            } => {
                let opts = sqlx::postgres::PgConnectOptions::from_str(url.as_str())
                    .map_err(|e| DataError::Invalid(format!("bad PostgreSQL URL: {e}")))?
                    .host(&addr.ip().to_string())
                    .port(addr.port())
                    .application_name("agentry-data")
                    .disable_statement_logging();
                Ok(Conn::Postgres(opts.connect().await.map_err(connect_error)?))
            }
            Target::Server { url, addr, .. } => {
                let mut u = url.clone();
                let _ = u.set_scheme("mysql");
                let opts = sqlx::mysql::MySqlConnectOptions::from_str(u.as_str())
                    .map_err(|e| DataError::Invalid(format!("bad MySQL URL: {e}")))?
                    .host(&addr.ip().to_string())
                    .port(addr.port())
                    .disable_statement_logging();
                let mut conn = opts.connect().await.map_err(connect_error)?;
                let version: String = sqlx::query_scalar("SELECT VERSION()")
                    .fetch_one(&mut conn)
                    .await
                    .map_err(query_error)?;
                Ok(Conn::Mysql {
                    conn,
                    mariadb: version.to_ascii_lowercase().contains("mariadb"),
                })
            }
            Target::Sqlite { file } => {
                // SQLite reads the file this process opened beneath the tenant's area (the
                // descriptor's /proc entry), never a path that could have changed since.
                use std::os::fd::AsRawFd;
                let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
                let opts = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(path)
                    .read_only(true)
                    .immutable(true)
                    .create_if_missing(false)
                    .pragma("query_only", "ON")
                    .disable_statement_logging();
                let conn = opts.connect().await.map_err(connect_error)?;
                Ok(Conn::Sqlite(conn))
            }
        }
    };
    tokio::time::timeout(limits.connect_timeout, attempt)
        .await
        .map_err(|_| {
            DataError::Unavailable(format!(
                "no connection within {}s",
                limits.connect_timeout.as_secs()
            ))
        })?
}

/// Whether a database error is the statement timeout stopping the statement.
fn timed_out(e: &DataError, engine: Engine) -> bool {
    let DataError::Query(m) = e else {
        return false;
    };
    let m = m.to_ascii_lowercase();
    match engine {
        Engine::Postgres => m.contains("statement timeout"),
        Engine::Mysql => {
            m.contains("maximum statement execution time") || m.contains("max_statement_time")
        }
        Engine::Sqlite => m.contains("interrupted"),
    }
}

/// The rows of `sql` on `conn`, read by [`collect`], with the columns named even when there
/// are no rows.
macro_rules! select {
    ($conn:expr, $sql:expr, $limits:expr, $to_json:path) => {{
        let mut out = collect(
            sqlx::query(AssertSqlSafe($sql.to_string())).fetch(&mut *$conn),
            $limits,
            $to_json,
        )
        .await;
        if let Ok(o) = &mut out
            && let Err(e) = described(&mut *$conn, $sql, o).await
        {
            tracing::debug!(error = %e, "describing the columns of an empty result");
        }
        out
    }};
}

impl Conn {
    pub fn engine(&self) -> Engine {
        match self {
            Conn::Postgres(_) => Engine::Postgres,
            Conn::Mysql { .. } => Engine::Mysql,
            Conn::Sqlite(_) => Engine::Sqlite,
        }
    }

    /// Run `sql` in a read-only transaction under the limits (it is not parsed here: see
    /// [`run_sql`] for all three layers).
    pub async fn query_read_only(&mut self, sql: &str, limits: &Limits) -> Result<QueryOutput> {
        let engine = self.engine();
        let started = Instant::now();
        let work = self.read_only(sql, limits);
        let out = match tokio::time::timeout(limits.timeout + Duration::from_secs(5), work).await {
            Ok(r) => r,
            Err(_) => return Err(DataError::Timeout(limits.timeout)),
        };
        match out {
            Err(e) if timed_out(&e, engine) => Err(DataError::Timeout(limits.timeout)),
            Err(e) => Err(e),
            Ok(mut o) => {
                o.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                Ok(o)
            }
        }
    }

    async fn read_only(&mut self, sql: &str, limits: &Limits) -> Result<QueryOutput> {
        let ms = u64::try_from(limits.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        match self {
            Conn::Postgres(conn) => {
                conn.execute(sqlx::raw_sql("BEGIN READ ONLY"))
                    .await
                    .map_err(query_error)?;
                conn.execute(sqlx::raw_sql(AssertSqlSafe(format!(
                    "SET LOCAL statement_timeout = {ms}"
                ))))
                .await
                .map_err(query_error)?;
                let out = select!(conn, sql, limits, value::pg);
                let _ = conn.execute(sqlx::raw_sql("ROLLBACK")).await;
                out
            }
            Conn::Mysql { conn, mariadb } => {
                let set = if *mariadb {
                    format!("SET SESSION max_statement_time = {}", ms as f64 / 1000.0)
                } else {
                    format!("SET SESSION max_execution_time = {ms}")
                };
                conn.execute(sqlx::raw_sql(AssertSqlSafe(set)))
                    .await
                    .map_err(query_error)?;
                conn.execute(sqlx::raw_sql("START TRANSACTION READ ONLY"))
                    .await
                    .map_err(query_error)?;
                let out = select!(conn, sql, limits, value::mysql);
                let _ = conn.execute(sqlx::raw_sql("ROLLBACK")).await;
                out
            }
            Conn::Sqlite(conn) => {
                let deadline = Instant::now() + limits.timeout;
                conn.lock_handle()
                    .await
                    .map_err(query_error)?
                    .set_progress_handler(10_000, move || Instant::now() < deadline);
                let out = select!(conn, sql, limits, value::sqlite);
                if let Ok(mut h) = conn.lock_handle().await {
                    h.remove_progress_handler();
                }
                out
            }
        }
    }

    pub async fn close(self) {
        let _ = match self {
            Conn::Postgres(c) => c.close().await,
            Conn::Mysql { conn, .. } => conn.close().await,
            Conn::Sqlite(c) => c.close().await,
        };
    }
}

/// The columns a statement would return, without running it (for a result with no rows).
async fn described<'c, E>(conn: E, sql: &str, out: &mut QueryOutput) -> Result<()>
where
    E: Executor<'c>,
{
    if out.columns.is_empty() {
        let st = conn
            .prepare(AssertSqlSafe(sql.to_string()).into_sql_str())
            .await
            .map_err(query_error)?;
        out.columns = st
            .columns()
            .iter()
            .map(|c| ColumnInfo {
                name: c.name().to_string(),
                type_name: c.type_info().name().to_string(),
            })
            .collect();
    }
    Ok(())
}

/// Read rows until the stream ends or a cap is reached.
async fn collect<R, S>(
    mut rows: S,
    limits: &Limits,
    to_json: fn(&R, usize) -> Value,
) -> Result<QueryOutput>
where
    R: Row,
    S: futures::Stream<Item = Result<R, sqlx::Error>> + Unpin,
{
    let mut columns: Option<Vec<ColumnInfo>> = None;
    let mut out = Vec::new();
    let mut bytes = 0usize;
    let mut truncated_by = None;
    while let Some(row) = rows.try_next().await.map_err(query_error)? {
        if columns.is_none() {
            columns = Some(column_infos(&row));
        }
        if out.len() >= limits.max_rows {
            truncated_by = Some("rows");
            break;
        }
        let values: Vec<Value> = (0..row.len()).map(|i| to_json(&row, i)).collect();
        bytes += serde_json::to_string(&values).map(|s| s.len()).unwrap_or(0);
        if bytes > limits.max_bytes {
            truncated_by = Some("bytes");
            break;
        }
        out.push(values);
    }
    drop(rows);
    let row_count = out.len();
    Ok(QueryOutput {
        columns: columns.unwrap_or_default(),
        rows: out,
        row_count,
        truncated: truncated_by.is_some(),
        truncated_by,
        elapsed_ms: 0,
    })
}

fn column_infos<R: Row>(row: &R) -> Vec<ColumnInfo> {
    row.columns()
        .iter()
        .map(|c| ColumnInfo {
            name: c.name().to_string(),
            type_name: c.type_info().name().to_string(),
        })
        .collect()
}

/// All three layers: parse (one read-only statement), connect, run it read-only under the
/// limits, close.
pub async fn run_sql(target: &Target, sql: &str, limits: &Limits) -> Result<QueryOutput> {
    crate::guard::check(sql, target.engine())?;
    let mut conn = connect(target, limits).await?;
    let out = conn.query_read_only(sql, limits).await;
    conn.close().await;
    out
}
