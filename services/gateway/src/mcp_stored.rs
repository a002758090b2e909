//! A user's stored MCP server: its row read as `agentry_mcp::stored` reads it ([`stored_of`])
//! and the policy column ([`RestPolicy`]: tool allow-list, rate limit, health check, and the
//! connection fields the table has no columns for). The REST routes write it, the engine's MCP
//! configuration source (`wiring::McpSources`) reads it; both come here, neither to the other.

use agentry_mcp::client::{McpServerConfig, McpTransportConfig};
use agentry_mcp::config_file::ServerPolicy;
use agentry_mcp::stored::StoredMcpServer;
use agentry_store::mcp_servers::McpServerRow;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};

/// The body fields beyond how to connect: what the MCP config file says of a platform server
/// (`tools`, `rate_limit`, `health_check`), for a user's server over REST.
const POLICY_FIELDS: [&str; 3] = ["allowed_tools", "rate_limit_per_minute", "health_check"];

/// A user's server's tool allow-list, rate limit and health check, stored as `mcp_servers.policy`
/// and given to the pool as the config file's [`ServerPolicy`]. Every field is optional: unset
/// is the pool's default (every tool, no rate limit, `mcp.health_interval_secs`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestPolicy {
    /// Only these of the server's tools (its own names, not `<server>__<tool>`) are offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// Tool calls per minute to this server (per user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_per_minute: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<RestHealthCheck>,
    /// How to reach the server, not policy: the body's `connect_timeout_secs` (when not the
    /// default) and a stdio server's `cwd` (relative to the user's workspace), kept here because
    /// the table has no columns for them ([`agentry_mcp::stored`]). Shown in the view by the
    /// server's own fields, not as policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestHealthCheck {
    /// HTTP servers only: a path on the server's own origin (`/health`), fetched instead of an
    /// MCP ping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

impl RestPolicy {
    /// Take the policy fields out of a POST/PUT body (what is left is the connection), and check
    /// them against the server they are for.
    pub fn take(body: &mut Value) -> ApiResult<Option<RestPolicy>> {
        let Value::Object(o) = body else {
            return Ok(None);
        };
        let mut fields = serde_json::Map::new();
        for k in POLICY_FIELDS {
            if let Some(v) = o.remove(k).filter(|v| !v.is_null()) {
                fields.insert(k.to_string(), v);
            }
        }
        if fields.is_empty() {
            return Ok(None);
        }
        let policy: RestPolicy = serde_path_to_error::deserialize(Value::Object(fields))
            .map_err(crate::extract::json_error)?;
        Ok(Some(policy))
    }

