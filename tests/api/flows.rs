//! The admin and tenant-admin flows end to end: tenant → user → key → use; revoke → 401;
//! suspend → 403; quotas round-trip; `max_users` → 429; usage by day; key expiry; disabled users.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{ADMIN_KEY, Ctx, unique};

const QUOTA_FIELDS: [&str; 7] = [
    "max_users",
    "max_sessions_per_user",
    "max_mcp_servers",
    "workspace_quota_bytes",
    "requests_per_minute",
    "tokens_per_day",
    "max_concurrent_runs",
];

/// Poll until `f` holds (the server writes `last_used_at` in the background).
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..100 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} did not happen within 10 s");
}

pub async fn admin_flow(ctx: &Ctx) {
    // A tenant with every quota set, and features.
    let name = unique("acme");
    let quotas = json!({
        "max_users": 3, "max_sessions_per_user": 7, "max_mcp_servers": 2,
        "workspace_quota_bytes": 123456789, "requests_per_minute": 61,
        "tokens_per_day": 987654321, "max_concurrent_runs": 4,
    });
    let mut body = quotas.clone();
    body["name"] = json!(name);
    body["features_enabled"] = json!(["mcp", "memory"]);
    body["tool_permissions"] = json!({ "member": ["files:*", "todos:*"] });
    let created = ctx
        .ok(
            Method::POST,
            "/api/v1/admin/tenants",
            ADMIN_KEY,
            Some(body),
            201,
        )
        .await;
    let tid = created["id"].as_str().unwrap().to_string();
    assert_eq!(created["name"], name);
    assert_eq!(created["status"], "active");
    for q in QUOTA_FIELDS {
        assert_eq!(created[q], quotas[q], "{q}");
    }
    assert_eq!(created["features_enabled"], json!(["mcp", "memory"]));
    assert_eq!(
        created["tool_permissions"]["member"],
        json!(["files:*", "todos:*"])
    );

    // Round trip: GET gives the same; PATCH one quota leaves the others alone.
    let got = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/admin/tenants/{tid}"),
            ADMIN_KEY,
            None,
            200,
        )
        .await;
    assert_eq!(got, created);
    let patched = ctx
        .ok(
            Method::PATCH,
            &format!("/api/v1/admin/tenants/{tid}"),
            ADMIN_KEY,
            Some(json!({ "tokens_per_day": 5 })),
            200,
        )
        .await;
    assert_eq!(patched["tokens_per_day"], 5);
    for q in QUOTA_FIELDS.iter().filter(|q| **q != "tokens_per_day") {
        assert_eq!(patched[*q], quotas[*q], "{q}");
    }
    assert_eq!(patched["features_enabled"], json!(["mcp", "memory"]));
    // Oldest first: the newest page holds this tenant, however many the database has.
    let total = ctx
        .ok(
            Method::GET,
            "/api/v1/admin/tenants?limit=1",
            ADMIN_KEY,
            None,
            200,
        )
        .await["total"]
        .as_u64()
        .unwrap();
    let listed = ctx
        .ok(
            Method::GET,
            &format!(
                "/api/v1/admin/tenants?limit=1000&offset={}",
                total.saturating_sub(1000)
            ),
            ADMIN_KEY,
            None,
            200,
        )
        .await;
    assert!(
        listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == tid.as_str() && t["tokens_per_day"] == 5)
    );
    // `tool_permissions: null` returns to the defaults; a name clash is a 409.
    let cleared = ctx
        .ok(
            Method::PATCH,
            &format!("/api/v1/admin/tenants/{tid}"),
            ADMIN_KEY,
            Some(json!({ "tool_permissions": null })),
            200,
        )
        .await;
    assert!(cleared["tool_permissions"].is_null());
    assert_eq!(cleared["tokens_per_day"], 5);
    let other = ctx
        .ok(
            Method::POST,
            "/api/v1/admin/tenants",
            ADMIN_KEY,
            Some(json!({ "name": unique("other") })),
            201,
        )
        .await;
    let clash = ctx
        .call(
            Method::PATCH,
            &format!("/api/v1/admin/tenants/{tid}"),
            Some(ADMIN_KEY),
            Some(&json!({ "name": other["name"] })),
        )
        .await;
    assert_eq!((clash.status, clash.code()), (409, "conflict"));
    let dup = ctx
        .call(
            Method::POST,
            "/api/v1/admin/tenants",
            Some(ADMIN_KEY),
            Some(&json!({ "name": name })),
        )
        .await;
    assert_eq!((dup.status, dup.code()), (409, "conflict"));
    let clash = ctx
        .call(
            Method::PUT,
            &format!("/api/v1/admin/tenants/{tid}"),
            Some(ADMIN_KEY),
            Some(&json!({ "name": other["name"] })),
        )
        .await;
    assert_eq!((clash.status, clash.code()), (409, "conflict"));
    let unchanged = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/admin/tenants/{tid}"),
            ADMIN_KEY,
            None,
            200,
        )
        .await;
    assert_eq!(
        (
            unchanged["name"].as_str(),
            unchanged["tokens_per_day"].as_u64()
        ),
        (Some(name.as_str()), Some(5)),
        "a refused PUT changes nothing"
    );

    // Every new tenant has the `default` assistant.
    let users_path = format!("/api/v1/admin/tenants/{tid}/users");
    let user = ctx
        .ok(
            Method::POST,
            &users_path,
            ADMIN_KEY,
            Some(json!({ "name": "alice", "role": "admin" })),
            201,
        )
        .await;
    assert_eq!(
        (
            user["name"].as_str(),
            user["role"].as_str(),
            user["disabled"].as_bool()
        ),
        (Some("alice"), Some("admin"), Some(false))
    );
    assert_eq!(user["tenant_id"], tid.as_str());
    let uid = user["id"].as_str().unwrap().to_string();
    let dup_user = ctx
        .call(
            Method::POST,
            &users_path,
            Some(ADMIN_KEY),
            Some(&json!({ "name": "alice" })),
        )
        .await;
    assert_eq!((dup_user.status, dup_user.code()), (409, "conflict"));

    let keys_path = format!("/api/v1/admin/tenants/{tid}/api-keys");
    let k = ctx
        .ok(
            Method::POST,
            &keys_path,
            ADMIN_KEY,
            Some(json!({ "user_id": uid, "name": "laptop" })),
            201,
        )
        .await;
    let key = k["key"].as_str().unwrap().to_string();
    let prefix = k["prefix"].as_str().unwrap().to_string();
    let key_id = k["id"].as_str().unwrap().to_string();
    assert!(
        key.starts_with(&prefix) && prefix.starts_with("agk_"),
        "{k}"
    );
    assert_eq!(
        k["role"], "admin",
        "the key takes its user's role by default"
    );
    assert!(k["last_used_at"].is_null());

    // Use it.
    let me = ctx.ok(Method::GET, "/api/v1/me", &key, None, 200).await;
    assert_eq!(
        me,
        json!({ "kind": "tenant", "tenant_id": tid, "tenant_name": name, "user_id": uid, "role": "admin", "key_id": key_id })
    );
    let agents = ctx.ok(Method::GET, "/api/v1/agents", &key, None, 200).await;
    assert_eq!(agents.as_array().unwrap().len(), 1);
    assert_eq!(agents[0]["id"], "default");
    // X-API-Key works as well as Bearer.
    let r = ctx
        .send(
            ctx.http
                .get(ctx.url("/api/v1/me"))
                .header("x-api-key", &key),
        )
        .await;
    assert_eq!(r.status, 200);

    // Listing never shows the key; by prefix finds it; last use is recorded.
    let list = ctx
        .ok(
            Method::GET,
            &format!("{keys_path}?prefix={}", &prefix[..8]),
            ADMIN_KEY,
            None,
            200,
        )
        .await;
    let items = list["items"].as_array().unwrap();
    assert!(items.iter().any(|i| i["id"] == key_id.as_str()));
    assert!(
        items
            .iter()
            .all(|i| i.get("key").is_none()
                && i["prefix"].as_str().unwrap().starts_with(&prefix[..8]))
    );
    let exact = ctx
        .ok(
            Method::GET,
            &format!("{keys_path}?prefix={prefix}"),
            ADMIN_KEY,
            None,
            200,
        )
        .await;
    assert_eq!(exact["total"], 1);
    eventually("last_used_at set", || async {
        let k = ctx
            .ok(
                Method::GET,
                &format!("{keys_path}/{key_id}"),
                ADMIN_KEY,
                None,
                200,
            )
            .await;
        !k["last_used_at"].is_null()
    })
    .await;

    // A member key cannot be minted with admin power; an expiry must lie ahead.
    let m = ctx
        .ok(
            Method::POST,
            &users_path,
            ADMIN_KEY,
            Some(json!({ "name": "bob" })),
            201,
        )
        .await;
    assert_eq!(m["role"], "member");
    let bad = ctx
        .call(
            Method::POST,
            &keys_path,
            Some(ADMIN_KEY),
            Some(&json!({ "user_id": m["id"], "name": "x", "role": "admin" })),
        )
        .await;
    assert_eq!(
        (bad.status, bad.body["details"]["field"].as_str()),
        (422, Some("role"))
    );
    let bad = ctx
        .call(
            Method::POST,
            &keys_path,
            Some(ADMIN_KEY),
            Some(&json!({ "user_id": m["id"], "name": "x", "expires_at": "2001-01-01T00:00:00Z" })),
        )
        .await;
    assert_eq!(
        (bad.status, bad.body["details"]["field"].as_str()),
        (422, Some("expires_at"))
    );
    let bad = ctx
        .call(
            Method::POST,
            &keys_path,
            Some(ADMIN_KEY),
            Some(&json!({ "user_id": uuid::Uuid::new_v4(), "name": "x" })),
        )
        .await;
    assert_eq!(
        (bad.status, bad.body["details"]["field"].as_str()),
        (422, Some("user_id"))
    );

    // Revoke → 401 at once.
    let revoked = ctx
        .ok(
            Method::DELETE,
            &format!("{keys_path}/{key_id}"),
            ADMIN_KEY,
            None,
            200,
        )
        .await;
    assert!(!revoked["revoked_at"].is_null());
    let r = ctx.call(Method::GET, "/api/v1/me", Some(&key), None).await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    // Revoking again keeps the first time.
    let again = ctx
        .ok(
            Method::DELETE,
            &format!("{keys_path}/{key_id}"),
            ADMIN_KEY,
            None,
            200,
        )
        .await;
    assert_eq!(again["revoked_at"], revoked["revoked_at"]);

    // Suspend → 403 tenant_suspended on every tenant route; reactivate → back.
    let k2 = ctx
        .ok(
            Method::POST,
            &keys_path,
            ADMIN_KEY,
            Some(json!({ "user_id": uid, "name": "second" })),
            201,
        )
        .await;
    let key2 = k2["key"].as_str().unwrap().to_string();
    assert_eq!(
        ctx.call(Method::GET, "/api/v1/agents", Some(&key2), None)
            .await
            .status,
        200
    );
    let s = ctx
        .ok(
            Method::PATCH,
            &format!("/api/v1/admin/tenants/{tid}"),
            ADMIN_KEY,
            Some(json!({ "status": "suspended" })),
            200,
        )
        .await;
    assert_eq!(s["status"], "suspended");
    for path in [
        "/api/v1/me",
        "/api/v1/agents",
        "/api/v1/sessions",
        "/api/v1/tenant/users",
    ] {
        let r = ctx.call(Method::GET, path, Some(&key2), None).await;
        assert_eq!((r.status, r.code()), (403, "tenant_suspended"), "{path}");
    }
    ctx.ok(
        Method::PATCH,
        &format!("/api/v1/admin/tenants/{tid}"),
        ADMIN_KEY,
        Some(json!({ "status": "active" })),
        200,
    )
    .await;
    assert_eq!(
        ctx.call(Method::GET, "/api/v1/agents", Some(&key2), None)
            .await
            .status,
        200
    );

    // max_users is 3: alice, bob, one more; the fourth gets 429 and nothing is created.
    ctx.ok(
        Method::POST,
        &users_path,
        ADMIN_KEY,
        Some(json!({ "name": "carol" })),
        201,
    )
    .await;
    let over = ctx
        .call(
            Method::POST,
            &users_path,
            Some(ADMIN_KEY),
            Some(&json!({ "name": "dave" })),
        )
        .await;
    assert_eq!((over.status, over.code()), (429, "quota_exceeded"));
    assert_eq!(over.body["details"]["quota"], "max_users");
    assert_eq!(over.body["details"]["limit"], 3);
    let retry: u64 = over.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry > 0);
    let users = ctx.ok(Method::GET, &users_path, ADMIN_KEY, None, 200).await;
    assert_eq!(users["total"], 3);
    // Through the tenant admin API too.
    let over = ctx
        .call(
            Method::POST,
            "/api/v1/tenant/users",
            Some(&key2),
            Some(&json!({ "name": "erin" })),
        )
        .await;
    assert_eq!(
        (over.status, over.body["details"]["quota"].as_str()),
        (429, Some("max_users"))
    );

    // Disabling a user: their keys answer 401; enabling restores them.
    let upath = format!("{users_path}/{uid}");
    let d = ctx
        .ok(
            Method::PATCH,
            &upath,
            ADMIN_KEY,
            Some(json!({ "disabled": true })),
            200,
        )
        .await;
    assert_eq!(d["disabled"], true);
    assert_eq!(
        ctx.call(Method::GET, "/api/v1/me", Some(&key2), None)
            .await
            .status,
        401
    );
    ctx.ok(
        Method::PATCH,
        &upath,
        ADMIN_KEY,
        Some(json!({ "disabled": false })),
        200,
    )
    .await;
    assert_eq!(
        ctx.call(Method::GET, "/api/v1/me", Some(&key2), None)
            .await
            .status,
        200
    );
    // Demoting the user demotes their admin key too.
    ctx.ok(
        Method::PATCH,
        &upath,
        ADMIN_KEY,
        Some(json!({ "role": "member" })),
        200,
    )
    .await;
    assert_eq!(
        ctx.ok(Method::GET, "/api/v1/me", &key2, None, 200).await["role"],
        "member"
    );
    assert_eq!(
        ctx.call(Method::GET, "/api/v1/tenant/users", Some(&key2), None)
            .await
            .status,
        403
    );
    ctx.ok(
        Method::PATCH,
        &upath,
        ADMIN_KEY,
        Some(json!({ "role": "admin" })),
        200,
    )
    .await;

    // A key that expires stops working on time, cached or not.
    let soon = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let k3 = ctx
        .ok(
            Method::POST,
            &keys_path,
            ADMIN_KEY,
            Some(json!({ "user_id": uid, "name": "short", "expires_at": soon })),
            201,
        )
        .await;
    let key3 = k3["key"].as_str().unwrap().to_string();
    assert_eq!(
        ctx.call(Method::GET, "/api/v1/me", Some(&key3), None)
            .await
            .status,
        200
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        ctx.call(Method::GET, "/api/v1/me", Some(&key3), None)
            .await
            .status,
        401
    );

    // PUT replaces: quotas left out return to the defaults.
    let replaced = ctx
        .ok(
            Method::PUT,
            &format!("/api/v1/admin/tenants/{tid}"),
            ADMIN_KEY,
            Some(json!({ "name": name, "max_users": 9 })),
            200,
        )
        .await;
    assert_eq!(replaced["max_users"], 9);
    assert_eq!(replaced["max_mcp_servers"], 10, "the default");
    assert_eq!(replaced["features_enabled"], json!([]));

    // Deleting the user deletes their keys; deleting the tenant deletes everything.
    ctx.ok(Method::DELETE, &upath, ADMIN_KEY, None, 204).await;
    assert_eq!(
        ctx.call(Method::GET, "/api/v1/me", Some(&key2), None)
            .await
            .status,
        401
    );
    assert_eq!(
        ctx.call(Method::GET, &upath, Some(ADMIN_KEY), None)
            .await
            .status,
        404
    );
    ctx.ok(
        Method::DELETE,
        &format!("/api/v1/admin/tenants/{tid}"),
        ADMIN_KEY,
        None,
        204,
    )
    .await;
    let gone = ctx
        .call(
            Method::GET,
            &format!("/api/v1/admin/tenants/{tid}"),
            Some(ADMIN_KEY),
            None,
        )
        .await;
    assert_eq!((gone.status, gone.code()), (404, "not_found"));
    assert_eq!(
        ctx.call(
            Method::DELETE,
            &format!("/api/v1/admin/tenants/{tid}"),
            Some(ADMIN_KEY),
            None
        )
        .await
        .status,
        404
    );
}

