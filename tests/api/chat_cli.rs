//! The terminal client, `agentry chat`, driven in a real terminal (tmux) against the real
//! server and its built-in scripted model: a chat with an approval (pretty arguments, the diff),
//! slash commands kept local, Ctrl-C cancelling the run on the server, `--session` showing the
//! history, giving up when the server is gone, and a closed stdout (`| head`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::Value;

use crate::ctx::{Ctx, unique};

/// One `agentry chat` in its own tmux server (its own socket, killed on drop). The pane stays
/// after the client exits and shows `[exit N]`.
pub(crate) struct Term {
    socket: String,
    home: tempfile::TempDir,
}

impl Term {
    pub(crate) fn start(ctx: &Ctx, key: &str, args: &[&str]) -> Term {
        let home = tempfile::tempdir().unwrap();
        let key_file = home.path().join("key");
        std::fs::write(&key_file, key).unwrap();
        let mut cmd = format!(
            "{} chat --server {} --key-file {}",
            env!("CARGO_BIN_EXE_agentry"),
            ctx.server.base,
            key_file.display()
        );
        for a in args {
            cmd.push(' ');
            cmd.push_str(a);
        }
        let term = Term {
            socket: unique("agentry-chat"),
            home,
        };
        let shell = format!("{cmd}; echo \"[exit $?]\"; sleep 600");
        let ok = Command::new("tmux")
            .args(["-L", &term.socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-s", "chat", "-x", "160", "-y", "50"])
            .args(["-e", &format!("HOME={}", term.home.path().display())])
            .args(["-e", "TERM=xterm-256color"])
            .arg(shell)
            .status()
            .expect("tmux is installed (scripts/install-api-test-deps.sh)");
        assert!(ok.success());
        term
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Everything the pane shows, with its scrollback, wrapped lines joined.
    pub(crate) fn screen(&self) -> String {
        // A leading newline, so every line, the first too, starts with `\n`.
        let text = self.tmux(&["capture-pane", "-p", "-J", "-S", "-500", "-t", "chat"]);
        format!("\n{text}")
    }

    fn type_line(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "chat", "-l", text]);
        self.tmux(&["send-keys", "-t", "chat", "Enter"]);
    }

    fn key(&self, key: &str) {
        self.tmux(&["send-keys", "-t", "chat", key]);
    }

    /// Wait until the screen shows `needle` `times` times (generous bound: a shared machine).
    async fn wait_for_n(&self, needle: &str, times: usize) -> String {
        let started = Instant::now();
        loop {
            let screen = self.screen();
            if screen.matches(needle).count() >= times {
                return screen;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{needle:?} (×{times}) never appeared:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Type `text` once the `n`th prompt is up: keys sent before the line editor reads may be
    /// lost.
    pub(crate) async fn type_at_prompt(&self, n: usize, text: &str) {
        self.wait_for_n("\n> ", n).await;
        self.type_line(text);
    }

    pub(crate) async fn wait_for(&self, needle: &str) -> String {
        self.wait_for_n(needle, 1).await
    }

    fn session(&self) -> String {
        let screen = self.screen();
        screen
            .lines()
            .find_map(|l| l.strip_prefix("session "))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| panic!("no session line:\n{screen}"))
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

async fn executions(ctx: &Ctx, key: &str, session: &str) -> Vec<Value> {
    let r = ctx
        .call(
            Method::GET,
            &format!("/api/v1/executions?session_id={session}"),
            Some(key),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["items"].as_array().cloned().unwrap_or_default()
}

pub async fn chat_with_an_approval_and_local_commands(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let term = Term::start(ctx, &t.member.key, &[]);
    term.type_at_prompt(
        1,
        r#"//tool edit_file {"file_path": "a.txt", "old_string": "x", "new_string": "y"}"#,
    )
    .await;
    let screen = term.wait_for("approve? [y]es").await;
    // The arguments pretty-printed, and the change as a diff.
    assert!(screen.contains("! approval needed: edit_file"), "{screen}");
    assert!(
        screen.contains("      \"file_path\": \"a.txt\","),
        "{screen}"
    );
    assert!(screen.contains("    -x\n"), "{screen}");
    assert!(screen.contains("    +y\n"), "{screen}");
    term.type_line("n not today");
    let screen = term.wait_for("[done: rejected").await;
    assert!(
        screen.contains("the user rejected this call: not today"),
        "{screen}"
    );
    let session = term.session();

    // A file that exists, approved this time.
    term.type_at_prompt(
        2,
        r#"//tool write_file {"file_path": "b.txt", "content": "hi"}"#,
    )
    .await;
    term.wait_for_n("approve? [y]es", 2).await;
    term.type_line("y");
    let screen = term.wait_for("[done: completed").await;
    assert!(screen.contains("\"created\":true"), "{screen}");

    // Slash commands stay here: no run starts for them.
    term.type_at_prompt(3, "/help").await;
    term.wait_for("/cancel          cancel the current run")
        .await;
    term.type_at_prompt(4, "/sessions").await;
    let screen = term.wait_for("join one with").await;
    assert!(screen.contains(&format!("* {session}")), "{screen}");
    term.type_at_prompt(5, "/agent").await;
    let screen = term.wait_for("start a session with one").await;
    assert!(screen.contains("Default assistant"), "{screen}");
    term.type_at_prompt(6, "/whatever").await;
    term.wait_for("unknown command /whatever").await;
    assert_eq!(executions(ctx, &t.member.key, &session).await.len(), 2);

    // `/new` moves to a fresh session.
    term.type_at_prompt(7, "/new").await;
    term.wait_for_n("\nsession ", 2).await;
    term.type_at_prompt(8, "/quit").await;
    term.wait_for("[exit 0]").await;

    // Joining the first session shows its history; nothing is replayed as new.
    let again = Term::start(ctx, &t.member.key, &["--session", &session]);
    let screen = again.wait_for("/help lists the commands").await;
    assert!(
        screen.contains(r#"> /tool write_file {"file_path": "b.txt", "content": "hi"}"#),
        "{screen}"
    );
    assert!(
        screen.contains("(scripted) Tool write_file returned"),
        "{screen}"
    );
    assert!(!screen.contains("approve? [y]es"), "{screen}");
    // Two `> ` lines of history, then the prompt.
    again.type_at_prompt(3, "hello again").await;
    let screen = again.wait_for("You said: hello again").await;
    assert_eq!(screen.matches("[done: completed").count(), 1, "{screen}");
    assert_eq!(executions(ctx, &t.member.key, &session).await.len(), 3);
}

pub async fn ctrl_c_cancels_the_run_on_the_server(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let term = Term::start(ctx, &t.member.key, &[]);
    // Two lines in one message: a trailing `\` continues.
    term.type_at_prompt(1, "//sleep 60000\\").await;
    term.type_line("slow answer");
    term.wait_for("working…").await;
    let session = term.session();
    term.key("C-c");
    let screen = term.wait_for("[done: cancelled").await;
    assert!(
        screen.contains("[cancelling the run; Ctrl-C again quits]"),
        "{screen}"
    );
    let runs = executions(ctx, &t.member.key, &session).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["status"], "cancelled", "{runs:?}");
    // At the prompt, Ctrl-C warns once, then quits.
    term.wait_for_n("\n> ", 2).await;
    term.key("C-c");
    term.wait_for("(Ctrl-C again").await;
    term.key("C-c");
    term.wait_for("[exit 130]").await;
}

pub async fn a_gone_server_is_retried_visibly_then_given_up(ctx: &mut Ctx) {
    let t = ctx.tenant().await;
    let term = Term::start(ctx, &t.member.key, &["--give-up-after", "3"]);
    // One full exchange first: the prompt is drawn before the WebSocket is
    // up, and a server killed before the handshake finishes is "cannot
    // reach", not "connection lost" (CI hit that race).
    term.type_at_prompt(1, "hello").await;
    term.wait_for("[done: completed").await;
    ctx.server.child.kill().await.unwrap();
    let screen = term.wait_for("[exit 1]").await;
    assert!(
        screen.contains("[connection lost; reconnecting]"),
        "{screen}"
    );
    assert!(screen.contains("retry 1 in"), "{screen}");
    assert!(screen.contains("has not answered for 3 s"), "{screen}");
    assert!(screen.contains("agentry chat --session "), "{screen}");
}

pub async fn a_closed_stdout_and_a_missing_key(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let bin = env!("CARGO_BIN_EXE_agentry");
    // `agentry chat -m … | head -0`: the reader is gone before the answer arrives.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(bin)
        .args(["chat", "--server", &ctx.server.base, "-m", "hello"])
        .env("AGENTRY_KEY", &t.member.key)
        .stdin(Stdio::null())
        .stdout(writer)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.status.success(), "{:?} {err}", out.status);
    // With a reader, the answer arrives; the key came from AGENTRY_KEY.
    let out = Command::new(bin)
        .args(["chat", "--server", &ctx.server.base, "-m", "hello"])
        .env("AGENTRY_KEY", &t.member.key)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("You said: hello"));
    // No key at all: a message that says how to give one.
    let out = Command::new(bin)
        .args(["chat", "--server", &ctx.server.base, "-m", "hello"])
        .env_remove("AGENTRY_KEY")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--key-file FILE or set AGENTRY_KEY"), "{err}");
    // A revoked or wrong key: a clear refusal, no retrying.
    let dir = tempfile::tempdir().unwrap();
    let key_file: PathBuf = dir.path().join("key");
    std::fs::write(&key_file, "agk_wrong_key_0000000000000000000000").unwrap();
    let out = Command::new(bin)
        .args(["chat", "--server", &ctx.server.base, "-m", "hello"])
        .arg("--key-file")
        .arg(&key_file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("401"), "{err}");
}

/// The request id of the session's last `hitl_request`.
async fn pending_request(ctx: &Ctx, key: &str, session: &str) -> String {
    let started = Instant::now();
    loop {
        let r = ctx
            .ok(
                Method::GET,
                &format!("/api/v1/sessions/{session}/events?after_seq=0&limit=1000"),
                key,
                None,
                200,
            )
            .await;
        let last = r["events"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|e| e["event_type"] == "hitl_request")
            .map(|e| e["data"]["request_id"].as_str().unwrap().to_string());
        if let Some(id) = last {
            return id;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no hitl_request"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue 31 item 6: an approval prompt goes away when its request is decided by anyone. Here
/// it is approved over REST (as the console would) while the terminal shows `approve?`: the
/// prompt is withdrawn at once, and the `y` typed next is neither an answer nor a message. The
/// same after Ctrl-C, which cancels the run while the prompt is up. A line typed at the `> `
/// prompt that follows is a message again.
pub async fn an_approval_decided_elsewhere_withdraws_the_prompt(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let term = Term::start(ctx, key, &[]);
    term.type_at_prompt(
        1,
        r#"//tool write_file {"file_path": "elsewhere.txt", "content": "hi"}"#,
    )
    .await;
    term.wait_for("approve? [y]es").await;
    let session = term.session();
    let request = pending_request(ctx, key, &session).await;
    ctx.ok(
        Method::POST,
        &format!("/api/v1/sessions/{session}/approvals/{request}"),
        key,
        Some(serde_json::json!({"type": "approve"})),
        200,
    )
    .await;
    let screen = term
        .wait_for("the approval prompt is withdrawn; a line typed at it is not sent]")
        .await;
    assert!(
        screen.contains("[the request was decided elsewhere"),
        "{screen}"
    );
    term.wait_for("[done: completed").await;
    // The stale prompt no longer asks for an approval: it was redrawn.
    term.wait_for("(withdrawn: press Enter)").await;
    term.type_line("y");
    term.wait_for("[not sent: \"y\" was typed at a withdrawn prompt")
        .await;
    // Then the ordinary prompt, where a line is a message.
    term.type_at_prompt(2, "a real message").await;
    term.wait_for("You said: a real message").await;
    let runs = executions(ctx, key, &session).await;
    let inputs: Vec<&str> = runs.iter().map(|r| r["input"].as_str().unwrap()).collect();
    assert_eq!(inputs.len(), 2, "{inputs:?}");
    assert!(
        !inputs.contains(&"y"),
        "the y was sent as a message: {inputs:?}"
    );

    // Ctrl-C while the prompt is up cancels the run; the prompt goes with the run.
    term.type_at_prompt(
        3,
        r#"//tool write_file {"file_path": "cancelled.txt", "content": "hi"}"#,
    )
    .await;
    // The first approval prompt was redrawn when withdrawn: this is the only one on screen.
    term.wait_for("approve? [y]es").await;
    term.key("C-c");
    term.wait_for("[done: cancelled").await;
    term.wait_for("[the run ended (cancelled): the approval prompt is withdrawn")
        .await;
    term.type_line("y");
    term.wait_for_n("[not sent: \"y\" was typed at a withdrawn prompt", 2)
        .await;
    term.type_at_prompt(4, "after the cancel").await;
    term.wait_for("You said: after the cancel").await;
    let runs = executions(ctx, key, &session).await;
    let inputs: Vec<&str> = runs.iter().map(|r| r["input"].as_str().unwrap()).collect();
    assert_eq!(inputs.len(), 4, "{inputs:?}");
    assert!(
        !inputs.contains(&"y"),
        "the y was sent as a message: {inputs:?}"
    );
    let files = ctx
        .call(Method::GET, "/api/v1/files/cancelled.txt", Some(key), None)
        .await;
    assert_eq!(
        files.status, 404,
        "the cancelled call did not run: {}",
        files.body
    );
}
