//! A data source's catalog (`describe_data_source`): its tables and views with their columns,
//! types, nullability, primary and foreign keys, and a row estimate — read from the database's
//! own catalog (PostgreSQL `pg_catalog`, MySQL/MariaDB `information_schema` of the URL's
//! database, SQLite `sqlite_master` and its `pragma_*` functions), in the same read-only
//! transaction and under the same timeout as any query.
//!
//! Row estimates: PostgreSQL's planner statistics (`reltuples`; none for a table never
//! analyzed), MySQL's `TABLE_ROWS` (an estimate for InnoDB), SQLite's exact `COUNT(*)` for the
//! first [`SQLITE_COUNTED`] tables (it has no statistics to read).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Result;
use crate::exec::{Conn, Limits};
use crate::source::Engine;

/// At most this many tables are described; more are left out with `truncated`.
pub const MAX_TABLES: usize = 500;
/// SQLite tables whose rows are counted.
pub const SQLITE_COUNTED: usize = 100;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    pub engine: Engine,
    pub tables: Vec<Table>,
    /// More tables exist than [`MAX_TABLES`].
    pub truncated: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Table {
    /// The schema (PostgreSQL) or database (MySQL); none in SQLite.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    pub name: String,
    /// `table` or `view`.
    pub kind: String,
    pub row_estimate: Option<i64>,
    pub columns: Vec<CatalogColumn>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub primary_key: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub foreign_keys: Vec<ForeignKey>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogColumn {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub nullable: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForeignKey {
    pub columns: Vec<String>,
    /// The referenced table (`schema.table` where there are schemas).
    pub references: String,
    pub referenced_columns: Vec<String>,
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn i(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_i64() != Some(0),
        Value::String(s) => matches!(s.to_ascii_uppercase().as_str(), "YES" | "TRUE" | "1"),
        _ => false,
    }
}

fn list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(s).collect())
        .unwrap_or_default()
}

type Key = (Option<String>, String);

/// The table `key`, made on first sight (in order); `None` once [`MAX_TABLES`] are taken.
fn entry<'a>(
    tables: &'a mut BTreeMap<Key, Table>,
    order: &mut Vec<Key>,
    key: Key,
    kind: &str,
    estimate: Option<i64>,
) -> Option<&'a mut Table> {
    if !tables.contains_key(&key) {
        if tables.len() >= MAX_TABLES {
            return None;
        }
        order.push(key.clone());
        tables.insert(
            key.clone(),
            Table {
                schema: key.0.clone(),
                name: key.1.clone(),
                kind: kind.to_string(),
                row_estimate: estimate,
                columns: Vec::new(),
                primary_key: Vec::new(),
                foreign_keys: Vec::new(),
            },
        );
    }
    tables.get_mut(&key)
}

const PG_COLUMNS: &str = "SELECT n.nspname::text, c.relname::text, c.relkind::text, a.attname::text, \
     format_type(a.atttypid, a.atttypmod), NOT a.attnotnull, c.reltuples::float8 \
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
     JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
     WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') \
       AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%' \
     ORDER BY n.nspname, c.relname, a.attnum";

const PG_KEYS: &str = "SELECT n.nspname::text, c.relname::text, con.contype::text, \
     ARRAY(SELECT a.attname::text FROM unnest(con.conkey) WITH ORDINALITY k(num, ord) \
           JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.num ORDER BY k.ord), \
     fn.nspname::text, fc.relname::text, \
     ARRAY(SELECT a.attname::text FROM unnest(con.confkey) WITH ORDINALITY k(num, ord) \
           JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.num ORDER BY k.ord) \
     FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid \
     JOIN pg_namespace n ON n.oid = c.relnamespace \
     LEFT JOIN pg_class fc ON fc.oid = con.confrelid LEFT JOIN pg_namespace fn ON fn.oid = fc.relnamespace \
     WHERE con.contype IN ('p', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
     ORDER BY n.nspname, c.relname, con.conname";

const MYSQL_COLUMNS: &str = "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, t.TABLE_TYPE, c.COLUMN_NAME, \
     c.COLUMN_TYPE, c.IS_NULLABLE, t.TABLE_ROWS \
     FROM information_schema.COLUMNS c JOIN information_schema.TABLES t \
       ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME \
     WHERE c.TABLE_SCHEMA = DATABASE() ORDER BY c.TABLE_NAME, c.ORDINAL_POSITION";

const MYSQL_KEYS: &str = "SELECT k.TABLE_SCHEMA, k.TABLE_NAME, k.CONSTRAINT_NAME, k.COLUMN_NAME, \
     k.REFERENCED_TABLE_SCHEMA, k.REFERENCED_TABLE_NAME, k.REFERENCED_COLUMN_NAME \
     FROM information_schema.KEY_COLUMN_USAGE k \
     WHERE k.TABLE_SCHEMA = DATABASE() \
       AND (k.CONSTRAINT_NAME = 'PRIMARY' OR k.REFERENCED_TABLE_NAME IS NOT NULL) \
     ORDER BY k.TABLE_NAME, k.CONSTRAINT_NAME, k.ORDINAL_POSITION";

const SQLITE_COLUMNS: &str = "SELECT m.name, m.type, p.name, p.type, p.\"notnull\", p.pk \
     FROM sqlite_master m JOIN pragma_table_info(m.name) p \
     WHERE m.type IN ('table', 'view') AND m.name NOT LIKE 'sqlite_%' \
     ORDER BY m.name, p.cid";

const SQLITE_KEYS: &str = "SELECT m.name, f.id, f.\"from\", f.\"table\", f.\"to\" \
     FROM sqlite_master m JOIN pragma_foreign_key_list(m.name) f \
     WHERE m.type = 'table' ORDER BY m.name, f.id, f.seq";

