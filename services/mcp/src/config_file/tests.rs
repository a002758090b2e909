use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use agentry_schema::secret::Secret;

use super::*;
use crate::client::config::{
    DEFAULT_CONNECT_TIMEOUT_SECS, DEFAULT_TIMEOUT_SECS, HttpAuth, HttpConfig, McpTransportConfig,
    StdioConfig,
};

/// Set in every environment the tests run in.
const SET_VAR: &str = "PATH";
const UNSET_VAR: &str = "AGENTRY_TEST_VARIABLE_THAT_IS_NEVER_SET_7f3a";

fn yaml(text: &str) -> Result<LoadedConfig, ConfigFileError> {
    McpFileConfig::parse(text, FileFormat::Yaml)
}

fn paths(err: &ConfigFileError) -> Vec<&str> {
    err.issues.iter().map(|i| i.path.as_str()).collect()
}

fn http(entry: &FileServerEntry) -> &HttpConfig {
    match &entry.config.transport {
        McpTransportConfig::Http(h) => h,
        other => panic!("{} is not http: {other:?}", entry.config.name),
    }
}

fn stdio(entry: &FileServerEntry) -> &StdioConfig {
    match &entry.config.transport {
        McpTransportConfig::Stdio(s) => s,
        other => panic!("{} is not stdio: {other:?}", entry.config.name),
    }
}

#[test]
fn seed_003_shape_parses_with_every_auth_variant_and_policy() {
    let text = format!(
        r#"
mcp_servers:
  external_services:
    - name: github_tools
      url: https://api.github.com/mcp
      version: "1.0.0"
      description: GitHub tools
      authentication:
        type: bearer_token
        token_env: {SET_VAR}
      health_check:
        endpoint: /health
        interval: 30
        timeout: 5
      tools:
        - name: create_repository
          description: create a repository
          input_schema:
            type: object
            properties:
              name: {{type: string}}
        - search_code
    - name: openai_tools
      url: https://api.openai.com/mcp
      version: 1.0
      authentication: {{type: api_key, key_env: {SET_VAR}}}
      rate_limit: 100
      tools: [{{name: generate_text}}, {{name: analyze_sentiment}}]
    - name: keyed
      url: http://127.0.0.1:8080/mcp
      authentication: {{type: api_key, key: k-literal, header: X-Custom-Key}}
      headers: {{X-Team: platform, X-Num: 7}}
      timeout_secs: 120
      connect_timeout_secs: 10
    - name: basic_one
      url: http://10.0.0.5/mcp
      authentication: {{type: basic, username_env: {SET_VAR}, password_env: {SET_VAR}}}
    - name: literal_bearer
      url: https://x.example/mcp
      authentication: {{type: bearer, token: t-literal}}
    - name: open_one
      url: https://open.example/mcp
      authentication: {{type: none}}
      disabled: true
  local_services:
    - name: file_manager
      description: local files
      command: npx
      args: ["-y", "@modelcontextprotocol/server-filesystem", /srv, 8080]
      env: {{LOG_LEVEL: info, DEBUG: true}}
      cwd: /srv
      health_check: {{interval: 60}}
      tools: [read_file, write_file, list_directory]
"#
    );
    let loaded = yaml(&text).unwrap();
    assert_eq!(loaded.warnings, vec![]);
    let c = &loaded.config;
    assert_eq!(
        c.names().collect::<Vec<_>>(),
        vec![
            "github_tools",
            "openai_tools",
            "keyed",
            "basic_one",
            "literal_bearer",
            "open_one",
            "file_manager"
        ]
    );

    let gh = c.get("github_tools").unwrap();
    assert_eq!(http(gh).url, "https://api.github.com/mcp");
    assert_eq!(
        http(gh).auth,
        HttpAuth::Bearer {
            token_env: Some(SET_VAR.into()),
            token: None
        }
    );
    assert_eq!(gh.config.timeout_secs, DEFAULT_TIMEOUT_SECS);
    assert_eq!(gh.config.connect_timeout_secs, DEFAULT_CONNECT_TIMEOUT_SECS);
    assert!(!gh.config.disabled);
    assert_eq!(
        gh.policy,
        ServerPolicy {
            description: Some("GitHub tools".into()),
            version: Some("1.0.0".into()),
            health_endpoint: Some("/health".into()),
            health_interval: Some(Duration::from_secs(30)),
            health_timeout: Some(Duration::from_secs(5)),
            rate_limit_per_minute: None,
            tool_allow_list: Some(BTreeSet::from([
                "create_repository".to_string(),
                "search_code".to_string()
            ])),
        }
    );
    assert!(gh.policy.allows_tool("search_code"));
    assert!(!gh.policy.allows_tool("delete_repository"));

    let oa = c.get("openai_tools").unwrap();
    assert_eq!(
        http(oa).auth,
        HttpAuth::ApiKey {
            key_env: Some(SET_VAR.into()),
            key: None,
            header: "X-API-Key".into()
        }
    );
    assert_eq!(oa.policy.rate_limit_per_minute, Some(100));
    assert_eq!(oa.policy.version.as_deref(), Some("1.0"));
    assert_eq!(oa.policy.tool_allow_list.as_ref().unwrap().len(), 2);

    let keyed = c.get("keyed").unwrap();
    assert_eq!(
        http(keyed).auth,
        HttpAuth::ApiKey {
            key_env: None,
            key: Some(Secret::new("k-literal")),
            header: "X-Custom-Key".into()
        }
    );
    assert_eq!(http(keyed).headers["X-Team"].expose(), "platform");
    assert_eq!(http(keyed).headers["X-Num"].expose(), "7");
    assert_eq!(keyed.config.timeout_secs, 120);
    assert_eq!(keyed.config.connect_timeout_secs, 10);
    assert!(keyed.policy.allows_tool("anything"));

    assert_eq!(
        http(c.get("basic_one").unwrap()).auth,
        HttpAuth::Basic {
            username_env: SET_VAR.into(),
            password_env: SET_VAR.into()
        }
    );
    assert_eq!(
        http(c.get("literal_bearer").unwrap()).auth,
        HttpAuth::Bearer {
            token_env: None,
            token: Some(Secret::new("t-literal"))
        }
    );
    let open = c.get("open_one").unwrap();
    assert_eq!(http(open).auth, HttpAuth::None);
    assert!(open.config.disabled);

    let fm = c.get("file_manager").unwrap();
    let s = stdio(fm);
    assert_eq!(s.command, "npx");
    assert_eq!(
        s.args,
        vec![
            "-y",
            "@modelcontextprotocol/server-filesystem",
            "/srv",
            "8080"
        ]
    );
    assert_eq!(s.env["LOG_LEVEL"].expose(), "info");
    assert_eq!(s.env["DEBUG"].expose(), "true");
    assert_eq!(s.cwd.as_deref(), Some(std::path::Path::new("/srv")));
    assert_eq!(fm.policy.health_interval, Some(Duration::from_secs(60)));
    assert_eq!(fm.policy.health_endpoint, None);
    assert_eq!(fm.policy.description.as_deref(), Some("local files"));
}

