//! `agentry`: serve, migrate, print the effective configuration, serve built-in tools over MCP.

use std::path::PathBuf;
use std::process::ExitCode;

use agentry_cli::{errln, outln};
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
    /// Configuration file (default: ./agentry.toml when present; only that exact name).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run migrations, then serve the API until SIGINT/SIGTERM.
    Serve {
        /// Listen on this address (overrides `server.host` / AGENTRY_SERVER__HOST).
        #[arg(long)]
        host: Option<String>,
        /// Listen on this port; 0 picks a free one (overrides `server.port` /
        /// AGENTRY_SERVER__PORT).
        #[arg(long)]
        port: Option<u16>,
    },
    /// Run database migrations and exit.
    Migrate,
    /// Print the effective configuration (secrets masked, unset ones marked `unset`) and exit.
    Config {
        /// Instead, list every configuration key as its environment variable, one a line.
        #[arg(long)]
        keys: bool,
    },
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
    /// The sandbox launcher (internal): restricts itself, then runs the command.
    #[command(name = "sandbox-exec", hide = true)]
    SandboxExec {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

fn main() -> ExitCode {
    // The launcher reads no configuration and starts no runtime: it restricts itself and execs.
    let mut raw = std::env::args_os();
    if raw
        .nth(1)
        .is_some_and(|a| a == agentry_sandbox::LAUNCHER_SUBCOMMAND)
    {
        return agentry_sandbox::launcher::main(raw.collect());
    }
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
                errln!("agentry chat: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let settings = match Settings::load(cli.config.as_deref()) {
        Ok(mut s) => {
            if let Command::Serve { host, port } = &cli.command {
                if let Some(host) = host {
                    s.server.host = host.clone();
                }
                if let Some(port) = port {
                    s.server.port = *port;
                }
            }
            s
        }
        Err(e) => {
            errln!("agentry: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = telemetry::init(&settings.log) {
        eprintln!("agentry: invalid configuration: {e}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Config { keys: true } => {
            outln!("{}", settings.env_keys().join("\n"));
            Ok(())
        }
        Command::Config { keys: false } => {
            if settings.sandbox.backend == agentry_sandbox::BackendChoice::None {
                errln!(
                    "agentry: warning: sandbox.backend = none: tenant programs run with no isolation (docs/security.md)"
                );
            }
            serde_json::to_string_pretty(&settings.view())
                .map(|s| outln!("{s}"))
                .map_err(anyhow::Error::from)
        }
        Command::ToolServer { name, workspace } => {
            let dir = workspace.unwrap_or_else(|| PathBuf::from("."));
            tokio::runtime::Runtime::new()
                .map_err(anyhow::Error::from)
                .and_then(|rt| {
                    rt.block_on(async {
                        // `execute` here runs in a sandbox too (only when the shell is served).
                        let mut tools = settings.tools.clone();
                        if name.split(',').any(|s| matches!(s.trim(), "shell" | "all")) {
                            tools.sandbox =
                                agentry_gateway::startup::start_sandbox(&settings).await;
                        }
                        agentry_mcp::server::serve_stdio(&name, &tools, dir).await
                    })
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
        Command::Chat(_) | Command::SandboxExec { .. } => Ok(()),
        Command::Serve { .. } => actix_web::rt::System::new().block_on(async {
            let app = Application::build(settings.clone()).await?;
            if settings.auth.admin_key.is_empty() {
                // A fresh server has no tenant and no key: say how to make the first ones.
                tracing::warn!(
                    "the admin API is off (no platform admin key), so no tenant or API key can be created yet. \
                     To get started, stop the server and start it again with a key: \
                     AGENTRY_AUTH__ADMIN_KEY=\"$(head -c 24 /dev/urandom | base64)\" agentry serve — \
                     then create a tenant, a user and a key as docs/quickstart.md shows"
                );
            }
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
            errln!("agentry: {e:#}");
            ExitCode::FAILURE
        }
    }
}
