//! End to end: the configuration stumbles a newcomer hit (issue 15), each run through the real
//! `agentry` binary: the config file beside the binary, misspelt sections, keys and variables,
//! what `agentry config` shows, a closed stdout, and `serve --host/--port`; and an OTLP
//! protocol this build does not speak (issue 14).

use crate::support;

use support::{agentry, run};

use std::process::{Output, Stdio};

use tokio::io::{AsyncBufReadExt, BufReader};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn agentry_toml_is_read_beside_a_file_named_agentry() {
    let dir = tempfile::tempdir().unwrap();
    // The usual layout: the binary and its config side by side, `./agentry serve`.
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_agentry"), dir.path().join("agentry")).unwrap();
    std::fs::write(
        dir.path().join("agentry.toml"),
        "[server]\nport = 7123\n[hitl]\ntimeout_secs = 42\n",
    )
    .unwrap();
    let out = run(dir.path(), &["config"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["server"]["port"], 7123);
    assert_eq!(v["hitl"]["timeout_secs"], 42);

    // `--config` takes any name, and nothing but the name given.
    std::fs::write(dir.path().join("other.conf"), "[server]\nport = 7124\n").unwrap();
    let out = run(dir.path(), &["--config", "other.conf", "config"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["server"]["port"], 7124);
}

#[test]
fn misspelt_sections_keys_and_variables_stop_the_start_with_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("agentry.toml"),
        "[databse]\nurl = \"sqlite://x\"\n",
    )
    .unwrap();
    for cmd in ["serve", "config"] {
        let out = run(dir.path(), &[cmd], &[]);
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        assert!(
            stderr(&out).contains("`databse` (did you mean `database`?)"),
            "{cmd}: {}",
            stderr(&out)
        );
    }
    std::fs::write(dir.path().join("agentry.toml"), "[server]\nprot = 1\n").unwrap();
    let out = run(dir.path(), &["serve"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("`server.prot` (did you mean `server.port`?)"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_file(dir.path().join("agentry.toml")).unwrap();
    let out = run(dir.path(), &["serve"], &[("AGENTRY_DATADIR", "/tmp/x")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("AGENTRY_DATADIR (did you mean AGENTRY_DATA_DIR?)"),
        "{}",
        stderr(&out)
    );
    // The terminal client's variables do not stop a server started from the same shell.
    let out = run(
        dir.path(),
        &["config"],
        &[("AGENTRY_KEY", "k"), ("AGENTRY_URL", "http://127.0.0.1:1")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

/// gRPC export is not built in: asking for it stops the start, saying what to do, rather than
/// sending OTLP/HTTP to a gRPC port and dropping every span.
#[test]
fn an_otlp_protocol_other_than_http_protobuf_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &["serve", "--port", "0"],
        &[
            ("AGENTRY_OTEL__ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc: Agentry exports traces over OTLP/HTTP"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn config_shows_the_database_with_only_the_password_masked() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &["config"],
        &[(
            "AGENTRY_DATABASE__URL",
            "postgres://agentry:hunter2@db.example:5432/agentry",
        )],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("hunter2"), "{text}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["database"]["url"],
        "postgres://agentry:***@db.example:5432/agentry"
    );
    assert_eq!(v["auth"]["admin_key"], "unset");
    assert_eq!(v["mcp"]["encryption_key"], "unset");

    let out = run(
        dir.path(),
        &["config"],
        &[("AGENTRY_AUTH__ADMIN_KEY", "an-admin-key-long-enough")],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["auth"]["admin_key"], "***");
    let sqlite = format!(
        "sqlite://{}/agentry.db?mode=rwc",
        dir.path().join("data").display()
    );
    assert_eq!(v["database"]["url"], sqlite.as_str());
}

#[test]
fn a_closed_stdout_ends_the_output_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["config"][..], &["--help"][..], &["chat", "--help"][..]] {
        // The reader is gone before the first write, as with `| head -0`.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = agentry(dir.path(), args, &[])
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.status.success(), "{args:?}: {:?} {err}", out.status);
    }
}

#[tokio::test]
async fn serve_takes_host_and_port_flags_and_shows_a_generated_admin_key_with_how_to_use_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::from(agentry(
        dir.path(),
        &["serve", "--host", "127.0.0.1", "--port", "0"],
        &[
            // Both would fail: the flags must win.
            ("AGENTRY_SERVER__HOST", "not-an-address"),
            ("AGENTRY_SERVER__PORT", "1"),
            ("AGENTRY_LOG__FORMAT", "json"),
        ],
    ));
    let mut child = cmd
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut hint = false;
    let port = support::listening_port(&mut lines, |line| {
        // With no admin key, the first start generates one and says where it is (no terminal
        // here: in a file, not the log) and how to use it.
        hint |= line.contains("generated-admin-key") && line.contains("agentry admin bootstrap");
    })
    .await;
    assert_ne!(port, 1);
    assert!(hint, "the start log shows no generated admin key");
    let res = reqwest::get(format!("http://127.0.0.1:{port}/api/v1/health"))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}
