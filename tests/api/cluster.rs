//! Modes and the database lease (issue 13, item 1; docs/operations.md, "Running N replicas"):
//! the real binary, on SQLite, PostgreSQL and MySQL, with the real Redis.
//!
//! - A second single-node server on a database another one serves refuses to start, naming the
//!   holder; once the holder is gone (here: `kill -9`, same host) the next start takes over.
//! - Replicas in cluster mode (Redis set) share one PostgreSQL or MySQL database, each with its
//!   own id in `/api/v1/health`; a single-node server next to them is refused, and so is a
//!   replica whose id a live replica uses.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::support::Server;

/// The Redis the cluster tests use (`AGENTRY_TEST_REDIS_URL`; default the local one that
/// `scripts/test.sh` starts). Each test keeps its keys under a prefix of its own.
pub fn redis_url() -> String {
    std::env::var("AGENTRY_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".into())
}

/// A fresh MySQL database next to the test one (dropped first if a previous run left it).
pub async fn own_mysql(suffix: &str) -> Option<String> {
    use agentry_store::testing::Backend;
    use sea_orm::ConnectionTrait;
    if Backend::MySql.skipped() {
        eprintln!("SKIPPING the MySQL part: AGENTRY_TEST_SKIP_DBS names mysql");
        return None;
    }
    let shared = Backend::MySql.url(std::path::Path::new("."));
    let (prefix, name) = shared
        .rsplit_once('/')
        .expect("a MySQL URL with a database");
    let (name, query) = match name.split_once('?') {
        Some((n, q)) => (n, format!("?{q}")),
        None => (name, String::new()),
    };
    let own = format!("{name}_{suffix}");
    let admin = agentry_store::connect(&agentry_store::DbOptions {
        url: shared.clone(),
        max_connections: 1,
        connect_timeout: Duration::from_secs(10),
        acquire_timeout: Duration::from_secs(10),
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "MySQL is not reachable ({shared}): {e}. Start it (scripts/test.sh does), point \
             AGENTRY_TEST_MYSQL_URL at one, or set AGENTRY_TEST_SKIP_DBS=mysql"
        )
    });
    for sql in [
        format!("DROP DATABASE IF EXISTS `{own}`"),
        format!("CREATE DATABASE `{own}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"),
    ] {
        admin.execute_unprepared(&sql).await.expect(&sql);
    }
    admin.close().await.ok();
    Some(format!("{prefix}/{own}{query}"))
}

