//! agentry-schema: the shapes of Agentry's data and nothing else (no I/O).
//!
//! - [`events`]: the execution event stream, the only output of a run.
//! - [`frames`]: WebSocket client frames and their parser.
//! - [`api`]: REST request and response bodies.
//! - [`error`]: the one table of error codes and the error body.
//! - [`ids`]: identifier newtypes.
//! - [`memory`]: long-term memory's scopes and REST bodies.
//! - [`policy`]: a tenant's policy (role rights, sandbox limits).
//! - [`tenancy`]: a caller's [`Role`](tenancy::Role) and a tenant's
//!   [`TenantStatus`](tenancy::TenantStatus).
//! - `entities`, `migration` (feature `db`): sea-orm entities and migrations.
//! - `trace_context` (feature `trace`): the W3C trace context of a `tracing` span.

pub mod api;
pub mod error;
pub mod events;
pub mod frames;
pub mod ids;
pub mod memory;
pub mod policy;
pub mod roles;
pub mod secret;
pub mod tenancy;

#[cfg(feature = "db")]
pub mod entities;
#[cfg(feature = "db")]
pub mod migration;
#[cfg(feature = "trace")]
pub mod trace_context;

pub use error::{ErrorCode, ErrorResponse};
pub use events::{EventPayload, ExecutionEvent};
