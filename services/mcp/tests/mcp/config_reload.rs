//! Hot reload of the MCP config file, end to end on real files in a temp directory: edits,
//! a bad file, editors that save by rename, deletion, polling without filesystem events.
//!
//! Waits are generous (the machine is shared); nothing here asserts how fast a reload is.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use agentry_mcp::client::{HttpAuth, McpTransportConfig};
use agentry_mcp::config_file::{ConfigDiff, LoadError, McpConfigWatcher, WatchOptions};

const WAIT: Duration = Duration::from_secs(30);

fn init_tracing() {
    if std::env::var("RUST_LOG").is_ok() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

fn start(path: &Path, options: WatchOptions) -> (McpConfigWatcher, Receiver<ConfigDiff>) {
    let (tx, rx) = mpsc::channel();
    let watcher = McpConfigWatcher::start_with(path, options, move |diff| {
        let _ = tx.send(diff);
    })
    .unwrap();
    (watcher, rx)
}

fn next_diff(rx: &Receiver<ConfigDiff>, what: &str) -> ConfigDiff {
    rx.recv_timeout(WAIT)
        .unwrap_or_else(|e| panic!("no config change within {WAIT:?} after {what}: {e}"))
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn names(entries: &[agentry_mcp::config_file::FileServerEntry]) -> Vec<String> {
    entries.iter().map(|e| e.config.name.clone()).collect()
}

fn current_names(w: &McpConfigWatcher) -> Vec<String> {
    names(&w.current().servers)
}

fn url_of(w: &McpConfigWatcher, name: &str) -> String {
    match &w.current().get(name).unwrap().config.transport {
        McpTransportConfig::Http(h) => h.url.clone(),
        other => panic!("{other:?}"),
    }
}

/// Write like an editor that saves in place (truncate, then write).
fn write_in_place(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// Write like most editors and config tools: a new file, renamed over the old one.
fn write_by_rename(path: &Path, text: &str) {
    let tmp = path.with_file_name(".mcp.yaml.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Write like vim with `backupcopy=no`: the old file is renamed to a backup, a new file is
/// written under the name, and the backup is removed.
fn write_like_vim(path: &Path, text: &str) {
    let backup = path.with_file_name("mcp.yaml~");
    std::fs::rename(path, &backup).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::remove_file(&backup).unwrap();
}

const V1: &str = r#"
mcp_servers:
  external_services:
    - name: github_tools
      url: https://one.example/mcp
      authentication: {type: bearer_token, token_env: PATH}
  local_services:
    - name: file_manager
      command: npx
      args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv"]
"#;

const V2: &str = r#"
mcp_servers:
  external_services:
    - name: github_tools
      url: https://two.example/mcp
      authentication: {type: bearer_token, token_env: PATH}
    - name: search
      url: https://search.example/mcp
"#;

/// V2 with only github_tools' policy changed.
const V3: &str = r#"
mcp_servers:
  external_services:
    - name: github_tools
      url: https://two.example/mcp
      authentication: {type: bearer_token, token_env: PATH}
      rate_limit: 50
    - name: search
      url: https://search.example/mcp
"#;

const BAD: &str = r#"
mcp_servers:
  external_services:
    - name: github_tools
      url: ftp://nope/mcp
      authentcation: {type: bearer_token}
"#;

#[test]
fn edits_bad_files_renames_and_deletion_are_handled_end_to_end() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.yaml");
    write_in_place(&path, V1);
    // Polling effectively off: every change below must arrive as a filesystem event.
    let options = WatchOptions {
        poll_interval: Duration::from_secs(3600),
        ..WatchOptions::default()
    };
    let (watcher, rx) = start(&path, options);
    assert!(watcher.uses_fs_events());
    assert_eq!(
        current_names(&watcher),
        vec!["github_tools", "file_manager"]
    );
    assert_eq!(watcher.last_error(), None);

    // An edit: one server changed, one removed, one added.
    write_in_place(&path, V2);
    let diff = next_diff(&rx, "editing the file");
    assert_eq!(names(&diff.added), vec!["search"]);
    assert_eq!(names(&diff.removed), vec!["file_manager"]);
    assert_eq!(diff.changed.len(), 1);
    assert_eq!(diff.changed[0].name(), "github_tools");
    assert!(diff.changed[0].needs_reconnect());
    assert_eq!(names(&diff.config.servers), vec!["github_tools", "search"]);
    assert_eq!(current_names(&watcher), vec!["github_tools", "search"]);
    assert_eq!(url_of(&watcher, "github_tools"), "https://two.example/mcp");

    // A bad file: the old config stays, the reason is kept, nobody is called.
    write_in_place(&path, BAD);
    wait_until("the bad file to be noticed", || {
        watcher.last_error().is_some()
    });
    let why = watcher.last_error().unwrap();
    assert!(
        why.contains("mcp_servers.external_services[0].url")
            && why.contains("mcp_servers.external_services[0].authentcation"),
        "{why}"
    );
    assert_eq!(current_names(&watcher), vec!["github_tools", "search"]);
    assert_eq!(url_of(&watcher, "github_tools"), "https://two.example/mcp");
    assert!(matches!(rx.try_recv(), Err(mpsc::TryRecvError::Empty)));

    // Fixed: the change is against the last good config (policy only, so no reconnect).
    write_in_place(&path, V3);
    let diff = next_diff(&rx, "fixing the file");
    assert!(diff.added.is_empty() && diff.removed.is_empty());
    assert_eq!(diff.changed.len(), 1);
    assert!(!diff.changed[0].needs_reconnect());
    assert_eq!(diff.changed[0].new.policy.rate_limit_per_minute, Some(50));
    assert_eq!(watcher.last_error(), None);

    // Saved by writing a new file and renaming it over the old one.
    let v4 = format!("{V3}    - name: renamed_in\n      url: https://r.example/mcp\n");
    write_by_rename(&path, &v4);
    let diff = next_diff(&rx, "a rename-over save");
    assert_eq!(names(&diff.added), vec!["renamed_in"]);
    assert!(diff.removed.is_empty() && diff.changed.is_empty());

    // Saved the vim way: old file renamed away, new one written, backup removed.
    let v5 = r#"
servers:
  - name: github_tools
    url: https://two.example/mcp
    auth: {type: api_key, key_env: PATH}
    rate_limit: 50
  - name: search
    url: https://search.example/mcp
"#;
    write_like_vim(&path, v5);
    let diff = next_diff(&rx, "a vim-style save");
    assert_eq!(names(&diff.removed), vec!["renamed_in"]);
    assert_eq!(diff.changed.len(), 1);
    let McpTransportConfig::Http(h) = &diff.changed[0].new.config.transport else {
        panic!()
    };
    assert!(matches!(h.auth, HttpAuth::ApiKey { .. }));
    assert_eq!(current_names(&watcher), vec!["github_tools", "search"]);

    // Deleted: the last good config stays.
    std::fs::remove_file(&path).unwrap();
    wait_until("the deletion to be noticed", || {
        watcher.last_error().is_some_and(|e| e.contains("deleted"))
    });
    assert_eq!(current_names(&watcher), vec!["github_tools", "search"]);
    assert!(matches!(rx.try_recv(), Err(mpsc::TryRecvError::Empty)));

    // Created again: the watch is still there.
    write_in_place(
        &path,
        "servers: [{name: search, url: 'https://search.example/mcp'}]\n",
    );
    let diff = next_diff(&rx, "re-creating the file");
    assert_eq!(names(&diff.removed), vec!["github_tools"]);
    assert_eq!(current_names(&watcher), vec!["search"]);
    assert_eq!(watcher.last_error(), None);

    // Dropped: the thread ends and the callback (holding the sender) is gone with it.
    drop(watcher);
    write_in_place(&path, V1);
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(2)),
        Err(RecvTimeoutError::Disconnected)
    ));
}

#[test]
fn polling_alone_notices_changes() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.yaml");
    write_in_place(&path, V1);
    let options = WatchOptions {
        debounce: Duration::from_millis(100),
        poll_interval: Duration::from_millis(250),
        use_notify: false,
    };
    let (watcher, rx) = start(&path, options);
    assert!(!watcher.uses_fs_events());
    write_in_place(&path, V2);
    let diff = next_diff(&rx, "an edit seen only by polling");
    assert_eq!(names(&diff.added), vec!["search"]);
    write_by_rename(&path, V3);
    let diff = next_diff(&rx, "a rename seen only by polling");
    assert_eq!(diff.changed.len(), 1);
    assert_eq!(current_names(&watcher), vec!["github_tools", "search"]);
}

