//! The pipeline's steps and their order, with a host that records what it was asked to do.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio_util::sync::CancellationToken;

use super::*;
use crate::tool::{NoUserInteraction, WorkspaceInfo};

/// A tool whose behaviour each test picks.
struct Probe {
    spec: ToolSpec,
    calls: AtomicU32,
    behaviour: Behaviour,
}

enum Behaviour {
    /// Echo the arguments.
    Echo,
    /// Ask the user, then answer what they said.
    Ask,
    /// Unavailable this many times, then fine.
    FlakyFor(u32),
    /// Never finish.
    Hang,
}

#[async_trait]
impl Tool for Probe {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        match self.behaviour {
            Behaviour::Echo => Ok(ToolOutput::ok(args)),
            Behaviour::Ask => {
                let answer = ctx
                    .interaction
                    .ask(Question {
                        text: "well?".into(),
                        question_type: "text".into(),
                        options: Vec::new(),
                        timeout: 60,
                        schema: None,
                        function_call: None,
                    })
                    .await
                    .map_err(|e| ToolError::failed(e.to_string()))?;
                Ok(ToolOutput::ok(answer))
            }
            Behaviour::FlakyFor(k) if n < k => Err(ToolError::Unavailable("down".into())),
            Behaviour::FlakyFor(_) => Ok(ToolOutput::ok(json!("up"))),
            Behaviour::Hang => std::future::pending().await,
        }
    }
}

fn registry(behaviour: Behaviour, timeout: Duration, approval: bool) -> (ToolRegistry, Arc<Probe>) {
    let probe = Arc::new(Probe {
        spec: ToolSpec::new(
            "test",
            "probe",
            "a probe",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        )
        .with_timeout(timeout)
        .with_approval(approval),
        calls: AtomicU32::new(0),
        behaviour,
    });
    let mut reg = ToolRegistry::new();
    reg.register(probe.clone()).unwrap();
    (reg, probe)
}

/// An interaction that answers after a delay.
struct SlowUser(Duration);

#[async_trait]
impl UserInteraction for SlowUser {
    async fn ask(&self, _question: Question) -> Result<Value, InteractionError> {
        tokio::time::sleep(self.0).await;
        Ok(json!("late answer"))
    }
}

struct Deny;

impl ToolPolicy for Deny {
    fn check(&self, spec: &ToolSpec) -> Result<(), String> {
        Err(format!("{} is not for you", spec.name))
    }
}

/// Records every step; stops (like the agent loop) or not on a cancel.
struct Recorder {
    steps: Arc<Mutex<Vec<String>>>,
    policy: Box<dyn ToolPolicy>,
    approval: Option<Approval>,
    user: Arc<dyn UserInteraction>,
    cancel: CancellationToken,
    retry: Retry,
    stop_on_cancel: bool,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            steps: Arc::default(),
            policy: Box::new(AllowAll),
            approval: None,
            user: Arc::new(NoUserInteraction::new("nobody")),
            cancel: CancellationToken::new(),
            retry: Retry::NONE,
            stop_on_cancel: false,
        }
    }

    fn log(&self, s: impl Into<String>) {
        self.steps.lock().unwrap().push(s.into());
    }

    fn steps(&self) -> Vec<String> {
        self.steps.lock().unwrap().clone()
    }
}

#[derive(Debug, PartialEq)]
struct Stopped;

#[async_trait]
impl CallHost for Recorder {
    type Stop = Stopped;

    fn started(&mut self, call: &CallRequest) {
        self.log(format!("started {}", call.name));
    }

    fn policy(&self) -> &dyn ToolPolicy {
        self.policy.as_ref()
    }

    fn approval_required(&self, tool: &dyn Tool, _call: &CallRequest, args: &Value) -> bool {
        tool.needs_approval(args)
    }

    async fn approve(
        &mut self,
        _tool: &dyn Tool,
        _call: &CallRequest,
        args: &Value,
    ) -> Result<Approval, Stopped> {
        self.log(format!("approve {args}"));
        Ok(self.approval.clone().expect("the test set an approval"))
    }

    async fn before_call(
        &mut self,
        _call: &CallRequest,
        args: &Value,
        approved: Option<bool>,
        _by: Option<UserId>,
    ) -> Result<(), Stopped> {
        self.log(format!("before_call {args} {approved:?}"));
        Ok(())
    }

    async fn context(
        &mut self,
        _spec: &ToolSpec,
        call: &CallRequest,
    ) -> Result<ToolContext, ToolError> {
        self.log("context");
        let mut ctx = ToolContext::standalone(WorkspaceInfo {
            root: std::env::temp_dir(),
            quota_bytes: 0,
            sandbox: Default::default(),
        })
        .with_interaction(self.user.clone())
        .with_cancel(self.cancel.child_token());
        ctx.tool_call_id = call.id.clone();
        Ok(ctx)
    }

