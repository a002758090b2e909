//! Test databases on every backend, for this crate's tests and those of the crates above it.
//!
//! PostgreSQL and MySQL come from `AGENTRY_TEST_POSTGRES_URL` / `AGENTRY_TEST_MYSQL_URL`
//! (defaults: the local servers that `scripts/test.sh` starts, database `agentry_test`).
//! They are required: a missing server fails the test with a message saying how to start it,
//! unless `AGENTRY_TEST_SKIP_DBS` names the backend (never set in CI).

use std::path::PathBuf;
use std::time::Duration;

use sea_orm::DatabaseConnection;

use crate::{DbOptions, connect, migrate};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    MySql,
}

impl Backend {
    pub const ALL: [Backend; 3] = [Backend::Sqlite, Backend::Postgres, Backend::MySql];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::MySql => "mysql",
        }
    }

    /// The URL tests use for this backend; SQLite gets a fresh file under `dir`.
    pub fn url(self, dir: &std::path::Path) -> String {
        match self {
            Backend::Sqlite => format!("sqlite://{}?mode=rwc", dir.join("agentry.db").display()),
            Backend::Postgres => std::env::var("AGENTRY_TEST_POSTGRES_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/agentry_test".into()),
            Backend::MySql => std::env::var("AGENTRY_TEST_MYSQL_URL")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/agentry_test".into()),
        }
    }

    /// True when the developer asked to skip this backend (`AGENTRY_TEST_SKIP_DBS=postgres,mysql`).
    /// Ignored when `CI` is set: CI always runs every backend.
    pub fn skipped(self) -> bool {
        if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false") {
            return false;
        }
        std::env::var("AGENTRY_TEST_SKIP_DBS")
            .map(|v| v.split(',').any(|b| b.trim() == self.name()))
            .unwrap_or(false)
    }
}

/// A migrated database for one test. Keeps its SQLite directory alive.
pub struct TestDb {
    pub db: DatabaseConnection,
    /// The writer the server would use for this database (its own connection on SQLite).
    pub writer: crate::writer::Writer,
    pub backend: Backend,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    /// Connect and migrate; `None` (with a loud message) only when the backend is skipped.
    pub async fn open(backend: Backend) -> Option<TestDb> {
        if backend.skipped() {
            eprintln!(
                "SKIPPING {} tests: AGENTRY_TEST_SKIP_DBS names it",
                backend.name()
            );
            return None;
        }
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => panic!("cannot create a temp dir for the test database: {e}"),
        };
        let url = backend.url(dir.path());
        let opts = DbOptions {
            url: url.clone(),
            max_connections: 5,
            connect_timeout: Duration::from_secs(10),
            acquire_timeout: Duration::from_secs(10),
        };
        let db = match connect(&opts).await {
            Ok(db) => db,
            Err(e) => panic!(
                "cannot connect to the {} test database at {url}: {e}\n\
                 Start the local services and create the test databases with `scripts/test.sh` \
                 (or set AGENTRY_TEST_{}_URL).",
                backend.name(),
                backend.name().to_uppercase()
            ),
        };
        if let Err(e) = migrate(&db).await {
            panic!("migrating the {} test database failed: {e}", backend.name());
        }
        let writer = match crate::writer::Writer::start(&opts, &db).await {
            Ok(w) => w,
            Err(e) => panic!(
                "starting the {} test database's writer: {e}",
                backend.name()
            ),
        };
        Some(TestDb {
            db,
            writer,
            backend,
            url,
            _dir: Some(dir),
        })
    }

    /// The SQLite file's directory (None for server databases).
    pub fn dir(&self) -> Option<PathBuf> {
        self._dir.as_ref().map(|d| d.path().to_path_buf())
    }
}
