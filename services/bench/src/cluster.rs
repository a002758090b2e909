//! Cluster mode (issue 13): several `agentry serve` replicas on one PostgreSQL (or MySQL)
//! database and one Redis, with the fake model of this process. The scenarios here measure what
//! the coordination costs: CPU per run against single-node mode, runs/s on 1 and 3 replicas, the
//! takeover after `kill -9` of a session's owner, and cancel and approval latency when the
//! client's replica is not the session's owner.
//!
//! Every replica runs with the cluster settings a production deployment has by default
//! (`cluster.replica_ttl_ms` 3,000, heartbeats every quarter of it, the watcher's scan every
//! 500 ms, session leases of 10 s): the bench sets only the Redis URL, a key prefix of its own
//! and the replica ids.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry_fake_model::FakeModelServer;
use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::task::JoinSet;

use crate::harness::{
    self, AUTO_ASSISTANT, Database, Endpoint, HITL_ASSISTANT, ModelProfile, Server, Target,
};
use crate::report::Record;
use crate::scenarios::{
    Errors, Frame, Progress, RUN_LIMIT, check_done, fmt_summary, ms, own_cpu, run_latencies,
    spawn_run_clients, todo_call,
};
use crate::stats::{Summary, summarize};
use crate::ws::{Received, SessionSocket};

/// Where the replicas' Redis is. The bench's keys and channels carry a prefix of their own
/// (`bench-<pid>-<time>`), and the default database index (15) is one no test uses, so a bench
/// never touches what a test keeps there.
pub const DEFAULT_REDIS: &str = "redis://127.0.0.1:6379/15";

/// N servers sharing the fake model, one database and (in cluster mode) one Redis; a tenant
/// with every quota off and the benchmark's assistants.
pub struct Cluster {
    pub model: FakeModelServer,
    /// `None`: a replica killed and not replaced.
    replicas: Vec<Option<Server>>,
    http: reqwest::Client,
    pub key: String,
    admin_key: String,
    target: Target,
    /// The Redis URL and key prefix in cluster mode; `None` for a single-node server.
    redis: Option<(String, String)>,
    /// Replicas started so far: each gets a new id (as a restarted pod does).
    started: usize,
    /// Replica ids, by slot.
    ids: Vec<String>,
}

impl Cluster {
    /// `n` replicas with Redis at `redis` (cluster mode), or one single-node server when
    /// `redis` is `None`.
    pub async fn start(
        target: &Target,
        profile: ModelProfile,
        n: usize,
        redis: Option<&str>,
    ) -> Result<Cluster> {
        if redis.is_some() && target.database == Database::Sqlite {
            bail!(
                "cluster mode needs a PostgreSQL or MySQL database shared by the replicas: pass --database postgres://…"
            );
        }
        if redis.is_none() && n != 1 {
            bail!("a single-node server is one server");
        }
        let prefix = format!(
            "bench-{}-{}",
            std::process::id(),
            chrono::Utc::now().format("%H%M%S%.6f")
        );
        let mut cluster = Cluster {
            model: harness::start_model(profile)?,
            replicas: Vec::new(),
            http: harness::http_client()?,
            key: String::new(),
            admin_key: harness::admin_key(),
            target: target.clone(),
            redis: redis.map(|url| (url.to_string(), prefix)),
            started: 0,
            ids: Vec::new(),
        };
        for _ in 0..n {
            let server = cluster.spawn().await?;
            cluster.replicas.push(Some(server.0));
            cluster.ids.push(server.1);
        }
        let base = cluster.endpoint(0)?.url("");
        cluster.key = harness::create_tenant(&cluster.http, &base, &cluster.admin_key).await?;
        harness::create_assistants(&cluster.http, &base, &cluster.key).await?;
        Ok(cluster)
    }

    async fn spawn(&mut self) -> Result<(Server, String)> {
        self.started += 1;
        let id = format!("bench{}-r{}", std::process::id(), self.started);
        let mut env = Vec::new();
        if let Some((url, prefix)) = &self.redis {
            env.push(("AGENTRY_REDIS__URL", url.clone()));
            env.push(("AGENTRY_REDIS__KEY_PREFIX", prefix.clone()));
            env.push(("AGENTRY_CLUSTER__REPLICA_ID", id.clone()));
        }
        let server = Server::spawn(
            &self.target,
            &self.model.base_url_openai(),
            &self.admin_key,
            &env,
        )
        .await
        .with_context(|| format!("starting replica {id}"))?;
        Ok((server, id))
    }

