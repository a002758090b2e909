//! Shared helpers for the end-to-end tests: start the real `agentry` binary on a free port with
//! its own data dir, and wait until it answers.

#![allow(dead_code)]

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub struct Server {
    pub child: Child,
    pub base: String,
    pub port: u16,
    pub data_dir: tempfile::TempDir,
}

impl Server {
    /// Start `agentry serve` with extra `AGENTRY_*` env pairs. Port 0; the bound port is read
    /// from the log line the server prints when it listens.
    pub async fn start(env: &[(&str, &str)]) -> Server {
        let data_dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentry"));
        cmd.arg("serve")
            .env("AGENTRY_DATA_DIR", data_dir.path())
            .env("AGENTRY_SERVER__PORT", "0")
            .env("AGENTRY_LOG__FORMAT", "json")
            .env("AGENTRY_SERVER__WORKERS", "2")
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn agentry");
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let port = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                    && let Some(p) = v.get("port").and_then(|p| p.as_u64())
                {
                    return p as u16;
                }
            }
            panic!("agentry exited before listening");
        })
        .await
        .expect("agentry did not start listening within 60 s");
        // Keep draining the log so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
            port,
            data_dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }
}