#[test]
fn flat_shape_parses_from_json_and_yaml() {
    // Seed 000's mcp.json.
    let json = r#"{"servers": [
        {"name": "filesystem", "command": "uvx", "args": ["mcp-server-filesystem", "/workspace"],
         "env": {}, "disabled": false},
        {"name": "remote", "transport": "http", "url": "https://r.example/mcp",
         "auth": {"type": "bearer", "token_env": "PATH"}, "rate_limit": 10, "tools": ["a"]}
    ]}"#;
    let loaded = McpFileConfig::parse(json, FileFormat::Json).unwrap();
    let c = &loaded.config;
    assert_eq!(c.servers.len(), 2);
    let fs = c.get("filesystem").unwrap();
    assert_eq!(stdio(fs).command, "uvx");
    assert_eq!(stdio(fs).args, vec!["mcp-server-filesystem", "/workspace"]);
    assert_eq!(fs.policy, ServerPolicy::default());
    let remote = c.get("remote").unwrap();
    assert_eq!(
        http(remote).auth,
        HttpAuth::Bearer {
            token_env: Some("PATH".into()),
            token: None
        }
    );
    assert_eq!(remote.policy.rate_limit_per_minute, Some(10));
    assert_eq!(
        remote.policy.tool_allow_list,
        Some(BTreeSet::from(["a".to_string()]))
    );

    // The same JSON read as YAML (YAML is a superset) gives the same config.
    assert_eq!(yaml(json).unwrap().config, *c);

    let flat_yaml = r#"
