//! Client function tools: tools a client declares for one run (the OpenAI Responses API's
//! `tools: [{"type": "function"}]`) and runs itself.
//!
//! To the model and to the one tool-call pipeline a [`ClientFunction`] is a tool like any other
//! (looked up, schema-checked, approved if the assistant says so, audited, its result emitted).
//! Its call runs nothing on the server: it asks the run's user, through the call's
//! [`UserInteraction`](crate::tool::UserInteraction) — the same pause a question takes
//! (`hitl_request` of kind `question`, `question_type` [`FUNCTION_CALL_QUESTION`], bounded by
//! `hitl.timeout_secs`, the call's and the run's clocks standing still) — and the answer is the
//! call's result. A client answers with `Decision::Answer`, as it answers any question.

use std::collections::HashSet;
use std::sync::Arc;

use agentry_schema::api::ClientTool;
use agentry_schema::events::{ActionRequest, FUNCTION_CALL_QUESTION, Question};
use async_trait::async_trait;
use serde_json::Value;

use crate::pipeline::ToolPolicy;
use crate::tool::{
    CompiledTool, InteractionError, RegistryError, Tool, ToolContext, ToolError, ToolOutput,
    ToolSpec,
};

/// The service (RBAC's `service:tool`) of every client function tool.
pub const CLIENT_SERVICE: &str = "client";

/// A client's function: its call waits for the client's output.
pub struct ClientFunction {
    spec: ToolSpec,
}

impl ClientFunction {
    /// The tool of `def`, its schema compiled (a schema that does not compile is refused).
    pub fn compile(def: &ClientTool) -> Result<CompiledTool, RegistryError> {
        CompiledTool::compile(Arc::new(ClientFunction {
            spec: ToolSpec::new(
                CLIENT_SERVICE,
                &def.name,
                &def.description,
                def.parameters.clone(),
            ),
        }))
    }
}

#[async_trait]
impl Tool for ClientFunction {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let name = &self.spec.name;
        let question = Question {
            text: format!(
                "run your function {name} with these arguments and answer with its output: {args}"
            ),
            question_type: FUNCTION_CALL_QUESTION.into(),
            options: Vec::new(),
            // The server's `hitl.timeout_secs`.
            timeout: 0,
            schema: None,
            function_call: Some(Box::new(ActionRequest {
                name: name.clone(),
                args,
                description: self.spec.description.clone(),
                tool_call_id: Some(ctx.tool_call_id.clone()),
            })),
        };
        match ctx.interaction.ask(question).await {
            Ok(output) => Ok(ToolOutput::ok(output)),
            Err(InteractionError::Cancelled) => Err(ToolError::Cancelled),
            Err(InteractionError::TimedOut(secs)) => Err(ToolError::failed(format!(
                "the client did not return the output of {name} within {secs} s"
            ))),
            Err(InteractionError::Declined) => Err(ToolError::failed(format!(
                "the client declined to run {name}"
            ))),
            Err(InteractionError::Unavailable(why)) => Err(ToolError::failed(format!(
                "no client can run {name}: {why}"
            ))),
        }
    }
}

/// A run's tool policy with its client's functions allowed: the role's permissions govern what
/// the server runs, and a client function runs on the client.
pub struct WithClientTools {
    pub inner: Arc<dyn ToolPolicy>,
    /// The run's client functions.
    pub names: HashSet<String>,
}

impl ToolPolicy for WithClientTools {
    fn check(&self, spec: &ToolSpec) -> Result<(), String> {
        if spec.service == CLIENT_SERVICE && self.names.contains(&spec.name) {
            return Ok(());
        }
        self.inner.check(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::{UserInteraction, WorkspaceInfo};
    use serde_json::json;
    use std::sync::Mutex;

    struct Answers {
        asked: Mutex<Vec<Question>>,
        answer: Result<Value, InteractionError>,
    }

    #[async_trait]
    impl UserInteraction for Answers {
        async fn ask(&self, question: Question) -> Result<Value, InteractionError> {
            self.asked.lock().unwrap().push(question);
            self.answer.clone()
        }
    }

    fn def() -> ClientTool {
        ClientTool {
            name: "get_weather".into(),
            description: "The weather in a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }
    }

    fn context(answer: Result<Value, InteractionError>) -> (ToolContext, Arc<Answers>) {
        let answers = Arc::new(Answers {
            asked: Mutex::default(),
            answer,
        });
        let mut ctx = ToolContext::standalone(WorkspaceInfo {
            root: std::env::temp_dir(),
            quota_bytes: 0,
            sandbox: Default::default(),
        })
        .with_interaction(answers.clone());
        ctx.tool_call_id = "call_7".into();
        (ctx, answers)
    }

    #[tokio::test]
    async fn a_call_asks_the_client_and_its_answer_is_the_result() {
        let tool = ClientFunction::compile(&def()).unwrap();
        let (ctx, answers) = context(Ok(json!("sunny, 21 C")));
        let out = tool
            .tool()
            .call(json!({"city": "Paris"}), &ctx)
            .await
            .unwrap();
        assert_eq!(out.content, json!("sunny, 21 C"));
        assert!(!out.is_error);
        let asked = answers.asked.lock().unwrap();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].question_type, FUNCTION_CALL_QUESTION);
        assert_eq!(asked[0].timeout, 0, "the server's hitl timeout");
        let call = asked[0].function_call.as_ref().unwrap();
        assert_eq!(
            (call.name.as_str(), &call.args, call.tool_call_id.as_deref()),
            ("get_weather", &json!({"city": "Paris"}), Some("call_7"))
        );
    }

    #[tokio::test]
    async fn no_answer_is_an_error_the_model_reads() {
        let tool = ClientFunction::compile(&def()).unwrap();
        let (ctx, _) = context(Err(InteractionError::TimedOut(5)));
        let err = tool.tool().call(json!({"city": "x"}), &ctx).await;
        assert!(
            matches!(&err, Err(ToolError::Failed { message, .. }) if message.contains("within 5 s")),
            "{err:?}"
        );
        let (ctx, _) = context(Err(InteractionError::Cancelled));
        assert_eq!(
            tool.tool().call(json!({}), &ctx).await,
            Err(ToolError::Cancelled)
        );
    }

    #[test]
    fn a_bad_schema_is_refused_and_client_tools_pass_the_policy() {
        let bad = ClientTool {
            parameters: json!({"type": 12}),
            ..def()
        };
        assert!(matches!(
            ClientFunction::compile(&bad),
            Err(RegistryError::InvalidSchema { .. })
        ));
        struct DenyAll;
        impl ToolPolicy for DenyAll {
            fn check(&self, _: &ToolSpec) -> Result<(), String> {
                Err("no".into())
            }
        }
        let policy = WithClientTools {
            inner: Arc::new(DenyAll),
            names: HashSet::from(["get_weather".to_string()]),
        };
        let tool = ClientFunction::compile(&def()).unwrap();
        assert!(policy.check(tool.spec()).is_ok());
        // A server tool of the same service name is not a client function.
        let other = ToolSpec::new(CLIENT_SERVICE, "other", "", json!({}));
        assert!(policy.check(&other).is_err());
        let server = ToolSpec::new("files", "get_weather", "", json!({}));
        assert!(policy.check(&server).is_err());
    }
}
