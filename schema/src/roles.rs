//! Tenant-defined roles (issue 17, item 5), beside the built-in `admin` and `member`.
//!
//! A custom role is a member-level role with its own tool permissions and its own list of REST
//! areas: a user or key holding it has no admin rights, may call the tools its patterns grant,
//! and may use only the REST areas it lists. The definitions live with the tenant
//! (`tenants.custom_roles`), so every request and run that already holds its tenant knows them;
//! `memberships.role` and `api_keys.role` hold the role's name.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::tenancy::Role;

/// The name of a custom role: 1–32 characters of `a-z`, `0-9`, `_`, `-`, starting with a letter,
/// and neither `admin` nor `member`. Small and `Copy`, so the caller's scope stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RoleName {
    len: u8,
    bytes: [u8; RoleName::MAX_LEN],
}

impl RoleName {
    pub const MAX_LEN: usize = 32;

    pub fn parse(s: &str) -> Result<Self, String> {
        let ok_start = s.bytes().next().is_some_and(|b| b.is_ascii_lowercase());
        let ok_chars = s
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if s.is_empty() || s.len() > Self::MAX_LEN || !ok_start || !ok_chars {
            return Err(format!(
                "{s:?} is not a role name: use 1-{} characters of a-z, 0-9, _ and -, starting with a letter",
                Self::MAX_LEN
            ));
        }
        if s == "admin" || s == "member" {
            return Err(format!(
                "{s:?} is a built-in role; a custom role needs another name"
            ));
        }
        let mut bytes = [0u8; Self::MAX_LEN];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Ok(Self {
            len: s.len() as u8,
            bytes,
        })
    }

    pub fn as_str(&self) -> &str {
        // Built only from checked ASCII.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl FromStr for RoleName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s)
    }
}

impl fmt::Display for RoleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for RoleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RoleName({:?})", self.as_str())
    }
}

impl Serialize for RoleName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RoleName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// What a membership or an API key holds: a built-in role or a custom one. A custom role is
/// member-level: `role` is then `Member`. Stored as one text (`memberships.role`,
/// `api_keys.role`): `admin`, `member` or the custom role's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Grant {
    pub role: Role,
    pub custom: Option<RoleName>,
}

impl Grant {
    pub fn custom(name: RoleName) -> Self {
        Self {
            role: Role::Member,
            custom: Some(name),
        }
    }

    /// The stored text.
    pub fn as_str(&self) -> &str {
        match &self.custom {
            Some(n) => n.as_str(),
            None => self.role.as_str(),
        }
    }

    /// The grant a stored text names; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        match Role::parse(text) {
            Some(role) => Some(role.into()),
            None => RoleName::parse(text).ok().map(Self::custom),
        }
    }

    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// What a grant made earlier (a key's, a run's) gives now that its user holds `user`: the
    /// grant itself under a tenant admin, who may hold any role of the tenant; for anyone else
    /// exactly the user's role, so it never gives more than the user has.
    pub fn under(self, user: Grant) -> Grant {
        if user.is_admin() { self } else { user }
    }
}

/// A role named in a path (`/api/v1/tenant/roles/{role}`).
impl FromStr for Grant {
    type Err = crate::ids::InvalidId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s).ok_or_else(|| crate::ids::InvalidId {
            kind: "role",
            value: s.chars().take(64).collect(),
            reason: "must be admin, member or a custom role's name: 1-32 characters of a-z, 0-9, _ and -, starting with a letter",
        })
    }
}

impl From<Role> for Grant {
    fn from(role: Role) -> Self {
        Self { role, custom: None }
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A part of the REST API a custom role may be given. Every route a member may use belongs to
/// one area, except `/api/v1/me` and the health and documentation routes, which every key may
/// read. The tenant and platform administration routes are admin-only whatever the role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RestArea {
    /// Sessions, chat over REST/SSE/WebSocket, and the OpenAI-compatible `/v1` endpoints.
    Chat,
    /// Assistants (`/api/v1/agents`), profiles and remote A2A agents.
    Agents,
    /// The tenant's model connections.
    Models,
    /// The user's MCP servers.
    McpServers,
    /// The tenant's data sources.
    DataSources,
    /// The user's workspace files.
    Files,
    /// Skills.
    Skills,
    /// Long-term memories.
    Memories,
    /// Runs and tool calls (`/api/v1/executions`, `/api/v1/tool-calls`).
    Audit,
    /// The MCP endpoint `/mcp`.
    Mcp,
}

impl RestArea {
    pub const ALL: [RestArea; 10] = [
        RestArea::Chat,
        RestArea::Agents,
        RestArea::Models,
        RestArea::McpServers,
        RestArea::DataSources,
        RestArea::Files,
        RestArea::Skills,
        RestArea::Memories,
        RestArea::Audit,
        RestArea::Mcp,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RestArea::Chat => "chat",
            RestArea::Agents => "agents",
            RestArea::Models => "models",
            RestArea::McpServers => "mcp_servers",
            RestArea::DataSources => "data_sources",
            RestArea::Files => "files",
            RestArea::Skills => "skills",
            RestArea::Memories => "memories",
            RestArea::Audit => "audit",
            RestArea::Mcp => "mcp",
        }
    }

