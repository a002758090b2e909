//! `agentry`: serve, migrate, print the effective configuration, serve built-in tools over MCP.

use std::path::PathBuf;
use std::process::ExitCode;

use agentry_gateway::{Application, Settings, telemetry};
use clap::{Parser, Subcommand};

/// glibc's malloc cost ~15% of the server's CPU under load, mostly in its arena locks and
/// consolidation across the many threads (actix arbiters, the engine runtime, SQLite workers);
/// docs/benchmarks.md has the profile.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "agentry",
    version,
    about = "Agentry: a multi-tenant AI agent platform"
)]
struct Cli {
    /// Configuration file (default: ./agentry.toml when present).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run migrations, then serve the API until SIGINT/SIGTERM.
    Serve,
    /// Run database migrations and exit.
    Migrate,
    /// Print the effective configuration (secrets masked) and exit.
    Config,
    /// Serve built-in tools as an MCP server on stdin/stdout (logs go to stderr).
    ToolServer {
        /// A service (`files`, `shell`, `web`, `system`, `services`, `todos`, `interaction`),
        /// a comma-separated list, or `all`.
        name: String,
        /// The directory the tools work in (created if missing). Default: the current directory.
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// Chat with an assistant of a running server over WebSocket (a terminal client).
    Chat(agentry_cli::ChatArgs),
}

fn main() -> ExitCode {
    // https and rediss need a process-wide crypto provider before any TLS is set up.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse();
    // The chat client needs no server configuration: it talks to a server like any client.
    if let Command::Chat(args) = cli.command {
        return match tokio::runtime::Runtime::new()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(agentry_cli::chat(args)))
        {
            Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            Err(e) => {
                eprintln!("agentry chat: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let settings = match Settings::load(cli.config.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("agentry: {e}");
            return ExitCode::from(2);
        }
    };
    telemetry::init(&settings.log);
    let result = match cli.command {
        Command::Config => {
            match serde_json::to_string_pretty(&settings) {
                Ok(s) => println!("{s}"),
                Err(e) => eprintln!("agentry: {e}"),
            }
            Ok(())
        }
        Command::ToolServer { name, workspace } => {
            let dir = workspace.unwrap_or_else(|| PathBuf::from("."));
            tokio::runtime::Runtime::new()
                .map_err(anyhow::Error::from)
                .and_then(|rt| {
                    rt.block_on(agentry_mcp::server::serve_stdio(
                        &name,
                        &settings.tools,
                        dir,
                    ))
                    .map_err(anyhow::Error::from)
                })
        }
        Command::Migrate => actix_web::rt::System::new().block_on(async {
            agentry_gateway::startup::open_database(&settings)
                .await
                .map(|_| {
                    tracing::info!("migrations applied");
                })
        }),
        Command::Chat(_) => Ok(()),
        Command::Serve => actix_web::rt::System::new().block_on(async {
            let app = Application::build(settings.clone()).await?;
            tracing::info!(
                host = %settings.server.host,
                port = app.port(),
                "agentry listening on http://{}:{}",
                settings.server.host,
                app.port()
            );
            app.run_until_stopped().await?;
            tracing::info!("agentry stopped");
            Ok(())
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentry: {e:#}");
            ExitCode::FAILURE
        }
    }
}
