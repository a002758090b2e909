//! The data engine against real PostgreSQL, MariaDB/MySQL and SQLite databases this test makes
//! (the test servers of `AGENTRY_TEST_POSTGRES_URL` / `AGENTRY_TEST_MYSQL_URL`, each in a
//! database of its own): the catalog, SELECTs, the caps and the timeout, and both read-only
//! layers — what the parser refuses, and what the read-only transaction refuses when a
//! statement gets past the parser (a function with side effects; a write sent straight to the
//! second layer).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use agentry_data::catalog;
use agentry_data::exec::{self, Limits};
use agentry_data::source::{NetPolicy, SourceUrl, SystemResolve};
use agentry_data::{DataError, Engine};
use serde_json::json;
use sqlx::{AssertSqlSafe, Connection, Executor};

fn policy(workspaces: std::path::PathBuf, platform: Vec<SocketAddr>) -> NetPolicy {
    NetPolicy {
        // The test databases live on loopback: allowed here, as `tools.allowed_networks` would.
        refusal: Arc::new(|ip: IpAddr| (!ip.is_loopback()).then_some("non-loopback (test rule)")),
        platform_endpoints: platform,
        workspaces,
        resolver: Arc::new(SystemResolve),
    }
}

fn limits() -> Limits {
    Limits {
        max_rows: 50,
        max_bytes: 64 * 1024,
        timeout: Duration::from_millis(1500),
        connect_timeout: Duration::from_secs(10),
    }
}

/// A fresh database `<test db>_data` on the server of `var`, filled by `setup`; its URL.
async fn fresh(var: &str, default: &str, setup: &[&str]) -> Option<String> {
    let base = std::env::var(var).unwrap_or_else(|_| default.to_string());
    let kind = if base.starts_with("postgres") {
        "postgres"
    } else {
        "mysql"
    };
    if std::env::var("AGENTRY_TEST_SKIP_DBS").is_ok_and(|v| v.contains(kind)) {
        return None;
    }
    let (server, name) = base.rsplit_once('/').unwrap();
    let name = format!("{}_data", name.split('?').next().unwrap());
    let admin_url = if base.starts_with("postgres") {
        format!("{server}/postgres")
    } else {
        format!("{server}/mysql")
    };
    let url = format!("{server}/{name}");
    if base.starts_with("postgres") {
        let mut admin = sqlx::PgConnection::connect(&admin_url)
            .await
            .expect(&admin_url);
        admin
            .execute(AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
            )))
            .await
            .unwrap();
        admin
            .execute(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .await
            .unwrap();
        let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
        for s in setup {
            c.execute(AssertSqlSafe(s.to_string())).await.expect(s);
        }
    } else {
        let mut admin = sqlx::MySqlConnection::connect(&admin_url)
            .await
            .expect(&admin_url);
        admin
            .execute(AssertSqlSafe(format!("DROP DATABASE IF EXISTS `{name}`")))
            .await
            .unwrap();
        admin
            .execute(AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
            .await
            .unwrap();
        let mut c = sqlx::MySqlConnection::connect(&url).await.unwrap();
        for s in setup {
            c.execute(sqlx::raw_sql(AssertSqlSafe(s.to_string())))
                .await
                .expect(s);
        }
    }
    Some(url)
}

const PG_SETUP: &[&str] = &[
    "CREATE TABLE customers (id serial PRIMARY KEY, name text NOT NULL, region text)",
    "CREATE TABLE orders (id bigserial PRIMARY KEY, customer_id int NOT NULL REFERENCES customers(id), \
     amount numeric(12,2) NOT NULL, placed_at timestamptz NOT NULL DEFAULT now(), tags text[], meta jsonb)",
    "CREATE VIEW revenue AS SELECT c.region, sum(o.amount) AS total FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.region",
    "INSERT INTO customers (name, region) SELECT 'c' || g, CASE WHEN g % 2 = 0 THEN 'north' ELSE 'south' END FROM generate_series(1, 10) g",
    "INSERT INTO orders (customer_id, amount, tags, meta) SELECT 1 + g % 10, g * 1.5, ARRAY['a', 'b'], '{\"k\": 1}' FROM generate_series(1, 200) g",
    "ANALYZE",
    "CREATE SEQUENCE ticket",
    "CREATE TABLE audit (at timestamptz DEFAULT now())",
    "CREATE FUNCTION touch() RETURNS int LANGUAGE sql AS 'INSERT INTO audit DEFAULT VALUES RETURNING 1'",
];