    fn retry_delay(&self, attempt: u32) -> Option<Duration> {
        self.retry.delay(attempt)
    }

    fn cancelled(&mut self) -> Result<Duration, Stopped> {
        self.log("cancelled");
        if self.stop_on_cancel {
            Err(Stopped)
        } else {
            Ok(Duration::from_millis(50))
        }
    }

    async fn audit(&mut self, call: &FinishedCall) -> Result<(), Stopped> {
        self.log(format!("audit {:?} {}", call.stage, call.outcome_label()));
        Ok(())
    }

    fn emit(&mut self, call: &FinishedCall) {
        self.log(format!("emit {}", call.outcome_label()));
    }
}

fn request(name: &str, arguments: Value) -> CallRequest {
    CallRequest {
        id: "call_1".into(),
        name: name.into(),
        arguments,
    }
}

#[tokio::test]
async fn a_plain_call_runs_then_is_audited_then_emitted() {
    let (reg, probe) = registry(Behaviour::Echo, Duration::from_secs(5), false);
    let mut host = Recorder::new();
    let done = run_call(&mut host, &reg, request("probe", json!({"n": 1})))
        .await
        .unwrap();
    assert_eq!(
        done.outcome,
        Outcome::Result(Ok(ToolOutput::ok(json!({"n": 1}))))
    );
    assert_eq!(done.stage, Stage::Call);
    assert_eq!(done.approved, None);
    assert_eq!(probe.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        host.steps(),
        [
            "started probe",
            "before_call {\"n\":1} None",
            "context",
            "audit Call success",
            "emit success"
        ]
    );
}

