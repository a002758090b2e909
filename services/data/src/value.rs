//! Database values as JSON, per engine, by the column's (or, in SQLite, the value's) type.
//!
//! Numbers stay numbers; `NUMERIC`/`DECIMAL` too when a double holds them exactly, else they
//! are strings (so a total of money is never silently rounded); dates and times are ISO 8601
//! strings; JSON columns are JSON; binary values are `\x` followed by hex (the first 64 bytes,
//! then `…`). A type this list does not know becomes the string `<unsupported type NAME>`.

use rust_decimal::Decimal;
use serde_json::{Value, json};
use sqlx::{Column, Row, TypeInfo, ValueRef};

fn decimal(d: Decimal) -> Value {
    let s = d.normalize().to_string();
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && format_f64(f) == s => json!(f),
        _ => Value::String(s),
    }
}

fn format_f64(f: f64) -> String {
    let s = f.to_string();
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

fn bytes(b: &[u8]) -> Value {
    let mut s = String::from("\\x");
    for byte in b.iter().take(64) {
        s.push_str(&format!("{byte:02x}"));
    }
    if b.len() > 64 {
        s.push('…');
    }
    Value::String(s)
}

fn unsupported(name: &str) -> Value {
    Value::String(format!("<unsupported type {name}>"))
}

macro_rules! get {
    ($row:expr, $i:expr, $t:ty, $f:expr) => {
        match $row.try_get::<Option<$t>, _>($i) {
            Ok(Some(v)) => Some(($f)(v)),
            Ok(None) => Some(Value::Null),
            Err(_) => None,
        }
    };
}

pub(crate) fn pg(row: &sqlx::postgres::PgRow, i: usize) -> Value {
    use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Utc};
    if row.try_get_raw(i).map(|v| v.is_null()).unwrap_or(false) {
        return Value::Null;
    }
    let name = row.column(i).type_info().name().to_string();
    let v = match name.as_str() {
        "BOOL" => get!(row, i, bool, |v| json!(v)),
        "INT2" => get!(row, i, i16, |v| json!(v)),
        "INT4" => get!(row, i, i32, |v| json!(v)),
        "INT8" => get!(row, i, i64, |v| json!(v)),
        "OID" => get!(
            row,
            i,
            sqlx::postgres::types::Oid,
            |v: sqlx::postgres::types::Oid| json!(v.0)
        ),
        "FLOAT4" => get!(row, i, f32, |v| json!(v)),
        "FLOAT8" => get!(row, i, f64, |v| json!(v)),
        "NUMERIC" => get!(row, i, Decimal, decimal),
        "UUID" => get!(row, i, uuid::Uuid, |v: uuid::Uuid| json!(v.to_string())),
        "DATE" => get!(row, i, NaiveDate, |v: NaiveDate| json!(v.to_string())),
        "TIME" => get!(row, i, NaiveTime, |v: NaiveTime| json!(v.to_string())),
        "TIMESTAMP" => get!(row, i, NaiveDateTime, |v: NaiveDateTime| json!(
            v.to_string()
        )),
        "TIMESTAMPTZ" => get!(row, i, DateTime<Utc>, |v: DateTime<Utc>| json!(
            v.to_rfc3339()
        )),
        "JSON" | "JSONB" => get!(row, i, Value, |v| v),
        "BYTEA" => get!(row, i, Vec<u8>, |v: Vec<u8>| bytes(&v)),
        "INTERVAL" => get!(
            row,
            i,
            sqlx::postgres::types::PgInterval,
            |v: sqlx::postgres::types::PgInterval| json!(format!(
                "{} months {} days {} µs",
                v.months, v.days, v.microseconds
            ))
        ),
        "INT2[]" => get!(row, i, Vec<i16>, |v| json!(v)),
        "INT4[]" => get!(row, i, Vec<i32>, |v| json!(v)),
        "INT8[]" => get!(row, i, Vec<i64>, |v| json!(v)),
        "FLOAT8[]" => get!(row, i, Vec<f64>, |v| json!(v)),
        "BOOL[]" => get!(row, i, Vec<bool>, |v| json!(v)),
        "TEXT[]" | "VARCHAR[]" | "NAME[]" => get!(row, i, Vec<String>, |v| json!(v)),
        _ => None,
    };
    // Text types, and user-defined enums (sent as their label).
    v.or_else(|| get!(row, i, String, Value::String))
        .or_else(|| match row.try_get_unchecked::<Option<String>, _>(i) {
            Ok(Some(s)) if name.chars().all(|c| c.is_ascii_lowercase() || c == '_') => {
                Some(Value::String(s))
            }
            _ => None,
        })
        .unwrap_or_else(|| unsupported(&name))
}

