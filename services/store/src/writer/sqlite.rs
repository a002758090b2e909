//! The SQLite writer's connection: sea-orm statements executed by `rusqlite` on the writer's
//! own thread.
//!
//! Through sqlx, each statement on a SQLite connection is handed to that connection's worker
//! thread and its answer handed back: two thread switches per statement, and a run writes a
//! dozen. The writer already runs on a thread of its own, so here it executes the statements
//! itself: the jobs keep their sea-orm code (they get a [`DatabaseTransaction`] as before), the
//! connection under it is a sea-orm connection ([`Rows`]) whose `query`/`execute` run the
//! statement on a `rusqlite` connection, synchronously, on the calling (writer) thread.
//!
//! What the proxy must do as sqlx did, so that rows written here read back the same through
//! the pool (which stays on sqlx):
//! - bind values as sqlx encodes them: UUIDs as 16-byte blobs, timestamps as RFC 3339 text,
//!   JSON as its text, booleans as 0/1 ([`bind`]);
//! - decode a row's values into the exact `sea_query::Value` variant the entity's field reads
//!   (sea-orm's mock rows convert strictly: an `i64` field does not read a `Value::Int`). The
//!   origin table and column of each result column (SQLite's column metadata) name the
//!   entity column, whose type is known ([`Kind`]); a computed column goes by what SQLite
//!   returned;
//! - report errors so the store classifies them as before: a constraint violation keeps its
//!   SQLite extended code ([`constraint_code`]), a busy database or an I/O failure is
//!   "database unavailable" (503).
//!
//! Transactions are the writer's: `BEGIN IMMEDIATE` / `COMMIT` / `ROLLBACK` are issued here by
//! [`SqliteWriter`] around a batch, and the connection's own begin/commit (which cannot report
//! an error) do nothing.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags, ffi};
use sea_orm::sea_query::Value;
use sea_orm::{
    ColumnTrait, ColumnType, DbBackend, DbErr, EntityTrait, ExecResult, IdenStatic, Iterable,
    MockDatabase, MockDatabaseTrait, MockExecResult, QueryResult, RuntimeErr, Statement,
    Transaction,
};

/// Prepared statements kept per connection: the write path has a few dozen distinct ones.
const STATEMENT_CACHE: usize = 256;

/// The prefix of a constraint violation's message (see [`constraint_code`]).
const CONSTRAINT: &str = "sqlite constraint ";

/// The writer's connection and what it knows of the schema.
pub(crate) struct SqliteWriter {
    conn: Mutex<Connection>,
}

impl std::fmt::Debug for SqliteWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqliteWriter")
    }
}

