//! `agentry chat`: a terminal client. It creates (or resumes) a session over REST, opens the
//! session's WebSocket, sends messages, prints the event stream, answers approvals and
//! questions, cancels with `/cancel`, and reconnects with `resume` when the connection drops.
//! It depends on the wire types only and talks to a server like any other client.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use agentry_schema::events::{
    DoneStatus, EventPayload, ExecutionEvent, HitlKind, HitlRequestData, ToolStatus,
};
use agentry_schema::frames::{
    CancelFrame, ChatFrame, ClientFrame, Decision, HitlDecisionFrame, ResumeFrame,
};
use anyhow::{Context, anyhow, bail};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

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
    /// API key (a tenant user's key).
    #[arg(long, env = "AGENTRY_API_KEY", hide_env_values = true)]
    pub key: String,
    /// Continue this session instead of creating one.
    #[arg(long)]
    pub session: Option<String>,
    /// Assistant for a new session.
    #[arg(long)]
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
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Run `agentry chat`. Returns the process exit code.
pub async fn chat(args: ChatArgs) -> anyhow::Result<i32> {
    let base = url::Url::parse(&args.server)
        .with_context(|| format!("--server {:?} is not a URL", args.server))?;
    let http = reqwest::Client::new();
    let session = match &args.session {
        Some(s) => s.clone(),
        None => create_session(&http, &base, &args.key, args.assistant.as_deref()).await?,
    };
    let interactive = args.message.is_none();
    if !args.json {
        eprintln!("session {session}");
        if interactive {
            eprintln!("type a message; /cancel stops the run, /quit leaves");
        }
    }
    let mut last_seq = 0u64;
    let mut ws = connect(&base, &args.key, &session).await?;
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let mut pending: Option<HitlRequestData> = None;
    let mut waiting_done = false;
    if let Some(m) = &args.message {
        send(
            &mut ws,
            &ClientFrame::Chat(ChatFrame {
                message: m.clone(),
                enqueue: false,
            }),
        )
        .await?;
        waiting_done = true;
    }
    let mut exit = 0;
    loop {
        tokio::select! {
            msg = ws.next() => {
                let text = match msg {
                    Some(Ok(Message::Text(t))) => t.to_string(),
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                        // Reconnect and resume from the last event seen.
                        if !args.json {
                            eprintln!("\n[connection lost; reconnecting]");
                        }
                        ws = reconnect(&base, &args.key, &session).await?;
                        send(&mut ws, &ClientFrame::Resume(ResumeFrame { after_seq: last_seq })).await?;
                        continue;
                    }
                    Some(Ok(_)) => continue,
                };
                let ev: ExecutionEvent = match serde_json::from_str(&text) {
                    Ok(ev) => ev,
                    Err(_) => {
                        eprintln!("[unreadable frame] {text}");
                        continue;
                    }
                };
                if ev.seq <= last_seq && ev.seq != 0 {
                    continue;
                }
                last_seq = last_seq.max(ev.seq);
                if args.json {
                    println!("{text}");
                } else {
                    render(&ev);
                }
                match &ev.payload {
                    EventPayload::HitlRequest(req) => {
                        match (req.kind, args.approve) {
                            (HitlKind::Approval, ApprovePolicy::All) => decide(&mut ws, &req.request_id, Decision::Approve { message: None }).await?,
                            (HitlKind::Approval, ApprovePolicy::None) => decide(&mut ws, &req.request_id, Decision::Reject { message: Some("rejected by the CLI policy".into()) }).await?,
                            _ if !std::io::stdin().is_terminal() && !interactive => {
                                decide(&mut ws, &req.request_id, Decision::Reject { message: Some("no interactive user".into()) }).await?
                            }
                            _ => {
                                prompt_for(req);
                                pending = Some(req.clone());
                            }
                        }
                    }
                    EventPayload::Done(d) => {
                        pending = None;
                        if waiting_done && !interactive {
                            exit = if d.status == DoneStatus::Completed { 0 } else { 1 };
                            break;
                        }
                    }
                    _ => {}
                }
            }
            line = stdin.next_line() => {
                let Some(line) = line.context("reading stdin")? else {
                    if interactive { break } else { continue }
                };
                let line = line.trim().to_string();
                if let Some(req) = pending.take() {
                    match parse_decision(&req, &line) {
                        Ok(d) => decide(&mut ws, &req.request_id, d).await?,
                        Err(e) => {
                            eprintln!("{e}");
                            prompt_for(&req);
                            pending = Some(req);
                        }
                    }
                    continue;
                }
                match line.as_str() {
                    "" => {}
                    "/quit" | "/exit" => break,
                    "/cancel" => send(&mut ws, &ClientFrame::Cancel(CancelFrame::default())).await?,
                    _ if interactive => send(&mut ws, &ClientFrame::Chat(ChatFrame { message: line, enqueue: false })).await?,
                    _ => {}
                }
            }
        }
    }
    let _ = ws.close(None).await;
    Ok(exit)
}

