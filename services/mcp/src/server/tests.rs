//! Real MCP sessions: rmcp's client against [`ToolServer`] over an in-process duplex pipe.

use std::sync::Mutex as StdMutex;

use rmcp::ClientHandler;
use rmcp::model::{
    CallToolResult, ClientCapabilities, ClientConfig, ElicitResult, ErrorData, Implementation,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};

use super::*;
use agentry_builtin::BuiltinService;

/// A client whose user answers every elicitation with `answer` (or declines when None), and
/// who remembers the messages it was shown.
#[derive(Clone)]
struct TestUser {
    elicitation: bool,
    answers: Arc<StdMutex<std::collections::VecDeque<Value>>>,
    seen: Arc<StdMutex<Vec<String>>>,
}

impl TestUser {
    fn answering(answers: Vec<Value>) -> Self {
        Self {
            elicitation: true,
            answers: Arc::new(StdMutex::new(answers.into())),
            seen: Arc::default(),
        }
    }
}

impl ClientHandler for TestUser {
    fn get_info(&self) -> ClientConfig {
        let caps = if self.elicitation {
            ClientCapabilities::builder().enable_elicitation().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(caps, Implementation::new("agentry-test-client", "0.0.0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = &request
        {
            self.seen.lock().unwrap().push(message.clone());
            assert!(requested_schema.properties.contains_key("answer"));
        }
        let next = self.answers.lock().unwrap().pop_front();
        Ok(match next {
            Some(a) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"answer": a}))
            }
            None => ElicitResult::new(ElicitationAction::Decline),
        })
    }
}

struct Session {
    client: RunningService<RoleClient, TestUser>,
    _server: JoinHandle<()>,
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

async fn connect(
    services: &[BuiltinService],
    user: TestUser,
    lifecycle: Option<ClientLifecycleMode>,
) -> Session {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let server = ToolServer::new(
        "agentry-test",
        builtin_registry(
            &BuiltinConfig {
                sandbox: agentry_sandbox::SandboxHandle::unconfined_for_tests(),
                ..BuiltinConfig::default()
            },
            services,
        ),
        WorkspaceInfo {
            root: root.clone(),
            quota_bytes: 1 << 20,
            sandbox: Default::default(),
        },
    );
    let (server_io, client_io) = tokio::io::duplex(256 * 1024);
    let server_task = tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client = match lifecycle {
        None => user.serve(client_io).await.unwrap(),
        Some(mode) => user.serve_with_lifecycle(client_io, mode).await.unwrap(),
    };
    Session {
        client,
        _server: server_task,
        _tmp: tmp,
        root,
    }
}

fn args(v: Value) -> JsonObject {
    v.as_object().unwrap().clone()
}

async fn call(s: &Session, name: &str, a: Value) -> CallToolResult {
    s.client
        .call_tool(CallToolRequestParams::new(name.to_string()).with_arguments(args(a)))
        .await
        .unwrap()
}

#[tokio::test]
async fn tools_are_listed_with_schemas_and_approval_hints() {
    let s = connect(&[BuiltinService::Files], TestUser::answering(vec![]), None).await;
    let tools = s.client.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "copy_file",
            "edit_file",
            "glob",
            "grep",
            "list_directory",
            "read_file",
            "write_file"
        ]
    );
    let write = tools.iter().find(|t| t.name == "write_file").unwrap();
    assert_eq!(
        write.annotations.as_ref().unwrap().destructive_hint,
        Some(true)
    );
    assert_eq!(
        write.meta.as_ref().unwrap().0["agentry/requires_approval"],
        true
    );
    assert_eq!(
        write.input_schema["required"],
        json!(["file_path", "content"])
    );
    let read = tools.iter().find(|t| t.name == "read_file").unwrap();
    assert_eq!(
        read.annotations.as_ref().unwrap().destructive_hint,
        Some(false)
    );
    s.client.cancel().await.unwrap();
}

