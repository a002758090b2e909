//! What can go wrong with a data source, in words a model (and an admin) can act on.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A malformed URL, path or argument: fix it and try again.
    #[error("{0}")]
    Invalid(String),
    /// A safety rule refused it: an address the platform forbids, the platform's own services,
    /// a path outside the tenant's area, a statement that is not read-only.
    #[error("{0}")]
    Refused(String),
    /// The data source cannot be reached right now.
    #[error("{0}")]
    Unavailable(String),
    /// The statement ran past its timeout and was stopped.
    #[error("the statement ran longer than {}s and was stopped", .0.as_secs_f64())]
    Timeout(Duration),
    /// The database refused or failed the statement (its own message, e.g. a read-only
    /// transaction refusing a write).
    #[error("{0}")]
    Query(String),
}

pub type Result<T, E = DataError> = std::result::Result<T, E>;

/// A database error as the model should see it: the database's own message, without the
/// driver's wrapping (and never the URL or its credentials).
pub(crate) fn query_error(e: sqlx::Error) -> DataError {
    match e {
        sqlx::Error::Database(db) => DataError::Query(db.message().to_string()),
        sqlx::Error::Io(io) => DataError::Unavailable(format!("the connection failed: {io}")),
        sqlx::Error::Tls(tls) => DataError::Unavailable(format!("TLS failed: {tls}")),
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => {
            DataError::Unavailable("no connection to the data source".into())
        }
        sqlx::Error::ColumnDecode { index, source } => {
            DataError::Query(format!("column {index} could not be read: {source}"))
        }
        other => DataError::Query(other.to_string()),
    }
}

/// A failure to connect, naming what to check; the driver's text may name the host, never
/// the password (sqlx does not print it).
pub(crate) fn connect_error(e: sqlx::Error) -> DataError {
    match e {
        sqlx::Error::Database(db) => DataError::Unavailable(format!(
            "the database refused the connection: {}",
            db.message()
        )),
        sqlx::Error::Io(io) => DataError::Unavailable(format!("cannot connect: {io}")),
        other => DataError::Unavailable(format!("cannot connect: {other}")),
    }
}
