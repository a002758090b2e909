//! Process lifetime: every launch is one process group (the launcher calls `setsid`), optionally
//! in its own pids cgroup, recorded on disk with its owner (run and tool call) until it is gone.
//!
//! - [`ProcessGroup::kill`] signals every process of the launch: the cgroup's members when there
//!   is a cgroup, and the group's members. A group is only signalled while it is provably ours:
//!   its leader is alive with the recorded start time, or (leader gone) a member of the group
//!   started after it. A pgid cannot be reused while any member of the old group lives, so a
//!   reused pid is never signalled.
//! - Dropping the last handle kills what is left and removes the record, the cgroup and the
//!   private temp dir.
//! - [`reap_leftovers`] runs at start: the records a crashed process left name groups that may
//!   still run (the landlock backend has no pid namespace that would die with them); each is
//!   killed after the same start-time check, and its cgroup and temp dir are removed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::config::Backend;

/// Who a launch is for; written to its record and to the logs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// `execute`, `mcp:<server>`, `probe`.
    pub kind: String,
    pub tenant_id: Option<String>,
    pub user_id: Option<String>,
    pub run_id: Option<String>,
    pub tool_call_id: Option<String>,
}

/// What is written to `{data_dir}/sandbox/groups/<id>.json` while a launch runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupRecord {
    pub pgid: i32,
    /// The leader's start time, in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_time: u64,
    pub backend: Backend,
    pub cgroup: Option<PathBuf>,
    pub tmp: Option<PathBuf>,
    pub owner: Owner,
}

/// `(pgid, session, start time)` of a live process.
pub fn proc_stat(pid: i32) -> Option<(i32, i32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): pgrp is field 5, session 6, starttime 22.
    Some((
        f.get(2)?.parse().ok()?,
        f.get(3)?.parse().ok()?,
        f.get(19)?.parse().ok()?,
    ))
}

/// The live (not zombie) descendants of `root`, from the parent links in `/proc`.
pub fn descendants(root: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: HashMap<i32, Vec<(i32, bool)>> = HashMap::new();
    for pid in dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        let Some(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok() else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        // Field 3 is the state, field 4 the parent.
        let zombie = f.next() == Some("Z");
        if let Some(ppid) = f.next().and_then(|p| p.parse::<i32>().ok()) {
            children.entry(ppid).or_default().push((pid, zombie));
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for &(child, zombie) in children.get(&p).map(Vec::as_slice).unwrap_or_default() {
            if !zombie {
                out.push(child);
            }
            todo.push(child);
        }
    }
    out
}

/// Live processes of group `pgid` that started no earlier than `start_time`.
pub fn group_members(pgid: i32, start_time: u64) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            proc_stat(*pid).is_some_and(|(pg, _, start)| pg == pgid && start >= start_time)
        })
        .collect()
}

