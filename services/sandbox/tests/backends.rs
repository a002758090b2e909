//! Both real backends, through the real launcher: what a tenant's command can and cannot reach,
//! the limits, and what is left after a kill. Landlock is skipped only where the kernel lacks
//! it, saying so; with `CI=true` a missing backend fails instead.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentry_sandbox::{
    Backend, BackendChoice, LaunchSpec, LimitOverride, Owner, SandboxConfig, SandboxHandle,
    StartOptions,
};

struct Env {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    ws: PathBuf,
    other_ws: PathBuf,
    handle: SandboxHandle,
}

async fn env(backend: BackendChoice) -> Option<Env> {
    env_with(backend, false).await
}

async fn env_with(backend: BackendChoice, egress: bool) -> Option<Env> {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let ws = data.join("workspaces/t1/u1");
    let other_ws = data.join("workspaces/t2/u2");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&other_ws).unwrap();
    std::fs::write(other_ws.join("secret.txt"), "other tenant's secret").unwrap();
    std::fs::write(data.join("agentry.db"), "database").unwrap();
    let config = SandboxConfig {
        backend,
        egress,
        launcher: Some(PathBuf::from(env!("CARGO_BIN_EXE_agentry-sandbox-exec"))),
        ..SandboxConfig::default()
    };
    let handle = SandboxHandle::start(
        &config,
        &StartOptions {
            data_dir: data.clone(),
            config_file: None,
        },
    )
    .await;
    if !handle.status().ready() {
        let why = handle.status().error.clone().unwrap_or_default();
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("the {backend:?} sandbox does not work here, and CI=true: {why}");
        }
        eprintln!("SKIPPING the {backend:?} sandbox tests: {why}");
        return None;
    }
    Some(Env {
        ws: std::fs::canonicalize(&ws).unwrap(),
        other_ws: std::fs::canonicalize(&other_ws).unwrap(),
        data: std::fs::canonicalize(&data).unwrap(),
        _tmp: tmp,
        handle,
    })
}

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn sh(e: &Env, script: &str, limits: LimitOverride) -> Out {
    let spec = LaunchSpec {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        workspace: e.ws.clone(),
        env: vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            // What an MCP server's configured `env` is: it must reach the program.
            ("SANDBOX_PROBE".into(), "configured value".into()),
        ],
        limits,
        owner: Owner {
            kind: "test".into(),
            ..Owner::default()
        },
        ..LaunchSpec::default()
    };
    let mut prepared = e.handle.prepare(&spec).unwrap();
    let child = prepared.command.spawn().unwrap();
    let group = prepared.started(child.id()).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the sandboxed command finished")
        .unwrap();
    group.release();
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn reaches_only_its_workspace(e: &Env) {
    let out = sh(
        e,
        "echo hi > made.txt && cat made.txt && pwd",
        LimitOverride::default(),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, format!("hi\n{}\n", e.ws.display()));
    assert_eq!(
        std::fs::read_to_string(e.ws.join("made.txt")).unwrap(),
        "hi\n"
    );

    let me = std::process::id();
    for (what, path) in [
        ("another tenant's workspace", e.other_ws.join("secret.txt")),
        ("the SQLite file", e.data.join("agentry.db")),
        (
            "the server's environment",
            PathBuf::from(format!("/proc/{me}/environ")),
        ),
        (
            "the server's memory",
            PathBuf::from(format!("/proc/{me}/mem")),
        ),
        ("/etc/shadow", PathBuf::from("/etc/shadow")),
    ] {
        let out = sh(
            e,
            &format!("cat '{}'", path.display()),
            LimitOverride::default(),
        )
        .await;
        assert_ne!(out.code, Some(0), "{what} was readable: {}", out.stdout);
        assert!(out.stdout.is_empty(), "{what} leaked: {}", out.stdout);
    }
    let out = sh(
        e,
        &format!("ls '{}'", e.data.display()),
        LimitOverride::default(),
    )
    .await;
    assert!(
        !out.stdout.contains("agentry.db"),
        "the data dir was listed: {}",
        out.stdout
    );
    // Writing outside the workspace fails.
    let out = sh(
        e,
        "echo x > /usr/local/pwned; echo x > /etc/pwned",
        LimitOverride::default(),
    )
    .await;
    assert!(!Path::new("/usr/local/pwned").exists() && !Path::new("/etc/pwned").exists());
    assert_ne!(out.code, Some(0));
}

async fn no_egress(e: &Env) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = sh(
        e,
        &format!("bash -c 'echo hello > /dev/tcp/127.0.0.1/{port}' && echo CONNECTED"),
        LimitOverride::default(),
    )
    .await;
    assert!(!out.stdout.contains("CONNECTED"), "{}", out.stderr);
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_err(),
        "a connection reached the listener"
    );
}

async fn limits_bind(e: &Env) {
    // A fork bomb with a tiny process limit: forks fail, the host is untouched.
    let out = sh(
        e,
        "i=0; while [ $i -lt 200 ]; do sleep 5 & i=$((i+1)); done; echo SPAWNED-ALL",
        LimitOverride {
            max_processes: Some(16),
            ..LimitOverride::default()
        },
    )
    .await;
    assert!(
        !out.stdout.contains("SPAWNED-ALL"),
        "200 processes were started under a limit of 16"
    );
    assert!(out.stderr.to_lowercase().contains("fork"), "{}", out.stderr);

    // A memory hog with a small address space fails to allocate.
    let out = sh(
        e,
        "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo ${#x}",
        LimitOverride {
            memory_bytes: Some(64 * 1024 * 1024),
            ..LimitOverride::default()
        },
    )
    .await;
    assert_ne!(out.stdout.trim(), "300000000", "the hog got its memory");

    // A file bigger than the limit is cut.
    let out = sh(
        e,
        "head -c 3000000 /dev/zero > big; wc -c < big",
        LimitOverride {
            max_file_bytes: Some(1_000_000),
            ..LimitOverride::default()
        },
    )
    .await;
    assert_eq!(out.stdout.trim(), "1000000", "{}", out.stderr);
}

