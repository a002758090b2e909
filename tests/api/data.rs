//! Data sources and the data tools (issue 17 item 2, docs/data.md) through the real server:
//! tenant admins register sources over REST (URLs sealed, passwords never shown, hosts and
//! SQLite paths checked); the tools run through the agent loop (`/chat` with the scripted
//! model's `/tool` lines) against real PostgreSQL, MariaDB and SQLite databases this test makes.

use std::path::{Path, PathBuf};

use reqwest::Method;
use sea_orm::ConnectionTrait;
use serde_json::{Value, json};

use crate::ctx::{ADMIN_KEY, Ctx, TenantFx};

/// A SQLite file at `path` made with `statements` (rollback journal, so a read-only reader
/// needs no `-wal` beside it).
pub async fn sqlite_file(path: &Path, statements: &[&str]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let db = sea_orm::Database::connect(format!("sqlite://{}?mode=rwc", path.display()))
        .await
        .unwrap();
    db.execute_unprepared("PRAGMA journal_mode=DELETE")
        .await
        .unwrap();
    for s in statements {
        db.execute_unprepared(s).await.expect(s);
    }
    db.close().await.unwrap();
}

fn area(ctx: &Ctx, tenant: &str) -> PathBuf {
    ctx.server.data_dir.path().join("workspaces").join(tenant)
}

const SQLITE_SALES: &[&str] = &[
    "CREATE TABLE regions (id INTEGER PRIMARY KEY, name TEXT NOT NULL)",
    "CREATE TABLE sales (id INTEGER PRIMARY KEY, region_id INTEGER NOT NULL REFERENCES regions(id), amount NUMERIC NOT NULL)",
    "INSERT INTO regions (id, name) VALUES (1, 'north'), (2, 'south'), (3, 'east')",
    "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 1500) \
     INSERT INTO sales (region_id, amount) SELECT 1 + n % 3, n FROM g",
];

