//! The workspace jail: every file tool reaches the disk only through a [`Jail`].
//!
//! Three layers keep a path inside the user's workspace:
//! 1. **Lexical**: `..` components are refused outright, and an absolute path is accepted only
//!    when it names something under the workspace root (it is then made relative).
//! 2. **Resolution**: the longest existing prefix of the path is canonicalized *inside* the
//!    workspace, component by component, so a symlinked parent directory that points out is
//!    refused with a clear message before anything is touched.
//! 3. **Enforcement at use**: every open/create/rename goes through a `cap_std::fs::Dir` handle
//!    on the root, which resolves paths itself with `openat`-style calls (`RESOLVE_BENEATH` where
//!    the kernel has it) and refuses any step that leaves the directory. A symlink swapped in
//!    between the check and the use (TOCTOU) therefore still cannot lead out.
//!
//! The quota (total bytes of regular files under the root) is checked under a per-workspace
//! lock so concurrent writes cannot together overshoot it.

use std::collections::HashMap;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use agentry_tools::tool::{ToolError, WorkspaceInfo};

/// Directories nested deeper than this are not walked (quota, glob, grep, listings).
pub(crate) const MAX_WALK_DEPTH: usize = 64;

/// A handle on one user's workspace.
pub struct Jail {
    root: PathBuf,
    canonical_root: PathBuf,
    dir: Dir,
    quota_bytes: u64,
}

impl std::fmt::Debug for Jail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jail")
            .field("root", &self.root)
            .field("quota_bytes", &self.quota_bytes)
            .finish_non_exhaustive()
    }
}

impl Jail {
    /// Open the workspace, creating its root on first use.
    pub fn open(workspace: &WorkspaceInfo) -> Result<Self, ToolError> {
        let root = workspace.root.clone();
        std::fs::create_dir_all(&root).map_err(|e| {
            ToolError::failed(format!(
                "cannot create the workspace directory {}: {e}",
                root.display()
            ))
        })?;
        let canonical_root = std::fs::canonicalize(&root).map_err(|e| {
            ToolError::failed(format!("cannot resolve the workspace directory: {e}"))
        })?;
        let dir = Dir::open_ambient_dir(&canonical_root, ambient_authority())
            .map_err(|e| ToolError::failed(format!("cannot open the workspace directory: {e}")))?;
        Ok(Self {
            root,
            canonical_root,
            dir,
            quota_bytes: workspace.quota_bytes,
        })
    }

    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    pub fn quota_bytes(&self) -> u64 {
        self.quota_bytes
    }

    /// The workspace root as the operating system sees it (for a child process's cwd).
    pub fn canonical_root(&self) -> &Path {
        &self.canonical_root
    }

    /// The absolute path of a workspace-relative path (for a child process's cwd).
    pub fn absolute(&self, rel: &Path) -> PathBuf {
        let mut path = self.canonical_root.clone();
        for part in rel.components() {
            path.push(part);
        }
        path
    }