const MYSQL_SETUP: &[&str] = &[
    "CREATE TABLE customers (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(64) NOT NULL, region VARCHAR(16)) ENGINE=InnoDB",
    "CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer_id INT NOT NULL, amount DECIMAL(12,2) NOT NULL, \
     placed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), FOREIGN KEY (customer_id) REFERENCES customers(id)) ENGINE=InnoDB",
    "INSERT INTO customers (name, region) VALUES ('c1','south'),('c2','north'),('c3','south'),('c4','north')",
    "INSERT INTO orders (customer_id, amount) SELECT 1 + seq % 4, seq * 1.5 FROM seq_1_to_200",
    "ANALYZE TABLE customers, orders",
    "CREATE TABLE audit (at DATETIME(6))",
    "CREATE FUNCTION touch() RETURNS INT MODIFIES SQL DATA BEGIN INSERT INTO audit VALUES (NOW(6)); RETURN 1; END",
];

fn refused_by_parser(e: &DataError) -> bool {
    matches!(e, DataError::Refused(m) if m.contains("run_sql runs one read-only SELECT"))
}

async fn common(url: &SourceUrl, p: &NetPolicy, engine: Engine) {
    let target = url.check(p, "t").await.unwrap();
    let l = limits();
    // SELECT works: columns in order, typed values.
    let out = exec::run_sql(
        &target,
        "SELECT c.region, count(*) AS n, sum(o.amount) AS total FROM orders o \
         JOIN customers c ON c.id = o.customer_id GROUP BY c.region ORDER BY c.region",
        &l,
    )
    .await
    .unwrap();
    let names: Vec<&str> = out.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["region", "n", "total"], "{engine:?}");
    assert_eq!(out.rows.len(), 2);
    assert_eq!(out.rows[0][0], json!("north"));
    let counted: i64 = out.rows.iter().map(|r| r[1].as_i64().unwrap()).sum();
    assert_eq!(counted, 200, "{engine:?}: {:?}", out.rows);
    assert!(!out.truncated);
    // WITH … SELECT and EXPLAIN pass; an empty result still names its columns.
    let none = exec::run_sql(
        &target,
        "WITH big AS (SELECT id, amount FROM orders WHERE amount > 1000000) SELECT id, amount FROM big",
        &l,
    )
    .await
    .unwrap();
    assert_eq!((none.row_count, none.columns.len()), (0, 2), "{engine:?}");
    assert!(
        !exec::run_sql(&target, "EXPLAIN SELECT * FROM orders", &l)
            .await
            .unwrap()
            .rows
            .is_empty()
    );
    // The row cap, then the byte cap.
    let capped = exec::run_sql(&target, "SELECT id FROM orders ORDER BY id", &l)
        .await
        .unwrap();
    assert_eq!(
        (capped.row_count, capped.truncated, capped.truncated_by),
        (50, true, Some("rows"))
    );
    let small = Limits {
        max_bytes: 200,
        ..l
    };
    let bytes = exec::run_sql(&target, "SELECT id, amount FROM orders ORDER BY id", &small)
        .await
        .unwrap();
    assert!(bytes.truncated && bytes.truncated_by == Some("bytes") && bytes.row_count < 50);
    // Layer one: the parser refuses writes, DDL, several statements and row locks.
    for sql in [
        "INSERT INTO customers (name) VALUES ('x')",
        "UPDATE orders SET amount = 0",
        "DELETE FROM orders",
        "DROP TABLE orders",
        "SELECT 1; DROP TABLE orders",
        "SELECT * FROM orders FOR UPDATE",
    ] {
        let e = exec::run_sql(&target, sql, &l).await.unwrap_err();
        assert!(refused_by_parser(&e), "{engine:?} {sql}: {e}");
    }
    // Layer two on its own: a write sent past the parser is refused by the read-only
    // transaction (or the read-only file), and nothing changed.
    let mut conn = exec::connect(&target, &l).await.unwrap();
    for sql in [
        "INSERT INTO customers (name) VALUES ('sneaked')",
        "DELETE FROM orders",
        "UPDATE orders SET amount = 0",
    ] {
        let e = conn.query_read_only(sql, &l).await.unwrap_err();
        let m = e.to_string().to_lowercase();
        assert!(
            matches!(e, DataError::Query(_))
                && (m.contains("read-only") || m.contains("read only") || m.contains("readonly")),
            "{engine:?} {sql}: {e}"
        );
    }
    conn.close().await;
    let still = exec::run_sql(&target, "SELECT count(*) FROM orders", &l)
        .await
        .unwrap();
    assert_eq!(still.rows[0][0].as_i64(), Some(200), "{engine:?}");
    // The catalog: tables, columns, types, keys, estimates.
    let mut conn = exec::connect(&target, &l).await.unwrap();
    let cat = catalog::describe(&mut conn, &l).await.unwrap();
    conn.close().await;
    let orders = cat.tables.iter().find(|t| t.name == "orders").unwrap();
    let cols: Vec<&str> = orders.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        &cols[..4],
        ["id", "customer_id", "amount", "placed_at"],
        "{engine:?}"
    );
    assert_eq!(orders.primary_key, ["id"]);
    assert_eq!(orders.foreign_keys.len(), 1, "{engine:?}: {orders:?}");
    assert_eq!(orders.foreign_keys[0].columns, ["customer_id"]);
    assert!(orders.foreign_keys[0].references.ends_with("customers"));
    assert_eq!(orders.foreign_keys[0].referenced_columns, ["id"]);
    assert!(!orders.columns[2].nullable);
    let amount_type = orders.columns[2].type_name.to_lowercase();
    assert!(
        amount_type.contains("numeric") || amount_type.contains("decimal"),
        "{engine:?}: {amount_type}"
    );
    let estimate = orders.row_estimate.unwrap_or(0);
    assert!(
        (150..=250).contains(&estimate),
        "{engine:?}: estimate {estimate}"
    );
    assert!(cat.tables.iter().any(|t| t.name == "customers"));
}

