//! The OAuth test fixture (`tests/support/oauth_fixture.py`, [`agentry_mcp::testing::OAuthFixture`])
//! is a working authorization server: the official Python SDK's OAuth client runs its whole flow
//! against it (discovery from the protected MCP server's 401, dynamic client registration,
//! authorization code with PKCE, refresh when the short-lived token expires, client_credentials),
//! and its protected MCP server refuses what it must (no token, expired, another key, another
//! audience). Other tests rely on both halves.

use crate::support;

use std::time::Duration;

use agentry_mcp::client::{ClientHooks, McpConnection, McpServerConfig, StdioLaunch};
use agentry_mcp::testing::{OAuthFixture, venv_dir};
use serde_json::{Value, json};

/// Run tests/support/oauth_python_client.py (the official Python SDK client) with `env`.
async fn python_client(env: &[(&str, &str)]) -> Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/support/oauth_python_client.py");
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(venv_dir().join("bin/python"))
            .arg(&script)
            .envs(env.iter().copied())
            .env("NO_PROXY", "127.0.0.1")
            .output(),
    )
    .await
    .expect("the Python client ends within 120 s")
    .expect("run the Python OAuth client");
    assert!(
        out.status.success(),
        "the Python OAuth client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the client printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn grants(seen: &[Value]) -> Vec<(String, bool)> {
    seen.iter()
        .filter(|e| e["endpoint"] == "token")
        .map(|e| {
            (
                e["grant_type"].as_str().unwrap_or("").to_string(),
                e["ok"] == true,
            )
        })
        .collect()
}

