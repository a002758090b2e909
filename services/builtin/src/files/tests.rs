use std::os::unix::fs::PermissionsExt;

use agentry_schema::events::{EventPayload, FileOperationKind};
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::test_support::{ctx, ctx_with_quota};
use agentry_tools::tool::ToolContext;

fn cfg() -> BuiltinConfig {
    BuiltinConfig::default()
}

fn tool(name: &str, cfg: &BuiltinConfig) -> Arc<dyn Tool> {
    tools(cfg)
        .into_iter()
        .find(|t| t.spec().name == name)
        .unwrap()
}

async fn call(name: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    tool(name, &cfg()).call(args, ctx).await
}

fn file_op(out: &ToolOutput) -> &FileOperationData {
    match out.events.as_slice() {
        [EventPayload::FileOperation(op)] => op,
        other => panic!("expected one file_operation event, got {other:?}"),
    }
}

struct Ws {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    ctx: ToolContext,
}

fn workspace() -> Ws {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOP SECRET\n").unwrap();
    let ctx = ctx(&root);
    Ws {
        root,
        outside,
        ctx,
        _tmp: tmp,
    }
}

#[tokio::test]
async fn write_then_read_round_trips_and_reports_file_operations() {
    let ws = workspace();
    let out = call(
        "write_file",
        json!({"file_path": "notes/a.txt", "content": "one\ntwo\nthree"}),
        &ws.ctx,
    )
    .await
    .unwrap();
    assert_eq!(out.content["file_path"], "notes/a.txt");
    assert_eq!(out.content["created"], true);
    assert_eq!(out.content["bytes_written"], 13);
    let op = file_op(&out);
    assert_eq!(op.operation, FileOperationKind::Write);
    assert_eq!(op.file_path, "notes/a.txt");
    assert_eq!(op.metrics.lines_written, 3);
    assert_eq!(op.metrics.lines_added, 3);
    assert_eq!(op.metrics.lines_removed, 0);
    let diff = op.diff.as_deref().unwrap();
    assert!(diff.contains("+++ b/notes/a.txt"), "{diff}");
    assert!(diff.contains("+two"), "{diff}");
    assert_eq!(
        std::fs::read_to_string(ws.root.join("notes/a.txt")).unwrap(),
        "one\ntwo\nthree"
    );

    let out = call("read_file", json!({"file_path": "notes/a.txt"}), &ws.ctx)
        .await
        .unwrap();
    assert_eq!(out.content["content"], "one\ntwo\nthree");
    assert_eq!(out.content["total_lines"], 3);
    assert_eq!(out.content["truncated"], false);
    let op = file_op(&out);
    assert_eq!(op.operation, FileOperationKind::Read);
    assert_eq!(op.metrics.lines_read, 3);
    assert_eq!(op.diff, None);
}

#[tokio::test]
async fn overwrite_diff_counts_added_and_removed_lines_and_append_appends() {
    let ws = workspace();
    call(
        "write_file",
        json!({"file_path": "f", "content": "a\nb\nc\n"}),
        &ws.ctx,
    )
    .await
    .unwrap();
    let out = call(
        "write_file",
        json!({"file_path": "f", "content": "a\nB\nc\nd\n"}),
        &ws.ctx,
    )
    .await
    .unwrap();
    assert_eq!(out.content["created"], false);
    let op = file_op(&out);
    assert_eq!((op.metrics.lines_added, op.metrics.lines_removed), (2, 1));
    let out = call(
        "write_file",
        json!({"file_path": "f", "content": "e\n", "append": true}),
        &ws.ctx,
    )
    .await
    .unwrap();
    assert_eq!(file_op(&out).metrics.lines_added, 1);
    assert_eq!(
        std::fs::read_to_string(ws.root.join("f")).unwrap(),
        "a\nB\nc\nd\ne\n"
    );
}

#[tokio::test]
async fn overwriting_keeps_the_file_mode() {
    let ws = workspace();
    std::fs::create_dir_all(&ws.root).unwrap();
    std::fs::write(ws.root.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        ws.root.join("run.sh"),
        std::fs::Permissions::from_mode(0o750),
    )
    .unwrap();
    call(
        "write_file",
        json!({"file_path": "run.sh", "content": "#!/bin/sh\necho hi\n"}),
        &ws.ctx,
    )
    .await
    .unwrap();
    let mode = std::fs::metadata(ws.root.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o750);
    // No temp file is left behind.
    let names: Vec<_> = std::fs::read_dir(&ws.root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("run.sh")]);
}