#[tokio::test]
async fn postgres_source() {
    let Some(url) = fresh(
        "AGENTRY_TEST_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:5432/agentry_test",
        PG_SETUP,
    )
    .await
    else {
        return;
    };
    let p = policy(std::env::temp_dir(), vec![]);
    let src = SourceUrl::parse(&url).unwrap();
    common(&src, &p, Engine::Postgres).await;
    let target = src.check(&p, "t").await.unwrap();
    let l = limits();
    // Types come back as JSON: numeric exactly, arrays, jsonb, timestamps.
    let out = exec::run_sql(
        &target,
        "SELECT amount, tags, meta, placed_at, id FROM orders ORDER BY id LIMIT 1",
        &l,
    )
    .await
    .unwrap();
    assert_eq!(out.rows[0][0], json!(1.5));
    assert_eq!(out.rows[0][1], json!(["a", "b"]));
    assert_eq!(out.rows[0][2], json!({"k": 1}));
    assert!(out.rows[0][3].as_str().unwrap().contains('T'));
    // The view is in the catalog as a view.
    let mut conn = exec::connect(&target, &l).await.unwrap();
    let cat = catalog::describe(&mut conn, &l).await.unwrap();
    conn.close().await;
    assert!(
        cat.tables
            .iter()
            .any(|t| t.name == "revenue" && t.kind == "view")
    );
    // Past the parser, a function with side effects: refused by the read-only transaction.
    for sql in ["SELECT nextval('ticket')", "SELECT touch()"] {
        assert!(agentry_data::guard::check(sql, Engine::Postgres).is_ok());
        let e = exec::run_sql(&target, sql, &l).await.unwrap_err();
        assert!(
            e.to_string().contains("read-only transaction"),
            "{sql}: {e}"
        );
    }
    let audit = exec::run_sql(&target, "SELECT count(*) FROM audit", &l)
        .await
        .unwrap();
    assert_eq!(audit.rows[0][0], json!(0));
    // The timeout stops a long statement.
    let started = std::time::Instant::now();
    let e = exec::run_sql(&target, "SELECT pg_sleep(30)", &l)
        .await
        .unwrap_err();
    assert!(matches!(e, DataError::Timeout(_)), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // The platform's own database server is refused, whatever database the URL names.
    let platform: SocketAddr = "127.0.0.1:5432".parse().unwrap();
    let p2 = policy(std::env::temp_dir(), vec![platform]);
    let e = src.check(&p2, "t").await.unwrap_err();
    assert!(e.to_string().contains("platform's own service"), "{e}");
}

#[tokio::test]
async fn mysql_source() {
    let Some(url) = fresh(
        "AGENTRY_TEST_MYSQL_URL",
        "mysql://root@127.0.0.1:3306/agentry_test",
        MYSQL_SETUP,
    )
    .await
    else {
        return;
    };
    let p = policy(std::env::temp_dir(), vec![]);
    let src = SourceUrl::parse(&url.replacen("mysql://", "mariadb://", 1)).unwrap();
    common(&src, &p, Engine::Mysql).await;
    let target = src.check(&p, "t").await.unwrap();
    let l = limits();
    let out = exec::run_sql(
        &target,
        "SELECT amount, placed_at FROM orders ORDER BY id LIMIT 1",
        &l,
    )
    .await
    .unwrap();
    assert_eq!(out.rows[0][0], json!(1.5));
    // Past the parser, a function that writes: refused by the read-only transaction.
    assert!(agentry_data::guard::check("SELECT touch()", Engine::Mysql).is_ok());
    let e = exec::run_sql(&target, "SELECT touch()", &l)
        .await
        .unwrap_err();
    assert!(e.to_string().to_lowercase().contains("read only"), "{e}");
    let audit = exec::run_sql(&target, "SELECT count(*) FROM audit", &l)
        .await
        .unwrap();
    assert_eq!(audit.rows[0][0], json!(0));
    let started = std::time::Instant::now();
    let e = exec::run_sql(&target, "SELECT SLEEP(30) FROM customers", &l)
        .await
        .unwrap_err();
    assert!(matches!(e, DataError::Timeout(_)), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn sqlite_source() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("workspaces");
    let area = ws.join("t").join("u");
    std::fs::create_dir_all(&area).unwrap();
    let file = area.join("shop.db");
    {
        let mut c =
            sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", file.display()))
                .await
                .unwrap();
        for s in [
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, region TEXT)",
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), \
             amount NUMERIC(12,2) NOT NULL, placed_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
            "INSERT INTO customers (name, region) VALUES ('c1','south'),('c2','north'),('c3','south'),('c4','north')",
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 200) \
             INSERT INTO orders (customer_id, amount) SELECT 1 + n % 4, n * 1.5 FROM g",
        ] {
            c.execute(s).await.expect(s);
        }
        c.close().await.unwrap();
    }
    let p = policy(ws.clone(), vec![]);
    let src = SourceUrl::parse("sqlite:u/shop.db").unwrap();
    common(&src, &p, Engine::Sqlite).await;
    let target = src.check(&p, "t").await.unwrap();
    // The timeout interrupts a runaway statement.
    let started = std::time::Instant::now();
    let e = exec::run_sql(
        &target,
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
        &limits(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, DataError::Timeout(_)), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // Another tenant's file, or the same file named from another tenant, is not there.
    let e = SourceUrl::parse("sqlite:u/shop.db")
        .unwrap()
        .check(&p, "other")
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("tenant's area") || e.to_string().contains("no SQLite file"),
        "{e}"
    );
    let e = SourceUrl::parse(&format!("sqlite:{}", file.display()))
        .unwrap()
        .check(&p, "other")
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("inside the tenant's own area"),
        "{e}"
    );
}
