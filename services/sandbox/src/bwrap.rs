//! The bubblewrap command line for one launch: a pure function of the [`Layout`], so what a
//! tenant controls (the program, its arguments, its environment) can be shown never to reach an
//! option position (`bwrap_options_are_never_tenant_strings` below).
//!
//! The sandbox gets new user, pid, ipc, uts, cgroup and (without egress) network namespaces;
//! `/usr`, `/bin`, `/sbin`, `/lib*` and `/etc` read-only, with the [hidden](Layout::hidden)
//! paths covered (a file by `/dev/null`, a directory by an empty tmpfs); its own `/proc`,
//! `/dev` and `/tmp`; the workspace read-write at its host path; the extra read-only paths.
//! Nothing else of the host exists inside: not the data dir, not another workspace, not the
//! server's `/proc` entries.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The system directories mounted read-only when they exist (a symlink such as `/bin ->
/// usr/bin` is recreated as the same symlink).
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

/// What one launch sees; every path is absolute and comes from the server, never a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Read-write, at its host path.
    pub workspace: PathBuf,
    /// Where the program starts; inside the workspace or a read-only path.
    pub cwd: PathBuf,
    /// Mounted read-only at their own path (and at `alias` when they were given through a
    /// symlink): `(source, destination)`.
    pub read_only: Vec<(PathBuf, PathBuf)>,
    /// Covered inside the read-only trees: `(path, is_dir)`.
    pub hidden: Vec<(PathBuf, bool)>,
    /// Keep the host network (egress allowed).
    pub network: bool,
    /// Size of the private `/tmp`, in bytes.
    pub tmp_bytes: u64,
}

/// How a system directory appears on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemEntry {
    Dir(PathBuf),
    /// `(link, target)` as `readlink` gives it.
    Symlink(PathBuf, PathBuf),
}

/// The system directories of this host.
pub fn system_entries() -> Vec<SystemEntry> {
    SYSTEM_DIRS
        .iter()
        .filter_map(|d| {
            let p = PathBuf::from(d);
            let meta = std::fs::symlink_metadata(&p).ok()?;
            if meta.file_type().is_symlink() {
                Some(SystemEntry::Symlink(
                    p.clone(),
                    std::fs::read_link(&p).ok()?,
                ))
            } else if meta.is_dir() {
                Some(SystemEntry::Dir(p))
            } else {
                None
            }
        })
        .collect()
}

fn push(argv: &mut Vec<OsString>, items: &[&dyn AsRef<std::ffi::OsStr>]) {
    argv.extend(items.iter().map(|s| s.as_ref().to_os_string()));
}

/// The bwrap options, ending with the `--` after which only the program and its arguments
/// follow. `program` and `args` are appended by the caller after this.
pub fn options(layout: &Layout, system: &[SystemEntry]) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    push(
        &mut a,
        &[
            &"--unshare-user",
            &"--unshare-pid",
            &"--unshare-ipc",
            &"--unshare-uts",
            &"--unshare-cgroup-try",
        ],
    );
    if !layout.network {
        push(&mut a, &[&"--unshare-net"]);
    }
    push(
        &mut a,
        &[
            &"--die-with-parent",
            &"--new-session",
            &"--disable-userns",
            &"--cap-drop",
            &"ALL",
            &"--hostname",
            &"sandbox",
            // No `--clearenv`: the launcher's environment is already exactly the program's (the
            // allow-list, the configured variables, HOME and TMPDIR; lib.rs clears the rest), and
            // bwrap's `--clearenv` took all of it away, an MCP server's configured `env` included.
        ],
    );
    for entry in system {
        match entry {
            SystemEntry::Dir(d) => push(&mut a, &[&"--ro-bind", d, d]),
            SystemEntry::Symlink(link, target) => push(&mut a, &[&"--symlink", target, link]),
        }
    }
    push(&mut a, &[&"--proc", &"/proc", &"--dev", &"/dev", &"--size"]);
    a.push(layout.tmp_bytes.max(1024 * 1024).to_string().into());
    push(&mut a, &[&"--tmpfs", &"/tmp"]);
    for (src, dest) in &layout.read_only {
        push(&mut a, &[&"--ro-bind", src, dest]);
    }
    push(&mut a, &[&"--bind", &layout.workspace, &layout.workspace]);
    for (path, is_dir) in &layout.hidden {
        if *is_dir {
            push(&mut a, &[&"--tmpfs", path]);
        } else {
            push(&mut a, &[&"--ro-bind", &"/dev/null", path]);
        }
    }
    push(&mut a, &[&"--chdir", &layout.cwd, &"--"]);
    a
}

/// Whether `path` lies in (or is) one of `roots`.
pub fn is_under(path: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| path.starts_with(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(ws: &str) -> Layout {
        Layout {
            workspace: PathBuf::from(ws),
            cwd: PathBuf::from(ws),
            read_only: vec![(PathBuf::from("/opt/mcp"), PathBuf::from("/opt/mcp"))],
            hidden: vec![
                (PathBuf::from("/etc/shadow"), false),
                (PathBuf::from("/etc/ssh"), true),
            ],
            network: false,
            tmp_bytes: 64 << 20,
        }
    }

    #[test]
    fn the_command_line_isolates_and_ends_options_with_a_double_dash() {
        let system = vec![
            SystemEntry::Dir("/usr".into()),
            SystemEntry::Symlink("/bin".into(), "usr/bin".into()),
            SystemEntry::Dir("/etc".into()),
        ];
        let argv = options(&layout("/data/workspaces/t/u"), &system);
        let s: Vec<&str> = argv.iter().map(|a| a.to_str().unwrap()).collect();
        for flag in [
            "--unshare-user",
            "--unshare-pid",
            "--unshare-net",
            "--die-with-parent",
            "--new-session",
        ] {
            assert!(s.contains(&flag), "{flag} missing: {s:?}");
        }
        assert!(
            !s.contains(&"--clearenv"),
            "the launcher's environment is the program's"
        );
        assert_eq!(s.last(), Some(&"--"));
        let bind = s.iter().position(|a| *a == "--bind").unwrap();
        assert_eq!(s[bind + 1], "/data/workspaces/t/u");
        assert!(s.windows(3).any(|w| w == ["--symlink", "usr/bin", "/bin"]));
        assert!(
            s.windows(3)
                .any(|w| w == ["--ro-bind", "/dev/null", "/etc/shadow"])
        );
        assert!(s.windows(2).any(|w| w == ["--tmpfs", "/etc/ssh"]));
        // The hidden paths are covered after the trees they are in were mounted.
        let etc = s
            .windows(2)
            .position(|w| w == ["--ro-bind", "/etc"])
            .unwrap();
        let shadow = s.iter().position(|a| *a == "/etc/shadow").unwrap();
        assert!(etc < shadow);

        let with_net = Layout {
            network: true,
            ..layout("/w")
        };
        assert!(!options(&with_net, &system).contains(&OsString::from("--unshare-net")));
    }
}
