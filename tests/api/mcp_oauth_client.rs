//! OAuth sign-in to a user's MCP server (issue 18 item 1, the client side), end to end: a real authorization
//! server and OAuth-protected MCP server (`tests/support/oauth_fixture.py`, on the official
//! Python MCP SDK), the gateway's sign-in routes and callback, the pool connecting with the
//! stored tokens, and a run calling the protected tool. Attacks: another user's or tenant's
//! reach, a replayed or expired state, a forged one.

use agentry_fake_model::{FakeModelServer, FakeReply};
use agentry_mcp::testing::OAuthFixture;
use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::mcp::{run_over_ws, servers_path};

fn sign_in_path(user: &str, server: &str) -> String {
    format!("/api/v1/users/{user}/mcp-servers/{server}/sign-in")
}

/// The browser step: the fixture approves at once and redirects to Agentry's callback.
async fn approve(authorization_url: &str) -> String {
    let http = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = http.get(authorization_url).send().await.unwrap();
    assert_eq!(
        r.status().as_u16(),
        302,
        "the authorization server approves"
    );
    r.headers()["location"].to_str().unwrap().to_string()
}

/// Follow the redirect to Agentry's callback (no API key) in a browser that did not start the
/// sign-in (it has no cookie): status and page.
async fn callback(ctx: &Ctx, location: &str) -> (u16, String) {
    callback_with(ctx, location, None).await
}

/// The callback in a browser with `cookie` (`name=value`).
async fn callback_with(ctx: &Ctx, location: &str, cookie: Option<&str>) -> (u16, String) {
    let url = reqwest::Url::parse(location).unwrap();
    assert_eq!(url.path(), "/api/v1/mcp/oauth/callback", "{location}");
    let local = ctx.url(&format!("{}?{}", url.path(), url.query().unwrap_or("")));
    let mut req = reqwest::Client::new().get(local);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    html(req.send().await.unwrap()).await
}

async fn html(r: reqwest::Response) -> (u16, String) {
    let status = r.status().as_u16();
    let html = r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html");
    let text = r.text().await.unwrap();
    assert!(html, "{status}: {text}");
    (status, text)
}

/// The person confirms the sign-in the page shows: its form's fields, posted back.
async fn confirm(ctx: &Ctx, page: &str) -> (u16, String) {
    assert!(page.contains("<h1>Confirm the sign-in</h1>"), "{page}");
    let field = |name: &str| -> Option<String> {
        let at = page.find(&format!("name=\"{name}\" value=\""))? + name.len() + 15;
        let v = &page[at..at + page[at..].find('"')?];
        Some(
            v.replace("&quot;", "\"")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&"),
        )
    };
    let form: Vec<(&str, String)> = ["code", "state", "iss"]
        .into_iter()
        .filter_map(|n| field(n).map(|v| (n, v)))
        .collect();
    let r = reqwest::Client::new()
        .post(ctx.url("/api/v1/mcp/oauth/callback"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string(&form).unwrap())
        .send()
        .await
        .unwrap();
    html(r).await
}

fn sign_in_of<'a>(view: &'a Value, name: &str) -> &'a Value {
    let list = view.as_array().unwrap();
    &list.iter().find(|s| s["name"] == name).unwrap()["sign_in"]
}

