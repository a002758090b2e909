//! Smaller behaviours: the admin API off, CORS, metrics by route pattern, readiness when the
//! database goes away.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use reqwest::Method;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::ctx::{ADMIN_KEY, Ctx, parse_observed};

/// Without `auth.admin_key` every admin route is 404 for everyone; the rest works.
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

/// A TCP relay to PostgreSQL that can be cut, to take the database away from a running server.
pub struct Relay {
    pub addr: SocketAddr,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Relay {
    pub async fn start(upstream: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let t = tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let h = tokio::spawn(async move {
                    if let Ok(mut out) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                t.lock().unwrap().push(h);
            }
        });
        Relay {
            addr,
            tasks,
            accept,
        }
    }

    /// Close the listener and every relayed connection.
    pub fn cut(&self) {
        self.accept.abort();
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

/// `host:port` a database URL points at.
pub fn upstream_of(db_url: &str) -> String {
    let u = reqwest::Url::parse(db_url).unwrap();
    format!("{}:{}", u.host_str().unwrap(), u.port().unwrap_or(5432))
}

/// The same database URL, through the relay.
pub fn via(db_url: &str, relay: SocketAddr) -> String {
    let mut u = reqwest::Url::parse(db_url).unwrap();
    u.set_host(Some("127.0.0.1")).unwrap();
    u.set_port(Some(relay.port())).unwrap();
    u.to_string()
}

/// Ready → not ready (503) when the database goes away; key checks that need the database
/// answer 503 with Retry-After, never 500.
pub async fn database_outage(ctx: &Ctx, relay: &Relay) {
    let r = ctx
        .call(Method::GET, "/api/v1/health/ready", None, None)
        .await;
    assert_eq!((r.status, r.body["status"].as_str()), (200, Some("ready")));
    relay.cut();
    let r = ctx
        .call(Method::GET, "/api/v1/health/ready", None, None)
        .await;
    assert_eq!(
        (r.status, r.body["checks"]["database"].as_str()),
        (503, Some("unreachable"))
    );
    let r = ctx.call(Method::GET, "/api/v1/health", None, None).await;
    assert_eq!(
        (r.status, r.body["status"].as_str()),
        (200, Some("degraded"))
    );
    // A key that is not cached cannot be checked → 503 (each waits out the pool's timeout).
    let key = "agk_Outage00_0000000000000000000000000000000000000000";
    for path in ["/api/v1/me", "/api/v1/sessions"] {
        let r = ctx.call(Method::GET, path, Some(key), None).await;
        assert_eq!((r.status, r.code()), (503, "service_unavailable"), "{path}");
        assert!(r.headers.contains_key("retry-after"));
    }
}