#[tokio::test]
async fn ranged_reads_return_the_requested_lines() {
    let ws = workspace();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    call(
        "write_file",
        json!({"file_path": "ten.txt", "content": text}),
        &ws.ctx,
    )
    .await
    .unwrap();
    let out = call(
        "read_file",
        json!({"file_path": "ten.txt", "offset": 4, "limit": 3}),
        &ws.ctx,
    )
    .await
    .unwrap();
    assert_eq!(out.content["content"], "line 4\nline 5\nline 6\n");
    assert_eq!(out.content["lines_read"], 3);
    assert_eq!(out.content["start_line"], 4);
    assert_eq!(out.content["total_lines"], 10);
    assert_eq!(file_op(&out).metrics.lines_read, 3);
    let out = call(
        "read_file",
        json!({"file_path": "ten.txt", "offset": 20}),
        &ws.ctx,
    )
    .await
    .unwrap();
    assert_eq!(out.content["content"], "");
    assert_eq!(out.content["lines_read"], 0);
}

#[tokio::test]
async fn read_size_limit_refuses_whole_reads_and_caps_ranged_ones() {
    let ws = workspace();
    let small = BuiltinConfig {
        read_max_bytes: 20,
        ..cfg()
    };
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    std::fs::create_dir_all(&ws.root).unwrap();
    std::fs::write(ws.root.join("big.txt"), &text).unwrap();
    let read = tool("read_file", &small);
    let err = read
        .call(json!({"file_path": "big.txt"}), &ws.ctx)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::InvalidArguments { message, .. } if message.contains("offset")),
        "{err:?}"
    );
    let out = read
        .call(
            json!({"file_path": "big.txt", "offset": 1, "limit": 100}),
            &ws.ctx,
        )
        .await
        .unwrap();
    // Three lines would be 21 bytes, one over the limit.
    assert_eq!(out.content["content"], "line 1\nline 2\n");
    assert_eq!(out.content["truncated"], true);
}

#[tokio::test]
async fn binary_files_and_directories_are_not_read_as_text() {
    let ws = workspace();
    std::fs::create_dir_all(ws.root.join("d")).unwrap();
    std::fs::write(ws.root.join("b.bin"), [0x7f, b'E', b'L', b'F', 0, 1, 2]).unwrap();
    let err = call("read_file", json!({"file_path": "b.bin"}), &ws.ctx)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("binary"), "{err}");
    let err = call("read_file", json!({"file_path": "d"}), &ws.ctx)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("directory"), "{err}");
    let err = call("read_file", json!({"file_path": "missing"}), &ws.ctx)
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::NotFound(_)), "{err:?}");
}

#[tokio::test]
async fn edit_replaces_one_exact_occurrence() {
    let ws = workspace();
    call(
        "write_file",
        json!({"file_path": "src/main.rs", "content": "fn main() {\n    println!(\"hi\");\n}\n"}),
        &ws.ctx,
    )
    .await
    .unwrap();
    let out = call(
        "edit_file",
        json!({"file_path": "src/main.rs", "old_string": "\"hi\"", "new_string": "\"hello\""}),
        &ws.ctx,
    )
    .await
    .unwrap();
    assert_eq!(out.content["replacements"], 1);
    let op = file_op(&out);
    assert_eq!(op.operation, FileOperationKind::Edit);
    assert_eq!((op.metrics.lines_added, op.metrics.lines_removed), (1, 1));
    assert!(
        op.diff
            .as_deref()
            .unwrap()
            .contains("+    println!(\"hello\");")
    );
    assert_eq!(
        std::fs::read_to_string(ws.root.join("src/main.rs")).unwrap(),
        "fn main() {\n    println!(\"hello\");\n}\n"
    );
}

