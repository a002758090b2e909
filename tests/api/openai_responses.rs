//! `/v1/responses` (docs/openai.md, "The Responses API"): the official `openai` Python package
//! as the client ([`sdk_client`], one script against one server), and raw HTTP for what the SDK
//! hides ([`wire`]): the SSE framing (`event:` names, `sequence_number` strictly increasing, the
//! final event), OpenAI's error shape, and every documented status for the OpenAPI check.

use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{ADMIN_KEY, Ctx};

fn create(ctx: &Ctx, key: Option<&str>, body: Value) -> reqwest::RequestBuilder {
    ctx.request(Method::POST, "/v1/responses", key).json(&body)
}

/// The SDK against the real server: streamed and not, retrieved, continued, a tool run, an
/// approval approved and one rejected, a bad key, an unknown model, another tenant's id.
pub async fn sdk_client(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let other = ctx.tenant().await;
    let r = run_script(
        ctx,
        "openai_responses_client.py",
        &t.member.key,
        &other.member.key,
    )
    .await;

    // Non-streamed: the answer as one message item, usage, the echoed parameters.
    let plain = &r["plain"];
    assert_eq!(plain["text"], "(scripted) You said: hello there", "{r}");
    assert_eq!(plain["object"], "response");
    assert_eq!(plain["status"], "completed");
    assert_eq!(plain["model"], "default");
    assert_eq!(plain["metadata"], json!({"purpose": "test"}));
    assert!(
        plain["id"].as_str().unwrap().starts_with("resp_"),
        "{plain}"
    );
    assert_eq!(plain["items"][0]["type"], "message", "{plain}");
    assert_eq!(plain["items"][0]["role"], "assistant");
    let usage = &plain["usage"];
    let (input, output) = (
        usage["input_tokens"].as_u64().unwrap(),
        usage["output_tokens"].as_u64().unwrap(),
    );
    assert!(input > 0 && output > 0, "{usage}");
    assert_eq!(usage["total_tokens"].as_u64().unwrap(), input + output);
    // The instructions went into the conversation before the message.
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
            "hello there",
            "(scripted) You said: hello there",
            "/echo second turn",
            "second turn",
        ],
        "{msgs}"
    );

    // The second turn: the same conversation, its own response.
    let second = &r["second"];
    assert_eq!(second["text"], "second turn", "{r}");
    assert_eq!(second["session"], session);
    assert_eq!(second["previous_response_id"], plain["id"]);
    assert_ne!(second["id"], plain["id"]);
    let input = &r["input_items"];
    assert_eq!(input.as_array().unwrap().len(), 1, "{r}");
    assert_eq!(
        (
            &input[0]["type"],
            &input[0]["role"],
            &input[0]["content"][0]["text"]
        ),
        (
            &json!("message"),
            &json!("user"),
            &json!("/echo second turn")
        ),
        "{r}"
    );

    // Retrieved: the same response, rebuilt from the run's stored events.
    let got = &r["retrieved"];
    for field in [
        "id", "status", "text", "items", "usage", "model", "metadata",
    ] {
        assert_eq!(got[field], plain[field], "{field}: {r}");
    }

    // Streamed: the semantic events in order, numbered, the text in deltas.
    let s = &r["stream"];
    assert_eq!(
        s["text"], "(scripted) You said: stream this answer please",
        "{r}"
    );
    let types: Vec<&str> = s["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        types[..2],
        ["response.created", "response.in_progress"],
        "{s}"
    );
    assert_eq!(types.last(), Some(&"response.completed"), "{s}");
    for kind in [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ] {
        assert_eq!(
            types.iter().filter(|t| **t == kind).count(),
            1,
            "{kind}: {s}"
        );
    }
    assert!(
        types
            .iter()
            .filter(|t| **t == "response.output_text.delta")
            .count()
            > 3,
        "{s}"
    );
    let seqs: Vec<u64> = s["seqs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    assert_eq!(s["final"]["status"], "completed");
    assert_eq!(s["final"]["text"], s["text"]);

    // A tool run: the call as an mcp_call item (its service as server_label), then the answer.
    for tool in [&r["tool"], &r["tool_stream"]["final"]] {
        let items = tool["items"].as_array().unwrap();
        let call = items
            .iter()
            .find(|i| i["type"] == "mcp_call")
            .unwrap_or_else(|| panic!("no mcp_call: {tool}"));
        assert_eq!(call["name"], "list_directory", "{tool}");
        assert_eq!(call["server_label"], "files", "{tool}");
        assert_eq!(
            serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
            json!({"path": "."})
        );
        assert_eq!(call["status"], "completed");
        assert!(call["output"].is_string(), "{call}");
        assert!(
            tool["text"]
                .as_str()
                .unwrap()
                .starts_with("(scripted) Tool list_directory returned:"),
            "{tool}"
        );
    }

    // An approval: the response ends completed with the request…
    let asked = &r["asked"];
    assert_eq!(asked["status"], "completed", "{r}");
    let request = asked["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "mcp_approval_request")
        .unwrap_or_else(|| panic!("no mcp_approval_request: {asked}"));
    assert_eq!(request["name"], "write_file");
    assert_eq!(request["server_label"], "files");
    assert_eq!(
        serde_json::from_str::<Value>(request["arguments"].as_str().unwrap()).unwrap(),
        json!({"file_path": "approved.txt", "content": "yes"})
    );
    // …approved, the run went on in the next response: the call ran, the answer followed.
    let approved = &r["approved"];
    assert_eq!(approved["status"], "completed", "{r}");
    assert_eq!(approved["session"], asked["session"]);
    assert_eq!(approved["run"], asked["run"], "the same run goes on");
    let call = &approved["items"][0];
    assert_eq!(
        (&call["type"], &call["name"], &call["status"]),
        (
            &json!("mcp_call"),
            &json!("write_file"),
            &json!("completed")
        ),
        "{approved}"
    );
    assert!(
        approved["text"]
            .as_str()
            .unwrap()
            .starts_with("(scripted) Tool write_file returned:"),
        "{approved}"
    );
    assert!(approved["usage"]["total_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        r["approved_input_items"][0]["type"], "mcp_approval_response",
        "{r}"
    );
    assert_eq!(r["approved_input_items"][0]["approve"], true);
    assert_eq!(
        r["approved_input_items"][0]["approval_request_id"],
        request["id"]
    );
    for field in ["id", "status", "text", "items", "usage"] {
        assert_eq!(
            r["approved_retrieved"][field], approved[field],
            "{field}: {r}"
        );
    }
    let again = &r["approved_twice"];
    assert_eq!(
        (&again["status"], &again["code"]),
        (&json!(409), &json!("approval_not_pending")),
        "{r}"
    );
    // The file is there, in the member's workspace.
    let file = ctx
        .call(
            Method::GET,
            "/api/v1/files/approved.txt",
            Some(&t.member.key),
            None,
        )
        .await;
    assert_eq!(file.status, 200, "{}", file.body);

    // Rejected (asked in a stream): the run ended rejected, nothing written.
    let asked = &r["asked_stream"];
    assert_eq!(asked["final"]["status"], "completed", "{r}");
    let rejected = &r["rejected"];
    assert_eq!(rejected["status"], "completed", "{r}");
    // The call shows as failed, rejected with the client's reason; nothing else ran.
    let call = &rejected["items"][0];
    assert_eq!(rejected["items"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(
        (&call["type"], &call["name"], &call["status"]),
        (&json!("mcp_call"), &json!("write_file"), &json!("failed")),
        "{r}"
    );
    assert_eq!(call["error"]["type"], "mcp_tool_execution_error", "{r}");
    assert_eq!(call["error"]["content"]["error"]["code"], "rejected", "{r}");
    assert!(
        call["error"]["content"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not today"),
        "{r}"
    );
    let run = rejected["run"].as_str().unwrap();
    let exec = ctx.execution(&t.member.key, run).await;
    assert_eq!(exec["status"], "rejected", "{exec}");
    let file = ctx
        .call(
            Method::GET,
            "/api/v1/files/rejected.txt",
            Some(&t.member.key),
            None,
        )
        .await;
    assert_eq!(file.status, 404, "{}", file.body);

    // Background: answered at once (`in_progress`, `background` echoed), polled through
    // `in_progress` to `completed` with the answer.
    let bg = &r["background_created"];
    assert_eq!(bg["background"], true, "{r}");
    assert!(
        ["queued", "in_progress"].contains(&bg["status"].as_str().unwrap()),
        "{r}"
    );
    assert_eq!(bg["items"], json!([]), "answered before the model did: {r}");
    let polled: Vec<&str> = r["background_polled"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(polled.contains(&"in_progress"), "{polled:?}");
    assert_eq!(polled.last(), Some(&"completed"), "{polled:?}");
    let bg_done = &r["background_done"];
    assert_eq!(bg_done["id"], bg["id"], "{r}");
    assert_eq!(bg_done["background"], true, "{r}");
    assert_eq!(
        bg_done["text"], "(scripted) You said: in the background",
        "{r}"
    );
    assert!(
        bg_done["usage"]["output_tokens"].as_u64().unwrap() > 0,
        "{r}"
    );
    // Its stream, resumed after event 1: from 2 on, by one, ending in `response.completed`.
    let resumed = &r["background_resumed"];
    let seqs: Vec<u64> = resumed["seqs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (2..2 + seqs.len() as u64).collect::<Vec<_>>(), "{r}");
    let types = resumed["types"].as_array().unwrap();
    assert_eq!(types[0], "response.output_item.added", "{r}");
    assert_eq!(types.last().unwrap(), "response.completed", "{r}");

    // Cancelled while the model sleeps: `cancelled`, read back so, and the run ended with
    // exactly one `done`, cancelled; cancelling again answers the same.
    let cancelled = &r["cancelled"];
    assert_eq!(cancelled["id"], r["slow_created"]["id"], "{r}");
    assert_eq!(cancelled["status"], "cancelled", "{r}");
    assert_eq!(r["cancelled_retrieved"]["status"], "cancelled", "{r}");
    assert_eq!(r["cancelled_again"], *cancelled, "{r}");
    let run = cancelled["run"].as_str().unwrap();
    let exec = ctx.execution(&t.member.key, run).await;
    assert_eq!(exec["status"], "cancelled", "{exec}");
    let events = ctx
        .ok(
            Method::GET,
            &format!(
                "/api/v1/sessions/{}/events",
                cancelled["session"].as_str().unwrap()
            ),
            &t.member.key,
            None,
            200,
        )
        .await;
    let dones = events["events"]
        .as_array()
        .unwrap_or_else(|| panic!("{events}"))
        .iter()
        .filter(|e| e["event_type"] == "done" && e["run_id"] == run)
        .count();
    assert_eq!(dones, 1, "{events}");
    let o = &r["cancel_other_tenant"];
    assert_eq!(
        (&o["class"], &o["status"], &o["code"]),
        (&json!("NotFoundError"), &json!(404), &json!("not_found")),
        "{r}"
    );

    // Refusals, in OpenAI's shape.
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
    for key in ["other_tenant", "other_tenant_continue", "deleted"] {
        let o = &r[key];
        assert_eq!(
            (&o["class"], &o["status"], &o["code"]),
            (&json!("NotFoundError"), &json!(404), &json!("not_found")),
            "{key}: {r}"
        );
    }
}

/// Run one of the Python client scripts against `ctx` with a member's key (and another
/// tenant's): what it printed, as JSON.
async fn run_script(ctx: &Ctx, script: &str, key: &str, other_key: &str) -> Value {
    let base = ctx.url("/v1");
    crate::ctx::run_client(
        script,
        &[
            ("AGENTRY_OPENAI_BASE", &base),
            ("AGENTRY_KEY", key),
            ("AGENTRY_OTHER_KEY", other_key),
        ],
    )
    .await
}

/// The arguments a model request offered for the tool `name`, if it offered it.
fn offered(req: &agentry_fake_model::RecordedRequest, name: &str) -> Option<Value> {
    req.body["tools"]
        .as_array()?
        .iter()
        .find(|t| t["function"]["name"] == name)
        .map(|t| t["function"]["parameters"].clone())
}

/// Issue 26 item 4: client function tools with the official `openai` package. The model (the
/// fake model server) is offered the client's function beside the assistant's tools and calls
/// it; the response ends with a `function_call` item; the client's `function_call_output` — by
/// `previous_response_id`, streamed, or in a whole stateless item list — continues the same run
/// to the answer, which quotes the client's output. Refusals: a name of an assistant tool, a
/// schema that is not one, an unknown call id, an answer given twice, another tenant.
pub async fn client_function_tools(ctx: &Ctx, fake: &agentry_fake_model::FakeModelServer) {
    let t = ctx.tenant().await;
    let other = ctx.tenant().await;
    let r = run_script(
        ctx,
        "openai_responses_tools_client.py",
        &t.member.key,
        &other.member.key,
    )
    .await;

    // The call ends the response (`completed`) with one function_call item…
    let called = &r["called"];
    assert_eq!(called["status"], "completed", "{r}");
    let items = called["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{called}");
    let call = &items[0];
    assert_eq!(call["type"], "function_call", "{called}");
    assert_eq!(call["name"], "get_weather");
    assert_eq!(call["status"], "completed");
    assert!(call["id"].as_str().unwrap().starts_with("fc_"), "{call}");
    let call_id = call["call_id"].as_str().unwrap();
    assert!(call_id.starts_with("call_"), "{call}");
    assert_eq!(
        serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
        json!({"city": "Paris"})
    );
    assert_eq!(
        called["tools"][0]["name"], "get_weather",
        "echoed: {called}"
    );
    assert_eq!(called["tools"][0]["type"], "function", "{called}");
    // …and the model was offered it beside the assistant's own tools.
    let reqs = fake.requests();
    let first = reqs
        .iter()
        .find(|q| {
            q.body["messages"].as_array().is_some_and(|m| {
                m.iter()
                    .any(|m| m["content"] == "/tool get_weather {\"city\": \"Paris\"}")
            })
        })
        .expect("the model was asked");
    assert_eq!(
        offered(first, "get_weather").unwrap()["properties"]["city"]["type"],
        "string",
        "{}",
        first.raw_body
    );
    assert!(
        offered(first, "read_file").is_some(),
        "beside the assistant's tools"
    );

    // The output continues the same run: the model read the client's output as the result.
    let answered = &r["answered"];
    assert_eq!(answered["status"], "completed", "{r}");
    assert_eq!(answered["run"], called["run"], "the same run goes on: {r}");
    assert_eq!(answered["session"], called["session"]);
    assert_eq!(
        answered["text"], "(scripted) Tool get_weather returned: sunny in Paris, 21 C",
        "{r}"
    );
    assert_eq!(answered["items"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(answered["items"][0]["type"], "message", "{r}");
    assert!(
        answered["usage"]["total_tokens"].as_u64().unwrap() > 0,
        "{r}"
    );
    // Nothing ran on the server: the tool message the model got is the client's output.
    let last = fake
        .requests()
        .into_iter()
        .rev()
        .find(|q| q.raw_body.contains("sunny in Paris"));
    assert!(last.is_some(), "the model got the client's output");
    // Read back, both: the call in the first, the answer in the second.
    for (got, want) in [
        (&r["called_retrieved"], called),
        (&r["answered_retrieved"], answered),
    ] {
        for field in ["id", "status", "text", "items", "usage"] {
            assert_eq!(got[field], want[field], "{field}: {r}");
        }
    }
    let input = &r["answered_input_items"];
    assert_eq!(input.as_array().unwrap().len(), 1, "{r}");
    assert_eq!(
        (&input[0]["type"], &input[0]["call_id"], &input[0]["output"]),
        (
            &json!("function_call_output"),
            &json!(call_id),
            &json!("sunny in Paris, 21 C")
        ),
        "{r}"
    );
    let twice = &r["answered_twice"];
    assert_eq!(
        (&twice["status"], &twice["code"]),
        (&json!(409), &json!("approval_not_pending")),
        "{r}"
    );
    // The run ended completed, its audit has the client's call with the client's output.
    let run = answered["run"].as_str().unwrap();
    let exec = ctx.execution(&t.member.key, run).await;
    assert_eq!(exec["status"], "completed", "{exec}");
    // Each response reports what the run spent in it: the model call that made the call in the
    // first, the one that read its output in the second; together, the run's usage.
    let total = |v: &Value| v["usage"]["total_tokens"].as_u64().unwrap();
    assert!(total(called) > 0, "a paused response's usage: {called}");
    assert_eq!(
        total(called) + total(answered),
        exec["token_usage"]["total"].as_u64().unwrap(),
        "{exec}"
    );
    assert_eq!(total(&r["called_retrieved"]), total(called), "{r}");

    // Streamed: the call's item and argument events, then the answer in a stream of its own.
    let s = &r["stream_called"];
    let types: Vec<&str> = s["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ],
        "{s}"
    );
    let seqs: Vec<u64> = s["seqs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>(), "{s}");
    assert_eq!(s["args"]["added_status"], "in_progress", "{s}");
    assert_eq!(s["args"]["delta"], s["args"]["done"], "{s}");
    assert_eq!(
        serde_json::from_str::<Value>(s["args"]["done"].as_str().unwrap()).unwrap(),
        json!({"city": "Oslo"})
    );
    assert_eq!(s["args"]["done_name"], "get_weather", "{s}");
    assert_eq!(s["final"]["items"][0]["type"], "function_call", "{s}");
    let s = &r["stream_answered"];
    assert_eq!(
        s["final"]["text"], "(scripted) Tool get_weather returned: sunny in Oslo, 21 C",
        "{s}"
    );
    assert_eq!(s["final"]["run"], r["stream_called"]["final"]["run"], "{s}");
    assert!(
        s["types"]
            .as_array()
            .unwrap()
            .contains(&json!("response.output_text.delta")),
        "{s}"
    );

    // Stateless: the whole conversation sent again continues the paused run.
    let called = &r["stateless_called"];
    let answered = &r["stateless_answered"];
    let sent = r["stateless_input"].as_array().unwrap();
    assert_eq!(
        sent.iter().map(|i| i["type"].clone()).collect::<Vec<_>>(),
        [
            Value::Null,
            json!("function_call"),
            json!("function_call_output")
        ],
        "{r}"
    );
    assert_eq!(answered["run"], called["run"], "the same run goes on: {r}");
    assert_eq!(
        answered["text"], "(scripted) Tool get_weather returned: sunny in Lima, 21 C",
        "{r}"
    );
    assert_eq!(answered["previous_response_id"], Value::Null);
    // A later turn sent whole makes a new conversation holding the earlier call and its
    // output as the call and result they were (the model read them), then the new message.
    let later = &r["stateless_later"];
    assert_eq!(later["text"], "and tomorrow?", "{r}");
    assert_ne!(later["session"], answered["session"], "{r}");
    let msgs = ctx
        .ok(
            Method::GET,
            &format!(
                "/api/v1/sessions/{}/messages",
                later["session"].as_str().unwrap()
            ),
            &t.member.key,
            None,
            200,
        )
        .await;
    let stored: Vec<(&str, &str)> = msgs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(
        stored[..4],
        [
            ("user", "/tool get_weather {\"city\": \"Lima\"}"),
            ("assistant", ""),
            ("tool", "sunny in Lima, 21 C"),
            (
                "assistant",
                "(scripted) Tool get_weather returned: sunny in Lima, 21 C"
            ),
        ],
        "{msgs}"
    );
    let asked = fake
        .requests()
        .into_iter()
        .rev()
        .find(|q| q.raw_body.contains("and tomorrow?"))
        .expect("the model was asked the later turn");
    let tool_msg = asked.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool result: {}", asked.raw_body))
        .clone();
    assert_eq!(tool_msg["content"], "sunny in Lima, 21 C", "{tool_msg}");

    // A question of the assistant's: a function_call named ask_user, its arguments the question.
    let asked = &r["question_asked"];
    assert_eq!(asked["status"], "completed", "{r}");
    let items = asked["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{asked}");
    let call = &items[0];
    assert_eq!(
        (&call["type"], &call["name"], &call["status"]),
        (
            &json!("function_call"),
            &json!("ask_user"),
            &json!("completed")
        ),
        "{asked}"
    );
    assert_eq!(
        serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
        json!({"question": "Which colour?", "question_type": "choice", "options": ["red", "blue"]}),
        "{call}"
    );
    assert!(total(asked) > 0, "{asked}");
    // Answered: the same run goes on; the question's tool shows as the mcp_call it is, its
    // result the client's answer, then the model's answer.
    let answered = &r["question_answered"];
    assert_eq!(answered["run"], asked["run"], "the same run goes on: {r}");
    let items = answered["items"].as_array().unwrap();
    assert_eq!(
        (&items[0]["type"], &items[0]["name"]),
        (&json!("mcp_call"), &json!("ask_question")),
        "{answered}"
    );
    let result: Value = serde_json::from_str(items[0]["output"].as_str().unwrap()).unwrap();
    assert_eq!(
        (&result["answer"], &result["choice"]),
        (&json!("blue"), &json!("blue")),
        "{answered}"
    );
    assert!(
        answered["text"]
            .as_str()
            .unwrap()
            .starts_with("(scripted) Tool ask_question returned:"),
        "{answered}"
    );
    for field in ["id", "status", "text", "items", "usage"] {
        assert_eq!(
            r["question_answered_retrieved"][field], answered[field],
            "{field}: {r}"
        );
    }
    let input = &r["question_input_items"];
    assert_eq!(
        (&input[0]["type"], &input[0]["call_id"], &input[0]["output"]),
        (
            &json!("function_call_output"),
            &call["call_id"],
            &json!("blue")
        ),
        "{r}"
    );
    let run = answered["run"].as_str().unwrap();
    let exec = ctx.execution(&t.member.key, run).await;
    assert_eq!(exec["status"], "completed", "{exec}");
    assert_eq!(
        total(asked) + total(answered),
        exec["token_usage"]["total"].as_u64().unwrap(),
        "{exec}"
    );
    let s = &r["question_stream"];
    assert_eq!(s["args"]["done_name"], "ask_user", "{s}");
    assert_eq!(
        s["types"].as_array().unwrap().last().unwrap(),
        "response.completed"
    );
    assert_eq!(
        serde_json::from_str::<Value>(s["args"]["done"].as_str().unwrap()).unwrap()["question"],
        "Tea or coffee?",
        "{s}"
    );
    let answered = &r["question_stream_answered"];
    assert!(
        answered["text"].as_str().unwrap().contains("tea"),
        "{answered}"
    );

    // Refusals, in OpenAI's shape, naming what is wrong.
    for (key, names) in [
        ("colliding_name", "read_file"),
        ("bad_schema", "get_weather"),
        ("not_an_object_schema", "get_weather"),
    ] {
        let e = &r[key];
        assert_eq!(
            (&e["class"], &e["status"], &e["code"]),
            (
                &json!("UnprocessableEntityError"),
                &json!(422),
                &json!("validation_error")
            ),
            "{key}: {r}"
        );
        assert_eq!(e["param"], "tools", "{key}: {r}");
        assert!(e["message"].as_str().unwrap().contains(names), "{key}: {r}");
    }
    assert!(
        r["colliding_name"]["message"]
            .as_str()
            .unwrap()
            .contains("assistant's own tools"),
        "{r}"
    );
    for key in [
        "unknown_call_id",
        "unknown_call_id_stateless",
        "other_tenant",
    ] {
        let e = &r[key];
        assert_eq!(
            (&e["class"], &e["status"], &e["code"]),
            (&json!("NotFoundError"), &json!(404), &json!("not_found")),
            "{key}: {r}"
        );
    }
    assert!(
        r["unknown_call_id"]["message"]
            .as_str()
            .unwrap()
            .contains("call_nope"),
        "{r}"
    );
    // The other tenant's attempt left the call waiting for its own client.
    assert_eq!(r["pending"]["items"][0]["type"], "function_call", "{r}");
}

/// A client function call nobody answers waits `hitl.timeout_secs` (here 2 s), as a question
/// does; then the model reads that the client did not answer, and the run goes on to its end.
/// An output sent after that is refused (409).
pub async fn unanswered_function_call_times_out(
    ctx: &Ctx,
    fake: &agentry_fake_model::FakeModelServer,
) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let tool = json!({"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}});
    let r = ctx
        .ok(
            Method::POST,
            "/v1/responses",
            key,
            Some(json!({"model": "default", "input": "/tool get_weather {\"city\": \"Rome\"}", "tools": [tool]})),
            200,
        )
        .await;
    let call = &r["output"][0];
    assert_eq!(call["type"], "function_call", "{r}");
    let run = r["agentry_run_id"].as_str().unwrap();
    let started = std::time::Instant::now();
    let exec = loop {
        let exec = ctx.execution(key, run).await;
        if exec["status"] == "completed" || started.elapsed() > std::time::Duration::from_secs(30) {
            break exec;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(exec["status"], "completed", "{exec}");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(1500),
        "it waited for the client: {:?}",
        started.elapsed()
    );
    assert!(
        fake.requests().iter().any(|q| q
            .raw_body
            .contains("did not return the output of get_weather within 2 s")),
        "the model read that the client did not answer"
    );
    let late = ctx
        .call(
            Method::POST,
            "/v1/responses",
            Some(key),
            Some(&json!({"model": "default", "previous_response_id": r["id"],
                "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "late"}]})),
        )
        .await;
    assert_eq!(late.status, 409, "{}", late.body);
    assert_eq!(late.code(), "approval_not_pending", "{}", late.body);
}

/// Issue 26 item 4: the OpenAI Agents SDK. An `Agent` on `OpenAIResponsesModel` pointed at
/// Agentry runs its own `@function_tool` when the response ends with the call, sends the
/// whole conversation back (no `previous_response_id`), and the same run answers with the
/// tool's result: `Runner.run` and `Runner.run_streamed`.
pub async fn agents_sdk(ctx: &Ctx, fake: &agentry_fake_model::FakeModelServer) {
    let t = ctx.tenant().await;
    let r = run_script(ctx, "openai_agents_client.py", &t.member.key, "").await;
    assert_eq!(r["agents_version"], "0.24.0", "{r}");
    let run = &r["run"];
    assert_eq!(
        run["calls"],
        json!(["Paris"]),
        "the SDK ran its tool once: {r}"
    );
    assert_eq!(
        run["final_output"], "(scripted) Tool get_weather returned: sunny in Paris, 21 C",
        "{r}"
    );
    let items = run["items"].as_array().unwrap();
    assert_eq!(
        items,
        &[
            json!("ToolCallItem"),
            json!("ToolCallOutputItem"),
            json!("MessageOutputItem")
        ],
        "{r}"
    );
    // Two responses of one Agentry run: the call, then the answer.
    let ids: Vec<&str> = run["responses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{r}");
    assert_eq!(ids[0][..69], ids[1][..69], "the same session and run: {r}");
    assert_ne!(ids[0], ids[1]);
    let streamed = &r["streamed"];
    assert_eq!(streamed["calls"], json!(["Oslo"]), "{r}");
    assert_eq!(
        streamed["final_output"], "(scripted) Tool get_weather returned: sunny in Oslo, 21 C",
        "{r}"
    );
    let events: Vec<&str> = streamed["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    for want in [
        "raw:response.created",
        "raw:response.function_call_arguments.delta",
        "raw:response.function_call_arguments.done",
        "item:tool_called",
        "item:tool_output",
        "raw:response.output_text.delta",
        "item:message_output_created",
        "raw:response.completed",
    ] {
        assert!(events.contains(&want), "{want}: {events:?}");
    }
    let pos = |e: &str| events.iter().position(|x| *x == e).unwrap();
    assert!(
        pos("item:tool_called") < pos("item:tool_output"),
        "{events:?}"
    );
    assert!(
        pos("item:tool_output") < pos("raw:response.output_text.delta"),
        "{events:?}"
    );
    // A question of the assistant's: the SDK ran its ask_user function with the question, the
    // same run answered; the next turn, sent whole (the calls included), went on.
    let q = &r["question"];
    assert_eq!(
        q["questions"],
        json!([{"question": "Which colour?", "question_type": "choice", "options": ["red", "blue"]}]),
        "{r}"
    );
    assert!(
        q["final_output"]
            .as_str()
            .unwrap()
            .starts_with("(scripted) Tool ask_question returned:")
            && q["final_output"].as_str().unwrap().contains("blue"),
        "{r}"
    );
    let ids: Vec<&str> = q["responses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{r}");
    assert_eq!(ids[0][..69], ids[1][..69], "the same session and run: {r}");
    let sent: Vec<&str> = r["question_later_input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap())
        .collect();
    for kind in ["function_call", "function_call_output", "mcp_call"] {
        assert!(sent.contains(&kind), "{kind}: {sent:?}");
    }
    assert_eq!(r["question_later"]["final_output"], "and now?", "{r}");
    // `ask_user` is the name questions are asked as: the SDK's function of that name answers
    // them and is not offered to the model.
    assert!(
        fake.requests()
            .iter()
            .all(|q| offered(q, "ask_user").is_none()),
        "ask_user was offered to the model"
    );
    // The model (behind Agentry) was offered the SDK's tool and read its output.
    assert!(
        fake.requests()
            .iter()
            .any(|q| offered(q, "get_weather").is_some() && q.raw_body.contains("sunny in Oslo")),
        "the model got the SDK tool's output"
    );
}

/// The frames of an SSE body: (event name, data), keep-alive comments skipped.
pub fn frames(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|f| !f.is_empty() && !f.starts_with(':'))
        .map(|f| {
            let mut lines = f.lines();
            let event = lines
                .next()
                .and_then(|l| l.strip_prefix("event: "))
                .unwrap_or_else(|| panic!("a frame without `event:`: {f}"));
            let data = lines
                .next()
                .and_then(|l| l.strip_prefix("data: "))
                .unwrap_or_else(|| panic!("a frame without `data:`: {f}"));
            assert!(lines.next().is_none(), "one data line per frame: {f}");
            (event.to_string(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

/// The wire itself: SSE framing, and every documented status of the four routes, each refusal
/// in OpenAI's shape (checked by `Ctx::send`).
pub async fn wire(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let key = &t.member.key;
    let other = ctx.tenant().await;

    let res = create(
        ctx,
        Some(key),
        json!({"model": "default", "input": "/echo a b c", "stream": true}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let session = res.headers()["x-agentry-session"]
        .to_str()
        .unwrap()
        .to_string();
    let frames = frames(&res.text().await.unwrap());
    for (i, (event, data)) in frames.iter().enumerate() {
        assert_eq!(data["type"], event.as_str(), "the event name is the type");
        assert_eq!(
            data["sequence_number"], i as u64,
            "numbered from 0, one by one"
        );
    }
    let names: Vec<&str> = frames.iter().map(|(e, _)| e.as_str()).collect();
    let deltas = names
        .iter()
        .filter(|n| **n == "response.output_text.delta")
        .count();
    assert!(deltas >= 1, "{names:?}");
    let mut want = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    want.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    want.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(names, want);
    assert_eq!(names.last(), Some(&"response.completed"), "{names:?}");
    let text: String = frames
        .iter()
        .filter(|(e, _)| e == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "a b c");
    let done = &frames.last().unwrap().1["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["agentry_session_id"], session.as_str());
    assert_eq!(done["output"][0]["content"][0]["text"], "a b c", "{done}");
    let id = done["id"].as_str().unwrap().to_string();
    assert_eq!(
        frames[0].1["response"]["id"],
        id.as_str(),
        "one id throughout"
    );
    assert_eq!(frames[0].1["response"]["status"], "in_progress");

    // Resumed: `GET …?stream=true&starting_after=N` sends the same events after N, with the
    // same names and numbers (they are rebuilt from the stored run), the final one included.
    let resumed = |query: String| {
        let path = format!("/v1/responses/{id}?{query}");
        async move {
            let res = ctx
                .request(Method::GET, &path, Some(key))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200, "{path}");
            assert_eq!(res.headers()["content-type"], "text/event-stream");
            self::frames(&res.text().await.unwrap())
        }
    };
    let named = |fs: &[(String, Value)]| -> Vec<(String, Value)> {
        fs.iter()
            .map(|(e, d)| (e.clone(), d["sequence_number"].clone()))
            .collect()
    };
    let after = 3;
    let again = resumed(format!("stream=true&starting_after={after}")).await;
    assert_eq!(named(&again), named(&frames[after + 1..]), "{again:?}");
    assert_eq!(again[0].1["sequence_number"], after as u64 + 1);
    let (last, data) = again.last().unwrap();
    assert_eq!(last, "response.completed");
    assert_eq!(data["response"]["id"], id.as_str());
    assert_eq!(data["response"]["output"], done["output"]);
    for ((_, a), (_, b)) in again.iter().zip(&frames[after + 1..]) {
        if a["type"] == "response.output_text.delta" {
            assert_eq!(a["delta"], b["delta"]);
        }
    }
    let whole = resumed("stream=true".into()).await;
    assert_eq!(named(&whole), named(&frames));
    assert!(
        resumed(format!("stream=true&starting_after={}", frames.len()))
            .await
            .is_empty(),
        "nothing after the final event"
    );

    // Read back, its input, and deleted.
    let got = ctx
        .ok(Method::GET, &format!("/v1/responses/{id}"), key, None, 200)
        .await;
    assert_eq!(got["output"], done["output"]);
    let items = ctx
        .ok(
            Method::GET,
            &format!("/v1/responses/{id}/input_items"),
            key,
            None,
            200,
        )
        .await;
    assert_eq!(items["object"], "list");
    assert_eq!(items["data"][0]["content"][0]["text"], "/echo a b c");

    // A run waiting for an approval: the conversation takes no new message meanwhile (409).
    let asked = ctx
        .ok(
            Method::POST,
            "/v1/responses",
            key,
            Some(json!({"model": "default",
                "input": r#"/tool write_file {"file_path": "w.txt", "content": "x"}"#})),
            200,
        )
        .await;
    let paused = asked["id"].as_str().unwrap().to_string();
    let request = asked["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "mcp_approval_request")
        .unwrap_or_else(|| panic!("{asked}"))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let busy = ctx
        .send(create(
            ctx,
            Some(key),
            json!({"model": "default", "input": "/echo meanwhile", "previous_response_id": paused}),
        ))
        .await;
    assert_eq!(
        (busy.status, busy.code()),
        (409, "run_in_progress"),
        "{}",
        busy.body
    );
    let approval = |approve: bool| {
        json!({"model": "default", "previous_response_id": paused,
               "input": [{"type": "mcp_approval_response", "approval_request_id": request,
                          "approve": approve}]})
    };
    let approved = ctx
        .ok(
            Method::POST,
            "/v1/responses",
            key,
            Some(approval(true)),
            200,
        )
        .await;
    assert_eq!(approved["status"], "completed", "{approved}");
    assert_eq!(approved["output"][0]["type"], "mcp_call", "{approved}");

    // `store: false`: answered, then nothing kept.
    let unstored = ctx
        .ok(
            Method::POST,
            "/v1/responses",
            key,
            Some(json!({"model": "default", "input": "/echo forget me", "store": false})),
            200,
        )
        .await;
    assert_eq!(unstored["output"][0]["content"][0]["text"], "forget me");
    assert_eq!(unstored["store"], false);
    let gone = ctx
        .send(ctx.request(
            Method::GET,
            &format!("/v1/responses/{}", unstored["id"].as_str().unwrap()),
            Some(key),
        ))
        .await;
    assert_eq!(
        (gone.status, gone.code()),
        (404, "not_found"),
        "{}",
        gone.body
    );

    let unknown = format!("resp_{}{}_0", "0".repeat(32), "0".repeat(32));
    let sessions_before = ctx
        .ok(Method::GET, "/api/v1/sessions", key, None, 200)
        .await["total"]
        .clone();
    let refusals: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            ctx.request(Method::POST, "/v1/responses", Some(key))
                .header("content-type", "application/json")
                .body("{not json"),
            400,
            "invalid_json",
        ),
        (
            create(ctx, None, json!({"model": "default", "input": "x"})),
            401,
            "unauthorized",
        ),
        (
            create(
                ctx,
                Some(ADMIN_KEY),
                json!({"model": "default", "input": "x"}),
            ),
            403,
            "forbidden",
        ),
        (
            create(ctx, Some(key), json!({"model": "nobody", "input": "x"})),
            404,
            "model_not_found",
        ),
        (
            create(
                ctx,
                Some(key),
                json!({"model": "default", "input": "x", "previous_response_id": unknown}),
            ),
            404,
            "not_found",
        ),
        (
            create(
                ctx,
                Some(key),
                json!({"model": "default", "input": "x", "previous_response_id": "resp_nope"}),
            ),
            404,
            "not_found",
        ),
        (
            create(ctx, Some(&other.member.key), approval(true)),
            404,
            "not_found",
        ),
        (
            create(ctx, Some(key), approval(true)),
            409,
            "approval_not_pending",
        ),
        (
            create(ctx, Some(key), json!({"model": "default", "input": ""})),
            422,
            "validation_error",
        ),
        (
            create(ctx, Some(key), json!({"model": "default", "input": []})),
            422,
            "validation_error",
        ),
        (
            create(ctx, Some(key), json!({"model": "default", "input": 7})),
            422,
            "validation_error",
        ),
        (
            create(
                ctx,
                Some(key),
                json!({"model": "default", "input": [{"role": "assistant", "content": "x"}]}),
            ),
            422,
            "validation_error",
        ),
        (
            create(
                ctx,
                Some(key),
                json!({"model": "default", "input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}),
            ),
            404,
            "not_found",
        ),
        (
            create(
                ctx,
                Some(key),
                json!({"model": "default", "input": "x", "tools": [{"type": "function", "name": "read_file"}]}),
            ),
            422,
            "validation_error",
        ),
        (
            create(
                ctx,
                Some(key),
                json!({"model": "default", "input": "x", "tools": [{"type": "mcp", "server_label": "x"}]}),
            ),
            422,
            "validation_error",
        ),
        (
            create(
                ctx,
                Some(key),
                json!({"model": "default", "input": "x", "background": true, "store": false}),
            ),
            422,
            "validation_error",
        ),
        (
            create(
                ctx,
                Some(key),
                json!({"model": "default", "input": "x", "tool_choice": "required"}),
            ),
            422,
            "validation_error",
        ),
        (
            create(
                ctx,
                Some(key),
                json!({"model": "default", "input": "x", "metadata": {"n": 1}}),
            ),
            422,
            "validation_error",
        ),
        (
            create(
                ctx,
                Some(key),
                json!({"model": "default", "input": [{"type": "mcp_approval_response", "approval_request_id": request, "approve": true}]}),
            ),
            422,
            "validation_error",
        ),
        (
            ctx.request(Method::POST, "/v1/responses", Some(key))
                .header("content-type", "text/plain")
                .body("{}"),
            415,
            "unsupported_media_type",
        ),
        (
            create(
                ctx,
                Some(key),
                json!({"model": "default", "input": "x".repeat(crate::ctx::BODY_LIMIT)}),
            ),
            413,
            "payload_too_large",
        ),
    ];
    for (rb, status, code) in refusals {
        let r = ctx.send(rb).await;
        assert_eq!((r.status, r.code()), (status, code), "{}", r.body);
    }
    // The refused requests made no conversation.
    let sessions_after = ctx
        .ok(Method::GET, "/api/v1/sessions", key, None, 200)
        .await["total"]
        .clone();
    assert_eq!(sessions_after, sessions_before);

    // The read routes: the caller's own only.
    for path in [
        format!("/v1/responses/{id}"),
        format!("/v1/responses/{id}/input_items"),
    ] {
        for (who, status, code) in [
            (None, 401, "unauthorized"),
            (Some(ADMIN_KEY), 403, "forbidden"),
            (Some(other.member.key.as_str()), 404, "not_found"),
            (Some(t.admin.key.as_str()), 404, "not_found"),
        ] {
            let r = ctx.send(ctx.request(Method::GET, &path, who)).await;
            assert_eq!((r.status, r.code()), (status, code), "{path}: {}", r.body);
        }
        let r = ctx
            .send(ctx.request(Method::GET, &path.replace(&id, &unknown), Some(key)))
            .await;
        assert_eq!((r.status, r.code()), (404, "not_found"), "{}", r.body);
    }
    let bad = ctx
        .send(ctx.request(
            Method::GET,
            &format!("/v1/responses/{id}?stream=true&starting_after=x"),
            Some(key),
        ))
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);

    // Cancelling: a background response only, the caller's own only; one that has ended is
    // answered as it is.
    let bg = ctx
        .ok(
            Method::POST,
            "/v1/responses",
            key,
            Some(json!({"model": "default", "input": "/echo soon done", "background": true})),
            200,
        )
        .await;
    assert_eq!(bg["background"], true, "{bg}");
    assert!(
        ["queued", "in_progress"].contains(&bg["status"].as_str().unwrap()),
        "{bg}"
    );
    let bg_id = bg["id"].as_str().unwrap().to_string();
    let cancel = format!("/v1/responses/{bg_id}/cancel");
    for (who, status, code) in [
        (None, 401, "unauthorized"),
        (Some(ADMIN_KEY), 403, "forbidden"),
        (Some(other.member.key.as_str()), 404, "not_found"),
        (Some(t.admin.key.as_str()), 404, "not_found"),
    ] {
        let r = ctx.send(ctx.request(Method::POST, &cancel, who)).await;
        assert_eq!((r.status, r.code()), (status, code), "{}", r.body);
    }
    for (path, status, code) in [
        (format!("/v1/responses/{id}/cancel"), 400, "bad_request"),
        (
            "/v1/responses/resp_nope/cancel".to_string(),
            400,
            "bad_request",
        ),
        (format!("/v1/responses/{unknown}/cancel"), 404, "not_found"),
    ] {
        let r = ctx.send(ctx.request(Method::POST, &path, Some(key))).await;
        assert_eq!((r.status, r.code()), (status, code), "{path}: {}", r.body);
    }
    let mut polled = bg.clone();
    for _ in 0..200 {
        if polled["status"] == "completed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        polled = ctx
            .ok(
                Method::GET,
                &format!("/v1/responses/{bg_id}"),
                key,
                None,
                200,
            )
            .await;
    }
    assert_eq!(polled["status"], "completed", "{polled}");
    assert_eq!(polled["background"], true, "{polled}");
    let unchanged = ctx.ok(Method::POST, &cancel, key, None, 200).await;
    assert_eq!(
        unchanged, polled,
        "cancelling an ended response changes nothing"
    );
    let path = format!("/v1/responses/{id}");
    for (who, status) in [
        (None, 401),
        (Some(ADMIN_KEY), 403),
        (Some(other.member.key.as_str()), 404),
    ] {
        let r = ctx.send(ctx.request(Method::DELETE, &path, who)).await;
        assert_eq!(r.status, status, "{}", r.body);
    }
    let deleted = ctx.ok(Method::DELETE, &path, key, None, 200).await;
    assert_eq!(
        deleted,
        json!({"id": id, "object": "response.deleted", "deleted": true})
    );
    let gone = ctx.send(ctx.request(Method::GET, &path, Some(key))).await;
    assert_eq!((gone.status, gone.code()), (404, "not_found"));
    let gone = ctx
        .send(ctx.request(Method::DELETE, &path, Some(key)))
        .await;
    assert_eq!((gone.status, gone.code()), (404, "not_found"));
    // The conversation went with it.
    let s = ctx
        .send(ctx.request(
            Method::GET,
            &format!("/api/v1/sessions/{session}"),
            Some(key),
        ))
        .await;
    assert_eq!(s.status, 404);
}