#[tokio::test]
async fn the_python_sdk_client_completes_oauth_against_the_fixture() {
    // 3 s tokens: the second call comes after the first token expired, so the client refreshes.
    let fx = OAuthFixture::start(&[
        "--protected-mcp",
        "--token-ttl",
        "3",
        "--client",
        "machine:machine-secret",
    ])
    .await;
    let mcp = fx.url("mcp_url").to_string();

    let r = python_client(&[
        ("MCP_URL", &mcp),
        ("OAUTH_USER", "bob"),
        ("OAUTH_CLAIMS", r#"{"tenant": "t-1"}"#),
        (
            "CALL",
            r#"[["whoami", {}], ["echo", {"message": "after the refresh"}]]"#,
        ),
        ("PAUSE_BEFORE", "5"),
    ])
    .await;
    assert_eq!(r["tools"], json!(["echo", "whoami"]), "{r}");
    let who: Value = serde_json::from_str(r["results"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(who["sub"], "bob", "{who}");
    assert_eq!(who["claims"]["tenant"], "t-1", "{who}");
    assert_eq!(
        who["claims"]["aud"], mcp,
        "the token is bound to the MCP server: {who}"
    );
    assert_eq!(who["claims"]["iss"], fx.url("issuer"), "{who}");
    assert_eq!(r["results"][1]["text"], "bob: after the refresh", "{r}");
    assert_eq!(r["results"][1]["error"], false, "{r}");
    // The client registered itself (a fresh id) and refreshed once its token expired.
    assert!(
        r["client_id"].as_str().is_some_and(|c| c.len() == 32),
        "{r}"
    );
    let seen = grants(&fx.requests().await);
    assert_eq!(seen[0], ("authorization_code".into(), true), "{seen:?}");
    assert!(
        seen.contains(&("refresh_token".into(), true)),
        "no refresh after the token expired: {seen:?}"
    );

    // client_credentials with the pre-registered confidential client: the subject is the client.
    let r = python_client(&[
        ("MCP_URL", &mcp),
        ("OAUTH_MODE", "client_credentials"),
        ("OAUTH_CLIENT_ID", "machine"),
        ("OAUTH_CLIENT_SECRET", "machine-secret"),
        ("OAUTH_ISSUER", fx.url("issuer")),
        ("CALL", r#"[["echo", {"message": "m2m"}]]"#),
    ])
    .await;
    assert_eq!(r["results"][0]["text"], "machine: m2m", "{r}");
    assert!(
        grants(&fx.requests().await).contains(&("client_credentials".into(), true)),
        "{r}"
    );
}

/// What the protected MCP server answers an `initialize` carrying `token`.
async fn initialize_status(
    http: &reqwest::Client,
    mcp: &str,
    token: Option<&str>,
) -> reqwest::Response {
    let mut req = http
        .post(mcp)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}}
        }));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn the_fixture_mints_tokens_its_protected_server_refuses_or_accepts() {
    let fx = OAuthFixture::start(&["--protected-mcp"]).await;
    let mcp = fx.url("mcp_url").to_string();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();

    let r = initialize_status(&http, &mcp, None).await;
    assert_eq!(r.status(), 401);
    let challenge = r.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        challenge.contains(&format!(
            "resource_metadata=\"{}\"",
            fx.url("resource_metadata_url")
        )),
        "{challenge}"
    );
    let prm: Value = http
        .get(fx.url("resource_metadata_url"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(prm["resource"], mcp, "{prm}");
    assert_eq!(
        prm["authorization_servers"],
        json!([fx.url("issuer")]),
        "{prm}"
    );
    let asm: Value = http
        .get(fx.url("metadata_url"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(asm["issuer"], fx.url("issuer"), "{asm}");
    assert_eq!(asm["jwks_uri"], fx.url("jwks_uri"), "{asm}");
    assert_eq!(
        asm["code_challenge_methods_supported"],
        json!(["S256"]),
        "{asm}"
    );

    let good = fx.mint(json!({"sub": "carol", "aud": mcp})).await;
    assert_eq!(
        initialize_status(&http, &mcp, Some(&good)).await.status(),
        200
    );
    for (what, claims) in [
        ("expired", json!({"aud": mcp, "ttl": -120})),
        (
            "signed by an unknown key",
            json!({"aud": mcp, "key": "unknown"}),
        ),
        (
            "with a forged signature",
            json!({"aud": mcp, "key": "forged"}),
        ),
        (
            "for another audience",
            json!({"aud": "http://127.0.0.1:9/mcp"}),
        ),
        (
            "from another issuer",
            json!({"aud": mcp, "iss": "http://127.0.0.1:9"}),
        ),
    ] {
        let token = fx.mint(claims).await;
        assert_eq!(
            initialize_status(&http, &mcp, Some(&token)).await.status(),
            401,
            "a token {what} was accepted"
        );
    }

    // A rotated key: the JWKS lists the new kid; without keep_old, the old tokens stop working.
    let jwks_before: Value = http
        .get(fx.url("jwks_uri"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kid = fx.rotate_key(false).await;
    let jwks: Value = http
        .get(fx.url("jwks_uri"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 1, "{jwks}");
    assert_eq!(jwks["keys"][0]["kid"], kid, "{jwks}");
    assert_ne!(jwks_before["keys"][0]["kid"], kid);
    assert_eq!(
        initialize_status(&http, &mcp, Some(&good)).await.status(),
        401
    );

    // The browser step, by hand: register a public client, authorize as "dave" with PKCE, and
    // trade the code; a wrong code_verifier and a reused code are refused.
    let reg: Value = http
        .post(fx.url("registration_endpoint"))
        .json(&json!({"redirect_uris": ["http://127.0.0.1:9/cb"], "token_endpoint_auth_method": "none"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let client_id = reg["client_id"].as_str().unwrap();
    let verifier = "a-verifier-of-at-least-forty-three-characters-long-0123456789";
    let challenge = {
        use base64::Engine;
        use sha2::Digest;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier))
    };
    let authorize = format!(
        "{}?response_type=code&client_id={client_id}&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcb&code_challenge={challenge}&code_challenge_method=S256&state=xyz&resource={}",
        fx.url("authorization_endpoint"),
        url::form_urlencoded::byte_serialize(mcp.as_bytes()).collect::<String>()
    );
    let location = fx
        .approve(&authorize, "dave", json!({"tenant": "t-2"}))
        .await;
    let back = url::Url::parse(&location).unwrap();
    let q: std::collections::HashMap<_, _> = back.query_pairs().into_owned().collect();
    assert_eq!(q["state"], "xyz", "{location}");
    assert_eq!(q["iss"], fx.url("issuer"), "{location}");
    let exchange = |code: String, verifier: &'static str| {
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "authorization_code")
            .append_pair("code", &code)
            .append_pair("redirect_uri", "http://127.0.0.1:9/cb")
            .append_pair("client_id", client_id)
            .append_pair("code_verifier", verifier)
            .finish();
        http.post(fx.url("token_endpoint"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
    };
    let wrong = exchange(
        q["code"].clone(),
        "not-the-verifier-not-the-verifier-not-the-verifier",
    )
    .send()
    .await
    .unwrap();
    assert_eq!(wrong.status(), 400);
    // The wrong verifier used the code up, as a single-use code must be.
    let location = fx
        .approve(&authorize, "dave", json!({"tenant": "t-2"}))
        .await;
    let q: std::collections::HashMap<_, _> = url::Url::parse(&location)
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect();
    let tokens: Value = exchange(q["code"].clone(), verifier)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let at = tokens["access_token"].as_str().expect("an access token");
    assert_eq!(initialize_status(&http, &mcp, Some(at)).await.status(), 200);
    assert_eq!(
        exchange(q["code"].clone(), verifier)
            .send()
            .await
            .unwrap()
            .status(),
        400,
        "a code worked twice"
    );
}

/// Agentry's client with a `client_credentials` server whose tokens live 36 s: rmcp's manager
/// refreshes a token with under 30 s left, which a `client_credentials` token cannot (there is
/// no refresh token), so 7 s after connecting the call would go out without a token and fail.
/// The client renews the token before that, with the token endpoint, and the call works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_credentials_token_is_renewed_before_it_expires() {
    support::init_tracing();
    let fx = OAuthFixture::start(&[
        "--protected-mcp",
        "--token-ttl",
        "36",
        "--client",
        "machine:machine-secret",
    ])
    .await;
    let config: McpServerConfig = serde_json::from_value(json!({
        "name": "machine",
        "url": fx.url("mcp_url"),
        "auth": {"type": "oauth", "grant": "client_credentials",
                 "client_id": "machine", "client_secret": "machine-secret"},
    }))
    .unwrap();
    let conn = McpConnection::connect(
        &config,
        ClientHooks::default(),
        &StdioLaunch::unconfined(std::env::temp_dir()),
    )
    .await
    .unwrap_or_else(|e| panic!("connect: {e}"));
    let call = |id: &'static str| {
        let conn = &conn;
        async move {
            conn.call_tool("echo", json!({"message": id}), &support::ctx(id))
                .await
                .unwrap_or_else(|e| panic!("{id}: {e}"))
        }
    };
    let first = call("first").await;
    assert!(!first.is_error, "{first:?}");
    assert!(
        first.content.to_string().contains("machine: first"),
        "{first:?}"
    );
    let fetched = |seen: &[Value]| {
        grants(seen)
            .iter()
            .filter(|g| **g == ("client_credentials".to_string(), true))
            .count()
    };
    assert_eq!(fetched(&fx.requests().await), 1);
    tokio::time::sleep(Duration::from_secs(7)).await;
    let second = call("second").await;
    assert!(!second.is_error, "{second:?}");
    assert!(
        second.content.to_string().contains("machine: second"),
        "{second:?}"
    );
    assert_eq!(fetched(&fx.requests().await), 2, "renewed once");
    conn.close().await;
}