#[tokio::test]
async fn edit_fails_clearly_on_absent_or_ambiguous_text() {
    let ws = workspace();
    call(
        "write_file",
        json!({"file_path": "f.txt", "content": "x = 1\nx = 1\n"}),
        &ws.ctx,
    )
    .await
    .unwrap();
    let err = call(
        "edit_file",
        json!({"file_path": "f.txt", "old_string": "y = 2", "new_string": "y = 3"}),
        &ws.ctx,
    )
    .await
    .unwrap_err();
    let ToolError::InvalidArguments { message, details } = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("not found"), "{message}");
    assert_eq!(details["occurrences"], 0);

    let err = call(
        "edit_file",
        json!({"file_path": "f.txt", "old_string": "x = 1", "new_string": "x = 2"}),
        &ws.ctx,
    )
    .await
    .unwrap_err();
    let ToolError::InvalidArguments { message, details } = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("2 times"), "{message}");
    assert_eq!(details["occurrences"], 2);
    // Nothing changed.
    assert_eq!(
        std::fs::read_to_string(ws.root.join("f.txt")).unwrap(),
        "x = 1\nx = 1\n"
    );

    let out = call(
        "edit_file",
        json!({"file_path": "f.txt", "old_string": "x = 1", "new_string": "x = 2", "replace_all": true}),
        &ws.ctx,
    )
    .await
    .unwrap();
    assert_eq!(out.content["replacements"], 2);
    assert_eq!(
        std::fs::read_to_string(ws.root.join("f.txt")).unwrap(),
        "x = 2\nx = 2\n"
    );

    let err = call(
        "edit_file",
        json!({"file_path": "nope.txt", "old_string": "a", "new_string": "b"}),
        &ws.ctx,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::NotFound(_)), "{err:?}");
}

#[tokio::test]
async fn list_directory_lists_sorted_entries_with_types() {
    let ws = workspace();
    std::fs::create_dir_all(ws.root.join("sub/deeper")).unwrap();
    std::fs::write(ws.root.join("b.txt"), "bb").unwrap();
    std::fs::write(ws.root.join("a.txt"), "a").unwrap();
    std::fs::write(ws.root.join(".hidden"), "").unwrap();
    std::fs::write(ws.root.join("sub/c.txt"), "ccc").unwrap();
    std::os::unix::fs::symlink("a.txt", ws.root.join("link")).unwrap();

    let out = call("list_directory", json!({}), &ws.ctx).await.unwrap();
    let entries = out.content["entries"].as_array().unwrap();
    let names: Vec<_> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["a.txt", "b.txt", "link", "sub"]);
    assert_eq!(entries[1]["size"], 2);
    assert_eq!(entries[2]["type"], "symlink");
    assert_eq!(entries[3]["type"], "directory");

    let out = call(
        "list_directory",
        json!({"include_hidden": true, "recursive": true}),
        &ws.ctx,
    )
    .await
    .unwrap();
    let paths: Vec<_> = out.content["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        paths,
        vec![
            ".hidden",
            "a.txt",
            "b.txt",
            "link",
            "sub",
            "sub/c.txt",
            "sub/deeper"
        ]
    );

    let capped = BuiltinConfig {
        list_max_entries: 2,
        ..cfg()
    };
    let out = tool("list_directory", &capped)
        .call(json!({}), &ws.ctx)
        .await
        .unwrap();
    assert_eq!(out.content["count"], 2);
    assert_eq!(out.content["truncated"], true);

    let err = call("list_directory", json!({"path": "a.txt"}), &ws.ctx)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
}

#[tokio::test]
async fn copy_file_copies_and_respects_overwrite() {
    let ws = workspace();
    std::fs::create_dir_all(ws.root.join("dir")).unwrap();
    std::fs::write(ws.root.join("src.txt"), "payload").unwrap();
    let out = call(
        "copy_file",
        json!({"source_path": "src.txt", "destination_path": "copies/one.txt"}),
        &ws.ctx,
    )
    .await
    .unwrap();
    assert_eq!(out.content["bytes_copied"], 7);
    assert_eq!(
        std::fs::read_to_string(ws.root.join("copies/one.txt")).unwrap(),
        "payload"
    );

    let err = call(
        "copy_file",
        json!({"source_path": "src.txt", "destination_path": "copies/one.txt"}),
        &ws.ctx,
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("overwrite"), "{err}");
    std::fs::write(ws.root.join("src.txt"), "payload 2").unwrap();
    call(
        "copy_file",
        json!({"source_path": "src.txt", "destination_path": "copies/one.txt", "overwrite": true}),
        &ws.ctx,
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.root.join("copies/one.txt")).unwrap(),
        "payload 2"
    );

    let out = call(
        "copy_file",
        json!({"source_path": "src.txt", "destination_path": "dir"}),
        &ws.ctx,
    )
    .await
    .unwrap();
    assert_eq!(out.content["destination_path"], "dir/src.txt");
    assert!(ws.root.join("dir/src.txt").is_file());
}

