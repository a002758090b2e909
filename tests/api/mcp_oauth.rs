//! `/mcp` trusting an external OAuth authorization server (`[mcp.oauth]`): the real OAuth test
//! fixture (`tests/support/oauth_fixture.py`, on the official Python SDK) issues the tokens, the
//! real binary checks them. What a token may reach (its tenant's user only, with that user's
//! role, quotas and sessions), what it may not (another tenant, REST), and every kind of bad
//! token: forged, expired, another audience, another issuer, `alg: none`, HMAC, unknown key,
//! missing scope.

use std::time::{Duration, Instant};

use agentry_mcp::testing::OAuthFixture;
use base64::Engine;
use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{ADMIN_KEY, Ctx, TenantFx};
use crate::mcp_server::{User, call, connect, initialize, on_session, text, workspace};

/// A port nothing listens on now, for a server whose public URL (and so its tokens' audience)
/// must be known before it starts.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Agentry trusting `fx` on `/mcp`, at a known base URL; `networks`: where it may fetch from.
async fn agentry_trusting(fx: &OAuthFixture, networks: &str, extra: &[(&str, &str)]) -> Ctx {
    let port = free_port().to_string();
    let public = format!("http://127.0.0.1:{port}");
    let mut env = vec![
        ("AGENTRY_SERVER__PORT", port.as_str()),
        ("AGENTRY_MCP__PUBLIC_URL", public.as_str()),
        ("AGENTRY_MCP__OAUTH__ISSUER", fx.url("issuer")),
        ("AGENTRY_TOOLS__ALLOWED_NETWORKS", networks),
    ];
    env.extend_from_slice(extra);
    Ctx::start_with(&env, None).await
}

/// The token claims naming `user` of tenant `t` for this server's `/mcp`.
fn naming(ctx: &Ctx, tenant: &str, user: &str) -> Value {
    json!({"sub": user, "agentry_tenant": tenant, "aud": ctx.url("/mcp")})
}