/// The REST side on the suite's shared server (only 127.0.0.2 allowed, as for users' MCP
/// servers): every documented answer, the checks on URLs, sealing, and another tenant. The
/// sources it registers use port 6432: every loopback address is this host, and on the
/// PostgreSQL flavour of the suite 5432 there is the platform's own database, which is refused.
pub async fn data_sources_flow(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let b = ctx.tenant().await;
    let key = &t.admin.key;
    let db_file = area(ctx, &t.id).join(&t.admin.user_id).join("sales.db");
    sqlite_file(&db_file, SQLITE_SALES).await;
    let created = ctx
        .call(
            Method::POST,
            "/api/v1/data-sources",
            Some(key),
            Some(
                &json!({"id": "sales", "url": format!("sqlite:{}/sales.db", t.admin.user_id),
                         "allowed_roles": ["admin", "member", "member"]}),
            ),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.headers["location"], "/api/v1/data-sources/sales");
    assert_eq!(created.body["engine"], "sqlite");
    assert_eq!(created.body["name"], "sales");
    assert_eq!(created.body["allowed_roles"], json!(["admin", "member"]));
    assert_eq!(created.body["password_set"], false);
    assert_eq!(created.body["catalog_cached_at"], Value::Null);
    // An absolute path inside the tenant's area is the same file.
    ctx.ok(
        Method::POST,
        "/api/v1/data-sources",
        key,
        Some(json!({"id": "sales-abs", "url": format!("sqlite:{}", db_file.display())})),
        201,
    )
    .await;
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/data-sources",
            Some(key),
            Some(&json!({"id": "sales", "url": "postgres://u@127.0.0.2:6432/x"})),
        )
        .await;
    assert_eq!((r.status, r.code()), (409, "conflict"), "{}", r.body);

    // What a hostile admin may not register: nothing is stored for any of them.
    let b_file = area(ctx, &b.id).join(&b.admin.user_id).join("theirs.db");
    sqlite_file(&b_file, &["CREATE TABLE secret (x TEXT)"]).await;
    let platform_db = ctx.server.data_dir.path().join("agentry.db");
    let link = area(ctx, &t.id).join(&t.admin.user_id).join("link.db");
    std::os::unix::fs::symlink(&platform_db, &link).unwrap();
    let dir_link = area(ctx, &t.id).join(&t.admin.user_id).join("other");
    std::os::unix::fs::symlink(area(ctx, &b.id), &dir_link).unwrap();
    for (body, field, why) in [
        (
            json!({"id": "meta", "url": "postgres://u:pw@169.254.169.254:5432/db"}),
            "url",
            "link-local",
        ),
        (
            json!({"id": "private", "url": "postgres://u@10.1.2.3/db"}),
            "url",
            "private",
        ),
        (
            json!({"id": "loop", "url": "mysql://root@127.0.0.1:3306/mysql"}),
            "url",
            "loopback",
        ),
        (
            json!({"id": "sock", "url": "postgres://u@127.0.0.2:6432/db?host=/var/run/postgresql"}),
            "url",
            "not accepted",
        ),
        (
            json!({"id": "up", "url": format!("sqlite:../{}/{}/theirs.db", b.id, b.admin.user_id)}),
            "url",
            "..",
        ),
        (
            json!({"id": "theirs", "url": format!("sqlite:{}", b_file.display())}),
            "url",
            "inside the tenant's own area",
        ),
        (
            json!({"id": "platform", "url": format!("sqlite:{}", platform_db.display())}),
            "url",
            "inside the tenant's own area",
        ),
        (
            json!({"id": "link", "url": format!("sqlite:{}/link.db", t.admin.user_id)}),
            "url",
            "inside the tenant's own area",
        ),
        (
            json!({"id": "dirlink", "url": format!("sqlite:{}/other/{}/theirs.db", t.admin.user_id, b.admin.user_id)}),
            "url",
            "inside the tenant's own area",
        ),
        (
            json!({"id": "missing", "url": "sqlite:nobody/none.db"}),
            "url",
            "no SQLite file",
        ),
        (
            json!({"id": "redis", "url": "redis://127.0.0.2:6379/0"}),
            "url",
            "unsupported",
        ),
        (
            json!({"id": "roles", "url": "sqlite:x.db", "allowed_roles": ["root"]}),
            "allowed_roles",
            "unknown role",
        ),
        (
            json!({"id": "noroles", "url": "sqlite:x.db", "allowed_roles": []}),
            "allowed_roles",
            "at least one",
        ),
        (
            json!({"id": "pw", "url": format!("sqlite:{}/sales.db", t.admin.user_id), "password": "x"}),
            "password",
            "no password",
        ),
        (json!({"id": "Not A Slug", "url": "sqlite:x.db"}), "id", ""),
    ] {
        let r = ctx
            .call(Method::POST, "/api/v1/data-sources", Some(key), Some(&body))
            .await;
        assert_eq!(
            (r.status, r.code()),
            (422, "validation_error"),
            "{body}: {}",
            r.body
        );
        assert_eq!(r.details()["field"], field, "{body}: {}", r.body);
        assert!(r.message().contains(why), "{body}: {}", r.body);
    }
    let listed = ctx
        .ok(Method::GET, "/api/v1/data-sources", key, None, 200)
        .await;
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["sales", "sales-abs"]);

    // A server source with a password: sealed at rest, never shown, kept on a PUT to the
    // same server and user only.
    let wh = ctx
        .ok(
            Method::POST,
            "/api/v1/data-sources",
            key,
            Some(json!({"id": "warehouse", "url": "postgres://reader:hunter2@127.0.0.2:6432/wh"})),
            201,
        )
        .await;
    assert_eq!(wh["url"], "postgres://reader:***@127.0.0.2:6432/wh");
    assert_eq!(
        (&wh["password_set"], &wh["engine"]),
        (&json!(true), &json!("postgres"))
    );
    assert_eq!(wh["allowed_roles"], json!(["admin"]), "the default");
    let row = ctx
        .db
        .query_one_raw(sea_orm::Statement::from_string(
            ctx.db.get_database_backend(),
            "SELECT url_sealed, url_redacted FROM data_sources WHERE id = 'warehouse'",
        ))
        .await
        .unwrap()
        .unwrap();
    let sealed: String = row.try_get("", "url_sealed").unwrap();
    let shown: String = row.try_get("", "url_redacted").unwrap();
    assert!(
        sealed.starts_with("v1:") && !sealed.contains("hunter2"),
        "{sealed}"
    );
    assert!(!shown.contains("hunter2"));
    let kept = ctx
        .ok(
            Method::PUT,
            "/api/v1/data-sources/warehouse",
            key,
            Some(json!({"url": "postgres://reader@127.0.0.2:6432/wh", "name": "Warehouse"})),
            200,
        )
        .await;
    assert_eq!(
        (&kept["password_set"], &kept["name"]),
        (&json!(true), &json!("Warehouse"))
    );
    assert_eq!(kept["url"], "postgres://reader:***@127.0.0.2:6432/wh");
    let moved = ctx
        .ok(
            Method::PUT,
            "/api/v1/data-sources/warehouse",
            key,
            Some(json!({"url": "postgres://reader@127.0.0.2:6543/wh"})),
            200,
        )
        .await;
    assert_eq!(
        moved["password_set"], false,
        "not handed to another server: {moved}"
    );
    let set = ctx
        .ok(
            Method::PUT,
            "/api/v1/data-sources/warehouse",
            key,
            Some(json!({"url": "postgres://reader@127.0.0.2:6543/wh", "password": "n3w"})),
            200,
        )
        .await;
    assert_eq!(set["password_set"], true);
    let cleared = ctx
        .ok(
            Method::PUT,
            "/api/v1/data-sources/warehouse",
            key,
            Some(json!({"url": "postgres://reader@127.0.0.2:6543/wh", "password": null})),
            200,
        )
        .await;
    assert_eq!(cleared["password_set"], false);
    for (method, path, body, status) in [
        (Method::GET, "/api/v1/data-sources/warehouse", None, 200),
        (Method::GET, "/api/v1/data-sources/nope", None, 404),
        (Method::GET, "/api/v1/data-sources/_bad", None, 400),
        (
            Method::PUT,
            "/api/v1/data-sources/nope",
            Some(json!({"url": "sqlite:x.db"})),
            404,
        ),
        (
            Method::PUT,
            "/api/v1/data-sources/_bad",
            Some(json!({"url": "sqlite:x.db"})),
            400,
        ),
        (
            Method::PUT,
            "/api/v1/data-sources/warehouse",
            Some(json!({"url": "postgres://u@169.254.169.254/db"})),
            422,
        ),
        (Method::DELETE, "/api/v1/data-sources/_bad", None, 400),
        (Method::DELETE, "/api/v1/data-sources/warehouse", None, 204),
        (Method::DELETE, "/api/v1/data-sources/warehouse", None, 404),
    ] {
        let r = ctx
            .call(method.clone(), path, Some(key), body.as_ref())
            .await;
        assert_eq!(r.status, status, "{method} {path}: {}", r.body);
    }
    for (method, path) in [
        (Method::POST, "/api/v1/data-sources"),
        (Method::PUT, "/api/v1/data-sources/sales"),
    ] {
        let r = ctx
            .send(
                ctx.request(method.clone(), path, Some(key))
                    .header("content-type", "application/json")
                    .body("{not json"),
            )
            .await;
        assert_eq!(r.status, 400, "{method} {path}: {}", r.body);
        let r = ctx
            .send(
                ctx.request(method.clone(), path, Some(key))
                    .header("content-type", "text/plain")
                    .body("{}"),
            )
            .await;
        assert_eq!(r.status, 415, "{method} {path}: {}", r.body);
        let big =
            json!({"id": "big", "url": "sqlite:x.db", "name": "n".repeat(crate::ctx::BODY_LIMIT)});
        let r = ctx.call(method.clone(), path, Some(key), Some(&big)).await;
        assert_eq!(
            (r.status, r.code()),
            (413, "payload_too_large"),
            "{method} {path}: {}",
            r.body
        );
    }
    // Another tenant's admin sees none of it; a member may not manage sources.
    let theirs = ctx
        .ok(Method::GET, "/api/v1/data-sources", &b.admin.key, None, 200)
        .await;
    assert_eq!(theirs, json!([]));
    for (method, path) in [
        (Method::GET, "/api/v1/data-sources/sales"),
        (Method::DELETE, "/api/v1/data-sources/sales"),
    ] {
        let r = ctx
            .call(method.clone(), path, Some(&b.admin.key), None)
            .await;
        assert_eq!(r.status, 404, "{method} {path}: {}", r.body);
    }
    let r = ctx
        .call(
            Method::GET,
            "/api/v1/data-sources",
            Some(&t.member.key),
            None,
        )
        .await;
    assert_eq!(r.status, 403);
    // The sources are still A's.
    ctx.ok(Method::GET, "/api/v1/data-sources/sales", key, None, 200)
        .await;
    files_of_the_caller(ctx, &t).await;
}