pub async fn sign_in_to_a_users_oauth_server(ctx: &Ctx, fake: &FakeModelServer) {
    let fixture = OAuthFixture::start(&["--protected-mcp", "--user", "alice@idp"]).await;
    let mcp_url = fixture.url("mcp_url").to_string();
    let t = ctx.tenant().await;
    let other = ctx.tenant().await;
    let me = &t.member;
    let path = servers_path(&me.user_id);
    let added = ctx
        .ok(
            Method::POST,
            &path,
            &me.key,
            Some(json!({"name": "secure", "url": mcp_url, "auth": {"type": "oauth"}})),
            201,
        )
        .await;
    assert_eq!(added["auth"]["type"], "oauth", "{added}");
    let listed = ctx.ok(Method::GET, &path, &me.key, None, 200).await;
    assert_eq!(
        sign_in_of(&listed, "secure")["needs_sign_in"],
        true,
        "{listed}"
    );

    // Nobody else can start a sign-in to the member's server: another member's key, another
    // tenant's admin (404, as for the server itself).
    for key in [&t.member2.key, &other.admin.key] {
        let r = ctx
            .call(
                Method::POST,
                &sign_in_path(&me.user_id, "secure"),
                Some(key),
                None,
            )
            .await;
        assert_eq!(r.status, 404, "{}", r.body);
    }
    // No key → 401; the platform admin key (no tenant) → 403.
    for method in [Method::POST, Method::DELETE] {
        let r = ctx
            .call(
                method.clone(),
                &sign_in_path(&me.user_id, "secure"),
                None,
                None,
            )
            .await;
        assert_eq!(r.status, 401, "{}", r.body);
        let r = ctx
            .call(
                method,
                &sign_in_path(&me.user_id, "secure"),
                Some(crate::ctx::ADMIN_KEY),
                None,
            )
            .await;
        assert_eq!(r.status, 403, "{}", r.body);
    }
    // An OAuth server whose authorization server cannot be found: 422, the cause in words.
    ctx.ok(
        Method::POST,
        &path,
        &me.key,
        Some(
            json!({"name": "nowhere", "url": "http://127.0.0.2:9/mcp", "auth": {"type": "oauth"}}),
        ),
        201,
    )
    .await;
    let r = ctx
        .call(
            Method::POST,
            &sign_in_path(&me.user_id, "nowhere"),
            Some(&me.key),
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (422, "validation_error"),
        "{}",
        r.body
    );
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("discovering the authorization server"),
        "{}",
        r.body
    );
    ctx.ok(
        Method::DELETE,
        &format!("{path}/nowhere"),
        &me.key,
        None,
        204,
    )
    .await;
    // A server without OAuth has nothing to sign in to.
    ctx.ok(
        Method::POST,
        &path,
        &me.key,
        Some(json!({"name": "plain", "url": mcp_url})),
        201,
    )
    .await;
    let r = ctx
        .call(
            Method::POST,
            &sign_in_path(&me.user_id, "plain"),
            Some(&me.key),
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (422, "validation_error"),
        "{}",
        r.body
    );

    // Sign in: the URL goes to the fixture's authorization server, PKCE S256, a redirect URI
    // on Agentry.
    let started = ctx
        .ok(
            Method::POST,
            &sign_in_path(&me.user_id, "secure"),
            &me.key,
            None,
            200,
        )
        .await;
    let auth_url = started["authorization_url"].as_str().unwrap();
    assert!(auth_url.starts_with(fixture.url("issuer")), "{started}");
    assert!(
        auth_url.contains("code_challenge_method=S256"),
        "{auth_url}"
    );
    assert!(
        started["redirect_uri"]
            .as_str()
            .unwrap()
            .ends_with("/api/v1/mcp/oauth/callback"),
        "{started}"
    );
    let location = approve(auth_url).await;
    // The state is stored only as a hash.
    let state = reqwest::Url::parse(&location)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "state")
        .unwrap()
        .1
        .to_string();
    // This client kept no cookie from the start: it is any browser, so the page asks first,
    // naming whose account it connects, and nothing is stored until the person confirms.
    let (status, asked) = callback(ctx, &location).await;
    assert_eq!(status, 200, "{asked}");
    assert!(
        asked.contains("Connect secure for") && asked.contains("If someone sent you this link"),
        "{asked}"
    );
    let stored = || async {
        agentry_store::mcp_oauth::get_tokens(
            &ctx.db,
            &t.scope(),
            me.user_id.parse().unwrap(),
            "secure",
        )
        .await
        .unwrap()
    };
    assert!(
        stored().await.is_none(),
        "nothing stored before the confirmation"
    );
    let (status, page) = confirm(ctx, &asked).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<h1>Signed in</h1>"), "{page}");
    // A confirmation over the body limit is refused like any body.
    let r = ctx
        .send(
            ctx.request(Method::POST, "/api/v1/mcp/oauth/callback", None)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("state={}", "x".repeat(crate::ctx::BODY_LIMIT + 1))),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (413, "payload_too_large"),
        "{}",
        r.body
    );
    // Used once: the same answer again is refused, asked for or confirmed.
    let (status, page) = confirm(ctx, &asked).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("already used"), "{page}");
    let (status, page) = callback(ctx, &location).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("Sign-in failed") && page.contains("already used"),
        "{page}"
    );

    // The tokens are sealed at rest, for this user only.
    let row = agentry_store::mcp_oauth::get_tokens(
        &ctx.db,
        &t.scope(),
        me.user_id.parse().unwrap(),
        "secure",
    )
    .await
    .unwrap()
    .expect("tokens stored");
    assert!(row.tokens_sealed.starts_with("v1:"), "sealed");
    assert!(!row.tokens_sealed.contains("access_token"));
    assert!(!row.tokens_sealed.contains(&state));
    let listed = ctx.ok(Method::GET, &path, &me.key, None, 200).await;
    let s = sign_in_of(&listed, "secure");
    assert_eq!(
        (s["signed_in"].clone(), s["needs_sign_in"].clone()),
        (json!(true), json!(false)),
        "{listed}"
    );
    assert!(s["expires_at"].as_u64().is_some(), "{s}");

    // A run calls the protected tool: the server sees the signed-in user's token.
    let session = ctx
        .ok(
            Method::POST,
            "/api/v1/sessions",
            &me.key,
            Some(json!({})),
            201,
        )
        .await;
    let sid = session["session_id"].as_str().unwrap().to_string();
    fake.push(FakeReply::tool_call("w1", "secure__whoami", json!({})));
    fake.push(FakeReply::text("done"));
    let events = run_over_ws(ctx, &me.key, &sid, "who am I there?").await;
    assert_eq!(
        events.last().unwrap()["data"]["status"],
        "completed",
        "{events:?}"
    );
    let result = events
        .iter()
        .find(|e| e["event_type"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result: {events:?}"));
    assert!(
        result.to_string().contains("alice@idp"),
        "the protected server saw the signed-in user: {result}"
    );

    // Another member of the tenant has no sign-in to their own server of the same URL.
    let theirs = servers_path(&t.member2.user_id);
    ctx.ok(
        Method::POST,
        &theirs,
        &t.member2.key,
        Some(json!({"name": "secure", "url": mcp_url, "auth": {"type": "oauth"}})),
        201,
    )
    .await;
    let listed = ctx
        .ok(Method::GET, &theirs, &t.member2.key, None, 200)
        .await;
    assert_eq!(
        sign_in_of(&listed, "secure")["needs_sign_in"],
        true,
        "{listed}"
    );

    // The browser that started a sign-in (the console's fetch gets its cookie) is signed in
    // without the question; a cookie of another value does not count.
    let r = ctx
        .request(
            Method::POST,
            &sign_in_path(&t.member2.user_id, "secure"),
            Some(&t.member2.key),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let set_cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set_cookie.contains("HttpOnly")
            && set_cookie.contains("SameSite=Lax")
            && set_cookie.contains("Path=/api/v1/mcp/oauth/callback"),
        "{set_cookie}"
    );
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    let started: Value = r.json().await.unwrap();
    let theirs_back = approve(started["authorization_url"].as_str().unwrap()).await;
    let (name, _) = cookie.split_once('=').unwrap();
    let wrong = format!("{name}=not-the-nonce");
    let (_, page) = callback_with(ctx, &theirs_back, Some(&wrong)).await;
    assert!(page.contains("<h1>Confirm the sign-in</h1>"), "{page}");
    let (status, page) = callback_with(ctx, &theirs_back, Some(&cookie)).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<h1>Signed in</h1>"), "{page}");
    let listed = ctx
        .ok(Method::GET, &theirs, &t.member2.key, None, 200)
        .await;
    assert_eq!(sign_in_of(&listed, "secure")["signed_in"], true, "{listed}");

    // A forged state and an expired one are refused, with a page that says what to do.
    let forged = location.replace(&state, "forged-state-value");
    let (status, page) = callback(ctx, &forged).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("Sign-in failed") && page.contains("Start the sign-in again"),
        "{page}"
    );
    agentry_store::mcp_oauth::put_state(
        &ctx.db,
        &t.scope(),
        me.user_id.parse().unwrap(),
        "secure",
        "an-expired-state",
        "v1:unused",
        agentry_store::now() - chrono::Duration::minutes(1),
    )
    .await
    .unwrap();
    let expired = location.replace(&state, "an-expired-state");
    let (status, page) = callback(ctx, &expired).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("Sign-in failed") && page.contains("expired"),
        "{page}"
    );

    // Sign out: the tokens are gone; another user cannot sign the member out.
    let r = ctx
        .call(
            Method::DELETE,
            &sign_in_path(&me.user_id, "secure"),
            Some(&t.member2.key),
            None,
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    ctx.ok(
        Method::DELETE,
        &sign_in_path(&me.user_id, "secure"),
        &me.key,
        None,
        204,
    )
    .await;
    let listed = ctx.ok(Method::GET, &path, &me.key, None, 200).await;
    assert_eq!(
        sign_in_of(&listed, "secure")["needs_sign_in"],
        true,
        "{listed}"
    );

    // The terminal client: `/mcp` says which server needs a sign-in, `/sign-in NAME` shows the
    // link; opening it signs the member in again.
    let term = crate::chat_cli::Term::start(ctx, &me.key, &[]);
    term.type_at_prompt(1, "/mcp").await;
    term.wait_for("needs a sign-in: /sign-in secure").await;
    term.type_at_prompt(2, "/sign-in secure").await;
    let screen = term.wait_for("the page says when you are signed in").await;
    let link = screen
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(fixture.url("issuer")))
        .unwrap_or_else(|| panic!("no sign-in link:\n{screen}"))
        .to_string();
    // A terminal user's browser holds no cookie of the sign-in: it confirms.
    let (_, asked) = callback(ctx, &approve(&link).await).await;
    let (status, page) = confirm(ctx, &asked).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<h1>Signed in</h1>"), "{page}");
    term.type_at_prompt(3, "/mcp").await;
    let screen = term.wait_for("  signed in").await;
    assert!(!screen.contains("(scripted)"), "no run started: {screen}");
}
