//! `agentry chat`: a terminal client. It creates (or joins, showing its history) a session over
//! REST, opens the session's WebSocket, sends what is typed, prints the event stream with a
//! status line while the model works, answers approvals and questions, cancels on Ctrl-C, and
//! reconnects with backoff when the connection drops — giving up, with a message, after a set
//! time. Slash commands are handled here and never reach the model. It depends on the wire
//! types only and talks to a server like any other client.

pub mod input;
pub mod out;
pub mod render;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentry_schema::events::{DoneStatus, EventPayload, ExecutionEvent, HitlKind, HitlRequestData};
use agentry_schema::frames::{CancelFrame, ChatFrame, ClientFrame, Decision, HitlDecisionFrame};
use anyhow::{Context, anyhow, bail};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use input::{Input, Keyboard, Printer};
use render::Out;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApprovePolicy {
    /// Ask on the terminal.
    Ask,
    /// Approve every tool call.
    All,
    /// Reject every tool call.
    None,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ChatArgs {
    /// Server base URL.
    #[arg(long, env = "AGENTRY_URL", default_value = "http://127.0.0.1:8000")]
    pub server: String,
    /// A file holding the API key (a tenant user's key). Preferred: a key on the command line
    /// shows in `ps`.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// The API key. Prefer `--key-file` or the AGENTRY_KEY variable: arguments show in `ps`.
    #[arg(long, env = "AGENTRY_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// Join this session (its recent history is shown) instead of creating one.
    #[arg(long)]
    pub session: Option<String>,
    /// Assistant (id or name) for a new session.
    #[arg(long, alias = "agent")]
    pub assistant: Option<String>,
    /// Send this message, wait for its `done`, and exit (status 0 when the run completed).
    #[arg(long, short)]
    pub message: Option<String>,
    /// What to do with approval requests.
    #[arg(long, value_enum, default_value_t = ApprovePolicy::Ask)]
    pub approve: ApprovePolicy,
    /// Print every event as a JSON line instead of formatted text.
    #[arg(long)]
    pub json: bool,
    /// When the server cannot be reached for this many seconds, stop retrying and exit.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub give_up_after: u64,
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const HELP: &str = "\
/help            this list
/cancel          cancel the current run (Ctrl-C does too; a second Ctrl-C quits)
/sessions        your recent sessions
/new             start a new session with the same assistant
/agent [NAME]    list the assistants, or start a new session with NAME
/mcp             your MCP servers: status, tools, OAuth sign-in
/sign-in NAME    sign in to MCP server NAME (OAuth): prints the link to open in a browser
/quit            leave (Ctrl-D too)
A line ending in \\ continues on the next line. Start a message with // to send one that
begins with / (e.g. //tool … for the scripted model).
";

/// The lines `/mcp` shows for `GET /api/v1/users/{id}/mcp-servers`.
fn mcp_servers_text(v: &Value) -> String {
    let mut s = String::new();
    for server in items(v) {
        let name = server["name"].as_str().unwrap_or("?");
        let status = if server["disabled"] == true {
            "disabled"
        } else {
            server["status"].as_str().unwrap_or("?")
        };
        let tools = server["tools"]
            .as_array()
            .map(|t| format!("{} tools", t.len()))
            .unwrap_or_default();
        s.push_str(&format!("  {name:<16} {status:<13} {tools}"));
        let si = &server["sign_in"];
        if si["needs_sign_in"] == true {
            s.push_str(&format!("  needs a sign-in: /sign-in {name}"));
        } else if si["signed_in"] == true {
            s.push_str("  signed in");
        }
        if let Some(e) = server["status_message"].as_str().filter(|e| !e.is_empty()) {
            s.push_str(&format!("\n  {:<16} {e}", ""));
        }
        s.push('\n');
    }
    if s.is_empty() {
        s.push_str("no MCP servers; add one in the console's MCP page or with POST /api/v1/users/{id}/mcp-servers\n");
    }
    s
}

/// The key: from `--key-file`, else `--key` / AGENTRY_KEY.
fn resolve_key(args: &ChatArgs) -> anyhow::Result<String> {
    if let Some(path) = &args.key_file {
        let key = std::fs::read_to_string(path)
            .with_context(|| format!("reading the key file {}", path.display()))?;
        let key = key.trim().to_string();
        if key.is_empty() {
            bail!("the key file {} is empty", path.display());
        }
        return Ok(key);
    }
    match &args.key {
        Some(k) if !k.trim().is_empty() => Ok(k.trim().to_string()),
        _ => bail!(
            "no API key: pass --key-file FILE or set AGENTRY_KEY (a tenant user's key; see docs/quickstart.md)"
        ),
    }
}

/// REST calls of the client.
struct Api {
    http: reqwest::Client,
    base: url::Url,
    key: String,
}

impl Api {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let url = self.base.join(path)?;
        let mut req = self
            .http
            .request(method, url)
            .bearer_auth(&self.key)
            .timeout(Duration::from_secs(30));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req
            .send()
            .await
            .with_context(|| format!("cannot reach {}", self.base))?;
        let status = res.status();
        let v: Value = res.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!(
                "{path}: {status}: {}",
                v["message"].as_str().unwrap_or("no message")
            );
        }
        Ok(v)
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// The key's user.
    async fn user_id(&self) -> anyhow::Result<String> {
        self.get("/api/v1/me").await?["user_id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| {
                anyhow!("/api/v1/me answered without a user_id (a platform key has no MCP servers)")
            })
    }

    async fn create_session(&self, assistant: Option<&str>) -> anyhow::Result<String> {
        let body = match assistant {
            Some(a) => json!({"assistant_id": self.assistant_id(a).await?}),
            None => json!({}),
        };
        let v = self
            .call(reqwest::Method::POST, "/api/v1/sessions", Some(body))
            .await
            .context("creating a session")?;
        v["session_id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("the server answered without a session_id"))
    }

    /// An assistant's id from its id or name.
    async fn assistant_id(&self, wanted: &str) -> anyhow::Result<String> {
        let agents = self.get("/api/v1/agents").await?;
        let items = items(&agents);
        items
            .iter()
            .find(|a| {
                a["id"] == wanted
                    || a["name"]
                        .as_str()
                        .is_some_and(|n| n.eq_ignore_ascii_case(wanted))
            })
            .and_then(|a| a["id"].as_str().map(str::to_string))
            .ok_or_else(|| {
                let names: Vec<&str> = items.iter().filter_map(|a| a["name"].as_str()).collect();
                anyhow!("no assistant {wanted:?}; there are: {}", names.join(", "))
            })
    }
}

/// Why a WebSocket could not be opened: worth retrying, or not (a bad key, a gone session).
enum ConnectError {
    Retry(String),
    Fatal(String),
}

async fn connect(api: &Api, session: &str, after_seq: Option<u64>) -> Result<Ws, ConnectError> {
    let mut url = api
        .base
        .join(&format!("/ws/chat/{session}"))
        .map_err(|e| ConnectError::Fatal(e.to_string()))?;
    let scheme = if api.base.scheme() == "https" {
        "wss"
    } else {
        "ws"
    };
    url.set_scheme(scheme)
        .map_err(|_| ConnectError::Fatal(format!("cannot use {scheme} with {}", api.base)))?;
    if let Some(after) = after_seq {
        url.set_query(Some(&format!("after_seq={after}")));
    }
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| ConnectError::Fatal(e.to_string()))?;
    let auth = format!("Bearer {}", api.key)
        .parse()
        .map_err(|_| ConnectError::Fatal("the key is not valid header text".into()))?;
    req.headers_mut().insert("authorization", auth);
    let attempt = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::connect_async(req),
    );
    match attempt.await {
        Err(_) => Err(ConnectError::Retry("no answer within 10 s".into())),
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(res))) => {
            let status = res.status();
            let body = res
                .body()
                .as_ref()
                .and_then(|b| serde_json::from_slice::<Value>(b).ok())
                .and_then(|v| v["message"].as_str().map(str::to_string))
                .unwrap_or_default();
            let msg = format!("the server refused the WebSocket: HTTP {status} {body}");
            if matches!(status.as_u16(), 400 | 401 | 403 | 404) {
                Err(ConnectError::Fatal(msg))
            } else {
                Err(ConnectError::Retry(msg))
            }
        }
        Ok(Err(e)) => Err(ConnectError::Retry(e.to_string())),
    }
}

