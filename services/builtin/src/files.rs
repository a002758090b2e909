//! The `files` service: read_file, write_file, edit_file, list_directory, copy_file, glob, grep.
//!
//! Every path goes through the workspace [`Jail`]; writes and copies are checked against the
//! workspace quota under the workspace's write lock and land atomically (temp file + rename).
//! read/write/edit return a `file_operation` event with line metrics and, for changes, a
//! unified diff.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentry_schema::events::{
    EventPayload, FileMetrics, FileOperationData, FileOperationKind, ToolStatus,
};
use async_trait::async_trait;
use cap_std::fs::{Dir, MetadataExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::jail::{Jail, MAX_WALK_DEPTH, display, io_error, write_lock};
use super::{BuiltinConfig, blocking, parse_args};
use agentry_tools::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

const SERVICE: &str = "files";
/// Bytes looked at to decide whether a file is binary.
const BINARY_SNIFF_BYTES: usize = 8192;
/// Lines longer than this are cut in grep results.
const GREP_LINE_MAX_CHARS: usize = 500;
/// After a ranged read, the rest of a file up to this size is still read to count its lines.
const COUNT_LINES_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Old contents bigger than this get no diff (the change is still made).
const DIFF_SOURCE_MAX_BYTES: u64 = 4 * 1024 * 1024;

pub fn tools(cfg: &BuiltinConfig) -> Vec<Arc<dyn Tool>> {
    let cfg = Arc::new(cfg.clone());
    vec![
        Arc::new(ReadFile::new(cfg.clone())),
        Arc::new(WriteFile::new(cfg.clone())),
        Arc::new(EditFile::new(cfg.clone())),
        Arc::new(ListDirectory::new(cfg.clone())),
        Arc::new(CopyFile::new(cfg.clone())),
        Arc::new(Glob::new(cfg.clone())),
        Arc::new(Grep::new(cfg)),
    ]
}

// ---------------------------------------------------------------------------------------------
// helpers

/// Lines in `s` the way an editor counts them: a final line without `\n` still counts.
pub(crate) fn count_lines(s: &[u8]) -> u64 {
    if s.is_empty() {
        return 0;
    }
    let newlines = s.iter().filter(|b| **b == b'\n').count() as u64;
    if s.ends_with(b"\n") {
        newlines
    } else {
        newlines + 1
    }
}

fn looks_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}

/// A unified diff of `old` → `new`, the lines added and removed, cut at `cap` bytes.
pub(crate) fn unified_diff(old: &str, new: &str, path: &str, cap: usize) -> (String, u64, u64) {
    let diff = similar::TextDiff::from_lines(old, new);
    let (mut added, mut removed) = (0u64, 0u64);
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => added += 1,
            similar::ChangeTag::Delete => removed += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    let mut text = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string();
    if super::truncate_utf8(&mut text, cap) {
        text.push_str("\n... diff truncated ...\n");
    }
    (text, added, removed)
}

fn file_event(
    operation: FileOperationKind,
    path: &str,
    metrics: FileMetrics,
    diff: Option<String>,
) -> EventPayload {
    EventPayload::FileOperation(FileOperationData {
        operation,
        file_path: path.to_string(),
        metrics,
        diff,
        status: ToolStatus::Success,
    })
}

