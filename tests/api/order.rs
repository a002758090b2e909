//! A user's instructions run in the order they were sent (issue 31, item 1): messages queued on
//! one WebSocket (`chat` frames with `enqueue: true` while a run is going) start one after
//! another in the order of the frames — on one node (SQLite, PostgreSQL) and in cluster mode,
//! where the socket's replica forwards them to the replica that runs the session.

use std::collections::HashMap;

use serde_json::{Value, json};

use reqwest::Method;

use crate::ctx::Ctx;
use crate::replicas::{events_until, watch};
use crate::streaming::{new_session, send, text_of};

/// The messages queued behind the first run, in the order sent.
const QUEUED: [&str; 3] = ["q1", "q2", "q3"];

/// `trials` times: a session, a 1 s run started by a socket on `owner`, and right after it
/// (without waiting for any answer) three `chat` frames with `enqueue: true` on a socket on
/// `sender` (the same socket when both are the same server). The four runs end in the order
/// sent — `first, q1, q2, q3` — each answering its own message, every frame accepted.
pub async fn queued_chats_run_in_the_order_sent(
    owner: &Ctx,
    sender: &Ctx,
    key: &str,
    trials: usize,
) {
    let same = std::ptr::eq(owner, sender);
    let mut out_of_order = Vec::new();
    for trial in 0..trials {
        let sid = new_session(owner, key).await;
        let mut on_sender = watch(sender, key, &sid, None).await;
        let mut on_owner = if same {
            None
        } else {
            Some(watch(owner, key, &sid, None).await)
        };
        let first = json!({"type": "chat", "payload": {"message": "/sleep 1000\n/echo first"}});
        match on_owner.as_mut() {
            // The owner runs the first message: the queued ones are forwarded to it.
            Some(ws) => {
                send(ws, first).await;
                running(owner, key, &sid).await;
            }
            None => send(&mut on_sender, first).await,
        }
        for q in QUEUED {
            send(
                &mut on_sender,
                json!({"type": "chat", "payload": {"message": format!("/echo {q}"), "enqueue": true}}),
            )
            .await;
        }
        // Every event of the four runs, as the sender's socket saw them; refusals aside.
        let mut refused = Vec::new();
        let dones = std::cell::Cell::new(0);
        let events = events_until(&mut on_sender, Some(&mut refused), |e| {
            if e["event_type"] == "done" {
                dones.set(dones.get() + 1);
            }
            dones.get() == 1 + QUEUED.len()
        })
        .await;
        assert!(
            refused.is_empty(),
            "trial {trial}: a frame was refused: {refused:?}"
        );
        let mut by_run: HashMap<String, Vec<Value>> = HashMap::new();
        let mut ended = Vec::new();
        for e in &events {
            let run = e["run_id"].as_str().unwrap().to_string();
            if e["event_type"] == "done" {
                assert_eq!(e["data"]["status"], "completed", "trial {trial}: {e}");
                ended.push(run.clone());
            }
            by_run.entry(run).or_default().push(e.clone());
        }
        let answers: Vec<String> = ended.iter().map(|r| text_of(&by_run[r])).collect();
        let want: Vec<String> = std::iter::once("first")
            .chain(QUEUED)
            .map(str::to_string)
            .collect();
        if answers != want {
            out_of_order.push((trial, answers));
        }
        // Each run started after the one before ended: no run's events inside another's.
        let mut seen_done = std::collections::HashSet::new();
        for e in &events {
            let run = e["run_id"].as_str().unwrap();
            if e["event_type"] == "done" {
                seen_done.insert(run.to_string());
            } else {
                let current = ended.iter().find(|r| !seen_done.contains(*r));
                assert_eq!(
                    current.map(String::as_str),
                    Some(run),
                    "trial {trial}: an event of another run inside the active one: {e}"
                );
            }
        }
    }
    assert!(
        out_of_order.is_empty(),
        "{} of {trials} trials answered out of the order sent (first, q1, q2, q3): {out_of_order:?}",
        out_of_order.len()
    );
}

