//! Role-based tool permissions (seed 003 §7): which role may call which `service:tool`.
//!
//! A permission is `service:tool`, `service:prefix*` (a prefix wildcard: `files:read_*`),
//! `service:*` or `*:*`; a leading `!` makes it a denial, and a denial beats any grant. Each
//! tenant may configure the lists per role as JSON (`{"member": [...], "admin": [...]}`); a role
//! the configuration leaves out keeps its default.
//!
//! Defaults:
//! - `admin`: `*:*` (everything).
//! - `member`: everything except what reaches past the user's own workspace onto the host:
//!   `shell:*` (a shell is not jailed: it could read other users' workspaces) and
//!   `services:start_service|stop_service|restart_service` (they change the host for every
//!   tenant). Members keep `services:get_service_status`, the jailed file tools, web (behind
//!   the private-address policy and approval), system stats, todos, interaction, memory, task,
//!   and their MCP servers' tools.
//!
//! This module is pure logic; the agent loop calls [`Permissions::check`] before every tool
//! call and turns a [`PermissionDenied`] into a structured error for the model and an audit row.

use std::fmt;
use std::str::FromStr;

use agentry_schema::tenancy::Role;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::tool::ToolError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid tool permissions: {0}")]
pub struct RbacConfigError(pub String);

/// One part of a permission: a name, a prefix wildcard (`read_*`) or `*`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Part {
    Any,
    Name(String),
    /// Every name that starts with this (`read_*`: `read_file`, `read_skill_file`, …).
    Prefix(String),
}

impl Part {
    fn matches(&self, name: &str) -> bool {
        match self {
            Part::Any => true,
            Part::Name(n) => n == name,
            Part::Prefix(p) => name.starts_with(p.as_str()),
        }
    }
}

/// `service:tool`, `service:*`, `*:*`, or with a prefix wildcard (`files:read_*`), granted or
/// (with a leading `!`) denied.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Permission {
    deny: bool,
    service: Part,
    tool: Part,
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

impl Permission {
    pub fn allow(service: &str, tool: &str) -> Result<Self, RbacConfigError> {
        format!("{service}:{tool}").parse()
    }

    pub fn is_denial(&self) -> bool {
        self.deny
    }

    pub fn matches(&self, service: &str, tool: &str) -> bool {
        self.service.matches(service) && self.tool.matches(tool)
    }
}

impl FromStr for Permission {
    type Err = RbacConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let raw = s.trim();
        let (deny, body) = match raw.strip_prefix('!') {
            Some(rest) => (true, rest.trim()),
            None => (false, raw),
        };
        let Some((service, tool)) = body.split_once(':') else {
            return Err(RbacConfigError(format!(
                "{s:?} is not a permission; write service:tool, service:prefix_*, service:* or *:*"
            )));
        };
        let part = |p: &str, what: &str| -> Result<Part, RbacConfigError> {
            if p == "*" {
                Ok(Part::Any)
            } else if valid_name(p) {
                Ok(Part::Name(p.to_string()))
            } else if let Some(prefix) = p.strip_suffix('*')
                && valid_name(prefix)
            {
                Ok(Part::Prefix(prefix.to_string()))
            } else {
                Err(RbacConfigError(format!(
                    "{s:?}: the {what} {p:?} must be *, a name of letters, digits, _ - ., or such a name ending in * (a prefix)"
                )))
            }
        };
        let service = part(service, "service")?;
        let tool = part(tool, "tool")?;
        if service == Part::Any && tool != Part::Any {
            return Err(RbacConfigError(format!(
                "{s:?}: *:tool is not supported; name the service"
            )));
        }
        Ok(Self {
            deny,
            service,
            tool,
        })
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let part = |p: &Part| match p {
            Part::Any => "*".to_string(),
            Part::Name(n) => n.clone(),
            Part::Prefix(n) => format!("{n}*"),
        };
        write!(
            f,
            "{}{}:{}",
            if self.deny { "!" } else { "" },
            part(&self.service),
            part(&self.tool)
        )
    }
}

impl Serialize for Permission {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Permission {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The permissions of one role.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Permissions(Vec<Permission>);

impl Permissions {
    pub fn new(list: Vec<Permission>) -> Self {
        Self(list)
    }