/// The existing regular file at `rel`, if any, as (size, permissions). Refuses directories and
/// hard-linked files (their other names may be outside the workspace).
fn existing_file(
    dir: &Dir,
    rel: &Path,
) -> Result<Option<(u64, cap_std::fs::Permissions)>, ToolError> {
    match dir.symlink_metadata(rel) {
        Ok(meta) if meta.is_dir() => Err(ToolError::invalid(format!(
            "{} is a directory",
            display(rel)
        ))),
        Ok(meta) if meta.is_file() => {
            if meta.nlink() > 1 {
                return Err(ToolError::Refused(format!(
                    "{} has other hard links, which may lie outside the workspace; it cannot be changed",
                    display(rel)
                )));
            }
            Ok(Some((meta.len(), meta.permissions())))
        }
        Ok(_) => Err(ToolError::Refused(format!(
            "{} is not a regular file",
            display(rel)
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(rel, e)),
    }
}

/// Write `bytes` to `rel` atomically: a temp file in the same directory, then a rename over
/// the target. Keeps the old file's permissions.
fn write_atomic(
    dir: &Dir,
    rel: &Path,
    bytes: &[u8],
    keep_permissions: Option<cap_std::fs::Permissions>,
) -> Result<(), ToolError> {
    let parent = rel.parent().unwrap_or(Path::new(""));
    if !parent.as_os_str().is_empty() {
        dir.create_dir_all(parent)
            .map_err(|e| io_error(parent, e))?;
    }
    let name = rel
        .file_name()
        .ok_or_else(|| ToolError::invalid("the path names no file"))?;
    let tmp = parent.join(format!(
        ".{}.agentry-{}.tmp",
        name.to_string_lossy(),
        uuid::Uuid::new_v4().simple()
    ));
    let result = (|| {
        dir.write(&tmp, bytes).map_err(|e| io_error(rel, e))?;
        if let Some(perm) = keep_permissions {
            dir.set_permissions(&tmp, perm)
                .map_err(|e| io_error(rel, e))?;
        }
        dir.rename(&tmp, dir, rel).map_err(|e| io_error(rel, e))
    })();
    if result.is_err() {
        let _ = dir.remove_file(&tmp);
    }
    result
}

fn read_all(dir: &Dir, rel: &Path, max: u64) -> Result<Vec<u8>, ToolError> {
    let meta = dir.metadata(rel).map_err(|e| io_error(rel, e))?;
    if meta.is_dir() {
        return Err(ToolError::invalid(format!(
            "{} is a directory",
            display(rel)
        )));
    }
    if meta.len() > max {
        return Err(ToolError::invalid(format!(
            "{} is {} bytes, over the limit of {max} bytes",
            display(rel),
            meta.len()
        )));
    }
    dir.read(rel).map_err(|e| io_error(rel, e))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EntryKind {
    File,
    Directory,
    Symlink,
    Other,
}

impl EntryKind {
    fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Directory => "directory",
            EntryKind::Symlink => "symlink",
            EntryKind::Other => "other",
        }
    }
}

struct WalkEntry {
    /// Relative to the workspace root.
    path: PathBuf,
    /// Relative to the directory the walk started at.
    rel_to_base: PathBuf,
    name: String,
    kind: EntryKind,
    size: u64,
}

/// Walk `base` (workspace-relative) depth-first in name order without following symlinked
/// directories. `visit` returns false to stop.
fn walk(
    root: &Dir,
    base: &Path,
    max_depth: usize,
    include_hidden: bool,
    cancel: &CancellationToken,
    visit: &mut dyn FnMut(WalkEntry) -> bool,
) -> Result<(), ToolError> {
    let start = if base.as_os_str().is_empty() {
        root.open_dir(".")
    } else {
        root.open_dir(base)
    }
    .map_err(|e| io_error(base, e))?;
    let mut walker = Walker {
        max_depth: max_depth.min(MAX_WALK_DEPTH),
        include_hidden,
        cancel,
        visit,
    };
    walker.dir(&start, base, Path::new(""), 0)?;
    Ok(())
}

struct Walker<'a> {
    max_depth: usize,
    include_hidden: bool,
    cancel: &'a CancellationToken,
    visit: &'a mut dyn FnMut(WalkEntry) -> bool,
}

