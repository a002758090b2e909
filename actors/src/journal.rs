//! The local journal of unrecorded run ends: a run whose end could not be written to the
//! database within the retry bound (see `SessionActor::end_run`) is appended here, fsynced,
//! before its last events are sent. The next start writes every entry to the database before
//! anything else numbers events or resumes runs, so the run is never run again and every `seq`
//! a client saw keeps its meaning. One JSON object per line: `{tenant_id, end}`.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use agentry_schema::ids::TenantId;
use agentry_store::executions::RunEnd;
use serde::{Deserialize, Serialize};

/// Appends from session actors on different threads go one at a time.
static APPEND: Mutex<()> = Mutex::new(());

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub tenant_id: TenantId,
    pub end: RunEnd,
}

pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join("unrecorded-runs.jsonl")
}

/// Append one run end and sync it to disk.
pub fn append(data_dir: &Path, tenant_id: TenantId, end: &RunEnd) -> std::io::Result<()> {
    let mut line = serde_json::to_string(&Entry {
        tenant_id,
        end: end.clone(),
    })
    .map_err(std::io::Error::other)?;
    line.push('\n');
    let _one = APPEND.lock().unwrap_or_else(|p| p.into_inner());
    std::fs::create_dir_all(data_dir)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path(data_dir))?;
    f.write_all(line.as_bytes())?;
    f.sync_data()
}

/// Every entry (a line that does not parse, e.g. one cut short by a crash mid-write, is
/// skipped with a warning: its run was never told to anyone as ended).
pub fn read(data_dir: &Path) -> std::io::Result<Vec<Entry>> {
    let f = match std::fs::File::open(path(data_dir)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for line in std::io::BufReader::new(f).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Entry>(&line) {
            Ok(e) => out.push(e),
            Err(e) => {
                tracing::warn!(error = %e, "skipping an unreadable line of the journal of unrecorded runs")
            }
        }
    }
    Ok(out)
}

/// Remove the journal once every entry is in the database.
pub fn clear(data_dir: &Path) -> std::io::Result<()> {
    let _one = APPEND.lock().unwrap_or_else(|p| p.into_inner());
    match std::fs::remove_file(path(data_dir)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
