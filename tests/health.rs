//! End to end: the real `agentry` binary on port 0 with SQLite answers the health endpoints and
//! tags every response with `X-Request-Id`.

mod support;

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
async fn bad_model_or_tools_config_stops_the_start_naming_the_key() {
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
            "tools.shell_timeout_sec",
        ),
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
    let pid = server.child.id().unwrap();
    let status = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(std::time::Duration::from_secs(20), server.child.wait())
        .await
        .expect("server did not stop after SIGTERM")
        .unwrap();
    assert!(exit.success(), "exit status {exit:?}");
}