pub(crate) fn cgroup_pids(cgroup: &Path) -> Vec<i32> {
    std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Signal every process of a launch. Returns how many processes were signalled.
fn signal_launch(pgid: i32, start_time: u64, cgroup: Option<&Path>, sig: Signal) -> usize {
    let mut n = 0;
    if let Some(cg) = cgroup {
        for pid in cgroup_pids(cg) {
            if kill(Pid::from_raw(pid), sig).is_ok() {
                n += 1;
            }
        }
    }
    match proc_stat(pgid) {
        // The leader lives: the group is ours.
        // The leader lives: the group is ours. The leader itself is signalled too, in case it
        // has not reached its `setsid` yet (then the group does not exist and it has started
        // nothing).
        Some((_, _, start)) if start == start_time => {
            let a = killpg(Pid::from_raw(pgid), sig).is_ok();
            let b = kill(Pid::from_raw(pgid), sig).is_ok();
            if a || b {
                n += 1;
            }
        }
        // The pid was reused: the old group is entirely gone (a pgid is never reused while a
        // member of the group lives).
        Some(_) => {}
        None => {
            for pid in group_members(pgid, start_time) {
                if kill(Pid::from_raw(pid), sig).is_ok() {
                    n += 1;
                }
            }
        }
    }
    n
}

fn launch_alive(pgid: i32, start_time: u64, cgroup: Option<&Path>) -> bool {
    if cgroup.is_some_and(|cg| !cgroup_pids(cg).is_empty()) {
        return true;
    }
    match proc_stat(pgid) {
        Some((_, _, start)) => start == start_time,
        None => !group_members(pgid, start_time).is_empty(),
    }
}

/// Remove what a finished launch left on disk; a cgroup whose last processes are still exiting
/// is retried for a few seconds on a helper thread.
fn remove_leftovers(cgroup: Option<PathBuf>, tmp: Option<PathBuf>, record: Option<PathBuf>) {
    if let Some(tmp) = tmp {
        let _ = std::fs::remove_dir_all(tmp);
    }
    let busy = cgroup
        .as_ref()
        .is_some_and(|cg| std::fs::remove_dir(cg).is_err() && cg.exists());
    let finish = move || {
        if let Some(cg) = &cgroup {
            for _ in 0..50 {
                if std::fs::remove_dir(cg).is_ok() || !cg.exists() {
                    break;
                }
                for pid in cgroup_pids(cg) {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if let Some(record) = record {
            let _ = std::fs::remove_file(record);
        }
    };
    if busy {
        let _ = std::thread::Builder::new()
            .name("sandbox-cgroup-cleanup".into())
            .spawn(finish);
    } else {
        finish();
    }
}

/// The live launches of one sandbox, for [`crate::Sandbox::kill_all`] at shutdown.
#[derive(Default)]
pub struct Registry {
    groups: Mutex<HashMap<u64, Weak<ProcessGroup>>>,
    next: std::sync::atomic::AtomicU64,
}

impl Registry {
    pub(crate) fn add(self: &Arc<Self>, group: &Arc<ProcessGroup>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Arc::downgrade(group));
        id
    }

    fn remove(&self, id: u64) {
        self.groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// Kill every live launch. Returns how many there were.
    pub fn kill_all(&self) -> usize {
        let groups: Vec<Arc<ProcessGroup>> = self
            .groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for g in &groups {
            g.release();
        }
        groups.len()
    }

    pub fn len(&self) -> usize {
        self.groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One launch's processes. Dropping the last handle kills whatever is left of them.
pub struct ProcessGroup {
    pgid: i32,
    start_time: u64,
    cgroup: Option<PathBuf>,
    tmp: Option<PathBuf>,
    record: Option<PathBuf>,
    owner: Owner,
    released: AtomicBool,
    registry: Mutex<Option<(Weak<Registry>, u64)>>,
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("pgid", &self.pgid)
            .field("cgroup", &self.cgroup)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl ProcessGroup {
    pub(crate) fn new(
        pgid: i32,
        cgroup: Option<PathBuf>,
        tmp: Option<PathBuf>,
        record: Option<PathBuf>,
        owner: Owner,
    ) -> Self {
        let start_time = proc_stat(pgid).map(|(_, _, s)| s).unwrap_or(0);
        Self {
            pgid,
            start_time,
            cgroup,
            tmp,
            record,
            owner,
            released: AtomicBool::new(false),
            registry: Mutex::new(None),
        }
    }

    pub(crate) fn set_registry(&self, registry: &Arc<Registry>, id: u64) {
        *self.registry.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Arc::downgrade(registry), id));
    }

    pub(crate) fn record(&self, backend: Backend) -> GroupRecord {
        GroupRecord {
            pgid: self.pgid,
            start_time: self.start_time,
            backend,
            cgroup: self.cgroup.clone(),
            tmp: self.tmp.clone(),
            owner: self.owner.clone(),
        }
    }

    /// The process group id (the launcher's pid).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// The record file of the launch, while it runs.
    pub fn record_file(&self) -> Option<&Path> {
        self.record.as_deref()
    }

    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The pids cgroup of the launch, when the host lets the server make one.
    pub fn cgroup(&self) -> Option<&Path> {
        self.cgroup.as_deref()
    }

    /// Whether any process of the launch is alive.
    pub fn alive(&self) -> bool {
        !self.released.load(Ordering::SeqCst)
            && launch_alive(self.pgid, self.start_time, self.cgroup.as_deref())
    }

    /// Send `sig` to every process of the launch (nothing once released).
    pub fn signal(&self, sig: Signal) -> usize {
        if self.released.load(Ordering::SeqCst) {
            return 0;
        }
        signal_launch(self.pgid, self.start_time, self.cgroup.as_deref(), sig)
    }

    /// SIGKILL every process of the launch now.
    pub fn kill(&self) {
        self.signal(Signal::SIGKILL);
    }

    /// SIGTERM, up to `grace` for the processes to exit, then SIGKILL; then [`release`](Self::release).
    pub async fn terminate(&self, grace: Duration) {
        if self.signal(Signal::SIGTERM) > 0 {
            let deadline = tokio::time::Instant::now() + grace;
            while tokio::time::Instant::now() < deadline && self.alive() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        self.release();
    }

    /// Kill what is left and remove the record, the cgroup and the temp dir. Idempotent; after
    /// it the group is never signalled again.
    pub fn release(&self) {
        if self.released.load(Ordering::SeqCst) {
            return;
        }
        self.kill();
        if self.released.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some((registry, id)) = self
            .registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            && let Some(r) = registry.upgrade()
        {
            r.remove(id);
        }
        remove_leftovers(self.cgroup.clone(), self.tmp.clone(), self.record.clone());
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.release();
    }
}

/// What [`reap_leftovers`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reaped {
    /// Launches whose processes were still running and were killed.
    pub killed: Vec<Owner>,
    /// Records of launches that had ended by themselves.
    pub stale: usize,
}

/// Kill every launch a previous process of this data dir left running; remove their records,
/// cgroups and temp dirs.
pub fn reap_leftovers(state_dir: &Path, cgroup_instance: Option<&Path>) -> Reaped {
    let mut out = Reaped::default();
    let records = state_dir.join("groups");
    if let Ok(dir) = std::fs::read_dir(&records) {
        for entry in dir.flatten() {
            let path = entry.path();
            let record: Option<GroupRecord> = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            if let Some(r) = record {
                let alive = launch_alive(r.pgid, r.start_time, r.cgroup.as_deref());
                if alive {
                    signal_launch(r.pgid, r.start_time, r.cgroup.as_deref(), Signal::SIGKILL);
                    tracing::warn!(
                        pgid = r.pgid,
                        kind = %r.owner.kind,
                        run_id = r.owner.run_id.as_deref().unwrap_or(""),
                        tool_call_id = r.owner.tool_call_id.as_deref().unwrap_or(""),
                        "killed a sandboxed process group a previous server left running"
                    );
                    out.killed.push(r.owner.clone());
                } else {
                    out.stale += 1;
                }
                remove_leftovers(r.cgroup.clone(), r.tmp.clone(), None);
            }
            let _ = std::fs::remove_file(&path);
        }
    }
    // Launches whose record was never written (a crash right after the spawn) still have their
    // cgroup, and their temp dirs.
    if let Some(instance) = cgroup_instance
        && let Ok(dir) = std::fs::read_dir(instance)
    {
        for entry in dir.flatten() {
            let cg = entry.path();
            if cg.is_dir() {
                let pids = cgroup_pids(&cg);
                if !pids.is_empty() {
                    for pid in &pids {
                        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
                    }
                    out.killed.push(Owner {
                        kind: "unrecorded".into(),
                        ..Owner::default()
                    });
                }
                remove_leftovers(Some(cg), None, None);
            }
        }
    }
    if let Ok(dir) = std::fs::read_dir(state_dir.join("tmp")) {
        for entry in dir.flatten() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    out
}

/// Per-launch pids cgroups under one directory per data dir (`agentry-<hash>`), so servers
/// sharing a host never touch each other's launches.
#[derive(Debug, Clone)]
pub struct Cgroups {
    base: PathBuf,
    instance: PathBuf,
    v2: bool,
}

impl Cgroups {
    /// A pids cgroup hierarchy the server may write, or why not.
    pub fn detect(instance_name: &str) -> Result<Cgroups, String> {
        let v1 = Path::new("/sys/fs/cgroup/pids");
        let v2 = Path::new("/sys/fs/cgroup");
        let (base, is_v2) = if v1.join("cgroup.procs").exists() {
            (v1.to_path_buf(), false)
        } else if std::fs::read_to_string(v2.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"))
        {
            (v2.to_path_buf(), true)
        } else {
            return Err("no pids cgroup controller is mounted".into());
        };
        let cgroups = Cgroups {
            instance: base.join(instance_name),
            base,
            v2: is_v2,
        };
        let probe = || -> std::io::Result<()> {
            cgroups.ensure_instance()?;
            let probe = cgroups.instance.join("probe");
            let _ = std::fs::create_dir(&probe);
            let r = std::fs::write(probe.join("pids.max"), "1");
            let _ = std::fs::remove_dir(&probe);
            r
        };
        probe().map_err(|e| format!("{} is not writable: {e}", cgroups.instance.display()))?;
        Ok(cgroups)
    }

    /// The instance directory, made (again) when missing: a sandbox that is dropped removes it
    /// when it is empty.
    fn ensure_instance(&self) -> std::io::Result<()> {
        if self.instance.is_dir() {
            return Ok(());
        }
        if self.v2 {
            std::fs::write(self.base.join("cgroup.subtree_control"), "+pids")?;
        }
        std::fs::create_dir_all(&self.instance)?;
        if self.v2 {
            std::fs::write(self.instance.join("cgroup.subtree_control"), "+pids")?;
        }
        Ok(())
    }

    pub fn instance(&self) -> &Path {
        &self.instance
    }

    /// Remove what servers that are gone left of their cgroup directories: in every other
    /// `agentry-*` instance, the launch cgroups that hold no process and are older than a
    /// minute (a fresh one is joined within milliseconds), then the instance when it is empty.
    /// A live server whose empty instance is removed makes it again on its next launch.
    pub fn sweep_stale(&self) -> usize {
        let mut removed = 0;
        let Ok(dir) = std::fs::read_dir(&self.base) else {
            return 0;
        };
        let old = |p: &Path| {
            std::fs::metadata(p)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > Duration::from_secs(60))
        };
        for entry in dir.flatten() {
            let instance = entry.path();
            let is_ours = instance == self.instance;
            let named = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("agentry-"));
            if is_ours || !named || !instance.is_dir() {
                continue;
            }
            if let Ok(leaves) = std::fs::read_dir(&instance) {
                for leaf in leaves.flatten() {
                    let leaf = leaf.path();
                    if leaf.is_dir()
                        && cgroup_pids(&leaf).is_empty()
                        && old(&leaf)
                        && std::fs::remove_dir(&leaf).is_ok()
                    {
                        removed += 1;
                    }
                }
            }
            if old(&instance) && std::fs::remove_dir(&instance).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// A new cgroup for one launch, holding at most `max` processes.
    pub fn create(&self, id: &str, max: u64) -> std::io::Result<PathBuf> {
        let dir = self.instance.join(id);
        self.ensure_instance()?;
        if let Err(e) = std::fs::create_dir(&dir) {
            // The instance was removed in between by a sandbox being dropped: once more.
            self.ensure_instance()?;
            std::fs::create_dir(&dir).map_err(|_| e)?;
        }
        if let Err(e) = std::fs::write(dir.join("pids.max"), max.to_string()) {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        Ok(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_stat_parses() {
        let me = std::process::id() as i32;
        let (pgid, sid, start) = proc_stat(me).unwrap();
        // Compare with the kernel's own answer, not with "> 0": a test runner started from
        // outside this pid namespace (a CI container) sees its group and session as 0.
        assert_eq!(pgid, nix::unistd::getpgid(None).unwrap().as_raw());
        assert_eq!(sid, nix::unistd::getsid(None).unwrap().as_raw());
        assert!(start > 0);
        assert!(group_members(pgid, 0).contains(&me));
        assert!(!group_members(pgid, u64::MAX).contains(&me));
    }
}
