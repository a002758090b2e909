//! `docs/quickstart.md`, run literally: every ```sh block of the page, top to bottom, in one
//! bash, against a fresh `agentry serve` on its default port 8000 — in a network namespace of
//! the test's own (`unshare -n`, loopback only), so nothing else on the machine is in the way
//! and nothing leaves it. An HTML comment before a block says how the test treats it:
//!
//! - `quickstart-test: skip (…)`: not run (installing the binary; a Ctrl-C that needs a
//!   terminal, which `tests/api/chat_cli.rs` drives in tmux);
//! - `quickstart-test: background (…)`: `agentry serve` runs in the background and the test
//!   waits for `/api/v1/health/ready`;
//! - `quickstart-test: types the transcript's …`: the `agentry chat` in it reads, on stdin, the
//!   lines the block's transcript shows typed after `> ` (and after `approve? … > `).
//!
//! The binary under test and Node 22 from the test cache are first on PATH; the shell runs in
//! an empty directory (with `docs/` linked in for the Node example) with `set -euo pipefail`,
//! so a command that fails fails the test. Needs root for `unshare -n`; skipped elsewhere
//! except in CI.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One ```sh block and how the test treats it.
#[derive(Debug)]
struct Block {
    code: String,
    mode: Mode,
}

#[derive(Debug, PartialEq)]
enum Mode {
    Run,
    Skip,
    Background,
    Transcript,
}

fn blocks(markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut mode = Mode::Run;
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if let Some(note) = t.strip_prefix("<!-- quickstart-test:") {
            let note = note.trim();
            mode = if note.starts_with("skip") {
                Mode::Skip
            } else if note.starts_with("background") {
                Mode::Background
            } else if note.starts_with("types the transcript") {
                Mode::Transcript
            } else {
                panic!("an unknown quickstart-test note: {t}")
            };
            continue;
        }
        if t == "```sh" {
            let mut code = String::new();
            for l in lines.by_ref() {
                if l.trim() == "```" {
                    break;
                }
                code.push_str(l);
                code.push('\n');
            }
            out.push(Block {
                code,
                mode: std::mem::replace(&mut mode, Mode::Run),
            });
        } else if t.starts_with("```") || (!t.is_empty() && !t.starts_with("<!--")) {
            // A note applies to the block right after it.
            assert_eq!(
                mode,
                Mode::Run,
                "a quickstart-test note not followed by a block: {t}"
            );
        }
    }
    out
}

/// What a transcript shows typed: `# > LINE` and `# approve? … > LINE`.
fn typed(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|l| {
            let l = l.trim_start().strip_prefix('#')?.trim_start();
            if let Some(line) = l.strip_prefix("> ") {
                Some(line.to_string())
            } else if l.starts_with("approve?") {
                l.rsplit_once("> ").map(|(_, answer)| answer.to_string())
            } else {
                None
            }
        })
        .collect()
}

/// The page as one bash script.
fn script(blocks: &[Block]) -> String {
    let mut s = String::new();
    for (i, b) in blocks.iter().enumerate() {
        s.push_str(&format!("echo '### block {i}' >&2\n"));
        match b.mode {
            Mode::Skip => s.push_str("echo '(skipped)' >&2\n"),
            Mode::Run => s.push_str(&b.code),
            Mode::Background => {
                for l in b.code.lines() {
                    if l.trim_start().starts_with("agentry serve") {
                        let (cmd, comment) = l.split_once('#').unwrap_or((l, ""));
                        s.push_str(&format!(
                            "{} > \"$QS_DIR/serve.log\" 2>&1 &  #{comment}\nQS_SERVER=$!\n",
                            cmd.trim_end()
                        ));
                    } else {
                        s.push_str(l);
                        s.push('\n');
                    }
                }
                s.push_str(
                    "for _ in $(seq 600); do curl -sf -o /dev/null http://127.0.0.1:8000/api/v1/health/ready && break; sleep 0.1; done\n\
                     curl -sf -o /dev/null http://127.0.0.1:8000/api/v1/health/ready\n",
                );
            }
            Mode::Transcript => {
                let input = typed(&b.code);
                assert!(
                    !input.is_empty(),
                    "a transcript block types nothing: {}",
                    b.code
                );
                for l in b.code.lines() {
                    if l.trim_start().starts_with("agentry chat") {
                        s.push_str(&format!(
                            "{l} <<'QS_TYPED'\n{}\nQS_TYPED\n",
                            input.join("\n")
                        ));
                    } else {
                        s.push_str(l);
                        s.push('\n');
                    }
                }
            }
        }
    }
    s
}

/// What the README has a newcomer do before the quickstart, on the same data folder (the
/// quickstart is run from the repository's top directory, where the README's server keeps
/// `./agentry-data`): a first start with no admin key configured, which generates one into
/// `agentry-data/generated-admin-key` (stderr is not a terminal), and the command that start
/// names, `agentry admin bootstrap acme alice` (admin.md: with `--key-out agentry.key`). Then
/// the server is stopped, and the quickstart starts its own.
const README_FIRST: &str = r#"
agentry serve > "$QS_DIR/readme-serve.log" 2>&1 &
QS_README_SERVER=$!
for _ in $(seq 600); do curl -sf -o /dev/null http://127.0.0.1:8000/api/v1/health/ready && break; sleep 0.1; done
AGENTRY_ADMIN_KEY="$(cat agentry-data/generated-admin-key)" agentry admin bootstrap acme alice --key-out agentry.key | tee "$QS_DIR/readme-bootstrap.log"
kill $QS_README_SERVER; wait $QS_README_SERVER || true
"#;