/// The terminal: the conversation on stdout, notes on stderr, a status line while the model
/// works, and — while a line is being edited — everything printed above the prompt.
struct Screen {
    printer: Option<Printer>,
    /// A line is being edited: output goes through the printer.
    prompt_active: bool,
    /// The last stdout text did not end a line (a streaming answer).
    mid_line: bool,
    status_shown: bool,
    /// stderr is a terminal: the status line may be drawn.
    status_tty: bool,
    frame: usize,
}

impl Screen {
    fn new(printer: Option<Printer>, json: bool) -> Screen {
        Screen {
            printer,
            prompt_active: false,
            mid_line: false,
            status_shown: false,
            status_tty: !json && std::io::stderr().is_terminal(),
            frame: 0,
        }
    }

    fn clear_status(&mut self) {
        if self.status_shown {
            out::stderr("\r\x1b[2K");
            self.status_shown = false;
        }
    }

    fn show(&mut self, o: Out) {
        if self.prompt_active
            && let Some(p) = &mut self.printer
        {
            let text = match &o {
                Out::Stdout(s) | Out::Stderr(s) => s.trim_end_matches('\n').to_string(),
            };
            if !text.trim().is_empty() {
                let _ = p.print(format!("{text}\n"));
            }
            return;
        }
        self.clear_status();
        match o {
            Out::Stdout(s) => {
                if !s.is_empty() {
                    self.mid_line = !s.ends_with('\n');
                }
                out::stdout(&s);
            }
            Out::Stderr(s) => {
                if self.mid_line {
                    out::stdout("\n");
                    self.mid_line = false;
                }
                out::stderr(&s);
            }
        }
    }

