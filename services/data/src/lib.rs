//! The data tools' engine (issue 17; seed 001's `tools/data`: SQL, catalog, reports): a
//! tenant's data sources (PostgreSQL, MySQL/MariaDB, SQLite), checked before every connection
//! against the platform's network rules and its own services; their catalog; read-only SQL
//! enforced three ways (parsed, a read-only transaction, a timeout with row and byte caps); and
//! reports with charts rendered to PNG and SVG.
//!
//! This crate knows nothing of tenants' storage or the tool pipeline: the built-in `data` tools
//! and the REST routes wire it to both.

pub mod catalog;
pub mod error;
pub mod exec;
pub mod guard;
pub mod report;
pub mod source;
mod value;

pub use error::{DataError, Result};
pub use exec::{Limits, QueryOutput};
pub use source::{Engine, NetPolicy, SourceUrl, Target};
