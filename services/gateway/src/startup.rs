//! Building the application: connect and migrate the database, wire the state, bind the
//! listener. `main` and the tests use the same builder; tests bind port 0.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::dev::Server;
use actix_web::middleware::from_fn;
use actix_web::{App, HttpServer, web};
use anyhow::Context;
use sea_orm::DatabaseConnection;

use crate::auth::{KeyResolver, authenticate};
use crate::error::errors_as_json;
use crate::readiness::DatabaseProbe;
use crate::request_id::request_id;
use crate::settings::Settings;
use crate::state::AppState;
use crate::{extract, metrics, openapi, routes};

pub struct Application {
    port: u16,
    server: Server,
    sandbox: agentry_sandbox::SandboxHandle,
}

/// Reap the sandboxed processes a crashed predecessor left, then pick and probe the sandbox
/// backend (`[sandbox]`). A host where no backend works still serves; `execute` and stdio MCP
/// servers are refused with the reason.
pub async fn start_sandbox(settings: &Settings) -> agentry_sandbox::SandboxHandle {
    let mut config = settings.sandbox.clone();
    config
        .hidden_paths
        .extend(settings.secret_files.iter().cloned());
    agentry_sandbox::SandboxHandle::start(
        &config,
        &agentry_sandbox::StartOptions {
            data_dir: settings.data_dir.clone(),
            config_file: settings.config_file.clone(),
        },
    )
    .await
}

fn db_options(settings: &Settings) -> agentry_store::DbOptions {
    agentry_store::DbOptions {
        url: settings.database_url(),
        max_connections: settings.database.max_connections,
        connect_timeout: Duration::from_secs(settings.database.connect_timeout_secs),
        acquire_timeout: Duration::from_secs(settings.database.acquire_timeout_secs),
    }
}

/// The readiness probe's own one-connection pool to the configured (already migrated) database.
async fn open_probe(settings: &Settings) -> anyhow::Result<Arc<DatabaseProbe>> {
    let opts = agentry_store::DbOptions {
        max_connections: 1,
        acquire_timeout: crate::readiness::PROBE_TIMEOUT,
        ..db_options(settings)
    };
    let db = agentry_store::connect(&opts)
        .await
        .context("connecting the readiness probe to the database")?;
    Ok(DatabaseProbe::new(db))
}

/// Open the configured database (creating the data dir for SQLite) and apply migrations.
pub async fn open_database(settings: &Settings) -> anyhow::Result<DatabaseConnection> {
    std::fs::create_dir_all(&settings.data_dir)
        .with_context(|| format!("creating the data dir {}", settings.data_dir.display()))?;
    let opts = db_options(settings);
    let backend = agentry_store::backend_of(&opts.url)
        .map(|b| format!("{b:?}"))
        .unwrap_or_default();
    let db = agentry_store::connect(&opts)
        .await
        .with_context(|| format!("connecting to the {backend} database (database.url)"))?;
    agentry_store::migrate(&db)
        .await
        .context("running database migrations")?;
    Ok(db)
}

/// CORS from `server.cors_origins` (`*` = any origin). Keys travel in headers, never cookies,
/// so credentials are not allowed cross-origin.
fn cors(origins: &[String]) -> actix_cors::Cors {
    let base = actix_cors::Cors::default()
        .allowed_methods(["GET", "POST", "PUT", "PATCH", "DELETE"])
        .allow_any_header()
        .expose_headers(["x-request-id", "retry-after", "allow"])
        .max_age(3600);
    if origins.iter().any(|o| o == "*") {
        base.allow_any_origin()
    } else {
        origins.iter().fold(base, |c, o| c.allowed_origin(o))
    }
}

/// How long HTTP requests still open after the drain (an SSE stream of a run left for recovery,
/// a slow upload) get before their connections are closed.
const REQUESTS_GRACE_SECS: u64 = 5;

/// What a graceful stop needs besides the server's handle.
struct Drain {
    engine: agentry_actors::Engine,
    db: DatabaseConnection,
    shutdown: tokio_util::sync::CancellationToken,
    /// How long runs get to finish (`server.shutdown_timeout_secs`).
    timeout: Duration,
}

impl Drain {
    /// Refuse new runs, close every WebSocket with 1001, and wait until no run is running or the
    /// timeout passes; runs still going then are left in the database and resume at the next
    /// start. Runs waiting for a human do not hold the stop up: they resume the same way.
    async fn run(self) {
        self.engine.drain();
        self.shutdown.cancel();
        let deadline = Instant::now() + self.timeout;
        let scope = agentry_store::PlatformScope::new();
        loop {
            let running = agentry_store::executions::list_unfinished(&self.db, &scope)
                .await
                .map(|runs| {
                    runs.iter()
                        .filter(|r| r.status == agentry_store::executions::ExecutionStatus::Running)
                        .count()
                });
            match running {
                Ok(0) => break,
                Ok(n) if Instant::now() >= deadline => {
                    tracing::warn!(
                        runs = n,
                        "runs still going at the shutdown timeout are left to resume at the next start"
                    );
                    break;
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot see the running runs; stopping without waiting");
                    break;
                }
            }
        }
    }
}

