//! The `interaction` service (seed 003 §6): ask_question, get_user_input, confirm_action,
//! get_user_preference.
//!
//! Each builds a [`Question`] and waits on [`ToolContext::interaction`] — in a session that is a
//! `hitl_request` of kind `question`; under `agentry tool-server` it is MCP elicitation. The
//! user's answer is the tool result. When no answer comes (timeout, declined, nobody to ask)
//! the result says so plainly, with `answered: false` and the reason, so the model can go on
//! without it.

use std::sync::Arc;
use std::time::Duration;

use agentry_schema::events::Question;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{BuiltinConfig, parse_args};
use agentry_tools::tool::{InteractionError, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};

const SERVICE: &str = "interaction";

pub fn tools(cfg: &BuiltinConfig) -> Vec<Arc<dyn Tool>> {
    let cfg = Arc::new(cfg.clone());
    vec![
        Arc::new(Interaction::new(Kind::AskQuestion, cfg.clone())),
        Arc::new(Interaction::new(Kind::GetUserInput, cfg.clone())),
        Arc::new(Interaction::new(Kind::ConfirmAction, cfg.clone())),
        Arc::new(Interaction::new(Kind::GetUserPreference, cfg)),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    AskQuestion,
    GetUserInput,
    ConfirmAction,
    GetUserPreference,
}

pub struct Interaction {
    spec: ToolSpec,
    kind: Kind,
    cfg: Arc<BuiltinConfig>,
}

#[derive(Deserialize)]
struct AskArgs {
    question: String,
    #[serde(default)]
    question_type: Option<String>,
    #[serde(default)]
    options: Vec<String>,
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    context: Option<Value>,
}

#[derive(Deserialize)]
struct InputArgs {
    prompt: String,
    #[serde(default)]
    input_type: Option<String>,
    #[serde(default)]
    default_value: Option<String>,
    #[serde(default)]
    timeout: Option<u64>,
}

#[derive(Deserialize)]
struct ConfirmArgs {
    action_description: String,
    #[serde(default)]
    risk_level: Option<String>,
    #[serde(default)]
    alternatives: Vec<String>,
    #[serde(default)]
    timeout: Option<u64>,
}

#[derive(Deserialize)]
struct PreferenceArgs {
    preference_type: String,
    options: Vec<String>,
    #[serde(default)]
    allow_custom: bool,
    #[serde(default)]
    timeout: Option<u64>,
}

impl Interaction {
    fn new(kind: Kind, cfg: Arc<BuiltinConfig>) -> Self {
        let timeout_prop = json!({"type": "integer", "minimum": 1, "maximum": cfg.question_max_timeout_secs.max(1),
                                  "description": format!("Seconds to wait for the answer (default {})", cfg.question_timeout_secs)});
        let (name, description, schema) = match kind {
            Kind::AskQuestion => (
                "ask_question",
                "Ask the user a question and wait for the answer. question_type `choice` offers \
                 the given options; `confirmation` expects yes or no.",
                json!({
                    "type": "object",
                    "properties": {
                        "question": {"type": "string", "minLength": 1},
                        "question_type": {"type": "string", "enum": ["text", "choice", "confirmation"], "default": "text"},
                        "options": {"type": "array", "items": {"type": "string"}, "description": "Choices for question_type choice"},
                        "timeout": timeout_prop,
                        "context": {"type": "object", "description": "Context shown with the question"}
                    },
                    "required": ["question"]
                }),
            ),
            Kind::GetUserInput => (
                "get_user_input",
                "Ask the user to type a value (text or a number) and wait for it.",
                json!({
                    "type": "object",
                    "properties": {
                        "prompt": {"type": "string", "minLength": 1},
                        "input_type": {"type": "string", "enum": ["text", "number"], "default": "text"},
                        "default_value": {"type": "string", "description": "Used when the user answers with nothing"},
                        "timeout": timeout_prop
                    },
                    "required": ["prompt"]
                }),
            ),
            Kind::ConfirmAction => (
                "confirm_action",
                "Ask the user to confirm an action before doing it. The result says whether they \
                 confirmed, or which alternative they chose instead.",
                json!({
                    "type": "object",
                    "properties": {
                        "action_description": {"type": "string", "minLength": 1},
                        "risk_level": {"type": "string", "enum": ["low", "medium", "high"], "default": "low"},
                        "alternatives": {"type": "array", "items": {"type": "string"}},
                        "timeout": timeout_prop
                    },
                    "required": ["action_description"]
                }),
            ),
            Kind::GetUserPreference => (
                "get_user_preference",
                "Ask the user to choose one of several options for a preference.",
                json!({
                    "type": "object",
                    "properties": {
                        "preference_type": {"type": "string", "minLength": 1, "description": "What the preference is about"},
                        "options": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                        "allow_custom": {"type": "boolean", "default": false},
                        "timeout": timeout_prop
                    },
                    "required": ["preference_type", "options"]
                }),
            ),
        };
        // Every caller runs tools through the pipeline, whose clock stands still while the
        // question waits: the timeout bounds the tool's own work, not the user's answer.
        let spec = ToolSpec::new(SERVICE, name, description, schema)
            .with_timeout(Duration::from_secs(cfg.interaction_timeout_secs.max(1)));
        Self { spec, kind, cfg }
    }

    fn timeout(&self, requested: Option<u64>) -> u64 {
        requested
            .unwrap_or(self.cfg.question_timeout_secs)
            .clamp(1, self.cfg.question_max_timeout_secs.max(1))
    }

    /// Ask and wait: the answer, or why none came (`Err((reason, message))`).
    async fn ask(
        &self,
        question: Question,
        ctx: &ToolContext,
    ) -> Result<Result<Value, (&'static str, String)>, ToolError> {
        let secs = question.timeout;
        let asked = ctx.interaction.ask(question);
        let outcome = tokio::select! {
            r = tokio::time::timeout(Duration::from_secs(secs), asked) => r.unwrap_or(Err(InteractionError::TimedOut(secs))),
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        Ok(match outcome {
            Ok(answer) => Ok(answer),
            Err(InteractionError::TimedOut(s)) => Err((
                "timed_out",
                format!(
                    "The user did not answer within {s} s. Go on without the answer, or ask again later."
                ),
            )),
            Err(InteractionError::Declined) => Err((
                "declined",
                "The user declined to answer. Do not ask the same again; go on without it."
                    .to_string(),
            )),
            Err(InteractionError::Cancelled) => return Err(ToolError::Cancelled),
            Err(InteractionError::Unavailable(why)) => Err((
                "no_interactive_user",
                format!(
                    "No user can be asked here ({why}). Decide without asking, and say what you assumed."
                ),
            )),
        })
    }
}

/// The text of an answer, whatever shape the asking side gave it.
fn answer_text(answer: &Value) -> String {
    match answer {
        Value::String(s) => s.trim().to_string(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Object(map) => ["answer", "value", "response", "text", "choice"]
            .iter()
            .find_map(|k| map.get(*k))
            .map(answer_text)
            .unwrap_or_else(|| answer.to_string()),
        Value::Null => String::new(),
        Value::Array(_) => answer.to_string(),
    }
}

fn parse_yes_no(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" | "true" | "ok" | "confirm" | "confirmed" | "approve" | "approved" | "1"
        | "是" | "确认" => Some(true),
        "n" | "no" | "false" | "cancel" | "deny" | "denied" | "reject" | "0" | "否" | "取消" => {
            Some(false)
        }
        _ => None,
    }
}

/// Match an answer to one of the options: exactly, case-insensitively, or by 1-based number.
fn match_option(text: &str, options: &[String]) -> Option<String> {
    let t = text.trim();
    options
        .iter()
        .find(|o| o.as_str() == t)
        .or_else(|| options.iter().find(|o| o.eq_ignore_ascii_case(t)))
        .or_else(|| {
            t.parse::<usize>()
                .ok()
                .and_then(|n| n.checked_sub(1))
                .and_then(|i| options.get(i))
        })
        .cloned()
}

fn no_answer(reason: &'static str, message: String, question: &str) -> ToolOutput {
    ToolOutput::failed(json!({
        "answered": false,
        "reason": reason,
        "message": message,
        "question": question,
    }))
}

#[async_trait]
impl Tool for Interaction {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        match self.kind {
            Kind::AskQuestion => {
                let a: AskArgs = parse_args("ask_question", args)?;
                let qtype = match a.question_type.as_deref().unwrap_or("text") {
                    "text" => "text",
                    "choice" => "choice",
                    "confirmation" | "confirm" => "confirm",
                    other => {
                        return Err(ToolError::invalid(format!(
                            "question_type must be text, choice or confirmation, not {other:?}"
                        )));
                    }
                };
                if qtype == "choice" && a.options.is_empty() {
                    return Err(ToolError::invalid("a choice question needs options"));
                }
                let mut text = a.question.trim().to_string();
                if let Some(context) = a.context.filter(|c| !c.is_null()) {
                    text.push_str(&format!("\n\nContext: {context}"));
                }
                let options = if qtype == "confirm" && a.options.is_empty() {
                    vec!["yes".to_string(), "no".to_string()]
                } else {
                    a.options.clone()
                };
                let question = Question {
                    text,
                    question_type: qtype.to_string(),
                    options: options.clone(),
                    timeout: self.timeout(a.timeout),
                    schema: None,
                    function_call: None,
                };
                match self.ask(question, ctx).await? {
                    Err((reason, message)) => Ok(no_answer(reason, message, &a.question)),
                    Ok(answer) => {
                        let text = answer_text(&answer);
                        let mut out =
                            json!({"answered": true, "answer": text, "question": a.question});
                        if qtype == "choice" {
                            out["choice"] = json!(match_option(&text, &options));
                        }
                        if qtype == "confirm" {
                            out["confirmed"] = json!(parse_yes_no(&text));
                        }
                        Ok(ToolOutput::ok(out))
                    }
                }
            }
            Kind::GetUserInput => {
                let a: InputArgs = parse_args("get_user_input", args)?;
                let number = match a.input_type.as_deref().unwrap_or("text") {
                    "text" => false,
                    "number" => true,
                    other => {
                        return Err(ToolError::invalid(format!(
                            "input_type must be text or number, not {other:?}"
                        )));
                    }
                };
                let mut text = a.prompt.trim().to_string();
                if let Some(d) = &a.default_value {
                    text.push_str(&format!(" (default: {d})"));
                }
                let question = Question {
                    text,
                    question_type: "text".to_string(),
                    options: Vec::new(),
                    timeout: self.timeout(a.timeout),
                    schema: number.then(|| json!({"type": "number"})),
                    function_call: None,
                };
                match self.ask(question, ctx).await? {
                    Err((reason, message)) => {
                        if let Some(d) = a.default_value {
                            return Ok(ToolOutput::ok(json!({
                                "answered": false, "reason": reason, "value": d, "used_default": true,
                                "message": format!("{message} The default value was used."),
                            })));
                        }
                        Ok(no_answer(reason, message, &a.prompt))
                    }
                    Ok(answer) => {
                        let mut text = answer_text(&answer);
                        let used_default = text.is_empty() && a.default_value.is_some();
                        if used_default {
                            text = a.default_value.clone().unwrap_or_default();
                        }
                        if number {
                            return Ok(match text.parse::<f64>() {
                                Ok(n) if n.is_finite() => ToolOutput::ok(json!({
                                    "answered": true, "value": n, "used_default": used_default,
                                })),
                                _ => ToolOutput::failed(json!({
                                    "answered": true, "value": text, "valid": false,
                                    "message": format!("The user's answer {text:?} is not a number."),
                                })),
                            });
                        }
                        Ok(ToolOutput::ok(
                            json!({"answered": true, "value": text, "used_default": used_default}),
                        ))
                    }
                }
            }
            Kind::ConfirmAction => {
                let a: ConfirmArgs = parse_args("confirm_action", args)?;
                let risk = a.risk_level.as_deref().unwrap_or("low");
                if !matches!(risk, "low" | "medium" | "high") {
                    return Err(ToolError::invalid(format!(
                        "risk_level must be low, medium or high, not {risk:?}"
                    )));
                }
                let mut options = vec!["yes".to_string(), "no".to_string()];
                options.extend(a.alternatives.iter().cloned());
                let question = Question {
                    text: format!("Confirm ({risk} risk): {}", a.action_description.trim()),
                    question_type: "confirm".to_string(),
                    options,
                    timeout: self.timeout(a.timeout),
                    schema: None,
                    function_call: None,
                };
                match self.ask(question, ctx).await? {
                    Err((reason, message)) => Ok(no_answer(
                        reason,
                        format!("{message} Treat the action as NOT confirmed."),
                        &a.action_description,
                    )),
                    Ok(answer) => {
                        let text = answer_text(&answer);
                        if let Some(alt) = match_option(&text, &a.alternatives)
                            .filter(|_| parse_yes_no(&text).is_none())
                        {
                            return Ok(ToolOutput::ok(json!({
                                "answered": true, "confirmed": false, "alternative": alt, "answer": text,
                            })));
                        }
                        match parse_yes_no(&text) {
                            Some(confirmed) => Ok(ToolOutput::ok(json!({
                                "answered": true, "confirmed": confirmed, "answer": text,
                            }))),
                            None => Ok(ToolOutput::ok(json!({
                                "answered": true, "confirmed": false, "answer": text,
                                "message": "The answer was neither yes nor no; treat the action as NOT confirmed and read the answer.",
                            }))),
                        }
                    }
                }
            }
            Kind::GetUserPreference => {
                let a: PreferenceArgs = parse_args("get_user_preference", args)?;
                if a.options.is_empty() {
                    return Err(ToolError::invalid("options must not be empty"));
                }
                let question = Question {
                    text: format!(
                        "Which {} do you prefer?{}",
                        a.preference_type.trim(),
                        if a.allow_custom {
                            " (or type your own)"
                        } else {
                            ""
                        }
                    ),
                    question_type: "preference".to_string(),
                    options: a.options.clone(),
                    timeout: self.timeout(a.timeout),
                    schema: None,
                    function_call: None,
                };
                match self.ask(question, ctx).await? {
                    Err((reason, message)) => Ok(no_answer(reason, message, &a.preference_type)),
                    Ok(answer) => {
                        let text = answer_text(&answer);
                        match match_option(&text, &a.options) {
                            Some(choice) => Ok(ToolOutput::ok(json!({
                                "answered": true, "preference_type": a.preference_type, "choice": choice, "custom": false,
                            }))),
                            None if a.allow_custom && !text.is_empty() => {
                                Ok(ToolOutput::ok(json!({
                                    "answered": true, "preference_type": a.preference_type, "choice": text, "custom": true,
                                })))
                            }
                            None => Ok(ToolOutput::failed(json!({
                                "answered": true, "valid": false, "answer": text,
                                "message": format!("The answer {text:?} is not one of the options {:?}.", a.options),
                            }))),
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{ScriptedUser, ctx};

    fn tool(name: &str, cfg: &BuiltinConfig) -> Arc<dyn Tool> {
        tools(cfg)
            .into_iter()
            .find(|t| t.spec().name == name)
            .unwrap()
    }

    async fn run(name: &str, args: Value, user: Arc<ScriptedUser>) -> ToolOutput {
        let tmp = tempfile::tempdir().unwrap();
        let c = ctx(tmp.path()).with_interaction(user);
        tool(name, &BuiltinConfig::default())
            .call(args, &c)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn ask_question_builds_the_question_and_returns_the_answer() {
        let user = ScriptedUser::answering(vec![Ok(json!("Paris"))]);
        let out = run(
            "ask_question",
            json!({"question": "Which city?", "question_type": "choice",
                                              "options": ["Paris", "Rome"], "timeout": 60}),
            user.clone(),
        )
        .await;
        assert_eq!(out.content["answered"], true);
        assert_eq!(out.content["answer"], "Paris");
        assert_eq!(out.content["choice"], "Paris");
        let q = &user.questions()[0];
        assert_eq!(q.text, "Which city?");
        assert_eq!(q.question_type, "choice");
        assert_eq!(q.options, vec!["Paris", "Rome"]);
        assert_eq!(q.timeout, 60);
    }

    #[tokio::test]
    async fn the_default_timeout_comes_from_config() {
        let user = ScriptedUser::answering(vec![Ok(json!({"answer": "fine"}))]);
        let out = run(
            "ask_question",
            json!({"question": "How are you?"}),
            user.clone(),
        )
        .await;
        assert_eq!(out.content["answer"], "fine");
        assert_eq!(user.questions()[0].timeout, 300);
        assert_eq!(user.questions()[0].question_type, "text");
    }

    #[tokio::test]
    async fn no_answer_is_a_readable_result_not_a_crash() {
        let tmp = tempfile::tempdir().unwrap();
        // Nobody answers: the tool gives up after its timeout.
        let silent = ScriptedUser::answering(vec![]);
        let c = ctx(tmp.path()).with_interaction(silent);
        let started = std::time::Instant::now();
        let out = tool("ask_question", &BuiltinConfig::default())
            .call(json!({"question": "Anyone?", "timeout": 1}), &c)
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(out.is_error);
        assert_eq!(out.content["answered"], false);
        assert_eq!(out.content["reason"], "timed_out");

        let out = run(
            "confirm_action",
            json!({"action_description": "drop the table"}),
            ScriptedUser::answering(vec![Err(InteractionError::Declined)]),
        )
        .await;
        assert_eq!(out.content["reason"], "declined");
        assert!(
            out.content["message"]
                .as_str()
                .unwrap()
                .contains("NOT confirmed")
        );

        // The standalone context has nobody to ask.
        let c = ctx(tmp.path());
        let out = tool("get_user_preference", &BuiltinConfig::default())
            .call(
                json!({"preference_type": "language", "options": ["Rust"]}),
                &c,
            )
            .await
            .unwrap();
        assert_eq!(out.content["reason"], "no_interactive_user");
    }

    #[tokio::test]
    async fn cancellation_ends_the_wait() {
        let tmp = tempfile::tempdir().unwrap();
        let c = ctx(tmp.path()).with_interaction(ScriptedUser::answering(vec![]));
        let cancel = c.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            cancel.cancel();
        });
        let err = tool("ask_question", &BuiltinConfig::default())
            .call(json!({"question": "Anyone?"}), &c)
            .await
            .unwrap_err();
        assert_eq!(err, ToolError::Cancelled);
    }

    #[tokio::test]
    async fn confirm_action_reads_yes_no_and_alternatives() {
        let out = run(
            "confirm_action",
            json!({"action_description": "deploy", "risk_level": "high"}),
            ScriptedUser::answering(vec![Ok(json!("yes"))]),
        )
        .await;
        assert_eq!(out.content["confirmed"], true);
        let user = ScriptedUser::answering(vec![Ok(json!("No"))]);
        let out = run(
            "confirm_action",
            json!({"action_description": "deploy"}),
            user.clone(),
        )
        .await;
        assert_eq!(out.content["confirmed"], false);
        assert_eq!(user.questions()[0].question_type, "confirm");
        assert!(user.questions()[0].text.contains("deploy"));
        let out = run(
            "confirm_action",
            json!({"action_description": "deploy", "alternatives": ["deploy to staging"]}),
            ScriptedUser::answering(vec![Ok(json!("deploy to staging"))]),
        )
        .await;
        assert_eq!(out.content["confirmed"], false);
        assert_eq!(out.content["alternative"], "deploy to staging");
        let out = run(
            "confirm_action",
            json!({"action_description": "deploy"}),
            ScriptedUser::answering(vec![Ok(json!(true))]),
        )
        .await;
        assert_eq!(out.content["confirmed"], true);
    }

    #[tokio::test]
    async fn get_user_input_parses_numbers_and_uses_defaults() {
        let out = run(
            "get_user_input",
            json!({"prompt": "How many?", "input_type": "number"}),
            ScriptedUser::answering(vec![Ok(json!("42"))]),
        )
        .await;
        assert_eq!(out.content["value"], 42.0);
        let out = run(
            "get_user_input",
            json!({"prompt": "How many?", "input_type": "number"}),
            ScriptedUser::answering(vec![Ok(json!("lots"))]),
        )
        .await;
        assert!(out.is_error);
        assert_eq!(out.content["valid"], false);
        let out = run(
            "get_user_input",
            json!({"prompt": "Name?", "default_value": "main"}),
            ScriptedUser::answering(vec![Ok(json!(""))]),
        )
        .await;
        assert_eq!(out.content["value"], "main");
        assert_eq!(out.content["used_default"], true);
        let out = run(
            "get_user_input",
            json!({"prompt": "Name?", "default_value": "main"}),
            ScriptedUser::answering(vec![Err(InteractionError::TimedOut(5))]),
        )
        .await;
        assert_eq!(out.content["value"], "main");
        assert_eq!(out.content["reason"], "timed_out");
    }

    #[tokio::test]
    async fn get_user_preference_matches_options() {
        let args = json!({"preference_type": "editor", "options": ["vim", "emacs"]});
        let user = ScriptedUser::answering(vec![Ok(json!("2"))]);
        let out = run("get_user_preference", args.clone(), user.clone()).await;
        assert_eq!(out.content["choice"], "emacs");
        assert_eq!(user.questions()[0].question_type, "preference");
        assert_eq!(user.questions()[0].options, vec!["vim", "emacs"]);
        let out = run(
            "get_user_preference",
            args.clone(),
            ScriptedUser::answering(vec![Ok(json!("nano"))]),
        )
        .await;
        assert!(out.is_error);
        let mut custom = args;
        custom["allow_custom"] = json!(true);
        let out = run(
            "get_user_preference",
            custom,
            ScriptedUser::answering(vec![Ok(json!("nano"))]),
        )
        .await;
        assert_eq!(out.content["choice"], "nano");
        assert_eq!(out.content["custom"], true);
    }
}