/// `GET /files/{path}`: the caller's own workspace, nothing outside it.
async fn files_of_the_caller(ctx: &Ctx, t: &TenantFx) {
    let ws = area(ctx, &t.id);
    let mine = ws.join(&t.member.user_id);
    let theirs = ws.join(&t.member2.user_id);
    std::fs::create_dir_all(mine.join("notes")).unwrap();
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::write(mine.join("notes/today.md"), "# Today\n").unwrap();
    std::fs::write(theirs.join("diary.txt"), "private").unwrap();
    std::os::unix::fs::symlink(&theirs, mine.join("peek")).unwrap();
    std::fs::hard_link(theirs.join("diary.txt"), mine.join("hard.txt")).unwrap();
    let r = ctx
        .call(
            Method::GET,
            "/api/v1/files/notes/today.md",
            Some(&t.member.key),
            None,
        )
        .await;
    assert_eq!((r.status, r.body.as_str()), (200, Some("# Today\n")));
    assert_eq!(r.headers["x-content-type-options"], "nosniff");
    for path in [
        "/api/v1/files/peek/diary.txt".to_string(),
        "/api/v1/files/hard.txt".to_string(),
        format!("/api/v1/files/{}", theirs.join("diary.txt").display()),
        "/api/v1/files/notes/../../x".to_string(),
    ] {
        let r = ctx
            .call(Method::GET, &path, Some(&t.member.key), None)
            .await;
        assert!(
            matches!(r.status, 400 | 404),
            "{path}: {} {}",
            r.status,
            r.body
        );
        assert!(!r.body.to_string().contains("private"), "{path}");
    }
    let r = ctx
        .call(
            Method::GET,
            "/api/v1/files/peek/diary.txt",
            Some(&t.member.key),
            None,
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "bad_request"), "{}", r.body);
    for (key, status) in [(&t.member2.key, 404), (&t.admin.key, 404)] {
        let r = ctx
            .call(Method::GET, "/api/v1/files/notes/today.md", Some(key), None)
            .await;
        assert_eq!(r.status, status, "{}", r.body);
    }
    let r = ctx
        .call(
            Method::GET,
            "/api/v1/files/notes/today.md",
            Some(ADMIN_KEY),
            None,
        )
        .await;
    assert_eq!(r.status, 403);
}

