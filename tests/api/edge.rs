//! Client mistakes at the edge: malformed bodies, oversize bodies, wrong content types, bad path
//! ids, bad query parameters, unknown routes, wrong methods — each answers our error JSON with
//! the right code, never a 500 ([`Ctx::send`] checks the shape of every one).

use std::collections::BTreeSet;

use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{ADMIN_KEY, BODY_LIMIT, Ctx, unique};

struct BodyRoute {
    method: Method,
    path: String,
    key: String,
    /// The field whose absence `{}` reports, for routes with a required field.
    required: Option<&'static str>,
}

pub async fn malformed_requests(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let adm = t.admin.key.clone();
    let m2 = &t.member2.user_id;
    let a = &t.id;
    let br = |method: Method, path: String, key: &str, required: Option<&'static str>| BodyRoute {
        method,
        path,
        key: key.to_string(),
        required,
    };
    let routes = vec![
        br(Method::POST, "/api/v1/agents".into(), &adm, Some("id")),
        br(
            Method::POST,
            format!("/api/v1/agents/{}", unique("a")),
            &adm,
            None,
        ),
        br(Method::PUT, "/api/v1/agents/default".into(), &adm, None),
        br(Method::POST, "/api/v1/profiles".into(), &adm, Some("id")),
        br(
            Method::POST,
            "/api/v1/remote-agents".into(),
            &adm,
            Some("id"),
        ),
        br(Method::PUT, "/api/v1/profiles/mine".into(), &adm, None),
        br(
            Method::POST,
            "/api/v1/tenant/users".into(),
            &adm,
            Some("name"),
        ),
        br(
            Method::PATCH,
            format!("/api/v1/tenant/users/{m2}"),
            &adm,
            None,
        ),
        br(
            Method::POST,
            "/api/v1/tenant/api-keys".into(),
            &adm,
            Some("user_id"),
        ),
        br(
            Method::POST,
            "/api/v1/tenant/roles".into(),
            &adm,
            Some("tools"),
        ),
        br(
            Method::PUT,
            "/api/v1/tenant/roles/anything".into(),
            &adm,
            Some("tools"),
        ),
        br(
            Method::POST,
            "/api/v1/tenant/mcp-virtual-servers".into(),
            &adm,
            Some("tools"),
        ),
        br(
            Method::PUT,
            "/api/v1/tenant/mcp-virtual-servers/anything".into(),
            &adm,
            Some("tools"),
        ),
        br(
            Method::POST,
            "/api/v1/admin/tenants".into(),
            ADMIN_KEY,
            Some("name"),
        ),
        br(
            Method::PATCH,
            format!("/api/v1/admin/tenants/{a}"),
            ADMIN_KEY,
            None,
        ),
        br(
            Method::PUT,
            format!("/api/v1/admin/tenants/{a}"),
            ADMIN_KEY,
            Some("name"),
        ),
        br(
            Method::POST,
            format!("/api/v1/admin/tenants/{a}/users"),
            ADMIN_KEY,
            Some("name"),
        ),
        br(
            Method::PATCH,
            format!("/api/v1/admin/tenants/{a}/users/{m2}"),
            ADMIN_KEY,
            None,
        ),
        br(
            Method::POST,
            format!("/api/v1/admin/tenants/{a}/api-keys"),
            ADMIN_KEY,
            Some("user_id"),
        ),
    ];
    let oversize = json!({ "name": "x".repeat(BODY_LIMIT) }).to_string();
    for r in &routes {
        let what = format!("{} {}", r.method, r.path);
        let base = || ctx.request(r.method.clone(), &r.path, Some(&r.key));
        // Wrong or missing content type: 415.
        for ct in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            None,
        ] {
            let mut rb = base().body(r#"{"name":"x"}"#);
            if let Some(ct) = ct {
                rb = rb.header("content-type", ct);
            }
            let res = ctx.send(rb).await;
            assert_eq!(
                (res.status, res.code()),
                (415, "unsupported_media_type"),
                "{what} {ct:?}"
            );
        }
        let json_body = |s: String| base().header("content-type", "application/json").body(s);
        // Not JSON: 400.
        for bad in [
            "{\"name\":",
            "not json",
            "",
            "{\"a\":1} trailing",
            "\u{feff}{}",
        ] {
            let res = ctx.send(json_body(bad.to_string())).await;
            assert_eq!(
                (res.status, res.code()),
                (400, "invalid_json"),
                "{what} {bad:?}"
            );
        }
        // JSON of the wrong shape: 422 naming the field.
        for (bad, field) in [
            ("[]", "."),
            ("42", "."),
            ("{\"unexpected_field\": 1}", "unexpected_field"),
        ] {
            let res = ctx.send(json_body(bad.to_string())).await;
            assert_eq!(
                (
                    res.status,
                    res.code(),
                    res.body["details"]["field"].as_str()
                ),
                (422, "validation_error", Some(field)),
                "{what} {bad}"
            );
        }
        if let Some(field) = r.required {
            let res = ctx.send(json_body("{}".into())).await;
            assert_eq!(
                (res.status, res.body["details"]["field"].as_str()),
                (422, Some(field)),
                "{what}"
            );
            assert!(res.body["message"].as_str().unwrap().contains(field));
        }
        // Over the limit: 413, with a known length and chunked.
        let res = ctx.send(json_body(oversize.clone())).await;
        assert_eq!(
            (res.status, res.code()),
            (413, "payload_too_large"),
            "{what}"
        );
        assert_eq!(res.body["details"]["limit_bytes"], BODY_LIMIT);
        let chunks: Vec<Result<String, std::io::Error>> = oversize
            .as_bytes()
            .chunks(1024)
            .map(|c| Ok(String::from_utf8_lossy(c).into_owned()))
            .collect();
        let stream = futures::stream::iter(chunks);
        let res = ctx
            .send(
                base()
                    .header("content-type", "application/json")
                    .body(reqwest::Body::wrap_stream(stream)),
            )
            .await;
        assert_eq!(
            (res.status, res.code()),
            (413, "payload_too_large"),
            "{what} chunked"
        );
    }
    // The routes whose bodies have rules of their own (chat, sessions, decisions, MCP servers)
    // refuse a missing content type and an oversize body the same way.
    let sid = uuid::Uuid::new_v4();
    let me = &t.member.user_id;
    for (method, path) in [
        (Method::POST, "/api/v1/chat".to_string()),
        (Method::POST, "/api/v1/chat/stream".to_string()),
        (Method::POST, "/api/v1/sessions".to_string()),
        (
            Method::POST,
            format!("/api/v1/sessions/{sid}/approvals/{}", uuid::Uuid::new_v4()),
        ),
        (Method::POST, format!("/api/v1/users/{me}/mcp-servers")),
        (Method::PUT, format!("/api/v1/users/{me}/mcp-servers/s")),
    ] {
        let what = format!("{method} {path}");
        let base = || ctx.request(method.clone(), &path, Some(&t.member.key));
        let res = ctx.send(base()).await;
        assert_eq!(
            (res.status, res.code()),
            (415, "unsupported_media_type"),
            "{what} without a body"
        );
        let res = ctx
            .send(base().header("content-type", "text/plain").body("{}"))
            .await;
        assert_eq!(
            (res.status, res.code()),
            (415, "unsupported_media_type"),
            "{what}"
        );
        let res = ctx
            .send(
                base()
                    .header("content-type", "application/json")
                    .body(oversize.clone()),
            )
            .await;
        assert_eq!(
            (res.status, res.code()),
            (413, "payload_too_large"),
            "{what}"
        );
    }
    // Quotas beyond what the database holds are refused, not clamped, and change nothing.
    let tenant_path = format!("/api/v1/admin/tenants/{a}");
    let before = ctx
        .ok(Method::GET, &tenant_path, ADMIN_KEY, None, 200)
        .await;
    for (method, path, body) in [
        (
            Method::POST,
            "/api/v1/admin/tenants".to_string(),
            json!({"name": unique("big"), "max_users": 2_147_483_648_u64}),
        ),
        (
            Method::PATCH,
            format!("/api/v1/admin/tenants/{a}"),
            json!({"requests_per_minute": 4_294_967_295_u64}),
        ),
        (
            Method::PUT,
            format!("/api/v1/admin/tenants/{a}"),
            json!({"name": "x", "tokens_per_day": 9_223_372_036_854_775_808_u64}),
        ),
    ] {
        let res = ctx
            .call(method.clone(), &path, Some(ADMIN_KEY), Some(&body))
            .await;
        let field = body
            .as_object()
            .unwrap()
            .keys()
            .find(|k| *k != "name")
            .unwrap()
            .clone();
        assert_eq!(
            (
                res.status,
                res.code(),
                res.body["details"]["field"].as_str()
            ),
            (422, "validation_error", Some(field.as_str())),
            "{method} {path}: {}",
            res.body
        );
    }
    let after = ctx
        .ok(Method::GET, &tenant_path, ADMIN_KEY, None, 200)
        .await;
    assert_eq!(after, before, "a refused change changed the tenant");
    // The largest storable values are kept as given.
    let res = ctx
        .ok(
            Method::PATCH,
            &tenant_path,
            ADMIN_KEY,
            Some(json!({"max_users": 2_147_483_647, "tokens_per_day": 9_223_372_036_854_775_807_u64})),
            200,
        )
        .await;
    assert_eq!(res["max_users"], 2_147_483_647);
    assert_eq!(res["tokens_per_day"], 9_223_372_036_854_775_807_u64);
    // JSON with parameters or a +json subtype is JSON.
    for ct in [
        "application/json; charset=utf-8",
        "application/merge-patch+json",
    ] {
        let res = ctx
            .send(
                ctx.request(
                    Method::PATCH,
                    &format!("/api/v1/tenant/users/{m2}"),
                    Some(&adm),
                )
                .header("content-type", ct)
                .body("{}"),
            )
            .await;
        assert_eq!(res.status, 200, "{ct}");
    }

    // Bad path ids: every documented route, every parameter in turn, every method: 400 naming
    // the parameter — decided before the body is read (the body here is valid JSON of no
    // particular shape, and would be a 422 otherwise).
    let s = ctx.seed_session(&t, &t.member.user_id, 1, 1).await;
    bad_path_ids(ctx, &adm).await;

    // Bad query parameters: 400 naming the parameter.
    let sid = s.session_id;
    let queries: Vec<(String, &str, &str)> = vec![
        ("/api/v1/sessions?limit=0".into(), "limit", adm.as_str()),
        ("/api/v1/sessions?limit=1001".into(), "limit", &adm),
        ("/api/v1/sessions?limit=ten".into(), "limit", &adm),
        ("/api/v1/sessions?offset=-1".into(), "offset", &adm),
        ("/api/v1/sessions?user_id=bob".into(), "user_id", &adm),
        ("/api/v1/sessions?limt=5".into(), "limt", &adm),
        (
            format!("/api/v1/sessions/{sid}/messages?limit=100000"),
            "limit",
            &adm,
        ),
        (
            format!("/api/v1/sessions/{sid}/events?after_seq=x"),
            "after_seq",
            &adm,
        ),
        (
            format!("/api/v1/sessions/{sid}/events?limit=0"),
            "limit",
            &adm,
        ),
        ("/api/v1/executions?status=exploded".into(), "status", &adm),
        ("/api/v1/executions?session_id=1".into(), "session_id", &adm),
        ("/api/v1/tenant/users?offset=x".into(), "offset", &adm),
        (
            "/api/v1/tenant/api-keys?prefix=%25%25".into(),
            "prefix",
            &adm,
        ),
        ("/api/v1/admin/tenants?limit=-5".into(), "limit", ADMIN_KEY),
        (
            format!("/api/v1/admin/tenants/{a}/users?limit=0"),
            "limit",
            ADMIN_KEY,
        ),
        (
            format!("/api/v1/admin/tenants/{a}/api-keys?user_id=x"),
            "user_id",
            ADMIN_KEY,
        ),
        (
            format!("/api/v1/admin/tenants/{a}/usage?from=2026-1-1x"),
            "from",
            ADMIN_KEY,
        ),
    ];
    for (p, param, key) in queries {
        let res = ctx.call(Method::GET, &p, Some(key), None).await;
        assert_eq!(
            (
                res.status,
                res.code(),
                res.body["details"]["parameter"].as_str()
            ),
            (400, "invalid_query", Some(param)),
            "{p}: {}",
            res.body
        );
    }

    // Unknown routes: 404 route_not_found naming the path, with or without a key.
    for p in [
        "/api/v1/nope",
        "/api/v2/sessions",
        "/api/v1/sessions/x/y/z",
        "/api",
        "/metrics/extra",
        "/api/v1/admin",
    ] {
        for key in [None, Some(adm.as_str())] {
            let res = ctx.call(Method::GET, p, key, None).await;
            assert_eq!((res.status, res.code()), (404, "route_not_found"), "{p}");
            assert!(res.body["message"].as_str().unwrap().contains(p));
        }
    }
    // `/` is the web page.
    let page = ctx.call(Method::GET, "/", None, None).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .as_str()
            .unwrap()
            .contains("<title>Agentry</title>")
    );
    console_assets(ctx).await;
    wrong_methods(ctx).await;
}