/// A launch left running by a "crashed" server is killed by the next start on the same data dir.
async fn leftovers_are_reaped(e: &Env, backend: BackendChoice) {
    let spec = LaunchSpec {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), "sleep 60 & sleep 60; touch survived".into()],
        workspace: e.ws.clone(),
        owner: Owner {
            kind: "execute".into(),
            run_id: Some("run-1".into()),
            tool_call_id: Some("call-1".into()),
            ..Owner::default()
        },
        ..LaunchSpec::default()
    };
    let mut prepared = e.handle.prepare(&spec).unwrap();
    prepared.command.kill_on_drop(false);
    let child = prepared.command.spawn().unwrap();
    let group = prepared.started(child.id()).unwrap();
    let pgid = group.pgid();
    let record = group.record_file().unwrap().to_path_buf();
    assert!(record.exists());
    let body = std::fs::read_to_string(&record).unwrap();
    assert!(body.contains("run-1") && body.contains("call-1"), "{body}");
    // The crash: the handle is forgotten, nothing is killed.
    std::mem::forget(group);
    drop(child);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None).is_ok(),
        "the group runs"
    );
    let config = SandboxConfig {
        backend,
        launcher: Some(PathBuf::from(env!("CARGO_BIN_EXE_agentry-sandbox-exec"))),
        ..SandboxConfig::default()
    };
    let _again = SandboxHandle::start(
        &config,
        &StartOptions {
            data_dir: e.data.clone(),
            config_file: None,
        },
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the old group survived the restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!record.exists());
}

/// The program gets the environment it was launched with — the caller's allow-list and
/// configured variables, `HOME` and `TMPDIR` — and nothing of the server's own environment.
async fn gets_exactly_its_environment(e: &Env) {
    let out = sh(e, "env", LimitOverride::default()).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let vars: Vec<(&str, &str)> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .collect();
    let get = |k: &str| vars.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    assert_eq!(get("SANDBOX_PROBE"), Some("configured value"), "{vars:?}");
    assert_eq!(get("PATH"), Some("/usr/bin:/bin"));
    assert_eq!(get("HOME"), e.ws.to_str());
    assert!(get("TMPDIR").is_some(), "{vars:?}");
    for (key, _) in &vars {
        assert!(
            [
                "SANDBOX_PROBE",
                "PATH",
                "HOME",
                "TMPDIR",
                "PWD",
                "SHLVL",
                "_",
                "OLDPWD"
            ]
            .contains(key),
            "{key} reached the sandboxed program: {vars:?}"
        );
    }
}

async fn suite(backend: BackendChoice, expected: Backend) {
    let Some(e) = env(backend).await else { return };
    assert_eq!(e.handle.status().backend, Some(expected));
    gets_exactly_its_environment(&e).await;
    reaches_only_its_workspace(&e).await;
    no_egress(&e).await;
    limits_bind(&e).await;
    leftovers_are_reaped(&e, backend).await;
}

#[tokio::test]
async fn bwrap_backend() {
    suite(BackendChoice::Bwrap, Backend::Bwrap).await;
}

#[tokio::test]
async fn landlock_backend() {
    suite(BackendChoice::Landlock, Backend::Landlock).await;
}

#[tokio::test]
async fn auto_prefers_bwrap_and_an_impossible_backend_refuses_launches() {
    let Some(e) = env(BackendChoice::Auto).await else {
        return;
    };
    assert_eq!(e.handle.status().backend, Some(Backend::Bwrap));
    let config = SandboxConfig {
        backend: BackendChoice::Bwrap,
        bwrap_path: "/nonexistent/bwrap".into(),
        launcher: Some(PathBuf::from(env!("CARGO_BIN_EXE_agentry-sandbox-exec"))),
        ..SandboxConfig::default()
    };
    let broken = SandboxHandle::start(
        &config,
        &StartOptions {
            data_dir: e.data.clone(),
            config_file: None,
        },
    )
    .await;
    assert!(!broken.status().ready());
    let err = broken
        .prepare(&LaunchSpec {
            program: "true".into(),
            workspace: e.ws.clone(),
            ..LaunchSpec::default()
        })
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains("bwrap") && msg.contains("/nonexistent/bwrap"),
        "{msg}"
    );
}

/// Egress needs both the server's `sandbox.egress` and the launch's (the tenant's policy).
async fn egress_needs_both(backend: BackendChoice) {
    let Some(e) = env_with(backend, true).await else {
        return;
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let probe = |egress: bool| LaunchSpec {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            format!("bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo CONNECTED"),
        ],
        workspace: e.ws.clone(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        egress,
        ..LaunchSpec::default()
    };
    for (egress, want) in [(false, false), (true, true)] {
        let mut prepared = e.handle.prepare(&probe(egress)).unwrap();
        let child = prepared.command.spawn().unwrap();
        let group = prepared.started(child.id()).unwrap();
        let out = child.wait_with_output().await.unwrap();
        group.release();
        let connected = String::from_utf8_lossy(&out.stdout).contains("CONNECTED");
        assert_eq!(
            connected,
            want,
            "egress {egress}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
async fn egress_needs_the_server_and_the_tenant_with_bwrap() {
    egress_needs_both(BackendChoice::Bwrap).await;
}

#[tokio::test]
async fn egress_needs_the_server_and_the_tenant_with_landlock() {
    egress_needs_both(BackendChoice::Landlock).await;
}