/// SIGINT/SIGTERM stop the server gracefully: [`Drain::run`], then the HTTP server stops. The
/// handlers are registered here, before `build` returns (and so before "listening" is logged):
/// actix's own registration happens only once the server future has started its workers, and a
/// signal in between would kill the process the hard way.
fn stop_on_signals(handle: actix_web::dev::ServerHandle, drain: Drain) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    actix_web::rt::spawn(async move {
        let which = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(
            signal = which,
            timeout_secs = drain.timeout.as_secs(),
            "stopping gracefully: no new runs, WebSockets closed with 1001, running runs get the timeout to finish"
        );
        drain.run().await;
        handle.stop(true).await;
    });
    Ok(())
}

impl Application {
    pub async fn build(mut settings: Settings) -> anyhow::Result<Application> {
        let db = open_database(&settings).await?;
        let db_probe = open_probe(&settings).await?;
        db_probe.spawn();
        let sandbox = start_sandbox(&settings).await;
        settings.tools.sandbox = sandbox.clone();
        let listener = TcpListener::bind((settings.server.host.as_str(), settings.server.port))
            .with_context(|| {
                format!(
                    "binding {}:{} (server.host / server.port)",
                    settings.server.host, settings.server.port
                )
            })?;
        let port = listener.local_addr()?.port();
        let workers = settings.server.workers;
        let shutdown = settings.server.shutdown_timeout_secs;
        let body_limit = settings.server.body_limit_bytes;
        let metrics = metrics::handle();
        metrics::spawn_upkeep(metrics.clone());
        agentry_actors::metrics::TENANT_LABELS.configure(
            settings.metrics.tenant_labels,
            settings.metrics.max_tenant_labels,
        );
        let parts = crate::engine::build(&settings, &db)?;
        // Run ends the previous process could not record go to the database before any session
        // numbers an event (docs/operations.md, "What a client sees on crash").
        parts
            .engine
            .reconcile_unrecorded()
            .await
            .context("recording the run ends the previous process journaled")?;
        // Runs a previous process left unfinished resume from their checkpoints (or end as
        // interrupted) in the background; the server answers meanwhile.
        let recovering = parts.engine.clone();
        actix_web::rt::spawn(async move {
            match recovering.recover().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(sessions = n, "recovered unfinished runs"),
                Err(e) => tracing::error!(error = %e, "recovering unfinished runs failed"),
            }
        });
        // One MCP endpoint (and so one set of MCP sessions) for every worker.
        let mcp = std::sync::Arc::new(crate::mcp_server::McpEndpoint::new(
            &settings,
            parts.engine.clone(),
            db.clone(),
        ));
        let shutdown_token = tokio_util::sync::CancellationToken::new();
        let drain = Drain {
            engine: parts.engine.clone(),
            db: db.clone(),
            shutdown: shutdown_token.clone(),
            timeout: Duration::from_secs(shutdown),
        };
        let state = web::Data::new(AppState {
            shutdown: shutdown_token,
            engine: parts.engine,
            secrets: parts.secrets,
            mcp_file: parts.watcher,
            ws_connections: Default::default(),
            auth: KeyResolver::new(
                settings.auth.admin_key.expose(),
                Duration::from_secs(settings.auth.cache_ttl_secs),
            ),
            db,
            db_probe,
            settings,
            started: Instant::now(),
            metrics,
        });
        let mut server = HttpServer::new(move || {
            // Middleware runs outermost-last: request id → JSON errors → metrics → CORS → auth.
            App::new()
                .wrap(from_fn(authenticate))
                .wrap(cors(&state.settings.server.cors_origins))
                .wrap(from_fn(metrics::track))
                .wrap(from_fn(errors_as_json))
                .wrap(from_fn(request_id))
                .app_data(state.clone())
                .configure(|cfg| extract::configure(cfg, body_limit))
                .configure(routes::configure)
                .configure(crate::ws::configure)
                .configure(|cfg| mcp.configure(cfg))
                .configure(routes::page::configure)
                .configure(metrics::configure)
                .configure(openapi::configure)
                .default_service(web::to(routes::route_not_found))
        })
        // Events are small frames written one at a time: with Nagle's algorithm on, a frame
        // written while the previous one is unacknowledged waits for the client's delayed ACK
        // (40 ms on Linux). docs/benchmarks.md measured it.
        .tcp_nodelay(true)
        // A WebSocket ends its connection promptly after a close handshake (`ws::ConnSocket`).
        .on_connect(crate::ws::remember_socket)
        .listen(listener)?
        .shutdown_timeout(REQUESTS_GRACE_SECS)
        .disable_signals();
        if workers > 0 {
            server = server.workers(workers);
        }
        let server = server.run();
        stop_on_signals(server.handle(), drain)?;
        Ok(Application {
            port,
            server,
            sandbox,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Serve until SIGINT/SIGTERM, then stop gracefully; sandboxed processes still running
    /// are killed.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let result = self.server.await;
        let killed = self.sandbox.kill_all();
        if killed > 0 {
            tracing::info!(groups = killed, "killed sandboxed processes at shutdown");
        }
        result
    }
}