/// Read the catalog over an open connection.
pub async fn describe(conn: &mut Conn, limits: &Limits) -> Result<Catalog> {
    let engine = conn.engine();
    let big = Limits {
        max_rows: 200_000,
        max_bytes: 64 * 1024 * 1024,
        ..*limits
    };
    let mut tables: BTreeMap<Key, Table> = BTreeMap::new();
    let mut order: Vec<Key> = Vec::new();
    let mut truncated = false;
    match engine {
        Engine::Postgres => {
            let cols = conn.query_read_only(PG_COLUMNS, &big).await?;
            for r in &cols.rows {
                let kind = if matches!(s(&r[2]).as_str(), "v" | "m") {
                    "view"
                } else {
                    "table"
                };
                let estimate = i(&r[6]).filter(|n| *n >= 0 && kind == "table");
                let Some(t) = entry(
                    &mut tables,
                    &mut order,
                    (Some(s(&r[0])), s(&r[1])),
                    kind,
                    estimate,
                ) else {
                    truncated = true;
                    continue;
                };
                {
                    t.columns.push(CatalogColumn {
                        name: s(&r[3]),
                        type_name: s(&r[4]),
                        nullable: truthy(&r[5]),
                    });
                }
            }
            let keys = conn.query_read_only(PG_KEYS, &big).await?;
            for r in &keys.rows {
                let Some(t) = tables.get_mut(&(Some(s(&r[0])), s(&r[1]))) else {
                    continue;
                };
                if s(&r[2]) == "p" {
                    t.primary_key = list(&r[3]);
                } else {
                    t.foreign_keys.push(ForeignKey {
                        columns: list(&r[3]),
                        references: format!("{}.{}", s(&r[4]), s(&r[5])),
                        referenced_columns: list(&r[6]),
                    });
                }
            }
        }
        Engine::Mysql => {
            let cols = conn.query_read_only(MYSQL_COLUMNS, &big).await?;
            for r in &cols.rows {
                let kind = if s(&r[2]).contains("VIEW") {
                    "view"
                } else {
                    "table"
                };
                let estimate = i(&r[6]).filter(|_| kind == "table");
                let Some(t) = entry(
                    &mut tables,
                    &mut order,
                    (Some(s(&r[0])), s(&r[1])),
                    kind,
                    estimate,
                ) else {
                    truncated = true;
                    continue;
                };
                {
                    t.columns.push(CatalogColumn {
                        name: s(&r[3]),
                        type_name: s(&r[4]),
                        nullable: truthy(&r[5]),
                    });
                }
            }
            let keys = conn.query_read_only(MYSQL_KEYS, &big).await?;
            let mut fks: BTreeMap<(Key, String), ForeignKey> = BTreeMap::new();
            for r in &keys.rows {
                let key = (Some(s(&r[0])), s(&r[1]));
                let constraint = s(&r[2]);
                if constraint == "PRIMARY" {
                    if let Some(t) = tables.get_mut(&key) {
                        t.primary_key.push(s(&r[3]));
                    }
                } else {
                    let fk = fks.entry((key, constraint)).or_insert_with(|| ForeignKey {
                        columns: Vec::new(),
                        references: format!("{}.{}", s(&r[4]), s(&r[5])),
                        referenced_columns: Vec::new(),
                    });
                    fk.columns.push(s(&r[3]));
                    fk.referenced_columns.push(s(&r[6]));
                }
            }
            for ((key, _), fk) in fks {
                if let Some(t) = tables.get_mut(&key) {
                    t.foreign_keys.push(fk);
                }
            }
        }
        Engine::Sqlite => {
            let cols = conn.query_read_only(SQLITE_COLUMNS, &big).await?;
            for r in &cols.rows {
                let kind = if s(&r[1]) == "view" { "view" } else { "table" };
                let Some(t) = entry(&mut tables, &mut order, (None, s(&r[0])), kind, None) else {
                    truncated = true;
                    continue;
                };
                {
                    t.columns.push(CatalogColumn {
                        name: s(&r[2]),
                        type_name: s(&r[3]),
                        nullable: !truthy(&r[4]),
                    });
                    if i(&r[5]).unwrap_or(0) > 0 {
                        t.primary_key.push(s(&r[2]));
                    }
                }
            }
            let keys = conn.query_read_only(SQLITE_KEYS, &big).await?;
            let mut fks: BTreeMap<(String, i64), ForeignKey> = BTreeMap::new();
            for r in &keys.rows {
                let fk = fks
                    .entry((s(&r[0]), i(&r[1]).unwrap_or(0)))
                    .or_insert_with(|| ForeignKey {
                        columns: Vec::new(),
                        references: s(&r[3]),
                        referenced_columns: Vec::new(),
                    });
                fk.columns.push(s(&r[2]));
                fk.referenced_columns.push(s(&r[4]));
            }
            for ((table, _), fk) in fks {
                if let Some(t) = tables.get_mut(&(None, table)) {
                    t.foreign_keys.push(fk);
                }
            }
            for key in order.iter().take(SQLITE_COUNTED) {
                if tables.get(key).is_none_or(|t| t.kind != "table") {
                    continue;
                }
                let sql = format!("SELECT COUNT(*) FROM \"{}\"", key.1.replace('"', "\"\""));
                if let Ok(out) = conn.query_read_only(&sql, limits).await
                    && let Some(t) = tables.get_mut(key)
                {
                    t.row_estimate = out.rows.first().and_then(|r| r.first()).and_then(i);
                }
            }
        }
    }
    let tables = order
        .into_iter()
        .filter_map(|k| tables.remove(&k))
        .collect();
    Ok(Catalog {
        engine,
        tables,
        truncated,
    })
}