#[tokio::test]
async fn glob_matches_paths_relative_to_its_base() {
    let ws = workspace();
    for p in ["a.rs", "b.txt", "src/lib.rs", "src/x/y.rs", "src/x/z.md"] {
        let full = ws.root.join(p);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, "").unwrap();
    }
    let out = call("glob", json!({"pattern": "**/*.rs"}), &ws.ctx)
        .await
        .unwrap();
    assert_eq!(
        out.content["matches"],
        json!(["a.rs", "src/lib.rs", "src/x/y.rs"])
    );
    let out = call("glob", json!({"pattern": "*.rs"}), &ws.ctx)
        .await
        .unwrap();
    assert_eq!(out.content["matches"], json!(["a.rs"]));
    let out = call(
        "glob",
        json!({"pattern": "x/*.{rs,md}", "path": "src"}),
        &ws.ctx,
    )
    .await
    .unwrap();
    assert_eq!(out.content["matches"], json!(["src/x/y.rs", "src/x/z.md"]));
    let err = call("glob", json!({"pattern": "a{"}), &ws.ctx)
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err:?}");
}

#[tokio::test]
async fn grep_finds_lines_filters_by_glob_and_caps_results() {
    let ws = workspace();
    std::fs::create_dir_all(ws.root.join("src")).unwrap();
    std::fs::write(
        ws.root.join("src/a.rs"),
        "fn alpha() {}\nlet TODO = 1;\n// todo later\n",
    )
    .unwrap();
    std::fs::write(ws.root.join("notes.md"), "TODO: write docs\n").unwrap();
    std::fs::write(ws.root.join("bin.dat"), b"TODO\0binary").unwrap();

    let out = call("grep", json!({"pattern": "TODO"}), &ws.ctx)
        .await
        .unwrap();
    assert_eq!(
        out.content["matches"],
        json!([
            {"path": "notes.md", "line_number": 1, "line": "TODO: write docs"},
            {"path": "src/a.rs", "line_number": 2, "line": "let TODO = 1;"},
        ])
    );
    let out = call(
        "grep",
        json!({"pattern": "todo", "case_insensitive": true, "glob": "*.rs"}),
        &ws.ctx,
    )
    .await
    .unwrap();
    assert_eq!(out.content["count"], 2);
    assert_eq!(out.content["files_searched"], 1);
    let out = call(
        "grep",
        json!({"pattern": "^fn \\w+", "path": "src/a.rs"}),
        &ws.ctx,
    )
    .await
    .unwrap();
    assert_eq!(out.content["matches"][0]["line"], "fn alpha() {}");
    let out = call(
        "grep",
        json!({"pattern": "[a-z]", "max_results": 2}),
        &ws.ctx,
    )
    .await
    .unwrap();
    assert_eq!(out.content["count"], 2);
    assert_eq!(out.content["truncated"], true);
    let err = call("grep", json!({"pattern": "(unclosed"}), &ws.ctx)
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err:?}");
}

