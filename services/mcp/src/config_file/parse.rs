//! From the file's text to [`McpFileConfig`], collecting every problem with its path.
//!
//! The text is read into a JSON tree first (YAML merge keys `<<:` applied), then walked by hand:
//! serde would stop at the first problem and could not say where in the file it was. Each entry
//! is turned into an [`McpServerConfig`] whose own [`McpServerConfig::validate`] checks the rest;
//! its field names are mapped back to the file's spelling.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use agentry_schema::secret::Secret;
use serde_json::{Map, Value};

use super::{FileFormat, FileIssue, FileServerEntry, LoadedConfig, McpFileConfig, ServerPolicy};
use crate::client::config::{
    DEFAULT_API_KEY_HEADER, DEFAULT_CONNECT_TIMEOUT_SECS, DEFAULT_TIMEOUT_SECS, HttpAuth,
    HttpConfig, McpServerConfig, McpTransportConfig, StdioConfig,
};

pub(super) fn parse_document(
    text: &str,
    format: FileFormat,
) -> Result<LoadedConfig, Vec<FileIssue>> {
    if text.trim().is_empty() {
        return Ok(LoadedConfig {
            config: McpFileConfig::default(),
            warnings: Vec::new(),
        });
    }
    let root = to_tree(text, format)?;
    let mut w = Walker::default();
    let servers = w.root(&root);
    if w.issues.is_empty() {
        Ok(LoadedConfig {
            config: McpFileConfig { servers },
            warnings: w.warnings,
        })
    } else {
        Err(w.issues)
    }
}

fn to_tree(text: &str, format: FileFormat) -> Result<Value, Vec<FileIssue>> {
    let whole_file = |message: String| {
        vec![FileIssue {
            path: String::new(),
            message,
        }]
    };
    match format {
        FileFormat::Json => {
            serde_json::from_str(text).map_err(|e| whole_file(format!("not valid JSON: {e}")))
        }
        FileFormat::Yaml => {
            let mut yaml: yaml_serde::Value = yaml_serde::from_str(text)
                .map_err(|e| whole_file(format!("not valid YAML: {e}")))?;
            yaml.apply_merge().map_err(|e| {
                whole_file(format!("YAML merge key (<<) could not be applied: {e}"))
            })?;
            let mut tags = Vec::new();
            find_tags(&yaml, "", &mut tags);
            if !tags.is_empty() {
                return Err(tags);
            }
            serde_json::to_value(yaml).map_err(|e| {
                whole_file(format!(
                    "unsupported YAML (mapping keys must be strings): {e}"
                ))
            })
        }
    }
}

/// YAML tags (`!Ref`, `!!binary`) have no meaning here; said plainly rather than as a type error.
fn find_tags(v: &yaml_serde::Value, path: &str, out: &mut Vec<FileIssue>) {
    match v {
        yaml_serde::Value::Tagged(t) => out.push(FileIssue {
            path: path.to_string(),
            message: format!(
                "YAML tags such as {} are not supported (write the plain value)",
                t.tag
            ),
        }),
        yaml_serde::Value::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                find_tags(item, &index_path(path, i), out);
            }
        }
        yaml_serde::Value::Mapping(m) => {
            for (k, item) in m {
                let key = match k {
                    yaml_serde::Value::String(s) => s.clone(),
                    other => format!("{other:?}"),
                };
                find_tags(item, &key_path(path, &key), out);
            }
        }
        _ => {}
    }
}

// ---- paths ----

fn is_plain_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn key_path(base: &str, key: &str) -> String {
    match (base.is_empty(), is_plain_key(key)) {
        (true, true) => key.to_string(),
        (false, true) => format!("{base}.{key}"),
        (_, false) => format!("{base}[{key:?}]"),
    }
}

fn index_path(base: &str, i: usize) -> String {
    format!("{base}[{i}]")
}

