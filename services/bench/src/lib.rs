//! `agentry-bench`: a load generator for Agentry. It starts the real `agentry` binary (one
//! server per scenario, on SQLite or a database URL) with the fake model server of
//! `agentry-fake-model` as its model, drives it over real WebSockets and HTTP, and writes one
//! JSON record per scenario plus the table in `docs/benchmarks.md`.
//!
//! The fake model runs inside this process, so its `Instant`s (request received, first byte,
//! last byte) compare with the clients' own: a run's *server overhead* is its end-to-end time
//! minus the time its model calls spent inside the fake model.

pub mod cluster;
pub mod harness;
pub mod machine;
pub mod memory;
pub mod report;
pub mod scenarios;
pub mod stats;
pub mod suite;
pub mod ws;