#[tokio::test]
async fn every_file_tool_refuses_to_leave_the_workspace() {
    let ws = workspace();
    std::fs::create_dir_all(&ws.root).unwrap();
    std::os::unix::fs::symlink(&ws.outside, ws.root.join("out")).unwrap();
    std::os::unix::fs::symlink(ws.outside.join("secret.txt"), ws.root.join("secret-link")).unwrap();
    let secret_abs = ws.outside.join("secret.txt").display().to_string();
    let attempts = [
        ("read_file", json!({"file_path": "../outside/secret.txt"})),
        ("read_file", json!({"file_path": secret_abs})),
        ("read_file", json!({"file_path": "out/secret.txt"})),
        ("read_file", json!({"file_path": "secret-link"})),
        (
            "write_file",
            json!({"file_path": "out/new.txt", "content": "x"}),
        ),
        (
            "write_file",
            json!({"file_path": "/tmp/agentry-escape.txt", "content": "x"}),
        ),
        (
            "write_file",
            json!({"file_path": "secret-link", "content": "x"}),
        ),
        (
            "edit_file",
            json!({"file_path": "secret-link", "old_string": "TOP", "new_string": "NO"}),
        ),
        ("list_directory", json!({"path": "out"})),
        ("list_directory", json!({"path": ".."})),
        (
            "copy_file",
            json!({"source_path": "secret-link", "destination_path": "stolen.txt"}),
        ),
        (
            "copy_file",
            json!({"source_path": "../outside/secret.txt", "destination_path": "s.txt"}),
        ),
        ("glob", json!({"pattern": "*", "path": "out"})),
        ("grep", json!({"pattern": "SECRET", "path": "out"})),
        ("grep", json!({"pattern": "SECRET", "path": "secret-link"})),
    ];
    for (name, args) in attempts {
        let err = call(name, args.clone(), &ws.ctx).await.unwrap_err();
        assert!(
            matches!(err, ToolError::Refused(_)),
            "{name} {args} gave {err:?}, expected a refusal"
        );
    }
    // A workspace-wide grep skips the symlink that leads out instead of reading through it.
    std::fs::write(ws.root.join("mine.txt"), "SECRET of mine\n").unwrap();
    let out = call("grep", json!({"pattern": "SECRET"}), &ws.ctx)
        .await
        .unwrap();
    assert_eq!(
        out.content["matches"],
        json!([{"path": "mine.txt", "line_number": 1, "line": "SECRET of mine"}])
    );
    assert_eq!(
        std::fs::read_to_string(ws.outside.join("secret.txt")).unwrap(),
        "TOP SECRET\n"
    );
    assert_eq!(std::fs::read_dir(&ws.outside).unwrap().count(), 1);
    assert!(!Path::new("/tmp/agentry-escape.txt").exists());
    assert!(!ws.root.join("stolen.txt").exists());
}

#[tokio::test]
async fn hard_linked_files_are_not_changed() {
    let ws = workspace();
    std::fs::create_dir_all(&ws.root).unwrap();
    std::fs::write(ws.outside.join("shared.txt"), "original").unwrap();
    std::fs::hard_link(ws.outside.join("shared.txt"), ws.root.join("shared.txt")).unwrap();
    let err = call(
        "write_file",
        json!({"file_path": "shared.txt", "content": "changed"}),
        &ws.ctx,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::Refused(_)), "{err:?}");
    assert_eq!(
        std::fs::read_to_string(ws.outside.join("shared.txt")).unwrap(),
        "original"
    );
}

#[tokio::test]
async fn writes_and_copies_over_the_quota_are_refused_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = ctx_with_quota(tmp.path(), 100);
    call(
        "write_file",
        json!({"file_path": "a", "content": "x".repeat(60)}),
        &ctx,
    )
    .await
    .unwrap();
    let err = call(
        "write_file",
        json!({"file_path": "b", "content": "x".repeat(41)}),
        &ctx,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::QuotaExceeded(_)), "{err:?}");
    assert!(!tmp.path().join("b").exists());
    // Replacing a file counts only the difference.
    call(
        "write_file",
        json!({"file_path": "a", "content": "x".repeat(100)}),
        &ctx,
    )
    .await
    .unwrap();
    let err = call(
        "copy_file",
        json!({"source_path": "a", "destination_path": "c"}),
        &ctx,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::QuotaExceeded(_)), "{err:?}");
    let err = call(
        "edit_file",
        json!({"file_path": "a", "old_string": "xx", "new_string": "xxx", "replace_all": true}),
        &ctx,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ToolError::QuotaExceeded(_)), "{err:?}");
    assert_eq!(std::fs::read(tmp.path().join("a")).unwrap().len(), 100);
}

// ---------------------------------------------------------------------------------------------
// properties

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn tricky_path() -> impl Strategy<Value = String> {
    let segment = prop::sample::select(vec![
        "..",
        ".",
        "a",
        "b",
        "out",
        "in",
        "",
        "...",
        "..a",
        "%2e%2e",
        "secret.txt",
        "new.txt",
    ]);
    (
        prop::sample::select(vec!["", "/", "./", "ROOT/", "OUTSIDE/", "//"]),
        prop::collection::vec(segment, 1..6),
    )
        .prop_map(|(prefix, segs)| format!("{prefix}{}", segs.join("/")))
}

fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                out.extend(all_files(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// A path built from `..`, absolute prefixes and symlinks that point out never lets a
    /// write land, or a read see data, outside the workspace.
    #[test]
    fn a_traversal_or_symlink_path_never_escapes_the_jail(path in tricky_path()) {
        let rt = runtime();
        let ws = workspace();
        std::fs::create_dir_all(ws.root.join("a")).unwrap();
        std::os::unix::fs::symlink(&ws.outside, ws.root.join("out")).unwrap();
        std::os::unix::fs::symlink("a", ws.root.join("in")).unwrap();
        let path = path
            .replace("ROOT/", &format!("{}/", ws.root.display()))
            .replace("OUTSIDE/", &format!("{}/", ws.outside.display()));

        let write = rt.block_on(call("write_file", json!({"file_path": path, "content": "PWNED"}), &ws.ctx));
        let read = rt.block_on(call("read_file", json!({"file_path": path}), &ws.ctx));

        // Outside holds exactly what it held before.
        let outside = all_files(&ws.outside);
        prop_assert_eq!(outside.len(), 1);
        prop_assert_eq!(std::fs::read_to_string(ws.outside.join("secret.txt")).unwrap(), "TOP SECRET\n");
        if let Ok(out) = &write {
            let shown = out.content["file_path"].as_str().unwrap();
            prop_assert!(
                Path::new(shown).components().all(|c| matches!(c, std::path::Component::Normal(_))),
                "{}", shown
            );
            let landed = ws.root.canonicalize().unwrap().join(shown);
            prop_assert_eq!(std::fs::read_to_string(&landed).unwrap(), "PWNED");
        }
        if let Ok(out) = &read {
            prop_assert!(!out.content["content"].as_str().unwrap().contains("TOP SECRET"));
        }
    }

    /// write_file(path, content) then read_file(path) gives back the same content.
    #[test]
    fn write_then_read_returns_the_same_content(
        dirs in prop::collection::vec("[a-z]{1,6}", 0..3),
        name in "[a-zA-Z0-9_-]{1,12}(\\.[a-z]{1,3})?",
        content in "[^\\x00]{0,400}",
    ) {
        let rt = runtime();
        let ws = workspace();
        let mut path = dirs.join("/");
        if !path.is_empty() { path.push('/'); }
        path.push_str(&name);
        rt.block_on(call("write_file", json!({"file_path": path, "content": content}), &ws.ctx)).unwrap();
        let out = rt.block_on(call("read_file", json!({"file_path": path}), &ws.ctx)).unwrap();
        prop_assert_eq!(out.content["content"].as_str().unwrap(), content.as_str());
    }

    /// Every file written into a directory shows up in its listing.
    #[test]
    fn list_directory_contains_every_file_written(
        names in prop::collection::btree_set("[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,10}", 1..12),
    ) {
        let rt = runtime();
        let ws = workspace();
        for n in &names {
            rt.block_on(call("write_file", json!({"file_path": format!("d/{n}"), "content": n}), &ws.ctx)).unwrap();
        }
        let out = rt.block_on(call("list_directory", json!({"path": "d", "include_hidden": true}), &ws.ctx)).unwrap();
        let listed: std::collections::BTreeSet<String> = out.content["entries"]
            .as_array().unwrap().iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect();
        prop_assert_eq!(listed, names);
    }

    /// No sequence of writes, appends, edits and copies takes the workspace over its quota,
    /// and a refused change leaves the usage as it was.
    #[test]
    fn the_quota_is_never_exceeded_by_any_sequence_of_writes(
        quota in 0u64..2000,
        ops in prop::collection::vec((0u8..4, 0usize..4, 0usize..900), 1..12),
    ) {
        let rt = runtime();
        let tmp = tempfile::tempdir().unwrap();
        let ctx = ctx_with_quota(tmp.path(), quota);
        let jail = Jail::open(&ctx.workspace).unwrap();
        for (kind, file, size) in ops {
            let before = jail.usage_bytes().unwrap();
            let path = format!("f{file}");
            let result = rt.block_on(match kind {
                0 => call("write_file", json!({"file_path": path, "content": "x".repeat(size)}), &ctx),
                1 => call("write_file", json!({"file_path": path, "content": "y".repeat(size), "append": true}), &ctx),
                2 => call("edit_file", json!({"file_path": path, "old_string": "x", "new_string": "z".repeat(size % 50 + 2), "replace_all": true}), &ctx),
                _ => call("copy_file", json!({"source_path": path, "destination_path": format!("c{size}"), "overwrite": true}), &ctx),
            });
            let after = jail.usage_bytes().unwrap();
            prop_assert!(after <= quota.max(before), "usage {} over quota {}", after, quota);
            if let Err(ToolError::QuotaExceeded(_)) = result {
                prop_assert_eq!(after, before);
            }
        }
    }
}
