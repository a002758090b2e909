//! The writer: every write of a run goes through one place, which on SQLite is one connection
//! that commits the writes waiting for it together (group commit).
//!
//! SQLite lets one connection write at a time. With a pool of several, concurrent runs' writers
//! met in SQLite's busy handler, which sleeps and retries: at ten clients a run's write waited
//! behind the others for up to a second (p99 250 ms end to end), and every connection's own
//! worker thread and page cache cost CPU on each hand-off. The writer owns one connection on a
//! thread of its own; callers queue a job (a closure over a transaction) and await its answer.
//! The writer takes every job that is waiting (up to [`MAX_BATCH`]), runs them in one
//! transaction and commits once: under load many runs' steps share one commit, and nobody
//! sleeps in the busy handler.
//!
//! Safety of the one connection (the reason a one-connection *pool* was reverted in 5888276: a
//! holder that needed a second connection stalled every request):
//! - a job gets its transaction and nothing else; a job that asks the writer for another write
//!   is refused at once ([`StoreError::Invalid`], a bug to fix), never queued behind itself;
//! - reads do not use the writer's connection: they keep the pool, which in WAL mode reads
//!   beside the writer;
//! - a job waits in the queue at most the pool's acquire timeout; after that it is answered
//!   "database unavailable" (503), as a pool acquisition would be.
//!
//! Group commit without savepoints: the jobs of a batch run one after another in one
//! transaction; if one fails, the transaction is rolled back and each job of the batch runs
//! again alone, so one job's failure never loses or changes another's writes. A job may
//! therefore run more than once before it commits and must not have effects outside its
//! transaction (the closures are `FnMut` for that reason).
//!
//! PostgreSQL and MySQL: the same queue and group commit, on one connection of the writer's own
//! (a one-connection pool, opened lazily, on the same thread design). There the cost of a write
//! is its round trips, not a lock: a pooled transaction per job paid a ping, `BEGIN` and `COMMIT`
//! around every job's statements and each commit's WAL flush (issue 24 measured 2.4 ms of the
//! server's CPU and a p99 of 60+ ms per one-tool run at ten clients). Batched, the jobs waiting
//! share one `BEGIN`/`COMMIT` and one flush, and the connection is not pinged (only after 30 s
//! idle): each batch is bounded by the acquire timeout, and a batch that times out or loses its
//! connection answers its jobs "database unavailable" (503) and the next batch opens a new one. A
//! `BEGIN` that fails on a connection the database closed meanwhile (a restart) is tried once
//! more on a new one. Jobs of several sessions share a transaction, so they must not lock rows
//! in conflicting orders: the run path's jobs lock only their own session's rows.

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use sea_orm::{DatabaseBackend, DatabaseConnection, DatabaseTransaction, DbErr, TransactionTrait};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::{DbOptions, Result, StoreError};

/// The most jobs one commit takes.
pub const MAX_BATCH: usize = 512;

/// The writer's connections to PostgreSQL or MySQL, each with its own queue and batches: one
/// connection's round trips (a statement at a time) would cap the throughput, several keep the
/// batching (issue 24: one gave 2.7 ms of the database's CPU per run instead of 4.1, but the
/// end-to-end latency grew with the queue).
pub const SERVER_CONNECTIONS: usize = 4;

/// A write: given the transaction, do the statements. May run more than once (see the module
/// documentation); its answer is the one of the run that committed.
pub trait WriteFn<R>:
    for<'t> FnMut(&'t DatabaseTransaction) -> BoxFuture<'t, Result<R>> + Send + 'static
{
}

impl<R, F> WriteFn<R> for F where
    F: for<'t> FnMut(&'t DatabaseTransaction) -> BoxFuture<'t, Result<R>> + Send + 'static
{
}

type RunFn = Box<dyn for<'t> FnMut(&'t DatabaseTransaction) -> BoxFuture<'t, Result<()>> + Send>;

struct Job {
    run: RunFn,
    /// Called once, after the commit (Ok) or the failure of the job's last run (Err).
    finish: Box<dyn FnOnce(Result<()>) + Send>,
    deadline: Instant,
}

#[derive(Clone)]
pub struct Writer {
    inner: Arc<Inner>,
}

/// One connection, one thread, a queue: SQLite's own connection, or PostgreSQL's and MySQL's
/// one-connection pool.
struct Inner {
    /// One queue per connection.
    queues: Vec<mpsc::UnboundedSender<Job>>,
    /// How long a job may wait for the writer.
    wait: Duration,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Writer")
    }
}

thread_local! {
    /// Set on the writer's thread: a job that asks for another write is refused.
    static ON_WRITER: Cell<bool> = const { Cell::new(false) };
}