    fn note(&mut self, text: &str) {
        self.show(Out::Stderr(format!("{text}\n")));
    }

    /// Draw the status line (`⠋ working… 3s`) when nothing else is on the current line.
    fn spin(&mut self, since: Instant, what: &str) {
        if !self.status_tty || self.prompt_active || self.mid_line {
            return;
        }
        const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
        self.frame = (self.frame + 1) % FRAMES.len();
        out::stderr(&format!(
            "\r\x1b[2K{} {what}… {}s (Ctrl-C cancels)",
            FRAMES[self.frame],
            since.elapsed().as_secs()
        ));
        self.status_shown = true;
    }
}

/// The state of one `agentry chat`.
struct Chat {
    args: ChatArgs,
    api: Api,
    session: String,
    assistant: Option<String>,
    screen: Screen,
    keyboard: Option<Keyboard>,
    last_seq: u64,
    pending: Option<HitlRequestData>,
    /// The run and `seq` of the pending request's `hitl_request`: any later event of that run
    /// means the request is over (decided here or elsewhere, timed out, the run ended).
    pending_at: Option<(String, u64)>,
    /// The line being read answers this request (the keyboard was asked with its prompt).
    asked_for: Option<String>,
    /// That request was decided elsewhere while its prompt was up: the prompt is withdrawn and
    /// the line it returns is not sent anywhere.
    withdrawn: bool,
    /// A run is going on in the session (ours or another client's).
    running: Option<Instant>,
    cancel_sent: bool,
    /// One-shot: the exit status once our run's `done` arrives.
    waiting_done: bool,
    /// Piped input ended: leave when the run ends.
    quit_when_idle: bool,
    interrupted_at_prompt: bool,
    last_rx: Instant,
    /// How deep each `task` child run seen so far nests (a run a person started is 0).
    depths: render::Nesting,
}

enum Step {
    Continue,
    Exit(i32),
}

/// Run `agentry chat`. Returns the process exit code.
pub async fn chat(args: ChatArgs) -> anyhow::Result<i32> {
    let base = url::Url::parse(&args.server)
        .with_context(|| format!("--server {:?} is not a URL", args.server))?;
    let key = resolve_key(&args)?;
    let api = Api {
        http: reqwest::Client::new(),
        base,
        key,
    };
    let one_shot = args.message.is_some();
    // A one-shot run reads the keyboard only to answer approvals, and only from a terminal.
    let (keyboard, printer) = if !one_shot || std::io::stdin().is_terminal() {
        let (k, p) = Keyboard::spawn();
        (Some(k), p)
    } else {
        (None, None)
    };
    let session = match &args.session {
        Some(s) => s.clone(),
        None => api.create_session(args.assistant.as_deref()).await?,
    };
    let mut chat = Chat {
        screen: Screen::new(printer, args.json),
        assistant: args.assistant.clone(),
        args,
        api,
        session,
        keyboard,
        last_seq: 0,
        pending: None,
        pending_at: None,
        asked_for: None,
        withdrawn: false,
        running: None,
        cancel_sent: false,
        waiting_done: false,
        quit_when_idle: false,
        interrupted_at_prompt: false,
        last_rx: Instant::now(),
        depths: render::Nesting::default(),
    };
    let result = chat.run().await;
    if chat.screen.prompt_active {
        // Whatever main prints next starts on its own line, not after the prompt.
        out::stderr("\n");
    }
    result
}