    /// The lexical layer: a relative path with no `..`, or a refusal.
    pub fn relative(&self, input: &str) -> Result<PathBuf, ToolError> {
        if input.contains('\0') {
            return Err(ToolError::invalid("a path must not contain NUL characters"));
        }
        let trimmed = input.trim();
        let path = Path::new(if trimmed.is_empty() { "." } else { trimmed });
        let path = if path.is_absolute() {
            path.strip_prefix(&self.canonical_root)
                .or_else(|_| path.strip_prefix(&self.root))
                .map_err(|_| {
                    ToolError::Refused(format!(
                        "{input:?} is outside the workspace; use a path relative to the workspace root"
                    ))
                })?
        } else {
            path
        };
        let mut out = PathBuf::new();
        for component in path.components() {
            match component {
                Component::Normal(part) => out.push(part),
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(ToolError::Refused(format!(
                        "{input:?} contains `..`; paths must stay inside the workspace"
                    )));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(ToolError::Refused(format!(
                        "{input:?} is outside the workspace"
                    )));
                }
            }
        }
        Ok(out)
    }

    /// The resolution layer: the path with every existing symlink resolved inside the
    /// workspace. Nonexistent trailing components are kept as they are (they will be created).
    pub fn resolve(&self, input: &str) -> Result<PathBuf, ToolError> {
        let rel = self.relative(input)?;
        let parts: Vec<_> = rel.components().collect();
        for split in (1..=parts.len()).rev() {
            let prefix: PathBuf = parts[..split].iter().collect();
            match self.dir.symlink_metadata(&prefix) {
                Ok(_) => {
                    let canonical = self.dir.canonicalize(&prefix).map_err(|e| {
                        if e.kind() == io::ErrorKind::NotFound {
                            ToolError::Refused(format!(
                                "{} is a symlink whose target does not exist",
                                display(&prefix)
                            ))
                        } else {
                            io_error(&prefix, e)
                        }
                    })?;
                    // `join("")` would add a trailing separator.
                    let mut resolved = canonical;
                    for part in &parts[split..] {
                        resolved.push(part);
                    }
                    return Ok(resolved);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) if e.raw_os_error() == Some(20) => {
                    // ENOTDIR: a file is used as a directory.
                    return Err(ToolError::invalid(format!(
                        "{}: a component of the path is a file, not a directory",
                        display(&rel)
                    )));
                }
                Err(e) => return Err(io_error(&prefix, e)),
            }
        }
        Ok(rel)
    }

    /// Total bytes of regular files under the root (symlinks are not followed).
    pub fn usage_bytes(&self) -> Result<u64, ToolError> {
        fn walk(dir: &Dir, depth: usize) -> io::Result<u64> {
            if depth > MAX_WALK_DEPTH {
                return Ok(0);
            }
            let mut total = 0u64;
            for entry in dir.entries()? {
                let entry = entry?;
                let ft = entry.file_type()?;
                if ft.is_dir() {
                    total = total.saturating_add(walk(&entry.open_dir()?, depth + 1)?);
                } else if ft.is_file() {
                    total = total.saturating_add(entry.metadata()?.len());
                }
            }
            Ok(total)
        }
        walk(&self.dir, 0)
            .map_err(|e| ToolError::failed(format!("cannot measure the workspace: {e}")))
    }

    /// Refuse a change that would take the workspace from `usage` to more than its quota.
    /// `old_bytes` is what the change frees (the file being replaced), `new_bytes` what it adds.
    pub fn check_quota(&self, old_bytes: u64, new_bytes: u64) -> Result<(), ToolError> {
        let usage = self.usage_bytes()?;
        let after = usage.saturating_sub(old_bytes).saturating_add(new_bytes);
        if after > self.quota_bytes {
            return Err(ToolError::QuotaExceeded(format!(
                "this change would bring the workspace to {after} bytes, over its quota of {} bytes \
                 ({usage} bytes used now); delete files or write less",
                self.quota_bytes
            )));
        }
        Ok(())
    }
}