tokio::task_local! {
    /// The rows the jobs of the transaction being written deferred (see [`Deferred`]): one per
    /// connection's task (several share the writer's thread on PostgreSQL and MySQL).
    static DEFERRED: RefCell<Option<Deferred>>;
}

/// Rows that the jobs of one transaction insert and none of them reads back: events and
/// checkpoints. Each job's statement would be one round trip and one statement's work for the
/// database; deferred, the rows of every job of the batch go in one multi-row insert per table
/// just before the commit (the same transaction, so a job's acknowledgement still means its rows
/// are committed). A deferred insert that fails fails the batch, whose jobs then run alone (see
/// the module documentation), so one job's bad row never loses another's.
#[derive(Default)]
pub(crate) struct Deferred {
    pub(crate) events: Vec<agentry_schema::entities::session_event::ActiveModel>,
    pub(crate) checkpoints: Vec<agentry_schema::entities::checkpoint::ActiveModel>,
}

impl Deferred {
    /// Defer event rows to the end of the writer's transaction this runs in; outside one,
    /// the rows come back for the caller to write at once.
    pub(crate) fn events(
        rows: Vec<agentry_schema::entities::session_event::ActiveModel>,
    ) -> Option<Vec<agentry_schema::entities::session_event::ActiveModel>> {
        let mut rows = Some(rows);
        let _ = DEFERRED.try_with(|d| {
            if let Some(d) = d.borrow_mut().as_mut()
                && let Some(r) = rows.take()
            {
                d.events.extend(r);
            }
        });
        rows
    }

    /// [`Deferred::events`] for a checkpoint row.
    pub(crate) fn checkpoint(
        row: agentry_schema::entities::checkpoint::ActiveModel,
    ) -> Option<agentry_schema::entities::checkpoint::ActiveModel> {
        let mut row = Some(row);
        let _ = DEFERRED.try_with(|d| {
            if let Some(d) = d.borrow_mut().as_mut()
                && let Some(r) = row.take()
            {
                d.checkpoints.push(r);
            }
        });
        row
    }

    /// Start collecting for a new transaction (dropping what a rolled-back one left).
    fn open() {
        let _ = DEFERRED.try_with(|d| *d.borrow_mut() = Some(Deferred::default()));
    }

    /// Insert what the transaction's jobs deferred, in as few statements as the databases'
    /// parameter limits allow.
    async fn flush(txn: &DatabaseTransaction) -> Result<()> {
        let Ok(Some(rows)) = DEFERRED.try_with(|d| d.borrow_mut().as_mut().map(std::mem::take))
        else {
            return Ok(());
        };
        crate::events::insert_missing_rows(txn, rows.events).await?;
        crate::checkpoints::insert_rows(txn, rows.checkpoints).await?;
        Ok(())
    }
}

/// The most rows one deferred insert carries (SQLite allows 32,766 parameters in a statement).
const ROWS_PER_INSERT: usize = 1000;

/// `rows` in the groups one multi-row insert each may carry ([`ROWS_PER_INSERT`]), moved, not
/// copied.
pub(crate) fn per_insert<T>(rows: Vec<T>) -> impl Iterator<Item = Vec<T>> {
    let mut rows = rows.into_iter().peekable();
    std::iter::from_fn(move || {
        rows.peek()?;
        Some(rows.by_ref().take(ROWS_PER_INSERT).collect())
    })
}

