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
//! PostgreSQL and MySQL get the same queue on a thread of their own, over one connection the
//! writer opens there: every job waiting goes into one transaction, so a burst of small writes
//! (a run's step, a session's events) costs one commit and one WAL flush for all of them
//! instead of one each; the same rule for a failing job (each of the batch again alone) and the
//! same queue deadline hold. Reads and writes outside runs keep the pool.

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

/// What the writer's thread writes through.
enum Target {
    /// The jobs' sea-orm connection and the rusqlite connection under it.
    Sqlite(DatabaseConnection, Arc<sqlite::SqliteWriter>),
    /// A one-connection pool of PostgreSQL or MySQL.
    Pooled(DatabaseConnection),
}

/// [`Target`] before the writer's thread opened it.
enum Opening {
    Sqlite(DatabaseConnection, Arc<sqlite::SqliteWriter>),
    Pooled(DbOptions),
}

enum Inner {
    /// One connection, one thread, a queue (every backend in the server).
    Queue {
        jobs: mpsc::UnboundedSender<Job>,
        wait: Duration,
    },
    /// Tests that want no queue: a pooled transaction per job.
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
    /// options, on a thread of its own: on SQLite its own connection, executing the statements
    /// itself; on PostgreSQL and MySQL one connection of its own, opened on that thread, whose
    /// batches are one transaction each (one commit, one WAL flush, for every job waiting).
    pub async fn start(opts: &DbOptions, db: &DatabaseConnection) -> Result<Writer> {
        let target = if db.get_database_backend() == DatabaseBackend::Sqlite {
            let (conn, sqlite) = open_sqlite_writer(opts).await?;
            Opening::Sqlite(conn, sqlite)
        } else {
            Opening::Pooled(DbOptions {
                max_connections: 1,
                ..opts.clone()
            })
        };
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
                rt.block_on(async move {
                    let target = match target {
                        Opening::Sqlite(conn, sqlite) => Target::Sqlite(conn, sqlite),
                        // Opened here, so the connection's socket is this thread's.
                        Opening::Pooled(opts) => match crate::connect(&opts).await {
                            Ok(db) => Target::Pooled(db),
                            Err(e) => {
                                let _ = ready_tx.send(Err(e.to_string()));
                                return;
                            }
                        },
                    };
                    let _ = ready_tx.send(Ok(()));
                    run_queue(target, rx).await;
                });
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
) -> Result<(DatabaseConnection, Arc<sqlite::SqliteWriter>)> {
    let options: sea_orm::sqlx::sqlite::SqliteConnectOptions = opts
        .url
        .parse()
        .map_err(|e| StoreError::Invalid(format!("the SQLite database URL: {e}")))?;
    let writer = Arc::new(sqlite::SqliteWriter::open(options.get_filename())?);
    let db: DatabaseConnection = sea_orm::DatabaseConnectionType::MockDatabaseConnection(Arc::new(
        sea_orm::MockDatabaseConnection::new(sqlite::Rows(writer.clone())),
    ))
    .into();
    Ok((db, writer))
}

async fn run_queue(target: Target, mut rx: mpsc::UnboundedReceiver<Job>) {
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
        if let Some(e) = run_batch(&target, ready).await {
            // The database is unreachable: whatever waits meanwhile would meet the same outage
            // one batch later (each up to the acquire timeout); it is told now.
            while let Ok(job) = rx.try_recv() {
                (job.finish)(Err(StoreError::from(clone_err(&e))));
            }
        }
    }
}

/// All jobs in one transaction; if any fails, each alone. The error, when the database could
/// not be reached.
async fn run_batch(target: &Target, mut jobs: Vec<Job>) -> Option<DbErr> {
    if jobs.is_empty() {
        return None;
    }
    if jobs.len() > 1 {
        match together(target, &mut jobs).await {
            Ok(()) => {
                for job in jobs {
                    (job.finish)(Ok(()));
                }
                return None;
            }
            Err(e) if crate::database_unreachable(&e) => {
                for job in jobs {
                    (job.finish)(Err(StoreError::from(clone_err(&e))));
                }
                return Some(e);
            }
            Err(_) => {}
        }
    }
    let mut unreachable = None;
    for mut job in jobs {
        let res = alone(target, &mut job).await;
        if let Err(StoreError::Db(e)) = &res
            && crate::database_unreachable(e)
        {
            unreachable = Some(clone_err(e));
        }
        (job.finish)(res);
    }
    unreachable
}

/// The jobs in one transaction. On SQLite `BEGIN`/`COMMIT` are the writer's own (the
/// connection's cannot report a failed commit).
async fn together(target: &Target, jobs: &mut [Job]) -> Result<(), DbErr> {
    let (db, sqlite) = match target {
        Target::Sqlite(db, sqlite) => (db, Some(sqlite)),
        Target::Pooled(db) => (db, None),
    };
    if let Some(sqlite) = sqlite {
        sqlite.begin()?;
    }
    let txn = db.begin().await?;
    for job in jobs.iter_mut() {
        if (job.run)(&txn).await.is_err() {
            txn.rollback().await?;
            if let Some(sqlite) = sqlite {
                sqlite.rollback()?;
            }
            return Err(DbErr::Custom("a job of the batch failed".into()));
        }
    }
    txn.commit().await?;
    match sqlite {
        Some(sqlite) => sqlite.commit(),
        None => Ok(()),
    }
}

async fn alone(target: &Target, job: &mut Job) -> Result<()> {
    let (db, sqlite) = match target {
        Target::Sqlite(db, sqlite) => (db, Some(sqlite)),
        Target::Pooled(db) => (db, None),
    };
    if let Some(sqlite) = sqlite {
        sqlite.begin()?;
    }
    let txn = db.begin().await?;
    match (job.run)(&txn).await {
        Ok(()) => {
            txn.commit().await?;
            if let Some(sqlite) = sqlite {
                sqlite.commit()?;
            }
            Ok(())
        }
        Err(e) => {
            let _ = txn.rollback().await;
            if let Some(sqlite) = sqlite {
                let _ = sqlite.rollback();
            }
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