/// Without an encryption key no URL can be sealed: 503, nothing stored.
pub async fn data_sources_without_encryption_key(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let file = area(ctx, &t.id).join(&t.admin.user_id).join("s.db");
    sqlite_file(&file, &["CREATE TABLE x (a INT)"]).await;
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/data-sources",
            Some(&t.admin.key),
            Some(&json!({"id": "s", "url": format!("sqlite:{}/s.db", t.admin.user_id)})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (503, "service_unavailable"),
        "{}",
        r.body
    );
    assert!(r.message().contains("encryption key"), "{}", r.body);
    let listed = ctx
        .ok(Method::GET, "/api/v1/data-sources", &t.admin.key, None, 200)
        .await;
    assert_eq!(listed, json!([]));
}

// ---- the tools, through the agent loop ----

/// The result of one tool call made by the scripted model in a fresh session: its
/// `tool_result` data and all the run's events.
pub async fn tool(ctx: &Ctx, key: &str, name: &str, args: Value) -> (Value, Vec<Value>) {
    let r = ctx
        .ok(
            Method::POST,
            "/api/v1/chat",
            key,
            Some(json!({"message": format!("/tool {name} {args}")})),
            200,
        )
        .await;
    let events = r["events"].as_array().unwrap().clone();
    let result = events
        .iter()
        .find(|e| e["event_type"] == "tool_result")
        .unwrap_or_else(|| panic!("{name}: no tool_result in {events:?}"))["data"]
        .clone();
    (result, events)
}

/// A successful call's result.
async fn ok_tool(ctx: &Ctx, key: &str, name: &str, args: Value) -> Value {
    let (r, _) = tool(ctx, key, name, args.clone()).await;
    assert_eq!(r["status"], "success", "{name} {args}: {r}");
    r["result"].clone()
}

/// A refused call's error (code, message).
async fn failed_tool(ctx: &Ctx, key: &str, name: &str, args: Value) -> (String, String) {
    let (r, _) = tool(ctx, key, name, args.clone()).await;
    assert_eq!(r["status"], "error", "{name} {args}: {r}");
    let e = &r["result"]["error"];
    (
        e["code"].as_str().unwrap_or_default().to_string(),
        e["message"].as_str().unwrap_or_default().to_string(),
    )
}

const PG_SETUP: &[&str] = &[
    "CREATE TABLE regions (id int PRIMARY KEY, name text NOT NULL)",
    "CREATE TABLE sales (id serial PRIMARY KEY, region_id int NOT NULL REFERENCES regions(id), amount numeric(12,2) NOT NULL, sold_on date)",
    "INSERT INTO regions VALUES (1, 'north'), (2, 'south'), (3, 'east')",
    "INSERT INTO sales (region_id, amount, sold_on) SELECT 1 + g % 3, g, DATE '2026-01-01' + (g % 28) FROM generate_series(1, 1500) g",
    "ANALYZE",
    "CREATE SEQUENCE ticket",
    "CREATE TABLE audit (at timestamptz DEFAULT now())",
    "CREATE FUNCTION touch() RETURNS int LANGUAGE sql AS 'INSERT INTO audit DEFAULT VALUES RETURNING 1'",
];

const MYSQL_SETUP: &[&str] = &[
    "CREATE TABLE regions (id INT PRIMARY KEY, name VARCHAR(32) NOT NULL) ENGINE=InnoDB",
    "CREATE TABLE sales (id INT AUTO_INCREMENT PRIMARY KEY, region_id INT NOT NULL, amount DECIMAL(12,2) NOT NULL, \
     FOREIGN KEY (region_id) REFERENCES regions(id)) ENGINE=InnoDB",
    "INSERT INTO regions VALUES (1, 'north'), (2, 'south'), (3, 'east')",
    "INSERT INTO sales (region_id, amount) SELECT 1 + seq % 3, seq FROM seq_1_to_1500",
    "ANALYZE TABLE regions, sales",
    "CREATE TABLE audit (at DATETIME(6))",
    "CREATE FUNCTION touch() RETURNS INT MODIFIES SQL DATA BEGIN INSERT INTO audit VALUES (NOW(6)); RETURN 1; END",
];