    pub fn parse<S: AsRef<str>>(list: &[S]) -> Result<Self, RbacConfigError> {
        list.iter()
            .map(|s| s.as_ref().parse())
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    pub fn all() -> Self {
        Self(vec![Permission {
            deny: false,
            service: Part::Any,
            tool: Part::Any,
        }])
    }

    /// Some grant covers `service:tool` and no denial does.
    pub fn allows(&self, service: &str, tool: &str) -> bool {
        let denied = self.0.iter().any(|p| p.deny && p.matches(service, tool));
        let granted = self.0.iter().any(|p| !p.deny && p.matches(service, tool));
        granted && !denied
    }

    pub fn list(&self) -> &[Permission] {
        &self.0
    }

    /// The check the loop runs before a call, for the role named `role`.
    pub fn check(&self, role: &str, service: &str, tool: &str) -> Result<(), PermissionDenied> {
        if self.allows(service, tool) {
            Ok(())
        } else {
            Err(PermissionDenied {
                role: role.to_string(),
                service: service.to_string(),
                tool: tool.to_string(),
            })
        }
    }
}

/// The permissions of every role in one tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolePermissions {
    #[serde(default = "admin_default")]
    pub admin: Permissions,
    #[serde(default = "member_default")]
    pub member: Permissions,
}

fn admin_default() -> Permissions {
    Permissions::all()
}

fn member_default() -> Permissions {
    Permissions::parse(&[
        "*:*",
        "!shell:*",
        "!services:start_service",
        "!services:stop_service",
        "!services:restart_service",
    ])
    .unwrap_or_default()
}

impl Default for RolePermissions {
    fn default() -> Self {
        Self {
            admin: admin_default(),
            member: member_default(),
        }
    }
}

impl RolePermissions {
    /// A tenant's configuration: `{"member": [...], "admin": [...]}`; `null` or a missing role
    /// means the defaults.
    pub fn from_json(value: &Value) -> Result<Self, RbacConfigError> {
        if value.is_null() {
            return Ok(Self::default());
        }
        if let Some(obj) = value.as_object()
            && let Some(unknown) = obj.keys().find(|k| *k != "admin" && *k != "member")
        {
            return Err(RbacConfigError(format!(
                "unknown role {unknown:?}; expected admin or member"
            )));
        }
        serde_json::from_value(value.clone()).map_err(|e| RbacConfigError(e.to_string()))
    }

    pub fn for_role(&self, role: Role) -> &Permissions {
        match role {
            Role::Admin => &self.admin,
            Role::Member => &self.member,
        }
    }

    pub fn allows(&self, role: Role, service: &str, tool: &str) -> bool {
        self.for_role(role).allows(service, tool)
    }

    /// The check the loop runs before a call.
    pub fn check(&self, role: Role, service: &str, tool: &str) -> Result<(), PermissionDenied> {
        self.for_role(role).check(role.as_str(), service, tool)
    }
}

/// A call the caller's role may not make.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {role} role may not use {service}:{tool}; ask a tenant admin to grant `{service}:{tool}` or `{service}:*`"
)]
pub struct PermissionDenied {
    /// `admin`, `member` or a custom role's name.
    pub role: String,
    pub service: String,
    pub tool: String,
}

impl PermissionDenied {
    /// The structured details for the audit row and the model.
    pub fn details(&self) -> Value {
        json!({
            "role": self.role,
            "service": self.service,
            "tool": self.tool,
            "required": format!("{}:{}", self.service, self.tool),
        })
    }
}