/// Usage by day from the runs and tool calls the engine recorded.
pub async fn usage_flow(ctx: &Ctx) {
    let t = ctx.tenant().await;
    ctx.seed_session(&t, &t.member.user_id, 2, 2).await;
    ctx.seed_session(&t, &t.member2.user_id, 2, 2).await;
    let path = format!("/api/v1/admin/tenants/{}/usage", t.id);
    let today = chrono::Utc::now().date_naive();
    let u = ctx.ok(Method::GET, &path, ADMIN_KEY, None, 200).await;
    assert_eq!(u["tenant_id"], t.id.as_str());
    assert_eq!(u["to"], today.to_string());
    assert_eq!(u["from"], (today - chrono::Duration::days(29)).to_string());
    let days = u["days"].as_array().unwrap();
    assert_eq!(days.len(), 1, "{u}");
    let expect = json!({ "runs": 2, "input_tokens": 200, "output_tokens": 40, "total_tokens": 240, "tool_calls": 4 });
    for (k, v) in expect.as_object().unwrap() {
        assert_eq!(&days[0][k], v, "{k}");
        assert_eq!(&u["totals"][k], v, "{k}");
    }
    assert_eq!(days[0]["day"], today.to_string());
    // A window without activity is empty; bad windows are 400 naming the parameter.
    let yesterday = today - chrono::Duration::days(1);
    let empty = ctx
        .ok(
            Method::GET,
            &format!("{path}?from={yesterday}&to={yesterday}"),
            ADMIN_KEY,
            None,
            200,
        )
        .await;
    assert_eq!(empty["days"], json!([]));
    assert_eq!(empty["totals"]["runs"], 0);
    for (q, param) in [
        ("from=yesterday", "from"),
        ("to=2026-13-01", "to"),
        ("from=2026-02-02&to=2026-02-01", "from"),
        ("from=2020-01-01&to=2026-01-01", "from"),
        ("when=now", "when"),
    ] {
        let r = ctx
            .call(Method::GET, &format!("{path}?{q}"), Some(ADMIN_KEY), None)
            .await;
        assert_eq!(
            (r.status, r.code(), r.body["details"]["parameter"].as_str()),
            (400, "invalid_query", Some(param)),
            "{q}"
        );
    }
    // The tenant's admin reads the same report for their own tenant (no id to name); a member
    // may not, and the same bad windows are refused the same way.
    let own = ctx
        .ok(Method::GET, "/api/v1/tenant/usage", &t.admin.key, None, 200)
        .await;
    assert_eq!(own, u, "the tenant admin's report is the platform admin's");
    let r = ctx
        .call(
            Method::GET,
            "/api/v1/tenant/usage",
            Some(&t.member.key),
            None,
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    let r = ctx
        .call(
            Method::GET,
            "/api/v1/tenant/usage?to=2026-13-01",
            Some(&t.admin.key),
            None,
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_query"));
    // Another tenant's usage does not include these runs.
    let other = ctx.tenant().await;
    let theirs = ctx
        .ok(
            Method::GET,
            "/api/v1/tenant/usage",
            &other.admin.key,
            None,
            200,
        )
        .await;
    assert_eq!(
        (theirs["tenant_id"].as_str(), &theirs["totals"]["runs"]),
        (Some(other.id.as_str()), &json!(0))
    );
    let u = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/admin/tenants/{}/usage", other.id),
            ADMIN_KEY,
            None,
            200,
        )
        .await;
    assert_eq!(u["totals"]["runs"], 0);
}

/// Tenant admins manage their own tenant's users and keys, read (never change) their tenant's
/// status and quotas, and nothing else.
pub async fn tenant_admin_flow(ctx: &Ctx) {
    let a = ctx.tenant().await;
    let b = ctx.tenant().await;
    let adm = &a.admin.key;
    let seen = ctx.ok(Method::GET, "/api/v1/tenant", adm, None, 200).await;
    let platform = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/admin/tenants/{}", a.id),
            ADMIN_KEY,
            None,
            200,
        )
        .await;
    assert_eq!(seen, platform, "the tenant as the platform admin sees it");
    let theirs = ctx
        .ok(Method::GET, "/api/v1/tenant", &b.admin.key, None, 200)
        .await;
    assert_eq!(theirs["id"], b.id.as_str(), "B's admin reads B, never A");
    for method in [Method::PATCH, Method::PUT, Method::DELETE, Method::POST] {
        let r = ctx
            .call(
                method.clone(),
                "/api/v1/tenant",
                Some(adm),
                Some(&json!({ "max_users": 1000 })),
            )
            .await;
        assert_eq!(r.status, 405, "{method}: {}", r.body);
    }
    assert_eq!(
        ctx.ok(Method::GET, "/api/v1/tenant", adm, None, 200).await,
        seen,
        "nothing changed"
    );
    let u = ctx
        .ok(
            Method::POST,
            "/api/v1/tenant/users",
            adm,
            Some(json!({ "name": "frank" })),
            201,
        )
        .await;
    assert_eq!(
        (u["role"].as_str(), u["tenant_id"].as_str()),
        (Some("member"), Some(a.id.as_str()))
    );
    let uid = u["id"].as_str().unwrap();
    let dup = ctx
        .call(
            Method::POST,
            "/api/v1/tenant/users",
            Some(adm),
            Some(&json!({ "name": "frank" })),
        )
        .await;
    assert_eq!((dup.status, dup.code()), (409, "conflict"));
    // A member's key can be at most member.
    let bad = ctx
        .call(
            Method::POST,
            "/api/v1/tenant/api-keys",
            Some(adm),
            Some(&json!({ "user_id": uid, "name": "k", "role": "admin" })),
        )
        .await;
    assert_eq!(
        (bad.status, bad.body["details"]["field"].as_str()),
        (422, Some("role"))
    );
    let k = ctx
        .ok(
            Method::POST,
            "/api/v1/tenant/api-keys",
            adm,
            Some(json!({ "user_id": uid, "name": "k" })),
            201,
        )
        .await;
    let key = k["key"].as_str().unwrap().to_string();
    assert_eq!(
        ctx.ok(Method::GET, "/api/v1/me", &key, None, 200).await["role"],
        "member"
    );
    // Members cannot manage anything.
    for (m, p) in [
        (Method::GET, "/api/v1/tenant/users"),
        (Method::GET, "/api/v1/tenant/api-keys"),
    ] {
        let r = ctx.call(m, p, Some(&key), None).await;
        assert_eq!((r.status, r.code()), (403, "forbidden"));
    }
    // An admin can mint another admin (no more than their own power) and list by user.
    let a2 = ctx
        .ok(
            Method::POST,
            "/api/v1/tenant/users",
            adm,
            Some(json!({ "name": "gina", "role": "admin" })),
            201,
        )
        .await;
    let k2 = ctx
        .ok(
            Method::POST,
            "/api/v1/tenant/api-keys",
            adm,
            Some(json!({ "user_id": a2["id"], "name": "k" })),
            201,
        )
        .await;
    assert_eq!(k2["role"], "admin");
    let mine = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/tenant/api-keys?user_id={uid}"),
            adm,
            None,
            200,
        )
        .await;
    assert_eq!(mine["total"], 1);
    assert_eq!(mine["items"][0]["id"], k["id"]);
    // B's users and keys are not A's business: 404.
    for path in [
        format!("/api/v1/tenant/users/{}", b.member.user_id),
        format!("/api/v1/tenant/api-keys/{}", b.member.key_id),
    ] {
        assert_eq!(
            ctx.call(Method::GET, &path, Some(adm), None).await.status,
            404,
            "{path}"
        );
        assert_eq!(
            ctx.call(Method::DELETE, &path, Some(adm), None)
                .await
                .status,
            404,
            "{path}"
        );
    }
    assert_eq!(
        ctx.ok(Method::GET, "/api/v1/me", &b.member.key, None, 200)
            .await["kind"],
        "tenant"
    );
    let listed = ctx
        .ok(
            Method::GET,
            "/api/v1/tenant/users?limit=1000",
            adm,
            None,
            200,
        )
        .await;
    let names: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["tenant_id"].as_str().unwrap())
        .collect();
    assert!(names.iter().all(|t| *t == a.id), "only A's users");
    // No self-lockout.
    for (m, body) in [
        (Method::PATCH, Some(json!({ "role": "member" }))),
        (Method::PATCH, Some(json!({ "disabled": true }))),
        (Method::DELETE, None),
    ] {
        let r = ctx
            .call(
                m,
                &format!("/api/v1/tenant/users/{}", a.admin.user_id),
                Some(adm),
                body.as_ref(),
            )
            .await;
        assert_eq!((r.status, r.code()), (409, "conflict"));
    }
    // Revoking through the tenant API works at once.
    ctx.ok(
        Method::DELETE,
        &format!("/api/v1/tenant/api-keys/{}", k["id"].as_str().unwrap()),
        adm,
        None,
        200,
    )
    .await;
    assert_eq!(
        ctx.call(Method::GET, "/api/v1/me", Some(&key), None)
            .await
            .status,
        401
    );
    // Deleting a user through the tenant API.
    ctx.ok(
        Method::DELETE,
        &format!("/api/v1/tenant/users/{uid}"),
        adm,
        None,
        204,
    )
    .await;
    assert_eq!(
        ctx.call(
            Method::GET,
            &format!("/api/v1/tenant/users/{uid}"),
            Some(adm),
            None
        )
        .await
        .status,
        404
    );
}

