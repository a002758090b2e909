//! agentry-tools: the tool core, what every tool and every caller of a tool share.
//!
//! - [`tool`]: the [`Tool`](tool::Tool) trait every tool implements (built-in, memory or MCP),
//!   the [`ToolRegistry`](tool::ToolRegistry) with its compiled argument schemas, the context a
//!   call runs in, and the structured errors a call can end with.
//! - [`pipeline`]: the one tool-call pipeline (policy → schema → approval → the call on a
//!   paused clock, with retries → audit → events) that the agent loop and `/mcp` share.
//! - [`client`]: client function tools, whose calls the run's client answers (the Responses
//!   API's `function` tools).
//! - [`rbac`]: role permissions (`service:tool`, `service:*`, `*:*`) the pipeline checks per call.
//!
//! The tools themselves live elsewhere: the built-in ones in `agentry-builtin`, an MCP server's
//! in `agentry-mcp`.

pub mod client;
pub mod pipeline;
pub mod rbac;
pub mod tool;