impl SqliteWriter {
    /// Open the database file the pool uses, with the pool's settings (WAL, `synchronous =
    /// NORMAL`, foreign keys, a busy timeout for other processes such as the admin CLI).
    pub(crate) fn open(path: &Path) -> Result<SqliteWriter, DbErr> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI,
        )
        .map_err(|e| conn_err(&e))?;
        conn.busy_timeout(Duration::from_secs(30))
            .map_err(|e| conn_err(&e))?;
        // No checkpoint inside a commit: the [`Checkpointer`]'s thread does them (see there).
        // Temporary structures in memory: a multi-row insert inside the writer's group commit
        // keeps a statement journal (the pages it changed, to undo that one statement), and
        // SQLite spills one past 64 KiB into a temporary file it creates, writes and deletes —
        // the bench's strace showed that file made and unlinked every few runs, a twentieth of
        // the writer's `pwrite`s. In memory it is a copy; what it holds is bounded by a batch.
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
             PRAGMA wal_autocheckpoint = 0; PRAGMA temp_store = MEMORY;",
        )
        .map_err(|e| conn_err(&e))?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        // The query planner stability guarantee: a cached statement keeps its plan whatever
        // its parameters. Without it SQLite marks a statement whose plan read a bound value
        // (a `LIMIT ?`, which every sea-orm query with a limit binds) to be compiled again at
        // its next step after any new binding — the run's history read was parsed and planned
        // anew on every run, 2.7% of the server's CPU (a profile of the 10-client bench). The
        // plans cannot depend on the values anyway: no `ANALYZE` statistics are kept.
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )
        .map_err(|e| conn_err(&e))?;
        Ok(SqliteWriter {
            conn: Mutex::new(conn),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `BEGIN IMMEDIATE`: the write lock now, not at the first write (another process holding
    /// it is waited for up to the busy timeout, then the batch is "unavailable").
    pub(crate) fn begin(&self) -> Result<(), DbErr> {
        self.batch("BEGIN IMMEDIATE")
    }

    pub(crate) fn commit(&self) -> Result<(), DbErr> {
        let res = self.batch("COMMIT");
        if res.is_err() {
            // A failed COMMIT may leave the transaction open (SQLITE_BUSY): end it.
            let _ = self.rollback();
        }
        res
    }

    pub(crate) fn rollback(&self) -> Result<(), DbErr> {
        let conn = self.lock();
        if conn.is_autocommit() {
            return Ok(());
        }
        conn.execute_batch("ROLLBACK").map_err(|e| exec_err(&e))
    }

    fn batch(&self, sql: &str) -> Result<(), DbErr> {
        self.lock().execute_batch(sql).map_err(|e| exec_err(&e))
    }

    fn run_query(&self, st: &Statement) -> Result<Vec<BTreeMap<String, Value>>, DbErr> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(&st.sql).map_err(|e| exec_err(&e))?;
        bind_all(&mut stmt, st)?;
        let kinds: Vec<(String, Option<Kind>)> = stmt
            .columns_with_metadata()
            .iter()
            .map(|c| {
                let kind = match (c.table_name(), c.origin_name()) {
                    (Some(t), Some(col)) => registry().get(&(t, col)).copied(),
                    _ => None,
                };
                (c.name().to_string(), kind)
            })
            .collect();
        let mut rows = stmt.raw_query();
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| exec_err(&e))? {
            let mut values = BTreeMap::new();
            for (i, (name, kind)) in kinds.iter().enumerate() {
                let v = row.get_ref(i).map_err(|e| exec_err(&e))?;
                values.insert(name.clone(), decode(v, *kind, name)?);
            }
            out.push(values);
        }
        Ok(out)
    }

    fn run_execute(&self, st: &Statement) -> Result<MockExecResult, DbErr> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(&st.sql).map_err(|e| exec_err(&e))?;
        bind_all(&mut stmt, st)?;
        let changed = stmt.raw_execute().map_err(|e| exec_err(&e))?;
        Ok(MockExecResult {
            last_insert_id: u64::try_from(conn.last_insert_rowid()).unwrap_or(0),
            rows_affected: changed as u64,
        })
    }
}

/// The sea-orm connection over the writer's connection. sea-orm's `proxy` connection would be
/// the natural fit, but in sea-orm 2.0.4 it does not build beside the sqlx drivers; its `mock`
/// connection takes any [`MockDatabaseTrait`] and turns rows into results through a
/// [`MockDatabase`], which is used here for exactly that: one per statement, holding that
/// statement's result, dropped with it.
#[derive(Debug)]
pub(crate) struct Rows(pub(crate) Arc<SqliteWriter>);

impl MockDatabaseTrait for Rows {
    fn execute(&mut self, _: usize, statement: Statement) -> Result<ExecResult, DbErr> {
        let start = Instant::now();
        let res = self.0.run_execute(&statement);
        count(&statement, start, res.is_err());
        MockDatabase::new(DbBackend::Sqlite)
            .append_exec_results([res?])
            .execute(0, statement)
    }

    fn query(&mut self, _: usize, statement: Statement) -> Result<Vec<QueryResult>, DbErr> {
        let start = Instant::now();
        let res = self.0.run_query(&statement);
        count(&statement, start, res.is_err());
        MockDatabase::new(DbBackend::Sqlite)
            .append_query_results([res?])
            .query(0, statement)
    }

