//! agentry-builtin: the built-in tool services (DESIGN §8), mounted in-process by the engine with
//! [`builtin_registry`] and runnable as stdio MCP servers with `agentry tool-server <name>`, and
//! the memory tools ([`memory`]) and the skill tools ([`skills`]), which need the store and are
//! added to the registry at start when there is one
//! (`agentry_actors::tools::PlatformTools::with_memory` and `with_skills`).
//!
//! | service | tools |
//! |---|---|
//! | `files` | read_file, write_file, edit_file, list_directory, copy_file, glob, grep |
//! | `shell` | execute |
//! | `web` | http_request, fetch_url, web_search (only with a search key) |
//! | `system` | get_system_stats |
//! | `services` | get_service_status, start_service, stop_service, restart_service |
//! | `todos` | write_todos |
//! | `interaction` | ask_question, get_user_input, confirm_action, get_user_preference |
//! | `memory` | remember, recall, forget |
//! | `skills` | load_skill, read_skill_file |
//! | `data` | list_data_sources, describe_data_source, run_sql, create_report ([`data`]) |
//!
//! Each tool only does its work; the tool-call pipeline (`agentry_tools::pipeline`) applies
//! approval, RBAC, schema validation, timeouts, audit and event emission around it. The guards
//! the tools (and the MCP client) share live here too: [`jail`] (paths inside a workspace),
//! [`command_guard`] (what `shell` may run) and [`net_guard`] (which addresses may be reached).

pub mod command_guard;
pub mod config;
pub mod data;
pub mod files;
pub mod interaction;
pub mod jail;
pub mod memory;
pub mod net_guard;
pub mod services;
pub mod shell;
pub mod skills;
pub mod system;
#[cfg(test)]
pub(crate) mod test_support;
pub mod todos;
pub mod web;

use std::str::FromStr;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

pub use config::BuiltinConfig;

use agentry_tools::tool::{Tool, ToolError, ToolRegistry};

/// One built-in service; the RBAC `service` part of its tools' permissions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BuiltinService {
    Files,
    Shell,
    Web,
    System,
    Services,
    Todos,
    Interaction,
}

impl BuiltinService {
    pub const ALL: [BuiltinService; 7] = [
        BuiltinService::Files,
        BuiltinService::Shell,
        BuiltinService::Web,
        BuiltinService::System,
        BuiltinService::Services,
        BuiltinService::Todos,
        BuiltinService::Interaction,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BuiltinService::Files => "files",
            BuiltinService::Shell => "shell",
            BuiltinService::Web => "web",
            BuiltinService::System => "system",
            BuiltinService::Services => "services",
            BuiltinService::Todos => "todos",
            BuiltinService::Interaction => "interaction",
        }
    }

    /// The tools of this service, built for `cfg`.
    pub fn tools(self, cfg: &BuiltinConfig) -> Vec<Arc<dyn Tool>> {
        match self {
            BuiltinService::Files => files::tools(cfg),
            BuiltinService::Shell => shell::tools(cfg),
            BuiltinService::Web => web::tools(cfg),
            BuiltinService::System => system::tools(cfg),
            BuiltinService::Services => services::tools(cfg),
            BuiltinService::Todos => todos::tools(cfg),
            BuiltinService::Interaction => interaction::tools(cfg),
        }
    }
}

impl std::fmt::Display for BuiltinService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown built-in service {0:?}; expected one of files, shell, web, system, services, todos, interaction, or all"
)]
pub struct UnknownService(pub String);

impl FromStr for BuiltinService {
    type Err = UnknownService;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BuiltinService::ALL
            .into_iter()
            .find(|svc| svc.as_str() == s.trim())
            .ok_or_else(|| UnknownService(s.to_string()))
    }
}

/// Parse a service selection such as `files`, `files,shell` or `all`.
pub fn parse_selection(s: &str) -> Result<Vec<BuiltinService>, UnknownService> {
    if s.trim() == "all" {
        return Ok(BuiltinService::ALL.to_vec());
    }
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let svc: BuiltinService = part.parse()?;
        if !out.contains(&svc) {
            out.push(svc);
        }
    }
    if out.is_empty() {
        return Err(UnknownService(s.to_string()));
    }
    Ok(out)
}

/// The built-in tools of the selected services, ready for the engine to mount in-process.
pub fn builtin_registry(cfg: &BuiltinConfig, selection: &[BuiltinService]) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for service in selection {
        for tool in service.tools(cfg) {
            // Our own schemas are fixed and covered by `every_builtin_tool_registers`; a failure
            // here is a programming error, reported rather than crashing the server.
            if let Err(e) = registry.register(tool) {
                tracing::error!(service = %service, error = %e, "built-in tool not registered");
            }
        }
    }
    registry
}

/// Decode a call's arguments into the tool's own type; a mismatch is an argument error the
/// model can fix.
pub(crate) fn parse_args<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    let args = if args.is_null() {
        Value::Object(Default::default())
    } else {
        args
    };
    serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments {
        message: format!("arguments for {tool} are not valid: {e}"),
        details: Value::Null,
    })
}

/// Run blocking file-system work off the async runtime.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ToolError::failed(format!("the operation was aborted: {e}")))?
}