impl Walker<'_> {
    /// Returns false when the visitor asked to stop.
    fn dir(
        &mut self,
        dir: &Dir,
        path: &Path,
        rel_to_base: &Path,
        depth: usize,
    ) -> Result<bool, ToolError> {
        if self.cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        let mut entries = Vec::new();
        for entry in dir.entries().map_err(|e| io_error(path, e))? {
            let entry = entry.map_err(|e| io_error(path, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !self.include_hidden && name.starts_with('.') {
                continue;
            }
            entries.push((name, entry));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, entry) in entries {
            let ft = entry.file_type().map_err(|e| io_error(path, e))?;
            let kind = if ft.is_dir() {
                EntryKind::Directory
            } else if ft.is_file() {
                EntryKind::File
            } else if ft.is_symlink() {
                EntryKind::Symlink
            } else {
                EntryKind::Other
            };
            let size = if kind == EntryKind::File {
                entry.metadata().map(|m| m.len()).unwrap_or(0)
            } else {
                0
            };
            let child_path = path.join(&name);
            let child_rel = rel_to_base.join(&name);
            let go_on = (self.visit)(WalkEntry {
                path: child_path.clone(),
                rel_to_base: child_rel.clone(),
                name,
                kind,
                size,
            });
            if !go_on {
                return Ok(false);
            }
            if kind == EntryKind::Directory && depth + 1 < self.max_depth {
                let sub = entry.open_dir().map_err(|e| io_error(&child_path, e))?;
                if !self.dir(&sub, &child_path, &child_rel, depth + 1)? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

// ---------------------------------------------------------------------------------------------
// read_file

pub struct ReadFile {
    spec: ToolSpec,
    cfg: Arc<BuiltinConfig>,
}

#[derive(Deserialize)]
struct ReadArgs {
    file_path: String,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
}

impl ReadFile {
    fn new(cfg: Arc<BuiltinConfig>) -> Self {
        let spec = ToolSpec::new(
            SERVICE,
            "read_file",
            "Read a text file in the workspace. Returns its exact content. For a large file read a \
             range of lines with offset (first line, 1-based) and limit (number of lines).",
            json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "Path relative to the workspace root"},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to return (1-based)"},
                    "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines to return"}
                },
                "required": ["file_path"]
            }),
        );
        Self { spec, cfg }
    }
}

#[async_trait]
impl Tool for ReadFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: ReadArgs = parse_args("read_file", args)?;
        let workspace = ctx.workspace.clone();
        let max = self.cfg.read_max_bytes;
        blocking(move || {
            let jail = Jail::open(&workspace)?;
            let rel = jail.resolve(&args.file_path)?;
            let shown = display(&rel);
            let meta = jail.dir().metadata(&rel).map_err(|e| io_error(&rel, e))?;
            if meta.is_dir() {
                return Err(ToolError::invalid(format!(
                    "{shown} is a directory; use list_directory"
                )));
            }
            if !meta.is_file() {
                // A FIFO or device would block or never end.
                return Err(ToolError::invalid(format!("{shown} is not a regular file")));
            }
            let ranged = args.offset.is_some() || args.limit.is_some();
            if !ranged && meta.len() > max {
                return Err(ToolError::invalid(format!(
                    "{shown} is {} bytes, over the read limit of {max} bytes; read a range of \
                     lines with offset and limit",
                    meta.len()
                )));
            }
            let file = jail.dir().open(&rel).map_err(|e| io_error(&rel, e))?;
            let mut reader = BufReader::new(file);
            let first = args.offset.unwrap_or(1).max(1);
            let limit = args.limit.unwrap_or(u64::MAX);
            let mut content: Vec<u8> = Vec::new();
            let mut line = Vec::new();
            let (mut line_no, mut returned, mut truncated) = (0u64, 0u64, false);
            let mut counted_all = true;
            loop {
                line.clear();
                let n = reader
                    .read_until(b'\n', &mut line)
                    .map_err(|e| io_error(&rel, e))?;
                if n == 0 {
                    break;
                }
                line_no += 1;
                if line_no == 1 && looks_binary(&line) {
                    return Err(ToolError::failed(format!(
                        "{shown} looks like a binary file; read_file returns text only"
                    )));
                }
                if truncated || returned >= limit {
                    // Done; count the remaining lines only when that is cheap.
                    if meta.len() > COUNT_LINES_MAX_BYTES {
                        counted_all = false;
                        break;
                    }
                    continue;
                }
                if line_no < first {
                    continue;
                }
                if (content.len() + line.len()) as u64 > max {
                    truncated = true;
                    continue;
                }
                content.extend_from_slice(&line);
                returned += 1;
            }
            if looks_binary(&content) {
                return Err(ToolError::failed(format!(
                    "{shown} looks like a binary file; read_file returns text only"
                )));
            }
            let text = String::from_utf8_lossy(&content).into_owned();
            let metrics = FileMetrics {
                lines_read: returned,
                ..FileMetrics::default()
            };
            Ok(ToolOutput::ok(json!({
                "file_path": shown,
                "content": text,
                "start_line": first,
                "lines_read": returned,
                "total_lines": if counted_all { json!(line_no) } else { Value::Null },
                "size_bytes": meta.len(),
                "truncated": truncated,
            }))
            .with_event(file_event(FileOperationKind::Read, &shown, metrics, None)))
        })
        .await
    }
}

