//! A server's config as the store keeps it ([`StoredMcpServer`], one row of `mcp_servers`), and as
//! the REST API shows it ([`masked_view`]).
//!
//! [`split_for_storage`] keeps the non-secret fields in their own columns and seals the rest with
//! a [`SecretBox`]: a stdio server's `env` goes to `env_encrypted` (a JSON object of variables),
//! an HTTP server's `headers` and `auth` to `headers_encrypted` (`{"headers": …, "auth": …}`;
//! the auth goes here whole, `*_env` names included, because the table has no other place for
//! it). A blob is written only when there is something in it, so a server without secrets needs
//! no key. [`join_from_storage`] reverses it and validates the result.
//!
//! `connect_timeout_secs` (1–[`MAX_USER_CONNECT_TIMEOUT_SECS`]) and a stdio server's `cwd` have
//! no columns of their own: the store keeps them beside the server's policy (`mcp_servers.policy`,
//! the caller's business). A user's `cwd` is a directory *inside the user's workspace*, given
//! relative to it ([`check_user_cwd`]): the sandbox runs the server in the workspace and refuses
//! a working directory outside it.

use std::collections::BTreeMap;

use agentry_schema::error::ErrorCode;
use agentry_schema::secret::Secret;
use serde_json::{Value, json};

use crate::client::config::{
    ConfigError, DEFAULT_CONNECT_TIMEOUT_SECS, HttpAuth, HttpConfig, McpServerConfig,
    McpTransportConfig, StdioConfig,
};
use agentry_sealing::{SecretBox, SecretError};

use crate::config_secrets;

/// What `masked_view` shows in place of a secret value.
pub const MASK: &str = "***";

/// One server as the store's `mcp_servers` row holds it (minus ids, owner and timestamps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMcpServer {
    pub name: String,
    /// `"stdio"` or `"http"`.
    pub transport: String,
    /// Stdio only.
    pub command: Option<String>,
    /// Stdio only (empty for HTTP).
    pub args: Vec<String>,
    /// HTTP only.
    pub url: Option<String>,
    /// Sealed `{"NAME": "value", …}`; `None` when the server has no env.
    pub env_encrypted: Option<String>,
    /// Sealed `{"headers": {…}, "auth": {…}}`; `None` when there are neither.
    pub headers_encrypted: Option<String>,
    pub disabled: bool,
    pub timeout_secs: u32,
    /// Kept beside the policy (no column).
    pub connect_timeout_secs: u64,
    /// Stdio only, relative to the user's workspace; kept beside the policy (no column).
    pub cwd: Option<String>,
}

/// The longest connect timeout a user's server may have: a connect that hangs longer than this
/// holds its slot (and, for stdio, a process) for nothing.
pub const MAX_USER_CONNECT_TIMEOUT_SECS: u64 = 300;

/// A user's stdio server's `cwd`: a relative path of normal components inside the user's
/// workspace (`tools/server`, not `/srv`, `../x` or `~`), at most 1024 bytes. `Err` says why,
/// for the `cwd` field.
pub fn check_user_cwd(cwd: &std::path::Path) -> Result<String, String> {
    use std::path::Component;
    let text = cwd
        .to_str()
        .ok_or_else(|| "is not valid UTF-8".to_string())?;
    if text.is_empty() || text.len() > 1024 {
        return Err("must be 1-1024 characters".into());
    }
    if cwd.is_absolute() {
        return Err(format!(
            "{text:?} is absolute; a user's server runs in the user's workspace: give a directory inside it, relative to it (like \"tools/server\"), or leave cwd out"
        ));
    }
    if text.starts_with('~') || text.chars().any(char::is_control) {
        return Err(format!(
            "{text:?} is not a plain relative path inside the workspace"
        ));
    }
    if cwd
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "{text:?} leaves the workspace (`..`); give a directory inside it"
        ));
    }
    Ok(text.to_string())
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StorageError {
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    #[error("MCP server {server:?}: {field}: {message}")]
    NotStorable {
        server: String,
        field: &'static str,
        message: String,
    },
    #[error("MCP server {server:?}: {field}: {source}")]
    Secret {
        server: String,
        field: &'static str,
        source: SecretError,
    },
    #[error("stored MCP server {server:?} is inconsistent: {message}")]
    Corrupt { server: String, message: String },
}

