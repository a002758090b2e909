//! `/v1/chat/completions` and `/v1/models` (docs/openai.md): the official `openai` Python
//! package as the client ([`sdk_client`]), and raw HTTP for what the SDK hides ([`wire`]):
//! the `data: [DONE]` framing, OpenAI's error shape on every error, and that a refused request
//! changes nothing. [`scenario`] produces every documented status for the OpenAPI check.

use agentry_fake_model::FakeModelServer;
use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{ADMIN_KEY, Ctx};

fn completion(ctx: &Ctx, key: Option<&str>, body: Value) -> reqwest::RequestBuilder {
    ctx.request(Method::POST, "/v1/chat/completions", key)
        .json(&body)
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

/// The SDK against the real server: stream and not, stateless and continued, a tool run, an
/// approval it cannot give, a bad key, an unknown model, an empty message.
pub async fn sdk_client(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let base = ctx.url("/v1");
    let r = crate::ctx::run_client(
        "openai_client.py",
        &[
            ("AGENTRY_OPENAI_BASE", &base),
            ("AGENTRY_KEY", &t.member.key),
        ],
    )
    .await;

    assert_eq!(r["models"], json!(["default"]), "{r}");

    // Stateless: the answer, usage, and the session it went into.
    let plain = &r["plain"];
    assert_eq!(plain["content"], "(scripted) You said: hello there", "{r}");
    assert_eq!(plain["object"], "chat.completion");
    assert_eq!(plain["model"], "default");
    assert_eq!(plain["role"], "assistant");
    assert_eq!(plain["finish_reason"], "stop");
    assert!(plain["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let usage = &plain["usage"];
    let (input, output) = (
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["completion_tokens"].as_u64().unwrap(),
    );
    assert!(input > 0 && output > 0, "{usage}");
    assert_eq!(usage["total_tokens"].as_u64().unwrap(), input + output);
    // The earlier messages reached the model, in order, before the last one.
    let sent = fake
        .requests()
        .into_iter()
        .map(|req| req.body.to_string())
        .find(|b| b.contains("hello there"))
        .expect("the model was asked");
    let (q, a, h) = (
        sent.find("first question").expect("the earlier question"),
        sent.find("first answer").expect("the earlier answer"),
        sent.find("hello there").unwrap(),
    );
    assert!(q < a && a < h, "{sent}");
    // The session holds the whole conversation.
    let session = plain["session"].as_str().unwrap();
    let msgs = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/sessions/{session}/messages"),
            &t.member.key,
            None,
            200,
        )
        .await;
    let contents: Vec<&str> = msgs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        contents[..],
        [
            "Answer briefly.",
            "first question",
            "first answer",
            "hello there",
            "(scripted) You said: hello there",
            "/echo continued by header",
            "continued by header",
            "/echo continued by field",
            "continued by field",
        ],
        "{msgs}"
    );
    assert_eq!(r["by_header"]["content"], "continued by header");
    assert_eq!(r["by_header"]["session"], session);
    assert_eq!(r["by_field"]["content"], "continued by field");
    assert_eq!(r["by_field"]["session"], session);

    // Streamed: word deltas that make the answer, one id, `stop`, then usage.
    let s = &r["stream"];
    assert_eq!(
        s["text"], "(scripted) You said: stream this answer please",
        "{r}"
    );
    assert!(s["deltas"].as_u64().unwrap() > 3, "{s}");
    assert_eq!(s["roles"], json!(["assistant"]));
    assert_eq!(s["finish_reason"], "stop");
    assert_eq!(s["ids"].as_array().unwrap().len(), 1, "{s}");
    assert!(s["usage"]["total_tokens"].as_u64().unwrap() > 0, "{s}");

    // A tool run: the assistant called it and answered with its result.
    for tool in [&r["tool"]["content"], &r["tool_stream"]["text"]] {
        assert!(
            tool.as_str()
                .unwrap()
                .starts_with("(scripted) Tool list_directory returned:"),
            "{r}"
        );
    }

    // The approval the client cannot give: a clear error naming the tool, both ways.
    let a = &r["approval"];
    assert_eq!(a["class"], "ConflictError", "{r}");
    assert_eq!(a["status"], 409);
    assert_eq!(a["code"], "approval_required");
    assert_eq!(a["type"], "invalid_request_error");
    assert!(a["message"].as_str().unwrap().contains("write_file"), "{a}");
    assert_eq!(a["body"]["details"]["tool"], "write_file");
    let a = &r["approval_stream"];
    assert_eq!(a["class"], "APIError", "{r}");
    assert_eq!(a["code"], "approval_required");
    assert!(a["message"].as_str().unwrap().contains("write_file"), "{a}");
    // …and nothing was written: the run ended rejected.
    let run = a["body"]["details"]["run_id"].as_str().unwrap();
    let exec = ctx.execution(&t.member.key, run).await;
    assert_eq!(exec["status"], "rejected", "{exec}");

    // A bad key: 401 in OpenAI's shape.
    let b = &r["bad_key"];
    assert_eq!(
        (&b["class"], &b["status"], &b["code"], &b["type"]),
        (
            &json!("AuthenticationError"),
            &json!(401),
            &json!("unauthorized"),
            &json!("authentication_error")
        ),
        "{r}"
    );
    // An unknown model: 404 model_not_found, naming the parameter.
    let m = &r["unknown_model"];
    assert_eq!(
        (&m["class"], &m["status"], &m["code"], &m["param"]),
        (
            &json!("NotFoundError"),
            &json!(404),
            &json!("model_not_found"),
            &json!("model")
        ),
        "{r}"
    );
    // An empty message: validation_error, as on every transport.
    let e = &r["empty"];
    assert_eq!(
        (&e["status"], &e["code"], &e["param"]),
        (&json!(422), &json!("validation_error"), &json!("messages")),
        "{r}"
    );
}

/// The wire itself: SSE framing with `data: [DONE]`, error bodies in OpenAI's shape, and every
/// documented status (for the OpenAPI check), each refusal changing nothing.
pub async fn scenario(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let key = &t.member.key;

    let models = ctx.ok(Method::GET, "/v1/models", key, None, 200).await;
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "default", "{models}");
    assert_eq!(models["data"][0]["object"], "model");

    let ok = ctx
        .send(completion(
            ctx,
            Some(key),
            json!({"model": "default", "messages": user("/echo hi"), "temperature": 0.2}),
        ))
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.body["choices"][0]["message"]["content"], "hi");
    assert_eq!(
        ok.headers["x-agentry-session"].to_str().unwrap(),
        ok.body["agentry_session_id"].as_str().unwrap()
    );

    // Streamed: only `data:` lines (and keep-alive comments), the last one `[DONE]`.
    let res = completion(
        ctx,
        Some(key),
        json!({"model": "default", "messages": user("/echo a b c"), "stream": true}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let text = res.text().await.unwrap();
    let data: Vec<&str> = text
        .split("\n\n")
        .filter(|f| !f.is_empty() && !f.starts_with(':'))
        .map(|f| f.strip_prefix("data: ").expect("only data lines"))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let answer: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(answer, "a b c");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );

    let sessions_before = ctx
        .ok(Method::GET, "/api/v1/sessions", key, None, 200)
        .await["total"]
        .clone();
    // Each refusal: its status, OpenAI's shape (checked by `Ctx::send`), its code.
    let refusals: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            ctx.request(Method::POST, "/v1/chat/completions", Some(key))
                .header("content-type", "application/json")
                .body("{not json"),
            400,
            "invalid_json",
        ),
        (
            completion(
                ctx,
                None,
                json!({"model": "default", "messages": user("x")}),
            ),
            401,
            "unauthorized",
        ),
        (
            completion(
                ctx,
                Some(ADMIN_KEY),
                json!({"model": "default", "messages": user("x")}),
            ),
            403,
            "forbidden",
        ),
        (
            completion(
                ctx,
                Some(key),
                json!({"model": "nobody", "messages": user("x")}),
            ),
            404,
            "model_not_found",
        ),
        (
            completion(
                ctx,
                Some(key),
                json!({"model": "default", "messages": user("")}),
            ),
            422,
            "validation_error",
        ),
        (
            completion(ctx, Some(key), json!({"model": "default", "messages": []})),
            422,
            "validation_error",
        ),
        (
            completion(
                ctx,
                Some(key),
                json!({"model": "default", "messages": user("x"), "tools": [{"type": "function"}]}),
            ),
            422,
            "validation_error",
        ),
        (
            completion(
                ctx,
                Some(key),
                json!({"model": "default", "messages": user("x"), "agentry_session_id": uuid::Uuid::new_v4().to_string()}),
            ),
            404,
            "not_found",
        ),
        (
            ctx.request(Method::POST, "/v1/chat/completions", Some(key))
                .header("content-type", "text/plain")
                .body("{}"),
            415,
            "unsupported_media_type",
        ),
        (
            completion(
                ctx,
                Some(key),
                json!({"model": "default", "messages": user(&"x".repeat(crate::ctx::BODY_LIMIT))}),
            ),
            413,
            "payload_too_large",
        ),
        (
            ctx.request(Method::GET, "/v1/models", Some("agk_AAAAAAAA_x")),
            401,
            "unauthorized",
        ),
        (
            ctx.request(Method::GET, "/v1/models", Some(ADMIN_KEY)),
            403,
            "forbidden",
        ),
        (
            completion(
                ctx,
                Some(key),
                json!({"model": "default", "messages": user(r#"/tool write_file {"file_path": "w.txt", "content": "x"}"#)}),
            ),
            409,
            "approval_required",
        ),
    ];
    for (rb, status, code) in refusals {
        let r = ctx.send(rb).await;
        assert_eq!((r.status, r.code()), (status, code), "{}", r.body);
        assert!(r.body["error"]["message"].is_string(), "{}", r.body);
    }
    // Only the approval run made a session; the refused requests made none.
    let sessions_after = ctx
        .ok(Method::GET, "/api/v1/sessions", key, None, 200)
        .await["total"]
        .clone();
    assert_eq!(
        sessions_after.as_u64().unwrap(),
        sessions_before.as_u64().unwrap() + 1
    );
}

/// The run of a completion, from its session (a stateless call's session holds only it).
async fn run_of(ctx: &Ctx, key: &str, session: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let page = ctx
            .ok(
                Method::GET,
                &format!("/api/v1/executions?session_id={session}"),
                key,
                None,
                200,
            )
            .await;
        if let Some(run) = page["items"].as_array().and_then(|i| i.first()) {
            return run.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no run in session {session}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Polls the run until its status is not `queued`/`running`; returns it and how long it took.
async fn until_ended(ctx: &Ctx, key: &str, run: &str, within: std::time::Duration) -> String {
    let deadline = std::time::Instant::now() + within;
    loop {
        let r = ctx.execution(key, run).await;
        let status = r["status"].as_str().unwrap().to_string();
        if !["queued", "running", "waiting_approval"].contains(&status.as_str()) {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "run {run} still {status} {within:?} after its client hung up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Issue 31 item 9: an OpenAI client that hangs up expects generation to stop. A streamed
/// completion whose run would take 30 s is closed after its first chunk: its run ends
/// `cancelled` within seconds (the server notices at its next write: a keep-alive each second).
pub async fn hanging_up_cancels_the_run(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let slow = user("/sleep 30000\nnobody reads this");

    let mut res = completion(
        ctx,
        Some(key),
        json!({"model": "default", "messages": slow, "stream": true}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    let session = res.headers()["x-agentry-session"]
        .to_str()
        .unwrap()
        .to_string();
    let first = res.chunk().await.unwrap().expect("the first chunk");
    assert!(
        String::from_utf8_lossy(&first).contains("chat.completion.chunk"),
        "{first:?}"
    );
    let run = run_of(ctx, key, &session).await;
    let run = run["id"]
        .as_str()
        .or(run["run_id"].as_str())
        .unwrap()
        .to_string();
    let hung_up = std::time::Instant::now();
    drop(res);
    let status = until_ended(ctx, key, &run, std::time::Duration::from_secs(10)).await;
    assert_eq!(status, "cancelled", "a closed stream cancels its run");
    eprintln!(
        "streamed run cancelled {:?} after the client hung up",
        hung_up.elapsed()
    );
    // The session's log ends the run once, cancelled: the hang-up's cancel and the run's own
    // end do not both write a `done`. Read a moment later, so a second one would be there.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let page = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/sessions/{session}/events"),
            key,
            None,
            200,
        )
        .await;
    let dones: Vec<&Value> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event_type"] == "done" && e["run_id"] == run.as_str())
        .collect();
    assert_eq!(dones.len(), 1, "exactly one done for the run: {page}");
    assert_eq!(dones[0]["data"]["status"], "cancelled", "{}", dones[0]);
}

/// Issue 31 item 9, as a client meets it: with the default quotas (`max_sessions_per_user`
/// 100), 150 stateless completions one after another all answer. Each made a counted session
/// before, so the 101st was refused with 429.
pub async fn a_hundred_and_fifty_stateless_completions_with_default_quotas(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let quotas = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/admin/tenants/{}", t.id),
            ADMIN_KEY,
            None,
            200,
        )
        .await;
    assert_eq!(
        quotas["max_sessions_per_user"], 100,
        "the default the test is about: {quotas}"
    );
    for i in 0..150 {
        let r = ctx
            .send(completion(
                ctx,
                Some(key),
                json!({"model": "default", "messages": user(&format!("/echo call {i}"))}),
            ))
            .await;
        assert_eq!(r.status, 200, "stateless call {i} of 150: {}", r.body);
        assert_eq!(
            r.body["choices"][0]["message"]["content"],
            format!("call {i}")
        );
    }
}

/// Issue 31 item 9: stateless completions (no session named) do not count against
/// `max_sessions_per_user`, so a client that sends its whole conversation every time is never
/// cut off. With a limit of 3, twelve stateless calls all answer; the user's own sessions are
/// still limited to 3 (a body cannot ask for an uncounted session), and deleting a stateless
/// session gives no slot back. A stateless call's session can still be continued.
pub async fn stateless_completions_do_not_count_against_max_sessions(ctx: &Ctx) {
    let limit = 3;
    let t = ctx
        .tenant_with(json!({"max_sessions_per_user": limit, "requests_per_minute": 0}))
        .await;
    let key = &t.member.key;
    let mut made = Vec::new();
    for i in 0..12 {
        let r = ctx
            .send(completion(
                ctx,
                Some(key),
                json!({"model": "default", "messages": user(&format!("/echo call {i}"))}),
            ))
            .await;
        assert_eq!(r.status, 200, "stateless call {i}: {}", r.body);
        assert_eq!(
            r.body["choices"][0]["message"]["content"],
            format!("call {i}")
        );
        made.push(r.body["agentry_session_id"].as_str().unwrap().to_string());
    }
    // Streamed stateless calls too.
    let res = completion(
        ctx,
        Some(key),
        json!({"model": "default", "messages": user("/echo streamed"), "stream": true}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.text().await.unwrap().ends_with("data: [DONE]\n\n"));
    // A stateless call's session is continued like any other.
    let r = ctx
        .send(
            completion(
                ctx,
                Some(key),
                json!({"model": "default", "messages": user("/echo again")}),
            )
            .header("X-Agentry-Session", &made[0]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["agentry_session_id"], made[0].as_str());
    // Deleting one gives the user no extra slot.
    ctx.ok(
        Method::DELETE,
        &format!("/api/v1/sessions/{}", made[1]),
        key,
        None,
        204,
    )
    .await;
    // The user's own sessions: exactly the limit.
    for i in 0..limit {
        ctx.ok(Method::POST, "/api/v1/sessions", key, Some(json!({})), 201)
            .await;
        let _ = i;
    }
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/sessions",
            Some(key),
            Some(&json!({})),
        )
        .await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.details()["quota"], "max_sessions_per_user");
    // The attack: a client cannot make its own session uncounted.
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/sessions",
            Some(key),
            Some(&json!({"stateless": true})),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/sessions",
            Some(key),
            Some(&json!({"metadata": {"source": "openai"}})),
        )
        .await;
    assert_eq!(r.status, 429, "{}", r.body);
    // Stateless calls still go on with the user at the limit.
    let r = ctx
        .send(completion(
            ctx,
            Some(key),
            json!({"model": "default", "messages": user("/echo still")}),
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let listed = ctx
        .ok(Method::GET, "/api/v1/sessions?limit=1", key, None, 200)
        .await;
    assert_eq!(listed["total"], 12 + 1 + limit + 1 - 1, "{listed}");
}