servers:
  - name: gh
    url: https://gh.example/mcp
    headers: {X-Team: a}
    auth: {type: basic, username_env: PATH, password_env: PATH}
    health_check: {endpoint: /healthz, interval: 10, timeout: 10}
  - name: local
    transport: stdio
    command: node
    args: [server.js]
    env: {K: v}
    timeout_secs: 5
"#;
    let c = yaml(flat_yaml).unwrap().config;
    assert_eq!(http(c.get("gh").unwrap()).headers["X-Team"].expose(), "a");
    assert_eq!(
        c.get("gh").unwrap().policy.health_endpoint.as_deref(),
        Some("/healthz")
    );
    assert_eq!(c.get("local").unwrap().config.timeout_secs, 5);
    assert_eq!(stdio(c.get("local").unwrap()).env["K"].expose(), "v");
}

/// The flat shape must accept every key `McpServerConfig` serializes, so a field added to the
/// client's config cannot be silently unreadable from the file.
#[test]
fn the_flat_shape_accepts_everything_a_server_config_serializes() {
    let mut stdio = McpServerConfig::stdio("s", "node", &["a"]);
    if let McpTransportConfig::Stdio(s) = &mut stdio.transport {
        s.env.insert("K".into(), Secret::new("v"));
        s.cwd = Some("/tmp".into());
    }
    stdio.disabled = true;
    stdio.timeout_secs = 7;
    stdio.connect_timeout_secs = 8;
    let mut configs = vec![stdio];
    for (i, auth) in [
        HttpAuth::None,
        HttpAuth::Bearer {
            token_env: None,
            token: Some(Secret::new("t")),
        },
        HttpAuth::ApiKey {
            key_env: Some("K".into()),
            key: None,
            header: "X-K".into(),
        },
        HttpAuth::Basic {
            username_env: "U".into(),
            password_env: "P".into(),
        },
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = McpServerConfig::http(format!("h{i}"), "https://h.example/mcp");
        if let McpTransportConfig::Http(h) = &mut c.transport {
            h.auth = auth;
            h.headers.insert("X-Team".into(), Secret::new("a"));
        }
        configs.push(c);
    }
    let doc = serde_json::json!({ "servers": configs });
    let parsed = McpFileConfig::parse(&doc.to_string(), FileFormat::Json)
        .unwrap_or_else(|e| panic!("{e}\n{doc}"))
        .config;
    assert_eq!(parsed.servers.len(), configs.len());
    for (got, want) in parsed.servers.iter().zip(&configs) {
        // Secrets were masked by serialization; everything else must be the same.
        assert_eq!(
            serde_json::to_value(&got.config).unwrap(),
            serde_json::to_value(want).unwrap()
        );
    }
}