// ---------------------------------------------------------------------------------------------
// write_file

pub struct WriteFile {
    spec: ToolSpec,
    cfg: Arc<BuiltinConfig>,
}

#[derive(Deserialize)]
struct WriteArgs {
    file_path: String,
    content: String,
    #[serde(default)]
    append: bool,
}

impl WriteFile {
    fn new(cfg: Arc<BuiltinConfig>) -> Self {
        let spec = ToolSpec::new(
            SERVICE,
            "write_file",
            "Create or overwrite a file in the workspace with the given content (or append to it \
             with append=true). Parent directories are created.",
            json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "Path relative to the workspace root"},
                    "content": {"type": "string"},
                    "append": {"type": "boolean", "default": false}
                },
                "required": ["file_path", "content"]
            }),
        )
        .with_approval(true);
        Self { spec, cfg }
    }
}

#[async_trait]
impl Tool for WriteFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: WriteArgs = parse_args("write_file", args)?;
        let cfg = self.cfg.clone();
        if args.content.len() as u64 > cfg.write_max_bytes {
            return Err(ToolError::invalid(format!(
                "content is {} bytes, over the write limit of {} bytes",
                args.content.len(),
                cfg.write_max_bytes
            )));
        }
        let workspace = ctx.workspace.clone();
        let _guard = write_lock(&workspace.root).await;
        blocking(move || {
            let jail = Jail::open(&workspace)?;
            let rel = jail.resolve(&args.file_path)?;
            if rel.as_os_str().is_empty() {
                return Err(ToolError::invalid(
                    "file_path names the workspace root, not a file",
                ));
            }
            let shown = display(&rel);
            let existing = existing_file(jail.dir(), &rel)?;
            let old: Vec<u8> = match &existing {
                Some((size, _)) if args.append || *size <= DIFF_SOURCE_MAX_BYTES => {
                    jail.dir().read(&rel).map_err(|e| io_error(&rel, e))?
                }
                _ => Vec::new(),
            };
            let new: Vec<u8> = if args.append {
                let mut v = old.clone();
                v.extend_from_slice(args.content.as_bytes());
                v
            } else {
                args.content.into_bytes()
            };
            if new.len() as u64 > cfg.write_max_bytes {
                return Err(ToolError::invalid(format!(
                    "the file would be {} bytes, over the write limit of {} bytes",
                    new.len(),
                    cfg.write_max_bytes
                )));
            }
            let old_size = existing.as_ref().map_or(0, |(size, _)| *size);
            jail.check_quota(old_size, new.len() as u64)?;
            write_atomic(
                jail.dir(),
                &rel,
                &new,
                existing.as_ref().map(|(_, perm)| perm.clone()),
            )?;
            let diffable = existing.is_none() || old_size <= DIFF_SOURCE_MAX_BYTES;
            let (diff, added, removed) = if diffable {
                let (d, a, r) = unified_diff(
                    &String::from_utf8_lossy(&old),
                    &String::from_utf8_lossy(&new),
                    &shown,
                    cfg.diff_max_bytes,
                );
                (Some(d), a, r)
            } else {
                (None, count_lines(&new), 0)
            };
            let lines_written = count_lines(&new);
            let metrics = FileMetrics {
                lines_written,
                lines_added: added,
                lines_removed: removed,
                ..FileMetrics::default()
            };
            Ok(ToolOutput::ok(json!({
                "file_path": shown,
                "bytes_written": new.len(),
                "lines_written": lines_written,
                "created": existing.is_none(),
                "appended": args.append,
            }))
            .with_event(file_event(FileOperationKind::Write, &shown, metrics, diff)))
        })
        .await
    }
}

// ---------------------------------------------------------------------------------------------
// edit_file

pub struct EditFile {
    spec: ToolSpec,
    cfg: Arc<BuiltinConfig>,
}