    /// The writer issues `BEGIN`/`COMMIT`/`ROLLBACK` itself ([`SqliteWriter::begin`]).
    fn begin(&mut self) {}

    fn commit(&mut self) {}

    fn rollback(&mut self) {}

    fn drain_transaction_log(&mut self) -> Vec<Transaction> {
        Vec::new()
    }

    fn get_database_backend(&self) -> DbBackend {
        DbBackend::Sqlite
    }

    fn ping(&self) -> Result<(), DbErr> {
        Ok(())
    }
}

/// The statement counts and the trace log, as for the pools.
fn count(statement: &Statement, start: Instant, failed: bool) {
    crate::stats::record(&sea_orm::metric::Info {
        elapsed: start.elapsed(),
        statement,
        failed,
    });
}

fn bind_all(stmt: &mut rusqlite::CachedStatement<'_>, st: &Statement) -> Result<(), DbErr> {
    stmt.clear_bindings();
    if let Some(values) = &st.values {
        for (i, v) in values.0.iter().enumerate() {
            stmt.raw_bind_parameter(i + 1, Bound(v))
                .map_err(|e| exec_err(&e))?;
        }
    }
    Ok(())
}

/// A value bound as sqlx-sqlite encodes it.
struct Bound<'a>(&'a Value);

impl rusqlite::ToSql for Bound<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        bind(self.0)
    }
}

fn bind(v: &Value) -> rusqlite::Result<ToSqlOutput<'_>> {
    use rusqlite::types::Value as Owned;
    const NULL: ToSqlOutput<'static> = ToSqlOutput::Borrowed(ValueRef::Null);
    fn int<T: Into<i64> + Copy>(v: &Option<T>) -> ToSqlOutput<'static> {
        v.map_or(NULL, |x| ToSqlOutput::Owned(Owned::Integer(x.into())))
    }
    Ok(match v {
        Value::Bool(b) => int(&b.map(i64::from)),
        Value::TinyInt(i) => int(i),
        Value::SmallInt(i) => int(i),
        Value::Int(i) => int(i),
        Value::BigInt(i) => int(i),
        Value::TinyUnsigned(i) => int(i),
        Value::SmallUnsigned(i) => int(i),
        Value::Unsigned(i) => int(i),
        Value::BigUnsigned(i) => match i {
            None => NULL,
            Some(u) => ToSqlOutput::Owned(Owned::Integer(i64::try_from(*u).map_err(|_| {
                rusqlite::Error::ToSqlConversionFailure("an unsigned value past i64".into())
            })?)),
        },
        Value::Float(f) => f.map_or(NULL, |x| ToSqlOutput::Owned(Owned::Real(f64::from(x)))),
        Value::Double(f) => f.map_or(NULL, |x| ToSqlOutput::Owned(Owned::Real(x))),
        Value::String(s) => s.as_deref().map_or(NULL, |s| {
            ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes()))
        }),
        Value::Char(c) => c.map_or(NULL, |c| ToSqlOutput::Owned(Owned::Text(c.to_string()))),
        Value::Bytes(b) => b
            .as_deref()
            .map_or(NULL, |b| ToSqlOutput::Borrowed(ValueRef::Blob(b))),
        Value::Json(j) => match j {
            None => NULL,
            Some(j) => ToSqlOutput::Owned(Owned::Text(
                serde_json::to_string(&**j)
                    .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?,
            )),
        },
        Value::ChronoDateTimeUtc(t) => t.map_or(NULL, |t| {
            ToSqlOutput::Owned(Owned::Text(
                t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false),
            ))
        }),
        Value::ChronoDateTimeWithTimeZone(t) => t.map_or(NULL, |t| {
            ToSqlOutput::Owned(Owned::Text(
                t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false),
            ))
        }),
        Value::ChronoDateTime(t) => t.map_or(NULL, |t| {
            ToSqlOutput::Owned(Owned::Text(t.format("%F %T%.f").to_string()))
        }),
        Value::ChronoDate(d) => d.map_or(NULL, |d| {
            ToSqlOutput::Owned(Owned::Text(d.format("%F").to_string()))
        }),
        Value::ChronoTime(t) => t.map_or(NULL, |t| {
            ToSqlOutput::Owned(Owned::Text(t.format("%T%.f").to_string()))
        }),
        Value::Uuid(u) => u.as_ref().map_or(NULL, |u| {
            ToSqlOutput::Owned(Owned::Blob(u.as_bytes().to_vec()))
        }),
        other => {
            return Err(rusqlite::Error::ToSqlConversionFailure(
                format!("the SQLite writer does not bind {other:?}").into(),
            ));
        }
    })
}