impl Writer {
    /// The writer for the database `opts` names, beside the pool `db` opened from the same
    /// options: its own connections (one on SQLite, [`SERVER_CONNECTIONS`] elsewhere) on a
    /// thread of its own.
    pub async fn start(opts: &DbOptions, db: &DatabaseConnection) -> Result<Writer> {
        let (ready_tx, ready_rx) = oneshot::channel::<Result<(), String>>();
        let mut senders = Vec::new();
        let consumer: BoxFuture<'static, ()> =
            if db.get_database_backend() == DatabaseBackend::Sqlite {
                let (tx, rx) = mpsc::unbounded_channel();
                senders.push(tx);
                let (conn, sqlite, checkpointer) = open_sqlite_writer(opts).await?;
                Box::pin(DEFERRED.scope(RefCell::new(None), async move {
                    run_queue(conn, sqlite, rx).await;
                    // The last checkpoint once the last write is in.
                    drop(checkpointer);
                }))
            } else {
                let mut queues = Vec::new();
                for _ in 0..SERVER_CONNECTIONS {
                    let (tx, rx) = mpsc::unbounded_channel();
                    senders.push(tx);
                    queues.push((ServerConnection::new(opts)?, rx));
                }
                // One task per connection, each with its own deferred rows.
                Box::pin(async move {
                    let tasks = queues.into_iter().map(|(conn, rx)| {
                        tokio::spawn(DEFERRED.scope(RefCell::new(None), run_server_queue(conn, rx)))
                    });
                    futures::future::join_all(tasks).await;
                })
            };
        std::thread::Builder::new()
            .name("agentry-writer".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                ON_WRITER.with(|w| w.set(true));
                let _ = ready_tx.send(Ok(()));
                rt.block_on(consumer);
            })
            .map_err(|e| StoreError::Db(DbErr::Custom(format!("starting the writer: {e}"))))?;
        ready_rx
            .await
            .map_err(|_| StoreError::Db(DbErr::Custom("the writer thread did not start".into())))?
            .map_err(|e| StoreError::Db(DbErr::Custom(format!("the writer's runtime: {e}"))))?;
        Ok(Writer {
            inner: Arc::new(Inner {
                queues: senders,
                wait: opts.acquire_timeout,
            }),
        })
    }

    /// Run `f` in a transaction and commit; its answer once committed. For writes that belong
    /// to no session; a session's go through [`Writer::write_for`].
    pub async fn write<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: WriteFn<R>,
    {
        self.write_for(Uuid::nil(), f).await
    }

    /// [`Writer::write`] for a write of the session `key`: one session's writes always go
    /// through the same connection, in the order asked, and never share a transaction with a
    /// write that locks another session's rows on another connection (no lock-order deadlock
    /// between the connections).
    pub async fn write_for<R, F>(&self, key: Uuid, mut f: F) -> Result<R>
    where
        R: Send + 'static,
        F: WriteFn<R>,
    {
        if ON_WRITER.with(|w| w.get()) {
            return Err(StoreError::Invalid(
                "a write was asked for from inside another write: it would wait for itself".into(),
            ));
        }
        let Inner { queues, wait } = &*self.inner;
        let jobs = &queues[(key.as_u128() % queues.len() as u128) as usize];
        let slot: Arc<Mutex<Option<R>>> = Arc::new(Mutex::new(None));
        let (done_tx, done_rx) = oneshot::channel::<Result<R>>();
        let run_slot = slot.clone();
        let run: RunFn = Box::new(move |txn| {
            let fut = f(txn);
            let slot = run_slot.clone();
            Box::pin(async move {
                let r = fut.await?;
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                Ok(())
            })
        });
        let finish = Box::new(move |res: Result<()>| {
            let answer = res.and_then(|()| {
                slot.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                    .ok_or_else(|| StoreError::Db(DbErr::Custom("a write left no answer".into())))
            });
            let _ = done_tx.send(answer);
        });
        jobs.send(Job {
            run,
            finish,
            deadline: Instant::now() + *wait,
        })
        .map_err(|_| stopped())?;
        done_rx.await.map_err(|_| stopped())?
    }
}

fn stopped() -> StoreError {
    StoreError::Db(DbErr::ConnectionAcquire(
        sea_orm::ConnAcquireErr::ConnectionClosed,
    ))
}

fn timed_out() -> StoreError {
    StoreError::Db(DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::Timeout))
}

/// The writer's own connection: a `rusqlite` connection to the pool's file, under the sea-orm
/// connection the jobs' statements go through (see [`sqlite`]).
async fn open_sqlite_writer(
    opts: &DbOptions,
) -> Result<(
    DatabaseConnection,
    Arc<sqlite::SqliteWriter>,
    sqlite::Checkpointer,
)> {
    let options: sea_orm::sqlx::sqlite::SqliteConnectOptions = opts
        .url
        .parse()
        .map_err(|e| StoreError::Invalid(format!("the SQLite database URL: {e}")))?;
    let writer = Arc::new(sqlite::SqliteWriter::open(options.get_filename())?);
    let checkpointer = sqlite::Checkpointer::start(options.get_filename())?;
    let db: DatabaseConnection = sea_orm::DatabaseConnectionType::MockDatabaseConnection(Arc::new(
        sea_orm::MockDatabaseConnection::new(sqlite::Rows(writer.clone())),
    ))
    .into();
    Ok((db, writer, checkpointer))
}

async fn run_queue(
    db: DatabaseConnection,
    sqlite: Arc<sqlite::SqliteWriter>,
    mut rx: mpsc::UnboundedReceiver<Job>,
) {
    let mut conn = SqliteConnection { db, sqlite };
    while let Some(mut batch) = next_batch(&mut rx).await {
        let mut done: Vec<Option<Result<()>>> = batch.iter().map(|_| None).collect();
        run_batch(&mut conn, &mut batch, &mut done).await;
        finish(batch, done);
    }
}