#[test]
fn the_quickstart_runs_literally_top_to_bottom() {
    quickstart(None);
}

/// The README, then the quickstart on the same data folder (issue 31, item 10): `acme` and
/// `alice` exist already, and the quickstart goes on with them instead of failing silently
/// (a 409 hidden by `curl -s`, then `TENANT=null` and a key file holding `null`).
#[test]
fn the_quickstart_after_the_readme_on_the_same_data_folder() {
    quickstart(Some(README_FIRST));
}

fn quickstart(readme_first: Option<&str>) {
    let root_ok = nix_is_root();
    if !root_ok {
        assert!(
            std::env::var("CI").is_err(),
            "the quickstart test needs root (unshare -n) and runs as root in CI"
        );
        eprintln!("SKIPPING the quickstart test: it needs root for `unshare -n`");
        return;
    }
    let page = std::fs::read_to_string(repo().join("docs/quickstart.md")).unwrap();
    let blocks = blocks(&page);
    assert!(blocks.len() >= 10, "{blocks:#?}");
    assert_eq!(
        blocks.iter().filter(|b| b.mode == Mode::Background).count(),
        1,
        "one server start"
    );
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo().join("docs"), dir.path().join("docs")).unwrap();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_agentry"));
    let node = agentry_mcp::testing::node();
    let path = format!(
        "{}:{}:{}",
        bin.parent().unwrap().display(),
        node.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let body = format!(
        "set -euo pipefail\n\
         trap 'kill ${{QS_SERVER:-}} ${{QS_README_SERVER:-}} 2>/dev/null || true' EXIT\n\
         {}{}",
        readme_first.unwrap_or_default(),
        script(&blocks)
    );
    std::fs::write(dir.path().join("quickstart.sh"), &body).unwrap();
    let mut cmd = Command::new("unshare");
    cmd.args([
        "-n",
        "bash",
        "-c",
        "ip link set lo up && exec bash quickstart.sh",
    ])
    .current_dir(dir.path())
    .env("PATH", path)
    .env("HOME", dir.path())
    .env("QS_DIR", dir.path())
    .env("AGENTRY_DATA_DIR", dir.path().join("agentry-data"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AGENTRY_") && k != "AGENTRY_DATA_DIR" {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().expect("unshare and bash run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
    let all = format!(
        "--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- the server's log (last 40 lines)\n{}",
        log.lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        out.status.success(),
        "the quickstart failed:\n{body}\n{all}"
    );
    // What the page says each step shows (the chat client's own lines go to stderr).
    let shown = format!("{stdout}\n{stderr}");
    for (what, needle) in [
        ("/me answers the tenant user", "\"tenant_name\":\"acme\""),
        ("the chat client names its session", "session "),
        ("the approval is asked", "approval needed: write_file"),
        ("the approved tool ran", "\"bytes_written\":2"),
        ("the chat's run completed", "[done: completed"),
        ("the REST chat ends with done", "\"event_type\":\"done\""),
        ("SSE streams with ids", "id: "),
        ("the cancel", "\"status\":\"cancelled\""),
        (
            "the resumed Node client sees the slow answer",
            "You said: take your time",
        ),
        ("the metrics", "agentry_runs_total{status=\"completed\"}"),
    ] {
        assert!(
            shown.contains(needle),
            "{what}: `{needle}` not in the output\n{all}"
        );
    }
    // `--session "$SESSION"` joined the session the first chat made.
    let sessions: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix("session "))
        .collect();
    assert!(
        sessions.len() == 2 && sessions[0] == sessions[1],
        "the chat and the rejoin name one session: {sessions:?}\n{all}"
    );
    if readme_first.is_some() {
        // The quickstart went on with the README's tenant, and its key file holds a key.
        let bootstrap =
            std::fs::read_to_string(dir.path().join("readme-bootstrap.log")).unwrap_or_default();
        let tenant = bootstrap
            .lines()
            .find_map(|l| l.strip_prefix("tenant acme ("))
            .and_then(|rest| rest.split(')').next())
            .unwrap_or_else(|| {
                panic!("the README's bootstrap named no tenant: {bootstrap}\n{all}")
            });
        assert!(
            stdout.contains(&format!("\"tenant_id\":\"{tenant}\"")),
            "the quickstart's key is for the README's acme ({tenant})\n{all}"
        );
    }
    let key = std::fs::read_to_string(dir.path().join("agentry.key")).unwrap_or_default();
    assert!(
        key.starts_with("agk_"),
        "agentry.key holds a key: {key:?}\n{all}"
    );
    // The approved write happened, in alice's workspace.
    let written = walk(&dir.path().join("agentry-data/workspaces"))
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "a.txt"))
        .unwrap_or_else(|| panic!("no a.txt in the workspaces\n{all}"));
    assert_eq!(std::fs::read_to_string(written).unwrap(), "hi");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn nix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