#[test]
fn empty_documents_are_empty_configs() {
    for text in [
        "",
        "  \n",
        "# only a comment\n",
        "~",
        "servers: []",
        "servers:",
        "mcp_servers:",
        "mcp_servers: {external_services: [], local_services: ~}",
        "{}",
    ] {
        let loaded = yaml(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(loaded.config.is_empty(), "{text:?}");
    }
    assert!(
        McpFileConfig::parse("{}", FileFormat::Json)
            .unwrap()
            .config
            .is_empty()
    );
}

#[test]
fn every_problem_in_a_bad_file_is_reported_with_its_path() {
    let text = r#"
mcp_servers:
  external_services:
    - name: ok_one
      url: https://ok.example/mcp
    - name: bad url
      url: ftp://x/mcp
      authentication: {type: bearer}
      rate_limit: 0
    - url: https://noname.example/mcp
      descripton: typo
      health_check: {endpoint: health, interval: 5, timeout: 10}
    - name: no_url
      command: npx
  local_services:
    - name: sock
      socket_path: /tmp/file_manager.sock
    - name: ok_one
      command: node
      args: [a, [nested]]
      env: {"A=B": x}
      tools: []
    - name: timeouts
      command: node
      timeout_secs: 0
      connect_timeout_secs: "30"
      tools: [{name: t, inputSchema: {}}, t2, t2, 5]
  extra_section: []
"#;
    let err = yaml(text).unwrap_err();
    let got: BTreeSet<&str> = paths(&err).into_iter().collect();
    let want: BTreeSet<&str> = [
        "mcp_servers.external_services[1].name",
        "mcp_servers.external_services[1].url",
        "mcp_servers.external_services[1].authentication",
        "mcp_servers.external_services[1].rate_limit",
        "mcp_servers.external_services[2].name",
        "mcp_servers.external_services[2].descripton",
        "mcp_servers.external_services[2].health_check.endpoint",
        "mcp_servers.external_services[2].health_check.timeout",
        "mcp_servers.external_services[3].command",
        "mcp_servers.external_services[3].url",
        "mcp_servers.local_services[0].socket_path",
        "mcp_servers.local_services[1].args[1]",
        "mcp_servers.local_services[1].env[\"A=B\"]",
        "mcp_servers.local_services[1].tools",
        "mcp_servers.local_services[2].timeout_secs",
        "mcp_servers.local_services[2].connect_timeout_secs",
        "mcp_servers.local_services[2].tools[0].inputSchema",
        "mcp_servers.local_services[2].tools[2]",
        "mcp_servers.local_services[2].tools[3]",
        "mcp_servers.extra_section",
    ]
    .into();
    assert_eq!(got, want, "{err}");

    let msg = |path: &str| -> String {
        err.issues
            .iter()
            .filter(|i| i.path == path)
            .map(|i| i.message.clone())
            .collect::<Vec<_>>()
            .join(" | ")
    };
    assert!(msg("mcp_servers.external_services[1].url").contains("scheme \"ftp\""));
    assert!(msg("mcp_servers.external_services[1].authentication").contains("token_env"));
    assert!(msg("mcp_servers.external_services[2].name").contains("required"));
    assert!(
        msg("mcp_servers.external_services[2].descripton").contains("did you mean `description`")
    );
    assert!(
        msg("mcp_servers.external_services[2].health_check.timeout")
            .contains("longer than the interval")
    );
    assert!(msg("mcp_servers.external_services[3].command").contains("local_services"));
    assert!(msg("mcp_servers.local_services[0].socket_path").contains("not supported"));
    assert!(msg("mcp_servers.local_services[1].tools").contains("empty list"));
    assert!(msg("mcp_servers.local_services[2].timeout_secs").contains("at least 1"));
    assert!(msg("mcp_servers.local_services[2].connect_timeout_secs").contains("whole number"));
    assert!(msg("mcp_servers.local_services[2].tools[2]").contains("listed twice"));
    // The env key with '=' is reported as well, quoted in the path.
    let env_err = yaml("mcp_servers: {local_services: [{name: e, command: x, env: {\"A=B\": v}}]}")
        .unwrap_err();
    assert_eq!(
        paths(&env_err),
        vec!["mcp_servers.local_services[0].env[\"A=B\"]"]
    );
    // The error as one log line names the count and every path.
    let line = err.to_string();
    assert!(
        line.starts_with(&format!(
            "invalid MCP config file ({} problems): ",
            err.issues.len()
        )),
        "{line}"
    );
    assert!(line.contains("mcp_servers.extra_section: unknown key"));
}

#[test]
fn each_kind_of_problem_names_its_path() {
    let cases: &[(&str, &str, &str)] = &[
        ("servers: {a: 1}", "servers", "a list of servers"),
        ("servers: [5]", "servers[0]", "a mapping"),
        ("mcp_servers: [1]", "mcp_servers", "a mapping"),
        (
            "external_services: []",
            "external_services",
            "under `mcp_servers:`",
        ),
        ("servers: []\nmcp_servers: {}", "servers", "not both"),
        ("servrs: []", "servrs", "did you mean `servers`"),
        ("- a\n- b", "", "must be a mapping"),
        ("servers: [{name: a}]", "servers[0]", "needs `command`"),
        (
            "servers: [{name: a, command: x, url: 'http://h/'}]",
            "servers[0].transport",
            "both command and url",
        ),
        (
            "servers: [{name: a, transport: carrier, command: x}]",
            "servers[0].transport",
            "not a transport",
        ),
        (
            "servers: [{name: a, transport: http, url: 'http://h/', env: {}}]",
            "servers[0].env",
            "only for transport: stdio",
        ),
        (
            "servers: [{name: a, command: x, auth: {type: none}}]",
            "servers[0].auth",
            "only for transport: http",
        ),
        (
            "servers: [{name: a, command: x, timeout: 30}]",
            "servers[0].timeout",
            "timeout_secs",
        ),
        (
            "servers: [{name: a, url: 'http://h/', authentication: {type: none}}]",
            "servers[0].authentication",
            "use `auth`",
        ),
        (
            "servers: [{name: a, command: x, comand: y}]",
            "servers[0].comand",
            "did you mean `command`",
        ),
        (
            "servers: [{name: a, command: x, disabled: 'no'}]",
            "servers[0].disabled",
            "true or false",
        ),
        (
            "servers: [{name: a, command: x, args: 'one two'}]",
            "servers[0].args",
            "a list",
        ),
        (
            "servers: [{name: a, command: x, health_check: {endpoint: /h}}]",
            "servers[0].health_check.endpoint",
            "only for HTTP",
        ),
        (
            "servers: [{name: a__b, command: x}]",
            "servers[0].name",
            "__",
        ),
        (
            "servers: [{name: 7, command: x}]",
            "servers[0].name",
            "must be a string",
        ),
        (
            "servers: [{name: a, url: 'http://h/', headers: {Mcp-Session-Id: x}}]",
            "servers[0].headers.Mcp-Session-Id",
            "transport itself",
        ),
        (
            "servers: [{name: a, url: 'http://h/', auth: {type: bearer, token: t, token_env: T}}]",
            "servers[0].auth",
            "not both",
        ),
        (
            "mcp_servers: {external_services: [{name: a, url: 'http://h/', auth: {type: none}}]}",
            "mcp_servers.external_services[0].auth",
            "use `authentication`",
        ),
        (
            "mcp_servers: {external_services: [{name: a, url: 'http://h/', authentication: {type: bearr}}]}",
            "mcp_servers.external_services[0].authentication.type",
            "did you mean `bearer`",
        ),
        (
            "mcp_servers: {external_services: [{name: a, url: 'http://h/', authentication: {token_env: X}}]}",
            "mcp_servers.external_services[0].authentication.type",
            "is required",
        ),
        (
            "mcp_servers: {external_services: [{name: a, url: 'http://h/', authentication: {type: basic, username_env: U}}]}",
            "mcp_servers.external_services[0].authentication.password_env",
            "is required",
        ),
        (
            "mcp_servers: {external_services: [{name: a, url: 'http://h/', authentication: {type: basic, username: u, password: p}}]}",
            "mcp_servers.external_services[0].authentication.password",
            "username_env and password_env",
        ),
        (
            "mcp_servers: {external_services: [{name: a, url: 'http://h/', authentication: {type: api_key, key_env: K, header: 'bad header'}}]}",
            "mcp_servers.external_services[0].authentication.header",
            "header name",
        ),
        (
            "mcp_servers: {external_services: [{name: a, url: 'http://h/', transport: http}]}",
            "mcp_servers.external_services[0].transport",
            "the section says",
        ),
        (
            "mcp_servers: {local_services: [{name: a, url: 'http://h/'}]}",
            "mcp_servers.local_services[0].url",
            "external_services",
        ),
        (
            "mcp_servers: {local_services: [{name: a, command: '  '}]}",
            "mcp_servers.local_services[0].command",
            "must not be empty",
        ),
        (
            "mcp_servers: {local_services: [{name: a, command: x, rate_limit: -3}]}",
            "mcp_servers.local_services[0].rate_limit",
            "whole number",
        ),
        (
            "mcp_servers: {local_services: [{name: a, command: x, tools: [{description: d}]}]}",
            "mcp_servers.local_services[0].tools[0].name",
            "is required",
        ),
        (
            "mcp_servers: {local_services: [{name: a, command: x, tools: [{name: t, input_schema: 5}]}]}",
            "mcp_servers.local_services[0].tools[0].input_schema",
            "JSON Schema object",
        ),
        (
            "mcp_servers: {local_services: [{name: a, command: x, health_check: {interval: 0}}]}",
            "mcp_servers.local_services[0].health_check.interval",
            "at least 1",
        ),
        (
            "mcp_servers: {local_services: [{name: a, command: x, env: {K: [1]}}]}",
            "mcp_servers.local_services[0].env.K",
            "must be a string",
        ),
        (
            "mcp_servers: {builtin_services: []}",
            "mcp_servers.builtin_services",
            "per assistant",
        ),
        (
            "servers: [{name: a, command: x}]\nservers: []",
            "",
            "duplicate",
        ),
        ("servers: [{name: a, command: x", "", "not valid YAML"),
        (
            "servers: !custom [1]",
            "servers",
            "YAML tags such as !custom",
        ),
    ];
    for (text, path, needle) in cases {
        let err = yaml(text).expect_err(text);
        let issue = err
            .issues
            .iter()
            .find(|i| i.path == *path)
            .unwrap_or_else(|| panic!("{text:?}: no problem at {path:?} in {err}"));
        assert!(
            issue.message.contains(needle),
            "{text:?}: {issue} should mention {needle:?}"
        );
    }
}

#[test]
fn json_syntax_errors_give_the_line() {
    let err = McpFileConfig::parse(
        "{\"servers\": [\n  {\"name\": \"a\",}\n]}",
        FileFormat::Json,
    )
    .unwrap_err();
    assert_eq!(paths(&err), vec![""]);
    assert!(err.issues[0].message.contains("line 2"), "{err}");
    let err = yaml("servers:\n  - name: a\n   bad: indent\n").unwrap_err();
    assert!(err.issues[0].message.contains("line"), "{err}");
}

#[test]
fn names_are_unique_across_the_whole_file() {
    let err = yaml(
        r#"
mcp_servers:
  external_services:
    - {name: dup, url: "https://a.example/mcp"}
    - {name: other, url: "https://b.example/mcp"}
  local_services:
    - {name: dup, command: node}
    - {name: other, command: node}
"#,
    )
    .unwrap_err();
    assert_eq!(
        paths(&err),
        vec![
            "mcp_servers.local_services[0].name",
            "mcp_servers.local_services[1].name"
        ]
    );
    assert!(
        err.issues[0]
            .message
            .contains("already the name of mcp_servers.external_services[0]"),
        "{err}"
    );
    let err = yaml("servers: [{name: x, command: a}, {name: x, url: 'http://h/'}]").unwrap_err();
    assert_eq!(paths(&err), vec!["servers[1].name"]);
}

#[test]
fn unset_environment_variables_are_warnings_not_errors() {
    let text = format!(
        r#"
mcp_servers:
  external_services:
    - name: a
      url: https://a.example/mcp
      authentication: {{type: bearer_token, token_env: {UNSET_VAR}}}
    - name: b
      url: https://b.example/mcp
      authentication: {{type: basic, username_env: {SET_VAR}, password_env: {UNSET_VAR}}}
    - name: off
      url: https://c.example/mcp
      disabled: true
      authentication: {{type: api_key, key_env: {UNSET_VAR}}}
    - name: fine
      url: https://d.example/mcp
      authentication: {{type: api_key, key_env: {SET_VAR}}}
"#
    );
    let loaded = yaml(&text).unwrap();
    assert_eq!(loaded.config.servers.len(), 4);
    let got: Vec<&str> = loaded.warnings.iter().map(|w| w.path.as_str()).collect();
    assert_eq!(
        got,
        vec![
            "mcp_servers.external_services[0].authentication.token_env",
            "mcp_servers.external_services[1].authentication.password_env",
        ]
    );
    assert!(loaded.warnings[0].message.contains(UNSET_VAR));
    assert!(loaded.warnings[0].message.contains("\"a\""));
}

#[test]
fn yaml_anchors_and_merge_keys_share_settings() {
    let text = r#"
x-defaults: &defaults
  timeout_secs: 90
  rate_limit: 30
servers: []
"#;
    // Top-level extension keys are not allowed (a typo would hide in them)...
    assert_eq!(paths(&yaml(text).unwrap_err()), vec!["x-defaults"]);
    // ...but anchors inside the list are.
    let text = r#"
mcp_servers:
  external_services:
    - &base
      name: one
      url: https://one.example/mcp
      timeout_secs: 90
      rate_limit: 30
    - <<: *base
      name: two
      url: https://two.example/mcp
"#;
    let c = yaml(text).unwrap().config;
    let two = c.get("two").unwrap();
    assert_eq!(two.config.timeout_secs, 90);
    assert_eq!(two.policy.rate_limit_per_minute, Some(30));
    assert_eq!(http(two).url, "https://two.example/mcp");
}

#[test]
fn load_reads_by_extension_and_reports_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("mcp.json");
    std::fs::write(&json, r#"{"servers": [{"name": "a", "command": "node"}]}"#).unwrap();
    assert_eq!(McpFileConfig::load(&json).unwrap().config.servers.len(), 1);
    let bad = dir.path().join("mcp.yaml");
    std::fs::write(&bad, "servers: [{name: a}]").unwrap();
    let LoadError::Invalid(err) = McpFileConfig::load(&bad).unwrap_err() else {
        panic!()
    };
    assert_eq!(err.file.as_deref(), Some(bad.as_path()));
    assert!(err.to_string().contains(&bad.display().to_string()));
    let missing = dir.path().join("none.yaml");
    assert!(matches!(
        McpFileConfig::load(&missing),
        Err(LoadError::Missing { .. })
    ));
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, vec![b'#'; (MAX_CONFIG_FILE_BYTES + 1) as usize]).unwrap();
    assert!(matches!(
        McpFileConfig::load(&big),
        Err(LoadError::TooLarge { .. })
    ));
    assert!(matches!(
        McpFileConfig::load(dir.path()),
        Err(LoadError::Read { .. })
    ));
}