/// The `Value` variant an entity column's field reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Bool,
    Int,
    BigInt,
    Double,
    String,
    Bytes,
    Json,
    Uuid,
    DateTimeUtc,
}

impl Kind {
    fn of(t: &ColumnType) -> Option<Kind> {
        Some(match t {
            ColumnType::Boolean => Kind::Bool,
            ColumnType::Integer | ColumnType::SmallInteger | ColumnType::TinyInteger => Kind::Int,
            ColumnType::BigInteger => Kind::BigInt,
            ColumnType::Double | ColumnType::Float | ColumnType::Decimal(_) => Kind::Double,
            ColumnType::String(_) | ColumnType::Text | ColumnType::Char(_) => Kind::String,
            ColumnType::Binary(_) | ColumnType::VarBinary(_) | ColumnType::Blob => Kind::Bytes,
            ColumnType::Json | ColumnType::JsonBinary => Kind::Json,
            ColumnType::Uuid => Kind::Uuid,
            ColumnType::TimestampWithTimeZone | ColumnType::Timestamp | ColumnType::DateTime => {
                Kind::DateTimeUtc
            }
            _ => return None,
        })
    }

    fn null(self) -> Value {
        match self {
            Kind::Bool => Value::Bool(None),
            Kind::Int => Value::Int(None),
            Kind::BigInt => Value::BigInt(None),
            Kind::Double => Value::Double(None),
            Kind::String => Value::String(None),
            Kind::Bytes => Value::Bytes(None),
            Kind::Json => Value::Json(None),
            Kind::Uuid => Value::Uuid(None),
            Kind::DateTimeUtc => Value::ChronoDateTimeUtc(None),
        }
    }
}

type Registry = HashMap<(&'static str, &'static str), Kind>;

fn add<E: EntityTrait>(r: &mut Registry) {
    let table = E::default().table_name();
    for col in E::Column::iter() {
        if let Some(kind) = Kind::of(col.def().get_column_type()) {
            r.insert((table, col.as_str()), kind);
        }
    }
}

/// Every table's columns and the `Value` variant each reads.
pub(crate) fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        use agentry_schema::entities::*;
        let mut r = Registry::new();
        add::<api_key::Entity>(&mut r);
        add::<approval::Entity>(&mut r);
        add::<assistant::Entity>(&mut r);
        add::<checkpoint::Entity>(&mut r);
        add::<data_source::Entity>(&mut r);
        add::<execution::Entity>(&mut r);
        add::<mcp_oauth_state::Entity>(&mut r);
        add::<mcp_oauth_token::Entity>(&mut r);
        add::<mcp_server::Entity>(&mut r);
        add::<membership::Entity>(&mut r);
        add::<memory::Entity>(&mut r);
        add::<message::Entity>(&mut r);
        add::<model_connection::Entity>(&mut r);
        add::<platform_admin_key::Entity>(&mut r);
        add::<profile::Entity>(&mut r);
        add::<server_lease::Entity>(&mut r);
        add::<session::Entity>(&mut r);
        add::<session_event::Entity>(&mut r);
        add::<skill::Entity>(&mut r);
        add::<skill_file::Entity>(&mut r);
        add::<tenant::Entity>(&mut r);
        add::<tool_call_log::Entity>(&mut r);
        add::<user::Entity>(&mut r);
        r
    })
}

