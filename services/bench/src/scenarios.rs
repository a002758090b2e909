//! The scenarios. Each starts its own server (so one scenario's state never colours the next),
//! drives it, and returns a [`Record`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Barrier;
use tokio::task::JoinSet;

use crate::harness::{AUTO_ASSISTANT, Endpoint, HITL_ASSISTANT, Harness, ModelProfile, Target};
use crate::report::Record;
use crate::stats::{Summary, summarize};
use crate::ws::SessionSocket;

/// The longest a single run may take before the benchmark calls it an error.
pub(crate) const RUN_LIMIT: Duration = Duration::from_secs(60);

/// Errors counted across clients; the first one is kept to be shown.
#[derive(Default)]
pub(crate) struct Errors {
    count: AtomicU64,
    first: std::sync::Mutex<Option<String>>,
}

impl Errors {
    pub(crate) fn add(&self, error: impl std::fmt::Display) {
        if self.count.fetch_add(1, Ordering::Relaxed) == 0 {
            let text = format!("{error:#}");
            eprintln!("  first error: {text}");
            if let Ok(mut first) = self.first.lock() {
                *first = Some(text);
            }
        }
    }

    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub(crate) fn first(&self) -> Option<String> {
        self.first.lock().ok().and_then(|f| f.clone())
    }
}

/// Prints a line to stderr every two seconds while a scenario runs.
pub(crate) struct Progress {
    done: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Progress {
    pub(crate) fn start(what: &'static str, unit: &'static str, total: Option<u64>) -> Self {
        let done = Arc::new(AtomicU64::new(0));
        let counter = done.clone();
        let task = tokio::spawn(async move {
            let start = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_secs(2));
            tick.tick().await;
            loop {
                tick.tick().await;
                let n = counter.load(Ordering::Relaxed);
                let secs = start.elapsed().as_secs_f64();
                let of = total.map(|t| format!(" of {t}")).unwrap_or_default();
                eprintln!(
                    "  {what}: {secs:5.1} s, {n}{of} {unit} ({:.0}/s)",
                    n as f64 / secs.max(0.001)
                );
            }
        });
        Progress { done, task }
    }

    pub(crate) fn tick(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

pub(crate) fn fmt_summary(s: &Option<Summary>) -> String {
    match s {
        Some(s) => format!("p50 {:.2} / p99 {:.2} ms", s.p50_ms, s.p99_ms),
        None => "no samples".into(),
    }
}

/// CPU time of this process (the load generator and the in-process fake model).
pub(crate) fn own_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF)
        .map(|u| {
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::new(
                    tv.tv_sec().max(0) as u64,
                    (tv.tv_usec().max(0) as u32) * 1000,
                )
            };
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or_default()
}

/// What every scenario records besides its own figures.
pub(crate) struct Frame {
    scenario: &'static str,
    variant: String,
    started_at: chrono::DateTime<chrono::Utc>,
    start: Instant,
}

impl Frame {
    pub(crate) fn new(scenario: &'static str, variant: String) -> Self {
        eprintln!("==> {variant}");
        Frame {
            scenario,
            variant,
            started_at: chrono::Utc::now(),
            start: Instant::now(),
        }
    }

