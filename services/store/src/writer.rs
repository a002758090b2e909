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
//! PostgreSQL and MySQL write concurrently and well: there the writer runs each job in its own
//! pooled transaction at once (no queue).

use std::cell::Cell;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use sea_orm::{DatabaseBackend, DatabaseConnection, DatabaseTransaction, DbErr, TransactionTrait};
use tokio::sync::{mpsc, oneshot};

use crate::{DbOptions, Result, StoreError};

/// The most jobs one commit takes.
pub const MAX_BATCH: usize = 512;

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

enum Inner {
    /// SQLite: one connection, one thread, a queue.
    Queue {
        jobs: mpsc::UnboundedSender<Job>,
        wait: Duration,
    },
    /// PostgreSQL, MySQL (and tests that want no queue): a pooled transaction per job.
    Direct(DatabaseConnection),
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.inner {
            Inner::Queue { .. } => f.write_str("Writer(queue)"),
            Inner::Direct(_) => f.write_str("Writer(direct)"),
        }
    }
}

thread_local! {
    /// Set on the writer's thread: a job that asks for another write is refused.
    static ON_WRITER: Cell<bool> = const { Cell::new(false) };
}

impl Writer {
    /// The writer for the database `opts` names, beside the pool `db` opened from the same
    /// options: on SQLite its own connection and thread, elsewhere the pool itself.
    pub async fn start(opts: &DbOptions, db: &DatabaseConnection) -> Result<Writer> {
        if db.get_database_backend() != DatabaseBackend::Sqlite {
            return Ok(Writer::direct(db.clone()));
        }
        let (conn, sqlite, checkpointer) = open_sqlite_writer(opts).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = oneshot::channel();
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
                rt.block_on(run_queue(conn, sqlite, rx));
                // The last checkpoint once the last write is in.
                drop(checkpointer);
            })
            .map_err(|e| StoreError::Db(DbErr::Custom(format!("starting the writer: {e}"))))?;
        ready_rx
            .await
            .map_err(|_| StoreError::Db(DbErr::Custom("the writer thread did not start".into())))?
            .map_err(|e| StoreError::Db(DbErr::Custom(format!("the writer's runtime: {e}"))))?;
        Ok(Writer {
            inner: Arc::new(Inner::Queue {
                jobs: tx,
                wait: opts.acquire_timeout,
            }),
        })
    }

    /// The pool a writer without a queue writes through (PostgreSQL, MySQL): a write of one
    /// statement that needs no other in its transaction may go straight to it, in autocommit
    /// (one round trip instead of BEGIN, the statement and COMMIT).
    pub fn pooled(&self) -> Option<&DatabaseConnection> {
        match &*self.inner {
            Inner::Direct(db) => Some(db),
            Inner::Queue { .. } => None,
        }
    }

    /// A writer without a queue: each job in its own transaction from `db`.
    pub fn direct(db: DatabaseConnection) -> Writer {
        Writer {
            inner: Arc::new(Inner::Direct(db)),
        }
    }

    /// Run `f` in a transaction and commit; its answer once committed.
    pub async fn write<R, F>(&self, mut f: F) -> Result<R>
    where
        R: Send + 'static,
        F: WriteFn<R>,
    {
        if ON_WRITER.with(|w| w.get()) {
            return Err(StoreError::Invalid(
                "a write was asked for from inside another write: it would wait for itself".into(),
            ));
        }
        match &*self.inner {
            Inner::Direct(db) => {
                let txn = db.begin().await?;
                let r = f(&txn).await?;
                txn.commit().await?;
                Ok(r)
            }
            Inner::Queue { jobs, wait } => {
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
                            .ok_or_else(|| {
                                StoreError::Db(DbErr::Custom("a write left no answer".into()))
                            })
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
    let mut batch: Vec<Job> = Vec::new();
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let now = Instant::now();
        let (late, ready): (Vec<Job>, Vec<Job>) = batch.drain(..).partition(|j| j.deadline < now);
        for job in late {
            (job.finish)(Err(timed_out()));
        }
        run_batch(&db, &sqlite, ready).await;
    }
}

/// All jobs in one transaction; if any fails, each alone.
async fn run_batch(db: &DatabaseConnection, sqlite: &sqlite::SqliteWriter, mut jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    if jobs.len() > 1 {
        match together(db, sqlite, &mut jobs).await {
            Ok(()) => {
                for job in jobs {
                    (job.finish)(Ok(()));
                }
                return;
            }
            Err(e) if crate::database_unreachable(&e) => {
                for job in jobs {
                    (job.finish)(Err(StoreError::from(clone_err(&e))));
                }
                return;
            }
            Err(_) => {}
        }
    }
    for mut job in jobs {
        let res = alone(db, sqlite, &mut job).await;
        (job.finish)(res);
    }
}

/// The jobs in one transaction. `BEGIN`/`COMMIT` are the writer's own (the connection's
/// cannot report a failed commit).
async fn together(
    db: &DatabaseConnection,
    sqlite: &sqlite::SqliteWriter,
    jobs: &mut [Job],
) -> Result<(), DbErr> {
    sqlite.begin()?;
    let txn = db.begin().await?;
    for job in jobs.iter_mut() {
        if (job.run)(&txn).await.is_err() {
            let _ = txn.rollback().await;
            sqlite.rollback()?;
            return Err(DbErr::Custom("a job of the batch failed".into()));
        }
    }
    txn.commit().await?;
    sqlite.commit()
}

async fn alone(
    db: &DatabaseConnection,
    sqlite: &sqlite::SqliteWriter,
    job: &mut Job,
) -> Result<()> {
    sqlite.begin()?;
    let txn = db.begin().await?;
    match (job.run)(&txn).await {
        Ok(()) => {
            txn.commit().await?;
            sqlite.commit()?;
            Ok(())
        }
        Err(e) => {
            let _ = txn.rollback().await;
            let _ = sqlite.rollback();
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