    pub fn check(&self, config: &McpServerConfig) -> ApiResult<()> {
        if let Some(tools) = &self.allowed_tools {
            if tools.len() > 1000 {
                return Err(ApiError::validation(
                    "allowed_tools",
                    "at most 1000 tool names",
                ));
            }
            if let Some(bad) = tools
                .iter()
                .find(|t| t.trim().is_empty() || t.len() > 128 || t.trim() != t.as_str())
            {
                return Err(ApiError::validation(
                    "allowed_tools",
                    format!("{bad:?} is not a tool name (1-128 characters, no surrounding spaces)"),
                ));
            }
        }
        if let Some(limit) = self.rate_limit_per_minute
            && !(1..=1_000_000).contains(&limit)
        {
            return Err(ApiError::validation(
                "rate_limit_per_minute",
                "must be between 1 and 1000000 calls per minute (leave it out for no limit)",
            ));
        }
        if let Some(h) = &self.health_check {
            if let Some(endpoint) = &h.endpoint {
                if !matches!(config.transport, McpTransportConfig::Http(_)) {
                    return Err(ApiError::validation(
                        "health_check.endpoint",
                        "is only for HTTP servers (a stdio server is checked with an MCP ping)",
                    ));
                }
                // A path on the server's own origin: never `//host` (another origin) or odd
                // characters a URL join could read as more than a path.
                let path_like = endpoint.starts_with('/')
                    && !endpoint.starts_with("//")
                    && endpoint.len() <= 256
                    && endpoint
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "/._~-".contains(c));
                if !path_like {
                    return Err(ApiError::validation(
                        "health_check.endpoint",
                        format!(
                            "{endpoint:?} must be a path on the server, like /health (letters, digits and / . _ ~ -)"
                        ),
                    ));
                }
            }
            for (field, v, max) in [
                ("health_check.interval_secs", h.interval_secs, 86_400),
                ("health_check.timeout_secs", h.timeout_secs, 300),
            ] {
                if let Some(v) = v
                    && !(1..=max).contains(&v)
                {
                    return Err(ApiError::validation(
                        field,
                        format!("must be between 1 and {max} seconds"),
                    ));
                }
            }
            if let (Some(i), Some(t)) = (h.interval_secs, h.timeout_secs)
                && t > i
            {
                return Err(ApiError::validation(
                    "health_check.timeout_secs",
                    format!("{t} s is longer than the interval ({i} s)"),
                ));
            }
        }
        Ok(())
    }

    /// As the pool takes it (the config file's form).
    pub fn server_policy(&self) -> ServerPolicy {
        let h = self.health_check.clone().unwrap_or_default();
        ServerPolicy {
            health_endpoint: h.endpoint,
            health_interval: h.interval_secs.map(std::time::Duration::from_secs),
            health_timeout: h.timeout_secs.map(std::time::Duration::from_secs),
            rate_limit_per_minute: self.rate_limit_per_minute,
            tool_allow_list: self
                .allowed_tools
                .as_ref()
                .map(|t| t.iter().cloned().collect()),
            ..ServerPolicy::default()
        }
    }

    /// The stored policy of a row: `Ok(None)` when none is set.
    pub fn of_row(
        row: &agentry_store::mcp_servers::McpServerRow,
    ) -> Result<Option<RestPolicy>, String> {
        row.policy
            .clone()
            .map(|v| {
                serde_json::from_value(v)
                    .map_err(|e| format!("its stored policy cannot be read: {e}"))
            })
            .transpose()
    }

    /// The policy column of a row: the policy and the connection fields that have no column.
    pub fn stored(
        policy: Option<&RestPolicy>,
        stored: &agentry_mcp::stored::StoredMcpServer,
    ) -> Option<Value> {
        let mut p = policy.cloned().unwrap_or_default();
        p.connect_timeout_secs = (stored.connect_timeout_secs
            != agentry_mcp::client::config::DEFAULT_CONNECT_TIMEOUT_SECS)
            .then_some(stored.connect_timeout_secs);
        p.cwd = stored.cwd.clone();
        (p != RestPolicy::default())
            .then(|| serde_json::to_value(p).ok())
            .flatten()
    }
}

/// A row as [`agentry_mcp::stored`] reads it: `connect_timeout_secs` and `cwd` come from the
/// policy column (no columns of their own); a policy that cannot be read gives the defaults here
/// and keeps the server out of runs ([`crate::wiring::McpSources::servers_for`]).
pub fn stored_of(row: &McpServerRow) -> StoredMcpServer {
    let policy = RestPolicy::of_row(row).ok().flatten().unwrap_or_default();
    StoredMcpServer {
        connect_timeout_secs: policy
            .connect_timeout_secs
            .unwrap_or(agentry_mcp::client::config::DEFAULT_CONNECT_TIMEOUT_SECS),
        cwd: policy.cwd,
        name: row.name.clone(),
        transport: row.transport.clone(),
        command: row.command.clone(),
        args: row.args.clone(),
        url: row.url.clone(),
        env_encrypted: row.env_encrypted.clone(),
        headers_encrypted: row.headers_encrypted.clone(),
        disabled: row.disabled,
        timeout_secs: row.timeout_secs,
    }
}