impl StorageError {
    pub fn code(&self) -> ErrorCode {
        match self {
            StorageError::Invalid(_) | StorageError::NotStorable { .. } => {
                ErrorCode::ValidationError
            }
            StorageError::Secret { source, .. } => source.code(),
            StorageError::Corrupt { .. } => ErrorCode::InternalError,
        }
    }
}

/// Split a config into the row's columns, sealing env values, headers and auth. `secrets` may be
/// `None` when no key is configured; a config with something to seal then fails with
/// [`SecretError::NoKey`].
pub fn split_for_storage(
    config: &McpServerConfig,
    secrets: Option<&SecretBox>,
) -> Result<StoredMcpServer, StorageError> {
    config.validate()?;
    let not_storable = |field, message: String| StorageError::NotStorable {
        server: config.name.clone(),
        field,
        message,
    };
    if config.connect_timeout_secs > MAX_USER_CONNECT_TIMEOUT_SECS {
        return Err(not_storable(
            "connect_timeout_secs",
            format!(
                "{} s is too long: at most {MAX_USER_CONNECT_TIMEOUT_SECS} s (the default is {DEFAULT_CONNECT_TIMEOUT_SECS} s)",
                config.connect_timeout_secs
            ),
        ));
    }
    // The column is a signed 32-bit integer.
    let timeout_secs = u32::try_from(config.timeout_secs)
        .ok()
        .filter(|t| i32::try_from(*t).is_ok())
        .ok_or_else(|| {
            not_storable(
                "timeout_secs",
                format!(
                    "{} is too large (at most {})",
                    config.timeout_secs,
                    i32::MAX
                ),
            )
        })?;
    let seal = |field: &'static str, f: &dyn Fn(&SecretBox) -> Result<String, SecretError>| {
        let secret_err = |source| StorageError::Secret {
            server: config.name.clone(),
            field,
            source,
        };
        let boxed = secrets.ok_or_else(|| secret_err(SecretError::NoKey))?;
        f(boxed).map_err(secret_err)
    };
    let mut stored = StoredMcpServer {
        name: config.name.clone(),
        transport: config.transport_kind().to_string(),
        command: None,
        args: Vec::new(),
        url: None,
        env_encrypted: None,
        headers_encrypted: None,
        disabled: config.disabled,
        timeout_secs,
        connect_timeout_secs: config.connect_timeout_secs,
        cwd: None,
    };
    match &config.transport {
        McpTransportConfig::Stdio(s) => {
            if let Some(cwd) = &s.cwd {
                stored.cwd = Some(check_user_cwd(cwd).map_err(|m| not_storable("cwd", m))?);
            }
            stored.command = Some(s.command.clone());
            stored.args = s.args.clone();
            if !s.env.is_empty() {
                stored.env_encrypted = Some(seal("env", &|b| config_secrets::seal_env(b, &s.env))?);
            }
        }
        McpTransportConfig::Http(h) => {
            stored.url = Some(h.url.clone());
            if !h.headers.is_empty() || h.auth != HttpAuth::None {
                stored.headers_encrypted = Some(seal("headers/auth", &|b| {
                    config_secrets::seal_auth_and_headers(b, &h.headers, &h.auth)
                })?);
            }
        }
    }
    Ok(stored)
}