fn with(mut claims: Value, extra: Value) -> Value {
    if let (Some(c), Some(e)) = (claims.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    claims
}

fn b64(v: &Value) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

/// Tool names `/mcp` lists for `token`.
async fn tool_names(ctx: &Ctx, token: &str) -> Vec<String> {
    let client = connect(ctx, token, User::answering(vec![])).await;
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    client.cancel().await.expect("close the MCP client");
    names.sort();
    names
}

/// `POST /mcp` initialize with `token`: the status, the error body, the challenge.
async fn refused(ctx: &Ctx, token: &str) -> (u16, String, String) {
    let r = ctx.send(initialize(ctx, Some(token))).await;
    let challenge = r
        .headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (r.status, r.message().to_string(), challenge)
}

/// The whole of what a token may and may not do, on one server and one authorization server.
pub async fn external_tokens(fx: &OAuthFixture, ctx: &Ctx) {
    let mcp = ctx.url("/mcp");
    // The metadata names the authorization server and its scopes; a 401 says which to ask for.
    let prm = ctx
        .call(
            Method::GET,
            "/.well-known/oauth-protected-resource/mcp",
            None,
            None,
        )
        .await
        .body;
    assert_eq!(prm["resource"], mcp, "{prm}");
    assert_eq!(
        prm["authorization_servers"],
        json!([fx.url("issuer")]),
        "{prm}"
    );
    assert_eq!(prm["scopes_supported"], json!(["mcp"]), "{prm}");
    let root = ctx
        .call(
            Method::GET,
            "/.well-known/oauth-protected-resource",
            None,
            None,
        )
        .await
        .body;
    assert!(root.get("authorization_servers").is_none(), "{root}");
    let r = ctx.send(initialize(ctx, None)).await;
    assert_eq!(r.status, 401);
    let challenge = r.headers["www-authenticate"].to_str().unwrap();
    assert!(challenge.contains("scope=\"mcp\""), "{challenge}");

    let t = ctx.tenant().await;
    let other = ctx.tenant().await;

    // A token naming the member of t: the same tools as the member's key (RBAC: no shell for a
    // member), the admin's token the admin key's.
    let member_token = fx.mint(naming(ctx, &t.id, &t.member.user_id)).await;
    let admin_token = fx.mint(naming(ctx, &t.id, &t.admin.user_id)).await;
    let by_token = tool_names(ctx, &member_token).await;
    assert_eq!(by_token, tool_names(ctx, &t.member.key).await);
    assert!(by_token.iter().any(|n| n == "read_file"), "{by_token:?}");
    let admin_tools = tool_names(ctx, &admin_token).await;
    assert_eq!(admin_tools, tool_names(ctx, &t.admin.key).await);
    assert_ne!(
        admin_tools, by_token,
        "the admin's role is not the member's"
    );

    // Calls run as that user, in their workspace, approved by elicitation and audited.
    let client = connect(ctx, &member_token, User::answering(vec![json!(true)])).await;
    let r = call(
        &client,
        "write_file",
        json!({"file_path": "oauth.txt", "content": "written with an OAuth token"}),
    )
    .await;
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let written = std::fs::read_to_string(workspace(ctx, &t, &t.member).join("oauth.txt"))
        .expect("the file is in the member's workspace");
    assert_eq!(written, "written with an OAuth token");
    let r = call(&client, "read_file", json!({"file_path": "oauth.txt"})).await;
    assert!(text(&r).contains("written with an OAuth token"), "{r:?}");
    client.cancel().await.unwrap();
    let runs = ctx
        .ok(
            Method::GET,
            "/api/v1/executions?limit=50",
            &t.member.key,
            None,
            200,
        )
        .await;
    assert!(
        runs["items"]
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["input"] == "MCP tools/call write_file")),
        "the token's call is audited as the member's: {runs}"
    );

    // A session made with the token belongs to that user: another tenant's key, another
    // user's token, cannot use it.
    let r = ctx.send(initialize(ctx, Some(&member_token))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.headers["mcp-session-id"].to_str().unwrap().to_string();
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let member2_token = fx.mint(naming(ctx, &t.id, &t.member2.user_id)).await;
    for key in [other.admin.key.as_str(), &member2_token, &admin_token] {
        let r = ctx
            .send(on_session(ctx, Some(key), &session, ping.clone()))
            .await;
        assert_eq!((r.status, r.code()), (404, "not_found"), "{}", r.body);
    }
    let r = ctx
        .send(on_session(ctx, Some(&member_token), &session, ping.clone()))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Another tenant is out of reach whatever the claims say: t's user named under `other`,
    // `other`'s admin named under t, a made-up tenant, no tenant claim.
    for (claims, says) in [
        (
            naming(ctx, &other.id, &t.member.user_id),
            "is not an enabled user",
        ),
        (
            naming(ctx, &t.id, &other.admin.user_id),
            "is not an enabled user",
        ),
        (
            naming(
                ctx,
                "0190f000-0000-7000-8000-000000000000",
                &t.member.user_id,
            ),
            "names no Agentry tenant",
        ),
        (
            with(
                naming(ctx, &t.id, &t.member.user_id),
                json!({"agentry_tenant": null}),
            ),
            "has no `agentry_tenant` claim",
        ),
    ] {
        let token = fx.mint(claims.clone()).await;
        let (status, message, _) = refused(ctx, &token).await;
        assert_eq!(status, 403, "{claims}: {message}");
        assert!(message.contains(says), "{claims}: {message}");
    }

    // Bad tokens: 401 invalid_token, each saying why.
    let good = naming(ctx, &t.id, &t.member.user_id);
    let header = |alg: &str, kid: Option<&str>| {
        let mut h = json!({"alg": alg, "typ": "JWT"});
        if let Some(k) = kid {
            h["kid"] = json!(k);
        }
        h
    };
    let now = chrono::Utc::now().timestamp();
    let unsigned_claims = with(
        good.clone(),
        json!({"iss": fx.url("issuer"), "exp": now + 600, "scope": "mcp"}),
    );
    let real = fx.mint(good.clone()).await;
    let kid = jsonwebtoken::decode_header(&real).unwrap().kid.unwrap();
    let mut cases: Vec<(&str, String, &str)> = vec![
        (
            "forged signature",
            fx.mint(with(good.clone(), json!({"key": "forged"}))).await,
            "signature does not verify",
        ),
        (
            "expired",
            fx.mint(with(good.clone(), json!({"ttl": -600}))).await,
            "expired",
        ),
        (
            "another audience",
            fx.mint(with(good.clone(), json!({"aud": "http://127.0.0.1:9/mcp"})))
                .await,
            "audience",
        ),
        (
            "another issuer",
            fx.mint(with(good.clone(), json!({"iss": "http://127.0.0.1:9"})))
                .await,
            "not issued by",
        ),
        (
            "an unpublished key",
            fx.mint(with(good.clone(), json!({"key": "unknown"}))).await,
            "does not publish",
        ),
        (
            "no expiry",
            fx.mint(with(good.clone(), json!({"exp": null}))).await,
            "no `exp` claim",
        ),
        (
            "alg none",
            format!(
                "{}.{}.",
                b64(&header("none", Some(&kid))),
                b64(&unsigned_claims)
            ),
            "not a signed JWT",
        ),
    ];
    // HMAC with the public key as the secret (the algorithm-confusion attack).
    let jwks: Value = reqwest::get(fx.url("jwks_uri"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let hs = jsonwebtoken::encode(
        &jsonwebtoken::Header {
            kid: Some(kid.clone()),
            ..jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256)
        },
        &unsigned_claims,
        &jsonwebtoken::EncodingKey::from_secret(jwks["keys"][0]["n"].as_str().unwrap().as_bytes()),
    )
    .unwrap();
    cases.push(("HMAC", hs, "HMAC-signed tokens are not accepted"));
    for (what, token, says) in &cases {
        let (status, message, challenge) = refused(ctx, token).await;
        assert_eq!(status, 401, "a token with {what}: {message}");
        assert!(message.contains(says), "a token with {what}: {message}");
        assert!(
            challenge.contains("error=\"invalid_token\""),
            "{what}: {challenge}"
        );
    }

    // A token without the required scope: 403 insufficient_scope, with the scope to ask for.
    let token = fx.mint(with(good.clone(), json!({"scope": "other"}))).await;
    let (status, message, challenge) = refused(ctx, &token).await;
    assert_eq!(status, 403, "{message}");
    assert!(message.contains("lacks the scope mcp"), "{message}");
    assert!(
        challenge.contains("error=\"insufficient_scope\"") && challenge.contains("scope=\"mcp\""),
        "{challenge}"
    );

    // The token is good on /mcp only: the REST API does not take it.
    let r = ctx
        .call(Method::GET, "/api/v1/me", Some(&member_token), None)
        .await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"), "{}", r.body);

    // A disabled user's token stops working at once (403: the token is good, the user is not).
    let upath = format!("/api/v1/admin/tenants/{}/users/{}", t.id, t.member2.user_id);
    let r = ctx.send(initialize(ctx, Some(&member2_token))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    ctx.ok(
        Method::PATCH,
        &upath,
        ADMIN_KEY,
        Some(json!({"disabled": true})),
        200,
    )
    .await;
    let (status, message, _) = refused(ctx, &member2_token).await;
    assert_eq!(status, 403, "{message}");

    // A new signing key: its tokens work once the JWKS is fetched again for the unknown kid
    // (at most once a second, so a token right after the first fetch may wait a moment).
    let new_kid = fx.rotate_key(true).await;
    let rotated = fx.mint(good.clone()).await;
    assert_eq!(
        jsonwebtoken::decode_header(&rotated)
            .unwrap()
            .kid
            .as_deref(),
        Some(new_kid.as_str())
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = ctx.send(initialize(ctx, Some(&rotated))).await;
        if r.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new key never worked: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// An OAuth caller counts against the tenant's `requests_per_minute` like its keys.
pub async fn quotas_apply(fx: &OAuthFixture, ctx: &Ctx) {
    let limit = 3;
    let t: TenantFx = ctx
        .tenant_with(json!({ "requests_per_minute": limit }))
        .await;
    let token = fx.mint(naming(ctx, &t.id, &t.member.user_id)).await;
    for _ in 0..limit {
        let r = ctx.send(initialize(ctx, Some(&token))).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    for key in [token.as_str(), &t.member.key] {
        let r = ctx.send(initialize(ctx, Some(key))).await;
        assert_eq!((r.status, r.code()), (429, "quota_exceeded"), "{}", r.body);
        assert_eq!(r.details()["quota"], "requests_per_minute", "{}", r.body);
        assert!(r.headers.contains_key("retry-after"));
    }
}

/// The official Python SDK client does the whole OAuth flow against `/mcp` itself: 401 →
/// Agentry's metadata → the fixture's metadata → registration → authorization with PKCE (the
/// fixture approves as the member, naming their tenant) → token → tools/list and a call.
pub async fn python_sdk_oauth(fx: &OAuthFixture, ctx: &Ctx) {
    let t = ctx.tenant().await;
    std::fs::create_dir_all(workspace(ctx, &t, &t.member)).unwrap();
    std::fs::write(
        workspace(ctx, &t, &t.member).join("hello.txt"),
        "hello from the member's workspace",
    )
    .unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/support/oauth_python_client.py");
    let claims = json!({"agentry_tenant": t.id}).to_string();
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(agentry_mcp::testing::venv_dir().join("bin/python"))
            .arg(&script)
            .env("MCP_URL", ctx.url("/mcp"))
            .env("OAUTH_USER", &t.member.user_id)
            .env("OAUTH_CLAIMS", &claims)
            .env("CALL", r#"[["read_file", {"file_path": "hello.txt"}]]"#)
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
    let r: Value = serde_json::from_slice(&out.stdout).expect("the client prints JSON");
    assert_eq!(r["server"], "agentry", "{r}");
    assert!(
        r["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "read_file"),
        "{r}"
    );
    assert_eq!(r["results"][0]["error"], false, "{r}");
    assert!(
        r["results"][0]["text"]
            .as_str()
            .unwrap()
            .contains("hello from the member's workspace"),
        "{r}"
    );
    let grants: Vec<Value> = fx
        .requests()
        .await
        .into_iter()
        .filter(|e| e["endpoint"] == "token" && e["ok"] == true)
        .collect();
    assert!(
        grants
            .iter()
            .any(|e| e["grant_type"] == "authorization_code"),
        "{grants:?}"
    );
}

/// The keys are fetched under the outbound-address policy: with loopback not allowed, a token
/// cannot be checked (503 with Retry-After, naming the setting), and nothing is let through.
pub async fn keys_obey_the_network_policy(fx: &OAuthFixture, ctx: &Ctx) {
    let t = ctx.tenant().await;
    let token = fx.mint(naming(ctx, &t.id, &t.member.user_id)).await;
    let r = ctx.send(initialize(ctx, Some(&token))).await;
    assert_eq!(
        (r.status, r.code()),
        (503, "service_unavailable"),
        "{}",
        r.body
    );
    assert!(r.headers.contains_key("retry-after"), "{:?}", r.headers);
    assert!(
        r.message().contains("ALLOWED_NETWORKS") && r.message().contains("loopback"),
        "{}",
        r.message()
    );
    // Keys keep working.
    let r = ctx.send(initialize(ctx, Some(&t.member.key))).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

pub async fn start(fx: &OAuthFixture, loopback_allowed: bool) -> Ctx {
    let networks = if loopback_allowed {
        "127.0.0.2/32,127.0.0.1/32"
    } else {
        crate::mcp::TEST_MCP_NETWORK
    };
    agentry_trusting(
        fx,
        networks,
        &[
            ("AGENTRY_MCP__OAUTH__SCOPES_SUPPORTED", "mcp"),
            ("AGENTRY_MCP__OAUTH__REQUIRED_SCOPES", "mcp"),
        ],
    )
    .await
}

/// Agentry trusting `fx` with its introspection endpoint (RFC 7662) as the client `intro`
/// (registered with the fixture by `--client intro:intro-secret`), for opaque tokens and, with
/// `introspect_jwts`, for JWTs too; keys cached 1 s, so a revocation shows within a second.
pub async fn start_introspecting(fx: &OAuthFixture) -> Ctx {
    let introspection = format!("{}/introspect", fx.url("issuer"));
    agentry_trusting(
        fx,
        "127.0.0.2/32,127.0.0.1/32",
        &[
            ("AGENTRY_MCP__OAUTH__REQUIRED_SCOPES", "mcp"),
            ("AGENTRY_MCP__OAUTH__INTROSPECTION_URL", &introspection),
            ("AGENTRY_MCP__OAUTH__INTROSPECTION_CLIENT_ID", "intro"),
            (
                "AGENTRY_MCP__OAUTH__INTROSPECTION_CLIENT_SECRET",
                "intro-secret",
            ),
            ("AGENTRY_MCP__OAUTH__INTROSPECT_JWTS", "true"),
            ("AGENTRY_AUTH__CACHE_TTL_SECS", "1"),
        ],
    )
    .await
}

/// Opaque tokens are judged by the introspection endpoint: an active one naming a user is that
/// user; one for another audience, an unknown one, an expired one and one without the required
/// scope are refused; a JWT the authorization server revokes stops working within the cache's
/// second; API keys never reach the endpoint.
pub async fn introspected_tokens(fx: &OAuthFixture, ctx: &Ctx) {
    let t = ctx.tenant().await;
    let opaque = |claims: Value| async move {
        fx.mint(with(claims, json!({"key": "opaque", "scope": "mcp"})))
            .await
    };
    let member = naming(ctx, &t.id, &t.member.user_id);
    let token = opaque(member.clone()).await;
    assert!(!token.contains('.'), "an opaque token: {token}");
    assert_eq!(
        tool_names(ctx, &token).await,
        tool_names(ctx, &t.member.key).await
    );
    let introspected = || async {
        fx.requests()
            .await
            .iter()
            .filter(|e| e["endpoint"] == "introspect")
            .count()
    };
    let asked = introspected().await;
    assert!(asked >= 1, "the endpoint was asked");

    for (token, why) in [
        (
            opaque(with(
                member.clone(),
                json!({"aud": "https://elsewhere.example/mcp"}),
            ))
            .await,
            "audience",
        ),
        (
            "an-unknown-opaque-token-0123456789".to_string(),
            "not active",
        ),
        (
            opaque(with(member.clone(), json!({"ttl": -60}))).await,
            "not active",
        ),
    ] {
        let (status, message, challenge) = refused(ctx, &token).await;
        assert_eq!(status, 401, "{why}: {message}");
        assert!(message.contains(why), "{why}: {message}");
        assert!(challenge.contains("invalid_token"), "{challenge}");
    }
    let no_scope = fx
        .mint(with(
            member.clone(),
            json!({"key": "opaque", "scope": "other"}),
        ))
        .await;
    let (status, message, _) = refused(ctx, &no_scope).await;
    assert_eq!(status, 403, "{message}");
    // An inactive token is remembered: asking again does not ask the endpoint again.
    let before = introspected().await;
    let (status, _, _) = refused(ctx, "an-unknown-opaque-token-0123456789").await;
    assert_eq!(status, 401);
    assert_eq!(introspected().await, before);

    // A JWT is checked at the endpoint too (introspect_jwts): revoked, it stops working.
    let jwt = fx
        .mint(with(
            member.clone(),
            json!({"client_id": "intro", "scope": "mcp"}),
        ))
        .await;
    assert!(looks_like_jwt(&jwt));
    let r = ctx.send(initialize(ctx, Some(&jwt))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let revoked = reqwest::Client::new()
        .post(format!("{}/revoke", fx.url("issuer")))
        .basic_auth("intro", Some("intro-secret"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={jwt}"))
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status().as_u16(), 200);
    let since = Instant::now();
    loop {
        let (status, message, _) = refused(ctx, &jwt).await;
        if status == 401 {
            assert!(message.contains("not active"), "{message}");
            break;
        }
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "a revoked token still works: {status} {message}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // API keys are Agentry's: never sent to the authorization server.
    let before = introspected().await;
    let r = ctx.send(initialize(ctx, Some(&t.member.key))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = ctx
        .send(initialize(
            ctx,
            Some("agk_NotAReal_0000000000000000000000000000000000000000"),
        ))
        .await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(introspected().await, before);
}

fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3
}
