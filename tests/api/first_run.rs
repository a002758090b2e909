//! End to end: a newcomer's first run (issue 15), through the real `agentry` binary — the
//! platform admin key a fresh server generates and shows once (on a terminal, else in a file of
//! mode 600, never in the log), and `agentry admin` creating the
//! first tenant and key with no server up (`--direct`) and managing a running one over HTTP —
//! and a client generated from `/openapi.json` running the quickstart flow.

use crate::support;

use support::{agentry, run};

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

const CONFIGURED_ADMIN_KEY: &str = "a-configured-platform-admin-key";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Run and expect success; the JSON it printed.
fn ok_json(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Value {
    let out = run(dir, args, env);
    assert!(
        out.status.success(),
        "{args:?}: {:?}\n{}\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", text(&out.stdout)))
}

/// Run and expect the exit status `code`; the JSON error it printed (with `--json`) and stderr.
fn failing(dir: &Path, args: &[&str], env: &[(&str, &str)], code: i32) -> (Value, String) {
    let out = run(dir, args, env);
    let err = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: {}\n{err}",
        text(&out.stdout)
    );
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (v, err)
}

/// A running `agentry serve` and every line it logged up to "listening".
struct Serve {
    child: tokio::process::Child,
    base: String,
    start_log: Vec<String>,
}

impl Serve {
    async fn start(dir: &Path, env: &[(&str, &str)]) -> Serve {
        let mut all = vec![
            ("AGENTRY_LOG__FORMAT", "json"),
            ("AGENTRY_SERVER__WORKERS", "2"),
        ];
        all.extend_from_slice(env);
        let mut cmd = tokio::process::Command::from(agentry(
            dir,
            &["serve", "--host", "127.0.0.1", "--port", "0"],
            &all,
        ));
        let mut child = cmd
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut start_log = Vec::new();
        let port = support::listening_port(&mut lines, |l| start_log.push(l.to_string())).await;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Serve {
            child,
            base: format!("http://127.0.0.1:{port}"),
            start_log,
        }
    }

    async fn stop(mut self) {
        self.child.kill().await.unwrap();
    }

    /// The status of `GET path` with `key` as the bearer key.
    async fn status(&self, path: &str, key: Option<&str>) -> u16 {
        let mut rb = reqwest::Client::new().get(format!("{}{path}", self.base));
        if let Some(k) = key {
            rb = rb.bearer_auth(k);
        }
        rb.send().await.unwrap().status().as_u16()
    }

    async fn me(&self, key: &str) -> (u16, Value) {
        let res = reqwest::Client::new()
            .get(format!("{}/api/v1/me", self.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        (res.status().as_u16(), res.json().await.unwrap())
    }
}

/// The generated admin key in a start log: a word `aga_XXXXXXXX_<40>`.
fn generated_key(log: &[String]) -> Option<String> {
    log.iter().find_map(|line| {
        line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .find(|w| w.starts_with("aga_") && w.len() == 53)
            .map(str::to_string)
    })
}

/// Every byte of the SQLite database (with its WAL), to look for a secret in.
fn database_bytes(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir.join("data")).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().starts_with("agentry.db") {
            all.extend(std::fs::read(e.path()).unwrap());
        }
    }
    all
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn a_fresh_server_generates_an_admin_key_shows_it_once_and_a_configured_key_wins() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // No cache: a replaced key is refused at once.
    let env = [("AGENTRY_AUTH__CACHE_TTL_SECS", "0")];
    let admin = "/api/v1/admin/tenants";