/// The server declares what it implements and answers nothing else: tools, logging, and
/// resources and prompts (none today: the lists are empty and an unknown URI or name is -32602
/// naming it); completions are not declared, so `completion/complete` is -32601.
#[tokio::test]
async fn declared_capabilities_are_answered_and_only_they() {
    let s = connect(&[BuiltinService::Files], TestUser::answering(vec![]), None).await;
    let caps = &s
        .client
        .peer_info()
        .expect("the server's info")
        .capabilities;
    assert!(caps.tools.is_some() && caps.resources.is_some() && caps.prompts.is_some());
    assert!(caps.completions.is_none());
    let error = |r: Result<(), ServiceError>| match r {
        Err(ServiceError::McpError(e)) => e,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    };
    assert!(
        s.client
            .list_prompts(None)
            .await
            .unwrap()
            .prompts
            .is_empty()
    );
    assert!(
        s.client
            .list_resources(None)
            .await
            .unwrap()
            .resources
            .is_empty()
    );
    assert!(
        s.client
            .list_resource_templates(None)
            .await
            .unwrap()
            .resource_templates
            .is_empty()
    );
    let uri = "file:///etc/passwd";
    let e = error(
        s.client
            .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
            .await
            .map(|_| ()),
    );
    assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    assert_eq!(e.data, Some(json!({"uri": uri})));
    let e = error(
        s.client
            .get_prompt(rmcp::model::GetPromptRequestParams::new("summarize"))
            .await
            .map(|_| ()),
    );
    assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    assert_eq!(e.data, Some(json!({"name": "summarize"})));
    let complete = rmcp::model::CompleteRequestParams::new(
        rmcp::model::Reference::for_prompt("p"),
        rmcp::model::ArgumentInfo::new("a", "x"),
    );
    let e = error(s.client.complete(complete).await.map(|_| ()));
    assert_eq!(e.code, rmcp::model::ErrorCode::METHOD_NOT_FOUND);
    // Tools and logging still work.
    assert!(!s.client.list_all_tools().await.unwrap().is_empty());
    #[allow(deprecated)]
    s.client
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Info,
        ))
        .await
        .expect("logging/setLevel is answered");
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn write_then_read_over_mcp_with_events_in_meta() {
    let s = connect(&[BuiltinService::Files], TestUser::answering(vec![]), None).await;
    let w = call(
        &s,
        "write_file",
        json!({"file_path": "docs/a.md", "content": "# Title\nbody\n"}),
    )
    .await;
    assert_eq!(w.is_error, Some(false));
    let structured = w.structured_content.clone().unwrap();
    assert_eq!(structured["file_path"], "docs/a.md");
    assert_eq!(structured["lines_written"], 2);
    let events = &w.meta.as_ref().unwrap().0["agentry/events"];
    assert_eq!(events[0]["event_type"], "file_operation");
    assert_eq!(events[0]["data"]["operation"], "write");
    assert_eq!(events[0]["data"]["metrics"]["lines_added"], 2);
    assert_eq!(
        std::fs::read_to_string(s.root.join("docs/a.md")).unwrap(),
        "# Title\nbody\n"
    );

    let r = call(&s, "read_file", json!({"file_path": "docs/a.md"})).await;
    assert_eq!(r.is_error, Some(false));
    assert_eq!(
        r.structured_content.as_ref().unwrap()["content"],
        "# Title\nbody\n"
    );
    let text = r.content[0].as_text().unwrap().text.clone();
    let parsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed["content"], "# Title\nbody\n");
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_jail_escape_is_an_error_result_not_a_protocol_error() {
    let s = connect(&[BuiltinService::Files], TestUser::answering(vec![]), None).await;
    let r = call(&s, "read_file", json!({"file_path": "../../etc/passwd"})).await;
    assert_eq!(r.is_error, Some(true));
    let err = &r.structured_content.as_ref().unwrap()["error"];
    assert_eq!(err["code"], "refused");
    assert!(err["message"].as_str().unwrap().contains(".."));
    assert!(!r.content[0].as_text().unwrap().text.contains("root:"));

    // Arguments that break the schema come back listing every problem.
    let r = call(&s, "write_file", json!({"content": 5})).await;
    assert_eq!(r.is_error, Some(true));
    let err = &r.structured_content.as_ref().unwrap()["error"];
    assert_eq!(err["code"], "validation_error");
    assert!(err["details"]["violations"].as_array().unwrap().len() >= 2);

    // An unknown tool is a protocol error.
    let unknown = s
        .client
        .call_tool(CallToolRequestParams::new("nope").with_arguments(JsonObject::new()))
        .await;
    assert!(unknown.is_err());
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn questions_become_elicitation_on_an_initialize_session() {
    let user = TestUser::answering(vec![json!("blue")]);
    let seen = user.seen.clone();
    let s = connect(&[BuiltinService::Interaction], user, None).await;
    let r = call(&s, "ask_question", json!({"question": "Favourite colour?", "question_type": "choice", "options": ["red", "blue"]})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let out = r.structured_content.unwrap();
    assert_eq!(out["answered"], true);
    assert_eq!(out["choice"], "blue");
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        ["Favourite colour?\nOptions: red, blue"]
    );
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn questions_suspend_the_call_on_protocol_2026() {
    let user = TestUser::answering(vec![json!(true), json!("7")]);
    let seen = user.seen.clone();
    let s = connect(
        &[BuiltinService::Interaction],
        user,
        Some(ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        }),
    )
    .await;
    // rmcp's client fulfils the input_required result and retries; the suspended call goes on.
    let r = call(
        &s,
        "confirm_action",
        json!({"action_description": "delete the cache", "risk_level": "medium"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let out = r.structured_content.unwrap();
    assert_eq!(out["confirmed"], true);
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        ["Confirm (medium risk): delete the cache"]
    );

    let r = call(
        &s,
        "get_user_input",
        json!({"prompt": "How many?", "input_type": "number"}),
    )
    .await;
    assert_eq!(r.structured_content.unwrap()["value"], 7.0);
    assert_eq!(seen.lock().unwrap().len(), 2);
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn without_elicitation_support_there_is_no_interactive_user() {
    let user = TestUser {
        elicitation: false,
        ..TestUser::answering(vec![])
    };
    let s = connect(&[BuiltinService::Interaction], user, None).await;
    let r = call(&s, "ask_question", json!({"question": "Anyone there?"})).await;
    assert_eq!(r.is_error, Some(true));
    let out = r.structured_content.unwrap();
    assert_eq!(out["answered"], false);
    assert_eq!(out["reason"], "no_interactive_user");
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_declined_question_is_reported_as_declined() {
    let user = TestUser::answering(vec![]);
    let s = connect(&[BuiltinService::Interaction], user, None).await;
    let r = call(
        &s,
        "ask_question",
        json!({"question": "Share your location?"}),
    )
    .await;
    let out = r.structured_content.unwrap();
    assert_eq!(out["reason"], "declined");
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_2026_call_parks_on_input_required_and_resumes_with_the_answer() {
    let s = connect(
        &[BuiltinService::Interaction],
        TestUser::answering(vec![]),
        Some(ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        }),
    )
    .await;
    let first = s
        .client
        .call_tool_once(
            CallToolRequestParams::new("get_user_preference").with_arguments(args(
                json!({"preference_type": "editor", "options": ["vim", "emacs"]}),
            )),
        )
        .await
        .unwrap();
    let CallToolResponse::InputRequired(required) = first else {
        panic!("expected input_required, got {first:?}")
    };
    let state = required.request_state.clone().unwrap();
    let requests = required.input_requests.unwrap();
    let wire = serde_json::to_value(&requests["question"]).unwrap();
    assert_eq!(wire["method"], "elicitation/create");
    assert_eq!(
        wire["params"]["message"],
        "Which editor do you prefer?\nOptions: vim, emacs"
    );

    // The client answers and retries with the echoed state: the parked call completes.
    let mut responses = rmcp::model::InputResponses::new();
    responses.insert(
        "question".into(),
        json!({"action": "accept", "content": {"answer": "emacs"}}),
    );
    let mut retry = CallToolRequestParams::new("get_user_preference")
        .with_arguments(args(
            json!({"preference_type": "editor", "options": ["vim", "emacs"]}),
        ))
        .with_input_responses(responses.clone());
    retry.request_state = Some(state.clone());
    let done = s.client.call_tool_once(retry.clone()).await.unwrap();
    let CallToolResponse::Complete(result) = done else {
        panic!("{done:?}")
    };
    assert_eq!(result.structured_content.unwrap()["choice"], "emacs");

    // The same state again is gone: a clear error result, not a hang.
    let again = s.client.call_tool_once(retry).await.unwrap();
    let CallToolResponse::Complete(result) = again else {
        panic!("{again:?}")
    };
    assert_eq!(result.is_error, Some(true));
    assert!(
        result.content[0]
            .as_text()
            .unwrap()
            .text
            .contains("expired")
    );
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_request_stops_the_running_tool() {
    let s = connect(&[BuiltinService::Shell], TestUser::answering(vec![]), None).await;
    // Dropping the call future makes rmcp's client send notifications/cancelled.
    let pending = s.client.call_tool(
        CallToolRequestParams::new("execute")
            .with_arguments(args(json!({"command": "sleep 3; touch late"}))),
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(500), pending)
            .await
            .is_err()
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !s.root.join("late").exists(),
        "the command ran on after the cancel"
    );
    // The session is still usable.
    let r = call(&s, "execute", json!({"command": "echo still here"})).await;
    assert_eq!(r.structured_content.unwrap()["stdout"], "still here\n");
    s.client.cancel().await.unwrap();
}

#[tokio::test]
async fn serve_stdio_refuses_an_unknown_service_before_touching_stdio() {
    let tmp = tempfile::tempdir().unwrap();
    let err = serve_stdio("nope", &BuiltinConfig::default(), tmp.path().join("ws"))
        .await
        .unwrap_err();
    assert!(matches!(err, ServeError::UnknownService(_)), "{err}");
    assert!(err.to_string().contains("files, shell, web"));
}
