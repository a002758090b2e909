//! `agentry-fake-model`: the fake model server as a process, for benchmarks and manual runs.
//! It answers in auto mode (the scripted model's decisions) until SIGINT/SIGTERM and prints its
//! URL on the first line of stdout.

use std::io::Write;
use std::time::Duration;

use agentry_fake_model::{FakeConfig, FakeModelServer};
use clap::Parser;

/// A fake language model server speaking the OpenAI chat completions and Anthropic messages
/// wire formats (on 127.0.0.1 unless `--host` says otherwise).
#[derive(Debug, Parser)]
#[command(name = "agentry-fake-model", version)]
struct Args {
    /// Address to listen on (`0.0.0.0` in a container, so other containers reach it).
    #[arg(long, default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    /// Port to listen on (0 = any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Delay before each response head, in milliseconds.
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Text chunks per streamed answer (0 = one per word).
    #[arg(long, default_value_t = 0)]
    chunks: usize,
    /// Delay between streamed chunks, in milliseconds.
    #[arg(long, default_value_t = 0)]
    chunk_delay_ms: u64,
    /// Require this API key (Authorization: Bearer / x-api-key).
    #[arg(long)]
    api_key: Option<String>,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let config = FakeConfig {
        host: args.host,
        port: args.port,
        latency: Duration::from_millis(args.latency_ms),
        chunks: args.chunks,
        chunk_delay: Duration::from_millis(args.chunk_delay_ms),
        api_key: args.api_key,
        workers: args.workers,
        // A long benchmark must not grow without bound.
        record_limit: 0,
        ..FakeConfig::default()
    };
    let server = match FakeModelServer::try_start(config) {
        Ok(server) => server,
        Err(e) => {
            eprintln!(
                "agentry-fake-model: cannot listen on {}:{}: {e}",
                args.host, args.port
            );
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    // The first line is what scripts read; the rest is for people.
    let _ = writeln!(out, "{}", server.url());
    let _ = writeln!(out, "openai base url:    {}", server.base_url_openai());
    let _ = writeln!(out, "anthropic base url: {}", server.base_url_anthropic());
    let _ = out.flush();
    drop(out);
    // Ctrl-C in a terminal, SIGTERM from a container runtime.
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(e) => eprintln!("agentry-fake-model: cannot wait for signals ({e}); stopping"),
    }
    server.stop().await;
    std::process::ExitCode::SUCCESS
}