#[test]
fn the_example_in_the_docs_parses() {
    let docs = include_str!("../../../../docs/mcp.md");
    let start = docs
        .find("```yaml\n# mcp_servers.yaml")
        .expect("docs/mcp.md has the full example");
    let body = &docs[start + "```yaml\n".len()..];
    let body = &body[..body.find("```").unwrap()];
    let loaded = yaml(body).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.config.servers.len(), 4);

    let start = docs
        .find("```json\n{\"servers\"")
        .expect("docs/mcp.md has the flat example");
    let body = &docs[start + "```json\n".len()..];
    let body = &body[..body.find("```").unwrap()];
    let loaded = McpFileConfig::parse(body, FileFormat::Json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.config.servers.len(), 2);

    // The error shown in the docs is the one this file gives.
    let err = yaml(
        r#"
mcp_servers:
  external_services:
    - {name: github_tools, url: "https://a.example/mcp"}
    - {name: b, url: "https://b.example/mcp", descripton: x}
    - {name: c, url: "ftp://x/mcp"}
  local_services:
    - {name: github_tools, command: node}
"#,
    )
    .unwrap_err();
    for issue in &err.issues {
        assert!(docs.contains(&issue.to_string()), "docs lack: {issue}");
    }
    assert_eq!(err.issues.len(), 3);
}