    let s = Serve::start(dir, &env).await;
    // No terminal: the key is in a file of mode 600 in the data dir, never in the log.
    let key_file = dir.join("data").join("generated-admin-key");
    let key = std::fs::read_to_string(&key_file)
        .unwrap_or_else(|e| {
            panic!(
                "the first start left no key in {}: {e}\n{}",
                key_file.display(),
                s.start_log.join("\n")
            )
        })
        .trim_end()
        .to_string();
    assert_eq!(
        generated_key(std::slice::from_ref(&key)).as_deref(),
        Some(key.as_str())
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the key file is readable by others");
    let log = s.start_log.join("\n");
    assert!(!log.contains(&key), "the key is in the log:\n{log}");
    let line = s
        .start_log
        .iter()
        .find(|l| l.contains("generated-admin-key"))
        .unwrap_or_else(|| panic!("the log does not name the key's file:\n{log}"));
    assert!(
        line.contains("agentry admin bootstrap") && line.contains(&key[..12]),
        "the key's line does not say how to use it: {line}"
    );
    assert_eq!(s.status(admin, Some(&key)).await, 200);
    let mut wrong = key.clone();
    wrong.replace_range(52.., if key.ends_with('x') { "y" } else { "x" });
    assert_eq!(s.status(admin, Some(&wrong)).await, 401);
    assert_eq!(s.status(admin, None).await, 401);
    // A generated admin key is no tenant key.
    assert_eq!(s.status("/api/v1/sessions", Some(&key)).await, 403);
    // Only its hash is stored.
    assert!(
        !contains(&database_bytes(dir), &key),
        "the key is stored in the clear"
    );
    s.stop().await;

    // The next start does not show it again, reminds that the file is still there, and the
    // key still works.
    let s = Serve::start(dir, &env).await;
    let log = s.start_log.join("\n");
    assert!(!log.contains(&key), "the key was shown again:\n{log}");
    assert!(
        log.contains("not shown again") && log.contains(&key[..12]),
        "the second start does not say which key the admin API takes:\n{log}"
    );
    assert!(
        log.contains("still holds a generated platform admin key"),
        "{log}"
    );
    assert_eq!(s.status(admin, Some(&key)).await, 200);

    // Lost it: a new one from the database, while the server runs; the old one stops working.
    let v = ok_json(
        dir,
        &["admin", "--direct", "--json", "reset-admin-key"],
        &env,
    );
    let new_key = v["admin_key"].as_str().unwrap().to_string();
    assert_ne!(new_key, key);
    assert_eq!(s.status(admin, Some(&key)).await, 401);
    assert_eq!(s.status(admin, Some(&new_key)).await, 200);
    // Over HTTP it is refused: it needs the database.
    let (_, err) = failing(
        dir,
        &["admin", "reset-admin-key"],
        &[("AGENTRY_ADMIN_KEY", &new_key)],
        2,
    );
    assert!(err.contains("--direct"), "{err}");
    s.stop().await;

    // A configured key wins: the generated one is refused and nothing is generated.
    let mut with_key = env.to_vec();
    with_key.push(("AGENTRY_AUTH__ADMIN_KEY", CONFIGURED_ADMIN_KEY));
    let s = Serve::start(dir, &with_key).await;
    assert_eq!(generated_key(&s.start_log), None);
    assert_eq!(s.status(admin, Some(CONFIGURED_ADMIN_KEY)).await, 200);
    assert_eq!(s.status(admin, Some(&new_key)).await, 401);
    s.stop().await;

    // Generation switched off: the admin API is off (404) and the log says how to bootstrap.
    let mut off = env.to_vec();
    off.push(("AGENTRY_AUTH__GENERATE_ADMIN_KEY", "false"));
    let s = Serve::start(dir, &off).await;
    assert_eq!(s.status(admin, Some(&new_key)).await, 404);
    assert!(
        s.start_log
            .iter()
            .any(|l| l.contains("agentry admin --direct bootstrap")),
        "{}",
        s.start_log.join("\n")
    );
    s.stop().await;
}

/// On a terminal (stderr a TTY, here a pty made by `script`) the generated key is shown there,
/// and no file is written.
#[tokio::test]
async fn on_a_terminal_the_generated_admin_key_is_shown_and_no_file_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let serve = format!(
        "{} serve --host 127.0.0.1 --port 0",
        env!("CARGO_BIN_EXE_agentry")
    );
    // No AGENTRY_* variable but these (the test's own environment may have some).
    let mut script = tokio::process::Command::new("script");
    script
        .args(["-q", "-e", "-c", &serve, "/dev/null"])
        .current_dir(dir)
        .env_clear()
        .env("AGENTRY_DATA_DIR", dir.join("data"))
        .env("AGENTRY_LOG__FORMAT", "json")
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TERM", "dumb")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = script.spawn().expect("script(1) from util-linux");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut log = Vec::new();
    support::listening_port(&mut lines, |l| log.push(l.to_string())).await;
    let key = generated_key(&log);
    child.kill().await.unwrap();
    assert!(
        key.is_some(),
        "no key shown on the terminal:\n{}",
        log.join("\n")
    );
    assert!(
        !dir.join("data").join("generated-admin-key").exists(),
        "a key file was written although a terminal showed the key"
    );
}