/// `agentry serve` that must refuse to start: its exit status and what it said.
async fn refused_start(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentry"));
    cmd.arg("serve")
        .env("AGENTRY_DATA_DIR", dir.path())
        .env("AGENTRY_SERVER__PORT", "0")
        .env("AGENTRY_SERVER__WORKERS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("a refused server exits within 60 s instead of serving")
        .expect("agentry runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn health(server: &Server) -> Value {
    let res = reqwest::get(server.url("/api/v1/health")).await.unwrap();
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

async fn ready(server: &Server) -> (u16, Value) {
    let res = reqwest::get(server.url("/api/v1/health/ready"))
        .await
        .unwrap();
    (res.status().as_u16(), res.json().await.unwrap())
}

/// A second single-node server on `db_url` refuses to start naming the first; after the first
/// dies (`kill -9`) a start takes the lease over at once (same host, process gone).
pub async fn a_second_single_node_server_is_refused(db_url: &str) {
    let env = [("AGENTRY_DATABASE__URL", db_url)];
    let mut first = Server::start(&env).await;
    let h = health(&first).await;
    assert_eq!(h["mode"], "single", "{h}");
    let first_id = h["replica_id"].as_str().unwrap().to_string();
    assert!(!first_id.is_empty(), "{h}");
    // Its id is in the log line that says it listens.
    let (code, stderr) = refused_start(&env).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("another single-node server serves this database")
            && stderr.contains(&first_id)
            && stderr.contains("expires in")
            && stderr.contains("docs/operations.md"),
        "the refusal names the holder and how long its lease lasts: {stderr}"
    );
    // The first still serves.
    assert_eq!(health(&first).await["replica_id"], first_id.as_str());

    // Dead holder on this host: the next start takes over without waiting out the TTL.
    first.crash().await;
    let second = Server::start(&[
        ("AGENTRY_DATABASE__URL", db_url),
        ("AGENTRY_CLUSTER__REPLICA_ID", "second"),
    ])
    .await;
    let h = health(&second).await;
    assert_eq!(h["replica_id"], "second", "{h}");
    assert!(
        second.logged_at_start("took over the database lease") && second.logged_at_start(&first_id),
        "the takeover is logged, naming the previous holder"
    );
}

/// Two replicas in cluster mode on `db_url` and the test Redis: both serve with their own ids;
/// a single-node server and a replica reusing a live id are refused.
pub async fn replicas_share_the_database_and_exclude_single_node_servers(db_url: &str) {
    let redis = redis_url();
    let prefix = crate::ctx::unique("cluster-modes");
    let base = [
        ("AGENTRY_DATABASE__URL", db_url),
        ("AGENTRY_REDIS__URL", redis.as_str()),
        ("AGENTRY_REDIS__KEY_PREFIX", prefix.as_str()),
    ];
    let with_id = |id: &'static str| {
        let mut env = base.to_vec();
        env.push(("AGENTRY_CLUSTER__REPLICA_ID", id));
        env
    };
    let a = Server::start(&with_id("replica-a")).await;
    // B's id is generated: `<host>-<6 characters>`.
    let b = Server::start(&base).await;
    let (ha, hb) = (health(&a).await, health(&b).await);
    assert_eq!(ha["mode"], "cluster", "{ha}");
    assert_eq!(hb["mode"], "cluster", "{hb}");
    assert_eq!(ha["replica_id"], "replica-a");
    let b_id = hb["replica_id"].as_str().unwrap();
    assert!(b_id.len() > 7 && b_id != "replica-a", "{hb}");
    for s in [&a, &b] {
        let (status, body) = ready(s).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["checks"]["redis"], "ok", "{body}");
        assert_eq!(body["checks"]["database"], "ok", "{body}");
    }
    // The replica id is in the start log.
    assert!(
        a.logged_at_start("(replica replica-a, cluster mode)"),
        "the log names the replica"
    );

    // A single-node server next to the cluster: refused, naming a live replica.
    let (code, stderr) = refused_start(&[("AGENTRY_DATABASE__URL", db_url)]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("a cluster serves this database") && stderr.contains("AGENTRY_REDIS__URL"),
        "{stderr}"
    );
    // A replica reusing a live replica's id: refused.
    let (code, stderr) = refused_start(&with_id("replica-a")).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("another live process uses the replica id \"replica-a\""),
        "{stderr}"
    );
    // Both replicas still serve.
    assert_eq!(health(&a).await["replica_id"], "replica-a");
    assert_eq!(health(&b).await["replica_id"], b_id);
}

/// Cluster mode on SQLite stops at start with what to do; so does an unreachable Redis.
pub async fn cluster_mode_refuses_sqlite_and_an_unreachable_redis(db_url: &str) {
    let redis = redis_url();
    let (code, stderr) = refused_start(&[("AGENTRY_REDIS__URL", redis.as_str())]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("redis.url") && stderr.contains("SQLite") && stderr.contains("postgres://"),
        "{stderr}"
    );
    // Nothing listens on port 1 of loopback.
    let (code, stderr) = refused_start(&[
        ("AGENTRY_DATABASE__URL", db_url),
        ("AGENTRY_REDIS__URL", "redis://127.0.0.1:1/0"),
        ("AGENTRY_DATABASE__CONNECT_TIMEOUT_SECS", "2"),
    ])
    .await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("connecting to Redis at redis://127.0.0.1:1/0 (redis.url)"),
        "{stderr}"
    );
}

