//! agentry-store: persistence for Agentry over sea-orm, on SQLite (the embedded default),
//! PostgreSQL and MySQL/MariaDB.
//!
//! Repositories are modules of free functions that take `&impl ConnectionTrait` (so callers can
//! pass a transaction) and a [`TenantScope`]: a query that forgets the tenant does not compile.
//! Entity models convert into the domain types defined here; request DTOs never reach entities.

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseBackend, DatabaseConnection, DbErr,
    RuntimeErr, SqlErr, Statement,
};
use sea_orm_migration::MigratorTrait;

use agentry_schema::error::ErrorCode;
use agentry_schema::ids::{TenantId, UserId};
use agentry_schema::migration::Migrator;
use agentry_schema::roles::{Grant, RoleName};
use agentry_schema::tenancy::Role;

pub mod a2a_push;
pub mod api_keys;
pub mod approvals;
pub mod assistants;
pub mod checkpoints;
pub mod coordination;
pub mod data_sources;
pub mod events;
pub mod executions;
pub mod mcp_oauth;
pub mod mcp_servers;
pub mod memories;
pub mod messages;
pub mod model_connections;
pub mod platform_admin_key;
pub mod profiles;
pub mod remote_agents;
pub mod retention;
pub mod run_writes;
pub mod server_lease;
pub mod sessions;
pub mod skills;
pub mod stats;
pub mod tenants;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tool_calls;
pub mod usage;
pub mod users;
pub mod webhooks;
pub mod writer;

pub use sea_orm::{DatabaseConnection as Db, TransactionTrait};

/// Proof that a caller acts inside one tenant. Every repository call takes one.
///
/// Outside this crate there are two ways to get one: from a loaded tenant
/// ([`tenants::Tenant::scope`], as the auth extractor and the actors do), or from an id with
/// [`PlatformScope::tenant`], which needs platform access in hand and so stands out in review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TenantScope {
    tenant_id: TenantId,
}

impl TenantScope {
    pub(crate) fn new(tenant_id: TenantId) -> Self {
        Self { tenant_id }
    }

    pub fn tenant_id(&self) -> TenantId {
        self.tenant_id
    }

    pub(crate) fn uuid(&self) -> uuid::Uuid {
        self.tenant_id.0
    }
}

/// Proof of platform-level access (the platform admin, start-up recovery, background sweeps):
/// the only scope that may read across tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlatformScope(());

impl PlatformScope {
    pub fn new() -> Self {
        Self(())
    }

    /// Act inside one tenant, known by id only (a background sweep, a tool told its tenant by
    /// the engine that runs it).
    pub fn tenant(&self, tenant_id: TenantId) -> TenantScope {
        TenantScope::new(tenant_id)
    }
}

impl Default for PlatformScope {
    fn default() -> Self {
        Self::new()
    }
}

/// The role stored as `text` (`memberships.role`, `api_keys.role`): `admin`, `member` or a
/// custom role's name; anything else is a bad row.
pub(crate) fn parse_role(text: &str) -> Result<Grant> {
    Grant::parse(text).ok_or_else(|| {
        StoreError::Invalid(format!(
            "role {text:?} is neither admin, member nor a custom role's name"
        ))
    })
}

/// A user acting inside a tenant with a role; narrows visibility for members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserScope {
    pub tenant: TenantScope,
    pub user_id: UserId,
    pub role: Role,
    /// The caller's custom role (then `role` is `Member`): its tool permissions and REST areas
    /// replace the member role's.
    pub custom_role: Option<RoleName>,
}

impl UserScope {
    /// The caller's role as one value (what a run records).
    pub fn grant(&self) -> Grant {
        Grant {
            role: self.role,
            custom: self.custom_role,
        }
    }

    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// The user whose rows a list should be limited to: `None` for admins (the whole tenant).
    pub fn visible_user(&self) -> Option<UserId> {
        if self.is_admin() {
            None
        } else {
            Some(self.user_id)
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("invalid value: {0}")]
    Invalid(String),
    /// A row that cannot be turned into a domain value (written by something else, or a bug).
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("database error: {0}")]
    Db(DbErr),
    /// Cluster mode: a write for a session carried a fencing token lower than the one stored
    /// for it: another replica owns the session now. Nothing was written.
    #[error(
        "session {session}: this write's fencing token {token} is older than the session's {current}; another replica owns the session now, so nothing was written"
    )]
    Fenced {
        session: String,
        token: i64,
        current: i64,
    },
}

