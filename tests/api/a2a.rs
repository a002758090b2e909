//! A2A v1.0 (docs/a2a.md): the official `a2a-sdk` Python client against the real server
//! ([`sdk_client`], one script against one server), and raw HTTP for the documented statuses
//! and the error shape ([`wire`]).

use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{ADMIN_KEY, Ctx};

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

/// A JSON-RPC error the SDK raised: its class, and the A2A error it stands for.
fn assert_error(r: &Value, field: &str, class: &str) {
    assert_eq!(r[field]["class"], class, "{field}: {}", r[field]);
}

/// The SDK against the real server: cards, every method, approvals and a question answered,
/// cancel, a dropped stream resubscribed, paging, and the tenancy rules.
pub async fn sdk_client(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let other = ctx.tenant().await;
    let base = ctx.url("");
    let r = crate::ctx::run_client(
        "a2a_client.py",
        &[
            ("AGENTRY_BASE", &base),
            ("AGENTRY_TENANT", t.id.as_str()),
            ("AGENTRY_KEY", t.member.key.as_str()),
            ("AGENTRY_MEMBER2_KEY", t.member2.key.as_str()),
            ("AGENTRY_OTHER_TENANT", other.id.as_str()),
            ("AGENTRY_OTHER_KEY", other.member.key.as_str()),
        ],
    )
    .await;
    let agent_url = ctx.url(&format!("/a2a/{}/default", t.id));

    // The public card: how to talk to the agent, nothing of the tenant; the same for an
    // assistant that does not exist.
    let card = &r["card"];
    let iface = &card["supportedInterfaces"][0];
    assert_eq!(iface["url"], agent_url.as_str(), "{card}");
    assert_eq!(iface["protocolBinding"], "JSONRPC");
    assert_eq!(iface["protocolVersion"], "1.0");
    assert_eq!(iface["tenant"], t.id.as_str());
    assert_eq!(
        card["capabilities"],
        json!({"streaming": true, "pushNotifications": true, "extendedAgentCard": true}),
        "{card}"
    );
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    assert_eq!(card["name"], "Agentry agent");
    assert_eq!(card["skills"].as_array().unwrap().len(), 1, "{card}");
    assert_eq!(card["skills"][0]["id"], "chat");
    let ghost = &r["ghost_card"];
    for field in [
        "name",
        "description",
        "skills",
        "capabilities",
        "securitySchemes",
    ] {
        assert_eq!(
            ghost[field], card[field],
            "{field}: the public card tells nothing"
        );
    }
    // The extended card: the assistant itself.
    let ext = &r["extended_card"];
    assert_eq!(ext["name"], "Default assistant", "{ext}");
    assert_ne!(ext["description"], card["description"]);
    assert_eq!(ext["skills"][0]["id"], "default", "{ext}");
    assert!(
        strs(&ext["skills"][0]["tags"]).contains(&"profile:general"),
        "{ext}"
    );
    assert_eq!(ext["supportedInterfaces"], card["supportedInterfaces"]);

    // SendMessage, blocking: completed, the answer as an artifact, the input as history.
    let plain = &r["plain"];
    assert_eq!(plain["state"], "TASK_STATE_COMPLETED", "{r}");
    assert_eq!(plain["text"], "(scripted) You said: hello there");
    assert_eq!(plain["artifacts"], 1);
    assert_eq!(plain["history"][0]["role"], "ROLE_USER");
    assert_eq!(plain["history"][0]["parts"][0]["text"], "hello there");
    let (task, context) = (
        plain["id"].as_str().unwrap(),
        plain["context"].as_str().unwrap(),
    );
    assert_eq!(
        plain["raw"]["metadata"]["agentry"]["sessionId"], context,
        "the context is the session"
    );
    assert!(
        plain["raw"]["metadata"]["agentry"]["tokenUsage"]["total"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    // The task is the run, in the member's session.
    let exec = ctx
        .ok(
            Method::GET,
            &format!("/api/v1/executions/{task}"),
            &t.member.key,
            None,
            200,
        )
        .await;
    assert_eq!(exec["session_id"], context, "{exec}");
    assert_eq!(exec["status"], "completed");
    // GetTask reads the same task back from the stored events.
    let got = &r["got"];
    for field in ["id", "context", "state", "text", "artifacts", "history"] {
        assert_eq!(got[field], plain[field], "{field}: {r}");
    }
    assert_eq!(r["got_no_history"]["history"], json!([]), "historyLength 0");
    // The same context: a new task of the conversation.
    let second = &r["second"];
    assert_eq!(second["context"], context, "{r}");
    assert_ne!(second["id"], task);
    assert_eq!(second["text"], "second turn");

    // SendStreamingMessage: the task first, the answer in chunks (append after the first, the
    // last marked), then completed.
    let s = &r["stream"];
    assert_eq!(s["kinds"][0], "task", "{s}");
    assert!(
        ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"]
            .contains(&s["first"]["state"].as_str().unwrap()),
        "{s}"
    );
    assert_eq!(
        s["text"], "(scripted) You said: stream this answer please",
        "{s}"
    );
    let chunks = s["chunks"].as_array().unwrap();
    assert!(chunks.len() > 3, "{s}");
    assert_eq!(chunks[0]["append"], false);
    assert!(chunks[1..].iter().all(|c| c["append"] == true), "{s}");
    assert!(
        chunks[..chunks.len() - 1]
            .iter()
            .all(|c| c["last"] == false),
        "{s}"
    );
    assert_eq!(chunks.last().unwrap()["last"], true);
    assert_eq!(
        strs(&s["states"]).last(),
        Some(&"TASK_STATE_COMPLETED"),
        "{s}"
    );
    assert_eq!(
        s["kinds"].as_array().unwrap().last().unwrap(),
        "status_update"
    );

    // A tool run: the tool ran inside the agent; the answer says what it returned.
    assert!(
        r["tool"]["text"]
            .as_str()
            .unwrap()
            .starts_with("(scripted) Tool list_directory returned:"),
        "{r}"
    );

    // An approval: input-required, the request as a data part…
    let asked = &r["asked"];
    assert_eq!(asked["state"], "TASK_STATE_INPUT_REQUIRED", "{r}");
    let message = &asked["status_message"];
    assert_eq!(message["role"], "ROLE_AGENT");
    let data = &message["parts"][1]["data"];
    assert_eq!(data["kind"], "approval", "{message}");
    assert_eq!(data["actionRequests"][0]["name"], "write_file");
    assert_eq!(
        data["actionRequests"][0]["args"],
        json!({"file_path": "approved.txt", "content": "yes"})
    );
    assert!(
        message["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("approve")
    );
    // …approved on the same task: the call ran, the task completed.
    let approved = &r["approved"];
    assert_eq!(approved["id"], asked["id"], "the same task goes on");
    assert_eq!(approved["state"], "TASK_STATE_COMPLETED", "{r}");
    assert!(
        approved["text"]
            .as_str()
            .unwrap()
            .starts_with("(scripted) Tool write_file returned:"),
        "{r}"
    );
    assert_eq!(r["approved_got"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(r["approved_got"]["text"], approved["text"]);
    assert_error(&r, "approved_again", "UnsupportedOperationError");
    let file = ctx
        .call(
            Method::GET,
            "/api/v1/files/approved.txt",
            Some(&t.member.key),
            None,
        )
        .await;
    assert_eq!(file.status, 200, "{}", file.body);
    // Rejected, streamed: the first stream ended at input-required, the second rejected.
    let asked = &r["asked_stream"];
    assert_eq!(
        strs(&asked["states"]).last(),
        Some(&"TASK_STATE_INPUT_REQUIRED"),
        "{asked}"
    );
    let rejected = &r["rejected"];
    assert_eq!(rejected["kinds"][0], "task", "{rejected}");
    assert_eq!(rejected["first"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(
        strs(&rejected["states"]).last(),
        Some(&"TASK_STATE_REJECTED"),
        "{rejected}"
    );
    assert_eq!(r["rejected_got"]["state"], "TASK_STATE_REJECTED", "{r}");
    let file = ctx
        .call(
            Method::GET,
            "/api/v1/files/rejected.txt",
            Some(&t.member.key),
            None,
        )
        .await;
    assert_eq!(file.status, 404, "nothing was written: {}", file.body);
    assert_error(&r, "approval_by_text", "InvalidParamsError");
    // A question: input-required, answered by text.
    let q = &r["question"];
    assert_eq!(q["state"], "TASK_STATE_INPUT_REQUIRED", "{r}");
    let data = &q["status_message"]["parts"][1]["data"];
    assert_eq!(data["kind"], "question");
    assert_eq!(data["question"]["text"], "Favourite colour?");
    let answered = &r["answered"];
    assert_eq!(answered["state"], "TASK_STATE_COMPLETED", "{r}");
    assert!(answered["text"].as_str().unwrap().contains("blue"), "{r}");

    // An approval edited: the call ran with the client's arguments.
    let edited = &r["edited"];
    assert_eq!(edited["state"], "TASK_STATE_COMPLETED", "{r}");
    assert!(
        edited["text"].as_str().unwrap().contains("edited.txt"),
        "{r}"
    );
    for (file, want) in [("edited.txt", 200), ("original.txt", 404)] {
        let got = ctx
            .call(
                Method::GET,
                &format!("/api/v1/files/{file}"),
                Some(&t.member.key),
                None,
            )
            .await;
        assert_eq!(got.status, want, "{file}: {}", got.body);
    }

    // A task waiting for an approval is listed as input-required, and can be cancelled.
    assert_eq!(r["waiting"]["state"], "TASK_STATE_INPUT_REQUIRED", "{r}");
    assert_eq!(
        strs(&r["waiting_listed"]),
        [r["waiting"]["id"].as_str().unwrap()],
        "{r}"
    );
    assert_eq!(
        r["waiting_cancelled"]["state"], "TASK_STATE_CANCELED",
        "{r}"
    );
    let file = ctx
        .call(
            Method::GET,
            "/api/v1/files/waiting.txt",
            Some(&t.member.key),
            None,
        )
        .await;
    assert_eq!(file.status, 404, "nothing was written: {}", file.body);

    // CancelTask: returned at once (working), canceled, and not again.
    assert!(
        ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"]
            .contains(&r["slow"]["state"].as_str().unwrap()),
        "{r}"
    );
    assert_eq!(r["cancelled"]["state"], "TASK_STATE_CANCELED", "{r}");
    assert_eq!(r["cancelled_got"]["state"], "TASK_STATE_CANCELED");
    assert_error(&r, "cancelled_again", "TaskNotCancelableError");

    // SubscribeToTask after the stream was dropped: the task first, then the answer.
    let re = &r["resubscribed"];
    assert_eq!(re["first_kind"], "task", "{re}");
    assert_eq!(re["first_state"], "TASK_STATE_WORKING", "{re}");
    assert_eq!(re["text"], "(scripted) You said: slow answer", "{re}");
    assert_eq!(strs(&re["states"]).last(), Some(&"TASK_STATE_COMPLETED"));
    assert_eq!(re["got"]["text"], re["text"]);
    assert_error(&r, "subscribe_terminal", "UnsupportedOperationError");

    // ListTasks, two by two: every task of the member here, once, newest update first.
    let pages = r["pages"].as_array().unwrap();
    let ids: Vec<&str> = pages.iter().flat_map(|p| strs(&p["ids"])).collect();
    let total = pages[0]["total"].as_u64().unwrap() as usize;
    assert_eq!(ids.len(), total, "{pages:?}");
    // plain, second, stream, tool, approved, rejected, refused text, question, edited,
    // cancelled while waiting, cancelled, resubscribed.
    assert_eq!(total, 12, "{pages:?}");
    let unique: std::collections::HashSet<&&str> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "no task twice: {ids:?}");
    assert!(pages.iter().all(|p| p["size"] == 2));
    assert!(
        pages[..pages.len() - 1]
            .iter()
            .all(|p| p["ids"].as_array().unwrap().len() == 2)
    );
    assert_eq!(
        pages.len(),
        total.div_ceil(2),
        "no empty last page: {pages:?}"
    );
    assert_eq!(
        pages.last().unwrap()["ids"].as_array().unwrap().len(),
        total - 2 * (pages.len() - 1)
    );
    assert!(pages[..pages.len() - 1].iter().all(|p| p["next"] != ""));
    assert_eq!(pages.last().unwrap()["next"], "");
    let times: Vec<&str> = pages.iter().flat_map(|p| strs(&p["times"])).collect();
    assert!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {times:?}"
    );
    assert!(
        pages
            .iter()
            .all(|p| p["artifacts"].as_array().unwrap().iter().all(|n| n == 0))
    );
    assert!(ids.contains(&task));
    let mut in_context = strs(&r["list_context"]);
    in_context.sort();
    let mut want = vec![task, second["id"].as_str().unwrap()];
    want.sort();
    assert_eq!(in_context, want, "{r}");
    assert_eq!(
        strs(&r["list_completed"]["states"]),
        ["TASK_STATE_COMPLETED"],
        "{r}"
    );
    assert!(
        strs(&r["list_completed"]["texts"]).contains(&"(scripted) You said: hello there"),
        "includeArtifacts: {r}"
    );
    assert_error(&r, "list_bad_size", "InvalidParamsError");

    // Another member sees none of it; another tenant neither, its key not even the agent.
    assert_eq!(r["member2_list"]["tasks"], Value::Null, "{r}");
    assert_eq!(r["member2_list"].get("totalSize"), None, "{r}");
    assert_error(&r, "member2_get", "TaskNotFoundError");
    assert_error(&r, "member2_context", "TaskNotFoundError");
    assert_error(&r, "other_tenant_agent", "A2AClientError");
    assert!(
        r["other_tenant_agent"]["message"]
            .as_str()
            .unwrap()
            .contains("404"),
        "{r}"
    );
    for field in [
        "other_tenant_task",
        "other_tenant_cancel",
        "other_tenant_context",
        "other_tenant_continue",
    ] {
        assert_error(&r, field, "TaskNotFoundError");
    }
    for field in ["bad_key", "bad_key_send"] {
        assert_error(&r, field, "A2AClientError");
        assert!(r[field]["message"].as_str().unwrap().contains("401"), "{r}");
    }

    // On the wire: JSON-RPC errors with A2A's codes, inside a 200.
    let w = &r["wire"];
    let code = |name: &str| -> i64 {
        let e = &w[name];
        assert_eq!(e["status"], 200, "{name}: {e}");
        assert_eq!(e["body"]["jsonrpc"], "2.0", "{name}: {e}");
        assert_eq!(e["body"]["id"], "x1", "{name}: {e}");
        assert!(
            e["body"]["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{name}: {e}"
        );
        assert_eq!(
            e["body"]["error"]["data"][0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo",
            "{name}: {e}"
        );
        e["body"]["error"]["code"].as_i64().unwrap()
    };
    assert_eq!(code("no_version"), -32009);
    assert_eq!(code("version_2"), -32009);
    assert_eq!(code("unknown_method"), -32601);
    // A push config whose URL is a loopback address, on a server that does not allow private
    // addresses (this one allows 127.0.0.2 only): refused, saying why.
    assert_eq!(code("push"), -32602);
    let refused = w["push"]["body"]["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        refused.contains("webhook URL is refused") && refused.contains("loopback"),
        "{refused}"
    );
    assert_eq!(
        w["push"]["body"]["error"]["data"][1]["details"]["field"], "url",
        "{w}"
    );
    assert_eq!(code("file_part"), -32005);
    assert_eq!(code("no_parts"), -32602);
    assert_eq!(code("wrong_tenant_field"), -32602);
    assert_eq!(w["tenant_field"]["body"]["result"]["id"], task, "{w}");
    assert_eq!(w["bad_json"]["status"], 400, "{w}");
    assert_eq!(w["bad_json"]["body"]["error"]["code"], -32700, "{w}");
}

/// Push notifications (docs/a2a.md, "Push notifications"), with the `a2a-sdk` client and a
/// loopback receiver in the script that checks each delivery's token, Bearer credentials and
/// Standard Webhooks signature. `ctx` must allow private addresses (the receiver is on
/// 127.0.0.1); the refusal of a private URL when they are not allowed is in [`sdk_client`].
pub async fn push_notifications(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let other = ctx.tenant().await;
    let r = crate::ctx::run_client(
        "a2a_push_client.py",
        &[
            ("AGENTRY_BASE", ctx.url("").as_str()),
            ("AGENTRY_TENANT", t.id.as_str()),
            ("AGENTRY_KEY", t.member.key.as_str()),
            ("AGENTRY_ADMIN_KEY", t.admin.key.as_str()),
            ("AGENTRY_MEMBER2_KEY", t.member2.key.as_str()),
            ("AGENTRY_OTHER_TENANT", other.id.as_str()),
            ("AGENTRY_OTHER_KEY", other.member.key.as_str()),
        ],
    )
    .await;

    // The secret: a tenant admin's to read, stable, in the Standard Webhooks format.
    assert_eq!(r["secret_status"], 200, "{r}");
    assert_eq!(r["secret_prefix"], "whsec_");
    assert_eq!(r["secret_again_same"], true);
    assert_eq!(r["secret_member_status"], 403);
    assert_eq!(r["capabilities"]["pushNotifications"], true, "{r}");

    // Every delivery: signed (verified by `standardwebhooks`), the spec's content type, the
    // config's own credentials, the statusUpdate of the task.
    let check = |field: &str, task: &str, token: Option<&str>, auth: Option<&str>| {
        let all = r[field].as_array().unwrap();
        assert!(!all.is_empty(), "{field}: {r}");
        for d in all {
            assert_eq!(d["verified"], true, "{field}: {d}");
            assert_eq!(d["content_type"], "application/a2a+json", "{d}");
            assert_eq!(d["token"].as_str(), token, "{field}: {d}");
            assert_eq!(d["authorization"].as_str(), auth, "{field}: {d}");
            assert_eq!(d["body"]["statusUpdate"]["taskId"], task, "{d}");
            assert!(
                d["webhook_id"]
                    .as_str()
                    .is_some_and(|i| i.starts_with("msg_")),
                "{d}"
            );
        }
    };
    let plain = r["plain_task"]["id"].as_str().unwrap();
    assert_eq!(r["plain_task"]["state"], "TASK_STATE_COMPLETED");
    check(
        "plain_deliveries",
        plain,
        Some("tok-plain"),
        Some("Bearer cred-plain"),
    );
    assert_eq!(
        strs(&r["plain_states"]),
        ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"],
        "{r}"
    );
    let approval = r["approval_task"].as_str().unwrap();
    assert_eq!(r["asked_state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(r["approved_state"], "TASK_STATE_COMPLETED");
    check("approval_deliveries", approval, Some("tok-approval"), None);
    assert_eq!(
        strs(&r["approval_states"]),
        [
            "TASK_STATE_WORKING",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED"
        ],
        "{r}"
    );
    // The input-required notification carries the request, as the task's status does.
    let waiting = r["approval_deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["body"]["statusUpdate"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED")
        .unwrap();
    assert!(
        waiting["body"]["statusUpdate"]["status"]["message"]["parts"]
            .to_string()
            .contains("write_file"),
        "{waiting}"
    );

    // The config as answered: never its token or credentials.
    assert_eq!(r["got"]["id"], "appr", "{r}");
    assert_eq!(r["got"]["taskId"], approval);
    assert!(r["got"]["url"].as_str().unwrap().ends_with("/approval"));
    assert!(r["got"].get("token").is_none(), "{r}");
    let listed = r["plain_list"]["configs"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{r}");
    assert_eq!(listed[0]["authentication"]["scheme"], "Bearer");
    assert!(
        listed[0]["authentication"].get("credentials").is_none(),
        "{r}"
    );
    assert!(listed[0].get("token").is_none(), "{r}");
    assert_eq!(r["created"]["id"], "flaky");
    assert!(r["created"]["authentication"].get("credentials").is_none());
    // Two configs on the plain task now, one a page.
    assert_eq!(
        r["list_page"]["configs"].as_array().unwrap().len(),
        1,
        "{r}"
    );
    assert!(
        r["list_page"]["nextPageToken"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );

    // Retried: 500, 500, then 200, the same message (webhook-id) each time, backing off.
    let flaky = r["flaky_deliveries"].as_array().unwrap();
    let statuses: Vec<i64> = flaky
        .iter()
        .map(|d| d["status"].as_i64().unwrap())
        .collect();
    assert_eq!(statuses, [500, 500, 200], "{r}");
    assert!(
        flaky
            .iter()
            .all(|d| d["webhook_id"] == flaky[0]["webhook_id"])
    );
    assert!(flaky.iter().all(|d| d["verified"] == true), "{r}");
    assert_eq!(flaky[2]["authorization"], "Bearer cred-flaky");
    assert_eq!(
        flaky[2]["body"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let gap =
        |a: usize, b: usize| flaky[b]["at"].as_f64().unwrap() - flaky[a]["at"].as_f64().unwrap();
    assert!(gap(0, 1) >= 0.9 && gap(1, 2) >= 1.9, "backoff: {r}");

    // Nobody else's: another member, another tenant at its agent, another tenant here (404).
    for field in [
        "member2_get",
        "member2_list",
        "member2_delete",
        "member2_create",
        "other_get",
        "other_delete",
    ] {
        assert_error(&r, field, "TaskNotFoundError");
    }
    assert_error(&r, "other_here_get", "A2AClientError");
    assert!(
        r["other_here_get"]["message"]
            .as_str()
            .unwrap()
            .contains("404")
    );
    assert_eq!(r["still_there"]["id"], "appr");
    // Deleted: not found; deleting again is fine (idempotent, as the spec asks).
    assert_error(&r, "deleted_get", "TaskNotFoundError");
    assert_eq!(r["deleted_again"]["class"], Value::Null, "{r}");
    assert_error(&r, "no_such_task", "TaskNotFoundError");
    assert_error(&r, "bad_url", "InvalidParamsError");
    // Nobody else's receiver got anything.
    assert!(r.get("stolen").is_none());
}

fn rpc(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

/// The documented statuses of the A2A routes, and their error shape, over raw HTTP.
pub async fn wire(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let other = ctx.tenant().await;
    let agent = format!("/a2a/{}/default", t.id);
    let post = |path: &str, key: Option<&str>, body: Value| {
        ctx.request(Method::POST, path, key)
            .header("A2A-Version", "1.0")
            .json(&body)
    };
    // The public card needs no key; a malformed path is 400 (a JSON-RPC error body).
    let r = ctx
        .call(
            Method::GET,
            &format!("{agent}/.well-known/agent-card.json"),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["supportedInterfaces"][0]["protocolVersion"], "1.0");
    let r = ctx
        .call(
            Method::GET,
            "/a2a/not-a-uuid/default/.well-known/agent-card.json",
            None,
            None,
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "bad_request"), "{}", r.body);
    assert_eq!(r.body["error"]["code"], -32602, "{}", r.body);
    // A call: 200 with the result.
    let r = ctx
        .send(post(
            &agent,
            Some(&t.member.key),
            rpc("ListTasks", json!({})),
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["result"]["tasks"], json!([]), "{}", r.body);
    assert_eq!(r.body["result"]["nextPageToken"], "");
    // No key, the platform admin's, another tenant's: 401, 403, 404, as JSON-RPC errors.
    let r = ctx
        .send(post(&agent, None, rpc("ListTasks", json!({}))))
        .await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"), "{}", r.body);
    assert_eq!(r.body["error"]["code"], -32000);
    let r = ctx
        .send(post(&agent, Some(ADMIN_KEY), rpc("ListTasks", json!({}))))
        .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.body);
    let r = ctx
        .send(post(
            &agent,
            Some(&other.member.key),
            rpc("ListTasks", json!({})),
        ))
        .await;
    assert_eq!((r.status, r.code()), (404, "not_found"), "{}", r.body);
    assert_eq!(r.body["error"]["code"], -32001);
    let r = ctx
        .send(post(
            &format!("/a2a/{}/no-such-agent", t.id),
            Some(&t.member.key),
            rpc("ListTasks", json!({})),
        ))
        .await;
    assert_eq!((r.status, r.code()), (404, "not_found"), "{}", r.body);
    // Malformed JSON: 400, JSON-RPC's parse error.
    let r = ctx
        .send(
            ctx.request(Method::POST, &agent, Some(&t.member.key))
                .header("content-type", "application/json")
                .body("{nope"),
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_json"), "{}", r.body);
    assert_eq!(r.body["error"]["code"], -32700);
    // Not JSON, too large: 415 and 413, JSON-RPC bodies too.
    let r = ctx
        .send(
            ctx.request(Method::POST, &agent, Some(&t.member.key))
                .header("content-type", "text/plain")
                .body("{}"),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (415, "unsupported_media_type"),
        "{}",
        r.body
    );
    let oversize = json!({"jsonrpc": "2.0", "pad": "x".repeat(crate::ctx::BODY_LIMIT)});
    let r = ctx.send(post(&agent, Some(&t.member.key), oversize)).await;
    assert_eq!(
        (r.status, r.code()),
        (413, "payload_too_large"),
        "{}",
        r.body
    );
    // JSON, but not one request object (a batch): 422, JSON-RPC's invalid request.
    let r = ctx
        .send(post(
            &agent,
            Some(&t.member.key),
            json!([rpc("ListTasks", json!({}))]),
        ))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (422, "validation_error"),
        "{}",
        r.body
    );
    assert_eq!(r.body["error"]["code"], -32600, "{}", r.body);
    // Not JSON-RPC: a -32600 inside a 200.
    let r = ctx
        .send(post(
            &agent,
            Some(&t.member.key),
            json!({"method": "GetTask"}),
        ))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["error"]["code"], -32600, "{}", r.body);
    // A task id that names nothing: TaskNotFoundError.
    let r = ctx
        .send(post(
            &agent,
            Some(&t.member.key),
            rpc("GetTask", json!({"id": "nope"})),
        ))
        .await;
    assert_eq!(r.body["error"]["code"], -32001, "{}", r.body);
    // A streamed call is Server-Sent Events, each line a JSON-RPC response with the same id.
    let r = ctx
        .send(post(
            &agent,
            Some(&t.member.key),
            json!({"jsonrpc": "2.0", "id": "s1", "method": "SendStreamingMessage", "params": {
                "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
            }}),
        ))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let frames: Vec<Value> = r
        .body
        .as_str()
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(frames.len() >= 3, "{frames:?}");
    assert!(
        frames
            .iter()
            .all(|f| f["id"] == "s1" && f["jsonrpc"] == "2.0")
    );
    assert!(frames[0]["result"]["task"]["id"].is_string(), "{frames:?}");
    assert_eq!(
        frames.last().unwrap()["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{frames:?}"
    );
}

/// A JSON-RPC call to `agent` on one replica: the response's `result` (the call must succeed).
async fn call_on(ctx: &Ctx, agent: &str, key: &str, method: &str, params: Value) -> Value {
    let r = ctx
        .send(
            ctx.request(Method::POST, agent, Some(key))
                .header("A2A-Version", "1.0")
                .json(&rpc(method, params)),
        )
        .await;
    assert_eq!(r.status, 200, "{method}: {}", r.body);
    assert!(r.body["error"].is_null(), "{method}: {}", r.body);
    r.body["result"].clone()
}

fn send_params(text: &str, task: Option<&str>, data: Option<Value>) -> Value {
    let part = match data {
        Some(d) => json!({"data": d}),
        None => json!({"text": text}),
    };
    let mut message = json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [part]});
    if let Some(t) = task {
        message["taskId"] = json!(t);
    }
    json!({"message": message})
}

/// Cluster mode (three replicas, one database, one Redis): a task asked for on one replica is
/// read on another, approved on a third, and a task running on one is followed to its end by
/// `SubscribeToTask` on another (the run's events through the session's shared stream).
pub async fn across_replicas(trio: &crate::replicas::Trio, t: &crate::ctx::TenantFx) {
    let (a, b, c) = (trio.a(), trio.b(), trio.c());
    let key = t.member.key.as_str();
    let agent = format!("/a2a/{}/default", t.id);
    let write = r#"/tool write_file {"file_path": "a2a-replicas.txt", "content": "from C"}"#;
    let asked = call_on(
        c,
        &agent,
        key,
        "SendMessage",
        send_params(write, None, None),
    )
    .await;
    let task = asked["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        asked["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );

    let read = call_on(a, &agent, key, "GetTask", json!({"id": task})).await;
    assert_eq!(
        read["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{read}"
    );
    assert_eq!(
        read["status"]["message"]["parts"][1]["data"],
        asked["task"]["status"]["message"]["parts"][1]["data"]
    );

    let approved = call_on(
        b,
        &agent,
        key,
        "SendMessage",
        send_params("", Some(&task), Some(json!({"type": "approve"}))),
    )
    .await;
    assert_eq!(approved["task"]["id"], task.as_str());
    assert_eq!(
        approved["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{approved}"
    );
    assert!(
        approved["task"]["artifacts"][0]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("(scripted) Tool write_file returned:"),
        "{approved}"
    );

    // Made on C, returned at once; followed on A to the end.
    let started = call_on(
        c,
        &agent,
        key,
        "SendMessage",
        json!({
            "message": {"messageId": "bg", "role": "ROLE_USER",
                        "parts": [{"text": "/sleep 800\n/echo followed on A"}]},
            "configuration": {"returnImmediately": true},
        }),
    )
    .await;
    let bg = started["task"]["id"].as_str().unwrap().to_string();
    let r = a
        .send(
            a.request(Method::POST, &agent, Some(key))
                .header("A2A-Version", "1.0")
                .json(&rpc("SubscribeToTask", json!({"id": bg})))
                .timeout(std::time::Duration::from_secs(60)),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let frames: Vec<Value> = r
        .body
        .as_str()
        .unwrap_or_else(|| panic!("not a stream: {}", r.body))
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(frames[0]["result"]["task"]["id"], bg.as_str(), "{frames:?}");
    let text: String = frames
        .iter()
        .filter_map(|f| f["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(text, "followed on A", "{frames:?}");
    assert_eq!(
        frames.last().unwrap()["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{frames:?}"
    );
    // Listed on B, newest first.
    let list = call_on(b, &agent, key, "ListTasks", json!({"pageSize": 2})).await;
    let ids: Vec<&str> = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [bg.as_str(), task.as_str()], "{list}");
}