// ---- the three kinds of entry and their keys ----

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `mcp_servers.external_services[i]`: Streamable HTTP.
    External,
    /// `mcp_servers.local_services[i]`: stdio.
    Local,
    /// `servers[i]`: the flat McpServerConfig shape.
    Flat,
}

const POLICY_KEYS: &[&str] = &[
    "description",
    "version",
    "health_check",
    "rate_limit",
    "tools",
];
const COMMON_KEYS: &[&str] = &["name", "timeout_secs", "connect_timeout_secs", "disabled"];
const HTTP_KEYS: &[&str] = &["url", "headers"];
const STDIO_KEYS: &[&str] = &["command", "args", "env", "cwd"];

const SOCKET_HINT: &str = "Unix-socket servers are not supported: give `command` (and `args`) to \
                           run the server as a child process over stdio";

impl Kind {
    fn allowed(self) -> Vec<&'static str> {
        let mut keys: Vec<&str> = COMMON_KEYS.iter().chain(POLICY_KEYS).copied().collect();
        match self {
            Kind::External => {
                keys.extend(HTTP_KEYS);
                keys.push("authentication");
            }
            Kind::Local => keys.extend(STDIO_KEYS),
            Kind::Flat => {
                keys.extend(HTTP_KEYS);
                keys.extend(STDIO_KEYS);
                keys.extend(["transport", "auth"]);
            }
        }
        keys
    }

    fn hint(self, key: &str) -> Option<&'static str> {
        match (self, key) {
            (Kind::External, "auth") => Some(
                "use `authentication` here (`auth` is the spelling of the flat `servers:` list)",
            ),
            (Kind::External, "command" | "args" | "env" | "cwd" | "socket_path") => Some(
                "external services are reached over HTTP: put servers run as a command under \
                 local_services",
            ),
            (Kind::Local, "url" | "headers" | "authentication" | "auth") => {
                Some("local services run as a command: put HTTP servers under external_services")
            }
            (Kind::External | Kind::Local, "transport") => Some(
                "the section says the transport (external_services: HTTP, local_services: \
                 stdio), so leave it out",
            ),
            (Kind::Local | Kind::Flat, "socket_path") => Some(SOCKET_HINT),
            (Kind::Flat, "authentication") => Some(
                "use `auth` in the flat `servers:` list (`authentication` is for mcp_servers:)",
            ),
            (_, "timeout") => Some(
                "use `timeout_secs` (per tool call) or `connect_timeout_secs` (start or connect \
                 plus the handshake)",
            ),
            (_, "metadata") => Some("use `description` and `version`"),
            _ => None,
        }
    }

    /// How `McpServerConfig::validate`'s field names are spelled in this kind of entry.
    fn file_field(self, field: &str) -> String {
        match (self, field) {
            (Kind::External, "auth") => "authentication".to_string(),
            _ => field.to_string(),
        }
    }
}