    /// The area of a request path; `None` for routes every key may use (or that check the
    /// caller's rights themselves: the admin routes).
    pub fn of_path(path: &str) -> Option<RestArea> {
        let first = |prefix: &str| {
            path.strip_prefix(prefix)
                .map(|rest| rest.split('/').next().unwrap_or(""))
        };
        // A user's own resources: `/api/v1/users/{user_id}/{mcp-servers|skills}…`.
        if let Some(rest) = path.strip_prefix("/api/v1/users/") {
            let mut segs = rest.split('/');
            return match (segs.next(), segs.next()) {
                (_, Some("mcp-servers")) => Some(RestArea::McpServers),
                (_, Some("skills")) => Some(RestArea::Skills),
                // No such route (404); a new one gets its area here, and the authorization
                // matrix's custom-role column fails until it does.
                _ => None,
            };
        }
        if let Some(seg) = first("/api/v1/") {
            return match seg {
                "sessions" | "chat" => Some(RestArea::Chat),
                "agents" | "profiles" | "remote-agents" => Some(RestArea::Agents),
                "model-connections" => Some(RestArea::Models),
                "mcp-servers" => Some(RestArea::McpServers),
                "data-sources" => Some(RestArea::DataSources),
                "files" => Some(RestArea::Files),
                "skills" => Some(RestArea::Skills),
                "memories" => Some(RestArea::Memories),
                "executions" | "tool-calls" => Some(RestArea::Audit),
                _ => None,
            };
        }
        if path.starts_with("/ws/chat/") || path.starts_with("/v1/") {
            return Some(RestArea::Chat);
        }
        // An A2A agent's JSON-RPC endpoint runs chats; its public card needs no key.
        if path.starts_with("/a2a/") && !path.ends_with("/.well-known/agent-card.json") {
            return Some(RestArea::Chat);
        }
        if path == "/mcp" || path.starts_with("/mcp/") {
            return Some(RestArea::Mcp);
        }
        None
    }
}

impl fmt::Display for RestArea {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One custom role's definition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CustomRole {
    pub description: String,
    /// Tool permission patterns (`service:tool`, `service:prefix*`, `service:*`, `*:*`, and
    /// denials with a leading `!`), checked before every tool call of the role.
    pub tools: Vec<String>,
    /// The REST areas the role may use.
    pub areas: Vec<RestArea>,
}

impl CustomRole {
    pub fn allows_area(&self, area: RestArea) -> bool {
        self.areas.contains(&area)
    }
}

/// A tenant's custom roles by name (`tenants.custom_roles`).
pub type CustomRoles = BTreeMap<RoleName, CustomRole>;

/// One MCP virtual server's definition: the tools `/mcp/{name}` serves (issue 18; docs/mcp.md,
/// "Virtual servers").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpVirtualServer {
    pub description: String,
    /// Tool patterns, as in a role; the caller's role still applies.
    pub tools: Vec<String>,
}

/// A tenant's MCP virtual servers by name (`tenants.mcp_virtual_servers`).
pub type McpVirtualServers = BTreeMap<crate::ids::VirtualServerName, McpVirtualServer>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(RoleName::parse("analyst").unwrap().as_str(), "analyst");
        assert_eq!(
            RoleName::parse("a-b_9").unwrap().to_string(),
            "a-b_9".to_string()
        );
        for bad in ["", "Admin", "admin", "member", "9lives", "with space", "é"] {
            assert!(RoleName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(RoleName::parse(&"a".repeat(32)).is_ok());
        assert!(RoleName::parse(&"a".repeat(33)).is_err());
    }

    #[test]
    fn grants_are_stored_as_one_text() {
        for text in ["admin", "member", "analyst"] {
            assert_eq!(Grant::parse(text).unwrap().as_str(), text);
        }
        assert!(Grant::parse("analyst").unwrap().role == Role::Member);
        assert!(Grant::parse("Analyst").is_none());
        assert!(Grant::parse("").is_none());
    }

    #[test]
    fn names_round_trip_through_json() {
        let n: RoleName = serde_json::from_str("\"auditor\"").unwrap();
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"auditor\"");
        assert!(serde_json::from_str::<RoleName>("\"member\"").is_err());
    }

    #[test]
    fn every_member_route_has_its_area() {
        let cases = [
            ("/api/v1/sessions", Some(RestArea::Chat)),
            ("/api/v1/sessions/x/messages", Some(RestArea::Chat)),
            ("/api/v1/chat", Some(RestArea::Chat)),
            ("/ws/chat/abc", Some(RestArea::Chat)),
            ("/v1/chat/completions", Some(RestArea::Chat)),
            ("/api/v1/agents/a", Some(RestArea::Agents)),
            ("/api/v1/profiles", Some(RestArea::Agents)),
            ("/api/v1/model-connections", Some(RestArea::Models)),
            ("/api/v1/mcp-servers/x", Some(RestArea::McpServers)),
            ("/api/v1/data-sources", Some(RestArea::DataSources)),
            ("/api/v1/files/a/b.txt", Some(RestArea::Files)),
            ("/api/v1/skills", Some(RestArea::Skills)),
            ("/api/v1/users/u1/skills/a/file", Some(RestArea::Skills)),
            ("/api/v1/users/u1/mcp-servers", Some(RestArea::McpServers)),
            ("/api/v1/memories/search", Some(RestArea::Memories)),
            ("/api/v1/executions", Some(RestArea::Audit)),
            ("/api/v1/tool-calls", Some(RestArea::Audit)),
            ("/mcp", Some(RestArea::Mcp)),
            ("/mcp/reports", Some(RestArea::Mcp)),
            ("/api/v1/me", None),
            ("/api/v1/health", None),
            ("/api/v1/tenant/users", None),
            ("/api/v1/admin/tenants", None),
            ("/mcpx", None),
            ("/", None),
        ];
        for (path, area) in cases {
            assert_eq!(RestArea::of_path(path), area, "{path}");
        }
    }
}