#[derive(Deserialize)]
struct EditArgs {
    file_path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

impl EditFile {
    fn new(cfg: Arc<BuiltinConfig>) -> Self {
        let spec = ToolSpec::new(
            SERVICE,
            "edit_file",
            "Replace an exact string in a workspace file. old_string must occur exactly once \
             (include surrounding lines to make it unique) unless replace_all is true.",
            json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "Path relative to the workspace root"},
                    "old_string": {"type": "string", "minLength": 1, "description": "Exact text to replace"},
                    "new_string": {"type": "string", "description": "Replacement text"},
                    "replace_all": {"type": "boolean", "default": false}
                },
                "required": ["file_path", "old_string", "new_string"]
            }),
        )
        .with_approval(true);
        Self { spec, cfg }
    }
}

#[async_trait]
impl Tool for EditFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: EditArgs = parse_args("edit_file", args)?;
        if args.old_string.is_empty() {
            return Err(ToolError::invalid("old_string must not be empty"));
        }
        if args.old_string == args.new_string {
            return Err(ToolError::invalid(
                "old_string and new_string are the same; there is nothing to change",
            ));
        }
        let cfg = self.cfg.clone();
        let workspace = ctx.workspace.clone();
        let _guard = write_lock(&workspace.root).await;
        blocking(move || {
            let jail = Jail::open(&workspace)?;
            let rel = jail.resolve(&args.file_path)?;
            let shown = display(&rel);
            let Some((old_size, perm)) = existing_file(jail.dir(), &rel)? else {
                return Err(ToolError::NotFound(format!(
                    "{shown}: no such file; create it with write_file"
                )));
            };
            let old_bytes = read_all(jail.dir(), &rel, cfg.write_max_bytes)?;
            let old = String::from_utf8(old_bytes).map_err(|_| {
                ToolError::failed(format!("{shown} is not UTF-8 text; edit_file cannot change it"))
            })?;
            let count = old.matches(&args.old_string).count();
            if count == 0 {
                return Err(ToolError::InvalidArguments {
                    message: format!(
                        "old_string was not found in {shown}; read the file and copy the text exactly, \
                         including whitespace"
                    ),
                    details: json!({"occurrences": 0}),
                });
            }
            if count > 1 && !args.replace_all {
                return Err(ToolError::InvalidArguments {
                    message: format!(
                        "old_string occurs {count} times in {shown}; include more surrounding text \
                         to make it unique, or set replace_all to true"
                    ),
                    details: json!({"occurrences": count}),
                });
            }
            let new = if args.replace_all {
                old.replace(&args.old_string, &args.new_string)
            } else {
                old.replacen(&args.old_string, &args.new_string, 1)
            };
            if new.len() as u64 > cfg.write_max_bytes {
                return Err(ToolError::invalid(format!(
                    "the file would be {} bytes, over the write limit of {} bytes",
                    new.len(),
                    cfg.write_max_bytes
                )));
            }
            jail.check_quota(old_size, new.len() as u64)?;
            write_atomic(jail.dir(), &rel, new.as_bytes(), Some(perm))?;
            let (diff, added, removed) = unified_diff(&old, &new, &shown, cfg.diff_max_bytes);
            let metrics = FileMetrics {
                lines_written: count_lines(new.as_bytes()),
                lines_added: added,
                lines_removed: removed,
                ..FileMetrics::default()
            };
            Ok(ToolOutput::ok(json!({
                "file_path": shown,
                "replacements": count,
                "lines_added": added,
                "lines_removed": removed,
            }))
            .with_event(file_event(FileOperationKind::Edit, &shown, metrics, Some(diff))))
        })
        .await
    }
}

// ---------------------------------------------------------------------------------------------
// list_directory

pub struct ListDirectory {
    spec: ToolSpec,
    cfg: Arc<BuiltinConfig>,
}

#[derive(Deserialize)]
struct ListArgs {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    include_hidden: bool,
    #[serde(default)]
    recursive: bool,
}

