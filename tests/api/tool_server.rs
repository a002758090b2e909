//! End to end: `agentry tool-server files --workspace DIR` as a real child process, spoken to
//! with rmcp's client over stdio: the MCP channel is stdout, the logs go to stderr.

use std::process::Stdio;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

fn args(v: Value) -> JsonObject {
    v.as_object().unwrap().clone()
}

fn structured(r: &rmcp::model::CallToolResult) -> Value {
    r.structured_content
        .clone()
        .unwrap_or_else(|| panic!("no structuredContent in {r:?}"))
}

#[tokio::test]
async fn tool_server_serves_the_files_tools_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentry"));
    cmd.arg("tool-server")
        .arg("files")
        .arg("--workspace")
        .arg(&workspace)
        // Chatty logs must not corrupt the protocol on stdout.
        .env("AGENTRY_LOG__LEVEL", "debug")
        .env("AGENTRY_DATA_DIR", dir.path().join("data"));
    let (transport, stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = transport.id().unwrap();
    let mut stderr = stderr.unwrap();
    let logs = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s).await;
        s
    });
    let client = tokio::time::timeout(Duration::from_secs(30), ().serve(transport))
        .await
        .expect("MCP initialize within 30 s")
        .unwrap();
    let info = client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "agentry-files");

    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for want in [
        "read_file",
        "write_file",
        "edit_file",
        "list_directory",
        "copy_file",
        "glob",
        "grep",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert!(
        !names.contains(&"execute"),
        "only the files service was asked for"
    );

    let w = client
        .call_tool(
            CallToolRequestParams::new("write_file").with_arguments(args(
                json!({ "file_path": "notes/hello.txt", "content": "hello\nworld\n" }),
            )),
        )
        .await
        .unwrap();
    assert_ne!(w.is_error, Some(true), "{w:?}");
    assert_eq!(structured(&w)["created"], true);
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes/hello.txt")).unwrap(),
        "hello\nworld\n"
    );

    let r = client
        .call_tool(
            CallToolRequestParams::new("read_file")
                .with_arguments(args(json!({ "file_path": "notes/hello.txt" }))),
        )
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert_eq!(structured(&r)["content"], "hello\nworld\n");
    assert_eq!(structured(&r)["total_lines"], 2);

    // The jail holds over MCP too.
    let out = client
        .call_tool(
            CallToolRequestParams::new("read_file")
                .with_arguments(args(json!({ "file_path": "../../etc/passwd" }))),
        )
        .await
        .unwrap();
    assert_eq!(out.is_error, Some(true));

    client.cancel().await.unwrap();
    // Closing stdin ends the server; it exits on its own.
    let gone = async {
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), gone)
        .await
        .expect("the tool server exits when the client goes");
    let logs = tokio::time::timeout(Duration::from_secs(10), logs)
        .await
        .unwrap()
        .unwrap();
    assert!(!logs.trim().is_empty(), "debug logs went to stderr");
}

#[tokio::test]
async fn tool_server_refuses_an_unknown_service_naming_the_choices() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(["tool-server", "nonsense"])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "nothing but MCP may reach stdout");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nonsense") && err.contains("files"), "{err}");
}
