//! sea-orm entities, one module per table (DESIGN §9). Every tenant-owned table has a
//! `tenant_id` column; the store's repositories filter on it in every query.

pub mod a2a_push_config;
pub mod api_key;
pub mod approval;
pub mod assistant;
pub mod checkpoint;
pub mod data_source;
pub mod execution;
pub mod mcp_oauth_state;
pub mod mcp_oauth_token;
pub mod mcp_server;
pub mod membership;
pub mod memory;
pub mod message;
pub mod model_connection;
pub mod platform_admin_key;
pub mod profile;
pub mod remote_agent;
pub mod server_lease;
pub mod session;
pub mod session_event;
pub mod skill;
pub mod skill_file;
pub mod tenant;
pub mod tool_call_log;
pub mod user;
pub mod webhook_delivery;
pub mod webhook_secret;