impl ListDirectory {
    fn new(cfg: Arc<BuiltinConfig>) -> Self {
        let spec = ToolSpec::new(
            SERVICE,
            "list_directory",
            "List the entries of a workspace directory (name, type, size). recursive=true lists \
             subdirectories too.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "default": ".", "description": "Directory relative to the workspace root"},
                    "include_hidden": {"type": "boolean", "default": false},
                    "recursive": {"type": "boolean", "default": false}
                }
            }),
        );
        Self { spec, cfg }
    }
}

#[async_trait]
impl Tool for ListDirectory {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: ListArgs = parse_args("list_directory", args)?;
        let workspace = ctx.workspace.clone();
        let cancel = ctx.cancel.clone();
        let max = self.cfg.list_max_entries;
        blocking(move || {
            let jail = Jail::open(&workspace)?;
            let rel = jail.resolve(args.path.as_deref().unwrap_or("."))?;
            let meta = jail
                .dir()
                .metadata(if rel.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    &rel
                })
                .map_err(|e| io_error(&rel, e))?;
            if !meta.is_dir() {
                return Err(ToolError::invalid(format!(
                    "{} is not a directory",
                    display(&rel)
                )));
            }
            let mut entries = Vec::new();
            let mut truncated = false;
            let depth = if args.recursive { MAX_WALK_DEPTH } else { 1 };
            walk(
                jail.dir(),
                &rel,
                depth,
                args.include_hidden,
                &cancel,
                &mut |e| {
                    if entries.len() >= max {
                        truncated = true;
                        return false;
                    }
                    entries.push(json!({
                        "name": e.name,
                        "path": display(&e.path),
                        "type": e.kind.as_str(),
                        "size": e.size,
                    }));
                    true
                },
            )?;
            Ok(ToolOutput::ok(json!({
                "path": display(&rel),
                "entries": entries,
                "count": entries.len(),
                "truncated": truncated,
            })))
        })
        .await
    }
}

// ---------------------------------------------------------------------------------------------
// copy_file

pub struct CopyFile {
    spec: ToolSpec,
}

#[derive(Deserialize)]
struct CopyArgs {
    source_path: String,
    destination_path: String,
    #[serde(default)]
    overwrite: bool,
}

impl CopyFile {
    fn new(_cfg: Arc<BuiltinConfig>) -> Self {
        let spec = ToolSpec::new(
            SERVICE,
            "copy_file",
            "Copy a file within the workspace. An existing destination is replaced only with \
             overwrite=true; a destination directory receives the file under its own name.",
            json!({
                "type": "object",
                "properties": {
                    "source_path": {"type": "string"},
                    "destination_path": {"type": "string"},
                    "overwrite": {"type": "boolean", "default": false}
                },
                "required": ["source_path", "destination_path"]
            }),
        );
        Self { spec }
    }
}