/// What a concurrent change can make a statement fail with is the client's race, not a fault:
/// a row updated after another request deleted it is gone (404), a row that refers to one
/// deleted meanwhile, or a transaction the database aborted to break a deadlock, is a conflict
/// to retry (409). Everything else stays a database error.
impl From<DbErr> for StoreError {
    fn from(e: DbErr) -> Self {
        if matches!(e, DbErr::RecordNotUpdated | DbErr::RecordNotFound(_)) {
            return StoreError::NotFound("the record (deleted meanwhile)".into());
        }
        if matches!(sql_err(&e), Some(SqlErr::ForeignKeyConstraintViolation(_))) {
            return StoreError::Conflict(
                "something this change refers to was deleted meanwhile; reload and retry".into(),
            );
        }
        if concurrency_abort(&e) {
            return StoreError::Conflict(
                "a concurrent change got in the way; nothing was changed, retry".into(),
            );
        }
        StoreError::Db(e)
    }
}

/// A deadlock or serialization failure (SQLSTATE 40001 / 40P01): the database rolled the
/// transaction back because another one raced it.
fn concurrency_abort(e: &DbErr) -> bool {
    use sea_orm::sqlx::Error as Sqlx;
    let (DbErr::Query(RuntimeErr::SqlxError(s))
    | DbErr::Exec(RuntimeErr::SqlxError(s))
    | DbErr::Conn(RuntimeErr::SqlxError(s))) = e
    else {
        return false;
    };
    match &**s {
        Sqlx::Database(d) => matches!(d.code().as_deref(), Some("40001" | "40P01")),
        _ => false,
    }
}

impl StoreError {
    pub fn code(&self) -> ErrorCode {
        match self {
            StoreError::NotFound(_) => ErrorCode::NotFound,
            StoreError::Conflict(_) => ErrorCode::Conflict,
            StoreError::Invalid(_) => ErrorCode::ValidationError,
            StoreError::Db(e) if database_unreachable(e) => ErrorCode::DatabaseUnavailable,
            StoreError::Corrupt(_) | StoreError::Db(_) => ErrorCode::InternalError,
            StoreError::Fenced { .. } => ErrorCode::SessionOwnedElsewhere,
        }
    }