#[tokio::test]
async fn policy_and_schema_refuse_before_anyone_is_asked() {
    // An unknown tool names only the tools the caller may use.
    let (reg, _) = registry(Behaviour::Echo, Duration::from_secs(5), true);
    let mut host = Recorder::new();
    let done = run_call(&mut host, &reg, request("nope", json!({})))
        .await
        .unwrap();
    assert_eq!(done.stage, Stage::Lookup);
    let Outcome::Result(Err(ToolError::NotFound(msg))) = &done.outcome else {
        panic!("{:?}", done.outcome)
    };
    assert!(msg.ends_with("available tools: probe"), "{msg}");
    host.policy = Box::new(Deny);
    let done = run_call(&mut host, &reg, request("nope", json!({})))
        .await
        .unwrap();
    let Outcome::Result(Err(ToolError::NotFound(msg))) = &done.outcome else {
        panic!("{:?}", done.outcome)
    };
    assert!(
        msg.ends_with("available tools: "),
        "a denied tool is not named: {msg}"
    );

    // Denied by policy: never validated, never approved, never run.
    let (reg, probe) = registry(Behaviour::Echo, Duration::from_secs(5), true);
    let mut host = Recorder::new();
    host.policy = Box::new(Deny);
    let done = run_call(&mut host, &reg, request("probe", json!({"n": "x"})))
        .await
        .unwrap();
    assert_eq!(done.stage, Stage::Policy);
    assert!(matches!(
        done.outcome,
        Outcome::Result(Err(ToolError::PermissionDenied(_)))
    ));
    // Bad arguments: refused before the approval is asked.
    let mut host = Recorder::new();
    let done = run_call(&mut host, &reg, request("probe", json!({"n": "x"})))
        .await
        .unwrap();
    assert_eq!(done.stage, Stage::Schema);
    assert!(matches!(
        done.outcome,
        Outcome::Result(Err(ToolError::InvalidArguments { .. }))
    ));
    let done = run_call(
        &mut host,
        &reg,
        request("probe", json!({"__invalid_json__": "{n:"})),
    )
    .await
    .unwrap();
    assert_eq!(done.stage, Stage::Schema);
    assert!(host.steps().iter().all(|s| !s.starts_with("approve")));
    assert_eq!(probe.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_refused_approval_never_runs_the_call_and_an_edit_is_checked_again() {
    let (reg, probe) = registry(Behaviour::Echo, Duration::from_secs(5), true);
    let mut host = Recorder::new();
    let by = UserId::new();
    host.approval = Some(Approval::Refused {
        refusal: Refusal {
            kind: RefusalKind::Rejected,
            message: "no".into(),
            audit: "rejected by the user".into(),
        },
        by: Some(by),
    });
    let done = run_call(&mut host, &reg, request("probe", json!({"n": 1})))
        .await
        .unwrap();
    assert_eq!(done.stage, Stage::Approval);
    assert_eq!(done.approved, Some(false));
    assert_eq!(done.approved_by, Some(by));
    assert_eq!(done.outcome_label(), "refused");
    assert_eq!(
        host.steps(),
        [
            "started probe",
            "approve {\"n\":1}",
            "audit Approval refused",
            "emit refused"
        ]
    );
    assert_eq!(
        done.clone().into_result(),
        Err(ToolError::PermissionDenied("no".into()))
    );

    // An edit that breaks the schema is refused before the call.
    host.approval = Some(Approval::Approved {
        args: Some(json!({"n": "two"})),
        by: None,
    });
    let done = run_call(&mut host, &reg, request("probe", json!({"n": 1})))
        .await
        .unwrap();
    assert_eq!(done.stage, Stage::Schema);
    assert_eq!(done.args, json!({"n": "two"}));
    assert_eq!(done.approved, Some(true));
    assert_eq!(probe.calls.load(Ordering::SeqCst), 0);

    // A good edit runs with the edited arguments.
    host.approval = Some(Approval::Approved {
        args: Some(json!({"n": 2})),
        by: None,
    });
    let done = run_call(&mut host, &reg, request("probe", json!({"n": 1})))
        .await
        .unwrap();
    assert_eq!(
        done.outcome,
        Outcome::Result(Ok(ToolOutput::ok(json!({"n": 2}))))
    );
    assert!(
        host.steps()
            .contains(&"before_call {\"n\":2} Some(true)".to_string())
    );
}

/// The call's timeout does not count the time its question waits for the user: a 200 ms tool
/// whose user answers after 600 ms still succeeds.
#[tokio::test]
async fn a_question_stops_the_calls_clock() {
    let (reg, _) = registry(Behaviour::Ask, Duration::from_millis(200), false);
    let mut host = Recorder::new();
    host.user = Arc::new(SlowUser(Duration::from_millis(600)));
    let done = run_call(&mut host, &reg, request("probe", json!({})))
        .await
        .unwrap();
    assert_eq!(
        done.outcome,
        Outcome::Result(Ok(ToolOutput::ok(json!("late answer"))))
    );
    // The clock still runs when nobody is asked.
    let (reg, _) = registry(Behaviour::Hang, Duration::from_millis(200), false);
    let done = run_call(&mut host, &reg, request("probe", json!({})))
        .await
        .unwrap();
    assert_eq!(
        done.outcome,
        Outcome::Result(Err(ToolError::Timeout(Duration::from_millis(200))))
    );
}

#[tokio::test]
async fn an_unavailable_backend_is_retried_with_a_fresh_context() {
    let (reg, probe) = registry(Behaviour::FlakyFor(2), Duration::from_secs(5), false);
    let mut host = Recorder::new();
    host.retry = Retry {
        max_retries: 2,
        base_delay: Duration::from_millis(1),
    };
    let done = run_call(&mut host, &reg, request("probe", json!({})))
        .await
        .unwrap();
    assert_eq!(
        done.outcome,
        Outcome::Result(Ok(ToolOutput::ok(json!("up"))))
    );
    assert_eq!(probe.calls.load(Ordering::SeqCst), 3);
    assert_eq!(host.steps().iter().filter(|s| *s == "context").count(), 3);

    // Out of retries: the last error is the result.
    let (reg, probe) = registry(Behaviour::FlakyFor(5), Duration::from_secs(5), false);
    let done = run_call(&mut host, &reg, request("probe", json!({})))
        .await
        .unwrap();
    assert!(matches!(
        done.outcome,
        Outcome::Result(Err(ToolError::Unavailable(_)))
    ));
    assert_eq!(probe.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_cancel_stops_the_pipeline_or_is_recorded_as_the_host_says() {
    // The agent loop's way: the run ends, nothing is audited.
    let (reg, _) = registry(Behaviour::Hang, Duration::from_secs(60), false);
    let mut host = Recorder::new();
    host.stop_on_cancel = true;
    let cancel = host.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    let r = run_call(&mut host, &reg, request("probe", json!({}))).await;
    assert_eq!(r.unwrap_err(), Stopped);
    assert!(host.steps().iter().all(|s| !s.starts_with("audit")));

    // /mcp's way: a grace period, then the call is audited as cancelled.
    let mut host = Recorder::new();
    host.cancel.cancel();
    let done = run_call(&mut host, &reg, request("probe", json!({})))
        .await
        .unwrap();
    assert_eq!(done.outcome, Outcome::Result(Err(ToolError::Cancelled)));
    assert!(host.steps().contains(&"audit Call failed".to_string()));
}

#[test]
fn retry_delays_double_and_stop() {
    let r = Retry {
        max_retries: 3,
        base_delay: Duration::from_millis(100),
    };
    let delays: Vec<_> = (0..5).map(|n| r.delay(n)).collect();
    assert_eq!(
        delays,
        [
            Some(Duration::from_millis(100)),
            Some(Duration::from_millis(200)),
            Some(Duration::from_millis(400)),
            None,
            None
        ]
    );
    assert_eq!(Retry::NONE.delay(0), None);
}
