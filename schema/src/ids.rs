//! Identifier newtypes. A `TenantId` cannot be passed where a `UserId` is expected, and a string
//! from a client becomes an id only through `TryFrom`/`FromStr`, which says what was wrong.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {value:?} is not valid: {reason}")]
pub struct InvalidId {
    pub kind: &'static str,
    pub value: String,
    pub reason: &'static str,
}

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh id. v7 ids sort by creation time, which keeps index inserts cheap.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            pub fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.hyphenated().fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self).map_err(|_| InvalidId {
                    kind: $kind,
                    value: s.chars().take(64).collect(),
                    reason: "expected a UUID",
                })
            }
        }

        impl TryFrom<&str> for $name {
            type Error = InvalidId;
            fn try_from(s: &str) -> Result<Self, Self::Error> {
                s.parse()
            }
        }

        impl From<Uuid> for $name {
            fn from(u: Uuid) -> Self {
                Self(u)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Uuid {
                id.0
            }
        }
    };
}

uuid_id!(
    /// A tenant: the unit of isolation.
    TenantId,
    "tenant id"
);
uuid_id!(
    /// A user of a tenant.
    UserId,
    "user id"
);
uuid_id!(
    /// A conversation.
    SessionId,
    "session id"
);
uuid_id!(
    /// One run of the agent loop (an execution row).
    RunId,
    "run id"
);
uuid_id!(
    /// A pending approval or question.
    ApprovalId,
    "approval id"
);
uuid_id!(
    /// A long-term memory.
    MemoryId,
    "memory id"
);
uuid_id!(
    /// An API key's row id (not the key itself).
    ApiKeyId,
    "api key id"
);

/// An assistant's id within its tenant: a slug such as `default` or `sre-oncall`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AssistantId(String);

impl AssistantId {
    pub const DEFAULT: &'static str = "default";

    pub fn default_assistant() -> Self {
        Self(Self::DEFAULT.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AssistantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for AssistantId {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        let bad = |reason| InvalidId {
            kind: "assistant id",
            value: s.chars().take(64).collect(),
            reason,
        };
        if s.is_empty() || s.len() > 64 {
            return Err(bad("must be 1 to 64 characters"));
        }
        if !s
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        {
            return Err(bad("use lowercase letters, digits, '-' and '_' only"));
        }
        if !s.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(bad("must start with a letter or digit"));
        }
        Ok(Self(s))
    }
}

impl TryFrom<&str> for AssistantId {
    type Error = InvalidId;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        Self::try_from(s.to_string())
    }
}

impl FromStr for AssistantId {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::try_from(s)
    }
}

impl From<AssistantId> for String {
    fn from(id: AssistantId) -> String {
        id.0
    }
}

/// The name of an MCP server of a user: `[a-zA-Z0-9_-]{1,64}` without `__` (tool names are
/// `<server>__<tool>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct McpServerName(String);

impl McpServerName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for McpServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for McpServerName {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        let bad = |reason| InvalidId {
            kind: "MCP server name",
            value: s.chars().take(64).collect(),
            reason,
        };
        if s.is_empty() || s.len() > 64 {
            return Err(bad("must be 1 to 64 characters"));
        }
        if !s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(bad("use letters, digits, '-' and '_' only"));
        }
        if s.contains("__") {
            return Err(bad(
                "must not contain `__` (tool names are <server>__<tool>)",
            ));
        }
        Ok(Self(s))
    }
}

impl FromStr for McpServerName {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::try_from(s.to_string())
    }
}

impl From<McpServerName> for String {
    fn from(n: McpServerName) -> String {
        n.0
    }
}

/// Checks a slug: 1–64 of `a-z 0-9 - _`, starting with a letter or digit (the shape of every
/// id a tenant chooses itself: assistants, profiles, model connections, skills).
fn check_slug(kind: &'static str, s: &str) -> Result<(), InvalidId> {
    let bad = |reason| InvalidId {
        kind,
        value: s.chars().take(64).collect(),
        reason,
    };
    if s.is_empty() || s.len() > 64 {
        return Err(bad("must be 1 to 64 characters"));
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    {
        return Err(bad("use lowercase letters, digits, '-' and '_' only"));
    }
    if !s.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(bad("must start with a letter or digit"));
    }
    Ok(())
}

macro_rules! slug_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidId;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                check_slug($kind, &s)?;
                Ok(Self(s))
            }
        }

        impl TryFrom<&str> for $name {
            type Error = InvalidId;
            fn try_from(s: &str) -> Result<Self, Self::Error> {
                Self::try_from(s.to_string())
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::try_from(s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }
    };
}

slug_id!(
    /// An agent profile: a built-in one (`general`, `devops`, `sre`, `orchestrator`) or one of
    /// the tenant's own.
    ProfileId,
    "profile id"
);
slug_id!(
    /// A tenant's model connection (its own provider endpoint and key).
    ModelConnectionId,
    "model connection id"
);
slug_id!(
    /// A tenant's registered remote A2A agent (a `task` target).
    RemoteAgentId,
    "remote agent id"
);
slug_id!(
    /// A tenant's data source (a database the data tools may query).
    DataSourceId,
    "data source id"
);
slug_id!(
    /// A skill's name, from its `SKILL.md` front matter.
    SkillName,
    "skill name"
);
slug_id!(
    /// A tenant's MCP virtual server: a named subset of tools served at `/mcp/{name}`.
    VirtualServerName,
    "virtual server name"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_and_print_the_same() {
        let id = SessionId::new();
        assert_eq!(id.to_string().parse::<SessionId>().unwrap(), id);
        let err = "nope".parse::<TenantId>().unwrap_err();
        assert_eq!(err.kind, "tenant id");
    }

    #[test]
    fn mcp_server_names() {
        assert!("github_tools".parse::<McpServerName>().is_ok());
        assert!("a-b".parse::<McpServerName>().is_ok());
        assert!("a__b".parse::<McpServerName>().is_err());
        assert!("Bad!Id".parse::<McpServerName>().is_err());
        assert!("".parse::<McpServerName>().is_err());
    }

    #[test]
    fn chosen_ids_are_slugs() {
        assert!(ProfileId::try_from("sre").is_ok());
        assert!(ModelConnectionId::try_from("acme-openai_2").is_ok());
        let e = SkillName::try_from("Bad Name").unwrap_err();
        assert_eq!(e.kind, "skill name");
        assert!(SkillName::try_from("../x").is_err());
        assert!(ProfileId::try_from("_lead").is_err());
        assert!(ProfileId::try_from("x".repeat(65)).is_err());
    }

    #[test]
    fn assistant_ids_are_slugs() {
        assert!(AssistantId::try_from("default").is_ok());
        assert!(AssistantId::try_from("sre-oncall_2").is_ok());
        assert!(AssistantId::try_from("").is_err());
        assert!(AssistantId::try_from("Has Space").is_err());
        assert!(AssistantId::try_from("-leading").is_err());
        assert!(AssistantId::try_from("x".repeat(65)).is_err());
    }
}