impl From<PermissionDenied> for ToolError {
    fn from(e: PermissionDenied) -> Self {
        ToolError::PermissionDenied(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn permissions_parse_and_print() {
        for s in [
            "files:read_file",
            "files:*",
            "*:*",
            "!shell:*",
            "my-server:do.it",
            "files:read_*",
            "!files:write*",
            "git*:*",
        ] {
            let p: Permission = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
        }
        for bad in [
            "files",
            "*:read_file",
            "*:read_*",
            "files:*read",
            "files:re*d",
            "files:**",
            "files:",
            ":x",
            "a b:c",
            "files:read file",
            "",
        ] {
            assert!(bad.parse::<Permission>().is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_keep_members_off_the_host() {
        let rp = RolePermissions::default();
        for (service, tool) in [
            ("shell", "execute"),
            ("services", "start_service"),
            ("services", "stop_service"),
            ("services", "restart_service"),
        ] {
            assert!(!rp.allows(Role::Member, service, tool), "{service}:{tool}");
            assert!(rp.allows(Role::Admin, service, tool), "{service}:{tool}");
        }
        for (service, tool) in [
            ("files", "write_file"),
            ("web", "fetch_url"),
            ("services", "get_service_status"),
            ("todos", "write_todos"),
            ("interaction", "ask_question"),
            ("github", "create_issue"),
        ] {
            assert!(rp.allows(Role::Member, service, tool), "{service}:{tool}");
        }
    }

    #[test]
    fn tenant_config_replaces_a_role_and_keeps_the_other() {
        let rp =
            RolePermissions::from_json(&json!({"member": ["files:read_file", "interaction:*"]}))
                .unwrap();
        assert!(rp.allows(Role::Member, "files", "read_file"));
        assert!(!rp.allows(Role::Member, "files", "write_file"));
        assert!(rp.allows(Role::Member, "interaction", "confirm_action"));
        assert!(rp.allows(Role::Admin, "shell", "execute"));
        assert!(RolePermissions::from_json(&json!({"guest": []})).is_err());
        assert!(RolePermissions::from_json(&json!({"member": ["nope"]})).is_err());
        assert_eq!(
            RolePermissions::from_json(&Value::Null).unwrap(),
            RolePermissions::default()
        );
    }

    /// Issue 17: `files:read_*` grants the reading tools and nothing else of the service.
    #[test]
    fn prefix_wildcards_cover_the_names_they_start() {
        let p =
            Permissions::parse(&["files:read_*", "interaction:*", "!interaction:ask_*"]).unwrap();
        assert!(p.allows("files", "read_file"));
        assert!(p.allows("files", "read_"));
        assert!(!p.allows("files", "write_file"));
        assert!(!p.allows("files", "list_directory"));
        assert!(!p.allows("filesx", "read_file"));
        assert!(p.allows("interaction", "confirm_action"));
        assert!(!p.allows("interaction", "ask_question"));
        let rp = RolePermissions::from_json(&json!({"member": ["files:read_*"]})).unwrap();
        assert!(rp.allows(Role::Member, "files", "read_file"));
        assert!(!rp.allows(Role::Member, "files", "edit_file"));
    }

    #[test]
    fn denials_are_structured() {
        let rp = RolePermissions::default();
        let err = rp.check(Role::Member, "shell", "execute").unwrap_err();
        assert_eq!(err.details()["required"], "shell:execute");
        assert!(
            err.to_string()
                .contains("member role may not use shell:execute")
        );
        let tool_err: ToolError = err.into();
        assert_eq!(
            tool_err.code(),
            agentry_schema::error::ErrorCode::PermissionDenied
        );
        assert!(rp.check(Role::Admin, "shell", "execute").is_ok());
    }

    fn name() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9_]{0,8}"
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// `*:*` allows every service:tool.
        #[test]
        fn star_star_allows_everything(service in name(), tool in name()) {
            prop_assert!(Permissions::all().allows(&service, &tool));
        }

        /// A pair covered by no permission is denied.
        #[test]
        fn an_absent_permission_denies(
            granted in prop::collection::vec((name(), name()), 0..6),
            service in name(), tool in name(),
        ) {
            prop_assume!(!granted.iter().any(|(s, t)| *s == service && *t == tool));
            let perms = Permissions::parse(&granted.iter().map(|(s, t)| format!("{s}:{t}")).collect::<Vec<_>>()).unwrap();
            prop_assert!(!perms.allows(&service, &tool));
            for (s, t) in &granted {
                prop_assert!(perms.allows(s, t));
            }
        }

        /// `service:*` covers every tool of that service and nothing of any other.
        #[test]
        fn service_star_covers_exactly_that_service(service in name(), other in name(), tool in name()) {
            let perms = Permissions::parse(&[format!("{service}:*")]).unwrap();
            prop_assert!(perms.allows(&service, &tool));
            prop_assert_eq!(perms.allows(&other, &tool), other == service);
        }

        /// `service:prefix*` covers exactly that service's tools whose names start with the prefix.
        #[test]
        fn a_prefix_covers_exactly_the_names_it_starts(service in name(), other in name(), prefix in "[a-z]{1,3}", tool in name()) {
            let perms = Permissions::parse(&[format!("{service}:{prefix}*")]).unwrap();
            prop_assert_eq!(perms.allows(&service, &tool), tool.starts_with(&prefix));
            prop_assert_eq!(perms.allows(&other, &tool), other == service && tool.starts_with(&prefix));
        }

        /// A denial beats any grant.
        #[test]
        fn a_denial_beats_any_grant(service in name(), tool in name()) {
            let perms = Permissions::parse(&["*:*".to_string(), format!("{service}:*"), format!("!{service}:{tool}")]).unwrap();
            prop_assert!(!perms.allows(&service, &tool));
        }
    }
}