/// Rebuild the config from a row, opening the sealed parts, and validate it. A row with sealed
/// parts needs `secrets`.
pub fn join_from_storage(
    stored: &StoredMcpServer,
    secrets: Option<&SecretBox>,
) -> Result<McpServerConfig, StorageError> {
    let corrupt = |message: String| StorageError::Corrupt {
        server: stored.name.clone(),
        message,
    };
    let open = |field: &'static str| {
        let secret_err = |source| StorageError::Secret {
            server: stored.name.clone(),
            field,
            source,
        };
        secrets.ok_or_else(|| secret_err(SecretError::NoKey))
    };
    let transport = match stored.transport.as_str() {
        "stdio" => {
            if stored.url.is_some() || stored.headers_encrypted.is_some() {
                return Err(corrupt("a stdio server has url or headers".into()));
            }
            let Some(command) = stored.command.clone() else {
                return Err(corrupt("a stdio server has no command".into()));
            };
            let env = match &stored.env_encrypted {
                None => BTreeMap::new(),
                Some(sealed) => {
                    let boxed = open("env")?;
                    config_secrets::open_env(boxed, sealed).map_err(|source| {
                        StorageError::Secret {
                            server: stored.name.clone(),
                            field: "env",
                            source,
                        }
                    })?
                }
            };
            McpTransportConfig::Stdio(StdioConfig {
                command,
                args: stored.args.clone(),
                env,
                cwd: stored.cwd.as_ref().map(std::path::PathBuf::from),
            })
        }
        "http" => {
            if stored.command.is_some()
                || !stored.args.is_empty()
                || stored.env_encrypted.is_some()
                || stored.cwd.is_some()
            {
                return Err(corrupt("an http server has command, args or env".into()));
            }
            let Some(url) = stored.url.clone() else {
                return Err(corrupt("an http server has no url".into()));
            };
            let (headers, auth) = match &stored.headers_encrypted {
                None => (BTreeMap::new(), HttpAuth::None),
                Some(sealed) => {
                    let boxed = open("headers/auth")?;
                    config_secrets::open_auth_and_headers(boxed, sealed).map_err(|source| {
                        StorageError::Secret {
                            server: stored.name.clone(),
                            field: "headers/auth",
                            source,
                        }
                    })?
                }
            };
            McpTransportConfig::Http(HttpConfig { url, headers, auth })
        }
        other => return Err(corrupt(format!("unknown transport {other:?}"))),
    };
    let config = McpServerConfig {
        name: stored.name.clone(),
        transport,
        timeout_secs: u64::from(stored.timeout_secs),
        connect_timeout_secs: stored.connect_timeout_secs,
        disabled: stored.disabled,
    };
    config.validate()?;
    Ok(config)
}

/// The config as the REST API returns it: the flat shape, with every env value, header value and
/// literal token or key replaced by `"***"`. Env variable names, header names and `*_env`
/// references are shown (they are not secret and the user needs them to recognise the entry).
pub fn masked_view(config: &McpServerConfig) -> Value {
    let mask_map = |m: &BTreeMap<String, Secret>| -> Value {
        Value::Object(m.keys().map(|k| (k.clone(), json!(MASK))).collect())
    };
    let mut obj = serde_json::Map::new();
    obj.insert("name".into(), json!(config.name));
    obj.insert("transport".into(), json!(config.transport_kind()));
    obj.insert("timeout_secs".into(), json!(config.timeout_secs));
    obj.insert(
        "connect_timeout_secs".into(),
        json!(config.connect_timeout_secs),
    );
    obj.insert("disabled".into(), json!(config.disabled));
    match &config.transport {
        McpTransportConfig::Stdio(s) => {
            obj.insert("command".into(), json!(s.command));
            obj.insert("args".into(), json!(s.args));
            obj.insert("env".into(), mask_map(&s.env));
            if let Some(cwd) = &s.cwd {
                obj.insert("cwd".into(), json!(cwd.to_string_lossy()));
            }
        }
        McpTransportConfig::Http(h) => {
            obj.insert("url".into(), json!(h.url));
            obj.insert("headers".into(), mask_map(&h.headers));
            let masked = |s: &Option<Secret>| s.as_ref().map(|_| MASK);
            let auth = match &h.auth {
                HttpAuth::None => json!({"type": "none"}),
                HttpAuth::Bearer { token_env, token } => json!({
                    "type": "bearer", "token_env": token_env, "token": masked(token),
                }),
                HttpAuth::ApiKey {
                    key_env,
                    key,
                    header,
                } => json!({
                    "type": "api_key", "key_env": key_env, "key": masked(key), "header": header,
                }),
                HttpAuth::Basic {
                    username_env,
                    password_env,
                } => json!({
                    "type": "basic", "username_env": username_env, "password_env": password_env,
                }),
                HttpAuth::OAuth(o) => {
                    let mut v = json!({
                        "type": "oauth", "grant": o.grant, "client_id": o.client_id,
                        "client_secret_env": o.client_secret_env,
                        "client_secret": masked(&o.client_secret),
                        "client_metadata_url": o.client_metadata_url,
                    });
                    if !o.scopes.is_empty() {
                        v["scopes"] = json!(o.scopes);
                    }
                    v
                }
            };
            obj.insert("auth".into(), strip_nulls(auth));
        }
    }
    Value::Object(obj)
}