#[async_trait]
impl Tool for CopyFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: CopyArgs = parse_args("copy_file", args)?;
        let workspace = ctx.workspace.clone();
        let _guard = write_lock(&workspace.root).await;
        blocking(move || {
            let jail = Jail::open(&workspace)?;
            let src = jail.resolve(&args.source_path)?;
            let src_meta = jail.dir().metadata(&src).map_err(|e| io_error(&src, e))?;
            if !src_meta.is_file() {
                return Err(ToolError::invalid(format!(
                    "{} is not a regular file; copy_file copies files only",
                    display(&src)
                )));
            }
            let mut dst = jail.resolve(&args.destination_path)?;
            if dst.as_os_str().is_empty() || jail.dir().metadata(&dst).is_ok_and(|m| m.is_dir()) {
                let name = src
                    .file_name()
                    .ok_or_else(|| ToolError::invalid("the source names no file"))?;
                dst = dst.join(name);
            }
            if dst == src {
                return Err(ToolError::invalid(
                    "source and destination are the same file",
                ));
            }
            let existing = existing_file(jail.dir(), &dst)?;
            if existing.is_some() && !args.overwrite {
                return Err(ToolError::failed(format!(
                    "{} already exists; set overwrite to true to replace it",
                    display(&dst)
                )));
            }
            let old_size = existing.as_ref().map_or(0, |(size, _)| *size);
            jail.check_quota(old_size, src_meta.len())?;
            if let Some(parent) = dst.parent().filter(|p| !p.as_os_str().is_empty()) {
                jail.dir()
                    .create_dir_all(parent)
                    .map_err(|e| io_error(parent, e))?;
            }
            // Copy through a temp file + rename, so the quota holds even if the source grows
            // between the check and the copy: the copied size is checked again before it lands.
            let name = dst
                .file_name()
                .ok_or_else(|| ToolError::invalid("the destination names no file"))?;
            let tmp = dst.with_file_name(format!(
                ".{}.agentry-{}.tmp",
                name.to_string_lossy(),
                uuid::Uuid::new_v4().simple()
            ));
            let copied = (|| {
                let mut reader = jail.dir().open(&src).map_err(|e| io_error(&src, e))?;
                let mut writer = jail.dir().create(&tmp).map_err(|e| io_error(&dst, e))?;
                let limit = src_meta.len();
                let n = std::io::copy(&mut (&mut reader).take(limit + 1), &mut writer)
                    .map_err(|e| io_error(&dst, e))?;
                if n > limit {
                    return Err(ToolError::failed(format!(
                        "{} changed size while it was being copied; try again",
                        display(&src)
                    )));
                }
                jail.dir()
                    .set_permissions(&tmp, src_meta.permissions())
                    .map_err(|e| io_error(&dst, e))?;
                jail.dir()
                    .rename(&tmp, jail.dir(), &dst)
                    .map_err(|e| io_error(&dst, e))?;
                Ok(n)
            })();
            let n = match copied {
                Ok(n) => n,
                Err(e) => {
                    let _ = jail.dir().remove_file(&tmp);
                    return Err(e);
                }
            };
            Ok(ToolOutput::ok(json!({
                "source_path": display(&src),
                "destination_path": display(&dst),
                "bytes_copied": n,
                "overwritten": existing.is_some(),
            })))
        })
        .await
    }
}

// ---------------------------------------------------------------------------------------------
// glob

pub struct Glob {
    spec: ToolSpec,
    cfg: Arc<BuiltinConfig>,
}

#[derive(Deserialize)]
struct GlobArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

impl Glob {
    fn new(cfg: Arc<BuiltinConfig>) -> Self {
        let spec = ToolSpec::new(
            SERVICE,
            "glob",
            "Find workspace files whose path (relative to `path`, default the workspace root) \
             matches a glob pattern such as `**/*.rs` or `src/*.{js,ts}`.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "minLength": 1},
                    "path": {"type": "string", "default": "."}
                },
                "required": ["pattern"]
            }),
        );
        Self { spec, cfg }
    }
}

fn compile_glob(pattern: &str) -> Result<globset::GlobMatcher, ToolError> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| ToolError::invalid(format!("invalid glob pattern {pattern:?}: {e}")))
}

#[async_trait]
impl Tool for Glob {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: GlobArgs = parse_args("glob", args)?;
        let matcher = compile_glob(&args.pattern)?;
        let workspace = ctx.workspace.clone();
        let cancel = ctx.cancel.clone();
        let max = self.cfg.glob_max_results;
        blocking(move || {
            let jail = Jail::open(&workspace)?;
            let base = jail.resolve(args.path.as_deref().unwrap_or("."))?;
            let mut matches = Vec::new();
            let mut truncated = false;
            walk(jail.dir(), &base, MAX_WALK_DEPTH, true, &cancel, &mut |e| {
                if e.kind != EntryKind::Directory && matcher.is_match(&e.rel_to_base) {
                    if matches.len() >= max {
                        truncated = true;
                        return false;
                    }
                    matches.push(display(&e.path));
                }
                true
            })?;
            Ok(ToolOutput::ok(json!({
                "pattern": args.pattern,
                "path": display(&base),
                "matches": matches,
                "count": matches.len(),
                "truncated": truncated,
            })))
        })
        .await
    }
}

// ---------------------------------------------------------------------------------------------
// grep

pub struct Grep {
    spec: ToolSpec,
    cfg: Arc<BuiltinConfig>,
}

#[derive(Deserialize)]
struct GrepArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
    #[serde(default)]
    max_results: Option<usize>,
}

