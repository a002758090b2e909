//! The `landlock` backend's rules, applied by the launcher to itself before it execs the
//! command (see [`crate::launcher`]): for hosts where user namespaces are refused.
//!
//! - **Landlock** file rules: the workspace (and a private temp dir) read-write, the system
//!   directories and the configured read-only paths read + execute, a few device files, and
//!   nothing else. Since rules only *allow*, a secret inside a readable tree is excluded by
//!   allowing that tree's other entries one by one ([`allowed_beneath`]).
//! - Landlock TCP rules without egress (ABI 4+): no `connect`, no `bind`.
//! - Landlock scopes (ABI 6+): no signals to, no abstract unix sockets of, processes outside.
//!   Landlock also keeps a sandboxed process from `ptrace`-style access to any process outside
//!   its domain, which is what guards `/proc/<server>/environ` and `/proc/<server>/mem`.
//! - Every capability dropped (bounding, ambient, effective, permitted, inheritable): root in the
//!   sandbox is root without powers; `PR_SET_NO_NEW_PRIVS`.
//! - A seccomp filter: `EPERM` for ptrace, mount and friends, namespaces, keyrings, bpf, perf,
//!   module and kexec calls, raw/packet and unix sockets (and inet sockets without egress);
//!   `ENOSYS` for `clone3` so libc falls back to `clone`, whose namespace flags are checked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};
use serde::{Deserialize, Serialize};

/// The newest ABI whose rights we ask for; older kernels get what they support (best effort),
/// except that the file rules must be enforced or the launch fails.
const ABI_WANTED: ABI = ABI::V6;

/// Device files a program may need.
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// The rules of one launch, computed by the server (which knows what to hide).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    pub read_exec: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
    pub devices: Vec<PathBuf>,
    pub egress: bool,
}

/// The entries to allow so that everything under `root` is reachable except `hidden`: `root`
/// itself when nothing hidden lies in it, else its children (recursively) minus the hidden ones.
pub fn allowed_beneath(root: &Path, hidden: &[PathBuf]) -> Vec<PathBuf> {
    if hidden.iter().any(|h| h == root) {
        return Vec::new();
    }
    if !hidden.iter().any(|h| h.starts_with(root)) {
        return vec![root.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        out.extend(allowed_beneath(&entry.path(), hidden));
    }
    out.sort();
    out
}

/// Apply Landlock, drop every capability, set no_new_privs, install the seccomp filter.
pub fn restrict_self(rules: &Rules) -> Result<(), String> {
    let fs_read = AccessFs::from_read(ABI_WANTED);
    // Everything a workspace needs, but no device nodes.
    let fs_write = AccessFs::from_all(ABI_WANTED) & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(ABI_WANTED))
        .map_err(|e| format!("landlock: {e}"))?;
    if !rules.egress {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(|e| format!("landlock: {e}"))?;
    }
    ruleset = ruleset
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(|e| format!("landlock: {e}"))?;
    let mut created = ruleset.create().map_err(|e| format!("landlock: {e}"))?;
    let devices = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev;
    let entries = (rules.read_exec.iter().map(|p| (p, fs_read)))
        .chain(rules.read_write.iter().map(|p| (p, fs_write)))
        .chain(rules.devices.iter().map(|p| (p, devices)));
    for (path, access) in entries {
        // A path that does not exist on this host is simply not allowed.
        let Ok(fd) = PathFd::new(path) else {
            continue;
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("landlock rule for {}: {e}", path.display()))?;
    }
    let status = created
        .restrict_self()
        .map_err(|e| format!("landlock: {e}"))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("landlock is not enforced by this kernel (missing or disabled)".into());
    }
    if !status.no_new_privs {
        return Err("PR_SET_NO_NEW_PRIVS could not be set".into());
    }
    drop_capabilities()?;
    seccomp(rules.egress)
}

fn drop_capabilities() -> Result<(), String> {
    use caps::{CapSet, Capability};
    for cap in caps::all() {
        // Dropping from the bounding set needs CAP_SETPCAP, which a non-root server lacks; it
        // also has nothing to drop there that it could use.
        if caps::has_cap(None, CapSet::Bounding, cap).unwrap_or(false)
            && caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).unwrap_or(false)
        {
            caps::drop(None, CapSet::Bounding, cap)
                .map_err(|e| format!("dropping {cap} from the bounding set: {e}"))?;
        }
    }
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|e| format!("clearing {set:?} capabilities: {e}"))?;
    }
    Ok(())
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conds).map_err(|e| format!("seccomp: {e}"))
}

fn arg_eq(index: u8, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
        .map_err(|e| format!("seccomp: {e}"))
}

fn flag_set(index: u8, flag: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(
        index,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(flag),
        flag,
    )
    .map_err(|e| format!("seccomp: {e}"))
}

/// The syscalls refused outright.
const DENIED: &[i64] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_syslog,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
];

fn seccomp(egress: bool) -> Result<(), String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| format!("seccomp: {e}"))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|nr| (*nr, Vec::new())).collect();
    let ns_flags = [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
    ];
    rules.insert(
        libc::SYS_clone,
        ns_flags
            .iter()
            .map(|f| rule(vec![flag_set(0, *f as u64)?]))
            .collect::<Result<_, _>>()?,
    );
    let mut domains = vec![libc::AF_UNIX, libc::AF_PACKET];
    if !egress {
        domains.extend([libc::AF_INET, libc::AF_INET6]);
    }
    rules.insert(
        libc::SYS_socket,
        domains
            .iter()
            .map(|d| rule(vec![arg_eq(0, *d as u64)?]))
            .collect::<Result<_, _>>()?,
    );
    let deny = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("seccomp: {e}"))?;
    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| format!("seccomp: {e}"))?;
    for filter in [deny, clone3] {
        let program: seccompiler::BpfProgram =
            filter.try_into().map_err(|e| format!("seccomp: {e:?}"))?;
        seccompiler::apply_filter(&program).map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hidden_path_is_cut_out_of_its_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("etc/ssl/private")).unwrap();
        std::fs::create_dir_all(root.join("etc/ssl/certs")).unwrap();
        std::fs::write(root.join("etc/passwd"), "").unwrap();
        std::fs::write(root.join("etc/shadow"), "").unwrap();
        let hidden = vec![root.join("etc/shadow"), root.join("etc/ssl/private")];
        let allowed = allowed_beneath(&root.join("etc"), &hidden);
        assert_eq!(
            allowed,
            vec![root.join("etc/passwd"), root.join("etc/ssl/certs")]
        );
        assert_eq!(
            allowed_beneath(&root.join("etc/ssl/certs"), &hidden),
            vec![root.join("etc/ssl/certs")]
        );
        assert!(allowed_beneath(&root.join("etc/shadow"), &hidden).is_empty());
    }
}