/// A masked value in a request body that stands for nothing stored (`field` names it, e.g.
/// `env.API_KEY`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct MaskError {
    pub field: String,
    pub message: String,
}

/// Turn a request body that echoes a [`masked_view`] back into a configuration, against the
/// server as stored (`current`; `None` for a new server). In `env` and `headers`, a value
/// `"***"` keeps the stored value and `null` removes the entry; in `auth`, a `token` or `key` of
/// `"***"` keeps the stored one. Any other value replaces the secret. A `"***"` with nothing
/// stored behind it is refused: storing the mask itself as the secret would break the server.
pub fn unmask(body: &mut Value, current: Option<&McpServerConfig>) -> Result<(), MaskError> {
    let (env, headers, auth) = match current.map(|c| &c.transport) {
        Some(McpTransportConfig::Stdio(s)) => (Some(&s.env), None, None),
        Some(McpTransportConfig::Http(h)) => (None, Some(&h.headers), Some(&h.auth)),
        None => (None, None, None),
    };
    let nothing_stored = |field: String| MaskError {
        message: format!(
            "`{field}` is \"{MASK}\", the mask shown for a stored secret, but there is no stored value for it; give the value itself"
        ),
        field,
    };
    for (field, stored) in [("env", env), ("headers", headers)] {
        let Some(Value::Object(map)) = body.get_mut(field) else {
            continue;
        };
        map.retain(|_, v| !v.is_null());
        for (name, value) in map.iter_mut() {
            if value.as_str() != Some(MASK) {
                continue;
            }
            match stored.and_then(|m| m.get(name)) {
                Some(secret) => *value = Value::String(secret.expose().to_string()),
                None => return Err(nothing_stored(format!("{field}.{name}"))),
            }
        }
    }
    if let Some(Value::Object(a)) = body.get_mut("auth") {
        let stored_token = match auth {
            Some(HttpAuth::Bearer { token: Some(t), .. }) => Some(t),
            _ => None,
        };
        let stored_key = match auth {
            Some(HttpAuth::ApiKey { key: Some(k), .. }) => Some(k),
            _ => None,
        };
        let stored_client_secret = match auth {
            Some(HttpAuth::OAuth(o)) => o.client_secret.as_ref(),
            _ => None,
        };
        for (field, stored) in [
            ("token", stored_token),
            ("key", stored_key),
            ("client_secret", stored_client_secret),
        ] {
            if a.get(field).and_then(Value::as_str) != Some(MASK) {
                continue;
            }
            match stored {
                Some(secret) => {
                    a.insert(field.into(), Value::String(secret.expose().to_string()));
                }
                None => return Err(nothing_stored(format!("auth.{field}"))),
            }
        }
    }
    Ok(())
}

fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> SecretBox {
        SecretBox::from_key_bytes([42; 32])
    }

    fn http(auth: HttpAuth, headers: &[(&str, &str)]) -> McpServerConfig {
        let mut c = McpServerConfig::http("gh", "https://mcp.example.com/mcp");
        if let McpTransportConfig::Http(h) = &mut c.transport {
            h.auth = auth;
            h.headers = headers
                .iter()
                .map(|(k, v)| (k.to_string(), Secret::new(*v)))
                .collect();
        }
        c
    }

    #[test]
    fn stdio_split_seals_env_and_keeps_the_rest_in_columns() {
        let mut c = McpServerConfig::stdio("fs", "npx", &["-y", "server-filesystem"]);
        c.timeout_secs = 90;
        c.disabled = true;
        if let McpTransportConfig::Stdio(s) = &mut c.transport {
            s.env.insert("API_TOKEN".into(), Secret::new("tok-secret"));
        }
        let stored = split_for_storage(&c, Some(&key())).unwrap();
        assert_eq!(stored.transport, "stdio");
        assert_eq!(stored.command.as_deref(), Some("npx"));
        assert_eq!(stored.args, vec!["-y", "server-filesystem"]);
        assert_eq!(stored.url, None);
        assert_eq!(stored.headers_encrypted, None);
        assert_eq!(stored.timeout_secs, 90);
        assert!(stored.disabled);
        let sealed = stored.env_encrypted.clone().unwrap();
        assert!(sealed.starts_with("v1:") && !sealed.contains("tok-secret"));
        assert_eq!(join_from_storage(&stored, Some(&key())).unwrap(), c);
    }

    #[test]
    fn servers_without_secrets_need_no_key_and_servers_with_secrets_do() {
        let plain = McpServerConfig::stdio("fs", "npx", &[]);
        let stored = split_for_storage(&plain, None).unwrap();
        assert_eq!(stored.env_encrypted, None);
        assert_eq!(join_from_storage(&stored, None).unwrap(), plain);
        let plain_http = McpServerConfig::http("h", "http://127.0.0.1:9/mcp");
        let stored = split_for_storage(&plain_http, None).unwrap();
        assert_eq!(stored.headers_encrypted, None);
        assert_eq!(join_from_storage(&stored, None).unwrap(), plain_http);

        // Even an env-var reference lives in the sealed auth blob, so it needs the key.
        let with_auth = http(
            HttpAuth::Bearer {
                token_env: Some("GH".into()),
                token: None,
            },
            &[],
        );
        let err = split_for_storage(&with_auth, None).unwrap_err();
        assert!(
            matches!(
                &err,
                StorageError::Secret {
                    source: SecretError::NoKey,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.code(), ErrorCode::ServiceUnavailable);
        let stored = split_for_storage(&with_auth, Some(&key())).unwrap();
        let err = join_from_storage(&stored, None).unwrap_err();
        assert!(
            err.to_string().contains("AGENTRY_MCP__ENCRYPTION_KEY"),
            "{err}"
        );
    }

    #[test]
    fn connect_timeout_and_a_workspace_relative_cwd_are_kept() {
        let mut c = McpServerConfig::stdio("fs", "npx", &[]);
        c.connect_timeout_secs = 5;
        if let McpTransportConfig::Stdio(s) = &mut c.transport {
            s.cwd = Some("tools/./server".into());
        }
        let stored = split_for_storage(&c, Some(&key())).unwrap();
        assert_eq!(stored.connect_timeout_secs, 5);
        assert_eq!(stored.cwd.as_deref(), Some("tools/./server"));
        assert_eq!(join_from_storage(&stored, Some(&key())).unwrap(), c);
        // An HTTP row with a cwd is not something split_for_storage writes.
        let mut http = split_for_storage(
            &McpServerConfig::http("h", "https://mcp.example.com/mcp"),
            None,
        )
        .unwrap();
        http.cwd = Some("x".into());
        assert!(matches!(
            join_from_storage(&http, None),
            Err(StorageError::Corrupt { .. })
        ));
    }

    #[test]
    fn fields_a_user_may_not_set_are_refused_naming_them() {
        for bad in ["/srv", "../other", "a/../../b", "~/x", "", "a\nb"] {
            let mut c = McpServerConfig::stdio("fs", "npx", &[]);
            if let McpTransportConfig::Stdio(s) = &mut c.transport {
                s.cwd = Some(bad.into());
            }
            let err = split_for_storage(&c, Some(&key())).unwrap_err();
            assert!(
                matches!(err, StorageError::NotStorable { field: "cwd", .. }),
                "{bad:?}: {err:?}"
            );
            assert_eq!(err.code(), ErrorCode::ValidationError);
        }
        let mut c = McpServerConfig::stdio("fs", "npx", &[]);
        c.connect_timeout_secs = MAX_USER_CONNECT_TIMEOUT_SECS + 1;
        let err = split_for_storage(&c, Some(&key())).unwrap_err();
        assert!(
            matches!(
                err,
                StorageError::NotStorable {
                    field: "connect_timeout_secs",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.code(), ErrorCode::ValidationError);
        let mut c = McpServerConfig::stdio("fs", "npx", &[]);
        c.timeout_secs = i32::MAX as u64 + 1;
        assert!(matches!(
            split_for_storage(&c, Some(&key())),
            Err(StorageError::NotStorable {
                field: "timeout_secs",
                ..
            })
        ));
        c.timeout_secs = i32::MAX as u64;
        assert_eq!(
            split_for_storage(&c, Some(&key())).unwrap().timeout_secs,
            i32::MAX as u32
        );
        let bad = McpServerConfig::stdio("bad name", "npx", &[]);
        assert!(matches!(
            split_for_storage(&bad, Some(&key())),
            Err(StorageError::Invalid(_))
        ));
    }

    #[test]
    fn inconsistent_rows_and_wrong_keys_are_clear_errors() {
        let c = http(
            HttpAuth::ApiKey {
                key_env: None,
                key: Some(Secret::new("k")),
                header: "X-Key".into(),
            },
            &[],
        );
        let stored = split_for_storage(&c, Some(&key())).unwrap();
        let err =
            join_from_storage(&stored, Some(&SecretBox::from_key_bytes([1; 32]))).unwrap_err();
        assert!(
            matches!(
                err,
                StorageError::Secret {
                    source: SecretError::WrongKey { .. },
                    ..
                }
            ),
            "{err:?}"
        );
        let mut bad = stored.clone();
        bad.transport = "carrier-pigeon".into();
        assert!(matches!(
            join_from_storage(&bad, Some(&key())),
            Err(StorageError::Corrupt { .. })
        ));
        let mut bad = stored.clone();
        bad.url = None;
        assert!(matches!(
            join_from_storage(&bad, Some(&key())),
            Err(StorageError::Corrupt { .. })
        ));
        let mut bad = stored;
        bad.url = Some("ftp://x".into());
        assert!(matches!(
            join_from_storage(&bad, Some(&key())),
            Err(StorageError::Invalid(_))
        ));
    }

    #[test]
    fn masked_view_shows_names_and_references_but_no_values() {
        let c = http(
            HttpAuth::Bearer {
                token_env: None,
                token: Some(Secret::new("sk-live-1")),
            },
            &[("X-Team", "team-secret")],
        );
        let v = masked_view(&c);
        assert_eq!(
            v,
            json!({
                "name": "gh", "transport": "http", "url": "https://mcp.example.com/mcp",
                "headers": {"X-Team": "***"}, "auth": {"type": "bearer", "token": "***"},
                "timeout_secs": 60, "connect_timeout_secs": 30, "disabled": false,
            })
        );
        let c = http(
            HttpAuth::ApiKey {
                key_env: Some("OPENAI_API_KEY".into()),
                key: None,
                header: "X-API-Key".into(),
            },
            &[],
        );
        assert_eq!(
            masked_view(&c)["auth"],
            json!({"type": "api_key", "key_env": "OPENAI_API_KEY", "header": "X-API-Key"})
        );
        let mut s = McpServerConfig::stdio("fs", "npx", &["a"]);
        if let McpTransportConfig::Stdio(st) = &mut s.transport {
            st.env.insert("GITHUB_TOKEN".into(), Secret::new("ghp_x"));
        }
        let v = masked_view(&s);
        assert_eq!(v["env"], json!({"GITHUB_TOKEN": "***"}));
        assert_eq!(v["command"], json!("npx"));
        assert_eq!(v["args"], json!(["a"]));
    }

    // ---- generators of valid configs whose secrets are recognisable ----

    fn secret_value() -> impl Strategy<Value = String> {
        // A marker no other field can contain, then anything (including JSON specials).
        "[a-zA-Z0-9 \"\\\\{}:,]{0,24}".prop_map(|s| format!("sEcReT\u{1F511}{s}"))
    }

    fn env_map() -> impl Strategy<Value = BTreeMap<String, Secret>> {
        proptest::collection::btree_map("[A-Z][A-Z0-9_]{0,10}", secret_value(), 0..4)
            .prop_map(|m| m.into_iter().map(|(k, v)| (k, Secret::new(v))).collect())
    }

    fn header_map() -> impl Strategy<Value = BTreeMap<String, Secret>> {
        // Header values must be visible ASCII; the marker is ASCII here.
        proptest::collection::btree_map(
            "X-[A-Za-z0-9]{1,10}",
            "[a-zA-Z0-9 ._~-]{0,20}".prop_map(|s| format!("sEcReThDr{s}")),
            0..3,
        )
        .prop_map(|m| m.into_iter().map(|(k, v)| (k, Secret::new(v))).collect())
    }

    fn auth() -> impl Strategy<Value = HttpAuth> {
        let token = "[a-zA-Z0-9._-]{1,20}".prop_map(|s| Secret::new(format!("sEcReTtOk{s}")));
        let env = "[A-Z][A-Z0-9_]{0,12}";
        prop_oneof![
            Just(HttpAuth::None),
            env.prop_map(|e| HttpAuth::Bearer {
                token_env: Some(e),
                token: None
            }),
            token.clone().prop_map(|t| HttpAuth::Bearer {
                token_env: None,
                token: Some(t)
            }),
            (token, "X-[A-Za-z]{1,8}").prop_map(|(k, h)| HttpAuth::ApiKey {
                key_env: None,
                key: Some(k),
                header: h
            }),
            (env, env).prop_map(|(u, p)| HttpAuth::Basic {
                username_env: u,
                password_env: p
            }),
        ]
    }

    fn storable_config() -> impl Strategy<Value = McpServerConfig> {
        let stdio = (
            "[a-z][a-z0-9_-]{0,20}",
            "[a-z/][a-z0-9/._-]{0,20}",
            proptest::collection::vec(
                ".{0,12}".prop_filter("no NUL", |a: &String| !a.contains('\0')),
                0..4,
            ),
            env_map(),
        )
            .prop_map(|(name, command, args, env)| McpServerConfig {
                name,
                transport: McpTransportConfig::Stdio(StdioConfig {
                    command,
                    args,
                    env,
                    cwd: None,
                }),
                timeout_secs: 60,
                connect_timeout_secs: DEFAULT_CONNECT_TIMEOUT_SECS,
                disabled: false,
            });
        let http = (
            "[a-z][a-z0-9_-]{0,20}",
            "https?://[a-z]{1,10}(\\.[a-z]{2,5})?(:[1-9][0-9]{0,3})?/[a-z/]{0,10}",
            header_map(),
            auth(),
        )
            .prop_map(|(name, url, headers, auth)| McpServerConfig {
                name,
                transport: McpTransportConfig::Http(HttpConfig { url, headers, auth }),
                timeout_secs: 60,
                connect_timeout_secs: DEFAULT_CONNECT_TIMEOUT_SECS,
                disabled: false,
            });
        (prop_oneof![stdio, http], 1u64..100_000, any::<bool>())
            .prop_map(|(mut c, timeout, disabled)| {
                c.timeout_secs = timeout;
                c.disabled = disabled;
                c
            })
            .prop_filter("valid", |c| !c.name.contains("__") && c.validate().is_ok())
    }

    fn secret_values(c: &McpServerConfig) -> Vec<String> {
        let mut out = Vec::new();
        match &c.transport {
            McpTransportConfig::Stdio(s) => {
                out.extend(s.env.values().map(|v| v.expose().to_string()))
            }
            McpTransportConfig::Http(h) => {
                out.extend(h.headers.values().map(|v| v.expose().to_string()));
                match &h.auth {
                    HttpAuth::Bearer { token: Some(t), .. } => out.push(t.expose().to_string()),
                    HttpAuth::ApiKey { key: Some(k), .. } => out.push(k.expose().to_string()),
                    _ => {}
                }
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn split_then_join_returns_any_valid_config_with_its_secrets(c in storable_config()) {
            let k = key();
            let stored = split_for_storage(&c, Some(&k)).unwrap();
            for secret in secret_values(&c) {
                for column in [&stored.env_encrypted, &stored.headers_encrypted]
                    .into_iter()
                    .flatten()
                {
                    prop_assert!(!column.contains(&secret));
                }
            }
            let back = join_from_storage(&stored, Some(&k)).unwrap();
            prop_assert_eq!(back, c);
        }

        #[test]
        fn masked_view_never_contains_a_secret_value(c in storable_config()) {
            let text = serde_json::to_string(&masked_view(&c)).unwrap();
            for secret in secret_values(&c) {
                prop_assert!(!text.contains(&secret), "{} leaked in {}", secret, text);
            }
            prop_assert!(!text.contains("sEcReT"), "{}", text);
        }

        #[test]
        fn a_masked_view_sent_back_keeps_every_stored_secret(c in storable_config()) {
            let mut body = masked_view(&c);
            unmask(&mut body, Some(&c)).unwrap();
            let back: McpServerConfig = serde_json::from_value(body).unwrap();
            prop_assert_eq!(back, c);
        }
    }

    #[test]
    fn masks_keep_new_values_replace_and_nulls_remove() {
        let stored = http(
            HttpAuth::Bearer {
                token_env: None,
                token: Some(Secret::new("old-token")),
            },
            &[("X-Key", "old-key"), ("X-Team", "blue")],
        );
        let mut body = json!({
            "name": "gh", "url": "https://mcp.example.com/mcp",
            "headers": {"X-Key": "***", "X-Team": null, "X-New": "fresh"},
            "auth": {"type": "bearer", "token": "***"},
        });
        unmask(&mut body, Some(&stored)).unwrap();
        let got: McpServerConfig = serde_json::from_value(body).unwrap();
        let McpTransportConfig::Http(h) = &got.transport else {
            panic!("http")
        };
        let headers: Vec<_> = h
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect();
        assert_eq!(headers, [("X-Key", "old-key"), ("X-New", "fresh")]);
        assert_eq!(
            h.auth,
            HttpAuth::Bearer {
                token_env: None,
                token: Some(Secret::new("old-token"))
            }
        );
        // A mask with nothing behind it: on a new server, for a new name, for another auth type.
        for (mut body, current, field) in [
            (json!({"env": {"A": "***"}}), None, "env.A"),
            (
                json!({"headers": {"X-Other": "***"}}),
                Some(&stored),
                "headers.X-Other",
            ),
            (
                json!({"auth": {"type": "api_key", "key": "***"}}),
                Some(&stored),
                "auth.key",
            ),
        ] {
            assert_eq!(unmask(&mut body, current).unwrap_err().field, field);
        }
    }
}