    pub(crate) fn record(
        self,
        target: &Target,
        parameters: impl Serialize,
        figures: Value,
        headline: String,
        errors: &Errors,
    ) -> Record {
        eprintln!("    {headline}");
        Record {
            scenario: self.scenario.into(),
            variant: self.variant,
            database: target.database.label().into(),
            started_at: self
                .started_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            duration_secs: (self.start.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            commit: crate::machine::commit(),
            machine: crate::machine::describe(),
            agentry: crate::machine::binary(&target.agentry),
            parameters: serde_json::to_value(parameters).unwrap_or(Value::Null),
            figures,
            headline,
            errors: errors.count(),
            first_error: errors.first(),
        }
    }
}

pub(crate) fn todo_call(tag: &str) -> String {
    format!(
        "/tool write_todos {{\"todos\": [{{\"content\": \"{tag}\", \"status\": \"pending\"}}]}}\n{tag}"
    )
}

/// The run's `done`, checked: an error unless its status is `expected`.
pub(crate) fn check_done(events: &[crate::ws::Received], expected: &str) -> Result<()> {
    let done = events.last().context("no events")?;
    let status = done.data()["status"].as_str().unwrap_or("");
    if status != expected {
        let errors: Vec<&Value> = events
            .iter()
            .filter(|e| e.event_type() == "error")
            .map(|e| e.data())
            .collect();
        bail!(
            "the run ended `{status}`, not `{expected}`: {} {errors:?}",
            done.event
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct RunsParams {
    pub clients: usize,
    pub duration_secs: u64,
    /// Stop each client after this many measured runs (0 = only the duration counts).
    pub max_runs_per_client: u64,
    pub model_latency_ms: u64,
}

/// C clients, each on its own session and WebSocket, doing one-tool runs back to back: the
/// model calls `write_todos`, it is approved automatically and runs, the model answers.
pub async fn runs(target: &Target, p: &RunsParams) -> Result<Record> {
    let frame = Frame::new("runs", format!("runs-{}ms", p.model_latency_ms));
    let profile = ModelProfile {
        latency_ms: p.model_latency_ms,
        ..ModelProfile::INSTANT
    };
    let h = Arc::new(Harness::start(target, profile, &[]).await?);
    let errors = Arc::new(Errors::default());
    let progress = Arc::new(Progress::start("runs", "runs", None));
    let (mut clients, barrier) = spawn_run_clients(
        &[h.endpoint()],
        p.clients,
        Duration::from_secs(p.duration_secs),
        p.max_runs_per_client,
        &errors,
        &progress,
    );
    barrier.wait().await;
    let (cpu0, own0, t0) = (h.cpu_time()?, own_cpu(), Instant::now());
    let (sql0, switches0) = (h.sql_statements().await?, h.context_switches()?);
    let mut samples = Vec::new();
    while let Some(joined) = clients.join_next().await {
        samples.extend(joined.context("a client task failed")?);
    }
    let last_end = samples.iter().map(|s| s.2).max().unwrap_or(t0);
    let window = last_end.saturating_duration_since(t0);
    let (server_cpu, own) = (
        h.cpu_time()?.saturating_sub(cpu0),
        own_cpu().saturating_sub(own0),
    );
    // Counted from just after the warm-up runs to the last `done` (plus the writes its end
    // scheduled, and one scrape): statements and context switches per measured run.
    let switches = h.context_switches()?.saturating_sub(switches0);
    let sql = h.sql_statements().await?.saturating_sub(sql0);
    drop(progress);

    let (e2e, overhead, model_calls) = run_latencies(&samples, h.model.take_timings());
    let n = samples.len() as f64;
    let per_sec = n / window.as_secs_f64().max(1e-9);
    let (e2e, overhead) = (summarize(&e2e), summarize(&overhead));
    let figures = json!({
        "runs": samples.len(),
        "window_secs": ms(window) / 1e3,
        "runs_per_sec": (per_sec * 10.0).round() / 10.0,
        "end_to_end": e2e,
        "server_overhead": overhead,
        "model_calls_per_run": if n > 0.0 { f64::from(model_calls) / n } else { 0.0 },
        "server_cpu_ms_per_run": if n > 0.0 { ms(server_cpu) / n } else { 0.0 },
        "sql_statements_per_run": if n > 0.0 { (sql as f64 / n * 10.0).round() / 10.0 } else { 0.0 },
        "context_switches_per_run": if n > 0.0 { (switches as f64 / n).round() } else { 0.0 },
        "loadgen_and_model_cpu_ms_per_run": if n > 0.0 { ms(own) / n } else { 0.0 },
        "server_rss_bytes": h.rss_bytes().ok(),
    });
    let per_run = |x: u64| if n > 0.0 { x as f64 / n } else { 0.0 };
    let headline = format!(
        "{per_sec:.0} runs/s; end-to-end {}; server overhead {}; {:.1} SQL statements and {:.0} context switches per run",
        fmt_summary(&e2e),
        fmt_summary(&overhead),
        per_run(sql),
        per_run(switches),
    );
    let record = frame.record(target, p, figures, headline, &errors);
    stop(h).await;
    Ok(record)
}

/// One measured one-tool run: its chat message, chat frame → `done`, and when `done` arrived.
pub(crate) type RunSample = (String, Duration, Instant);

/// C clients doing one-tool runs back to back, client `c` on `endpoints[c % len]` (its own
/// session there and a WebSocket): the model calls `write_todos`, it is approved automatically
/// and runs, the model answers. Each client first does a warm-up run, then waits at the
/// returned barrier (which the caller joins too, to start its counters), then runs until
/// `duration` or `max_runs` (0 = no limit).
pub(crate) fn spawn_run_clients(
    endpoints: &[Endpoint],
    clients: usize,
    duration: Duration,
    max_runs: u64,
    errors: &Arc<Errors>,
    progress: &Arc<Progress>,
) -> (JoinSet<Vec<RunSample>>, Arc<Barrier>) {
    let barrier = Arc::new(Barrier::new(clients + 1));
    let mut set = JoinSet::new();
    for c in 0..clients {
        let endpoint = endpoints[c % endpoints.len()].clone();
        let (errors, barrier, progress) = (errors.clone(), barrier.clone(), progress.clone());
        set.spawn(async move {
            let mut samples: Vec<RunSample> = Vec::new();
            let setup = async {
                let session = endpoint.create_session(AUTO_ASSISTANT).await?;
                let mut ws =
                    SessionSocket::connect(&endpoint.ws_url(&session), &endpoint.key).await?;
                // One run to warm up the session, its actor and the connections.
                ws.chat(&todo_call(&format!("warm-up {c}"))).await?;
                check_done(&ws.until_done(RUN_LIMIT).await?, "completed")?;
                anyhow::Ok(ws)
            };
            let ws = setup.await;
            barrier.wait().await;
            let mut ws = match ws {
                Ok(ws) => ws,
                Err(e) => {
                    errors.add(e.context(format!("client {c} setup")));
                    return samples;
                }
            };
            let deadline = Instant::now() + duration;
            let mut i = 0u64;
            while Instant::now() < deadline && (max_runs == 0 || i < max_runs) {
                let message = todo_call(&format!("run {c}-{i}"));
                let t0 = Instant::now();
                let outcome = async {
                    ws.chat(&message).await?;
                    let events = ws.until_done(RUN_LIMIT).await?;
                    check_done(&events, "completed")?;
                    if !events.iter().any(|e| e.event_type() == "tool_result") {
                        bail!("the run completed without a tool result");
                    }
                    Ok(events.last().map(|e| e.at).unwrap_or_else(Instant::now))
                }
                .await;
                match outcome {
                    Ok(end) => {
                        samples.push((message, end - t0, end));
                        progress.tick();
                    }
                    Err(e) => {
                        errors.add(e);
                        break;
                    }
                }
                i += 1;
            }
            samples
        });
    }
    (set, barrier)
}

/// Each run's end-to-end time and server overhead (end to end minus the time its model calls
/// spent inside the fake model's handlers), and the model calls matched to the runs.
pub(crate) fn run_latencies(
    samples: &[RunSample],
    timings: Vec<agentry_fake_model::ModelTiming>,
) -> (Vec<Duration>, Vec<Duration>, u32) {
    let mut model: HashMap<String, (Duration, u32)> = HashMap::new();
    for t in timings {
        let entry = model.entry(t.key).or_default();
        entry.0 += t.done.saturating_duration_since(t.received);
        entry.1 += 1;
    }
    let mut e2e = Vec::with_capacity(samples.len());
    let mut overhead = Vec::with_capacity(samples.len());
    let mut model_calls = 0u32;
    for (message, took, _) in samples {
        let (in_model, calls) = model.get(message).copied().unwrap_or_default();
        model_calls += calls;
        e2e.push(*took);
        overhead.push(took.saturating_sub(in_model));
    }
    (e2e, overhead, model_calls)
}

async fn stop(h: Arc<Harness>) {
    match Arc::try_unwrap(h) {
        Ok(h) => h.stop().await,
        Err(_) => eprintln!("  (a client still holds the server; it is killed on exit)"),
    }
}

/// Samples of one scenario, shared by its clients; each one pushed ticks the progress line.
struct Samples<T> {
    items: std::sync::Mutex<Vec<T>>,
    progress: Progress,
}

impl<T> Samples<T> {
    fn push(&self, sample: T) {
        if let Ok(mut items) = self.items.lock() {
            items.push(sample);
        }
        self.progress.tick();
    }
}

/// Run `client` for each of `clients` clients at once, each on a new session of `assistant`
/// with its own WebSocket. A client's error ends that client and is counted; the samples it
/// pushed before are kept.
async fn each_client<T, F, Fut>(
    h: &Arc<Harness>,
    clients: usize,
    assistant: &'static str,
    progress: Progress,
    errors: &Errors,
    client: F,
) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize, SessionSocket, Arc<Samples<T>>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let samples = Arc::new(Samples {
        items: std::sync::Mutex::new(Vec::new()),
        progress,
    });
    let mut tasks = JoinSet::new();
    for c in 0..clients {
        let (h, samples, client) = (h.clone(), samples.clone(), client.clone());
        tasks.spawn(async move {
            let session = h.create_session(assistant).await?;
            let ws = SessionSocket::connect(&h.ws_url(&session), &h.key).await?;
            drop(h);
            client(c, ws, samples).await
        });
    }
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.add(e),
            Err(e) => errors.add(format!("a client task failed: {e}")),
        }
    }
    match Arc::try_unwrap(samples) {
        Ok(samples) => samples.items.into_inner().unwrap_or_default(),
        Err(shared) => shared
            .items
            .lock()
            .map(|mut i| std::mem::take(&mut *i))
            .unwrap_or_default(),
    }
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct StreamParams {
    pub clients: usize,
    pub runs_per_client: u64,
    /// Text chunks the model streams per answer.
    pub chunks: usize,
    pub chunk_delay_ms: u64,
    /// Words in each answer.
    pub words: usize,
}

/// Answers streamed in `chunks` pieces: the time from the model's first byte to the client's
/// first `text` event, and how many events a second reach one connection.
pub async fn stream(target: &Target, p: &StreamParams) -> Result<Record> {
    let frame = Frame::new("stream", "stream".into());
    let profile = ModelProfile {
        latency_ms: 0,
        chunks: p.chunks,
        chunk_delay_ms: p.chunk_delay_ms,
    };
    let h = Arc::new(Harness::start(target, profile, &[]).await?);
    let errors = Errors::default();
    let total = p.clients as u64 * p.runs_per_client;
    let progress = Progress::start("stream", "runs", Some(total));
    let filler = vec!["token"; p.words.saturating_sub(3)].join(" ");
    let runs = p.runs_per_client;
    // (message, first text event, last text event, text events)
    let samples: Vec<(String, Instant, Instant, usize)> = each_client(
        &h,
        p.clients,
        AUTO_ASSISTANT,
        progress,
        &errors,
        move |c, mut ws, samples| {
            let filler = filler.clone();
            async move {
                for i in 0..runs {
                    let message = format!("/echo stream {c}-{i} {filler}");
                    ws.chat(&message).await?;
                    let events = ws.until_done(RUN_LIMIT).await?;
                    check_done(&events, "completed")?;
                    let texts: Vec<_> = events
                        .iter()
                        .filter(|e| e.event_type() == "text" && e.data()["is_final"] == false)
                        .collect();
                    let (Some(first), Some(last)) = (texts.first(), texts.last()) else {
                        bail!("the answer came with no text events");
                    };
                    samples.push((message, first.at, last.at, texts.len()));
                }
                Ok(())
            }
        },
    )
    .await;
    let first_bytes: HashMap<String, Instant> = h
        .model
        .take_timings()
        .into_iter()
        .filter_map(|t| Some((t.key, t.first_byte?)))
        .collect();
    let mut first_event = Vec::new();
    let mut rates = Vec::new();
    let mut events = 0usize;
    for (message, first, last, n) in &samples {
        if let Some(byte) = first_bytes.get(message) {
            first_event.push(first.saturating_duration_since(*byte));
        }
        events += n;
        let span = last.saturating_duration_since(*first).as_secs_f64();
        if *n > 1 && span > 0.0 {
            rates.push((n - 1) as f64 / span);
        }
    }
    rates.sort_by(f64::total_cmp);
    let median_rate = rates.get(rates.len() / 2).copied().unwrap_or(0.0);
    let first_event = summarize(&first_event);
    let figures = json!({
        "runs": samples.len(),
        "text_events_per_run": if samples.is_empty() { 0.0 } else { events as f64 / samples.len() as f64 },
        "first_event_after_model_first_byte": first_event,
        "events_per_sec_per_connection_p50": median_rate.round(),
    });
    let headline = format!(
        "first event after the model's first byte {}; {:.0} events/s per connection (median)",
        fmt_summary(&first_event),
        median_rate
    );
    let record = frame.record(target, p, figures, headline, &errors);
    stop(h).await;
    Ok(record)
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct CancelParams {
    pub clients: usize,
    pub runs_per_client: u64,
    /// How long after the chat frame the cancel frame goes (the model is still thinking).
    pub cancel_after_ms: u64,
}

/// Runs cancelled while the model is answering: from the `cancel` frame to
/// `done{cancelled: true}`.
pub async fn cancel(target: &Target, p: &CancelParams) -> Result<Record> {
    let frame = Frame::new("cancel", "cancel".into());
    let h = Arc::new(Harness::start(target, ModelProfile::INSTANT, &[]).await?);
    let errors = Errors::default();
    let total = p.clients as u64 * p.runs_per_client;
    let progress = Progress::start("cancel", "cancels", Some(total));
    let (runs, after) = (p.runs_per_client, Duration::from_millis(p.cancel_after_ms));
    let samples = each_client(
        &h,
        p.clients,
        AUTO_ASSISTANT,
        progress,
        &errors,
        move |c, mut ws, samples| async move {
            for i in 0..runs {
                // The model takes 30 s to answer: only the cancel ends the run.
                ws.chat(&format!("/sleep 30000\ncancel {c}-{i}")).await?;
                tokio::time::sleep(after).await;
                let t0 = Instant::now();
                ws.cancel().await?;
                let events = ws.until_done(RUN_LIMIT).await?;
                check_done(&events, "cancelled")?;
                let done = events.last().context("no done")?;
                if done.data()["cancelled"] != true {
                    bail!("done without cancelled: true: {}", done.event);
                }
                samples.push(done.at - t0);
            }
            Ok(())
        },
    )
    .await;
    let latency = summarize(&samples);
    let figures = json!({"cancels": samples.len(), "cancel_to_done": latency});
    let headline = format!("cancel frame to done {}", fmt_summary(&latency));
    let record = frame.record(target, p, figures, headline, &errors);
    stop(h).await;
    Ok(record)
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct HitlParams {
    pub clients: usize,
    pub runs_per_client: u64,
}

/// A tool call that needs approval: from the `hitl_decision` frame to the next event (the
/// tool's result).
pub async fn hitl(target: &Target, p: &HitlParams) -> Result<Record> {
    let frame = Frame::new("hitl", "hitl".into());
    let h = Arc::new(Harness::start(target, ModelProfile::INSTANT, &[]).await?);
    let errors = Errors::default();
    let total = p.clients as u64 * p.runs_per_client;
    let progress = Progress::start("hitl", "approvals", Some(total));
    let runs = p.runs_per_client;
    let samples = each_client(
        &h,
        p.clients,
        HITL_ASSISTANT,
        progress,
        &errors,
        move |c, mut ws, samples| async move {
            for i in 0..runs {
                ws.chat(&todo_call(&format!("hitl {c}-{i}"))).await?;
                let request_id = loop {
                    let event = ws.next_event(RUN_LIMIT).await?;
                    match event.event_type() {
                        "hitl_request" => {
                            break event.data()["request_id"]
                                .as_str()
                                .context("hitl_request without request_id")?
                                .to_string();
                        }
                        "done" => bail!("the run ended before asking: {}", event.event),
                        _ => {}
                    }
                };
                let t0 = Instant::now();
                ws.approve(&request_id).await?;
                let next = ws.next_event(RUN_LIMIT).await?;
                if next.event_type() == "done" {
                    bail!("the approved run ended at once: {}", next.event);
                }
                check_done(&ws.until_done(RUN_LIMIT).await?, "completed")?;
                samples.push(next.at - t0);
            }
            Ok(())
        },
    )
    .await;
    let latency = summarize(&samples);
    let figures = json!({"approvals": samples.len(), "decision_to_next_event": latency});
    let headline = format!("decision to next event {}", fmt_summary(&latency));
    let record = frame.record(target, p, figures, headline, &errors);
    stop(h).await;
    Ok(record)
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct IdleParams {
    pub sessions: usize,
    /// Connections opened at once.
    pub concurrency: usize,
    /// How long the sessions are held after the last one opened.
    pub hold_secs: u64,
}

/// N sessions, each with an idle WebSocket: the server's resident memory per session, and how
/// many were held without an error.
pub async fn idle(target: &Target, p: &IdleParams) -> Result<Record> {
    let frame = Frame::new("idle", "idle".into());
    crate::machine::raise_fd_limit(p.sessions as u64 * 2 + 1024);
    let h = Arc::new(Harness::start(target, ModelProfile::INSTANT, &[]).await?);
    let errors = Arc::new(Errors::default());
    // One session with a finished run first, so the per-session figure is not charged with
    // what the first run of the process allocates once.
    {
        let session = h.create_session(AUTO_ASSISTANT).await?;
        let mut ws = SessionSocket::connect(&h.ws_url(&session), &h.key).await?;
        ws.chat("hello").await?;
        check_done(&ws.until_done(RUN_LIMIT).await?, "completed")?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before = h.rss_bytes()?;
    let progress = Arc::new(Progress::start(
        "idle",
        "sessions open",
        Some(p.sessions as u64),
    ));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let lost = Arc::new(AtomicU64::new(0));
    let permits = Arc::new(tokio::sync::Semaphore::new(p.concurrency.max(1)));
    let mut openers = JoinSet::new();
    for i in 0..p.sessions {
        let (h, errors, progress, permits) =
            (h.clone(), errors.clone(), progress.clone(), permits.clone());
        let (mut stop_rx, lost) = (stop_rx.clone(), lost.clone());
        openers.spawn(async move {
            let opened = async {
                let _permit = permits.acquire().await?;
                let session = h.create_session(AUTO_ASSISTANT).await?;
                SessionSocket::connect(&h.ws_url(&session), &h.key).await
            }
            .await;
            let ws = match opened {
                Ok(ws) => ws,
                Err(e) => {
                    errors.add(e.context(format!("opening session {i}")));
                    return false;
                }
            };
            progress.tick();
            drop(h);
            tokio::spawn(async move {
                let stop = async move {
                    let _ = stop_rx.wait_for(|s| *s).await;
                };
                if let Err(e) = ws.hold(stop).await {
                    lost.fetch_add(1, Ordering::Relaxed);
                    errors.add(e.context(format!("session {i} lost its connection")));
                }
            });
            true
        });
    }
    let mut opened = 0usize;
    while let Some(joined) = openers.join_next().await {
        if joined.unwrap_or(false) {
            opened += 1;
        }
    }
    drop(progress);
    eprintln!("  {opened} sessions open; holding them {} s", p.hold_secs);
    tokio::time::sleep(Duration::from_secs(p.hold_secs)).await;
    let rss_after = h.rss_bytes()?;
    let held = opened as u64 - lost.load(Ordering::Relaxed).min(opened as u64);
    let health = h
        .http
        .get(h.url("/api/v1/health"))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0);
    if health != 200 {
        errors.add(format!(
            "the health check answered {health} with the sessions open"
        ));
    }
    let _ = stop_tx.send(true);
    let per_session = rss_after.saturating_sub(rss_before) as f64 / opened.max(1) as f64;
    let figures = json!({
        "sessions_requested": p.sessions,
        "sessions_opened": opened,
        "sessions_held": held,
        "server_rss_before_bytes": rss_before,
        "server_rss_after_bytes": rss_after,
        "rss_per_session_bytes": per_session.round(),
        "health_with_sessions_open": health,
    });
    let headline = format!(
        "{held} of {} idle sessions held; {:.1} KiB RSS per session ({:.0} MiB → {:.0} MiB)",
        p.sessions,
        per_session / 1024.0,
        rss_before as f64 / 1048576.0,
        rss_after as f64 / 1048576.0
    );
    let record = frame.record(target, p, figures, headline, &errors);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop(h).await;
    Ok(record)
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct OpenAiParams {
    pub clients: usize,
    pub runs_per_client: u64,
    /// `true`: `stream: true` (SSE chunks until `data: [DONE]`); else one JSON completion.
    pub stream: bool,
    /// `true`: through `POST /v1/responses` (the Responses API, each client chaining
    /// `previous_response_id`) instead of `/v1/chat/completions`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub responses: bool,
}

/// C clients doing the same one-tool runs as `runs` through `POST /v1/chat/completions` (the
/// OpenAI-compatible endpoint), each continuing its own session (`X-Agentry-Session`), so the
/// figure compares with `runs` over the WebSocket.
///
/// With `responses`, the same runs through `POST /v1/responses` (variants `responses`,
/// `responses-stream`), each client continuing its conversation by `previous_response_id`.
pub async fn openai(target: &Target, p: &OpenAiParams) -> Result<Record> {
    let variant = match (p.responses, p.stream) {
        (false, false) => "openai",
        (false, true) => "openai-stream",
        (true, false) => "responses",
        (true, true) => "responses-stream",
    };
    let frame = Frame::new(
        if p.responses { "responses" } else { "openai" },
        variant.to_string(),
    );
    let h = Arc::new(Harness::start(target, ModelProfile::INSTANT, &[]).await?);
    let errors = Arc::new(Errors::default());
    let total = p.clients as u64 * p.runs_per_client;
    let samples = Arc::new(Samples {
        items: std::sync::Mutex::new(Vec::new()),
        progress: Progress::start("openai", "runs", Some(total)),
    });
    let barrier = Arc::new(Barrier::new(p.clients + 1));
    let mut clients = JoinSet::new();
    for c in 0..p.clients {
        let (h, errors, samples, barrier) =
            (h.clone(), errors.clone(), samples.clone(), barrier.clone());
        let (runs, stream, responses) = (p.runs_per_client, p.stream, p.responses);
        clients.spawn(async move {
            let session = h.create_session(AUTO_ASSISTANT).await;
            barrier.wait().await;
            let session = match session {
                Ok(s) => s,
                Err(e) => return errors.add(e.context(format!("client {c} setup"))),
            };
            // The Responses API continues a conversation by the last response's id.
            let mut previous: Option<String> = None;
            for i in 0..runs {
                let t0 = Instant::now();
                let message = todo_call(&format!("openai {c}-{i}"));
                let done = if responses {
                    response(&h, previous.as_deref(), &message, stream)
                        .await
                        .map(|id| previous = Some(id))
                } else {
                    completion(&h, &session, &message, stream).await
                };
                match done {
                    Ok(()) => samples.push(t0.elapsed()),
                    Err(e) => return errors.add(e),
                }
            }
        });
    }
    barrier.wait().await;
    let (cpu0, t0) = (h.cpu_time()?, Instant::now());
    while let Some(joined) = clients.join_next().await {
        joined.context("a client task failed")?;
    }
    let (window, server_cpu) = (t0.elapsed(), h.cpu_time()?.saturating_sub(cpu0));
    let took: Vec<Duration> = samples
        .items
        .lock()
        .map(|mut items| std::mem::take(&mut *items))
        .unwrap_or_default();
    let n = took.len() as f64;
    let per_sec = n / window.as_secs_f64().max(1e-9);
    let e2e = summarize(&took);
    let figures = json!({
        "runs": took.len(),
        "runs_per_sec": (per_sec * 10.0).round() / 10.0,
        "end_to_end": e2e,
        "server_cpu_ms_per_run": if n > 0.0 { ms(server_cpu) / n } else { 0.0 },
    });
    let headline = format!(
        "{per_sec:.0} runs/s; end-to-end {}; server CPU {:.2} ms/run",
        fmt_summary(&e2e),
        if n > 0.0 { ms(server_cpu) / n } else { 0.0 }
    );
    let record = frame.record(target, p, figures, headline, &errors);
    stop(h).await;
    Ok(record)
}

/// One completion, checked: the tool ran and the answer says so.
async fn completion(h: &Harness, session: &str, message: &str, stream: bool) -> Result<()> {
    let res = h
        .http
        .post(h.url("/v1/chat/completions"))
        .bearer_auth(&h.key)
        .header("x-agentry-session", session)
        .json(&json!({
            "model": AUTO_ASSISTANT,
            "messages": [{"role": "user", "content": message}],
            "stream": stream,
        }))
        .timeout(RUN_LIMIT)
        .send()
        .await?;
    let status = res.status();
    let body = res.text().await?;
    if !status.is_success() {
        bail!("/v1/chat/completions answered {status}: {body}");
    }
    let answer = if stream {
        if !body.trim_end().ends_with("data: [DONE]") {
            bail!("the stream did not end with [DONE]: {body}");
        }
        body.split("\n\n")
            .filter_map(|f| f.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(serde_json::from_str::<Value>)
            .collect::<Result<Vec<_>, _>>()?
            .iter()
            .map(|c| {
                if c.get("error").is_some() {
                    bail!("the stream ended in an error: {c}");
                }
                Ok(c["choices"][0]["delta"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string())
            })
            .collect::<Result<String>>()?
    } else {
        let v: Value = serde_json::from_str(&body)?;
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    if !answer.contains("write_todos") {
        bail!("the answer does not show the tool's result: {answer:?}");
    }
    Ok(())
}

/// One response, checked: the tool ran (an `mcp_call` item) and the answer says so. Returns
/// the response's id, which the client's next request continues.
async fn response(
    h: &Harness,
    previous: Option<&str>,
    message: &str,
    stream: bool,
) -> Result<String> {
    let mut body = json!({"model": AUTO_ASSISTANT, "input": message, "stream": stream});
    if let Some(previous) = previous {
        body["previous_response_id"] = json!(previous);
    }
    let res = h
        .http
        .post(h.url("/v1/responses"))
        .bearer_auth(&h.key)
        .json(&body)
        .timeout(RUN_LIMIT)
        .send()
        .await?;
    let status = res.status();
    let text = res.text().await?;
    if !status.is_success() {
        bail!("/v1/responses answered {status}: {text}");
    }
    let response: Value = if stream {
        // The last event is `response.completed`, carrying the whole response.
        let last = text
            .split("\n\n")
            .filter(|f| f.starts_with("event: "))
            .last()
            .unwrap_or_default();
        let data = last
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap_or_default();
        let event: Value = serde_json::from_str(data)
            .with_context(|| format!("the stream's last event: {last:?}"))?;
        if event["type"] != "response.completed" {
            bail!("the stream did not end with response.completed: {last}");
        }
        event["response"].clone()
    } else {
        serde_json::from_str(&text)?
    };
    let items = response["output"].as_array().cloned().unwrap_or_default();
    if !items.iter().any(|i| i["type"] == "mcp_call") {
        bail!("no mcp_call item: {response}");
    }
    let answer: String = items
        .iter()
        .filter(|i| i["type"] == "message")
        .filter_map(|i| i["content"][0]["text"].as_str())
        .collect();
    if !answer.contains("write_todos") {
        bail!("the answer does not show the tool's result: {answer:?}");
    }
    response["id"]
        .as_str()
        .map(str::to_string)
        .context("a response without an id")
}

// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct SoakParams {
    pub clients: usize,
    pub duration_secs: u64,
    /// How long the server is left alone after the last run before its memory is read again.
    pub idle_secs: u64,
    /// `session.max_live` for the server (`None`: its default).
    pub max_live: Option<usize>,
}

/// When the soak reads the server's memory besides its start, end and idle: 1, 10 and 30
/// minutes, those within the duration.
const SOAK_MARKS: [u64; 3] = [60, 600, 1800];

/// C clients doing one-tool REST runs back to back, each in a new session (`POST
/// /api/v1/chat` without a session), for a long time: the server's resident memory at 1, 10
/// and 30 minutes, at the end and after an idle time, and what each finished run left resident.
pub async fn soak(target: &Target, p: &SoakParams) -> Result<Record> {
    let frame = Frame::new("soak", "soak".into());
    let env: Vec<(&str, String)> = p
        .max_live
        .map(|m| vec![("AGENTRY_SESSION__MAX_LIVE", m.to_string())])
        .unwrap_or_default();
    let h = Arc::new(Harness::start(target, ModelProfile::INSTANT, &env).await?);
    let errors = Arc::new(Errors::default());
    let finished = Arc::new(AtomicU64::new(0));
    let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // One run first, so the figures are not charged with what the first run of the process
    // allocates once.
    check_rest_run(&h.rest_run(AUTO_ASSISTANT, &todo_call("warm-up")).await?)?;
    let progress = Arc::new(Progress::start("soak", "runs", None));
    let mut clients = JoinSet::new();
    for c in 0..p.clients {
        let (h, errors, finished, stopping, progress) = (
            h.clone(),
            errors.clone(),
            finished.clone(),
            stopping.clone(),
            progress.clone(),
        );
        clients.spawn(async move {
            let mut i = 0u64;
            while !stopping.load(Ordering::Relaxed) {
                let outcome = async {
                    let events = h
                        .rest_run(AUTO_ASSISTANT, &todo_call(&format!("soak {c}-{i}")))
                        .await?;
                    check_rest_run(&events)
                }
                .await;
                match outcome {
                    Ok(()) => {
                        finished.fetch_add(1, Ordering::Relaxed);
                        progress.tick();
                    }
                    Err(e) => {
                        errors.add(e.context(format!("client {c}, run {i}")));
                        break;
                    }
                }
                i += 1;
            }
        });
    }
    let t0 = Instant::now();
    let sample = |label: String| -> Result<Value> {
        Ok(json!({
            "at": label,
            "secs": (t0.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            "rss_bytes": h.rss_bytes()?,
            "runs": finished.load(Ordering::Relaxed),
        }))
    };
    let mut samples = vec![sample("start".into())?];
    let duration = Duration::from_secs(p.duration_secs);
    for mark in SOAK_MARKS.iter().filter(|m| **m <= p.duration_secs) {
        tokio::time::sleep_until((t0 + Duration::from_secs(*mark)).into()).await;
        samples.push(sample(format!("{} min", mark / 60))?);
    }
    tokio::time::sleep_until((t0 + duration).into()).await;
    stopping.store(true, Ordering::Relaxed);
    while clients.join_next().await.is_some() {}
    drop(progress);
    samples.push(sample("end".into())?);
    let live_at_end = h.gauge("agentry_live_sessions").await?;
    tokio::time::sleep(Duration::from_secs(p.idle_secs)).await;
    samples.push(sample(format!("after {} s idle", p.idle_secs))?);
    let live_after_idle = h.gauge("agentry_live_sessions").await?;

    let get = |i: usize, field: &str| samples[i][field].as_u64().unwrap_or(0);
    // From the first minute on (or the start of a shorter soak): what the runs since then
    // left resident, per run, and how much the whole grew.
    let base = if samples.len() > 3 { 1 } else { 0 };
    let end = samples.len() - 2;
    let idle = samples.len() - 1;
    let runs_since = get(end, "runs").saturating_sub(get(base, "runs"));
    let per_run = |to: usize| {
        (get(to, "rss_bytes") as f64 - get(base, "rss_bytes") as f64) / runs_since.max(1) as f64
    };
    let growth = |to: usize| {
        (get(to, "rss_bytes") as f64 / get(base, "rss_bytes").max(1) as f64 - 1.0) * 100.0
    };
    let mib = |i: usize| get(i, "rss_bytes") as f64 / 1048576.0;
    let figures = json!({
        "runs": get(end, "runs"),
        "samples": samples,
        "baseline": samples[base]["at"],
        "bytes_per_run_at_end": per_run(end).round(),
        "bytes_per_run_after_idle": per_run(idle).round(),
        "growth_pct_at_end": (growth(end) * 10.0).round() / 10.0,
        "growth_pct_after_idle": (growth(idle) * 10.0).round() / 10.0,
        "live_sessions_at_end": live_at_end,
        "live_sessions_after_idle": live_after_idle,
    });
    let marks: Vec<String> = (0..samples.len())
        .map(|i| format!("{} {:.0}", samples[i]["at"].as_str().unwrap_or(""), mib(i)))
        .collect();
    let headline = format!(
        "{} runs; RSS MiB: {}; {:+.1}% from {} to end; {:.1} KiB per finished run after idle",
        get(end, "runs"),
        marks.join(", "),
        growth(end),
        samples[base]["at"].as_str().unwrap_or(""),
        per_run(idle) / 1024.0,
    );
    let record = frame.record(target, p, figures, headline, &errors);
    stop(h).await;
    Ok(record)
}

/// A REST run's events, checked: it completed and its tool ran.
fn check_rest_run(events: &[Value]) -> Result<()> {
    let kind = |e: &Value| e["event_type"].as_str().unwrap_or("").to_string();
    let last = events.last().context("no events")?;
    if kind(last) != "done" || last["data"]["status"] != "completed" {
        bail!("the run did not complete: {last}");
    }
    if !events.iter().any(|e| kind(e) == "tool_result") {
        bail!("the run completed without a tool result");
    }
    Ok(())
}