/// Redis lost under a replica (issue 13, item 3), through a TCP relay the test controls: a run
/// in flight finishes and its events are stored; readiness turns red with
/// `coordination_unavailable`; a new run is refused 503 `coordination_unavailable` with
/// `Retry-After`; when Redis answers again, readiness and new runs recover without a restart.
pub async fn a_lost_redis_refuses_new_runs_and_recovers(db_url: &str) {
    use crate::outage::{Link, Relay};
    use crate::streaming::{new_session, next_json, send, until_done_or_hitl};
    use agentry_fake_model::{DefaultReply, FakeReply};
    use reqwest::Method;
    use serde_json::json;
    let redis = reqwest::Url::parse(&redis_url()).unwrap();
    let relay = Relay::start(format!(
        "{}:{}",
        redis.host_str().unwrap(),
        redis.port().unwrap_or(6379)
    ))
    .await;
    let relayed = format!("redis://127.0.0.1:{}{}", relay.addr.port(), redis.path());
    let prefix = crate::ctx::unique("cluster-outage");
    let words: Vec<String> = (0..30).map(|i| format!("w{i}")).collect();
    // A run of about 3 s: long enough to lose Redis under it.
    let reply = DefaultReply::Always(
        FakeReply::text(&words.join(" "))
            .in_chunks(30)
            .with_chunk_delay(Duration::from_millis(100)),
    );
    let (_fake, ctx) = crate::durability::start(
        reply,
        Some(db_url),
        &[
            ("AGENTRY_REDIS__URL", relayed.as_str()),
            ("AGENTRY_REDIS__KEY_PREFIX", prefix.as_str()),
            ("AGENTRY_CLUSTER__REPLICA_ID", "outage-a"),
        ],
    )
    .await;
    let t = ctx.tenant().await;
    let key = t.member.key.as_str();
    let (s1, s2) = (new_session(&ctx, key).await, new_session(&ctx, key).await);
    let mut ws = crate::mcp::ws_connect(&ctx, key, &s1).await;
    send(
        &mut ws,
        json!({"type": "chat", "payload": {"message": "long"}}),
    )
    .await;
    loop {
        if next_json(&mut ws).await["event_type"] == "text" {
            break;
        }
    }

    relay.set(Link::Refused).await;
    let ready = |want: u16| {
        let ctx = &ctx;
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(15);
            loop {
                let r = ctx
                    .call(Method::GET, "/api/v1/health/ready", None, None)
                    .await;
                if r.status == want {
                    return r;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "readiness stayed {} ({}) instead of {want}",
                    r.status,
                    r.body
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let r = ready(503).await;
    assert_eq!(r.code(), "coordination_unavailable", "{}", r.body);
    assert_eq!(r.body["checks"]["redis"], "unreachable", "{}", r.body);
    assert_eq!(r.body["checks"]["database"], "ok", "{}", r.body);
    assert!(r.headers.contains_key("retry-after"));
    // A new run: refused, nothing started.
    let chat = json!({"message": "while Redis is away", "session_id": s2});
    let r = ctx
        .call(Method::POST, "/api/v1/chat", Some(key), Some(&chat))
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.code(), "coordination_unavailable", "{}", r.body);
    assert!(r.headers.contains_key("retry-after"), "{:?}", r.headers);
    // The run in flight finishes, and its `done` is stored.
    let evs = until_done_or_hitl(&mut ws).await;
    let done = evs.last().unwrap();
    assert_eq!(done["event_type"], "done", "{evs:?}");
    assert_eq!(done["data"]["status"], "completed", "{done}");
    let stored = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/sessions/{s1}/events?after_seq=0"),
            key,
            None,
            200,
        )
        .await;
    let stored = stored
        .as_array()
        .or_else(|| stored["events"].as_array())
        .cloned()
        .unwrap();
    assert!(
        stored
            .iter()
            .any(|e| e["event_type"] == "done" && e["seq"] == done["seq"]),
        "the run's done is stored"
    );

    // Redis back: ready again, and runs start, without a restart.
    relay.set(Link::Up).await;
    ready(200).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let r = ctx
            .call(Method::POST, "/api/v1/chat", Some(key), Some(&chat))
            .await;
        if r.status == 200 {
            assert_eq!(
                r.body["events"].as_array().unwrap().last().unwrap()["event_type"],
                "done"
            );
            break;
        }
        assert_eq!(r.code(), "coordination_unavailable", "{}", r.body);
        assert!(
            std::time::Instant::now() < deadline,
            "runs never started again"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Cache invalidation over Redis (issue 13, item 7): with a key cache of ten minutes, a key
/// revoked on replica A is refused on replica B within seconds, and so is a key of a tenant
/// suspended on A: only the announcement over Redis can do that, not the cache's TTL.
pub async fn changes_on_one_replica_reach_the_others_caches(db_url: &str) {
    use crate::ctx::{ADMIN_KEY, Ctx};
    use reqwest::Method;
    use serde_json::json;
    let redis = redis_url();
    let prefix = crate::ctx::unique("cluster-changes");
    let start = |id: &'static str| {
        let (redis, prefix) = (redis.clone(), prefix.clone());
        async move {
            Ctx::start_with(
                &[
                    ("AGENTRY_REDIS__URL", redis.as_str()),
                    ("AGENTRY_REDIS__KEY_PREFIX", prefix.as_str()),
                    ("AGENTRY_CLUSTER__REPLICA_ID", id),
                    ("AGENTRY_AUTH__CACHE_TTL_SECS", "600"),
                ],
                Some(db_url),
            )
            .await
        }
    };
    let a = start("changes-a").await;
    let b = start("changes-b").await;
    let t = a.tenant().await;
    // Both keys are cached on B.
    for key in [&t.member.key, &t.member2.key] {
        assert_eq!(me(&b, key).await.status, 200);
    }
    // Revoked on A: refused on B.
    a.ok(
        Method::DELETE,
        &format!("/api/v1/tenant/api-keys/{}", t.member.key_id),
        &t.admin.key,
        None,
        200,
    )
    .await;
    let (r, took) = until(&b, &t.member.key, 401, "a revoked key").await;
    assert_eq!(r.code(), "unauthorized");
    eprintln!("a revocation on A reached B in {took:?}");
    assert_eq!(me(&b, &t.member2.key).await.status, 200, "other keys stay");
    // Suspended on A: refused on B.
    a.ok(
        Method::PATCH,
        &format!("/api/v1/admin/tenants/{}", t.id),
        ADMIN_KEY,
        Some(json!({"status": "suspended"})),
        200,
    )
    .await;
    let (r, took) = until(&b, &t.member2.key, 403, "a suspended tenant").await;
    assert_eq!(r.code(), "tenant_suspended");
    eprintln!("a suspension on A reached B in {took:?}");
}

async fn me(ctx: &crate::ctx::Ctx, key: &str) -> crate::ctx::Resp {
    ctx.call(reqwest::Method::GET, "/api/v1/me", Some(key), None)
        .await
}

/// Call `/me` with `key` until it answers `want` (within 10 s): the answer and how long it took.
async fn until(
    ctx: &crate::ctx::Ctx,
    key: &str,
    want: u16,
    what: &str,
) -> (crate::ctx::Resp, Duration) {
    let started = std::time::Instant::now();
    loop {
        let r = me(ctx, key).await;
        if r.status == want {
            return (r, started.elapsed());
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: still {} on the other replica after 10 s ({})",
            r.status,
            r.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Fencing through the real binary (issue 13, items 2 and 4): replica A owns a session whose run
/// waits for an approval; A is paused (`SIGSTOP`) past its heartbeat and session lease; B's
/// failover watcher, with nothing on B touching the session, claims it with a newer token and
/// resumes the run from its checkpoint (it asks again); A, continued (`SIGCONT`), finds its
/// lease lost, and its late write (the end of its copy of the run) is refused and logged. The
/// run ends once, on B.
pub async fn a_paused_owner_loses_the_session_and_its_late_writes_are_refused(db_url: &str) {
    use crate::ctx::Ctx;
    use crate::streaming::{new_session, send, until_done_or_hitl};
    use reqwest::Method;
    use serde_json::json;
    let redis = redis_url();
    let prefix = crate::ctx::unique("cluster-fence");
    let start = |id: &'static str| {
        let (redis, prefix) = (redis.clone(), prefix.clone());
        async move {
            Ctx::start_with(
                &[
                    ("AGENTRY_REDIS__URL", redis.as_str()),
                    ("AGENTRY_REDIS__KEY_PREFIX", prefix.as_str()),
                    ("AGENTRY_CLUSTER__REPLICA_ID", id),
                    ("AGENTRY_CLUSTER__SESSION_LEASE_TTL_SECS", "3"),
                ],
                Some(db_url),
            )
            .await
        }
    };
    let a = start("fence-a").await;
    let b = start("fence-b").await;
    let t = a.tenant().await;
    let key = t.member.key.as_str();
    let sid = new_session(&a, key).await;
    let mut ws_a = crate::mcp::ws_connect(&a, key, &sid).await;
    let write = r#"/tool write_file {"file_path": "notes.txt", "content": "hi"}"#;
    send(
        &mut ws_a,
        json!({"type": "chat", "payload": {"message": write}}),
    )
    .await;
    let evs = until_done_or_hitl(&mut ws_a).await;
    let hitl = evs.last().unwrap().clone();
    assert_eq!(hitl["event_type"], "hitl_request", "{evs:?}");
    let run_id = hitl["run_id"].as_str().unwrap().to_string();
    let a_last = hitl["seq"].as_u64().unwrap();

    // A stops answering past its lease (3 s).
    let pid = a.server.child.id().unwrap().to_string();
    let signal = |sig: &str| {
        let status = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill {sig} {pid}");
    };
    signal("-STOP");

    // B's watcher takes the session over by itself: the run, resumed there, asks again (the
    // same request), which B stores. Only the stored stream is read on B meanwhile.
    let paused = std::time::Instant::now();
    let again = loop {
        let stored = b
            .ok(
                Method::GET,
                &format!("/api/v1/sessions/{sid}/events?after_seq={a_last}"),
                key,
                None,
                200,
            )
            .await;
        if let Some(e) = stored["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["event_type"] == "hitl_request")
        {
            break e.clone();
        }
        assert!(
            paused.elapsed() < Duration::from_secs(60),
            "B did not take the session over within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "B resumed the run {:?} after A was paused",
        paused.elapsed()
    );
    assert_eq!(again["run_id"], run_id.as_str(), "the same run, resumed");
    assert!(again["seq"].as_u64().unwrap() > a_last);
    let request = again["data"]["request_id"].as_str().unwrap().to_string();
    assert_eq!(
        request,
        hitl["data"]["request_id"].as_str().unwrap(),
        "the pending request survives the takeover"
    );
    let req = crate::mcp::ws_request(&b, key, &sid, &format!("?after_seq={a_last}"));
    let mut ws_b = tokio_tungstenite::connect_async(req).await.unwrap().0;
    let evs = until_done_or_hitl(&mut ws_b).await;
    assert_eq!(evs.last().unwrap(), &again, "{evs:?}");

    // A continues: it finds its lease lost, and the write it then tries is refused, and logged.
    signal("-CONT");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let refused = a.server.log_lines(|v| {
            v.to_string()
                .contains("refused a write with a stale fencing token")
        });
        if !refused.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "A's late write was not refused (or not logged) within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !a.server
            .log_lines(|v| v.to_string().contains("lost the session's lease"))
            .is_empty(),
        "A logs that it lost the session"
    );

    // The run goes on and ends on B, once.
    b.ok(
        Method::POST,
        &format!("/api/v1/sessions/{sid}/approvals/{request}"),
        key,
        Some(json!({"type": "approve"})),
        200,
    )
    .await;
    let evs = until_done_or_hitl(&mut ws_b).await;
    let done = evs.last().unwrap();
    assert_eq!(done["event_type"], "done", "{evs:?}");
    assert_eq!(done["data"]["status"], "completed", "{done}");
    let stored = b
        .ok(
            Method::GET,
            &format!("/api/v1/sessions/{sid}/events?after_seq=0"),
            key,
            None,
            200,
        )
        .await;
    let stored = stored
        .as_array()
        .or_else(|| stored["events"].as_array())
        .cloned()
        .unwrap();
    let seqs: Vec<u64> = stored.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(seqs, sorted, "no seq twice");
    let dones: Vec<&Value> = stored
        .iter()
        .filter(|e| e["event_type"] == "done")
        .collect();
    assert_eq!(dones.len(), 1, "exactly one done: {dones:?}");
    assert_eq!(dones[0]["seq"], done["seq"]);
    let run = b
        .ok(
            Method::GET,
            &format!("/api/v1/executions/{run_id}"),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    drop(ws_a);
}