/// A column's value as the `Value` variant its field reads (`kind`), or, for a computed
/// column, as what SQLite returned (integers as `i64`).
fn decode(v: ValueRef<'_>, kind: Option<Kind>, col: &str) -> Result<Value, DbErr> {
    let bad = |what: &str| {
        DbErr::Type(format!(
            "column {col}: a {what} stored where {kind:?} was expected"
        ))
    };
    let Some(kind) = kind else {
        return Ok(match v {
            ValueRef::Null => Value::BigInt(None),
            ValueRef::Integer(i) => Value::BigInt(Some(i)),
            ValueRef::Real(f) => Value::Double(Some(f)),
            ValueRef::Text(t) => Value::String(Some(text(t, col)?.to_string())),
            ValueRef::Blob(b) => Value::Bytes(Some(b.to_vec())),
        });
    };
    if let ValueRef::Null = v {
        return Ok(kind.null());
    }
    Ok(match kind {
        Kind::Bool => match v {
            ValueRef::Integer(i) => Value::Bool(Some(i != 0)),
            _ => return Err(bad("non-integer")),
        },
        Kind::Int => match v {
            ValueRef::Integer(i) => {
                Value::Int(Some(i32::try_from(i).map_err(|_| bad("value past i32"))?))
            }
            _ => return Err(bad("non-integer")),
        },
        Kind::BigInt => match v {
            ValueRef::Integer(i) => Value::BigInt(Some(i)),
            _ => return Err(bad("non-integer")),
        },
        Kind::Double => match v {
            ValueRef::Real(f) => Value::Double(Some(f)),
            #[allow(clippy::cast_precision_loss)]
            ValueRef::Integer(i) => Value::Double(Some(i as f64)),
            _ => return Err(bad("non-number")),
        },
        Kind::String => match v {
            ValueRef::Text(t) => Value::String(Some(text(t, col)?.to_string())),
            _ => return Err(bad("non-text")),
        },
        Kind::Bytes => match v {
            ValueRef::Blob(b) | ValueRef::Text(b) => Value::Bytes(Some(b.to_vec())),
            _ => return Err(bad("non-blob")),
        },
        Kind::Json => match v {
            ValueRef::Text(t) | ValueRef::Blob(t) => Value::Json(Some(Box::new(
                serde_json::from_slice(t).map_err(|e| bad(&format!("invalid JSON ({e})")))?,
            ))),
            _ => return Err(bad("non-text")),
        },
        Kind::Uuid => match v {
            ValueRef::Blob(b) => Value::Uuid(Some(
                uuid::Uuid::from_slice(b).map_err(|_| bad("blob that is no UUID"))?,
            )),
            ValueRef::Text(t) => Value::Uuid(Some(
                uuid::Uuid::parse_str(text(t, col)?).map_err(|_| bad("text that is no UUID"))?,
            )),
            _ => return Err(bad("non-blob")),
        },
        Kind::DateTimeUtc => Value::ChronoDateTimeUtc(Some(match v {
            ValueRef::Text(t) => datetime(text(t, col)?).ok_or_else(|| bad("non-timestamp"))?,
            ValueRef::Integer(i) => chrono::DateTime::from_timestamp(i, 0)
                .ok_or_else(|| bad("timestamp out of range"))?,
            _ => return Err(bad("non-timestamp")),
        })),
    })
}

fn text<'a>(t: &'a [u8], col: &str) -> Result<&'a str, DbErr> {
    std::str::from_utf8(t).map_err(|_| DbErr::Type(format!("column {col}: text not UTF-8")))
}

/// A timestamp as sqlx-sqlite reads one: RFC 3339, or one of SQLite's own text forms (UTC).
fn datetime(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    use chrono::{DateTime, NaiveDateTime, Utc};
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    const FORMATS: [&str; 12] = [
        "%F %T%.f",
        "%F %R",
        "%F %RZ",
        "%F %R%:z",
        "%F %T%.fZ",
        "%F %T%.f%:z",
        "%FT%R",
        "%FT%RZ",
        "%FT%R%:z",
        "%FT%T%.f",
        "%FT%T%.fZ",
        "%FT%T%.f%:z",
    ];
    FORMATS.iter().find_map(|f| {
        DateTime::parse_from_str(s, f)
            .map(|t| t.with_timezone(&Utc))
            .ok()
            .or_else(|| {
                NaiveDateTime::parse_from_str(s, f)
                    .ok()
                    .map(|n| n.and_utc())
            })
    })
}

