//! Update-vs-delete and delete-vs-delete on the same resource, many times at once: every answer
//! is a success, 404 or 409 — never a 5xx (a row updated after another request deleted it used
//! to answer 500 "None of the records are updated").

use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{ADMIN_KEY, Ctx, unique};

const TRIES: usize = 200;
/// Races run this many at a time.
const AT_ONCE: usize = 8;

/// The answers of one race: the first must be one of `allowed`, the racing `DELETE` 204, 404
/// or 409.
fn check(what: &str, answers: [(u16, Value); 2], allowed: &[u16]) {
    let [(first, first_body), (delete, delete_body)] = answers;
    assert!(
        allowed.contains(&first),
        "{what}: {first} {first_body} (allowed {allowed:?})"
    );
    assert!(
        [204, 404, 409].contains(&delete),
        "{what}: the DELETE answered {delete} {delete_body}"
    );
}

/// Run `race(i)` TRIES times, AT_ONCE at a time.
async fn many<F, Fut>(race: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for start in (0..TRIES).step_by(AT_ONCE) {
        futures::future::join_all((start..(start + AT_ONCE).min(TRIES)).map(&race)).await;
    }
}

async fn answer(
    ctx: &Ctx,
    method: Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let r = ctx.call(method, path, Some(key), body.as_ref()).await;
    (r.status, r.body)
}

/// `PATCH` and `PUT` of a tenant racing its `DELETE`, and two `DELETE`s of one tenant.
pub async fn tenants(ctx: &Ctx) {
    many(|i| async move {
        let t = ctx
            .ok(
                Method::POST,
                "/api/v1/admin/tenants",
                ADMIN_KEY,
                Some(json!({"name": unique("race")})),
                201,
            )
            .await;
        let path = format!("/api/v1/admin/tenants/{}", t["id"].as_str().unwrap());
        let (update, allowed): (Method, &[u16]) = match i % 3 {
            0 => (Method::PATCH, &[200, 404, 409]),
            1 => (Method::PUT, &[200, 404, 409]),
            _ => (Method::DELETE, &[204, 404, 409]),
        };
        let body =
            (update != Method::DELETE).then(|| json!({"name": unique("renamed"), "max_users": 7}));
        let answers = futures::join!(
            answer(ctx, update.clone(), &path, ADMIN_KEY, body),
            answer(ctx, Method::DELETE, &path, ADMIN_KEY, None),
        );
        let (a, b) = (answers.0.0, answers.1.0);
        check(
            &format!("{update} vs DELETE {path}"),
            answers.into(),
            allowed,
        );
        if update == Method::DELETE {
            assert!(a == 204 || b == 204, "one of two deletes succeeds: {a} {b}");
        }
    })
    .await;
}

/// `PUT` of an assistant racing its `DELETE`, and two `DELETE`s of one assistant.
pub async fn agents(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let adm = t.admin.key.as_str();
    many(|i| async move {
        let id = unique("race");
        ctx.ok(
            Method::POST,
            "/api/v1/agents",
            adm,
            Some(json!({"id": id, "name": "racer", "system_prompt": "Be brief."})),
            201,
        )
        .await;
        let path = format!("/api/v1/agents/{id}");
        let change = json!({"name": "racer", "system_prompt": "Changed."});
        race_with_delete(ctx, adm, &path, i, Method::PUT, change).await;
    })
    .await;
}

/// `PATCH` of a user racing their `DELETE`, and two `DELETE`s of one user (tenant admin API).
pub async fn users(ctx: &Ctx) {
    let t = ctx.tenant_with(json!({"max_users": 1000})).await;
    let adm = t.admin.key.as_str();
    many(|i| async move {
        let u = ctx
            .ok(
                Method::POST,
                "/api/v1/tenant/users",
                adm,
                Some(json!({"name": unique("racer"), "role": "member"})),
                201,
            )
            .await;
        let path = format!("/api/v1/tenant/users/{}", u["id"].as_str().unwrap());
        let change = json!({"disabled": true, "role": "admin"});
        race_with_delete(ctx, adm, &path, i, Method::PATCH, change).await;
    })
    .await;
}

/// Race number `i`: even ones `update` `path` with `change` while a `DELETE` of it runs, odd
/// ones run two `DELETE`s.
async fn race_with_delete(
    ctx: &Ctx,
    key: &str,
    path: &str,
    i: usize,
    update: Method,
    change: Value,
) {
    let (first, body, allowed): (Method, Option<Value>, &[u16]) = if i.is_multiple_of(2) {
        (update, Some(change), &[200, 404, 409])
    } else {
        (Method::DELETE, None, &[204, 404, 409])
    };
    let answers = futures::join!(
        answer(ctx, first.clone(), path, key, body),
        answer(ctx, Method::DELETE, path, key, None),
    );
    check(
        &format!("{first} vs DELETE {path}"),
        answers.into(),
        allowed,
    );
}