    /// The database could not be reached: the caller should be told to retry, not that the
    /// server is broken.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Db(e) if database_unreachable(e))
    }

    /// Turn a unique-constraint violation into `Conflict(what)`, pass anything else through.
    pub(crate) fn conflict_on_unique(err: DbErr, what: impl FnOnce() -> String) -> StoreError {
        match sql_err(&err) {
            Some(SqlErr::UniqueConstraintViolation(_)) => StoreError::Conflict(what()),
            _ => StoreError::from(err),
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// What constraint a failed statement broke, from sqlx's error or the SQLite writer's
/// (`writer::sqlite`), which sea-orm's own `DbErr::sql_err` cannot read.
pub(crate) fn sql_err(e: &DbErr) -> Option<SqlErr> {
    e.sql_err()
        .or_else(|| match writer::sqlite::constraint_code(e)? {
            1555 | 2067 => Some(SqlErr::UniqueConstraintViolation(e.to_string())),
            787 => Some(SqlErr::ForeignKeyConstraintViolation(e.to_string())),
            _ => None,
        })
}

/// A database that cannot be reached — no pooled connection within the acquire timeout, a
/// connection refused, reset or dropped mid-query — as opposed to a query the database refused.
pub fn database_unreachable(e: &DbErr) -> bool {
    use sea_orm::sqlx::Error as Sqlx;
    fn sqlx_unreachable(e: &Sqlx) -> bool {
        match e {
            Sqlx::Io(_)
            | Sqlx::Tls(_)
            | Sqlx::PoolTimedOut
            | Sqlx::PoolClosed
            | Sqlx::WorkerCrashed => true,
            // PostgreSQL's goodbye on a connection it ends (shutdown, an operator's
            // `pg_terminate_backend`, a crash restart, still starting up) and the connection
            // exception class: the database is away, not the statement wrong.
            Sqlx::Database(db) => db
                .code()
                .is_some_and(|c| matches!(&*c, "57P01" | "57P02" | "57P03") || c.starts_with("08")),
            _ => false,
        }
    }
    match e {
        DbErr::ConnectionAcquire(_) | DbErr::Conn(_) => true,
        DbErr::Query(RuntimeErr::SqlxError(s)) | DbErr::Exec(RuntimeErr::SqlxError(s)) => {
            sqlx_unreachable(s)
        }
        _ => false,
    }
}

/// The tenant's condition of a statement that names its row by a UUID primary key
/// (`… WHERE id = $1 AND <this>`), so that another tenant's row is never read or changed.
///
/// On PostgreSQL it is written `tenant_id IS NOT DISTINCT FROM $2` — the same as `=` on a
/// `NOT NULL` column, but no index serves it, which leaves the primary key as the plan's only
/// index. With `=`, the generic plan PostgreSQL caches for a prepared statement after its fifth
/// execution on a connection chose, on a table not yet analyzed (a new database; autovacuum's
/// first `ANALYZE` comes a minute or more later, never when it is off), the tenant-leading
/// index as just as good: from then on every end of a run read all of the tenant's runs
/// (`EXPLAIN` of the generic plan, docs/benchmarks.md; 1.24 ms per run's end instead of 0.19)
/// and every session update all of the tenant's sessions. SQLite and MySQL plan each statement
/// with the primary key.
pub(crate) fn tenant_of_row<C: sea_orm::ColumnTrait>(
    backend: sea_orm::DatabaseBackend,
    tenant_col: C,
    scope: &TenantScope,
) -> sea_orm::sea_query::Expr {
    use sea_orm::sea_query::{BinOper, Expr, ExprTrait};
    if backend == sea_orm::DatabaseBackend::Postgres {
        Expr::col(tenant_col.as_column_ref()).binary(
            BinOper::Custom("IS NOT DISTINCT FROM"),
            Expr::val(scope.uuid()),
        )
    } else {
        tenant_col.eq(scope.uuid())
    }
}

/// Now, truncated to microseconds: what every backend stores, so a value written and read back
/// compares equal.
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

/// Database connection settings.
#[derive(Debug, Clone)]
pub struct DbOptions {
    /// `sqlite://path?mode=rwc`, `postgres://…`, `mysql://…`.
    pub url: String,
    pub max_connections: u32,
    /// How long opening one connection may take.
    pub connect_timeout: Duration,
    /// How long a caller waits for a pooled connection before it gets
    /// [`ErrorCode::DatabaseUnavailable`]: short, so requests fail fast while the database is away.
    pub acquire_timeout: Duration,
}

/// Which database family a URL names.
pub fn backend_of(url: &str) -> Option<DatabaseBackend> {
    let scheme = url.split(':').next().unwrap_or_default();
    match scheme {
        "sqlite" => Some(DatabaseBackend::Sqlite),
        "postgres" | "postgresql" => Some(DatabaseBackend::Postgres),
        "mysql" | "mariadb" => Some(DatabaseBackend::MySql),
        _ => None,
    }
}

/// A database host on this machine's loopback: `localhost`, `127.0.0.0/8`, `::1`, or a Unix
/// socket's directory (a host beginning with `/`).
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.starts_with('/')
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The pool options every connection of the server is opened with (the pool's and the
/// writer's): see [`connect`].
pub(crate) fn connect_options(opts: &DbOptions) -> Result<ConnectOptions> {
    let backend = backend_of(&opts.url).ok_or_else(|| {
        StoreError::Invalid(format!(
            "database URL must start with sqlite://, postgres:// or mysql:// (got {:?})",
            opts.url.split(':').next().unwrap_or_default()
        ))
    })?;
    let url = if backend == DatabaseBackend::MySql && opts.url.starts_with("mariadb:") {
        opts.url.replacen("mariadb:", "mysql:", 1)
    } else {
        opts.url.clone()
    };
    let mut co = ConnectOptions::new(url);
    co.max_connections(opts.max_connections)
        .min_connections(if backend == DatabaseBackend::Sqlite {
            1
        } else {
            0
        })
        .connect_timeout(opts.connect_timeout)
        .acquire_timeout(opts.acquire_timeout)
        .sqlx_logging(false);
    // sqlx pings a pooled connection each time it is checked out: one more round trip per
    // statement outside a transaction and per transaction. A SQLite connection is a file on
    // this machine and cannot go away under the pool. PostgreSQL and MySQL keep the ping: it
    // is what bounds a request by `acquire_timeout` when the network to the database goes
    // silent (a connection used a moment before would otherwise hang in its first statement).
    // The writer's own connection does without (it bounds each batch itself, writer.rs).
    if backend == DatabaseBackend::Sqlite {
        co.test_before_acquire(false);
    }
    // TLS only where it protects something: a database on this machine's loopback, with no
    // `sslmode` asking for TLS (`require`, `verify-ca`, `verify-full`), is reached in the clear.
    // Both drivers' default (`prefer`) negotiates TLS whenever the server offers it — which a
    // Debian PostgreSQL does out of the box — and encrypting every statement to a process on
    // the same host cost a sixth of the server's CPU per run and a fifth of PostgreSQL's
    // (docs/benchmarks.md). A remote database keeps `prefer`.
    co.map_sqlx_postgres_opts(|o| {
        if matches!(o.get_ssl_mode(), sea_orm::sqlx::postgres::PgSslMode::Prefer)
            && is_loopback_host(o.get_host())
        {
            o.ssl_mode(sea_orm::sqlx::postgres::PgSslMode::Disable)
        } else {
            o
        }
    });
    co.map_sqlx_mysql_opts(|o| {
        if matches!(
            o.get_ssl_mode(),
            sea_orm::sqlx::mysql::MySqlSslMode::Preferred
        ) && is_loopback_host(o.get_host())
        {
            o.ssl_mode(sea_orm::sqlx::mysql::MySqlSslMode::Disabled)
        } else {
            o
        }
    });
    if backend == DatabaseBackend::Sqlite {
        co.map_sqlx_sqlite_opts(|o| {
            o.create_if_missing(true)
                .journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sea_orm::sqlx::sqlite::SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(30))
                .foreign_keys(true)
                // The writer's checkpointer copies the log back ten times a second (writer/sqlite.rs):
                // a pool connection's occasional write checkpoints inline only if the log has
                // grown far past that (no writer running, e.g. the admin CLI, or a stuck one).
                .pragma("wal_autocheckpoint", "16384")
        });
    }
    Ok(co)
}

/// Open a pool of at most `max_connections`. SQLite gets WAL, a busy timeout and foreign keys so
/// concurrent sessions don't trip over "database is locked".
///
/// SQLite keeps a pool of several connections, not one: a one-connection pool (tried in
/// 5888276 for its lower CPU per run) stalled every request for the acquire timeout whenever a
/// holder of that connection waited on a second acquisition (the tenant-quota and start-up
/// recovery tests hung or failed with `database_unavailable` under CI load).
pub async fn connect(opts: &DbOptions) -> Result<DatabaseConnection> {
    let co = connect_options(opts)?;
    // The pool's acquire timeout is short; opening the pool at start-up may wait longer for a
    // database that is still coming up (`connect_timeout`), trying again while it is unreachable,
    // with the jittered doubling backoff the server uses everywhere (no retry after the deadline).
    use backon::Retryable;
    let deadline = std::time::Instant::now() + opts.connect_timeout;
    let mut db = (|| Database::connect(co.clone()))
        .retry(
            backon::ExponentialBuilder::new()
                .with_min_delay(Duration::from_millis(100))
                .with_max_delay(Duration::from_secs(1))
                .without_max_times()
                .with_jitter(),
        )
        .sleep(tokio::time::sleep)
        .when(|e| database_unreachable(e) && std::time::Instant::now() < deadline)
        .await?;
    db.set_metric_callback(stats::record);
    Ok(db)
}

/// Apply every pending migration. On PostgreSQL and MySQL a database-level lock, held on one
/// pinned connection, serialises replicas (or test processes) that start at the same moment.
pub async fn migrate(db: &DatabaseConnection) -> Result<()> {
    let backend = db.get_database_backend();
    match backend {
        DatabaseBackend::Postgres | DatabaseBackend::MySql => {
            // A transaction pins one connection for the lock, the migrations and the unlock.
            let txn = db.begin().await?;
            let (lock, unlock) = if backend == DatabaseBackend::Postgres {
                ("SELECT pg_advisory_xact_lock(4705888275329112)", None)
            } else {
                (
                    "SELECT GET_LOCK('agentry_migrate', 120)",
                    Some("SELECT RELEASE_LOCK('agentry_migrate')"),
                )
            };
            txn.execute_raw(Statement::from_string(backend, lock.to_owned()))
                .await?;
            let res = Migrator::up(&txn, None).await;
            if let Some(unlock) = unlock {
                txn.execute_raw(Statement::from_string(backend, unlock.to_owned()))
                    .await?;
            }
            res?;
            txn.commit().await?;
        }
        _ => Migrator::up(db, None).await?,
    }
    Ok(())
}

/// A cheap round trip, for readiness checks.
pub async fn ping(db: &DatabaseConnection) -> Result<()> {
    db.ping().await?;
    Ok(())
}

/// Limit and offset of a list, clamped to sane bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    pub limit: u64,
    pub offset: u64,
}

impl PageRequest {
    pub const MAX_LIMIT: u64 = 1000;

    pub fn new(limit: u64, offset: u64) -> Self {
        Self {
            limit: limit.min(Self::MAX_LIMIT),
            offset,
        }
    }
}

impl Default for PageRequest {
    fn default() -> Self {
        Self::new(100, 0)
    }
}

/// PostgreSQL cannot store NUL in text or JSON. So every backend behaves the same, NUL
/// characters in stored text become U+FFFD (the replacement character).
pub fn sanitize_text(s: String) -> String {
    if s.contains('\0') {
        s.replace('\0', "\u{FFFD}")
    } else {
        s
    }
}

/// [`sanitize_text`] applied to every string and key of a JSON value.
pub fn sanitize_json(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::String(s) => Value::String(sanitize_text(s)),
        Value::Array(a) => Value::Array(a.into_iter().map(sanitize_json).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| (sanitize_text(k), sanitize_json(v)))
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use agentry_schema::entities::{execution, session};
    use agentry_schema::ids::TenantId;
    use sea_orm::sea_query::Expr;
    use sea_orm::{
        ColumnTrait, ConnectionTrait, DatabaseBackend, EntityTrait, QueryFilter, QueryTrait,
        Statement, TransactionTrait,
    };

    use super::TenantScope;
    use crate::testing::{Backend, TestDb};

    /// The plan PostgreSQL caches for `sql` once it plans generically, on `table` as a new
    /// database has it (an empty copy never analyzed, shadowing the real one in this
    /// transaction), with `values` as the parameters' literals.
    async fn generic_plan(t: &TestDb, table: &str, sql: &str, values: &str) -> String {
        let txn = t.db.begin().await.expect("begin");
        for s in [
            format!("CREATE TEMP TABLE {table} (LIKE public.{table} INCLUDING ALL) ON COMMIT DROP"),
            "SET LOCAL plan_cache_mode = force_generic_plan".into(),
            format!("PREPARE probe AS {sql}"),
        ] {
            txn.execute_unprepared(&s).await.expect(&s);
        }
        let rows = txn
            .query_all_raw(Statement::from_string(
                DatabaseBackend::Postgres,
                format!("EXPLAIN EXECUTE probe({values})"),
            ))
            .await
            .expect("explain");
        let plan = rows
            .iter()
            .map(|r| r.try_get_by_index::<String>(0).expect("a plan line"))
            .collect::<Vec<_>>()
            .join("\n");
        txn.execute_unprepared("DEALLOCATE probe")
            .await
            .expect("deallocate");
        txn.rollback().await.expect("rollback");
        plan
    }

    #[test]
    fn loopback_hosts_are_told_apart_from_remote_ones() {
        for host in [
            "localhost",
            "LOCALHOST",
            "127.0.0.1",
            "127.3.4.5",
            "::1",
            "[::1]",
            "/run/postgresql",
        ] {
            assert!(super::is_loopback_host(host), "{host}");
        }
        for host in [
            "db.internal",
            "10.0.0.5",
            "192.168.1.2",
            "::ffff:10.0.0.1",
            "localhost.evil.example",
            "",
        ] {
            assert!(!super::is_loopback_host(host), "{host}");
        }
    }

    /// Whether this connection to PostgreSQL is encrypted (`pg_stat_ssl`), and whether the
    /// server offers TLS at all.
    async fn pg_tls(db: &sea_orm::DatabaseConnection) -> (bool, bool) {
        let one = |sql: &str| Statement::from_string(DatabaseBackend::Postgres, sql.to_owned());
        let ssl = db
            .query_one_raw(one(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            ))
            .await
            .expect("pg_stat_ssl")
            .expect("a row")
            .try_get_by_index::<bool>(0)
            .expect("ssl");
        let offered = db
            .query_one_raw(one("SHOW ssl"))
            .await
            .expect("SHOW ssl")
            .expect("a row")
            .try_get_by_index::<String>(0)
            .expect("ssl setting");
        (ssl, offered == "on")
    }

    /// A PostgreSQL on the loopback, with no `sslmode` in the URL, is reached without TLS (the
    /// driver's default negotiated it whenever the server offered it); `sslmode=require` still
    /// gets TLS. (On a server that offers no TLS both are plain, and the second half is moot.)
    #[tokio::test]
    async fn a_loopback_postgres_is_reached_without_tls_unless_the_url_asks() {
        let Some(t) = TestDb::open(Backend::Postgres).await else {
            return;
        };
        let opts = |url: String| crate::DbOptions {
            url,
            max_connections: 1,
            connect_timeout: std::time::Duration::from_secs(10),
            acquire_timeout: std::time::Duration::from_secs(10),
        };
        let (ssl, offered) = pg_tls(&t.db).await;
        assert!(
            !ssl,
            "the test database's connection negotiated TLS on the loopback"
        );
        let sep = if t.url.contains('?') { '&' } else { '?' };
        let required = crate::connect(&opts(format!("{}{sep}sslmode=require", t.url))).await;
        if offered {
            let (ssl, _) = pg_tls(&required.expect("connect with sslmode=require")).await;
            assert!(ssl, "sslmode=require connected in the clear");
        }
    }

    /// A run's end and a session's update name their row by its primary key and the tenant;
    /// PostgreSQL's generic plan for them, on tables not yet analyzed, must take the primary
    /// key — with a plain `tenant_id = $n` it took the tenant's index and read every run (or
    /// session) of the tenant on each call (docs/benchmarks.md).
    #[tokio::test]
    async fn the_tenants_condition_leaves_the_primary_key_to_postgres_generic_plans() {
        let Some(t) = TestDb::open(Backend::Postgres).await else {
            return;
        };
        let scope = TenantScope::new(TenantId::new());
        let pg = DatabaseBackend::Postgres;
        let ids = "'01a22900-0000-7000-8000-000000000001', '01a22900-0000-7000-8000-000000000002'";
        let end = |tenant: Expr| {
            execution::Entity::update_many()
                .col_expr(execution::Column::Status, Expr::value("completed"))
                .filter(execution::Column::Id.eq(uuid::Uuid::nil()))
                .filter(tenant)
                .build(pg)
                .sql
        };
        let ours = end(super::tenant_of_row(
            pg,
            execution::Column::TenantId,
            &scope,
        ));
        let plain = end(execution::Column::TenantId.eq(scope.uuid()));
        let values = format!("'completed', {ids}");
        let plan = generic_plan(&t, "executions", &ours, &values).await;
        assert!(plan.contains("executions_pkey"), "{ours}\n{plan}");
        // What it replaces: the hazard is real on this PostgreSQL.
        let before = generic_plan(&t, "executions", &plain, &values).await;
        assert!(!before.contains("executions_pkey"), "{plain}\n{before}");

        let touch = session::Entity::update_many()
            .col_expr(session::Column::State, Expr::value("idle"))
            .filter(session::Column::Id.eq(uuid::Uuid::nil()))
            .filter(super::tenant_of_row(pg, session::Column::TenantId, &scope))
            .build(pg)
            .sql;
        let plan = generic_plan(&t, "sessions", &touch, &format!("'idle', {ids}")).await;
        assert!(plan.contains("sessions_pkey"), "{touch}\n{plan}");
    }
}