/// Assistants: create, read, replace, delete; `default` stays.
pub async fn agents_flow(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let adm = &t.admin.key;
    let spec = json!({
        "id": "sre-oncall", "name": "SRE on call", "description": "pages", "system_prompt": "Be brief.",
        "provider": "openai", "model": "gpt-4o-mini", "tools": ["files:*", "system:get_system_stats"],
        "interrupt_on": ["write_file"], "auto_approve": false, "profile": "sre",
        "recursion_limit": 50, "timeout_secs": 120, "max_retries": 2,
    });
    let a = ctx
        .ok(Method::POST, "/api/v1/agents", adm, Some(spec.clone()), 201)
        .await;
    for (k, v) in spec.as_object().unwrap() {
        assert_eq!(&a[k], v, "{k}");
    }
    let dup = ctx
        .call(
            Method::POST,
            "/api/v1/agents",
            Some(adm),
            Some(&json!({ "id": "sre-oncall" })),
        )
        .await;
    assert_eq!((dup.status, dup.code()), (409, "conflict"));
    let dup = ctx
        .call(
            Method::POST,
            "/api/v1/agents/sre-oncall",
            Some(adm),
            Some(&json!({})),
        )
        .await;
    assert_eq!(dup.status, 409);
    assert_eq!(
        ctx.ok(
            Method::GET,
            "/api/v1/agents/sre-oncall",
            &t.member.key,
            None,
            200
        )
        .await,
        a
    );
    let listed = ctx
        .ok(Method::GET, "/api/v1/agents", &t.member.key, None, 200)
        .await;
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["default", "sre-oncall"]);
    // PUT replaces the whole spec.
    let r = ctx
        .ok(
            Method::PUT,
            "/api/v1/agents/sre-oncall",
            adm,
            Some(json!({ "system_prompt": "New.", "auto_approve": true })),
            200,
        )
        .await;
    assert_eq!(
        (
            r["system_prompt"].as_str(),
            r["auto_approve"].as_bool(),
            r["provider"].as_str()
        ),
        (Some("New."), Some(true), None)
    );
    assert_eq!(r["recursion_limit"], Value::Null, "back to the profile's");
    assert_eq!(r["profile"], "general", "back to the default profile");
    assert_eq!(r["effective"]["recursion_limit"], 25);
    assert_eq!(r["effective"]["system_prompt"], "New.");
    assert_eq!(r["created_at"], a["created_at"]);
    assert_eq!(
        ctx.call(
            Method::PUT,
            "/api/v1/agents/nope",
            Some(adm),
            Some(&json!({}))
        )
        .await
        .status,
        404
    );
    // Validation names the field.
    for (body, field) in [
        (json!({ "id": "x", "provider": "gemini" }), "provider"),
        (
            json!({ "id": "x", "recursion_limit": 0 }),
            "recursion_limit",
        ),
        (
            json!({ "id": "x", "recursion_limit": 1001 }),
            "recursion_limit",
        ),
        (json!({ "id": "x", "timeout_secs": 86401 }), "timeout_secs"),
        (
            json!({ "id": "x", "tools": ["files:*", "rm -rf"] }),
            "tools[1]",
        ),
        (json!({ "id": "x", "profile": "wizard" }), "profile"),
        (json!({ "id": "Bad Id" }), "id"),
        (json!({ "name": "no id" }), "id"),
        (json!({ "id": "x", "sytem_prompt": "typo" }), "sytem_prompt"),
    ] {
        let r = ctx
            .call(Method::POST, "/api/v1/agents", Some(adm), Some(&body))
            .await;
        assert_eq!(
            (r.status, r.body["details"]["field"].as_str()),
            (422, Some(field)),
            "{body}"
        );
    }
    // `default` can be changed but not deleted.
    let d = ctx
        .ok(
            Method::PUT,
            "/api/v1/agents/default",
            adm,
            Some(json!({ "model": "gpt-4o" })),
            200,
        )
        .await;
    assert_eq!(d["model"], "gpt-4o");
    let r = ctx
        .call(Method::DELETE, "/api/v1/agents/default", Some(adm), None)
        .await;
    assert_eq!((r.status, r.code()), (409, "conflict"));
    assert!(r.body["message"].as_str().unwrap().contains("default"));
    ctx.ok(Method::DELETE, "/api/v1/agents/sre-oncall", adm, None, 204)
        .await;
    assert_eq!(
        ctx.call(Method::GET, "/api/v1/agents/sre-oncall", Some(adm), None)
            .await
            .status,
        404
    );
    assert_eq!(
        ctx.call(Method::DELETE, "/api/v1/agents/sre-oncall", Some(adm), None)
            .await
            .status,
        404
    );
    let _: Value = ctx
        .ok(Method::GET, "/api/v1/agents/default", adm, None, 200)
        .await;
}