fn entry(name: &str, url: &str) -> FileServerEntry {
    FileServerEntry {
        config: McpServerConfig::http(name, url),
        policy: ServerPolicy::default(),
    }
}

#[test]
fn diffs_match_servers_by_name() {
    let old = McpFileConfig {
        servers: vec![
            entry("keep", "http://k/"),
            entry("gone", "http://g/"),
            entry("moved", "http://m1/"),
            entry("limited", "http://l/"),
        ],
    };
    let mut limited = entry("limited", "http://l/");
    limited.policy.rate_limit_per_minute = Some(5);
    let new = Arc::new(McpFileConfig {
        servers: vec![
            entry("fresh", "http://f/"),
            limited,
            entry("moved", "http://m2/"),
            entry("keep", "http://k/"),
        ],
    });
    let diff = ConfigDiff::between(&old, new.clone());
    let names = |v: &[FileServerEntry]| v.iter().map(|e| e.config.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&diff.added), vec!["fresh"]);
    assert_eq!(names(&diff.removed), vec!["gone"]);
    let changed: Vec<(&str, bool)> = diff
        .changed
        .iter()
        .map(|c| (c.name(), c.needs_reconnect()))
        .collect();
    assert_eq!(changed, vec![("limited", false), ("moved", true)]);
    assert_eq!(
        diff.summary(),
        "added [fresh]; removed [gone]; changed [limited, moved]"
    );
    assert!(Arc::ptr_eq(&diff.config, &new));
    assert!(ConfigDiff::between(&new, new.clone()).is_empty());
    assert!(!diff.is_empty());
}