/// A fresh database `<test db>_tools` on the server of `base` (PostgreSQL or MySQL), filled by
/// `setup`; its URL and a connection to it.
async fn fresh_database(base: &str, setup: &[&str]) -> (String, sea_orm::DatabaseConnection) {
    let (server, name) = base.rsplit_once('/').unwrap();
    let name = format!("{}_tools", name.split('?').next().unwrap());
    let pg = base.starts_with("postgres");
    let admin_url = format!("{server}/{}", if pg { "postgres" } else { "mysql" });
    let admin = sea_orm::Database::connect(&admin_url)
        .await
        .expect(&admin_url);
    let ddl = if pg {
        [
            format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"),
            format!("CREATE DATABASE \"{name}\""),
        ]
    } else {
        [
            format!("DROP DATABASE IF EXISTS `{name}`"),
            format!("CREATE DATABASE `{name}`"),
        ]
    };
    for s in ddl {
        admin.execute_unprepared(&s).await.expect(&s);
    }
    admin.close().await.ok();
    let url = format!("{server}/{name}");
    let db = sea_orm::Database::connect(&url).await.expect(&url);
    for s in setup {
        db.execute_unprepared(s).await.expect(s);
    }
    (url, db)
}

async fn count(db: &sea_orm::DatabaseConnection, sql: &str) -> i64 {
    let row = db
        .query_one_raw(sea_orm::Statement::from_string(
            db.get_database_backend(),
            sql.to_string(),
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get_by_index::<i64>(0).unwrap()
}

fn table<'a>(catalog: &'a Value, name: &str) -> &'a Value {
    catalog["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no table {name} in {catalog}"))
}

/// The sum of amounts per region, as run_sql returns it, for one engine.
async fn sums(ctx: &Ctx, key: &str, source: &str) -> Vec<(String, f64)> {
    let out = ok_tool(
        ctx,
        key,
        "run_sql",
        json!({"source": source, "sql": "SELECT r.name AS region, SUM(s.amount) AS total FROM sales s JOIN regions r ON r.id = s.region_id GROUP BY r.name ORDER BY r.name"}),
    )
    .await;
    let cols: Vec<&str> = out["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["region", "total"], "{source}: {out}");
    assert_eq!(out["truncated"], false);
    out["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let total = r[1]
                .as_f64()
                .or_else(|| r[1].as_str().and_then(|s| s.parse().ok()))
                .unwrap();
            (r[0].as_str().unwrap().to_string(), total)
        })
        .collect()
}

