//! The model clients' integration tests, one binary (each test binary links the crate tree):
//! failures and retries, properties, the providers' wire formats, the scripted model.

#[path = "../common/mod.rs"]
mod common;

mod failures;
mod properties;
mod providers;
mod scripted;
