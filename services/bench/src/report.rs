//! What a scenario measured, as a JSON file per run, and the table of the latest figures in
//! `docs/benchmarks.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One scenario's run on one database.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub scenario: String,
    /// `runs` at two model latencies are two variants: the table keeps both.
    pub variant: String,
    pub database: String,
    pub started_at: String,
    pub duration_secs: f64,
    pub commit: String,
    pub machine: Value,
    pub agentry: Value,
    pub parameters: Value,
    pub figures: Value,
    /// One line for the table.
    pub headline: String,
    pub errors: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

impl Record {
    /// Write the record as `<dir>/<started_at>-<variant>-<database>.json`; its path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let stamp = self.started_at.replace([':', '-'], "");
        let path = dir.join(format!("{stamp}-{}-{}.json", self.variant, self.database));
        let text = serde_json::to_string_pretty(self).context("encoding the record")?;
        std::fs::write(&path, text + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

/// The newest record of each (variant, database) in `dir`.
pub fn latest(dir: &Path) -> Result<Vec<Record>> {
    let mut newest: BTreeMap<(String, String), Record> = BTreeMap::new();
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        let record: Record = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a benchmark record", path.display()))?;
        let key = (record.variant.clone(), record.database.clone());
        if newest
            .get(&key)
            .is_none_or(|old| old.started_at < record.started_at)
        {
            newest.insert(key, record);
        }
    }
    let mut records: Vec<Record> = newest.into_values().collect();
    records.sort_by_key(|r| (variant_order(&r.variant), r.database.clone()));
    Ok(records)
}

fn variant_order(variant: &str) -> (usize, String) {
    let order = [
        "runs-0ms",
        "runs-50ms",
        "stream",
        "cancel",
        "hitl",
        "idle",
        "openai",
        "openai-stream",
        "responses",
        "responses-stream",
        "soak",
        "memory-search",
        "cluster-cpu",
        "cluster-runs-1r",
        "cluster-runs-3r",
        "cluster-cancel",
        "cluster-hitl",
        "takeover",
    ];
    (
        order
            .iter()
            .position(|v| *v == variant)
            .unwrap_or(order.len()),
        variant.to_string(),
    )
}

pub const BEGIN: &str = "<!-- bench:begin (written by `agentry-bench report`; edit outside) -->";
pub const END: &str = "<!-- bench:end -->";

/// The markdown table of `records`.
pub fn table(records: &[Record]) -> String {
    let mut out = String::from(
        "| scenario | database | result | parameters | measured |\n|---|---|---|---|---|\n",
    );
    for r in records {
        let params = match &r.parameters {
            Value::Object(map) => map
                .iter()
                .map(|(k, v)| format!("{k}={}", compact(v)))
                .collect::<Vec<_>>()
                .join(", "),
            other => compact(other),
        };
        let errors = if r.errors > 0 {
            format!(" **{} errors**", r.errors)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "| {} | {} | {}{} | {} | {} {} |\n",
            r.variant,
            r.database,
            r.headline,
            errors,
            params,
            &r.started_at[..r.started_at.len().min(10)],
            &r.commit[..r.commit.len().min(10)],
        ));
    }
    out
}

fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}:{}", compact(v)))
            .collect::<Vec<_>>()
            .join("/"),
        other => other.to_string(),
    }
}

/// Replace the table between the markers of `doc` with the latest records of `dir`.
pub fn update_doc(doc: &Path, dir: &Path) -> Result<usize> {
    let records = latest(dir)?;
    if records.is_empty() {
        bail!("no benchmark records in {}", dir.display());
    }
    let text =
        std::fs::read_to_string(doc).with_context(|| format!("reading {}", doc.display()))?;
    let (Some(start), Some(end)) = (text.find(BEGIN), text.find(END)) else {
        bail!(
            "{} has no `{BEGIN}` … `{END}` markers to write the table between",
            doc.display()
        );
    };
    if end < start {
        bail!(
            "{}: the end marker comes before the begin marker",
            doc.display()
        );
    }
    let updated = format!(
        "{}{BEGIN}\n{}{}",
        &text[..start],
        table(&records),
        &text[end..]
    );
    std::fs::write(doc, updated).with_context(|| format!("writing {}", doc.display()))?;
    Ok(records.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(variant: &str, database: &str, started_at: &str, headline: &str) -> Record {
        Record {
            scenario: variant.split('-').next().unwrap_or(variant).into(),
            variant: variant.into(),
            database: database.into(),
            started_at: started_at.into(),
            duration_secs: 1.0,
            commit: "0123456789abcdef".into(),
            machine: json!({}),
            agentry: json!({}),
            parameters: json!({"clients": 4}),
            figures: json!({}),
            headline: headline.into(),
            errors: 0,
            first_error: None,
        }
    }

    #[test]
    fn the_doc_gets_the_newest_record_of_each_variant_and_database() {
        let dir = tempfile::tempdir().unwrap();
        record("runs-0ms", "sqlite", "2026-01-01T00:00:00Z", "old")
            .write(dir.path())
            .unwrap();
        record("runs-0ms", "sqlite", "2026-01-02T00:00:00Z", "new")
            .write(dir.path())
            .unwrap();
        record("cancel", "postgres", "2026-01-01T00:00:00Z", "cancel-pg")
            .write(dir.path())
            .unwrap();
        let doc = dir.path().join("bench.md");
        std::fs::write(&doc, format!("# Title\n\n{BEGIN}\nstale\n{END}\n\nnotes\n")).unwrap();
        assert_eq!(update_doc(&doc, dir.path()).unwrap(), 2);
        let text = std::fs::read_to_string(&doc).unwrap();
        assert!(text.starts_with("# Title\n\n"));
        assert!(text.ends_with(&format!("{END}\n\nnotes\n")));
        assert!(!text.contains("stale") && !text.contains("| old"));
        let runs = text.find("| runs-0ms | sqlite | new |").expect("runs row");
        let cancel = text
            .find("| cancel | postgres | cancel-pg |")
            .expect("cancel row");
        assert!(runs < cancel, "rows follow the scenario order");
        assert!(text.contains("clients=4"));
    }

    #[test]
    fn a_doc_without_markers_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        record("idle", "sqlite", "2026-01-01T00:00:00Z", "x")
            .write(dir.path())
            .unwrap();
        let doc = dir.path().join("bench.md");
        std::fs::write(&doc, "no markers").unwrap();
        let err = update_doc(&doc, dir.path()).unwrap_err().to_string();
        assert!(err.contains("markers"), "{err}");
        assert_eq!(std::fs::read_to_string(&doc).unwrap(), "no markers");
    }
}
