//! `agentry`: serve, migrate, print the effective configuration, serve built-in tools over MCP.

use std::path::PathBuf;
use std::process::ExitCode;

use agentry_cli::{errln, outln};
use agentry_gateway::startup::AdminKeyAtStart;
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
    /// Manage tenants, users, keys and usage: against a running server with the platform admin
    /// key, or directly on the database (`--direct`) for bootstrap.
    Admin(agentry_gateway::admin_cli::AdminArgs),
    /// The sandbox launcher (internal): restricts itself, then runs the command.
    #[command(name = "sandbox-exec", hide = true)]
    SandboxExec {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

/// Say in the start log how to reach the admin API: the generated key once, at the start that
/// made it; afterwards only its prefix and how to replace it.
fn log_admin_key(at_start: &AdminKeyAtStart) {
    match at_start {
        AdminKeyAtStart::Configured => {}
        AdminKeyAtStart::Generated(k) => tracing::warn!(
            admin_key_prefix = %k.info.prefix,
            "generated the platform admin key, shown this once (only its hash is stored): {} — \
             create the first tenant, user and key with it: \
             AGENTRY_ADMIN_KEY={} agentry admin bootstrap acme alice \
             (or send it as `Authorization: Bearer <key>` to /api/v1/admin/…; docs/admin.md). \
             Set AGENTRY_AUTH__ADMIN_KEY to use a key of your own instead",
            k.secret,
            k.secret,
        ),
        AdminKeyAtStart::Stored(k) => tracing::info!(
            admin_key_prefix = %k.prefix,
            "the admin API takes the platform admin key generated at the first start ({}…, {}); \
             it is not shown again. Lost it? `agentry admin reset-admin-key --direct` makes a new one",
            k.prefix,
            k.created_at.format("%Y-%m-%d %H:%M UTC"),
        ),
        AdminKeyAtStart::Off => tracing::warn!(
            "the admin API is off (no platform admin key, and auth.generate_admin_key = false), \
             so no tenant or API key can be created over HTTP. Create them with \
             `agentry admin --direct bootstrap acme alice` (same configuration as serve), \
             or restart with a key: \
             AGENTRY_AUTH__ADMIN_KEY=\"$(head -c 24 /dev/urandom | base64)\" agentry serve \
             — docs/quickstart.md"
        ),
    }
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
    // Against a server it needs no configuration; `--direct` loads the server's own.
    if let Command::Admin(args) = cli.command {
        return match tokio::runtime::Runtime::new() {
            Ok(rt) => ExitCode::from(rt.block_on(agentry_gateway::admin_cli::main(
                args,
                cli.config.as_deref(),
            ))),
            Err(e) => {
                errln!("agentry admin: {e}");
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
    // Only a serving process exports traces.
    let otel = matches!(cli.command, Command::Serve { .. }).then_some(&settings.otel);
    let telemetry = match telemetry::init(&settings.log, otel) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("agentry: invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
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
        Command::Chat(_) | Command::Admin(_) | Command::SandboxExec { .. } => Ok(()),
        Command::Serve { .. } => actix_web::rt::System::new().block_on(async {
            let app = Application::build(settings.clone()).await?;
            log_admin_key(app.admin_key());
            tracing::info!(
                host = %settings.server.host,
                port = app.port(),
                replica_id = %app.cluster().replica_id(),
                mode = app.cluster().mode.as_str(),
                "agentry listening on http://{}:{} (replica {}, {} mode)",
                settings.server.host,
                app.port(),
                app.cluster().replica_id(),
                app.cluster().mode.as_str(),
            );
            app.run_until_stopped().await?;
            tracing::info!("agentry stopped");
            telemetry.shutdown();
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