impl Grep {
    fn new(cfg: Arc<BuiltinConfig>) -> Self {
        let spec = ToolSpec::new(
            SERVICE,
            "grep",
            "Search workspace files for lines matching a regular expression (Rust regex syntax). \
             `glob` filters files (`*.rs` matches by name at any depth, `src/**/*.rs` by path).",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "minLength": 1},
                    "path": {"type": "string", "default": ".", "description": "File or directory to search"},
                    "glob": {"type": "string", "description": "Only search files matching this glob"},
                    "case_insensitive": {"type": "boolean", "default": false},
                    "max_results": {"type": "integer", "minimum": 1}
                },
                "required": ["pattern"]
            }),
        );
        Self { spec, cfg }
    }
}

fn grep_file(
    dir: &Dir,
    rel: &Path,
    re: &regex::Regex,
    max_file_bytes: u64,
    max: usize,
    out: &mut Vec<Value>,
) -> Result<bool, ToolError> {
    let Ok(meta) = dir.metadata(rel) else {
        return Ok(false);
    };
    if !meta.is_file() || meta.len() > max_file_bytes {
        return Ok(false);
    }
    // A symlink that leads out (or vanished) is skipped, not an error for the whole search.
    let Ok(bytes) = dir.read(rel) else {
        return Ok(false);
    };
    if looks_binary(&bytes) {
        return Ok(false);
    }
    let text = String::from_utf8_lossy(&bytes);
    for (i, line) in text.lines().enumerate() {
        if re.is_match(line) {
            if out.len() >= max {
                return Ok(true);
            }
            let mut shown: String = line.chars().take(GREP_LINE_MAX_CHARS).collect();
            if shown.len() < line.len() {
                shown.push_str(" …");
            }
            out.push(json!({
                "path": display(rel),
                "line_number": i + 1,
                "line": shown,
            }));
        }
    }
    Ok(false)
}

#[async_trait]
impl Tool for Grep {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: GrepArgs = parse_args("grep", args)?;
        let re = regex::RegexBuilder::new(&args.pattern)
            .case_insensitive(args.case_insensitive)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| ToolError::invalid(format!("invalid regular expression: {e}")))?;
        let filter = args.glob.as_deref().map(compile_glob).transpose()?;
        let by_name = args.glob.as_deref().is_some_and(|g| !g.contains('/'));
        let max = args
            .max_results
            .unwrap_or(self.cfg.grep_max_results)
            .min(self.cfg.grep_max_results);
        let max_file_bytes = self.cfg.grep_max_file_bytes;
        let workspace = ctx.workspace.clone();
        let cancel = ctx.cancel.clone();
        blocking(move || {
            let jail = Jail::open(&workspace)?;
            let base = jail.resolve(args.path.as_deref().unwrap_or("."))?;
            let mut matches = Vec::new();
            let mut files_searched = 0u64;
            let mut truncated = false;
            let base_meta = jail
                .dir()
                .metadata(if base.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    &base
                })
                .map_err(|e| io_error(&base, e))?;
            if base_meta.is_file() {
                files_searched = 1;
                truncated = grep_file(jail.dir(), &base, &re, max_file_bytes, max, &mut matches)?;
            } else {
                let mut failure = None;
                walk(jail.dir(), &base, MAX_WALK_DEPTH, true, &cancel, &mut |e| {
                    if e.kind == EntryKind::Directory {
                        return true;
                    }
                    if let Some(f) = &filter {
                        let subject: &Path = if by_name {
                            Path::new(&e.name)
                        } else {
                            &e.rel_to_base
                        };
                        if !f.is_match(subject) {
                            return true;
                        }
                    }
                    files_searched += 1;
                    match grep_file(jail.dir(), &e.path, &re, max_file_bytes, max, &mut matches) {
                        Ok(full) => {
                            truncated = full;
                            !full
                        }
                        Err(err) => {
                            failure = Some(err);
                            false
                        }
                    }
                })?;
                if let Some(err) = failure {
                    return Err(err);
                }
            }
            Ok(ToolOutput::ok(json!({
                "pattern": args.pattern,
                "matches": matches,
                "count": matches.len(),
                "files_searched": files_searched,
                "truncated": truncated,
            })))
        })
        .await
    }
}

#[cfg(test)]
mod tests;
