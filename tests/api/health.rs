//! End to end: the real `agentry` binary on port 0 with SQLite answers the health endpoints and
//! tags every response with `X-Request-Id`.

use crate::support;

use support::Server;

#[tokio::test]
async fn health_endpoints_answer_and_tag_requests() {
    let server = Server::start(&[]).await;
    let http = reqwest::Client::new();

    let res = http.get(server.url("/api/v1/health")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let generated = res.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(generated.len(), 36, "a generated id is a UUID: {generated}");
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["status"], "ok");
    assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
    assert!(body["uptime"].as_f64().unwrap() >= 0.0);

    let res = http
        .get(server.url("/api/v1/health/live"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let res = http
        .get(server.url("/api/v1/health/ready"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["checks"]["database"], "ok");

    // A client's request id is kept; a junk one is replaced.
    let res = http
        .get(server.url("/api/v1/health"))
        .header("x-request-id", "trace-me-42")
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["x-request-id"], "trace-me-42");
    let res = http
        .get(server.url("/api/v1/health"))
        .header("x-request-id", "has space")
        .send()
        .await
        .unwrap();
    assert_ne!(res.headers()["x-request-id"], "has space");

    // Monitors may probe with HEAD: same status, no body.
    let res = http
        .head(server.url("/api/v1/health/ready"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.headers().contains_key("x-request-id"));
    assert!(res.bytes().await.unwrap().is_empty());

    // Unknown routes answer our error JSON, with the header too.
    let res = http.get(server.url("/api/v1/nope")).send().await.unwrap();
    assert_eq!(res.status(), 404);
    assert!(res.headers().contains_key("x-request-id"));
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["error_code"], "route_not_found");
    assert!(body["message"].as_str().unwrap().contains("/api/v1/nope"));
}

#[tokio::test]
async fn migrate_subcommand_creates_the_schema_and_bad_config_fails_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentry"))
        .arg("migrate")
        .env("AGENTRY_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("agentry.db").exists());

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentry"))
        .arg("serve")
        .env("AGENTRY_DATA_DIR", dir.path())
        .env("AGENTRY_SERVER__PORT", "not-a-port")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("port"), "{err}");
}

#[tokio::test]
async fn bad_model_tools_or_log_config_stops_the_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("AGENTRY_LLM__PROVIDER", "openai")],
            "AGENTRY_LLM__API_KEY",
        ),
        (
            &[
                ("AGENTRY_LLM__PROVIDER", "anthropic"),
                ("AGENTRY_LLM__BASE_URL", "ftp://x"),
            ],
            "llm.base_url",
        ),
        (
            &[("AGENTRY_TOOLS__ALLOWED_NETWORKS", "10.0.0.0/8,nonsense")],
            "nonsense",
        ),
        (
            &[("AGENTRY_TOOLS__SHELL_TIMEOUT_SEC", "5")],
            "AGENTRY_TOOLS__SHELL_TIMEOUT_SEC (did you mean AGENTRY_TOOLS__SHELL_TIMEOUT_SECS?)",
        ),
        // A bare word is, to a tracing filter, a target at every level: every other log would
        // be off. Refused instead, from either source.
        (&[("AGENTRY_LOG__LEVEL", "verbose")], "log.level"),
        (&[("RUST_LOG", "verbose")], "RUST_LOG"),
    ];
    for (env, needle) in cases {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_agentry"));
        cmd.arg("serve")
            .env("AGENTRY_DATA_DIR", dir.path())
            .env("AGENTRY_SERVER__PORT", "0");
        for (k, v) in *env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{env:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{env:?}: {err}");
    }
}

#[tokio::test]
async fn sigterm_stops_the_server_gracefully() {
    let mut server = Server::start(&[]).await;
    server.terminate();
    let exit = tokio::time::timeout(std::time::Duration::from_secs(20), server.child.wait())
        .await
        .expect("server did not stop after SIGTERM")
        .unwrap();
    assert!(exit.success(), "exit status {exit:?}");
}

#[tokio::test]
async fn secrets_given_as_files_reach_the_server_and_a_doubled_one_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("admin-key");
    // A Kubernetes secret mounted as a file, with the newline `echo` leaves.
    std::fs::write(&key_file, "admin-key-from-a-mounted-file\n").unwrap();
    let key_path = key_file.to_string_lossy().into_owned();
    let server = Server::start(&[("AGENTRY_AUTH__ADMIN_KEY_FILE", &key_path)]).await;
    let http = reqwest::Client::new();
    let admin = |key: &str| {
        http.get(server.url("/api/v1/admin/tenants"))
            .bearer_auth(key)
            .send()
    };
    assert_eq!(
        admin("admin-key-from-a-mounted-file")
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        admin("admin-key-from-a-mounted-fil")
            .await
            .unwrap()
            .status(),
        401,
        "the key is checked"
    );

    for (env, needle) in [
        (
            vec![
                ("AGENTRY_AUTH__ADMIN_KEY", "a-direct-admin-key-as-well"),
                ("AGENTRY_AUTH__ADMIN_KEY_FILE", key_path.as_str()),
            ],
            "AGENTRY_AUTH__ADMIN_KEY and AGENTRY_AUTH__ADMIN_KEY_FILE".to_string(),
        ),
        (
            vec![("AGENTRY_LLM__API_KEY_FILE", "/nonexistent/llm-key")],
            "llm.api_key_file: cannot read the file /nonexistent/llm-key".to_string(),
        ),
    ] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_agentry"));
        cmd.arg("serve")
            .env("AGENTRY_DATA_DIR", dir.path())
            .env("AGENTRY_SERVER__PORT", "0")
            .envs(env.iter().copied());
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{env:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&needle), "{env:?}: {err}");
        assert!(!err.contains("admin-key-from"), "never the secret: {err}");
    }
}