async fn create_session(
    http: &reqwest::Client,
    base: &url::Url,
    key: &str,
    assistant: Option<&str>,
) -> anyhow::Result<String> {
    let url = base.join("/api/v1/sessions")?;
    let body = match assistant {
        Some(a) => json!({"assistant_id": a}),
        None => json!({}),
    };
    let res = http
        .post(url)
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .context("creating a session")?;
    let status = res.status();
    let v: Value = res.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        bail!(
            "creating a session failed ({status}): {}",
            v["message"].as_str().unwrap_or("no message")
        );
    }
    v["session_id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("the server answered without a session_id"))
}

async fn connect(base: &url::Url, key: &str, session: &str) -> anyhow::Result<Ws> {
    let mut url = base.join(&format!("/ws/chat/{session}"))?;
    let scheme = if base.scheme() == "https" {
        "wss"
    } else {
        "ws"
    };
    url.set_scheme(scheme)
        .map_err(|_| anyhow!("cannot use {scheme} with {base}"))?;
    let mut req = url.as_str().into_client_request()?;
    req.headers_mut()
        .insert("authorization", format!("Bearer {key}").parse()?);
    let (ws, _) = tokio_tungstenite::connect_async(req)
        .await
        .map_err(|e| match e {
            tokio_tungstenite::tungstenite::Error::Http(res) => {
                anyhow!("the server refused the WebSocket: HTTP {}", res.status())
            }
            other => anyhow!("connecting the WebSocket: {other}"),
        })?;
    Ok(ws)
}

async fn reconnect(base: &url::Url, key: &str, session: &str) -> anyhow::Result<Ws> {
    let mut delay = Duration::from_millis(200);
    for _ in 0..8 {
        match connect(base, key, session).await {
            Ok(ws) => return Ok(ws),
            Err(_) => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
    connect(base, key, session).await
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

fn prompt_for(req: &HitlRequestData) {
    match req.kind {
        HitlKind::Approval => eprint!("approve? [y]es / [n]o [reason] / e {{new args as JSON}}: "),
        HitlKind::Question => eprint!("your answer (or /decline): "),
    }
    let _ = std::io::stderr().flush();
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

fn render(ev: &ExecutionEvent) {
    let mut out = std::io::stdout();
    match &ev.payload {
        EventPayload::Text(t) if !t.is_final => {
            let _ = write!(out, "{}", t.content);
            let _ = out.flush();
        }
        EventPayload::Text(_) => println!(),
        EventPayload::ToolCall(c) => println!("\n→ {} {}", c.tool_name, c.tool_args),
        EventPayload::ToolResult(r) => {
            let mut s = r.result.to_string();
            if s.len() > 300 {
                let mut cut = 300;
                while !s.is_char_boundary(cut) {
                    cut -= 1;
                }
                s.truncate(cut);
                s.push('…');
            }
            let mark = if r.status == ToolStatus::Success {
                "✓"
            } else {
                "✗"
            };
            println!("{mark} {s}");
        }
        EventPayload::HitlRequest(h) => match (&h.question, h.action_requests.first()) {
            (Some(q), _) => println!(
                "\n? {}{}",
                q.text,
                if q.options.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", q.options.join(" / "))
                }
            ),
            (None, Some(a)) => println!("\n! approval needed: {}", a.description),
            _ => println!("\n! approval needed"),
        },
        EventPayload::TodoUpdate(t) => {
            println!("todos:");
            for todo in &t.todos {
                println!("  [{:?}] {}", todo.status, todo.content);
            }
        }
        EventPayload::FileOperation(f) => println!(
            "  {:?} {} (+{} -{})",
            f.operation, f.file_path, f.metrics.lines_added, f.metrics.lines_removed
        ),
        EventPayload::Progress(p) => println!(
            "  … {}{}",
            p.progress,
            p.total.map(|t| format!("/{t}")).unwrap_or_default()
        ),
        EventPayload::Error(e) => eprintln!(
            "\n[{}{}] {}",
            e.error_code,
            if e.recoverable { ", recoverable" } else { "" },
            e.error
        ),
        EventPayload::Done(d) => eprintln!(
            "[done: {}{} · tokens {} in / {} out]",
            d.status.as_str(),
            d.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            d.token_usage.input,
            d.token_usage.output
        ),
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
