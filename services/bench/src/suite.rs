//! The standard set of scenarios, at full size or as a smoke run.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::harness::Target;
use crate::report::Record;
use crate::scenarios::{
    self, CancelParams, HitlParams, IdleParams, OpenAiParams, RunsParams, SoakParams, StreamParams,
};

/// The parameters of every scenario of the suite.
#[derive(Debug, Clone)]
pub struct Sizes {
    pub runs: RunsParams,
    /// Model latencies `runs` is measured at.
    pub runs_latencies_ms: Vec<u64>,
    pub stream: StreamParams,
    pub cancel: CancelParams,
    pub hitl: HitlParams,
    pub idle: IdleParams,
    /// `/v1/chat/completions`, non-streamed and streamed.
    pub openai: OpenAiParams,
    pub soak: SoakParams,
}

impl Sizes {
    /// What `docs/benchmarks.md` reports.
    pub fn full() -> Self {
        Sizes {
            runs: RunsParams {
                clients: 32,
                duration_secs: 20,
                max_runs_per_client: 0,
                model_latency_ms: 0,
            },
            runs_latencies_ms: vec![0, 50],
            stream: StreamParams {
                clients: 4,
                runs_per_client: 50,
                chunks: 200,
                chunk_delay_ms: 0,
                words: 400,
            },
            cancel: CancelParams {
                clients: 8,
                runs_per_client: 50,
                cancel_after_ms: 20,
            },
            // Two sessions deciding at once: the decision's latency, not the machine's queue
            // (`runs` measures that).
            hitl: HitlParams {
                clients: 2,
                runs_per_client: 200,
            },
            idle: IdleParams {
                sessions: 10_000,
                concurrency: 64,
                hold_secs: 5,
            },
            openai: OpenAiParams {
                clients: 32,
                runs_per_client: 100,
                stream: false,
            },
            // The soak: 5 clients, 30 minutes, then 90 s idle.
            soak: SoakParams {
                clients: 5,
                duration_secs: 1800,
                idle_secs: 90,
                max_live: None,
            },
        }
    }

    /// Tiny counts, so the test suite can tell the harness still works.
    pub fn smoke() -> Self {
        Sizes {
            runs: RunsParams {
                clients: 2,
                duration_secs: 5,
                max_runs_per_client: 3,
                model_latency_ms: 0,
            },
            runs_latencies_ms: vec![0, 50],
            stream: StreamParams {
                clients: 1,
                runs_per_client: 2,
                chunks: 20,
                chunk_delay_ms: 1,
                words: 40,
            },
            cancel: CancelParams {
                clients: 1,
                runs_per_client: 2,
                cancel_after_ms: 20,
            },
            hitl: HitlParams {
                clients: 1,
                runs_per_client: 2,
            },
            idle: IdleParams {
                sessions: 20,
                concurrency: 8,
                hold_secs: 1,
            },
            openai: OpenAiParams {
                clients: 2,
                runs_per_client: 3,
                stream: false,
            },
            soak: SoakParams {
                clients: 2,
                duration_secs: 3,
                idle_secs: 1,
                max_live: Some(2),
            },
        }
    }
}

/// Run every scenario on `target`, writing each record into `out` as it completes.
pub async fn run_all(target: &Target, sizes: &Sizes, out: &Path) -> Result<Vec<(Record, PathBuf)>> {
    let mut records = Vec::new();
    let mut keep = |record: Record| -> Result<()> {
        let path = record.write(out)?;
        eprintln!("    → {}", path.display());
        records.push((record, path));
        Ok(())
    };
    for latency in &sizes.runs_latencies_ms {
        let params = RunsParams {
            model_latency_ms: *latency,
            ..sizes.runs.clone()
        };
        keep(scenarios::runs(target, &params).await?)?;
    }
    keep(scenarios::stream(target, &sizes.stream).await?)?;
    keep(scenarios::cancel(target, &sizes.cancel).await?)?;
    keep(scenarios::hitl(target, &sizes.hitl).await?)?;
    keep(scenarios::idle(target, &sizes.idle).await?)?;
    for stream in [false, true] {
        let params = OpenAiParams {
            stream,
            ..sizes.openai.clone()
        };
        keep(scenarios::openai(target, &params).await?)?;
    }
    keep(scenarios::soak(target, &sizes.soak).await?)?;
    Ok(records)
}
