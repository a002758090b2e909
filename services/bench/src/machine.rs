//! What the figures were measured on: the machine, the commit, the binary.

use std::path::Path;

use serde_json::{Value, json};

/// Cores, CPU model, memory and kernel, from `/proc` (what is not readable is left out).
pub fn describe() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string());
    json!({
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu": cpu,
        "memory_gib": memory_kib.map(|k| ((k as f64 / 1048576.0) * 10.0).round() / 10.0),
        "kernel": kernel,
    })
}

/// The checked-out commit (with `-dirty` when the tree has changes), or `unknown`.
pub fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "HEAD"]) {
        Some(head) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty { format!("{head}-dirty") } else { head }
        }
        None => "unknown".into(),
    }
}

/// The measured binary: its path and whether it is a release build (by its directory).
pub fn binary(path: &Path) -> Value {
    let profile = path
        .parent()
        .and_then(|d| d.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("unknown")
        .to_string();
    json!({"path": path.display().to_string(), "profile": profile})
}

/// Raise this process's open-file limit to at least `wanted` (up to the hard limit); the
/// server started afterwards inherits it. Returns the limit in force.
pub fn raise_fd_limit(wanted: u64) -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    let target = wanted.min(hard).max(soft);
    if target > soft && setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_err() {
        return soft;
    }
    if wanted > hard {
        eprintln!(
            "  note: {wanted} open files wanted, the hard limit is {hard}: sessions beyond it will fail"
        );
    }
    target
}