    fn server(&self, slot: usize) -> Result<&Server> {
        self.replicas
            .get(slot)
            .and_then(Option::as_ref)
            .with_context(|| format!("replica slot {slot} has no live server"))
    }

    /// How a client reaches the replica in `slot`.
    pub fn endpoint(&self, slot: usize) -> Result<Endpoint> {
        Ok(Endpoint {
            http: self.http.clone(),
            port: self.server(slot)?.port,
            key: self.key.clone(),
        })
    }

    pub fn id(&self, slot: usize) -> &str {
        self.ids.get(slot).map(String::as_str).unwrap_or("")
    }

    fn live(&self) -> impl Iterator<Item = &Server> {
        self.replicas.iter().flatten()
    }

    /// CPU time of every live replica, summed.
    pub fn cpu_time(&self) -> Result<Duration> {
        self.live().map(|s| harness::cpu_time(s.pid)).sum()
    }

    pub fn context_switches(&self) -> Result<u64> {
        self.live().map(|s| harness::context_switches(s.pid)).sum()
    }

    /// SQL statements every live replica has sent.
    pub async fn sql_statements(&self) -> Result<u64> {
        let mut total = 0;
        for slot in 0..self.replicas.len() {
            if self.replicas[slot].is_none() {
                continue;
            }
            let text = self
                .http
                .get(self.endpoint(slot)?.url("/metrics"))
                .send()
                .await
                .context("GET /metrics")?
                .error_for_status()
                .context("GET /metrics")?
                .text()
                .await
                .context("reading /metrics")?;
            total += harness::sum_samples(&text, "agentry_db_statements_total");
        }
        Ok(total)
    }

    /// `kill -9` the replica in `slot`.
    pub async fn crash(&mut self, slot: usize) -> Result<()> {
        let server = self
            .replicas
            .get_mut(slot)
            .and_then(Option::take)
            .with_context(|| format!("replica slot {slot} has no live server"))?;
        server.crash().await
    }

    /// A new replica (a new id) in `slot`, which must be empty.
    pub async fn replace(&mut self, slot: usize) -> Result<()> {
        if self.server(slot).is_ok() {
            bail!("replica slot {slot} is live");
        }
        let (server, id) = self.spawn().await?;
        self.replicas[slot] = Some(server);
        self.ids[slot] = id;
        Ok(())
    }

    /// The replica that owns `session` now, from its Redis lease (`None`: nobody).
    pub async fn owner(&self, session: &str) -> Result<Option<String>> {
        let Some((url, prefix)) = &self.redis else {
            return Ok(None);
        };
        let value = redis_get(url, &format!("{prefix}:session:{session}:owner")).await?;
        Ok(value.map(|v| v.split('|').next().unwrap_or("").to_string()))
    }

    pub async fn stop(self) {
        for server in self.replicas.into_iter().flatten() {
            server.stop().await;
        }
        self.model.stop().await;
    }
}

// ---------------------------------------------------------------------------------------------
// A minimal Redis client (RESP over TCP) for what the bench reads itself: a session's owner and
// the Redis server's CPU time. The replicas use their own client.

