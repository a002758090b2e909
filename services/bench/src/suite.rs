//! The standard set of scenarios, at full size or as a smoke run.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::cluster::{self, ClusterCpuParams, ClusterRunsParams, CrossParams, TakeoverParams};
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
                responses: false,
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
                responses: false,
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
    for (responses, stream) in [(false, false), (false, true), (true, false), (true, true)] {
        let params = OpenAiParams {
            stream,
            responses,
            ..sizes.openai.clone()
        };
        keep(scenarios::openai(target, &params).await?)?;
    }
    keep(scenarios::soak(target, &sizes.soak).await?)?;
    Ok(records)
}

/// The parameters of the cluster-mode scenarios (issue 13).
#[derive(Debug, Clone)]
pub struct ClusterSizes {
    pub cpu: ClusterCpuParams,
    /// `cluster-runs` is measured at each of these replica counts.
    pub runs: ClusterRunsParams,
    pub runs_replicas: Vec<usize>,
    pub takeover: TakeoverParams,
    pub cancel: CrossParams,
    pub hitl: CrossParams,
}

impl ClusterSizes {
    /// What `docs/benchmarks.md` reports.
    pub fn full() -> Self {
        ClusterSizes {
            cpu: ClusterCpuParams {
                clients: 32,
                duration_secs: 15,
                max_runs_per_client: 0,
                rounds: 2,
            },
            runs: ClusterRunsParams {
                replicas: 1,
                clients: 32,
                duration_secs: 20,
                max_runs_per_client: 0,
            },
            runs_replicas: vec![1, 3],
            takeover: TakeoverParams {
                replicas: 3,
                trials: 20,
            },
            cancel: CrossParams {
                clients: 4,
                runs_per_client: 50,
                cancel_after_ms: 20,
            },
            hitl: CrossParams {
                clients: 2,
                runs_per_client: 100,
                cancel_after_ms: 0,
            },
        }
    }

    /// Tiny counts, so the test suite can tell the cluster scenarios still work.
    pub fn smoke() -> Self {
        ClusterSizes {
            cpu: ClusterCpuParams {
                clients: 2,
                duration_secs: 5,
                max_runs_per_client: 2,
                rounds: 1,
            },
            runs: ClusterRunsParams {
                replicas: 1,
                clients: 3,
                duration_secs: 5,
                max_runs_per_client: 2,
            },
            runs_replicas: vec![3],
            // One trial: a run waiting for an approval, taken over by the other replica.
            takeover: TakeoverParams {
                replicas: 2,
                trials: 1,
            },
            cancel: CrossParams {
                clients: 1,
                runs_per_client: 2,
                cancel_after_ms: 20,
            },
            hitl: CrossParams {
                clients: 1,
                runs_per_client: 2,
                cancel_after_ms: 0,
            },
        }
    }
}

/// Every cluster-mode scenario on `target` (PostgreSQL or MySQL) with Redis at `redis`, writing
/// each record into `out` as it completes. The takeover goes last: it leaves killed replicas'
/// database leases behind, which a single-node server would wait out.
pub async fn run_cluster(
    target: &Target,
    redis: &str,
    sizes: &ClusterSizes,
    out: &Path,
) -> Result<Vec<(Record, PathBuf)>> {
    let mut records = Vec::new();
    let mut keep = |record: Record| -> Result<()> {
        let path = record.write(out)?;
        eprintln!("    → {}", path.display());
        records.push((record, path));
        Ok(())
    };
    keep(cluster::cluster_cpu(target, redis, &sizes.cpu).await?)?;
    for replicas in &sizes.runs_replicas {
        let params = ClusterRunsParams {
            replicas: *replicas,
            ..sizes.runs.clone()
        };
        keep(cluster::cluster_runs(target, redis, &params).await?)?;
    }
    keep(cluster::cluster_cancel(target, redis, &sizes.cancel).await?)?;
    keep(cluster::cluster_hitl(target, redis, &sizes.hitl).await?)?;
    keep(cluster::takeover(target, redis, &sizes.takeover).await?)?;
    Ok(records)
}
