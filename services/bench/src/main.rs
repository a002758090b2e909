//! `agentry-bench`: see `docs/benchmarks.md`.

use std::path::PathBuf;
use std::process::ExitCode;

use agentry_bench::cluster::{
    self, ClusterCpuParams, ClusterRunsParams, CrossParams, DEFAULT_REDIS, TakeoverParams,
};
use agentry_bench::harness::{Database, Target, agentry_beside_me};
use agentry_bench::report::{self, Record};
use agentry_bench::scenarios::{
    self, CancelParams, HitlParams, IdleParams, OpenAiParams, RunsParams, SoakParams, StreamParams,
};
use agentry_bench::suite::{ClusterSizes, Sizes, run_all, run_cluster};
use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

/// A load generator for Agentry: drives the real `agentry` binary over WebSocket and HTTP with
/// a fake model server as the model, and writes what it measured.
#[derive(Debug, Parser)]
#[command(name = "agentry-bench", version)]
struct Cli {
    /// The `agentry` binary to measure [default: the one beside this executable].
    #[arg(long, global = true)]
    agentry: Option<PathBuf>,
    /// `sqlite` (a new file per scenario), or a postgres:// or mysql:// URL.
    #[arg(long, global = true, default_value = "sqlite")]
    database: String,
    /// Where the JSON records go.
    #[arg(long, global = true, default_value = "bench/results")]
    out: PathBuf,
    /// HTTP worker threads of the server (0 = one per core).
    #[arg(long, global = true, default_value_t = 0)]
    workers: usize,
    /// The Redis of the cluster scenarios (the replicas' keys get a prefix of this run's own).
    #[arg(long, global = true, default_value = DEFAULT_REDIS)]
    redis: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every scenario below at the sizes of docs/benchmarks.md (`--smoke`: tiny counts).
    All {
        #[arg(long)]
        smoke: bool,
    },
    /// C clients doing one-tool runs (model → tool call → auto-approve → tool → model → answer).
    Runs {
        #[arg(long, default_value_t = 32)]
        clients: usize,
        #[arg(long, default_value_t = 20)]
        duration_secs: u64,
        /// Stop each client after this many runs (0 = only the duration counts).
        #[arg(long, default_value_t = 0)]
        max_runs: u64,
        #[arg(long, default_value_t = 0)]
        model_latency_ms: u64,
    },
    /// Streamed answers: model's first byte → client's first text event; events/s.
    Stream {
        #[arg(long, default_value_t = 4)]
        clients: usize,
        #[arg(long, default_value_t = 50)]
        runs: u64,
        #[arg(long, default_value_t = 200)]
        chunks: usize,
        #[arg(long, default_value_t = 0)]
        chunk_delay_ms: u64,
        #[arg(long, default_value_t = 400)]
        words: usize,
    },
    /// Cancel mid-run: cancel frame → done{cancelled: true}.
    Cancel {
        #[arg(long, default_value_t = 8)]
        clients: usize,
        #[arg(long, default_value_t = 50)]
        runs: u64,
        #[arg(long, default_value_t = 20)]
        cancel_after_ms: u64,
    },
    /// A tool needing approval: hitl_decision frame → next event.
    Hitl {
        #[arg(long, default_value_t = 8)]
        clients: usize,
        #[arg(long, default_value_t = 100)]
        runs: u64,
    },
    /// N idle WebSocket sessions: server RSS per session, how many are held.
    Idle {
        #[arg(long, default_value_t = 10_000)]
        sessions: usize,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        #[arg(long, default_value_t = 5)]
        hold_secs: u64,
    },
    /// One-tool runs through the OpenAI-compatible `POST /v1/chat/completions` (or, with
    /// `--responses`, `POST /v1/responses`).
    Openai {
        #[arg(long, default_value_t = 32)]
        clients: usize,
        #[arg(long, default_value_t = 100)]
        runs: u64,
        /// Ask for the SSE stream (chunks until `data: [DONE]`).
        #[arg(long)]
        stream: bool,
        /// Through the Responses API (`POST /v1/responses`, `previous_response_id`) instead.
        #[arg(long)]
        responses: bool,
    },
    /// C clients doing one-tool REST runs, each in a new session, for a long time: server RSS at
    /// 1, 10 and 30 minutes, at the end and after idle, and RSS left per finished run.
    Soak {
        #[arg(long, default_value_t = 5)]
        clients: usize,
        /// How long the clients run (the 30-minute figure needs 1800).
        #[arg(long, default_value_t = 1800)]
        duration_secs: u64,
        /// How long the server is left idle after the last run before RSS is read again.
        #[arg(long, default_value_t = 90)]
        idle_secs: u64,
        /// `session.max_live` of the server [default: the server's].
        #[arg(long)]
        max_live: Option<usize>,
    },
    /// Semantic memory search (`GET /api/v1/memories/search`) as one user's scope grows: the
    /// memories are seeded straight into the database with their fake vectors, then searched.
    MemorySearch {
        /// Memories in the scope at each measurement (comma-separated, ascending).
        #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
        sizes: Vec<u64>,
        /// Searches timed at each size.
        #[arg(long, default_value_t = 30)]
        queries: u64,
        /// Vector dimensions (the fake embeddings zero-padded: same rankings, real sizes).
        #[arg(long, default_value_t = 1536)]
        dims: usize,
    },
    /// Every cluster-mode scenario below (issue 13) at the sizes of docs/benchmarks.md; needs
    /// --database postgres://… (or mysql://…) and Redis (`--redis`).
    Cluster {
        #[arg(long)]
        smoke: bool,
    },
    /// Server CPU per one-tool run: one replica in cluster mode vs a single-node server, same
    /// database and clients, phases alternating.
    ClusterCpu {
        #[arg(long, default_value_t = 32)]
        clients: usize,
        #[arg(long, default_value_t = 15)]
        duration_secs: u64,
        #[arg(long, default_value_t = 0)]
        max_runs: u64,
        /// Pairs of phases (single-node, cluster).
        #[arg(long, default_value_t = 2)]
        rounds: usize,
    },
    /// One-tool runs on N replicas in cluster mode, clients spread round-robin.
    ClusterRuns {
        #[arg(long, default_value_t = 3)]
        replicas: usize,
        #[arg(long, default_value_t = 32)]
        clients: usize,
        #[arg(long, default_value_t = 20)]
        duration_secs: u64,
        #[arg(long, default_value_t = 0)]
        max_runs: u64,
    },
    /// kill -9 of a session's owner → first resumed event on another replica.
    Takeover {
        #[arg(long, default_value_t = 3)]
        replicas: usize,
        #[arg(long, default_value_t = 20)]
        trials: usize,
    },
    /// Cancel on replica A of a run owned by replica B: cancel frame → done.
    ClusterCancel {
        #[arg(long, default_value_t = 4)]
        clients: usize,
        #[arg(long, default_value_t = 50)]
        runs: u64,
        #[arg(long, default_value_t = 20)]
        cancel_after_ms: u64,
    },
    /// Approval on replica A of a run owned by replica B: decision → next event.
    ClusterHitl {
        #[arg(long, default_value_t = 2)]
        clients: usize,
        #[arg(long, default_value_t = 100)]
        runs: u64,
    },
    /// Rewrite the table in a benchmarks document from the newest record of each scenario.
    Report {
        #[arg(long, default_value = "docs/benchmarks.md")]
        doc: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentry-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentry-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    if let Command::Report { doc } = &cli.command {
        let n = report::update_doc(doc, &cli.out)?;
        eprintln!("{}: {n} rows from {}", doc.display(), cli.out.display());
        return Ok(());
    }
    let agentry = match cli.agentry {
        Some(path) => path,
        None => agentry_beside_me().context(
            "no `agentry` binary beside agentry-bench: build it (cargo build --release -p agentry-gateway) or pass --agentry PATH",
        )?,
    };
    let target = Target {
        agentry,
        database: Database::parse(&cli.database)?,
        workers: cli.workers,
    };
    let one = |record: Record| -> Result<()> {
        let path = record.write(&cli.out)?;
        eprintln!("    → {}", path.display());
        Ok(())
    };
    match cli.command {
        Command::All { smoke } => {
            let sizes = if smoke { Sizes::smoke() } else { Sizes::full() };
            let records = run_all(&target, &sizes, &cli.out).await?;
            let errors: u64 = records.iter().map(|(r, _)| r.errors).sum();
            if errors > 0 {
                anyhow::bail!("{errors} errors during the runs (see the records)");
            }
        }
        Command::Runs {
            clients,
            duration_secs,
            max_runs,
            model_latency_ms,
        } => one(scenarios::runs(
            &target,
            &RunsParams {
                clients,
                duration_secs,
                max_runs_per_client: max_runs,
                model_latency_ms,
            },
        )
        .await?)?,
        Command::Stream {
            clients,
            runs,
            chunks,
            chunk_delay_ms,
            words,
        } => one(scenarios::stream(
            &target,
            &StreamParams {
                clients,
                runs_per_client: runs,
                chunks,
                chunk_delay_ms,
                words,
            },
        )
        .await?)?,
        Command::Cancel {
            clients,
            runs,
            cancel_after_ms,
        } => one(scenarios::cancel(
            &target,
            &CancelParams {
                clients,
                runs_per_client: runs,
                cancel_after_ms,
            },
        )
        .await?)?,
        Command::Hitl { clients, runs } => one(scenarios::hitl(
            &target,
            &HitlParams {
                clients,
                runs_per_client: runs,
            },
        )
        .await?)?,
        Command::Idle {
            sessions,
            concurrency,
            hold_secs,
        } => one(scenarios::idle(
            &target,
            &IdleParams {
                sessions,
                concurrency,
                hold_secs,
            },
        )
        .await?)?,
        Command::Openai {
            clients,
            runs,
            stream,
            responses,
        } => one(scenarios::openai(
            &target,
            &OpenAiParams {
                clients,
                runs_per_client: runs,
                stream,
                responses,
            },
        )
        .await?)?,
        Command::MemorySearch {
            sizes,
            queries,
            dims,
        } => {
            let mut sizes = sizes;
            sizes.sort_unstable();
            one(agentry_bench::memory::memory_search(
                &target,
                &agentry_bench::memory::MemoryParams {
                    sizes,
                    queries,
                    dims,
                },
            )
            .await?)?
        }
        Command::Soak {
            clients,
            duration_secs,
            idle_secs,
            max_live,
        } => one(scenarios::soak(
            &target,
            &SoakParams {
                clients,
                duration_secs,
                idle_secs,
                max_live,
            },
        )
        .await?)?,
        Command::Cluster { smoke } => {
            let sizes = if smoke {
                ClusterSizes::smoke()
            } else {
                ClusterSizes::full()
            };
            let records = run_cluster(&target, &cli.redis, &sizes, &cli.out).await?;
            let errors: u64 = records.iter().map(|(r, _)| r.errors).sum();
            if errors > 0 {
                anyhow::bail!("{errors} errors during the runs (see the records)");
            }
        }
        Command::ClusterCpu {
            clients,
            duration_secs,
            max_runs,
            rounds,
        } => one(cluster::cluster_cpu(
            &target,
            &cli.redis,
            &ClusterCpuParams {
                clients,
                duration_secs,
                max_runs_per_client: max_runs,
                rounds,
            },
        )
        .await?)?,
        Command::ClusterRuns {
            replicas,
            clients,
            duration_secs,
            max_runs,
        } => one(cluster::cluster_runs(
            &target,
            &cli.redis,
            &ClusterRunsParams {
                replicas,
                clients,
                duration_secs,
                max_runs_per_client: max_runs,
            },
        )
        .await?)?,
        Command::Takeover { replicas, trials } => {
            one(
                cluster::takeover(&target, &cli.redis, &TakeoverParams { replicas, trials })
                    .await?,
            )?
        }
        Command::ClusterCancel {
            clients,
            runs,
            cancel_after_ms,
        } => one(cluster::cluster_cancel(
            &target,
            &cli.redis,
            &CrossParams {
                clients,
                runs_per_client: runs,
                cancel_after_ms,
            },
        )
        .await?)?,
        Command::ClusterHitl { clients, runs } => one(cluster::cluster_hitl(
            &target,
            &cli.redis,
            &CrossParams {
                clients,
                runs_per_client: runs,
                cancel_after_ms: 0,
            },
        )
        .await?)?,
        Command::Report { .. } => {}
    }
    Ok(())
}