/// Read a whole regular file of the workspace (for `GET /files/{path}`): through the jail's
/// layers, no directory, no file with other hard links (its other names may be outside), at
/// most `max_bytes`. Returns the relative path and the bytes.
pub fn read_whole(
    workspace: &WorkspaceInfo,
    input: &str,
    max_bytes: u64,
) -> Result<(PathBuf, Vec<u8>), ToolError> {
    use cap_std::fs::MetadataExt;
    use std::io::Read;
    let jail = Jail::open(workspace)?;
    let rel = jail.resolve(input)?;
    if rel.as_os_str().is_empty() {
        return Err(ToolError::invalid(
            "the path names the workspace root, not a file",
        ));
    }
    let mut file = jail.dir().open(&rel).map_err(|e| io_error(&rel, e))?;
    let meta = file.metadata().map_err(|e| io_error(&rel, e))?;
    if meta.is_dir() {
        return Err(ToolError::NotFound(format!(
            "{} is a directory",
            display(&rel)
        )));
    }
    if !meta.is_file() {
        return Err(ToolError::Refused(format!(
            "{} is not a regular file",
            display(&rel)
        )));
    }
    if meta.nlink() > 1 {
        return Err(ToolError::Refused(format!(
            "{} has other hard links, which may lie outside the workspace",
            display(&rel)
        )));
    }
    if meta.len() > max_bytes {
        return Err(ToolError::invalid(format!(
            "{} is {} bytes, over the {max_bytes} bytes this route serves",
            display(&rel),
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.by_ref()
        .take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(&rel, e))?;
    Ok((rel, bytes))
}

/// How a workspace-relative path is shown to the model and in events: `a/b.txt`, or `.`.
pub fn display(rel: &Path) -> String {
    let s = rel.to_string_lossy();
    if s.is_empty() {
        ".".to_string()
    } else {
        s.into_owned()
    }
}

/// An I/O error on a workspace path, as the model should read it.
pub fn io_error(rel: &Path, e: io::Error) -> ToolError {
    let shown = display(rel);
    match e.kind() {
        io::ErrorKind::NotFound => {
            ToolError::NotFound(format!("{shown}: no such file or directory"))
        }
        io::ErrorKind::PermissionDenied if e.to_string().contains("outside") => ToolError::Refused(
            format!("{shown} leads outside the workspace (through a symlink)"),
        ),
        io::ErrorKind::PermissionDenied => ToolError::failed(format!("{shown}: permission denied")),
        io::ErrorKind::AlreadyExists => ToolError::failed(format!("{shown} already exists")),
        _ if e.raw_os_error() == Some(40) => {
            // ELOOP: a symlink where none may be followed, or a loop.
            ToolError::Refused(format!("{shown}: too many levels of symlinks"))
        }
        _ if e.raw_os_error() == Some(21) => ToolError::invalid(format!("{shown} is a directory")),
        _ if e.raw_os_error() == Some(20) => ToolError::invalid(format!(
            "{shown}: a component of the path is not a directory"
        )),
        _ => ToolError::failed(format!("{shown}: {e}")),
    }
}

/// Serializes quota-checked changes per workspace root.
pub async fn write_lock(root: &Path) -> tokio::sync::OwnedMutexGuard<()> {
    static LOCKS: OnceLock<Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let lock = {
        let mut map = LOCKS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Drop locks nobody holds or waits on, so the map stays as small as the set of busy
        // workspaces.
        map.retain(|_, l| Arc::strong_count(l) > 1);
        map.entry(root.to_path_buf()).or_default().clone()
    };
    lock.lock_owned().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jail(dir: &Path) -> Jail {
        Jail::open(&WorkspaceInfo {
            root: dir.join("ws"),
            quota_bytes: 1000,
            sandbox: Default::default(),
        })
        .unwrap()
    }

    #[test]
    fn the_root_is_created_on_first_use() {
        let tmp = tempfile::tempdir().unwrap();
        let j = jail(tmp.path());
        assert!(tmp.path().join("ws").is_dir());
        assert_eq!(j.usage_bytes().unwrap(), 0);
    }

    #[test]
    fn parent_components_and_outside_absolute_paths_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let j = jail(tmp.path());
        for bad in ["../x", "a/../../x", "a/..", "/etc/passwd", "..", "./.."] {
            assert!(
                matches!(j.relative(bad), Err(ToolError::Refused(_))),
                "{bad} was not refused"
            );
        }
        assert_eq!(j.relative("./a/./b").unwrap(), PathBuf::from("a/b"));
        assert_eq!(j.relative("").unwrap(), PathBuf::new());
        let inside = tmp.path().join("ws").join("notes.txt");
        assert_eq!(
            j.relative(inside.to_str().unwrap()).unwrap(),
            PathBuf::from("notes.txt")
        );
    }

    #[test]
    fn a_symlinked_parent_that_points_out_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let j = jail(tmp.path());
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, tmp.path().join("ws/link")).unwrap();
        let err = j.resolve("link/new.txt").unwrap_err();
        assert!(matches!(err, ToolError::Refused(_)), "{err:?}");
        // And the enforcement layer refuses it too, whatever the resolution said.
        let err = j.dir().write("link/new.txt", b"x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(!outside.join("new.txt").exists());
    }

    #[test]
    fn a_symlink_inside_the_workspace_resolves_to_its_target() {
        let tmp = tempfile::tempdir().unwrap();
        let j = jail(tmp.path());
        std::fs::create_dir_all(tmp.path().join("ws/real/sub")).unwrap();
        std::os::unix::fs::symlink("real", tmp.path().join("ws/alias")).unwrap();
        assert_eq!(
            j.resolve("alias/sub/f.txt").unwrap(),
            PathBuf::from("real/sub/f.txt")
        );
    }

    #[test]
    fn usage_counts_regular_files_and_quota_is_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let j = jail(tmp.path());
        std::fs::create_dir_all(tmp.path().join("ws/d")).unwrap();
        std::fs::write(tmp.path().join("ws/a"), vec![0u8; 300]).unwrap();
        std::fs::write(tmp.path().join("ws/d/b"), vec![0u8; 200]).unwrap();
        assert_eq!(j.usage_bytes().unwrap(), 500);
        assert!(j.check_quota(0, 500).is_ok());
        assert!(matches!(
            j.check_quota(0, 501),
            Err(ToolError::QuotaExceeded(_))
        ));
        // Replacing the 300-byte file frees its bytes first.
        assert!(j.check_quota(300, 800).is_ok());
    }
}