/// The closest allowed key, if close enough to be a typo.
fn did_you_mean<'a>(key: &str, allowed: &[&'a str]) -> Option<&'a str> {
    let lower = key.to_ascii_lowercase().replace('-', "_");
    allowed
        .iter()
        .map(|a| (edit_distance(&lower, a), *a))
        .filter(|(d, a)| *d <= 2.min(a.len() / 3 + 1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Marker: the problem was already reported.
struct Reported;

#[derive(Default)]
struct Walker {
    issues: Vec<FileIssue>,
    warnings: Vec<FileIssue>,
}

impl Walker {
    fn issue(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.issues.push(FileIssue {
            path: path.into(),
            message: message.into(),
        });
    }

    fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(FileIssue {
            path: path.into(),
            message: message.into(),
        });
    }

    fn unknown_keys(
        &mut self,
        path: &str,
        map: &Map<String, Value>,
        allowed: &[&str],
        hint: impl Fn(&str) -> Option<&'static str>,
    ) {
        for key in map.keys() {
            if allowed.contains(&key.as_str()) {
                continue;
            }
            let message = match (hint(key), did_you_mean(key, allowed)) {
                (Some(h), _) => format!("unknown key: {h}"),
                (None, Some(close)) => format!("unknown key (did you mean `{close}`?)"),
                (None, None) => format!("unknown key (expected one of: {})", allowed.join(", ")),
            };
            self.issue(key_path(path, key), message);
        }
    }

    // ---- typed reads; null counts as absent ----

    fn string(
        &mut self,
        base: &str,
        map: &Map<String, Value>,
        key: &str,
    ) -> Result<Option<String>, Reported> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => {
                self.issue(
                    key_path(base, key),
                    format!("must be a string, not {}", type_name(other)),
                );
                Err(Reported)
            }
        }
    }

    /// A string, or a number or boolean written without quotes (`version: 1.0`, `PORT: 8080`).
    fn scalar_text(&mut self, path: &str, v: &Value) -> Result<String, Reported> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            other => {
                self.issue(
                    path,
                    format!("must be a string (or a number), not {}", type_name(other)),
                );
                Err(Reported)
            }
        }
    }

    fn scalar(
        &mut self,
        base: &str,
        map: &Map<String, Value>,
        key: &str,
    ) -> Result<Option<String>, Reported> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => self.scalar_text(&key_path(base, key), v).map(Some),
        }
    }

    fn uint(
        &mut self,
        base: &str,
        map: &Map<String, Value>,
        key: &str,
    ) -> Result<Option<u64>, Reported> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
            Some(other) => {
                self.issue(
                    key_path(base, key),
                    format!(
                        "must be a whole number of 0 or more, not {}",
                        describe(other)
                    ),
                );
                Err(Reported)
            }
        }
    }

    fn positive(
        &mut self,
        base: &str,
        map: &Map<String, Value>,
        key: &str,
        unit: &str,
    ) -> Result<Option<u64>, Reported> {
        match self.uint(base, map, key)? {
            Some(0) => {
                self.issue(key_path(base, key), format!("must be at least 1 {unit}"));
                Err(Reported)
            }
            other => Ok(other),
        }
    }

    fn boolean(
        &mut self,
        base: &str,
        map: &Map<String, Value>,
        key: &str,
    ) -> Result<Option<bool>, Reported> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => {
                self.issue(
                    key_path(base, key),
                    format!("must be true or false, not {}", describe(other)),
                );
                Err(Reported)
            }
        }
    }

    fn object<'v>(
        &mut self,
        path: &str,
        v: &'v Value,
        what: &str,
    ) -> Result<&'v Map<String, Value>, Reported> {
        match v {
            Value::Object(m) => Ok(m),
            other => {
                self.issue(path, format!("must be {what}, not {}", type_name(other)));
                Err(Reported)
            }
        }
    }

    fn list<'v>(&mut self, path: &str, v: &'v Value, what: &str) -> Result<&'v [Value], Reported> {
        match v {
            Value::Array(items) => Ok(items),
            other => {
                self.issue(path, format!("must be {what}, not {}", type_name(other)));
                Err(Reported)
            }
        }
    }

    fn string_list(
        &mut self,
        base: &str,
        map: &Map<String, Value>,
        key: &str,
    ) -> Result<Option<Vec<String>>, Reported> {
        let Some(v) = map.get(key).filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let path = key_path(base, key);
        let items = self.list(&path, v, "a list of strings")?;
        let mut out = Vec::with_capacity(items.len());
        let mut failed = false;
        for (i, item) in items.iter().enumerate() {
            match self.scalar_text(&index_path(&path, i), item) {
                Ok(s) => out.push(s),
                Err(Reported) => failed = true,
            }
        }
        if failed { Err(Reported) } else { Ok(Some(out)) }
    }

    fn secret_map(
        &mut self,
        base: &str,
        map: &Map<String, Value>,
        key: &str,
    ) -> Result<Option<BTreeMap<String, Secret>>, Reported> {
        let Some(v) = map.get(key).filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let path = key_path(base, key);
        let m = self.object(&path, v, "a mapping of names to values")?;
        let mut out = BTreeMap::new();
        let mut failed = false;
        for (k, item) in m {
            match self.scalar_text(&key_path(&path, k), item) {
                Ok(s) => {
                    out.insert(k.clone(), Secret::new(s));
                }
                Err(Reported) => failed = true,
            }
        }
        if failed { Err(Reported) } else { Ok(Some(out)) }
    }

    // ---- the document ----

    fn root(&mut self, root: &Value) -> Vec<FileServerEntry> {
        let map = match root {
            Value::Null => return Vec::new(),
            Value::Object(m) => m,
            other => {
                self.issue(
                    "",
                    format!(
                        "the file must be a mapping with `mcp_servers:` or `servers:` at the top, \
                         not {}",
                        type_name(other)
                    ),
                );
                return Vec::new();
            }
        };
        self.unknown_keys("", map, &["mcp_servers", "servers"], |k| match k {
            "external_services" | "local_services" => Some("put it under `mcp_servers:`"),
            _ => None,
        });
        if map.contains_key("mcp_servers") && map.contains_key("servers") {
            self.issue(
                "servers",
                "give either `mcp_servers:` (external_services / local_services) or `servers:` \
                 (a flat list), not both",
            );
            return Vec::new();
        }
        let mut entries: Vec<(String, FileServerEntry)> = Vec::new();
        if let Some(v) = map.get("mcp_servers").filter(|v| !v.is_null())
            && let Ok(sections) = self.object(
                "mcp_servers",
                v,
                "a mapping with external_services and/or local_services",
            )
        {
            self.unknown_keys(
                "mcp_servers",
                sections,
                &["external_services", "local_services"],
                |k| match k {
                    "servers" => Some("a flat `servers:` list goes at the top level"),
                    "builtin_services" | "builtin" => {
                        Some("built-in tools are configured per assistant, not here")
                    }
                    _ => None,
                },
            );
            for (section, kind) in [
                ("external_services", Kind::External),
                ("local_services", Kind::Local),
            ] {
                let path = key_path("mcp_servers", section);
                if let Some(v) = sections.get(section).filter(|v| !v.is_null()) {
                    entries.extend(self.section(&path, v, kind));
                }
            }
        }
        if let Some(v) = map.get("servers").filter(|v| !v.is_null()) {
            entries.extend(self.section("servers", v, Kind::Flat));
        }
        let mut seen: HashMap<String, String> = HashMap::new();
        let mut servers = Vec::with_capacity(entries.len());
        for (path, entry) in entries {
            if let Some(first) = seen.get(&entry.config.name) {
                self.issue(
                    key_path(&path, "name"),
                    format!(
                        "{:?} is already the name of {first} (names must be unique in the file)",
                        entry.config.name
                    ),
                );
                continue;
            }
            seen.insert(entry.config.name.clone(), path);
            servers.push(entry);
        }
        servers
    }

    fn section(&mut self, path: &str, v: &Value, kind: Kind) -> Vec<(String, FileServerEntry)> {
        let Ok(items) = self.list(path, v, "a list of servers") else {
            return Vec::new();
        };
        items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| {
                let p = index_path(path, i);
                let map = self.object(&p, item, "a mapping (one server)").ok()?;
                self.entry(&p, map, kind).map(|e| (p, e))
            })
            .collect()
    }

    /// One server. `None` when it has problems (all of them reported).
    fn entry(
        &mut self,
        base: &str,
        map: &Map<String, Value>,
        kind: Kind,
    ) -> Option<FileServerEntry> {
        let before = self.issues.len();
        self.unknown_keys(base, map, &kind.allowed(), |k| kind.hint(k));
        // Fields whose problems were reported here; validate()'s view of them is noise.
        let mut bad: BTreeSet<String> = BTreeSet::new();
        macro_rules! read {
            ($key:literal, $e:expr) => {
                match $e {
                    Ok(v) => v,
                    Err(Reported) => {
                        bad.insert($key.to_string());
                        None
                    }
                }
            };
        }

        let name = read!("name", self.string(base, map, "name"));
        if name.is_none() && !bad.contains("name") {
            self.issue(key_path(base, "name"), "is required");
            bad.insert("name".into());
        }
        let timeout_secs = read!("timeout_secs", self.uint(base, map, "timeout_secs"));
        let connect_timeout_secs = read!(
            "connect_timeout_secs",
            self.uint(base, map, "connect_timeout_secs")
        );
        let disabled = read!("disabled", self.boolean(base, map, "disabled"));

        let is_http = match kind {
            Kind::External => Some(true),
            Kind::Local => Some(false),
            Kind::Flat => self.flat_transport(base, map, &mut bad),
        };
        let transport = match is_http {
            Some(true) => self.http_transport(base, map, kind, &mut bad),
            Some(false) => self.stdio_transport(base, map, &mut bad),
            None => None,
        };
        let policy = self.policy(base, map, is_http);

        // validate() runs even when other fields had problems, so one pass reports everything.
        let config = transport.map(|transport| McpServerConfig {
            name: name.unwrap_or_default(),
            transport,
            timeout_secs: timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS),
            connect_timeout_secs: connect_timeout_secs.unwrap_or(DEFAULT_CONNECT_TIMEOUT_SECS),
            disabled: disabled.unwrap_or(false),
        });
        if let Some(config) = &config {
            self.validation_issues(base, config, kind, &bad);
        }
        if self.issues.len() > before {
            return None;
        }
        let (config, policy) = (config?, policy?);
        if !config.disabled {
            self.unset_env_warnings(base, &config, kind);
        }
        Some(FileServerEntry { config, policy })
    }

    /// Report what `validate()` finds, at file paths, except for fields already reported.
    fn validation_issues(
        &mut self,
        base: &str,
        config: &McpServerConfig,
        kind: Kind,
        bad: &BTreeSet<String>,
    ) {
        let Err(err) = config.validate() else {
            return;
        };
        for issue in err.issues {
            let (top, rest) = match issue.field.split_once('.') {
                Some((t, r)) => (t, Some(r)),
                None => (issue.field.as_str(), None),
            };
            let top = kind.file_field(top);
            if bad.contains(&top) {
                continue;
            }
            let path = match rest {
                Some(rest) => key_path(&key_path(base, &top), rest),
                None => key_path(base, &top),
            };
            self.issue(path, issue.message);
        }
    }

    /// The flat shape's `transport`, or inferred from `command` / `url`.
    fn flat_transport(
        &mut self,
        base: &str,
        map: &Map<String, Value>,
        bad: &mut BTreeSet<String>,
    ) -> Option<bool> {
        let present = |k: &str| map.get(k).is_some_and(|v| !v.is_null());
        let given = match self.string(base, map, "transport") {
            Ok(None) => None,
            Ok(Some(t)) => match t.as_str() {
                "stdio" => Some(false),
                "http" | "streamable_http" | "streamable-http" => Some(true),
                other => {
                    self.issue(
                        key_path(base, "transport"),
                        format!("{other:?} is not a transport (use stdio or http)"),
                    );
                    bad.insert("transport".into());
                    return None;
                }
            },
            Err(Reported) => {
                bad.insert("transport".into());
                return None;
            }
        };
        let is_http = match (given, present("command"), present("url")) {
            (Some(h), _, _) => h,
            (None, true, false) => false,
            (None, false, true) => true,
            (None, true, true) => {
                self.issue(
                    key_path(base, "transport"),
                    "both command and url are set: say which with transport: stdio | http",
                );
                return None;
            }
            (None, false, false) => {
                self.issue(
                    base,
                    "needs `command` (a server run over stdio) or `url` (a Streamable HTTP server)",
                );
                return None;
            }
        };
        let (wrong, owner) = if is_http {
            (STDIO_KEYS, "transport: stdio")
        } else {
            (&["url", "headers", "auth"][..], "transport: http")
        };
        for key in wrong {
            if present(key) {
                self.issue(key_path(base, key), format!("is only for {owner}"));
                bad.insert((*key).to_string());
            }
        }
        Some(is_http)
    }

    fn http_transport(
        &mut self,
        base: &str,
        map: &Map<String, Value>,
        kind: Kind,
        bad: &mut BTreeSet<String>,
    ) -> Option<McpTransportConfig> {
        let url = match self.string(base, map, "url") {
            Ok(Some(u)) => u,
            Ok(None) => {
                self.issue(
                    key_path(base, "url"),
                    "is required (the server's Streamable HTTP endpoint, e.g. https://host/mcp)",
                );
                bad.insert("url".into());
                String::new()
            }
            Err(Reported) => {
                bad.insert("url".into());
                String::new()
            }
        };
        let headers = match self.secret_map(base, map, "headers") {
            Ok(h) => h.unwrap_or_default(),
            Err(Reported) => {
                bad.insert("headers".into());
                BTreeMap::new()
            }
        };
        let auth_key = if kind == Kind::External {
            "authentication"
        } else {
            "auth"
        };
        let auth = match map.get(auth_key).filter(|v| !v.is_null()) {
            None => HttpAuth::None,
            Some(v) => match self.auth(&key_path(base, auth_key), v) {
                Ok(a) => a,
                Err(Reported) => {
                    bad.insert(auth_key.into());
                    HttpAuth::None
                }
            },
        };
        Some(McpTransportConfig::Http(HttpConfig { url, headers, auth }))
    }

    fn stdio_transport(
        &mut self,
        base: &str,
        map: &Map<String, Value>,
        bad: &mut BTreeSet<String>,
    ) -> Option<McpTransportConfig> {
        let command = match self.string(base, map, "command") {
            Ok(Some(c)) => c,
            Ok(None) => {
                // `socket_path` in its place is reported already, with what to do instead.
                if !map.contains_key("socket_path") {
                    self.issue(
                        key_path(base, "command"),
                        "is required (the program that runs the server, e.g. npx)",
                    );
                }
                bad.insert("command".into());
                String::new()
            }
            Err(Reported) => {
                bad.insert("command".into());
                String::new()
            }
        };
        let args = match self.string_list(base, map, "args") {
            Ok(a) => a.unwrap_or_default(),
            Err(Reported) => {
                bad.insert("args".into());
                Vec::new()
            }
        };
        let env = match self.secret_map(base, map, "env") {
            Ok(e) => e.unwrap_or_default(),
            Err(Reported) => {
                bad.insert("env".into());
                BTreeMap::new()
            }
        };
        let cwd = match self.string(base, map, "cwd") {
            Ok(c) => c.map(Into::into),
            Err(Reported) => {
                bad.insert("cwd".into());
                None
            }
        };
        Some(McpTransportConfig::Stdio(StdioConfig {
            command,
            args,
            env,
            cwd,
        }))
    }

    fn auth(&mut self, path: &str, v: &Value) -> Result<HttpAuth, Reported> {
        let map = self.object(path, v, "a mapping with `type` and its fields")?;
        let Some(kind) = self.string(path, map, "type")? else {
            self.issue(
                key_path(path, "type"),
                "is required: bearer_token, api_key, basic or none",
            );
            return Err(Reported);
        };
        let allowed: &[&str] = match kind.as_str() {
            "none" => &["type"],
            "bearer" | "bearer_token" => &["type", "token_env", "token"],
            "api_key" => &["type", "key_env", "key", "header"],
            "basic" => &["type", "username_env", "password_env"],
            other => {
                let close = did_you_mean(
                    other,
                    &["bearer_token", "bearer", "api_key", "basic", "none"],
                )
                .map(|c| format!(" (did you mean `{c}`?)"))
                .unwrap_or_default();
                self.issue(
                    key_path(path, "type"),
                    format!("{other:?} is not an authentication type (bearer_token, api_key, basic, none){close}"),
                );
                return Err(Reported);
            }
        };
        let before = self.issues.len();
        self.unknown_keys(path, map, allowed, |k| match k {
            "password" | "username" => Some(
                "basic auth reads both from the environment: use username_env and password_env",
            ),
            _ => None,
        });
        let auth = match kind.as_str() {
            "none" => HttpAuth::None,
            "bearer" | "bearer_token" => HttpAuth::Bearer {
                token_env: self.string(path, map, "token_env")?,
                token: self.string(path, map, "token")?.map(Secret::new),
            },
            "api_key" => HttpAuth::ApiKey {
                key_env: self.string(path, map, "key_env")?,
                key: self.string(path, map, "key")?.map(Secret::new),
                header: self
                    .string(path, map, "header")?
                    .unwrap_or_else(|| DEFAULT_API_KEY_HEADER.to_string()),
            },
            _ => {
                let username_env = self.string(path, map, "username_env")?;
                let password_env = self.string(path, map, "password_env")?;
                for (key, v) in [
                    ("username_env", &username_env),
                    ("password_env", &password_env),
                ] {
                    if v.is_none() {
                        self.issue(key_path(path, key), "is required for basic authentication");
                    }
                }
                match (username_env, password_env) {
                    (Some(username_env), Some(password_env)) => HttpAuth::Basic {
                        username_env,
                        password_env,
                    },
                    _ => return Err(Reported),
                }
            }
        };
        if self.issues.len() > before {
            return Err(Reported);
        }
        Ok(auth)
    }

    /// The policy keys. `is_http` is `None` when the transport could not be told.
    fn policy(
        &mut self,
        base: &str,
        map: &Map<String, Value>,
        is_http: Option<bool>,
    ) -> Option<ServerPolicy> {
        let before = self.issues.len();
        let mut policy = ServerPolicy {
            description: self.string(base, map, "description").ok().flatten(),
            version: self.scalar(base, map, "version").ok().flatten(),
            ..ServerPolicy::default()
        };
        if let Some(v) = map.get("health_check").filter(|v| !v.is_null()) {
            let path = key_path(base, "health_check");
            if let Ok(h) = self.object(&path, v, "a mapping with endpoint, interval and timeout") {
                self.unknown_keys(
                    &path,
                    h,
                    &["endpoint", "interval", "timeout"],
                    |k| match k {
                        "interval_secs" | "period" => Some("use `interval` (seconds)"),
                        "timeout_secs" => Some("use `timeout` (seconds)"),
                        _ => None,
                    },
                );
                if let Ok(Some(endpoint)) = self.string(&path, h, "endpoint") {
                    if is_http == Some(false) {
                        self.issue(
                            key_path(&path, "endpoint"),
                            "is only for HTTP servers (a stdio server is checked with an MCP ping)",
                        );
                    } else if !endpoint.starts_with('/') {
                        self.issue(
                            key_path(&path, "endpoint"),
                            format!("{endpoint:?} must be a path on the server, starting with /"),
                        );
                    } else {
                        policy.health_endpoint = Some(endpoint);
                    }
                }
                let interval = self.positive(&path, h, "interval", "second").ok().flatten();
                let timeout = self.positive(&path, h, "timeout", "second").ok().flatten();
                if let (Some(i), Some(t)) = (interval, timeout)
                    && t > i
                {
                    self.issue(
                        key_path(&path, "timeout"),
                        format!("{t} s is longer than the interval ({i} s)"),
                    );
                }
                policy.health_interval = interval.map(Duration::from_secs);
                policy.health_timeout = timeout.map(Duration::from_secs);
            }
        }
        if let Ok(Some(limit)) = self.positive(base, map, "rate_limit", "call per minute") {
            match u32::try_from(limit) {
                Ok(l) => policy.rate_limit_per_minute = Some(l),
                Err(_) => self.issue(
                    key_path(base, "rate_limit"),
                    format!("{limit} is too large (calls per minute)"),
                ),
            }
        }
        if let Some(v) = map.get("tools").filter(|v| !v.is_null()) {
            policy.tool_allow_list = self.tools(&key_path(base, "tools"), v);
        }
        (self.issues.len() == before).then_some(policy)
    }

    /// `tools:` as an allow-list of names; entries are names or `{name, description, input_schema}`.
    fn tools(&mut self, path: &str, v: &Value) -> Option<BTreeSet<String>> {
        let items = self.list(path, v, "a list of tool names").ok()?;
        if items.is_empty() {
            self.issue(
                path,
                "an empty list would offer none of the server's tools (leave `tools` out to offer \
                 all of them, or set `disabled: true`)",
            );
            return None;
        }
        let mut names = BTreeSet::new();
        for (i, item) in items.iter().enumerate() {
            let p = index_path(path, i);
            let name = match item {
                Value::String(s) => Some(s.clone()),
                Value::Object(m) => {
                    self.unknown_keys(&p, m, &["name", "description", "input_schema"], |k| match k {
                        "inputSchema" | "schema" => Some("use `input_schema` (it is informational: the server's own schema is used)"),
                        _ => None,
                    });
                    if let Some(s) = m
                        .get("input_schema")
                        .filter(|s| !s.is_null() && !s.is_object())
                    {
                        self.issue(
                            key_path(&p, "input_schema"),
                            format!("must be a JSON Schema object, not {}", type_name(s)),
                        );
                    }
                    let _ = self.string(&p, m, "description");
                    match self.string(&p, m, "name") {
                        Ok(Some(n)) => Some(n),
                        Ok(None) => {
                            self.issue(key_path(&p, "name"), "is required");
                            None
                        }
                        Err(Reported) => None,
                    }
                }
                other => {
                    self.issue(
                        &p,
                        format!(
                            "must be a tool name or a mapping with `name`, not {}",
                            type_name(other)
                        ),
                    );
                    None
                }
            };
            let Some(name) = name else { continue };
            if name.trim().is_empty() {
                self.issue(&p, "a tool name must not be empty");
            } else if !names.insert(name.clone()) {
                self.issue(&p, format!("tool {name:?} is listed twice"));
            }
        }
        Some(names)
    }

    fn unset_env_warnings(&mut self, base: &str, config: &McpServerConfig, kind: Kind) {
        let McpTransportConfig::Http(h) = &config.transport else {
            return;
        };
        let auth_path = key_path(base, &kind.file_field("auth"));
        let refs: Vec<(&str, &str)> = match &h.auth {
            HttpAuth::Bearer {
                token_env: Some(v), ..
            } => vec![("token_env", v)],
            HttpAuth::ApiKey {
                key_env: Some(v), ..
            } => vec![("key_env", v)],
            HttpAuth::Basic {
                username_env,
                password_env,
            } => vec![
                ("username_env", username_env),
                ("password_env", password_env),
            ],
            _ => Vec::new(),
        };
        for (field, var) in refs {
            if std::env::var_os(var).is_none() {
                self.warn(
                    key_path(&auth_path, field),
                    format!(
                        "environment variable {var} is not set: connecting to {:?} will fail \
                         until it is",
                        config.name
                    ),
                );
            }
        }
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::Number(n) => format!("{n}"),
        Value::String(s) => format!("the string {s:?}"),
        other => type_name(other).to_string(),
    }
}