/// A writer connection idle this long is pinged before its next batch.
const IDLE_PING: Duration = Duration::from_secs(30);

/// What a batch on PostgreSQL or MySQL may take per job, beyond the acquire timeout.
const PER_JOB: Duration = Duration::from_millis(10);

/// PostgreSQL's and MySQL's queue: each batch bounded by the acquire timeout (and [`PER_JOB`]).
async fn run_server_queue(mut conn: ServerConnection, mut rx: mpsc::UnboundedReceiver<Job>) {
    while let Some(mut batch) = next_batch(&mut rx).await {
        let mut done: Vec<Option<Result<()>>> = batch.iter().map(|_| None).collect();
        // The acquire timeout bounds a batch as it bounded a pooled connection's check; a big
        // batch (a queue that grew while the database was away) gets time for its work on top,
        // so that it cannot time out every time it is tried.
        let mut bound = conn.wait;
        if conn.pool.is_none() {
            // A connection to open (after a failed batch, e.g. while the database is away): its
            // jobs may have waited most of their time behind that batch already, and a new
            // connection's attempt of a whole acquire timeout more would make them wait twice
            // the promised bound. No job waits longer than its deadline in all.
            if let Some(last) = batch.iter().map(|j| j.deadline).max() {
                bound = bound.min(last.saturating_duration_since(Instant::now()));
            }
        }
        let bound = bound + PER_JOB * u32::try_from(batch.len()).unwrap_or(u32::MAX);
        if tokio::time::timeout(bound, run_batch(&mut conn, &mut batch, &mut done))
            .await
            .is_err()
        {
            // The connection may be stuck in a statement (a silent network): the next batch
            // gets a new one.
            conn.reset();
        }
        finish(batch, done);
    }
}

/// The jobs waiting now (at least one; up to [`MAX_BATCH`]), those past their deadline already
/// answered "unavailable". `None` once every sender is gone.
async fn next_batch(rx: &mut mpsc::UnboundedReceiver<Job>) -> Option<Vec<Job>> {
    loop {
        let mut batch = vec![rx.recv().await?];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let now = Instant::now();
        let (late, ready): (Vec<Job>, Vec<Job>) = batch.into_iter().partition(|j| j.deadline < now);
        for job in late {
            (job.finish)(Err(timed_out()));
        }
        if !ready.is_empty() {
            return Some(ready);
        }
    }
}

/// Each job's answer; a job without one (its batch timed out) is told the database is
/// unavailable.
fn finish(batch: Vec<Job>, done: Vec<Option<Result<()>>>) {
    for (job, answer) in batch.into_iter().zip(done) {
        (job.finish)(answer.unwrap_or_else(|| Err(timed_out())));
    }
}

/// Where a batch's transactions come from.
trait Transactions {
    async fn begin(&mut self) -> Result<DatabaseTransaction, DbErr>;
    async fn commit(&mut self, txn: DatabaseTransaction) -> Result<(), DbErr>;
    async fn rollback(&mut self, txn: DatabaseTransaction);
}

/// The SQLite writer's connection: `BEGIN`/`COMMIT` are the writer's own (the sea-orm
/// connection over it cannot report a failed commit).
struct SqliteConnection {
    db: DatabaseConnection,
    sqlite: Arc<sqlite::SqliteWriter>,
}

impl Transactions for SqliteConnection {
    async fn begin(&mut self) -> Result<DatabaseTransaction, DbErr> {
        self.sqlite.begin()?;
        self.db.begin().await
    }
    async fn commit(&mut self, txn: DatabaseTransaction) -> Result<(), DbErr> {
        txn.commit().await?;
        self.sqlite.commit()
    }
    async fn rollback(&mut self, txn: DatabaseTransaction) {
        let _ = txn.rollback().await;
        let _ = self.sqlite.rollback();
    }
}

/// PostgreSQL's or MySQL's writer connection: a one-connection pool, opened when first used,
/// pinged only after a pause (see the module documentation).
struct ServerConnection {
    options: sea_orm::ConnectOptions,
    pool: Option<DatabaseConnection>,
    wait: Duration,
}

impl ServerConnection {
    fn new(opts: &DbOptions) -> Result<ServerConnection> {
        let mut options = crate::connect_options(opts)?;
        // Not pinged before each batch (a round trip per batch); only after a pause long enough
        // for a proxy or firewall to have dropped it silently, which a batch would otherwise
        // find by timing out once.
        options
            .max_connections(1)
            .min_connections(0)
            .test_before_acquire_if_idle_for(IDLE_PING)
            .connect_lazy(true);
        Ok(ServerConnection {
            options,
            pool: None,
            wait: opts.acquire_timeout,
        })
    }