#[tokio::test]
async fn agentry_admin_bootstraps_on_the_database_then_manages_a_running_server() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let env = [
        ("AGENTRY_AUTH__ADMIN_KEY", CONFIGURED_ADMIN_KEY),
        ("AGENTRY_AUTH__CACHE_TTL_SECS", "0"),
    ];

    // No server yet: the first tenant, user and key straight into the database.
    let key_file = dir.join("alice.key");
    let key_arg = key_file.to_str().unwrap();
    let boot = [
        "admin",
        "--direct",
        "--json",
        "bootstrap",
        "acme",
        "alice",
        "--key-out",
        key_arg,
    ];
    let v = ok_json(dir, &boot, &env);
    assert_eq!(v["tenant"]["name"], "acme");
    assert_eq!(v["user"]["name"], "alice");
    assert_eq!(v["user"]["role"], "admin");
    let alice_key = v["api_key"]["key"].as_str().unwrap().to_string();
    assert!(alice_key.starts_with("agk_"), "{v}");
    assert_eq!(
        std::fs::read_to_string(&key_file).unwrap().trim(),
        alice_key
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Again: the name is taken, and nothing more is created.
    let (e, _) = failing(dir, &boot, &env, 1);
    assert_eq!(e["error_code"], "conflict", "{e}");
    let tenants = ok_json(
        dir,
        &["admin", "--direct", "--json", "tenants", "list"],
        &env,
    );
    assert_eq!(tenants["total"], 1, "{tenants}");
    // The same validation as the API: an unknown field is refused, naming it.
    let (e, _) = failing(
        dir,
        &[
            "admin",
            "--direct",
            "--json",
            "tenants",
            "create",
            "x",
            "--body",
            r#"{"max_userz": 3}"#,
        ],
        &env,
        1,
    );
    assert_eq!(e["error_code"], "validation_error", "{e}");
    // What changes the server's live state needs the server.
    let (_, err) = failing(
        dir,
        &["admin", "--direct", "tenants", "delete", "acme"],
        &env,
        2,
    );
    assert!(err.contains("without --direct"), "{err}");

    // The server takes the key made with no server up.
    let s = Serve::start(dir, &env).await;
    let (status, me) = s.me(&alice_key).await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(
        (me["tenant_name"].as_str(), me["role"].as_str()),
        (Some("acme"), Some("admin"))
    );

    // Over HTTP, with the platform admin key from a file (nothing from the environment).
    let admin_file = dir.join("admin.key");
    std::fs::write(&admin_file, format!("{CONFIGURED_ADMIN_KEY}\n")).unwrap();
    let base = s.base.clone();
    let over_http = |args: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = [
            "admin",
            "--url",
            &base,
            "--admin-key-file",
            admin_file.to_str().unwrap(),
            "--json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        all.extend(args.iter().map(|s| s.to_string()));
        all
    };
    let http_ok = |args: &[&str]| {
        let all = over_http(args);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        ok_json(dir, &all, &[])
    };
    let http_fails = |args: &[&str], code: i32| {
        let all = over_http(args);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        failing(dir, &all, &[], code)
    };

    let beta = http_ok(&[
        "tenants",
        "create",
        "beta",
        "--max-users",
        "2",
        "--requests-per-minute",
        "600",
        "--features",
        "mcp,stdio_mcp",
    ]);
    assert_eq!(beta["max_users"], 2, "{beta}");
    assert_eq!(beta["requests_per_minute"], 600, "{beta}");
    assert_eq!(
        beta["features_enabled"],
        serde_json::json!(["mcp", "stdio_mcp"])
    );
    // Users by tenant name; the quota holds.
    let bob = http_ok(&["users", "create", "beta", "bob"]);
    assert_eq!(bob["role"], "member");
    let carol = http_ok(&["users", "create", "beta", "carol", "--role", "admin"]);
    assert_eq!(carol["role"], "admin");
    let (e, _) = http_fails(&["users", "create", "beta", "dave"], 1);
    assert_eq!(e["error_code"], "quota_exceeded", "{e}");
    assert_eq!(e["details"]["quota"], "max_users", "{e}");
    // A key for bob (by name), shown once, working, never listed.
    let k = http_ok(&["keys", "create", "beta", "--user", "bob", "--name", "ci"]);
    let bob_key = k["key"].as_str().unwrap().to_string();
    let (status, me) = s.me(&bob_key).await;
    assert_eq!((status, me["role"].as_str()), (200, Some("member")), "{me}");
    let listed = run(
        dir,
        &over_http(&["keys", "list", "beta", "--user", "bob"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &[],
    );
    assert!(listed.status.success());
    let listed_text = text(&listed.stdout);
    assert!(!listed_text.contains(&bob_key), "a listing shows the key");
    let listed: Value = serde_json::from_str(&listed_text).unwrap();
    assert_eq!(listed["total"], 1, "{listed}");
    assert_eq!(listed["items"][0]["id"], k["id"]);
    // A member's key may not mint itself admin keys.
    let (e, _) = http_fails(
        &["keys", "create", "beta", "--user", "bob", "--role", "admin"],
        1,
    );
    assert_eq!(e["error_code"], "validation_error", "{e}");
    // Revoke: 401 from now on.
    let revoked = http_ok(&["keys", "revoke", "beta", k["id"].as_str().unwrap()]);
    assert!(!revoked["revoked_at"].is_null(), "{revoked}");
    assert_eq!(s.me(&bob_key).await.0, 401);
    let bob = http_ok(&["users", "update", "beta", "bob", "--disabled", "true"]);
    assert_eq!(bob["disabled"], true);
    // Usage of the bootstrapped tenant, and its users.
    let usage = http_ok(&["usage", "acme"]);
    assert_eq!(usage["tenant_id"], v["tenant"]["id"], "{usage}");
    assert_eq!(usage["totals"]["runs"], 0, "{usage}");
    let users = http_ok(&["users", "list", "acme"]);
    assert_eq!(users["items"][0]["name"], "alice", "{users}");
    // Suspend: the tenant's keys answer 403.
    let carol_key = http_ok(&["keys", "create", "beta", "--user", "carol"])["key"]
        .as_str()
        .unwrap()
        .to_string();
    // A custom role, defined by the tenant's admin over REST, given and shown by the CLI.
    let res = reqwest::Client::new()
        .post(format!("{}/api/v1/tenant/roles", s.base))
        .bearer_auth(&carol_key)
        .json(&serde_json::json!({"name": "auditor", "tools": [], "areas": ["audit"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201);
    let bob = http_ok(&["users", "update", "beta", "bob", "--custom-role", "auditor"]);
    assert_eq!(
        (bob["role"].as_str(), bob["custom_role"].as_str()),
        (Some("member"), Some("auditor")),
        "{bob}"
    );
    let narrow = http_ok(&[
        "keys",
        "create",
        "beta",
        "--user",
        "carol",
        "--custom-role",
        "auditor",
    ]);
    assert_eq!(narrow["custom_role"], "auditor", "{narrow}");
    let (e, _) = http_fails(
        &[
            "keys",
            "create",
            "beta",
            "--user",
            "carol",
            "--custom-role",
            "nobody",
        ],
        1,
    );
    assert_eq!(e["details"]["field"], "custom_role", "{e}");
    let t = http_ok(&["tenants", "update", "beta", "--status", "suspended"]);
    assert_eq!(t["status"], "suspended");
    assert_eq!(s.me(&carol_key).await.0, 403);
    // For people: a short list.
    let out = run(
        dir,
        &[
            "admin",
            "--url",
            &base,
            "--admin-key-file",
            admin_file.to_str().unwrap(),
            "tenants",
            "list",
        ],
        &[],
    );
    let listing = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        listing.contains("acme")
            && listing.contains("beta  suspended")
            && listing.contains("(2 of 2"),
        "{listing}"
    );
    // Delete: gone.
    http_ok(&["tenants", "delete", "beta"]);
    let (e, _) = http_fails(&["tenants", "get", "beta"], 1);
    assert_eq!(e["error_code"], "not_found", "{e}");
    assert_eq!(s.me(&carol_key).await.0, 401);

    // The key from the environment works too.
    let v = ok_json(
        dir,
        &["admin", "--url", &base, "--json", "tenants", "get", "acme"],
        &[("AGENTRY_ADMIN_KEY", CONFIGURED_ADMIN_KEY)],
    );
    assert_eq!(v["name"], "acme");

    // Hostile and broken callers: each a clear error and its own exit status.
    // A tenant admin's key is not the platform admin key.
    let (e, _) = failing(
        dir,
        &["admin", "--url", &base, "--json", "tenants", "list"],
        &[("AGENTRY_ADMIN_KEY", &alice_key)],
        1,
    );
    assert_eq!(e["error_code"], "forbidden", "{e}");
    let (e, _) = failing(
        dir,
        &["admin", "--url", &base, "--json", "tenants", "list"],
        &[("AGENTRY_ADMIN_KEY", "not-the-platform-admin-key")],
        1,
    );
    assert_eq!(e["error_code"], "unauthorized", "{e}");
    let (_, err) = failing(dir, &["admin", "--url", &base, "tenants", "list"], &[], 2);
    assert!(err.contains("no platform admin key"), "{err}");
    let (_, err) = failing(
        dir,
        &["admin", "--url", "http://127.0.0.1:1", "tenants", "list"],
        &[("AGENTRY_ADMIN_KEY", CONFIGURED_ADMIN_KEY)],
        3,
    );
    assert!(err.contains("cannot reach the server"), "{err}");
    let (_, err) = http_fails(&["tenants", "create", "x", "--body", "{not json"], 2);
    assert!(err.contains("--body"), "{err}");
    let (e, _) = http_fails(&["tenants", "get", "no-such-tenant"], 1);
    assert_eq!(e["error_code"], "not_found", "{e}");
    let (e, _) = http_fails(&["keys", "revoke", "acme", "not-an-id"], 1);
    assert_eq!(e["error_code"], "bad_request", "{e}");
    s.stop().await;
}

/// A tool of the Python test venv (scripts/install-api-test-deps.sh; `AGENTRY_VENV` moves it),
/// or `None` outside CI when it is missing.
fn venv_tool(name: &str) -> Option<std::path::PathBuf> {
    let venv = std::env::var_os("AGENTRY_VENV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/venv"));
    let tool = venv.join("bin").join(name);
    if tool.exists() {
        return Some(tool);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is missing: run scripts/install-api-test-deps.sh",
        tool.display()
    );
    eprintln!("skipped: {name} is missing (scripts/install-api-test-deps.sh)");
    None
}

/// `openapi-python-client` turns the server's `/openapi.json` into a Python client, and that
/// client runs the quickstart flow (tests/openapi_client/quickstart_flow.py):
/// the document tells the truth about every request and answer of it.
#[tokio::test]
async fn a_client_generated_from_the_openapi_document_runs_the_quickstart_flow() {
    let Some(generator) = venv_tool("openapi-python-client") else {
        return;
    };
    let bin = generator.parent().unwrap().to_path_buf();
    let fake = agentry_fake_model::FakeModelServer::start(agentry_fake_model::FakeConfig {
        api_key: Some("fake-model-key".into()),
        ..Default::default()
    });
    let model = fake.base_url_openai();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let s = Serve::start(
        dir,
        &[
            ("AGENTRY_AUTH__ADMIN_KEY", CONFIGURED_ADMIN_KEY),
            ("AGENTRY_LLM__PROVIDER", "openai"),
            ("AGENTRY_LLM__BASE_URL", &model),
            ("AGENTRY_LLM__API_KEY", "fake-model-key"),
            ("AGENTRY_LLM__MODEL", "fake-large"),
        ],
    )
    .await;
    let spec = reqwest::get(format!("{}/openapi.json", s.base))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    std::fs::write(dir.join("openapi.json"), &spec).unwrap();

    // The generator formats its output with ruff, which the venv holds.
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(&generator)
        .args(["generate", "--path", "openapi.json", "--meta", "none"])
        .args(["--output-path", "generated/agentry_client"])
        .current_dir(dir)
        .env("PATH", &path)
        .output()
        .unwrap();
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{said}");
    // One known stumble, the generator's and not the document's: it names the inline model
    // of the edit decision's free-form `args` object twice and drops it (the client then sends
    // `args` as a plain dict). Anything else it cannot process fails the test.
    let unprocessed: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("Unable to process"))
        .collect();
    assert_eq!(
        unprocessed,
        ["Unable to process schema /components/schemas/Decision_type_1:"],
        "the generator stumbled over the document:\n{said}"
    );

    let before = fake.requests().len();
    let flow =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/openapi_client/quickstart_flow.py");
    let out = Command::new(bin.join("python"))
        .arg(&flow)
        .arg(&s.base)
        .current_dir(dir)
        .env("PYTHONPATH", dir.join("generated"))
        .env("AGENTRY_ADMIN_KEY", CONFIGURED_ADMIN_KEY)
        .output()
        .unwrap();
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{said}");
    assert!(said.contains(" passed, 0 failed"), "{said}");
    // The chat really went to the (fake) model the server was configured with.
    assert!(fake.requests().len() > before, "the model was never asked");
    s.stop().await;
}