/// The web console (docs/console.md): a strict CSP, every script and stylesheet it names served
/// here with its type, and an unknown asset answered with our error JSON.
async fn console_assets(ctx: &Ctx) {
    let res = ctx.http.get(ctx.url("/")).send().await.unwrap();
    let csp = res.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("script-src 'self';"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    let page = res.text().await.unwrap();
    assert!(!page.contains("<script>"), "no inline script: {page}");
    assert!(page.contains("/assets/app.js") && page.contains("/assets/app.css"));
    for (asset, kind) in [
        ("/assets/app.js", "text/javascript"),
        ("/assets/chat.js", "text/javascript"),
        ("/assets/marked.esm.js", "text/javascript"),
        ("/assets/purify.es.mjs", "text/javascript"),
        ("/assets/app.css", "text/css"),
    ] {
        let r = ctx.http.get(ctx.url(asset)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{asset}");
        let ct = r.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with(kind), "{asset}: {ct}");
    }
    let missing = ctx.call(Method::GET, "/assets/nope.js", None, None).await;
    assert_eq!((missing.status, missing.code()), (404, "route_not_found"));
}

async fn bad_path_ids(ctx: &Ctx, tenant_admin_key: &str) {
    let doc = ctx
        .call(Method::GET, "/openapi.json", None, None)
        .await
        .body;
    let mut checked = 0;
    for (template, ops) in doc["paths"].as_object().unwrap() {
        let params: Vec<&str> = template
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        for bad in &params {
            // `GET /files/{path}`: any name is a file name; its refusals (a path out of the
            // workspace) are tested in `data.rs`.
            if *bad == "path" {
                continue;
            }
            let path = template
                .split('/')
                .map(
                    |seg| match seg.strip_prefix('{').and_then(|x| x.strip_suffix('}')) {
                        Some(p) if p == *bad => "Bad!Id".to_string(),
                        Some("agent_id") => "default".to_string(),
                        Some(_) => uuid::Uuid::new_v4().to_string(),
                        None => seg.to_string(),
                    },
                )
                .collect::<Vec<_>>()
                .join("/");
            let key = if template.starts_with("/api/v1/admin/") {
                ADMIN_KEY
            } else {
                tenant_admin_key
            };
            for method in ops.as_object().unwrap().keys() {
                let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
                let mut rb = ctx.request(m.clone(), &path, Some(key));
                if m != Method::GET && m != Method::DELETE {
                    rb = rb.json(&json!({ "surely": ["not", "a", "valid", "body"] }));
                }
                let res = ctx.send(rb).await;
                assert_eq!(
                    (res.status, res.code(), res.details()["parameter"].as_str()),
                    (400, "bad_request", Some(*bad)),
                    "{m} {path}: {}",
                    res.body
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 30, "only {checked} id routes checked");
}

/// Every documented path answers an undocumented method with 405 and an `Allow` header that
/// lists exactly the documented methods: nothing is served that is not documented.
pub async fn wrong_methods(ctx: &Ctx) {
    let doc = ctx
        .call(Method::GET, "/openapi.json", None, None)
        .await
        .body;
    let paths = doc["paths"].as_object().unwrap();
    let all = ["GET", "POST", "PUT", "PATCH", "DELETE"];
    for (template, ops) in paths {
        let documented: BTreeSet<String> = ops
            .as_object()
            .unwrap()
            .keys()
            .map(|m| m.to_uppercase())
            .collect();
        let path = fill(template);
        for m in all.iter().filter(|m| !documented.contains(**m)) {
            let res = ctx
                .call(
                    Method::from_bytes(m.as_bytes()).unwrap(),
                    &path,
                    Some(ADMIN_KEY),
                    None,
                )
                .await;
            assert_eq!(
                (res.status, res.code()),
                (405, "method_not_allowed"),
                "{m} {path}"
            );
            let allow: BTreeSet<String> = res.headers["allow"]
                .to_str()
                .unwrap()
                .split(", ")
                .map(String::from)
                .collect();
            // HEAD comes with every GET.
            let mut expected = documented.clone();
            if expected.contains("GET") {
                expected.insert("HEAD".into());
            }
            assert_eq!(allow, expected, "Allow of {path}");
        }
    }
}

/// A concrete path for a template (`{x}` → a well-formed id).
pub fn fill(template: &str) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find('}')
            .map(|e| start + e + 1)
            .unwrap_or(rest.len());
        let name = &rest[start..end];
        out.push_str(if name == "{agent_id}" {
            "default"
        } else {
            "00000000-0000-0000-0000-000000000000"
        });
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The key is checked before the body is read: no key with a huge body or the wrong content
/// type is 401, not 413 or 415, and so is an unknown key (which needs a database lookup).
pub async fn auth_before_body(ctx: &Ctx) {
    let huge = "x".repeat(4 * BODY_LIMIT);
    for key in [
        None,
        Some("agk_Unknown1_0000000000000000000000000000000000000000"),
    ] {
        for (ct, body) in [
            ("application/json", huge.clone()),
            ("text/plain", "{}".to_string()),
            ("application/json", "{".to_string()),
        ] {
            for (m, p) in [
                (Method::POST, "/api/v1/agents"),
                (Method::POST, "/api/v1/admin/tenants"),
                (Method::POST, "/api/v1/tenant/users"),
            ] {
                let rb = ctx
                    .request(m.clone(), p, key)
                    .header("content-type", ct)
                    .body(body.clone());
                let res = ctx.send(rb).await;
                assert_eq!(
                    (res.status, res.code()),
                    (401, "unauthorized"),
                    "{m} {p} {ct} key={key:?}"
                );
            }
        }
    }
    // A member on an admin route with a bad body: the permission answers first (403).
    let t = ctx.tenant().await;
    let res = ctx
        .send(
            ctx.request(Method::POST, "/api/v1/agents", Some(&t.member.key))
                .header("content-type", "text/plain")
                .body(huge),
        )
        .await;
    assert_eq!((res.status, res.code()), (403, "forbidden"));
    let _: Value = res.body;
}