    async fn pool(&mut self) -> Result<&DatabaseConnection, DbErr> {
        if self.pool.is_none() {
            let mut db = sea_orm::Database::connect(self.options.clone()).await?;
            db.set_metric_callback(crate::stats::record);
            self.pool = Some(db);
        }
        Ok(self.pool.as_ref().expect("just opened"))
    }

    /// Drop the connection; the next batch opens another.
    fn reset(&mut self) {
        self.pool = None;
    }
}

impl Transactions for ServerConnection {
    async fn begin(&mut self) -> Result<DatabaseTransaction, DbErr> {
        let opened = self.pool.is_some();
        let res = match self.pool().await?.begin().await {
            // Closed under us since the last batch (a restart of the database): nothing was
            // done yet, so once more on a new connection.
            Err(e) if opened && crate::database_unreachable(&e) => {
                self.reset();
                self.pool().await?.begin().await
            }
            res => res,
        };
        // No connection to be had (the database refuses or is away): the next batch must open
        // one again, and is bounded by its jobs' deadlines as such (a refused database used to
        // cost a job queued behind this batch a second whole acquire timeout: 2 + 2 s).
        if res.as_ref().is_err_and(crate::database_unreachable) {
            self.reset();
        }
        res
    }
    async fn commit(&mut self, txn: DatabaseTransaction) -> Result<(), DbErr> {
        let res = txn.commit().await;
        if res.as_ref().is_err_and(crate::database_unreachable) {
            self.reset();
        }
        res
    }
    async fn rollback(&mut self, txn: DatabaseTransaction) {
        if txn.rollback().await.is_err() {
            self.reset();
        }
    }
}

/// All jobs in one transaction; if any fails, each alone. `done[i]` gets job `i`'s answer as
/// soon as it is known (a batch cut short leaves the rest `None`).
async fn run_batch<T: Transactions>(
    conn: &mut T,
    jobs: &mut [Job],
    done: &mut [Option<Result<()>>],
) {
    if jobs.len() > 1 {
        match together(conn, jobs).await {
            Ok(()) => {
                done.iter_mut().for_each(|d| *d = Some(Ok(())));
                return;
            }
            Err(e) if crate::database_unreachable(&e) => {
                done.iter_mut()
                    .for_each(|d| *d = Some(Err(StoreError::from(clone_err(&e)))));
                return;
            }
            Err(_) => {}
        }
    }
    for (job, d) in jobs.iter_mut().zip(done.iter_mut()) {
        *d = Some(alone(conn, job).await);
    }
}

/// The jobs in one transaction.
async fn together<T: Transactions>(conn: &mut T, jobs: &mut [Job]) -> Result<(), DbErr> {
    let txn = conn.begin().await?;
    Deferred::open();
    let mut res = Ok(());
    for job in jobs.iter_mut() {
        res = (job.run)(&txn).await;
        if res.is_err() {
            break;
        }
    }
    if res.is_ok() {
        res = Deferred::flush(&txn).await;
    }
    match res {
        Ok(()) => conn.commit(txn).await,
        Err(e) => {
            conn.rollback(txn).await;
            Err(match e {
                StoreError::Db(e) if crate::database_unreachable(&e) => e,
                _ => DbErr::Custom("a job of the batch failed".into()),
            })
        }
    }
}

async fn alone<T: Transactions>(conn: &mut T, job: &mut Job) -> Result<()> {
    let txn = conn.begin().await?;
    Deferred::open();
    let res = match (job.run)(&txn).await {
        Ok(()) => Deferred::flush(&txn).await,
        Err(e) => Err(e),
    };
    match res {
        Ok(()) => Ok(conn.commit(txn).await?),
        Err(e) => {
            conn.rollback(txn).await;
            Err(e)
        }
    }
}

/// `DbErr` is not `Clone`; a batch's connection failure is told to each of its jobs.
fn clone_err(e: &DbErr) -> DbErr {
    match e {
        DbErr::ConnectionAcquire(a) => DbErr::ConnectionAcquire(match a {
            sea_orm::ConnAcquireErr::Timeout => sea_orm::ConnAcquireErr::Timeout,
            _ => sea_orm::ConnAcquireErr::ConnectionClosed,
        }),
        other => DbErr::Conn(sea_orm::RuntimeErr::Internal(other.to_string())),
    }
}

pub(crate) mod sqlite;

#[cfg(test)]
mod tests;