#[test]
fn a_missing_file_starts_empty_and_is_loaded_when_created() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("later.yaml");
    let (watcher, rx) = start(&path, WatchOptions::default());
    assert!(watcher.current().is_empty());
    assert_eq!(watcher.last_error(), None);
    write_by_rename(&path, V1);
    let diff = next_diff(&rx, "creating the file");
    assert_eq!(names(&diff.added), vec!["github_tools", "file_manager"]);
    assert_eq!(watcher.current().servers.len(), 2);
}

#[test]
fn a_bad_file_at_start_is_refused_with_every_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.yaml");
    write_in_place(&path, BAD);
    let err = McpConfigWatcher::start(&path, |_| {}).unwrap_err();
    let LoadError::Invalid(err) = err else {
        panic!("{err:?}")
    };
    let paths: Vec<&str> = err.issues.iter().map(|i| i.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            "mcp_servers.external_services[0].authentcation",
            "mcp_servers.external_services[0].url"
        ]
    );
    assert_eq!(err.file.as_deref(), Some(path.as_path()));
}

#[test]
fn an_empty_file_during_a_reload_keeps_the_config_and_a_panicking_handler_does_not_stop_it() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.yaml");
    write_in_place(&path, V1);
    let (tx, rx) = mpsc::channel();
    let watcher = McpConfigWatcher::start(&path, move |diff: ConfigDiff| {
        let boom = diff.added.iter().any(|e| e.config.name == "boom");
        let _ = tx.send(diff);
        assert!(!boom, "handler fails on purpose");
    })
    .unwrap();

    write_in_place(&path, "");
    wait_until("the empty file to be noticed", || {
        watcher.last_error().is_some_and(|e| e.contains("empty"))
    });
    assert_eq!(watcher.current().servers.len(), 2);

    write_in_place(&path, "servers: [{name: boom, command: node}]\n");
    let diff = next_diff(&rx, "a change whose handler panics");
    assert_eq!(names(&diff.added), vec!["boom"]);
    // The watcher survived the panic and keeps delivering.
    write_in_place(
        &path,
        "servers: [{name: boom, command: node}, {name: after, command: node}]\n",
    );
    let diff = next_diff(&rx, "the change after the panic");
    assert_eq!(names(&diff.added), vec!["after"]);
    assert_eq!(current_names(&watcher), vec!["boom", "after"]);
}

#[test]
fn check_now_reloads_without_waiting_for_events() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.yaml");
    write_in_place(&path, V1);
    let options = WatchOptions {
        use_notify: false,
        // Far longer than the test: only check_now can see the change.
        poll_interval: Duration::from_secs(3600),
        ..WatchOptions::default()
    };
    let (watcher, rx) = start(&path, options);
    write_in_place(&path, V2);
    watcher.check_now();
    let diff = next_diff(&rx, "check_now");
    assert_eq!(names(&diff.added), vec!["search"]);
}
