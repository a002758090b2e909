//! A tenant's policy: the rights the platform admin gives a tenant's roles, and the sandbox
//! limits its processes run under (DESIGN §13). Stored as one JSON value per tenant; a missing
//! value or a missing field means the default, which is always the strict choice.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tenancy::Role;

/// What the tenant's roles may do beyond their tool permissions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct TenantPolicy {
    /// The least role that may add a stdio MCP server (a program the server starts), on top of
    /// the tenant's `stdio_mcp` feature: `admin` (default) or `member`.
    pub stdio_mcp_role: StdioMcpRole,
    /// Whether members may switch approvals off (`auto_approve` on a session, an agent or a
    /// decision). Default false: only tenant admins may.
    pub members_may_auto_approve: bool,
    /// Whether the tenant's assistants must use one of the tenant's own model connections
    /// (default false: an assistant without one runs on the platform's model). When true, a
    /// run of an assistant without a connection fails with `model_not_configured`.
    pub own_models_only: bool,
    /// Sandbox limits for this tenant's processes. They can only tighten the server's
    /// `[sandbox]` limits, never loosen them.
    pub sandbox: SandboxPolicy,
}

/// The least role that may add stdio MCP servers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum StdioMcpRole {
    #[default]
    Admin,
    Member,
}

/// A tenant's sandbox limits; an absent limit is the server's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct SandboxPolicy {
    /// Whether the tenant's processes may open network connections (default false). Applies
    /// only where the server's sandbox lets network through at all.
    pub egress: bool,
    /// CPU seconds per process tree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_secs: Option<u64>,
    /// Address space per process, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Processes per process tree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_processes: Option<u64>,
    /// Largest file a process may write, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_file_bytes: Option<u64>,
    /// Open files per process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_open_files: Option<u64>,
}

/// A policy value that breaks a rule serde cannot express, with the field it names
/// (`sandbox.cpu_secs`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PolicyError {
    pub field: String,
    pub message: String,
}

/// Largest accepted limit: limits are handed to `setrlimit` and stored in signed columns.
pub const MAX_LIMIT: u64 = i64::MAX as u64;

impl TenantPolicy {
    /// Whether a caller of this role may add a stdio MCP server.
    pub fn may_add_stdio_mcp(&self, is_admin: bool) -> bool {
        is_admin || self.stdio_mcp_role == StdioMcpRole::Member
    }

    /// Whether a caller of this role may switch approvals off.
    pub fn may_auto_approve(&self, is_admin: bool) -> bool {
        is_admin || self.members_may_auto_approve
    }

    /// The role a caller needs to add stdio MCP servers, as the API names it.
    pub fn stdio_mcp_role(&self) -> Role {
        match self.stdio_mcp_role {
            StdioMcpRole::Admin => Role::Admin,
            StdioMcpRole::Member => Role::Member,
        }
    }

    /// Check the rules the types do not: every limit is at least 1 and at most [`MAX_LIMIT`].
    pub fn validate(&self) -> Result<(), PolicyError> {
        let s = &self.sandbox;
        for (name, value) in [
            ("cpu_secs", s.cpu_secs),
            ("memory_bytes", s.memory_bytes),
            ("max_processes", s.max_processes),
            ("max_file_bytes", s.max_file_bytes),
            ("max_open_files", s.max_open_files),
        ] {
            if let Some(v) = value
                && !(1..=MAX_LIMIT).contains(&v)
            {
                return Err(PolicyError {
                    field: format!("sandbox.{name}"),
                    message: format!(
                        "`sandbox.{name}` must be between 1 and {MAX_LIMIT} (leave it out for the server's limit)"
                    ),
                });
            }
        }
        Ok(())
    }

    /// This policy as JSON, for storage and for merge patches.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Apply an RFC 7396 JSON merge patch: objects merge key by key, `null` removes a key (so the
/// field returns to its default), anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(map) = target {
        for (k, v) in patch {
            if v.is_null() {
                map.remove(k);
            } else {
                merge_patch(map.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_empty_or_missing_policy_is_the_strict_default() {
        let p: TenantPolicy = serde_json::from_value(json!({})).unwrap();
        assert_eq!(p, TenantPolicy::default());
        assert!(!p.may_add_stdio_mcp(false));
        assert!(p.may_add_stdio_mcp(true));
        assert!(!p.may_auto_approve(false));
        assert!(p.may_auto_approve(true));
        assert!(!p.sandbox.egress);
        assert_eq!(
            p.to_json(),
            json!({"stdio_mcp_role": "admin", "members_may_auto_approve": false,
                   "own_models_only": false, "sandbox": {"egress": false}})
        );
    }

    #[test]
    fn unknown_fields_and_bad_values_are_refused() {
        assert!(
            serde_json::from_value::<TenantPolicy>(json!({"stdio_mcp_rol": "member"})).is_err()
        );
        assert!(serde_json::from_value::<TenantPolicy>(json!({"stdio_mcp_role": "root"})).is_err());
        assert!(
            serde_json::from_value::<TenantPolicy>(json!({"sandbox": {"cpu_secs": -1}})).is_err()
        );
        assert!(
            serde_json::from_value::<TenantPolicy>(json!({"sandbox": {"network": true}})).is_err()
        );
        let p: TenantPolicy =
            serde_json::from_value(json!({"sandbox": {"max_processes": 0}})).unwrap();
        assert_eq!(p.validate().unwrap_err().field, "sandbox.max_processes");
        let p: TenantPolicy =
            serde_json::from_value(json!({"sandbox": {"memory_bytes": u64::MAX}})).unwrap();
        assert_eq!(p.validate().unwrap_err().field, "sandbox.memory_bytes");
    }

    #[test]
    fn a_merge_patch_changes_only_what_it_names() {
        let mut v = TenantPolicy {
            stdio_mcp_role: StdioMcpRole::Member,
            sandbox: SandboxPolicy {
                cpu_secs: Some(5),
                max_processes: Some(32),
                ..SandboxPolicy::default()
            },
            ..TenantPolicy::default()
        }
        .to_json();
        merge_patch(
            &mut v,
            &json!({"members_may_auto_approve": true, "sandbox": {"cpu_secs": null, "egress": true}}),
        );
        let p: TenantPolicy = serde_json::from_value(v).unwrap();
        assert_eq!(p.stdio_mcp_role, StdioMcpRole::Member);
        assert!(p.members_may_auto_approve);
        assert_eq!(p.sandbox.cpu_secs, None);
        assert_eq!(p.sandbox.max_processes, Some(32));
        assert!(p.sandbox.egress);
    }
}