impl Chat {
    async fn run(&mut self) -> anyhow::Result<i32> {
        if !self.args.json {
            self.screen.note(&format!("session {}", self.session));
        }
        if self.args.session.is_some() {
            self.show_history().await?;
        }
        if self.args.message.is_none() && !self.args.json {
            self.screen.note(
                "type a message; /help lists the commands, Ctrl-C cancels a run, /quit leaves",
            );
        }
        let after = self.args.session.is_some().then_some(self.last_seq);
        let mut ws = self.reconnect(after, false).await?;
        if let Some(m) = self.args.message.clone() {
            self.send_chat(&mut ws, m).await?;
            self.waiting_done = true;
        }
        // One handler for the whole chat, so no Ctrl-C falls between two loop turns.
        let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .context("listening for Ctrl-C")?;
        let mut tick = tokio::time::interval(Duration::from_millis(120));
        let mut last_ping = Instant::now();
        loop {
            self.ask_for_input();
            let step = tokio::select! {
                msg = ws.next() => match msg {
                    Some(Ok(Message::Text(t))) => {
                        self.last_rx = Instant::now();
                        self.on_event(&mut ws, t.as_str()).await?
                    }
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                        ws = self.reconnect(Some(self.last_seq), true).await?;
                        Step::Continue
                    }
                    Some(Ok(_)) => {
                        self.last_rx = Instant::now();
                        Step::Continue
                    }
                },
                got = next_input(&mut self.keyboard) => self.on_input(&mut ws, got).await?,
                _ = sigint.recv() => self.on_interrupt(&mut ws).await?,
                _ = tick.tick() => {
                    if let Some(since) = self.running
                        && self.pending.is_none()
                    {
                        let what = if self.cancel_sent { "cancelling" } else { "working" };
                        self.screen.spin(since, what);
                    }
                    if last_ping.elapsed() > Duration::from_secs(15) {
                        last_ping = Instant::now();
                        let _ = ws.send(Message::Ping(Vec::new().into())).await;
                    }
                    if self.last_rx.elapsed() > Duration::from_secs(45) {
                        // The server pings every 15 s: this long without a frame is a dead link.
                        let _ = ws.close(None).await;
                        ws = self.reconnect(Some(self.last_seq), true).await?;
                    }
                    Step::Continue
                }
            };
            if let Step::Exit(code) = step {
                self.screen.clear_status();
                let _ = ws.close(None).await;
                return Ok(code);
            }
        }
    }

    fn ask_for_input(&mut self) {
        let Some(k) = &mut self.keyboard else { return };
        let prompt = match &self.pending {
            Some(req) => render::hitl_prompt(req),
            None if self.args.message.is_some() || self.running.is_some() => return,
            None => "> ",
        };
        if !k.waiting {
            self.screen.clear_status();
            if self.screen.mid_line {
                out::stdout("\n");
                self.screen.mid_line = false;
            }
            k.ask(prompt);
            self.asked_for = self.pending.as_ref().map(|r| r.request_id.clone());
            self.withdrawn = false;
            self.screen.prompt_active = true;
        }
    }

    /// Open the session's WebSocket, retrying with backoff until `--give-up-after`; a refusal
    /// that retrying cannot change (bad key, unknown session) ends at once.
    async fn reconnect(&mut self, after_seq: Option<u64>, lost: bool) -> anyhow::Result<Ws> {
        let give_up = Duration::from_secs(self.args.give_up_after);
        let started = Instant::now();
        let mut delay = Duration::from_millis(250);
        let mut attempt = 0u32;
        if lost {
            self.screen.note("[connection lost; reconnecting]");
        }
        loop {
            attempt += 1;
            let err = tokio::select! {
                r = connect(&self.api, &self.session, after_seq) => match r {
                    Ok(ws) => {
                        if attempt > 1 || lost {
                            self.screen.note("[connected]");
                        }
                        self.last_rx = Instant::now();
                        return Ok(ws);
                    }
                    Err(ConnectError::Fatal(e)) => bail!("{e}"),
                    Err(ConnectError::Retry(e)) => e,
                },
                _ = tokio::signal::ctrl_c() => bail!("interrupted while connecting"),
            };
            let left = give_up.saturating_sub(started.elapsed());
            if left.is_zero() {
                bail!(
                    "the server at {} has not answered for {} s ({err}); giving up. Continue later with: agentry chat --session {}",
                    self.api.base,
                    self.args.give_up_after,
                    self.session
                );
            }
            let wait = delay.min(left);
            self.screen.note(&format!(
                "[cannot reach the server: {err}; retry {attempt} in {:.1} s, giving up in {} s]",
                wait.as_secs_f32(),
                left.as_secs()
            ));
            tokio::time::sleep(wait).await;
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    }

    async fn send_chat(&mut self, ws: &mut Ws, message: String) -> anyhow::Result<()> {
        send(
            ws,
            &ClientFrame::Chat(ChatFrame {
                message,
                enqueue: false,
            }),
        )
        .await?;
        self.running = Some(Instant::now());
        self.cancel_sent = false;
        Ok(())
    }

    async fn on_event(&mut self, ws: &mut Ws, text: &str) -> anyhow::Result<Step> {
        let ev: ExecutionEvent = match serde_json::from_str(text) {
            Ok(ev) => ev,
            Err(_) => {
                self.screen.note(&format!("[unreadable frame] {text}"));
                return Ok(Step::Continue);
            }
        };
        if ev.seq <= self.last_seq && ev.seq != 0 {
            return Ok(Step::Continue);
        }
        self.last_seq = self.last_seq.max(ev.seq);
        let moved_on = self.pending_at.as_ref().is_some_and(|(run, seq)| {
            *run == ev.run_id
                && ev.seq > *seq
                && !matches!(ev.payload, EventPayload::HitlRequest(_))
        });
        if moved_on {
            // The run went on past its request (its call's result, an error, its end): someone
            // decided it — in the console, over REST, another terminal — or it timed out.
            let why = match &ev.payload {
                EventPayload::Done(d) => format!("the run ended ({})", d.status.as_str()),
                _ => "the request was decided elsewhere".to_string(),
            };
            self.close_request(&why);
        }
        if self.args.json {
            self.screen.show(Out::Stdout(format!("{text}\n")));
        } else if let Some(o) = self.depths.render(&ev) {
            self.screen.show(o);
        }
        match &ev.payload {
            // A `task` child run's end: its parent goes on.
            EventPayload::Done(_) if ev.parent_run_id.is_some() => {}
            EventPayload::Done(d) => {
                self.running = None;
                if self.pending.is_some() {
                    self.close_request(&format!("the run ended ({})", d.status.as_str()));
                }
                self.cancel_sent = false;
                if self.waiting_done {
                    return Ok(Step::Exit(if d.status == DoneStatus::Completed {
                        0
                    } else {
                        1
                    }));
                }
                if self.quit_when_idle {
                    return Ok(Step::Exit(0));
                }
            }
            EventPayload::HitlRequest(req) => {
                self.running.get_or_insert_with(Instant::now);
                let auto = match (req.kind, self.args.approve) {
                    (HitlKind::Approval, ApprovePolicy::All) => {
                        Some(Decision::Approve { message: None })
                    }
                    (HitlKind::Approval, ApprovePolicy::None) => Some(Decision::Reject {
                        message: Some("rejected by the CLI policy".into()),
                    }),
                    _ if self.keyboard.is_none() => Some(Decision::Reject {
                        message: Some("no interactive user".into()),
                    }),
                    _ => None,
                };
                match auto {
                    Some(d) => decide(ws, &req.request_id, d).await?,
                    None => {
                        self.pending = Some(req.clone());
                        self.pending_at = Some((ev.run_id.clone(), ev.seq));
                    }
                }
            }
            _ => {
                self.running.get_or_insert_with(Instant::now);
            }
        }
        Ok(Step::Continue)
    }

    async fn on_interrupt(&mut self, ws: &mut Ws) -> anyhow::Result<Step> {
        if self.running.is_none() {
            return Ok(Step::Exit(130));
        }
        if self.cancel_sent {
            self.screen
                .note("[quit; the run goes on being cancelled on the server]");
            return Ok(Step::Exit(130));
        }
        send(ws, &ClientFrame::Cancel(CancelFrame::default())).await?;
        self.cancel_sent = true;
        self.screen
            .note("\n[cancelling the run; Ctrl-C again quits]");
        Ok(Step::Continue)
    }

    /// The pending request is over without an answer from this terminal. A prompt up for it is
    /// withdrawn at once: on a terminal it stops asking (redrawn by the note printed here), and
    /// whatever is typed at it is dropped, never sent as a message or as an answer to something
    /// else; the next prompt is the ordinary `> `.
    fn close_request(&mut self, why: &str) {
        let Some(req) = self.pending.take() else {
            return;
        };
        self.pending_at = None;
        let asking = self.keyboard.as_ref().is_some_and(|k| k.waiting)
            && self.asked_for.as_deref() == Some(req.request_id.as_str());
        if asking && let Some(k) = &self.keyboard {
            k.withdraw("(withdrawn: press Enter) ");
            self.withdrawn = true;
            let what = if req.question.is_some() {
                "question"
            } else {
                "approval"
            };
            self.screen.note(&format!(
                "[{why}: the {what} prompt is withdrawn; a line typed at it is not sent]"
            ));
        }
    }

    async fn on_input(&mut self, ws: &mut Ws, got: Input) -> anyhow::Result<Step> {
        self.screen.prompt_active = false;
        self.asked_for = None;
        if std::mem::take(&mut self.withdrawn)
            && let Input::Line(l) = &got
        {
            if !l.trim().is_empty() {
                self.screen.note(&format!(
                    "[not sent: {:?} was typed at a withdrawn prompt; type at the > prompt]",
                    input::join_continued(l)
                ));
            }
            return Ok(Step::Continue);
        }
        let line = match got {
            Input::Eof => {
                if self.running.is_some() && self.pending.is_none() {
                    self.quit_when_idle = true;
                    self.keyboard = None;
                    return Ok(Step::Continue);
                }
                return Ok(Step::Exit(0));
            }
            Input::Interrupted => {
                if self.running.is_some() {
                    return self.on_interrupt(ws).await;
                }
                if self.interrupted_at_prompt {
                    return Ok(Step::Exit(130));
                }
                self.interrupted_at_prompt = true;
                self.screen.note("(Ctrl-C again, Ctrl-D or /quit leaves)");
                return Ok(Step::Continue);
            }
            Input::Line(l) => l,
        };
        self.interrupted_at_prompt = false;
        if let Some(req) = self.pending.take() {
            match parse_decision(&req, &line) {
                Ok(d) => decide(ws, &req.request_id, d).await?,
                Err(e) => {
                    self.screen.note(&e);
                    self.pending = Some(req);
                }
            }
            return Ok(Step::Continue);
        }
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("//") {
            self.send_chat(ws, format!("/{rest}")).await?;
            return Ok(Step::Continue);
        }
        if !trimmed.starts_with('/') {
            if !trimmed.is_empty() {
                self.send_chat(ws, line).await?;
            }
            return Ok(Step::Continue);
        }
        let (cmd, arg) = trimmed.split_once(' ').unwrap_or((trimmed, ""));
        let arg = arg.trim();
        match cmd {
            "/quit" | "/exit" => return Ok(Step::Exit(0)),
            "/help" => self.screen.show(Out::Stderr(HELP.into())),
            "/cancel" => send(ws, &ClientFrame::Cancel(CancelFrame::default())).await?,
            "/sessions" => self.list_sessions().await,
            "/new" => {
                let assistant = self.assistant.clone();
                self.switch(ws, assistant).await;
            }
            "/agent" | "/agents" if arg.is_empty() => self.list_agents().await,
            "/agent" => self.switch(ws, Some(arg.to_string())).await,
            "/mcp" => self.list_mcp_servers().await,
            "/sign-in" if arg.is_empty() => self
                .screen
                .note("/sign-in NAME: /mcp lists your servers and which need a sign-in"),
            "/sign-in" => self.sign_in(arg).await,
            other => self.screen.note(&format!(
                "unknown command {other}: /help lists them (start with // to send a line beginning with /)"
            )),
        }
        Ok(Step::Continue)
    }

    /// Start a new session (with `assistant`, if given) and move to it.
    async fn switch(&mut self, ws: &mut Ws, assistant: Option<String>) {
        let created = self.api.create_session(assistant.as_deref()).await;
        match created {
            Err(e) => self.screen.note(&format!("{e:#}")),
            Ok(id) => {
                let _ = ws.close(None).await;
                self.session = id;
                self.assistant = assistant;
                self.last_seq = 0;
                self.running = None;
                self.pending = None;
                self.pending_at = None;
                match self.reconnect(None, false).await {
                    Ok(new) => {
                        *ws = new;
                        self.screen.note(&format!("session {}", self.session));
                    }
                    Err(e) => self.screen.note(&format!("{e:#}")),
                }
            }
        }
    }

    async fn list_sessions(&mut self) {
        match self.api.get("/api/v1/sessions?limit=20").await {
            Err(e) => self.screen.note(&format!("{e:#}")),
            Ok(v) => {
                let mut s = String::new();
                for item in v["items"].as_array().into_iter().flatten() {
                    let id = item["session_id"].as_str().unwrap_or("?");
                    s.push_str(&format!(
                        "{} {id}  {:<16} last active {}\n",
                        if id == self.session { "*" } else { " " },
                        item["state"].as_str().unwrap_or(""),
                        item["last_active"].as_str().unwrap_or("")
                    ));
                }
                s.push_str("join one with: agentry chat --session ID\n");
                self.screen.show(Out::Stderr(s));
            }
        }
    }

    /// The caller's MCP servers (their own and the platform's) with status, tool count and
    /// whether an OAuth server needs a sign-in.
    async fn list_mcp_servers(&mut self) {
        let listed = async {
            let user = self.api.user_id().await?;
            self.api
                .get(&format!("/api/v1/users/{user}/mcp-servers"))
                .await
        }
        .await;
        match listed {
            Err(e) => self.screen.note(&format!("{e:#}")),
            Ok(v) => self.screen.show(Out::Stderr(mcp_servers_text(&v))),
        }
    }

    /// Start an OAuth sign-in to MCP server `name` and show the link to open.
    async fn sign_in(&mut self, name: &str) {
        let started = async {
            let user = self.api.user_id().await?;
            let server = url::form_urlencoded::byte_serialize(name.as_bytes()).collect::<String>();
            self.api
                .call(
                    reqwest::Method::POST,
                    &format!("/api/v1/users/{user}/mcp-servers/{server}/sign-in"),
                    None,
                )
                .await
        }
        .await;
        match started {
            Err(e) => self.screen.note(&format!("{e:#}")),
            Ok(v) => self.screen.show(Out::Stderr(format!(
                "open this link in a browser to sign in to {name} (before {}):\n  {}\nthe page says when you are signed in; your next message uses the server\n",
                v["expires_at"].as_str().unwrap_or("it expires"),
                v["authorization_url"].as_str().unwrap_or("?"),
            ))),
        }
    }

    async fn list_agents(&mut self) {
        match self.api.get("/api/v1/agents").await {
            Err(e) => self.screen.note(&format!("{e:#}")),
            Ok(v) => {
                let mut s = String::new();
                for a in items(&v) {
                    s.push_str(&format!(
                        "  {:<12} {:<24} {}\n",
                        a["id"].as_str().unwrap_or("?"),
                        a["name"].as_str().unwrap_or("?"),
                        a["description"].as_str().unwrap_or("")
                    ));
                }
                s.push_str("start a session with one: /agent ID or /agent NAME\n");
                self.screen.show(Out::Stderr(s));
            }
        }
    }

    /// The session's recent messages, the last event seen (so the live stream continues after
    /// it), and an approval still waiting.
    async fn show_history(&mut self) -> anyhow::Result<()> {
        const SHOWN: u64 = 40;
        let base = format!("/api/v1/sessions/{}", self.session);
        let info = self
            .api
            .get(&base)
            .await
            .with_context(|| format!("joining session {}", self.session))?;
        let total = self.api.get(&format!("{base}/messages?limit=1")).await?["total"]
            .as_u64()
            .unwrap_or(0);
        let offset = total.saturating_sub(SHOWN);
        let page = self
            .api
            .get(&format!("{base}/messages?limit={SHOWN}&offset={offset}"))
            .await?;
        if !self.args.json {
            let mut s = String::new();
            if offset > 0 {
                s.push_str(&format!("… {offset} earlier messages\n"));
            }
            for m in page["items"].as_array().into_iter().flatten() {
                let content = m["content"].as_str().unwrap_or("");
                match m["role"].as_str() {
                    Some("user") => s.push_str(&format!("> {content}\n")),
                    Some("assistant") if !content.is_empty() => s.push_str(&format!("{content}\n")),
                    _ => {}
                }
            }
            s.push_str("──\n");
            self.screen.show(Out::Stdout(s));
        }
        // The event stream up to now: where the live stream continues, and what is pending.
        let mut after = 0;
        let mut waiting: Option<(HitlRequestData, String, u64)> = None;
        loop {
            let page = self
                .api
                .get(&format!("{base}/events?after_seq={after}&limit=1000"))
                .await?;
            for ev in page["events"].as_array().into_iter().flatten() {
                if let Ok(ev) = serde_json::from_value::<ExecutionEvent>(ev.clone()) {
                    match ev.payload {
                        EventPayload::HitlRequest(h) => waiting = Some((h, ev.run_id, ev.seq)),
                        EventPayload::Done(_) => waiting = None,
                        _ => {}
                    }
                }
            }
            after = page["next_after_seq"].as_u64().unwrap_or(after);
            if page["has_more"] != true {
                break;
            }
        }
        self.last_seq = after;
        if info["state"] == "waiting_approval"
            && let Some((h, run, seq)) = waiting
        {
            self.running = Some(Instant::now());
            self.screen.show(Out::Stdout(render::hitl_request(&h)));
            self.pending = Some(h);
            self.pending_at = Some((run, seq));
        } else if info["state"] == "running" {
            self.running = Some(Instant::now());
        }
        Ok(())
    }
}

