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