/// Cut `s` to at most `max` bytes on a character boundary; true when something was cut.
pub(crate) fn truncate_utf8(s: &mut String, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    s.truncate(s.floor_char_boundary(max));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_search_key() -> BuiltinConfig {
        BuiltinConfig {
            search_api_key: "k".into(),
            ..BuiltinConfig::default()
        }
    }

    #[test]
    fn every_builtin_tool_registers() {
        let cfg = with_search_key();
        let reg = builtin_registry(&cfg, &BuiltinService::ALL);
        let expected: usize = BuiltinService::ALL
            .iter()
            .map(|s| s.tools(&cfg).len())
            .sum();
        assert_eq!(reg.len(), expected);
        let names: Vec<&str> = reg.names().collect();
        for name in [
            "read_file",
            "write_file",
            "edit_file",
            "list_directory",
            "copy_file",
            "glob",
            "grep",
            "execute",
            "http_request",
            "fetch_url",
            "web_search",
            "get_system_stats",
            "get_service_status",
            "start_service",
            "stop_service",
            "restart_service",
            "write_todos",
            "ask_question",
            "get_user_input",
            "confirm_action",
            "get_user_preference",
        ] {
            assert!(names.contains(&name), "{name} missing from {names:?}");
        }
        assert_eq!(reg.len(), 21);
        for spec in reg.specs() {
            assert!(
                !spec.description.is_empty(),
                "{} has no description",
                spec.name
            );
            assert_eq!(spec.input_schema["type"], "object", "{}", spec.name);
            assert_eq!(spec.service_tool, spec.name);
        }
    }

    #[test]
    fn web_search_is_registered_only_with_a_key() {
        let reg = builtin_registry(&BuiltinConfig::default(), &[BuiltinService::Web]);
        assert!(!reg.contains("web_search"));
        assert!(reg.contains("fetch_url"));
        let reg = builtin_registry(&with_search_key(), &[BuiltinService::Web]);
        assert!(reg.contains("web_search"));
    }

    #[test]
    fn the_high_risk_tools_of_design_4_need_approval() {
        let reg = builtin_registry(&with_search_key(), &BuiltinService::ALL);
        for name in [
            "execute",
            "write_file",
            "edit_file",
            "stop_service",
            "restart_service",
            "start_service",
            "fetch_url",
            "web_search",
            "http_request",
        ] {
            assert!(reg.get(name).unwrap().spec().requires_approval, "{name}");
        }
        for name in [
            "read_file",
            "list_directory",
            "get_system_stats",
            "write_todos",
            "ask_question",
        ] {
            assert!(!reg.get(name).unwrap().spec().requires_approval, "{name}");
        }
    }

    #[test]
    fn selections_parse() {
        assert_eq!(parse_selection("all").unwrap().len(), 7);
        assert_eq!(
            parse_selection("files, shell,files").unwrap(),
            vec![BuiltinService::Files, BuiltinService::Shell]
        );
        assert!(parse_selection("nope").is_err());
        assert!(parse_selection("").is_err());
        let reg = builtin_registry(&BuiltinConfig::default(), &[BuiltinService::Todos]);
        assert_eq!(reg.names().collect::<Vec<_>>(), vec!["write_todos"]);
    }

    fn wrong_value_for(schema: &Value) -> Option<Value> {
        Some(match schema.get("type")?.as_str()? {
            "string" => serde_json::json!(123),
            "integer" | "number" => serde_json::json!("12"),
            "boolean" => serde_json::json!("yes"),
            "array" => serde_json::json!("a"),
            "object" => serde_json::json!(5),
            _ => return None,
        })
    }

    fn good_value_for(schema: &Value) -> Value {
        match schema.get("type").and_then(Value::as_str) {
            Some("integer" | "number") => serde_json::json!(1),
            Some("boolean") => serde_json::json!(true),
            Some("array") => serde_json::json!([]),
            Some("object") => serde_json::json!({}),
            _ => serde_json::json!("x"),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

        /// Seed property 7: arguments that do not match a built-in tool's schema are rejected
        /// before the call, with the offending field named; a missing required field too.
        #[test]
        fn arguments_that_break_a_schema_are_rejected_with_the_field_named(
            tool in proptest::sample::select((0..21usize).collect::<Vec<_>>()),
            field in proptest::prelude::any::<proptest::sample::Index>(),
            drop_it in proptest::prelude::any::<bool>(),
        ) {
            let reg = builtin_registry(&with_search_key(), &BuiltinService::ALL);
            let spec = reg.specs().nth(tool).unwrap().clone();
            let props = spec.input_schema["properties"].as_object().cloned().unwrap_or_default();
            let required: Vec<String> = spec.input_schema["required"]
                .as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
                .unwrap_or_default();
            let typed: Vec<&String> = props.keys().filter(|k| wrong_value_for(&props[*k]).is_some()).collect();
            proptest::prop_assume!(!typed.is_empty());
            let mut args = serde_json::Map::new();
            for r in &required {
                args.insert(r.clone(), good_value_for(&props[r]));
            }
            let target = typed[field.index(typed.len())].clone();
            if drop_it && required.contains(&target) {
                args.remove(&target);
            } else {
                args.insert(target.clone(), wrong_value_for(&props[&target]).unwrap());
            }
            let err = reg.validate(&spec.name, &Value::Object(args)).unwrap_err();
            let ToolError::InvalidArguments { details, .. } = err else {
                return Err(proptest::test_runner::TestCaseError::fail("not a validation error"));
            };
            let named = details["violations"].as_array().unwrap().iter().any(|v| {
                v["path"] == format!("/{target}")
                    || (v["path"] == "" && v["message"].as_str().unwrap_or("").contains(target.as_str()))
            });
            proptest::prop_assert!(named, "{} {}: {}", spec.name, target, details);
        }
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        let mut s = "héllo".to_string();
        assert!(truncate_utf8(&mut s, 2));
        assert_eq!(s, "h");
        let mut s = "abc".to_string();
        assert!(!truncate_utf8(&mut s, 3));
    }
}