async fn redis_command(url: &str, commands: &[&[&str]]) -> Result<Vec<Option<String>>> {
    let parsed = reqwest::Url::parse(url).with_context(|| format!("`{url}` is not a URL"))?;
    let host = parsed.host_str().unwrap_or("127.0.0.1").to_string();
    let port = parsed.port().unwrap_or(6379);
    let db = parsed.path().trim_start_matches('/').to_string();
    let stream = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .with_context(|| format!("connecting to Redis at {host}:{port}"))?;
    let mut stream = BufReader::new(stream);
    let mut all: Vec<Vec<String>> = Vec::new();
    if let Some(password) = parsed.password() {
        let user = parsed.username();
        all.push(if user.is_empty() {
            vec!["AUTH".into(), password.into()]
        } else {
            vec!["AUTH".into(), user.into(), password.into()]
        });
    }
    if !db.is_empty() {
        all.push(vec!["SELECT".into(), db]);
    }
    let setup = all.len();
    all.extend(
        commands
            .iter()
            .map(|c| c.iter().map(|s| s.to_string()).collect()),
    );
    let mut out = Vec::new();
    for (i, command) in all.iter().enumerate() {
        let mut frame = format!("*{}\r\n", command.len());
        for arg in command {
            frame.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream.get_mut().write_all(frame.as_bytes()).await?;
        let reply = tokio::time::timeout(Duration::from_secs(5), read_reply(&mut stream))
            .await
            .context("Redis did not answer within 5 s")??;
        if i >= setup {
            out.push(reply);
        }
    }
    Ok(out)
}

async fn read_reply(stream: &mut BufReader<tokio::net::TcpStream>) -> Result<Option<String>> {
    let mut line = String::new();
    stream.read_line(&mut line).await?;
    let line = line.trim_end();
    match line.as_bytes().first() {
        Some(b'+') | Some(b':') => Ok(Some(line[1..].to_string())),
        Some(b'-') => bail!("Redis answered an error: {}", &line[1..]),
        Some(b'$') => {
            let len: i64 = line[1..].parse().context("a malformed Redis reply")?;
            if len < 0 {
                return Ok(None);
            }
            let mut buf = vec![0u8; usize::try_from(len)? + 2];
            stream.read_exact(&mut buf).await?;
            buf.truncate(buf.len() - 2);
            Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
        }
        _ => bail!("an unexpected Redis reply: {line:?}"),
    }
}

async fn redis_get(url: &str, key: &str) -> Result<Option<String>> {
    Ok(redis_command(url, &[&["GET", key]])
        .await?
        .into_iter()
        .next()
        .flatten())
}

/// The Redis server's CPU time (`used_cpu_user` + `used_cpu_sys` of `INFO cpu`): the whole
/// server, so on a shared machine it includes other clients of the same Redis.
pub async fn redis_cpu(url: &str) -> Result<Duration> {
    let info = redis_command(url, &[&["INFO", "cpu"]])
        .await?
        .into_iter()
        .next()
        .flatten()
        .context("INFO answered nothing")?;
    let field = |name: &str| -> f64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    Ok(Duration::from_secs_f64(
        field("used_cpu_user:") + field("used_cpu_sys:"),
    ))
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct ClusterRunsParams {
    pub replicas: usize,
    pub clients: usize,
    pub duration_secs: u64,
    /// Stop each client after this many measured runs (0 = only the duration counts).
    pub max_runs_per_client: u64,
}

/// What one measured phase of one-tool runs gave.
struct Phase {
    runs: usize,
    runs_per_sec: f64,
    server_cpu_ms_per_run: f64,
    redis_cpu_ms_per_run: f64,
    sql_per_run: f64,
    switches_per_run: f64,
    e2e: Option<Summary>,
    overhead: Option<Summary>,
    model_calls_per_run: f64,
    loadgen_cpu_ms_per_run: f64,
}

impl Phase {
    fn json(&self) -> Value {
        json!({
            "runs": self.runs,
            "runs_per_sec": (self.runs_per_sec * 10.0).round() / 10.0,
            "server_cpu_ms_per_run": round3(self.server_cpu_ms_per_run),
            "redis_cpu_ms_per_run": round3(self.redis_cpu_ms_per_run),
            "sql_statements_per_run": (self.sql_per_run * 10.0).round() / 10.0,
            "context_switches_per_run": self.switches_per_run.round(),
            "end_to_end": self.e2e,
            "server_overhead": self.overhead,
            "model_calls_per_run": self.model_calls_per_run,
            "loadgen_and_model_cpu_ms_per_run": round3(self.loadgen_cpu_ms_per_run),
        })
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// C clients doing one-tool runs, client `c` on replica `c % N`, measured from the end of the
/// warm-up to the last `done`: CPU of every replica (and of the Redis server when there is one).
async fn measure_runs(
    cluster: &Cluster,
    redis_url: &str,
    clients: usize,
    duration: Duration,
    max_runs: u64,
    errors: &Arc<Errors>,
) -> Result<Phase> {
    let endpoints = (0..cluster.replicas.len())
        .map(|slot| cluster.endpoint(slot))
        .collect::<Result<Vec<_>>>()?;
    let progress = Arc::new(Progress::start("runs", "runs", None));
    let (mut set, barrier) =
        spawn_run_clients(&endpoints, clients, duration, max_runs, errors, &progress);
    barrier.wait().await;
    // Redis is read in each mode: in single-node mode its CPU is what others on the machine
    // cost it (the baseline of the cluster figure).
    let redis0 = redis_cpu(redis_url).await.ok();
    let (cpu0, own0, t0) = (cluster.cpu_time()?, own_cpu(), Instant::now());
    let (sql0, switches0) = (cluster.sql_statements().await?, cluster.context_switches()?);
    let mut samples = Vec::new();
    while let Some(joined) = set.join_next().await {
        samples.extend(joined.context("a client task failed")?);
    }
    let last_end = samples.iter().map(|s| s.2).max().unwrap_or(t0);
    let window = last_end.saturating_duration_since(t0);
    let server_cpu = cluster.cpu_time()?.saturating_sub(cpu0);
    let own = own_cpu().saturating_sub(own0);
    let redis_used = match (redis0, redis_cpu(redis_url).await.ok()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => Duration::ZERO,
    };
    let switches = cluster.context_switches()?.saturating_sub(switches0);
    let sql = cluster.sql_statements().await?.saturating_sub(sql0);
    drop(progress);
    let (e2e, overhead, model_calls) = run_latencies(&samples, cluster.model.take_timings());
    let n = samples.len() as f64;
    let per = |x: f64| if n > 0.0 { x / n } else { 0.0 };
    Ok(Phase {
        runs: samples.len(),
        runs_per_sec: n / window.as_secs_f64().max(1e-9),
        server_cpu_ms_per_run: per(ms(server_cpu)),
        redis_cpu_ms_per_run: per(ms(redis_used)),
        sql_per_run: per(sql as f64),
        switches_per_run: per(switches as f64),
        e2e: summarize(&e2e),
        overhead: summarize(&overhead),
        model_calls_per_run: per(f64::from(model_calls)),
        loadgen_cpu_ms_per_run: per(ms(own)),
    })
}

/// One-tool runs on N replicas in cluster mode, the clients spread over them round-robin (each
/// client's session lives on the replica it talks to, so nothing is forwarded): runs/s and the
/// CPU of all replicas per run.
pub async fn cluster_runs(target: &Target, redis: &str, p: &ClusterRunsParams) -> Result<Record> {
    let frame = Frame::new("cluster-runs", format!("cluster-runs-{}r", p.replicas));
    let cluster = Cluster::start(target, ModelProfile::INSTANT, p.replicas, Some(redis)).await?;
    let errors = Arc::new(Errors::default());
    let phase = measure_runs(
        &cluster,
        redis,
        p.clients,
        Duration::from_secs(p.duration_secs),
        p.max_runs_per_client,
        &errors,
    )
    .await;
    cluster.stop().await;
    let phase = phase?;
    let headline = format!(
        "{:.0} runs/s on {} replica{}; server CPU {:.2} ms/run (all replicas), Redis {:.2} ms/run; end-to-end {}; {:.1} SQL statements per run",
        phase.runs_per_sec,
        p.replicas,
        if p.replicas == 1 { "" } else { "s" },
        phase.server_cpu_ms_per_run,
        phase.redis_cpu_ms_per_run,
        fmt_summary(&phase.e2e),
        phase.sql_per_run,
    );
    Ok(frame.record(target, p, phase.json(), headline, &errors))
}

#[derive(Debug, Clone, Serialize)]
pub struct ClusterCpuParams {
    pub clients: usize,
    pub duration_secs: u64,
    pub max_runs_per_client: u64,
    /// Pairs of phases: single-node, then one replica in cluster mode, this many times.
    pub rounds: usize,
}

/// Server CPU per one-tool run with one replica in cluster mode (Redis) against a single-node
/// server (no Redis) on the same database, same clients, phases alternating so that a drift of
/// the machine's load falls on both.
pub async fn cluster_cpu(target: &Target, redis: &str, p: &ClusterCpuParams) -> Result<Record> {
    let frame = Frame::new("cluster-cpu", "cluster-cpu".into());
    let errors = Arc::new(Errors::default());
    let duration = Duration::from_secs(p.duration_secs);
    let mut single = Vec::new();
    let mut cluster = Vec::new();
    for round in 0..p.rounds.max(1) {
        for mode in [None, Some(redis)] {
            eprintln!(
                "  round {}: {}",
                round + 1,
                if mode.is_some() {
                    "one replica, cluster mode"
                } else {
                    "single-node"
                }
            );
            let c = Cluster::start(target, ModelProfile::INSTANT, 1, mode).await?;
            let phase = measure_runs(
                &c,
                redis,
                p.clients,
                duration,
                p.max_runs_per_client,
                &errors,
            )
            .await;
            c.stop().await;
            let phase = phase?;
            eprintln!(
                "    {:.0} runs/s, {:.2} ms server CPU per run",
                phase.runs_per_sec, phase.server_cpu_ms_per_run
            );
            if mode.is_some() {
                cluster.push(phase);
            } else {
                single.push(phase);
            }
        }
    }
    let mean = |phases: &[Phase], f: fn(&Phase) -> f64| {
        phases.iter().map(f).sum::<f64>() / phases.len().max(1) as f64
    };
    let cpu = |x: &Phase| x.server_cpu_ms_per_run;
    let (cpu_single, cpu_cluster) = (mean(&single, cpu), mean(&cluster, cpu));
    let ratio = if cpu_single > 0.0 {
        cpu_cluster / cpu_single
    } else {
        0.0
    };
    let redis_cpu = |x: &Phase| x.redis_cpu_ms_per_run;
    let sql = |x: &Phase| x.sql_per_run;
    let rate = |x: &Phase| x.runs_per_sec;
    let figures = json!({
        "server_cpu_ms_per_run_single_node": round3(cpu_single),
        "server_cpu_ms_per_run_cluster": round3(cpu_cluster),
        "cpu_ratio_cluster_to_single_node": round3(ratio),
        "redis_cpu_ms_per_run_single_node": round3(mean(&single, redis_cpu)),
        "redis_cpu_ms_per_run_cluster": round3(mean(&cluster, redis_cpu)),
        "sql_statements_per_run_single_node": (mean(&single, sql) * 10.0).round() / 10.0,
        "sql_statements_per_run_cluster": (mean(&cluster, sql) * 10.0).round() / 10.0,
        "runs_per_sec_single_node": (mean(&single, rate) * 10.0).round() / 10.0,
        "runs_per_sec_cluster": (mean(&cluster, rate) * 10.0).round() / 10.0,
        "single_node": single.iter().map(Phase::json).collect::<Vec<_>>(),
        "cluster": cluster.iter().map(Phase::json).collect::<Vec<_>>(),
    });
    let headline = format!(
        "server CPU per one-tool run: cluster {cpu_cluster:.2} ms vs single-node {cpu_single:.2} ms = {ratio:.2}× (+ Redis {:.2} ms/run); {:.0} vs {:.0} runs/s; {:.1} vs {:.1} SQL statements per run",
        mean(&cluster, redis_cpu) - mean(&single, redis_cpu),
        mean(&cluster, rate),
        mean(&single, rate),
        mean(&cluster, sql),
        mean(&single, sql),
    );
    Ok(frame.record(target, p, figures, headline, &errors))
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct TakeoverParams {
    pub replicas: usize,
    /// Trials alternate: a run waiting for an approval (the first), a streaming run (the
    /// second), and so on.
    pub trials: usize,
}

/// How the takeover scenario's model streams: 40 chunks 50 ms apart (a 2 s answer), so a
/// streaming run is killed mid-answer.
const TAKEOVER_PROFILE: ModelProfile = ModelProfile {
    latency_ms: 0,
    chunks: 40,
    chunk_delay_ms: 50,
};

/// `kill -9` of the replica that owns a session with a streaming run, or with a run waiting for
/// an approval: from the kill to the first event of the resumed run (the recoverable `error`
/// that says another replica is resuming it) seen by the client, which reconnected to another
/// replica with the last `seq` it had as soon as its socket closed. The killed replica is
/// replaced by a new one (a new id, as a restarted pod) before the next trial.
pub async fn takeover(target: &Target, redis: &str, p: &TakeoverParams) -> Result<Record> {
    let frame = Frame::new("takeover", "takeover".into());
    if p.replicas < 2 {
        bail!("a takeover needs at least 2 replicas");
    }
    let mut cluster = Cluster::start(target, TAKEOVER_PROFILE, p.replicas, Some(redis)).await?;
    let errors = Errors::default();
    let progress = Progress::start("takeover", "trials", Some(p.trials as u64));
    let mut samples: Vec<(&'static str, Duration, Duration)> = Vec::new();
    for trial in 0..p.trials {
        let waiting = trial % 2 == 0;
        match takeover_trial(&mut cluster, trial, waiting).await {
            Ok((took, reconnected)) => {
                let kind = if waiting { "waiting" } else { "streaming" };
                eprintln!(
                    "  trial {}: {kind} run, resumed event {:.0} ms after the kill",
                    trial + 1,
                    ms(took)
                );
                samples.push((kind, took, reconnected));
                progress.tick();
            }
            Err(e) => errors.add(e.context(format!("trial {}", trial + 1))),
        }
        // Back to N replicas for the next trial.
        for slot in (0..p.replicas).filter(|_| trial + 1 < p.trials) {
            if cluster.server(slot).is_err()
                && let Err(e) = cluster.replace(slot).await
            {
                errors.add(e);
            }
        }
    }
    drop(progress);
    cluster.stop().await;
    let all: Vec<Duration> = samples.iter().map(|s| s.1).collect();
    let of = |kind: &str| -> Vec<Duration> {
        samples
            .iter()
            .filter(|s| s.0 == kind)
            .map(|s| s.1)
            .collect()
    };
    let reconnects: Vec<Duration> = samples.iter().map(|s| s.2).collect();
    let took = summarize(&all);
    let figures = json!({
        "trials": samples.len(),
        "kill_to_resumed_event": took,
        "streaming": summarize(&of("streaming")),
        "waiting_for_approval": summarize(&of("waiting")),
        "kill_to_client_reconnected": summarize(&reconnects),
        "settings": {
            "cluster.replica_ttl_ms": 3000,
            "heartbeat_every_ms": 750,
            "watcher_scan_every_ms": 500,
            "cluster.session_lease_ttl_secs": 10,
        },
    });
    let headline = match &took {
        Some(s) => format!(
            "kill -9 of the owner → first resumed event on another replica: p50 {:.0} / max {:.0} ms over {} trials (waiting-for-approval and streaming runs alternating)",
            s.p50_ms, s.max_ms, s.count
        ),
        None => "no trial completed".into(),
    };
    Ok(frame.record(target, p, figures, headline, &errors))
}

/// One trial: returns (kill → resumed event, kill → the client's new socket open).
async fn takeover_trial(
    cluster: &mut Cluster,
    trial: usize,
    waiting: bool,
) -> Result<(Duration, Duration)> {
    let n = cluster.replicas.len();
    let (owner, other) = (trial % n, (trial + 1) % n);
    let ep = cluster.endpoint(owner)?;
    let assistant = if waiting {
        HITL_ASSISTANT
    } else {
        AUTO_ASSISTANT
    };
    let session = ep.create_session(assistant).await?;
    let mut ws = SessionSocket::connect(&ep.ws_url(&session), &ep.key).await?;
    let message = if waiting {
        todo_call(&format!("takeover {trial}"))
    } else {
        let words = vec!["word"; 80].join(" ");
        format!("/echo takeover {trial} {words}")
    };
    ws.chat(&message).await?;
    // Until the run is under way on its owner: a few text deltas, or the approval request.
    let mut last_seq = 0u64;
    let mut texts = 0;
    let mut request_id = None;
    loop {
        let event = session_event(&mut ws).await?;
        last_seq = last_seq.max(seq(&event));
        match event.event_type() {
            "text" => texts += 1,
            "hitl_request" => {
                request_id = event.data()["request_id"].as_str().map(str::to_string);
            }
            "done" => bail!("the run ended before the kill: {}", event.event),
            _ => {}
        }
        if (waiting && request_id.is_some()) || (!waiting && texts >= 3) {
            break;
        }
    }
    let owner_id = cluster.owner(&session).await?;
    if owner_id.as_deref() != Some(cluster.id(owner)) {
        bail!(
            "the session is owned by {owner_id:?}, not by {} where its run started",
            cluster.id(owner)
        );
    }

    let killed = Instant::now();
    cluster.crash(owner).await?;
    // The client's socket ends with the process; it reconnects elsewhere with its last seq.
    // Events already on the wire before the kill are still the old run's.
    while let Ok(event) = ws.next_event(Duration::from_secs(10)).await {
        last_seq = last_seq.max(seq(&event));
    }
    drop(ws);
    let ep = cluster.endpoint(other)?;
    let mut ws = SessionSocket::connect(
        &format!("{}?after_seq={last_seq}", ep.ws_url(&session)),
        &ep.key,
    )
    .await?;
    let reconnected = killed.elapsed();
    let resumed = loop {
        let event = session_event(&mut ws).await?;
        if event.event_type() == "error"
            && event.data()["recoverable"] == true
            && event.data()["error"]
                .as_str()
                .is_some_and(|e| e.contains("resuming"))
        {
            break event;
        }
        if event.event_type() == "done" {
            bail!("the run ended without a resume notice: {}", event.event);
        }
    };
    let took = resumed.at - killed;
    // The resumed run goes on to its end (a waiting one asks again, under the same id).
    if waiting {
        let again = loop {
            let event = session_event(&mut ws).await?;
            if event.event_type() == "hitl_request" {
                break event;
            }
            if event.event_type() == "done" {
                bail!(
                    "the resumed run ended without asking again: {}",
                    event.event
                );
            }
        };
        let id = again.data()["request_id"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if Some(&id) != request_id.as_ref() {
            bail!("asked again under {id}, not {request_id:?}");
        }
        ws.approve(&id).await?;
    }
    check_done(&ws.until_done(RUN_LIMIT).await?, "completed")?;
    Ok((took, reconnected))
}

fn seq(event: &Received) -> u64 {
    event.event["seq"].as_u64().unwrap_or(0)
}

/// The next event of the session (frames about the connection, `seq` 0, skipped).
async fn session_event(ws: &mut SessionSocket) -> Result<Received> {
    loop {
        let event = ws.next_event(RUN_LIMIT).await?;
        if seq(&event) > 0 {
            return Ok(event);
        }
    }
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct CrossParams {
    pub clients: usize,
    pub runs_per_client: u64,
    /// Cancel only: how long after the run's first text event the cancel frame goes.
    pub cancel_after_ms: u64,
}

/// Cancel and approval latency when the client's replica (A) is not the session's owner (B):
/// each client watches its session on A, and starts each run through a second socket on B, so B
/// owns the run; A forwards the client's frame to B over Redis and relays B's events back.
async fn cross_replica(
    target: &Target,
    redis: &str,
    p: &CrossParams,
    hitl: bool,
) -> Result<Record> {
    let (scenario, variant) = if hitl {
        ("cluster-hitl", "cluster-hitl")
    } else {
        ("cluster-cancel", "cluster-cancel")
    };
    let frame = Frame::new(scenario, variant.into());
    // Cancel: answers that stream for 10 s (400 chunks 25 ms apart), cancelled mid-stream.
    let profile = if hitl {
        ModelProfile::INSTANT
    } else {
        ModelProfile {
            latency_ms: 0,
            chunks: 400,
            chunk_delay_ms: 25,
        }
    };
    let cluster = Arc::new(Cluster::start(target, profile, 2, Some(redis)).await?);
    let errors = Arc::new(Errors::default());
    let total = p.clients as u64 * p.runs_per_client;
    let progress = Arc::new(Progress::start(
        variant,
        if hitl { "approvals" } else { "cancels" },
        Some(total),
    ));
    let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut set = JoinSet::new();
    for c in 0..p.clients {
        let (cluster, errors, progress, samples) = (
            cluster.clone(),
            errors.clone(),
            progress.clone(),
            samples.clone(),
        );
        let (runs, after) = (p.runs_per_client, Duration::from_millis(p.cancel_after_ms));
        set.spawn(async move {
            let outcome = async {
                let (a, b) = (cluster.endpoint(0)?, cluster.endpoint(1)?);
                let b_id = cluster.id(1).to_string();
                let assistant = if hitl { HITL_ASSISTANT } else { AUTO_ASSISTANT };
                let session = a.create_session(assistant).await?;
                let mut on_a = SessionSocket::connect(&a.ws_url(&session), &a.key).await?;
                let mut on_b = SessionSocket::connect(&b.ws_url(&session), &b.key).await?;
                let words = vec!["word"; 400].join(" ");
                for i in 0..runs {
                    let message = if hitl {
                        todo_call(&format!("cross {c}-{i}"))
                    } else {
                        format!("/echo cross {c}-{i} {words}")
                    };
                    on_b.chat(&message).await?;
                    let wanted = if hitl { "hitl_request" } else { "text" };
                    let first = loop {
                        let event = session_event(&mut on_a).await?;
                        if event.event_type() == wanted {
                            break event;
                        }
                        if event.event_type() == "done" {
                            bail!("the run ended early: {}", event.event);
                        }
                    };
                    let owner = cluster.owner(&session).await?;
                    if owner.as_deref() != Some(b_id.as_str()) {
                        bail!("the session is owned by {owner:?}, not by B ({b_id})");
                    }
                    let sample = if hitl {
                        let id = first.data()["request_id"]
                            .as_str()
                            .context("hitl_request without request_id")?
                            .to_string();
                        let t0 = Instant::now();
                        on_a.approve(&id).await?;
                        let next = session_event(&mut on_a).await?;
                        if next.event_type() == "done" || next.event_type() == "error" {
                            bail!("the approval did not go on: {}", next.event);
                        }
                        check_done(&on_a.until_done(RUN_LIMIT).await?, "completed")?;
                        next.at - t0
                    } else {
                        tokio::time::sleep(after).await;
                        let t0 = Instant::now();
                        on_a.cancel().await?;
                        let events = on_a.until_done(RUN_LIMIT).await?;
                        check_done(&events, "cancelled")?;
                        let done = events.last().context("no done")?;
                        done.at - t0
                    };
                    // B's socket saw the same run: read it to its end.
                    on_b.until_done(RUN_LIMIT).await?;
                    if let Ok(mut s) = samples.lock() {
                        s.push(sample);
                    }
                    progress.tick();
                }
                anyhow::Ok(())
            }
            .await;
            if let Err(e) = outcome {
                errors.add(e.context(format!("client {c}")));
            }
        });
    }
    while let Some(joined) = set.join_next().await {
        if let Err(e) = joined {
            errors.add(format!("a client task failed: {e}"));
        }
    }
    drop(progress);
    let samples: Vec<Duration> = samples.lock().map(|s| s.clone()).unwrap_or_default();
    match Arc::try_unwrap(cluster) {
        Ok(cluster) => cluster.stop().await,
        Err(_) => eprintln!("  (a client still holds the cluster; it is killed on exit)"),
    }
    let latency = summarize(&samples);
    let (figures, headline) = if hitl {
        (
            json!({"approvals": samples.len(), "decision_to_next_event": latency}),
            format!(
                "decision on replica A → next event on A, session owned by B: {}",
                fmt_summary(&latency)
            ),
        )
    } else {
        (
            json!({"cancels": samples.len(), "cancel_to_done": latency}),
            format!(
                "cancel frame on replica A → done on A, session owned by B: {}",
                fmt_summary(&latency)
            ),
        )
    };
    Ok(frame.record(target, p, figures, headline, &errors))
}

pub async fn cluster_cancel(target: &Target, redis: &str, p: &CrossParams) -> Result<Record> {
    cross_replica(target, redis, p, false).await
}

pub async fn cluster_hitl(target: &Target, redis: &str, p: &CrossParams) -> Result<Record> {
    cross_replica(target, redis, p, true).await
}
