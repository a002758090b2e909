//! The protocol adapters: one module (or folder) per wire protocol, each a thin layer over the
//! `Engine` facade (`agentry_actors::Engine`: `stream_run`, `run_to_done`, `decide`, `cancel`)
//! that turns the protocol's requests into engine calls and the run's events into its frames.
//!
//! | adapter | serves |
//! |---|---|
//! | [`rest_chat`] | `POST /api/v1/chat`: the run's events as one JSON body |
//! | [`sse`] | `POST /api/v1/chat/stream`: the same request as Server-Sent Events |
//! | [`ws`] | `WS /ws/chat/{session_id}`: client frames in, events out, several watchers per session |
//! | [`openai_chat`] | `POST /v1/chat/completions`, `GET /v1/models`: the OpenAI wire format |
//! | [`openai_responses`] | `/v1/responses`: the OpenAI Responses API (tools as `mcp_call` items, approvals as MCP approval items, client function tools as `function_call` / `function_call_output`) |
//! | [`a2a`] | `/a2a/{tenant_id}/{agent_id}`: each assistant an A2A v1.0 agent (JSON-RPC binding: card, tasks, streaming, input-required approvals) |
//! | [`mcp`] | `/mcp` and `/mcp/{virtual_server}`: Agentry as an MCP server (Streamable HTTP), the HTTP side of `agentry_mcp_server` |
//!
//! No adapter imports another (`crate::layout` checks it): what two of them need lives in
//! [`common`], and the request's authentication (`crate::auth`, the `TenantCaller` extractor),
//! the error body (`crate::error`) and the extractors (`crate::extract`) are shared with the
//! resource routes. A new protocol is a new module here, mounted in `startup` (or, under
//! `/api/v1`, in `routes::configure`) and listed in `openapi` if it has HTTP operations to
//! document (docs/architecture.md, "Adding things").

pub mod a2a;
pub mod common;
pub mod mcp;
pub mod openai_chat;
pub mod openai_responses;
pub mod rest_chat;
pub mod sse;
pub mod ws;