/// Everything a data source's user does, on PostgreSQL, MariaDB and SQLite.
pub async fn data_tools(ctx: &Ctx, pg_base: Option<String>, mysql_base: Option<String>) {
    // Every call below is a run in a session of its own.
    let t = ctx
        .tenant_with(json!({"max_sessions_per_user": 1000}))
        .await;
    let b = ctx.tenant().await;
    let admin = &t.admin.key;
    let member = &t.member.key;
    let register = |id: &str, url: String, roles: Value| {
        let body = json!({"id": id, "url": url, "allowed_roles": roles});
        async move {
            ctx.ok(Method::POST, "/api/v1/data-sources", admin, Some(body), 201)
                .await
        }
    };
    let sqlite = area(ctx, &t.id).join(&t.member.user_id).join("shop.db");
    sqlite_file(&sqlite, SQLITE_SALES).await;
    register(
        "shop",
        format!("sqlite:{}/shop.db", t.member.user_id),
        json!(["admin", "member"]),
    )
    .await;
    let mut servers = Vec::new();
    let mut pg_db = None;
    if let Some(base) = &pg_base {
        let (url, db) = fresh_database(base, PG_SETUP).await;
        // The test server trusts local connections; a password is still sealed and sent.
        let with_pw = url.replacen("postgres://postgres@", "postgres://postgres:s3cret-pw@", 1);
        let r = register("pg", with_pw, json!(["admin", "member"])).await;
        assert!(!r.to_string().contains("s3cret-pw"), "{r}");
        register("pg-secret", url.clone(), json!(["admin"])).await;
        servers.push("pg");
        pg_db = Some(db);
    }
    let mut my_db = None;
    if let Some(base) = &mysql_base {
        let (url, db) = fresh_database(base, MYSQL_SETUP).await;
        register(
            "maria",
            url.replacen("mysql://", "mariadb://", 1),
            json!(["admin", "member"]),
        )
        .await;
        servers.push("maria");
        my_db = Some(db);
    }

    // list: the member sees what its role may use, not the admin-only source.
    let listed = ok_tool(ctx, member, "list_data_sources", json!({})).await;
    let mut ids: Vec<&str> = listed["data_sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut want: Vec<&str> = servers.iter().copied().chain(["shop"]).collect();
    want.sort_unstable();
    assert_eq!(ids, want, "{listed}");
    let all = ok_tool(ctx, admin, "list_data_sources", json!({})).await;
    assert_eq!(
        all["count"].as_u64().unwrap() as usize,
        want.len() + usize::from(pg_base.is_some())
    );

    // describe: tables, columns, types, keys, estimates; cached, then refreshed.
    for source in servers.iter().copied().chain(["shop"]) {
        let cat = ok_tool(
            ctx,
            member,
            "describe_data_source",
            json!({"source": source}),
        )
        .await;
        assert_eq!(cat["cached"], false, "{source}: {cat}");
        let sales = table(&cat, "sales");
        let cols: Vec<&str> = sales["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            &cols[..3],
            ["id", "region_id", "amount"],
            "{source}: {sales}"
        );
        assert_eq!(sales["primary_key"], json!(["id"]), "{source}");
        assert_eq!(sales["columns"][2]["nullable"], false, "{source}");
        let amount = sales["columns"][2]["type"].as_str().unwrap().to_lowercase();
        assert!(
            amount.contains("numeric") || amount.contains("decimal"),
            "{source}: {amount}"
        );
        let fk = &sales["foreign_keys"][0];
        assert_eq!(fk["columns"], json!(["region_id"]), "{source}: {sales}");
        assert!(
            fk["references"].as_str().unwrap().ends_with("regions"),
            "{fk}"
        );
        assert_eq!(fk["referenced_columns"], json!(["id"]));
        let estimate = sales["row_estimate"].as_i64().unwrap_or(0);
        assert!(
            (1000..=2000).contains(&estimate),
            "{source}: estimate {estimate}"
        );
        assert_eq!(table(&cat, "regions")["primary_key"], json!(["id"]));
        let again = ok_tool(
            ctx,
            member,
            "describe_data_source",
            json!({"source": source}),
        )
        .await;
        assert_eq!(again["cached"], true, "{source}");
        assert_eq!(again["tables"], cat["tables"]);
        let fresh = ok_tool(
            ctx,
            member,
            "describe_data_source",
            json!({"source": source, "refresh": true, "table": "regions"}),
        )
        .await;
        assert_eq!(fresh["cached"], false);
        assert_eq!(fresh["tables"].as_array().unwrap().len(), 1);
    }
    let shown = ctx
        .ok(Method::GET, "/api/v1/data-sources/shop", admin, None, 200)
        .await;
    assert!(shown["catalog_cached_at"].is_string(), "{shown}");

    // SELECT works, the same answer on every engine.
    let expected = vec![
        (
            "east".to_string(),
            (1..=1500).filter(|n| n % 3 == 2).sum::<i64>() as f64,
        ),
        (
            "north".to_string(),
            (1..=1500).filter(|n| n % 3 == 0).sum::<i64>() as f64,
        ),
        (
            "south".to_string(),
            (1..=1500).filter(|n| n % 3 == 1).sum::<i64>() as f64,
        ),
    ];
    for source in servers.iter().copied().chain(["shop"]) {
        assert_eq!(sums(ctx, member, source).await, expected, "{source}");
        // The row cap: the default (1000) and a lower one asked for.
        let all = ok_tool(
            ctx,
            member,
            "run_sql",
            json!({"source": source, "sql": "SELECT id FROM sales ORDER BY id"}),
        )
        .await;
        assert_eq!(
            (&all["row_count"], &all["truncated"], &all["truncated_by"]),
            (&json!(1000), &json!(true), &json!("rows")),
            "{source}"
        );
        let ten = ok_tool(
            ctx,
            member,
            "run_sql",
            json!({"source": source, "sql": "SELECT id FROM sales ORDER BY id", "max_rows": 10}),
        )
        .await;
        assert_eq!(
            (&ten["row_count"], &ten["truncated"]),
            (&json!(10), &json!(true))
        );
        assert_eq!(ten["rows"][9][0], json!(10));
        // Layer one, the parser: writes, DDL, several statements, row locks.
        let mut refused = vec![
            "INSERT INTO regions VALUES (9, 'west')",
            "UPDATE sales SET amount = 0",
            "DELETE FROM sales",
            "DROP TABLE sales",
            "SELECT 1; DROP TABLE sales",
        ];
        if source != "shop" {
            refused.push("SELECT * FROM sales FOR UPDATE");
        }
        for sql in refused {
            let (code, message) = failed_tool(
                ctx,
                member,
                "run_sql",
                json!({"source": source, "sql": sql}),
            )
            .await;
            assert_eq!(code, "refused", "{source} {sql}: {message}");
            assert!(message.contains("read-only"), "{source} {sql}: {message}");
        }
    }
    let shop_rows = ok_tool(
        ctx,
        member,
        "run_sql",
        json!({"source": "shop", "sql": "SELECT count(*) FROM sales"}),
    )
    .await;
    assert_eq!(
        shop_rows["rows"][0][0],
        json!(1500),
        "the SQLite file is untouched"
    );

    // Layer two, the read-only transaction: a function with side effects passes the parser
    // and is refused by the database; nothing changed.
    if let Some(db) = &pg_db {
        for sql in ["SELECT nextval('ticket')", "SELECT touch()"] {
            let (code, message) =
                failed_tool(ctx, member, "run_sql", json!({"source": "pg", "sql": sql})).await;
            assert_eq!(code, "tool_error", "{sql}: {message}");
            assert!(
                message.contains("read-only transaction"),
                "{sql}: {message}"
            );
        }
        assert_eq!(count(db, "SELECT count(*) FROM audit").await, 0);
        assert_eq!(count(db, "SELECT count(*)::bigint FROM sales").await, 1500);
        assert_eq!(
            count(db, "SELECT nextval('ticket')").await,
            1,
            "the sequence never moved"
        );
        // Layer three, the statement timeout.
        let started = std::time::Instant::now();
        let (_, message) = failed_tool(
            ctx,
            member,
            "run_sql",
            json!({"source": "pg", "sql": "SELECT pg_sleep(30)", "timeout_secs": 1}),
        )
        .await;
        assert!(message.contains("longer than 1s"), "{message}");
        assert!(started.elapsed() < std::time::Duration::from_secs(15));
    }
    if let Some(db) = &my_db {
        let (code, message) = failed_tool(
            ctx,
            member,
            "run_sql",
            json!({"source": "maria", "sql": "SELECT touch()"}),
        )
        .await;
        assert_eq!(code, "tool_error", "{message}");
        assert!(message.to_lowercase().contains("read only"), "{message}");
        assert_eq!(count(db, "SELECT count(*) FROM audit").await, 0);
        let started = std::time::Instant::now();
        let (_, message) = failed_tool(
            ctx,
            member,
            "run_sql",
            json!({"source": "maria", "sql": "SELECT SLEEP(30) FROM regions", "timeout_secs": 1}),
        )
        .await;
        assert!(message.contains("longer than 1s"), "{message}");
        assert!(started.elapsed() < std::time::Duration::from_secs(15));
    }
    let started = std::time::Instant::now();
    let (_, message) = failed_tool(
        ctx,
        member,
        "run_sql",
        json!({"source": "shop", "timeout_secs": 1,
               "sql": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"}),
    )
    .await;
    assert!(message.contains("longer than 1s"), "{message}");
    assert!(started.elapsed() < std::time::Duration::from_secs(15));

    // A member without the source's role, and another tenant: as if it did not exist.
    if pg_base.is_some() {
        let (code, message) = failed_tool(
            ctx,
            member,
            "run_sql",
            json!({"source": "pg-secret", "sql": "SELECT 1"}),
        )
        .await;
        assert_eq!(code, "not_found", "{message}");
        let (code, _) = failed_tool(
            ctx,
            member,
            "describe_data_source",
            json!({"source": "pg-secret"}),
        )
        .await;
        assert_eq!(code, "not_found");
        let mine = ok_tool(
            ctx,
            admin,
            "run_sql",
            json!({"source": "pg-secret", "sql": "SELECT 1 AS one"}),
        )
        .await;
        assert_eq!(mine["rows"], json!([[1]]));
    }
    let theirs = ok_tool(ctx, &b.admin.key, "list_data_sources", json!({})).await;
    assert_eq!(theirs["count"], 0, "{theirs}");
    for source in ["shop", "pg", "maria"] {
        let (code, _) = failed_tool(
            ctx,
            &b.admin.key,
            "run_sql",
            json!({"source": source, "sql": "SELECT 1"}),
        )
        .await;
        assert_eq!(code, "not_found", "{source}");
    }
    report_with_charts(ctx, &t).await;
    // The tenant's tool permissions come first, as for every tool: without `data:run_sql` a
    // member runs no SQL, whatever the source allows.
    ctx.ok(
        Method::PATCH,
        &format!("/api/v1/admin/tenants/{}", t.id),
        ADMIN_KEY,
        Some(json!({"tool_permissions": {"member": ["*:*", "!data:run_sql"]}})),
        200,
    )
    .await;
    let r = ctx
        .ok(
            Method::POST,
            "/api/v1/chat",
            member,
            Some(json!({"message": "/tool run_sql {\"source\": \"shop\", \"sql\": \"SELECT 1\"}"})),
            200,
        )
        .await;
    let events = r["events"].to_string();
    assert!(events.contains("permission_denied"), "{events}");
    assert!(!events.contains("\"rows\""), "{events}");
    ok_tool(ctx, member, "list_data_sources", json!({})).await;
}

/// `create_report`: a Markdown report with a table and charts (PNG from a query, SVG from
/// inline rows) lands in the member's workspace, each file announced with a `file_operation`
/// event and served by `GET /files/{path}`; another member cannot fetch it.
async fn report_with_charts(ctx: &Ctx, t: &TenantFx) {
    let member = &t.member.key;
    let args = json!({
        "title": "Sales by region",
        "sections": [
            {"type": "text", "text": "Totals per region."},
            {"type": "table", "title": "Totals", "source": "shop",
             "sql": "SELECT r.name AS region, SUM(s.amount) AS total FROM sales s JOIN regions r ON r.id = s.region_id GROUP BY r.name ORDER BY r.name"},
            {"type": "chart", "title": "Totals", "chart": "bar", "x": "region", "y": ["total"], "source": "shop",
             "sql": "SELECT r.name AS region, SUM(s.amount) AS total FROM sales s JOIN regions r ON r.id = s.region_id GROUP BY r.name ORDER BY r.name"},
            {"type": "chart", "title": "Trend", "chart": "line", "x": "month", "y": ["a", "b"], "image": "svg",
             "columns": ["month", "a", "b"], "rows": [["jan", 1, 2], ["feb", 3, 1], ["mar", 2, 5]]}
        ]
    });
    let (result, events) = tool(ctx, member, "create_report", args.clone()).await;
    assert_eq!(result["status"], "success", "{result}");
    let out = &result["result"];
    assert_eq!(
        out["document"], "reports/sales-by-region/report.md",
        "{out}"
    );
    assert_eq!(out["charts"], 2);
    let written: Vec<&str> = events
        .iter()
        .filter(|e| e["event_type"] == "file_operation")
        .map(|e| e["data"]["file_path"].as_str().unwrap())
        .collect();
    assert_eq!(
        written,
        [
            "reports/sales-by-region/report.md",
            "reports/sales-by-region/chart-1.png",
            "reports/sales-by-region/chart-2.svg"
        ],
        "{events:?}"
    );
    let doc = ctx
        .send(ctx.request(
            Method::GET,
            "/api/v1/files/reports/sales-by-region/report.md",
            Some(member),
        ))
        .await;
    assert_eq!(doc.status, 200);
    assert!(
        doc.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/markdown")
    );
    assert!(
        doc.headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("sandbox")
    );
    let text = doc.body.as_str().unwrap();
    assert!(text.starts_with("# Sales by region"), "{text}");
    assert!(
        text.contains("| east |") && text.contains("![Totals](chart-1.png)"),
        "{text}"
    );
    // The PNG is a real image: the signature, and it decodes to its size.
    let png = ctx
        .request(
            Method::GET,
            "/api/v1/files/reports/sales-by-region/chart-1.png",
            Some(member),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(png.status(), 200);
    assert_eq!(png.headers()["content-type"], "image/png");
    let bytes = png.bytes().await.unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes.to_vec()));
    let mut reader = decoder.read_info().expect("a PNG that decodes");
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((frame.width, frame.height), (960, 540));
    assert!(
        pixels.chunks(3).any(|p| p != [255, 255, 255]),
        "the chart has something drawn on it"
    );
    let svg = ctx
        .send(ctx.request(
            Method::GET,
            "/api/v1/files/reports/sales-by-region/chart-2.svg",
            Some(member),
        ))
        .await;
    assert_eq!(svg.status, 200);
    assert!(svg.body.as_str().unwrap().contains("<svg"), "{}", svg.body);
    // The same title again goes to a new folder: nothing is overwritten.
    let again = ok_tool(ctx, member, "create_report", args).await;
    assert_eq!(again["document"], "reports/sales-by-region-2/report.md");
    // Only the caller's own workspace: another member, the platform key, paths out.
    let r = ctx
        .call(
            Method::GET,
            "/api/v1/files/reports/sales-by-region/report.md",
            Some(&t.member2.key),
            None,
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = ctx
        .call(
            Method::GET,
            "/api/v1/files/reports/sales-by-region/report.md",
            Some(ADMIN_KEY),
            None,
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    let ws = area(ctx, &t.id);
    let r = ctx
        .call(Method::GET, "/api/v1/files/no/such.md", Some(member), None)
        .await;
    assert_eq!(r.status, 404);
    // A bad chart is a clear error, and nothing is written.
    let (code, message) = failed_tool(
        ctx,
        member,
        "create_report",
        json!({"title": "Broken", "sections": [{"type": "chart", "chart": "bar", "x": "nope", "y": ["total"],
               "columns": ["region", "total"], "rows": [["a", 1]]}]}),
    )
    .await;
    assert_eq!(code, "validation_error", "{message}");
    assert!(message.contains("nope"), "{message}");
    assert!(!ws.join(&t.member.user_id).join("reports/broken").exists());
}
