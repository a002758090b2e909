//! Properties of the HTTP API (seed properties 25, 30, 46), 100+ cases each against one real
//! server. Every response also passes the invariants [`Ctx::send`] checks.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use reqwest::Method;
use serde_json::json;

use crate::ctx::{ADMIN_KEY, Ctx, TenantFx};

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: 128,
        failure_persistence: None,
        ..Config::default()
    })
}

const GUARDED: [&str; 8] = [
    "/api/v1/me",
    "/api/v1/sessions",
    "/api/v1/agents",
    "/api/v1/executions",
    "/api/v1/tenant/users",
    "/api/v1/tenant/api-keys",
    "/api/v1/admin/tenants",
    "/api/v1/agents/default",
];

/// Property 30: any request without a valid key — none, junk, key-shaped but unknown, in any
/// carrier — is refused with 401, and the refusal does not say why.
pub fn requests_without_a_valid_key_are_refused_with_401(rt: &tokio::runtime::Runtime, ctx: &Ctx) {
    let key = prop_oneof![
        Just(None),
        "[!-~]{0,80}".prop_map(Some),
        "agk_[A-Za-z0-9]{8}_[A-Za-z0-9]{0,48}".prop_map(Some),
    ];
    let carrier = 0..3usize;
    let route = 0..GUARDED.len();
    runner()
        .run(&(key, carrier, route), |(key, carrier, route)| {
            let path = GUARDED[route];
            let res = rt.block_on(async {
                let mut rb = ctx.http.get(ctx.url(path));
                if let Some(k) = &key {
                    rb = match carrier {
                        0 => rb.header("authorization", format!("Bearer {k}")),
                        1 => rb.header("x-api-key", k.as_str()),
                        _ => rb.header("upgrade", "websocket").header(
                            "sec-websocket-protocol",
                            format!("agentry.v1, agentry.key.{k}"),
                        ),
                    };
                }
                ctx.send(rb).await
            });
            prop_assert_eq!(res.status, 401, "{} with {:?}", path, key);
            prop_assert_eq!(res.code(), "unauthorized");
            Ok(())
        })
        .unwrap();
}

/// Property 25: whatever a client sends — any method, path, body, content type, key — a failed
/// request answers `{error_code, message, details}` with the status of its code, never a 500.
pub fn every_failed_request_has_the_error_shape(
    rt: &tokio::runtime::Runtime,
    ctx: &Ctx,
    t: &TenantFx,
) {
    let method = prop::sample::select(vec![
        "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS",
    ]);
    let id = prop_oneof![
        Just(uuid::Uuid::new_v4().to_string()),
        "[a-z0-9-]{0,40}",
        Just("default".to_string()),
        "[ -~]{0,20}".prop_map(|s| s.replace(['/', '?', '#', '%'], "_")),
    ];
    let template = prop::sample::select(vec![
        "/api/v1/{}",
        "/api/v1/sessions/{}",
        "/api/v1/sessions/{}/messages?limit={}",
        "/api/v1/sessions/{}/events?after_seq={}",
        "/api/v1/agents/{}",
        "/api/v1/executions?status={}",
        "/api/v1/tenant/users/{}",
        "/api/v1/tenant/api-keys/{}",
        "/api/v1/admin/tenants/{}",
        "/api/v1/admin/tenants/{}/users/{}",
        "/api/v1/admin/tenants/{}/usage?from={}",
        "/{}",
    ]);
    let body = prop_oneof![
        Just(None),
        "[ -~]{0,200}".prop_map(Some),
        Just(Some("{\"name\": \"x\", \"max_users\": -1}".to_string())),
        Just(Some("{\"id\": 7}".to_string())),
        Just(Some("[]".to_string())),
    ];
    let content_type = prop::sample::select(vec![
        "application/json",
        "text/plain",
        "",
        "application/json; charset=latin1",
    ]);
    let who = 0..4usize;
    runner()
        .run(
            &(method, template, id.clone(), id, body, content_type, who),
            |(m, template, a, b, body, ct, who)| {
                let path = template.replacen("{}", &a, 1).replacen("{}", &b, 1);
                let path = if path.contains(' ') {
                    path.replace(' ', "%20")
                } else {
                    path
                };
                let key = match who {
                    0 => None,
                    1 => Some(t.member.key.as_str()),
                    2 => Some(t.admin.key.as_str()),
                    _ => Some(ADMIN_KEY),
                };
                // Never let a random request delete or replace a fixture.
                if matches!(m, "DELETE" | "PUT" | "PATCH")
                    && (path.contains(&t.id) || path.ends_with("/default"))
                {
                    return Ok(());
                }
                let res = rt.block_on(async {
                    let mut rb = ctx.request(Method::from_bytes(m.as_bytes()).unwrap(), &path, key);
                    if !ct.is_empty() {
                        rb = rb.header("content-type", ct);
                    }
                    if let Some(b) = &body {
                        rb = rb.body(b.clone());
                    }
                    ctx.send(rb).await
                });
                prop_assert!(res.status != 500);
                Ok(())
            },
        )
        .unwrap();
}

/// Property 46: for any `limit` and `offset`, a page of messages has the right number of
/// messages, in the order they were saved.
pub fn message_pages_have_the_right_count_and_order(
    rt: &tokio::runtime::Runtime,
    ctx: &Ctx,
    t: &TenantFx,
) {
    const N: usize = 37;
    let s = rt.block_on(ctx.seed_session(t, &t.member.user_id, N, 0));
    runner()
        .run(&(1..=50u64, 0..=45u64), |(limit, offset)| {
            let page = rt.block_on(ctx.ok(
                Method::GET,
                &format!(
                    "/api/v1/sessions/{}/messages?limit={limit}&offset={offset}",
                    s.session_id
                ),
                &t.member.key,
                None,
                200,
            ));
            let got: Vec<String> = page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["content"].as_str().unwrap().to_string())
                .collect();
            let start = (offset as usize).min(N);
            let end = (offset as usize + limit as usize).min(N);
            let want: Vec<String> = (start..end).map(|i| format!("message {i}")).collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(&page["total"], &json!(N));
            prop_assert_eq!(&page["limit"], &json!(limit));
            prop_assert_eq!(&page["offset"], &json!(offset));
            Ok(())
        })
        .unwrap();
}