/// The items of a list answer: a page (`{items, total, …}`) or a plain array.
fn items(v: &Value) -> Vec<Value> {
    v.get("items")
        .unwrap_or(v)
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn next_input(keyboard: &mut Option<Keyboard>) -> Input {
    match keyboard {
        Some(k) if k.waiting => k.next().await,
        _ => std::future::pending().await,
    }
}

async fn send(ws: &mut Ws, frame: &ClientFrame) -> anyhow::Result<()> {
    ws.send(Message::text(serde_json::to_string(frame)?))
        .await
        .context("sending a frame")
}

async fn decide(ws: &mut Ws, request_id: &str, decision: Decision) -> anyhow::Result<()> {
    send(
        ws,
        &ClientFrame::HitlDecision(HitlDecisionFrame {
            request_id: request_id.to_string(),
            decision,
        }),
    )
    .await
}

/// Turn a typed line into a decision for `req`.
pub fn parse_decision(req: &HitlRequestData, line: &str) -> Result<Decision, String> {
    let line = line.trim();
    match req.kind {
        HitlKind::Approval => {
            let (head, rest) = line.split_once(' ').unwrap_or((line, ""));
            match head.to_lowercase().as_str() {
                "y" | "yes" | "approve" => Ok(Decision::Approve { message: None }),
                "n" | "no" | "reject" => Ok(Decision::Reject { message: (!rest.trim().is_empty()).then(|| rest.trim().to_string()) }),
                "e" | "edit" => serde_json::from_str::<Value>(rest)
                    .ok()
                    .filter(Value::is_object)
                    .map(|args| Decision::Edit { args, message: None })
                    .ok_or_else(|| "edit needs the new arguments as a JSON object, e.g. e {\"path\": \"a.txt\"}".to_string()),
                _ => Err("answer y, n or e {json}".into()),
            }
        }
        HitlKind::Question => {
            if line == "/decline" {
                return Ok(Decision::Reject { message: None });
            }
            let wants_json = req.question.as_ref().is_some_and(|q| q.schema.is_some());
            let answer = if wants_json {
                serde_json::from_str(line).map_err(|_| {
                    "this question wants a JSON object matching its schema".to_string()
                })?
            } else {
                Value::String(line.to_string())
            };
            Ok(Decision::Answer { answer })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_schema::events::Question;

    fn approval() -> HitlRequestData {
        HitlRequestData {
            request_id: "r".into(),
            kind: HitlKind::Approval,
            action_requests: vec![],
            question: None,
        }
    }

    #[test]
    fn mcp_servers_show_who_needs_a_sign_in() {
        let listed = json!([
            {"name": "secure", "status": "error", "status_message": "MCP server \"secure\" needs you to sign in (OAuth): no token",
             "sign_in": {"grant": "authorization_code", "signed_in": false, "needs_sign_in": true}},
            {"name": "files", "status": "connected", "tools": [{"name": "a"}, {"name": "b"}],
             "sign_in": {"grant": "authorization_code", "signed_in": true, "needs_sign_in": false}},
            {"name": "off", "status": "disconnected", "disabled": true},
        ]);
        let text = mcp_servers_text(&listed);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains("secure") && lines[0].contains("needs a sign-in: /sign-in secure"),
            "{text}"
        );
        assert!(lines[1].contains("needs you to sign in"), "{text}");
        assert!(
            lines[2].contains("files")
                && lines[2].contains("2 tools")
                && lines[2].ends_with("signed in"),
            "{text}"
        );
        assert!(
            lines[3].contains("off") && lines[3].contains("disabled"),
            "{text}"
        );
        assert!(mcp_servers_text(&json!([])).starts_with("no MCP servers"));
    }

    #[test]
    fn approval_lines_become_decisions() {
        assert_eq!(
            parse_decision(&approval(), "y").unwrap(),
            Decision::Approve { message: None }
        );
        assert_eq!(
            parse_decision(&approval(), "n too risky").unwrap(),
            Decision::Reject {
                message: Some("too risky".into())
            }
        );
        assert_eq!(
            parse_decision(&approval(), r#"e {"path": "b.txt"}"#).unwrap(),
            Decision::Edit {
                args: json!({"path": "b.txt"}),
                message: None
            }
        );
        assert!(parse_decision(&approval(), "e [1]").is_err());
        assert!(parse_decision(&approval(), "maybe").is_err());
    }

    #[test]
    fn answers_are_text_or_json_when_the_question_has_a_schema() {
        let mut q = HitlRequestData {
            request_id: "q".into(),
            kind: HitlKind::Question,
            action_requests: vec![],
            question: Some(Question {
                text: "?".into(),
                question_type: "text".into(),
                options: vec![],
                timeout: 1,
                schema: None,
                function_call: None,
            }),
        };
        assert_eq!(
            parse_decision(&q, "blue").unwrap(),
            Decision::Answer {
                answer: json!("blue")
            }
        );
        assert_eq!(
            parse_decision(&q, "/decline").unwrap(),
            Decision::Reject { message: None }
        );
        q.question.as_mut().unwrap().schema = Some(json!({"type": "object"}));
        assert_eq!(
            parse_decision(&q, r#"{"name": "Ada"}"#).unwrap(),
            Decision::Answer {
                answer: json!({"name": "Ada"})
            }
        );
        assert!(parse_decision(&q, "Ada").is_err());
    }
}