/// A failed statement as the store classifies it (see [`crate::database_unreachable`] and
/// [`constraint_code`]).
/// Copies the write-ahead log back into the database file on a thread of its own, ten times a
/// second (and when the writer stops).
///
/// SQLite's default is to checkpoint inside the commit that takes the log past 1000 pages.
/// With every run writing through one connection, that was one commit in every twenty-odd
/// runs, on the writer's thread, holding every queued write behind a copy of the hot pages
/// and two `fsync`s (5% of the server's CPU at ten clients, and the slowest commits). Here the
/// writer and the pool's connections never checkpoint (`wal_autocheckpoint = 0`); this thread
/// runs a `PASSIVE` checkpoint, which neither waits for nor blocks readers and writers (a
/// `FULL` or `RESTART` one holds the write lock while it copies), so a page written many times
/// in a tenth of a second is copied once, and a checkpoint is a short burst of work rather than
/// a long one that takes a core away from the runs (measured at once a second: a 30 ms burst,
/// and the p99 with it). Once a checkpoint has copied everything, the next write starts the log
/// over. Durability is unchanged: a commit is in the log (and survives a crash of the process)
/// the moment it is acknowledged; the checkpoint only moves it. When the log has grown past
/// [`WAL_RESTART_PAGES`] anyway (readers kept it from being reused), a `RESTART` checkpoint
/// that does not wait (no busy timeout: it gives up at once if a reader is in the way) starts
/// it over, and `journal_size_limit` trims the file.
pub(crate) struct Checkpointer {
    stop: std::sync::mpsc::Sender<()>,
}

/// How often the checkpointer runs.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);
/// A log this long (pages) is restarted, not only copied back (about 64 MiB at 4 KiB pages).
const WAL_RESTART_PAGES: i64 = 16_384;

impl Checkpointer {
    /// Start the checkpointer of the database file at `path`; it stops (after a last
    /// checkpoint) when the returned value is dropped.
    pub(crate) fn start(path: &Path) -> Result<Checkpointer, DbErr> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI,
        )
        .map_err(|e| conn_err(&e))?;
        conn.busy_timeout(Duration::ZERO)
            .map_err(|e| conn_err(&e))?;
        conn.execute_batch("PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = 67108864;")
            .map_err(|e| conn_err(&e))?;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("agentry-checkpoint".into())
            .spawn(move || {
                loop {
                    let last = !matches!(
                        stopped.recv_timeout(CHECKPOINT_EVERY),
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                    );
                    checkpoint(&conn);
                    if last {
                        return;
                    }
                }
            })
            .map_err(|e| DbErr::Custom(format!("starting the checkpointer: {e}")))?;
        Ok(Checkpointer { stop })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let _ = self.stop.send(());
    }
}

/// One checkpoint; a failure is logged and the next one tries again.
fn checkpoint(conn: &Connection) {
    let passive = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
    });
    match passive {
        Ok((log, _)) if log > WAL_RESTART_PAGES => {
            if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(())) {
                tracing::debug!(error = %e, pages = log, "the SQLite log could not start over (a reader is in it); next time");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "checkpointing the SQLite log failed; will retry"),
    }
}