pub(crate) fn mysql(row: &sqlx::mysql::MySqlRow, i: usize) -> Value {
    use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Utc};
    if row.try_get_raw(i).map(|v| v.is_null()).unwrap_or(false) {
        return Value::Null;
    }
    let name = row.column(i).type_info().name().to_string();
    let v = match name.as_str() {
        "BOOLEAN" => get!(row, i, bool, |v| json!(v)),
        "TINYINT" => get!(row, i, i8, |v| json!(v)),
        "SMALLINT" => get!(row, i, i16, |v| json!(v)),
        "MEDIUMINT" | "INT" => get!(row, i, i32, |v| json!(v)),
        "BIGINT" => get!(row, i, i64, |v| json!(v)),
        "TINYINT UNSIGNED" => get!(row, i, u8, |v| json!(v)),
        "SMALLINT UNSIGNED" => get!(row, i, u16, |v| json!(v)),
        "MEDIUMINT UNSIGNED" | "INT UNSIGNED" => get!(row, i, u32, |v| json!(v)),
        "BIGINT UNSIGNED" => get!(row, i, u64, |v| json!(v)),
        "YEAR" => get!(row, i, u16, |v| json!(v)),
        "FLOAT" => get!(row, i, f32, |v| json!(v)),
        "DOUBLE" => get!(row, i, f64, |v| json!(v)),
        "DECIMAL" => get!(row, i, Decimal, decimal),
        "DATE" => get!(row, i, NaiveDate, |v: NaiveDate| json!(v.to_string())),
        "TIME" => get!(row, i, NaiveTime, |v: NaiveTime| json!(v.to_string())),
        "DATETIME" => get!(row, i, NaiveDateTime, |v: NaiveDateTime| json!(
            v.to_string()
        )),
        "TIMESTAMP" => get!(row, i, DateTime<Utc>, |v: DateTime<Utc>| json!(
            v.to_rfc3339()
        )),
        "JSON" => get!(row, i, Value, |v| v),
        "BLOB" | "TINYBLOB" | "MEDIUMBLOB" | "LONGBLOB" | "BINARY" | "VARBINARY" | "BIT"
        | "GEOMETRY" => get!(row, i, Vec<u8>, |v: Vec<u8>| bytes(&v)),
        _ => None,
    };
    v.or_else(|| get!(row, i, String, Value::String))
        .unwrap_or_else(|| unsupported(&name))
}

pub(crate) fn sqlite(row: &sqlx::sqlite::SqliteRow, i: usize) -> Value {
    let Ok(raw) = row.try_get_raw(i) else {
        return Value::Null;
    };
    if raw.is_null() {
        return Value::Null;
    }
    // SQLite types values, not columns.
    let name = raw.type_info().name().to_string();
    let v = match name.as_str() {
        "INTEGER" => get!(row, i, i64, |v| json!(v)),
        "REAL" => get!(row, i, f64, |v| json!(v)),
        "TEXT" => get!(row, i, String, Value::String),
        "BLOB" => get!(row, i, Vec<u8>, |v: Vec<u8>| bytes(&v)),
        _ => None,
    };
    v.unwrap_or_else(|| unsupported(&name))
}