/// Wait until the session has a run going (its first one).
async fn running(ctx: &Ctx, key: &str, sid: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let runs = ctx
            .ok(
                Method::GET,
                &format!("/api/v1/executions?session_id={sid}"),
                key,
                None,
                200,
            )
            .await;
        let items = runs["items"].as_array().cloned().unwrap_or_default();
        if items.iter().any(|r| r["status"] == "running") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the first run did not start: {runs}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// How many watcher tries run at once: the race is between a socket's subscription and a run's
/// first events, so tries overlap to keep the test's wall time short (and the replicas busy,
/// which is when the race showed).
const WATCHERS_AT_ONCE: usize = 10;

/// A watcher on another replica misses nothing (issue 31, item 2): `tries` times (several at
/// once), a socket opens on `watcher` and at once (no pause after the upgrade) a chat on
/// `owner` starts a run that stops at an approval. The watcher's socket gets the run's
/// `tool_call` and `hitl_request` *while the run waits* (the person watching there sees the
/// approval prompt, not only the log after the run's end), then — after the run is cancelled —
/// its `done`, with no `seq` skipped from the first event to the `done`.
pub async fn a_watcher_on_another_replica_sees_a_run_from_its_start(
    owner: &Ctx,
    watcher: &Ctx,
    key: &str,
    tries: usize,
) {
    use futures::StreamExt;
    let began = std::time::Instant::now();
    let missed: Vec<(usize, String, Vec<u64>)> = futures::stream::iter(0..tries)
        .map(|attempt| one_watcher(owner, watcher, key, attempt))
        .buffer_unordered(WATCHERS_AT_ONCE)
        .filter_map(|miss| async move { miss })
        .collect()
        .await;
    eprintln!(
        "{tries} watcher tries ({WATCHERS_AT_ONCE} at a time) took {:?}",
        began.elapsed()
    );
    assert!(
        missed.is_empty(),
        "{} of {tries} watchers missed events of a run started on another replica right after they connected: {missed:?}",
        missed.len()
    );
}

/// One try of [`a_watcher_on_another_replica_sees_a_run_from_its_start`]: `None` when the
/// watcher saw everything, else what it saw.
async fn one_watcher(
    owner: &Ctx,
    watcher: &Ctx,
    key: &str,
    attempt: usize,
) -> Option<(usize, String, Vec<u64>)> {
    use std::time::Duration;
    let write = r#"/tool write_file {"file_path": "watched.txt", "content": "x"}"#;
    let sid = new_session(owner, key).await;
    let mut on_owner = watch(owner, key, &sid, None).await;
    let mut on_watcher = watch(watcher, key, &sid, None).await;
    send(
        &mut on_owner,
        json!({"type": "chat", "payload": {"message": write}}),
    )
    .await;
    let asked = events_until(&mut on_owner, None, |e| e["event_type"] == "hitl_request").await;
    let run = asked.last().unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    // The approval waits for as long as nobody decides: the watcher must get its request
    // now. (The server's pings keep a socket that gets nothing open: bound the wait.)
    let live = tokio::time::timeout(
        Duration::from_secs(10),
        events_until(&mut on_watcher, None, |e| {
            e["event_type"] == "hitl_request" && e["run_id"] == run.as_str()
        }),
    )
    .await;
    send(&mut on_owner, json!({"type": "cancel", "payload": {}})).await;
    let Ok(mut seen) = live else {
        return Some((
            attempt,
            "no hitl_request within 10 s while the run waited".into(),
            Vec::new(),
        ));
    };
    let rest = tokio::time::timeout(
        Duration::from_secs(20),
        events_until(&mut on_watcher, None, |e| {
            e["event_type"] == "done" && e["run_id"] == run.as_str()
        }),
    )
    .await;
    let Ok(rest) = rest else {
        return Some((attempt, "no done within 20 s".into(), Vec::new()));
    };
    seen.extend(rest);
    let of_run: Vec<&Value> = seen
        .iter()
        .filter(|e| e["run_id"] == run.as_str())
        .collect();
    let types: Vec<&str> = of_run
        .iter()
        .map(|e| e["event_type"].as_str().unwrap_or(""))
        .collect();
    let seqs: Vec<u64> = of_run.iter().filter_map(|e| e["seq"].as_u64()).collect();
    let gap_free = seqs.windows(2).all(|w| w[1] == w[0] + 1);
    (!types.contains(&"tool_call") || !gap_free).then(|| (attempt, types.join(","), seqs))
}
