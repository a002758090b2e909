//! Smaller behaviours: the admin API off, CORS, metrics by route pattern.

use reqwest::Method;

use crate::ctx::{ADMIN_KEY, Ctx, parse_observed};

/// Without `auth.admin_key` and with `auth.generate_admin_key = false` every admin route is
/// 404 for everyone; the rest works.
pub async fn admin_api_off(ctx: &Ctx) {
    let paths = [
        (Method::GET, "/api/v1/admin/tenants".to_string()),
        (Method::POST, "/api/v1/admin/tenants".to_string()),
        (
            Method::GET,
            format!("/api/v1/admin/tenants/{}", uuid::Uuid::new_v4()),
        ),
        (
            Method::PATCH,
            format!("/api/v1/admin/tenants/{}", uuid::Uuid::new_v4()),
        ),
        (
            Method::PUT,
            format!("/api/v1/admin/tenants/{}", uuid::Uuid::new_v4()),
        ),
        (
            Method::DELETE,
            format!("/api/v1/admin/tenants/{}", uuid::Uuid::new_v4()),
        ),
        (
            Method::GET,
            format!("/api/v1/admin/tenants/{}/users", uuid::Uuid::new_v4()),
        ),
        (
            Method::POST,
            format!("/api/v1/admin/tenants/{}/users", uuid::Uuid::new_v4()),
        ),
        (
            Method::GET,
            format!("/api/v1/admin/tenants/{0}/users/{0}", uuid::Uuid::new_v4()),
        ),
        (
            Method::PATCH,
            format!("/api/v1/admin/tenants/{0}/users/{0}", uuid::Uuid::new_v4()),
        ),
        (
            Method::DELETE,
            format!("/api/v1/admin/tenants/{0}/users/{0}", uuid::Uuid::new_v4()),
        ),
        (
            Method::GET,
            format!("/api/v1/admin/tenants/{}/api-keys", uuid::Uuid::new_v4()),
        ),
        (
            Method::POST,
            format!("/api/v1/admin/tenants/{}/api-keys", uuid::Uuid::new_v4()),
        ),
        (
            Method::GET,
            format!(
                "/api/v1/admin/tenants/{0}/api-keys/{0}",
                uuid::Uuid::new_v4()
            ),
        ),
        (
            Method::DELETE,
            format!(
                "/api/v1/admin/tenants/{0}/api-keys/{0}",
                uuid::Uuid::new_v4()
            ),
        ),
        (
            Method::GET,
            format!("/api/v1/admin/tenants/{}/usage", uuid::Uuid::new_v4()),
        ),
    ];
    for (m, p) in paths {
        for key in [None, Some(ADMIN_KEY), Some("agk_whatever_0000")] {
            let r = ctx
                .call(m.clone(), &p, key, Some(&serde_json::json!({})))
                .await;
            assert_eq!((r.status, r.code()), (404, "not_found"), "{m} {p}");
            assert!(
                r.body["message"]
                    .as_str()
                    .unwrap()
                    .contains("AGENTRY_AUTH__ADMIN_KEY")
            );
        }
    }
    // The admin key is just a bad key now.
    let r = ctx
        .call(Method::GET, "/api/v1/me", Some(ADMIN_KEY), None)
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(
        ctx.call(Method::GET, "/api/v1/health", None, None)
            .await
            .status,
        200
    );
}

/// `server.cors_origins` lists who may call from a browser.
pub async fn cors(ctx: &Ctx, allowed: &str) {
    let pre = |origin: &str| {
        ctx.http
            .request(Method::OPTIONS, ctx.url("/api/v1/agents"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type",
            )
    };
    let ok = ctx.send(pre(allowed)).await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.headers["access-control-allow-origin"], allowed);
    let methods = ok.headers["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        methods.contains("POST") && methods.contains("PATCH"),
        "{methods}"
    );
    let refused = ctx.send(pre("https://evil.example")).await;
    assert_eq!(refused.status, 400, "{:?}", refused.body);
    assert!(!refused.headers.contains_key("access-control-allow-origin"));
    // A simple request from the allowed origin carries the headers; the request id is readable.
    let r = ctx
        .send(
            ctx.http
                .get(ctx.url("/api/v1/health"))
                .header("origin", allowed),
        )
        .await;
    assert_eq!(r.headers["access-control-allow-origin"], allowed);
    let exposed = r.headers["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_lowercase();
    assert!(
        exposed.contains("x-request-id") && exposed.contains("retry-after"),
        "{exposed}"
    );
}

/// `/metrics` counts requests by method, route *pattern* and status, and times them.
pub async fn metrics(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let ids: Vec<String> = (0..5).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    for id in &ids {
        let r = ctx
            .call(
                Method::GET,
                &format!("/api/v1/sessions/{id}"),
                Some(&t.member.key),
                None,
            )
            .await;
        assert_eq!(r.status, 404);
    }
    ctx.call(Method::GET, "/no/such/route", None, None).await;
    let text = ctx.call(Method::GET, "/metrics", None, None).await;
    assert!(
        text.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = text.body.as_str().unwrap().to_string();
    let seen = parse_observed(&text);
    assert!(
        seen.contains(&("GET".into(), "/api/v1/sessions/{session_id}".into(), 404)),
        "{seen:?}"
    );
    assert!(seen.contains(&("GET".into(), "unmatched".into(), 404)));
    // Raw ids never become labels.
    for id in &ids {
        assert!(!text.contains(id.as_str()));
    }
    let count_line = text
        .lines()
        .find(|l| {
            l.starts_with("agentry_http_requests_total{")
                && l.contains("method=\"GET\"")
                && l.contains("route=\"/api/v1/sessions/{session_id}\"")
                && l.contains("status=\"404\"")
        })
        .unwrap();
    let n: f64 = count_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= 5.0, "{count_line}");
    assert!(
        text.contains("agentry_http_request_duration_seconds_bucket{"),
        "latency is a histogram"
    );
    assert!(text.contains("le=\"0.005\""));
    // max_users rejections are counted by quota.
    let small = ctx.tenant_with(serde_json::json!({ "max_users": 3 })).await;
    let r = ctx
        .call(
            Method::POST,
            &format!("/api/v1/admin/tenants/{}/users", small.id),
            Some(ADMIN_KEY),
            Some(&serde_json::json!({ "name": "x" })),
        )
        .await;
    assert_eq!(r.status, 429);
    let text = ctx
        .call(Method::GET, "/metrics", None, None)
        .await
        .body
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.lines()
            .any(|l| l.starts_with("agentry_quota_rejections_total{quota=\"max_users\"}")),
        "{text}"
    );
}