fn exec_err(e: &rusqlite::Error) -> DbErr {
    if let rusqlite::Error::SqliteFailure(f, msg) = e {
        let msg = msg.clone().unwrap_or_else(|| f.to_string());
        return match f.code {
            ffi::ErrorCode::ConstraintViolation => DbErr::Exec(RuntimeErr::Internal(format!(
                "{CONSTRAINT}{}: {msg}",
                f.extended_code
            ))),
            ffi::ErrorCode::DatabaseBusy | ffi::ErrorCode::DatabaseLocked => {
                DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::Timeout)
            }
            ffi::ErrorCode::SystemIoFailure
            | ffi::ErrorCode::CannotOpen
            | ffi::ErrorCode::DiskFull
            | ffi::ErrorCode::ReadOnly
            | ffi::ErrorCode::PermissionDenied
            | ffi::ErrorCode::FileLockingProtocolFailed => {
                DbErr::Conn(RuntimeErr::Internal(format!("SQLite: {msg}")))
            }
            _ => DbErr::Exec(RuntimeErr::Internal(format!("SQLite: {msg}"))),
        };
    }
    DbErr::Exec(RuntimeErr::Internal(format!("SQLite: {e}")))
}

fn conn_err(e: &rusqlite::Error) -> DbErr {
    DbErr::Conn(RuntimeErr::Internal(format!(
        "opening the SQLite writer's connection: {e}"
    )))
}

/// The SQLite extended result code of a constraint violation reported by this writer (2067
/// unique, 1555 primary key, 787 foreign key), which sea-orm's own `sql_err` cannot see in an
/// error of this connection.
pub(crate) fn constraint_code(e: &DbErr) -> Option<i32> {
    let (DbErr::Exec(RuntimeErr::Internal(m)) | DbErr::Query(RuntimeErr::Internal(m))) = e else {
        return None;
    };
    m.strip_prefix(CONSTRAINT)?.split(':').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use rusqlite::StatementStatus;

    use super::SqliteWriter;

    /// A statement inside the writer's transaction that changes more than 64 KiB of existing
    /// pages keeps its statement journal in memory: without `temp_store = MEMORY` SQLite spills
    /// it into a temporary file (created, written and deleted at each such batch), which is
    /// open — as `(deleted)` — until the transaction ends.
    #[test]
    fn a_big_statement_in_a_batch_keeps_its_journal_in_memory() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let w = SqliteWriter::open(&dir.path().join("w.db")).expect("open");
        let conn = w.lock();
        conn.execute_batch(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL); \
             WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000) \
             INSERT INTO t (v) SELECT printf('%0200d', x) FROM c;",
        )
        .expect("schema");
        conn.execute_batch("BEGIN IMMEDIATE; UPDATE t SET v = v || 'x';")
            .expect("a statement journal's worth of changes");
        let temporary: Vec<String> = std::fs::read_dir("/proc/self/fd")
            .expect("this process's descriptors")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .map(|p| p.display().to_string())
            .filter(|p| p.contains("etilqs"))
            .collect();
        conn.execute_batch("COMMIT").expect("commit");
        assert!(temporary.is_empty(), "SQLite spilled to {temporary:?}");
    }

    /// A cached statement with `LIMIT ?`, run again with its parameters bound anew (as each
    /// sea-orm execution binds them), is not compiled again: the planner's stability guarantee
    /// is on. Without it SQLite re-prepared it at every step after a new binding.
    #[test]
    fn a_cached_statement_with_a_bound_limit_is_not_prepared_again() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let w = SqliteWriter::open(&dir.path().join("w.db")).expect("open");
        let conn = w.lock();
        conn.execute_batch(
            "CREATE TABLE m (id INTEGER PRIMARY KEY, s INTEGER NOT NULL); \
             CREATE INDEX ix_m_s_id ON m (s, id); \
             INSERT INTO m (s) VALUES (1), (1), (2);",
        )
        .expect("schema");
        let sql = "SELECT id FROM m WHERE s = ? AND id > ? ORDER BY id DESC LIMIT ?";
        for round in 0..5_i64 {
            let mut stmt = conn.prepare_cached(sql).expect("prepare");
            let ids: Vec<i64> = stmt
                .query_map((1_i64, round % 2, 50_i64), |r| r.get(0))
                .expect("query")
                .collect::<Result<_, _>>()
                .expect("rows");
            assert!(!ids.is_empty());
            assert_eq!(
                stmt.get_status(StatementStatus::RePrepare),
                0,
                "round {round}: the statement was compiled again"
            );
        }
    }
}
