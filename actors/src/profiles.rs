//! Agent profiles (issue 16; the seeds' DevOps, SRE and Orchestrator agents): what an assistant
//! is unless it says otherwise — a system prompt template, a default tool set, approval
//! defaults (`interrupt_on`) and limits.
//!
//! Four profiles are built in ([`builtin`]); a tenant admin adds its own (`profiles` table).
//! An assistant names one and overrides any of its fields ([`resolve`]); what a run gets is the
//! [`AgentConfig`] that results, the same one `GET /agents/{id}` shows as `effective`.

use std::sync::Arc;

use agentry_schema::ids::{ModelConnectionId, ProfileId};
use agentry_store::assistants::Assistant;
use agentry_store::model_connections::ModelConnection;
use agentry_store::profiles::{self, ProfileSpec};
use agentry_store::{StoreError, TenantScope};
use sea_orm::ConnectionTrait;

/// The ids of the built-in profiles, in the order they are listed.
pub const BUILTIN_IDS: [&str; 4] = ["general", "devops", "sre", "orchestrator"];

const GENERAL_PROMPT: &str = "\
You are {{assistant_name}}, a general-purpose assistant. Today is {{date}} (UTC).

How you work:
- Understand the request first. If it is ambiguous in a way that would change what you do, ask \
one short question (ask_question) instead of guessing.
- Look before you act: read files, list directories and check state with the read-only tools \
before you change anything.
- Use your tools ({{tools}}) when they help, and never invent their results. If a call fails, read \
its error and fix the call, or say what went wrong.
- Risky actions (writing files, running commands, delegating) are approved by a person: say in one \
sentence what you are about to do and why just before the call, so they can decide.
- For work with several steps, keep a todo list (write_todos) and update it as you go.

How you answer: the result first, then the evidence (what you checked or changed, with file \
paths), then anything left open. Be concise.";

const DEVOPS_PROMPT: &str = "\
You are {{assistant_name}}, a DevOps engineer. Today is {{date}} (UTC). You deploy, configure and \
maintain services on the hosts you are given, with these tools: {{tools}}.

Check first, every time, before you change anything:
1. The current state: get_service_status for every service involved, get_system_stats for load, \
memory and disk, and the relevant configuration files (read_file, grep).
2. What could break: what depends on the service you touch, whether disk or memory is short, \
whether a restart drops connections.
3. How to undo it: keep the previous value, version or file (copy_file the configuration to a \
.bak first).

Then act in small, reversible steps: one change, then verify it (status, logs, a health check) \
before the next. Commands (execute), file changes and service start/stop/restart are approved by \
a person: state the exact change and its expected effect in one line before each call. Never run \
destructive commands (rm -rf, dropping data, force pushes) unless the user asked for exactly that.

Ask (ask_question or confirm_action) before acting when the target is unclear (staging or \
production?), when the change means downtime, or when what you found contradicts the request.

Report: what you changed (files, services, commands), how you verified it, the state now, and how \
to roll it back. If something failed, say so first, with the error and what you tried.";

const SRE_PROMPT: &str = "\
You are {{assistant_name}}, a site reliability engineer on call. Today is {{date}} (UTC). You \
investigate incidents and keep services healthy, with these tools: {{tools}}.

Your default is read-only: observe, measure, correlate. Reading files and logs, system stats, \
service status and runbooks (fetch_url, or a skill) need nobody's permission. Anything that \
changes the system — restarting or stopping a service, running a command — is approved by a \
person, and you ask for it only with evidence that it will help.

When an alert or a problem comes in, check in this order:
1. Impact: what is failing, for whom, since when (get_service_status on the services involved).
2. Resources: get_system_stats — a full disk, memory pressure or a saturated CPU explains many \
symptoms.
3. Errors and recent changes: the service's logs and configuration (read_file, grep for ERROR, \
timeout, OOM, refused) around the time it started.
4. The runbook, if there is one.

Form a hypothesis from the evidence, test it with one more read-only check, and only then propose \
a fix: the smallest action that limits the impact, with its risk.

Ask (ask_question) when you need access you do not have, when a fix risks data or availability, \
or when the evidence points two ways.

Report in this order: status (mitigated, ongoing or unknown), impact, root cause or best \
hypothesis with its evidence (quote log lines and numbers), actions taken, follow-ups. In a long \
investigation keep a timeline of what you checked with write_todos.";

const ORCHESTRATOR_PROMPT: &str = "\
You are {{assistant_name}}, an orchestrator. Today is {{date}} (UTC). You do not do the work \
yourself: you split a request into sub-tasks, delegate each to a sub-agent with the `task` tool, \
and combine their answers. Your tools: {{tools}}.

How to delegate:
1. Plan first: break the request into sub-tasks, each with one goal and one expected result, and \
write them down with write_todos.
2. Make every task description self-contained: a sub-agent sees nothing of this conversation, so \
include every fact, path, name and constraint it needs, and say what it should return.
3. Pick the specialist: profile \"devops\" to deploy, configure or change services; profile \"sre\" \
to investigate incidents read-only; profile \"general\" otherwise — or a named assistant when the \
user has one for the job.
4. Independent sub-tasks run in parallel: call `task` several times in the same step. Dependent \
ones run in order, each given the results it needs.
5. Check every answer against its goal. If a sub-agent failed or answered only in part, delegate a \
corrected task once, or report the gap; do not loop.

Ask the user (ask_question) before delegating when the request is ambiguous or the plan involves \
changes they may not expect. The sub-agents' risky actions are approved by the user as they happen.

Report: the combined result first; then one line per sub-task (what was done, by which \
specialist); then any conflicts between the answers and how you settled them; then what is still \
open.";

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A built-in profile, or `None` for any other id.
pub fn builtin(id: &str) -> Option<ProfileSpec> {
    Some(match id {
        "general" => ProfileSpec {
            name: "General".into(),
            description: "A general assistant with every tool; delegating a task needs approval."
                .into(),
            system_prompt: GENERAL_PROMPT.into(),
            tools: None,
            interrupt_on: strings(&["task"]),
            recursion_limit: 25,
            timeout_secs: 600,
        },
        "devops" => ProfileSpec {
            name: "DevOps".into(),
            description:
                "Deploys and maintains services: services, shell, files and system tools; \
                          commands, file changes and service changes need approval."
                    .into(),
            system_prompt: DEVOPS_PROMPT.into(),
            tools: Some(strings(&[
                "services:*",
                "shell:*",
                "files:*",
                "system:*",
                "todos:*",
                "interaction:*",
                "memory:*",
                "skills:*",
            ])),
            interrupt_on: strings(&["task"]),
            recursion_limit: 50,
            timeout_secs: 1800,
        },
        "sre" => ProfileSpec {
            name: "SRE".into(),
            description: "Investigates incidents: system stats, service status, logs and files \
                          read-only, fetch for runbooks; every change needs approval."
                .into(),
            system_prompt: SRE_PROMPT.into(),
            tools: Some(strings(&[
                "files:read_file",
                "files:list_directory",
                "files:glob",
                "files:grep",
                "system:*",
                "services:*",
                "shell:execute",
                "web:fetch_url",
                "todos:*",
                "interaction:*",
                "memory:*",
                "skills:*",
            ])),
            interrupt_on: strings(&[
                "start_service",
                "stop_service",
                "restart_service",
                "execute",
                "task",
            ]),
            recursion_limit: 40,
            timeout_secs: 1200,
        },
        "orchestrator" => ProfileSpec {
            name: "Orchestrator".into(),
            description:
                "Splits work into sub-tasks and delegates them to sub-agents with `task`; \
                          few direct tools."
                    .into(),
            system_prompt: ORCHESTRATOR_PROMPT.into(),
            tools: Some(strings(&[
                "task:*",
                "todos:*",
                "interaction:*",
                "memory:recall",
                "skills:*",
            ])),
            interrupt_on: Vec::new(),
            recursion_limit: 30,
            timeout_secs: 3600,
        },
        _ => return None,
    })
}

pub fn is_builtin(id: &ProfileId) -> bool {
    BUILTIN_IDS.contains(&id.as_str())
}

/// A profile as an assistant sees it: a built-in one or one of the tenant's.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedProfile {
    pub id: ProfileId,
    pub builtin: bool,
    pub spec: ProfileSpec,
}

/// The profile `id` of the tenant: a built-in one, or the tenant's own. `None` when neither
/// exists (it was deleted, or never was).
pub async fn find(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    id: &ProfileId,
) -> Result<Option<ResolvedProfile>, StoreError> {
    if let Some(spec) = builtin(id.as_str()) {
        return Ok(Some(ResolvedProfile {
            id: id.clone(),
            builtin: true,
            spec,
        }));
    }
    Ok(profiles::get(db, scope, id)
        .await?
        .map(|p| ResolvedProfile {
            id: p.id,
            builtin: false,
            spec: p.spec,
        }))
}

/// Which model an assistant's runs use: the platform's (the server's `[llm]` config, with the
/// assistant's provider/model overrides) or one of the tenant's model connections.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum ModelChoice {
    #[default]
    Platform,
    Connection(Arc<ModelConnection>),
    /// The assistant names a connection that does not exist (any more).
    Missing(ModelConnectionId),
}

/// What a run of an assistant gets: its own settings over its profile's.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    pub profile: ProfileId,
    /// The system prompt template (see [`render_prompt`]).
    pub system_prompt: String,
    /// Tool names or patterns; `None` = every tool.
    pub tools: Option<Vec<String>>,
    /// Tools that always need approval, on top of the tools' own policy.
    pub interrupt_on: Vec<String>,
    pub auto_approve: bool,
    pub recursion_limit: u32,
    pub timeout_secs: u32,
    pub max_retries: u32,
    /// Which model its runs use (see [`effective`]).
    pub model: ModelChoice,
}

/// An assistant's settings over its profile's: each field the assistant sets wins; the rest
/// come from the profile. A list the assistant sets replaces the profile's (it is not merged).
pub fn resolve(assistant: &Assistant, profile: &ProfileSpec) -> AgentConfig {
    let a = &assistant.spec;
    AgentConfig {
        profile: a.profile.clone(),
        system_prompt: a
            .system_prompt
            .clone()
            .unwrap_or_else(|| profile.system_prompt.clone()),
        tools: a.tools.clone().or_else(|| profile.tools.clone()),
        interrupt_on: a
            .interrupt_on
            .clone()
            .unwrap_or_else(|| profile.interrupt_on.clone()),
        auto_approve: a.auto_approve,
        recursion_limit: a.recursion_limit.unwrap_or(profile.recursion_limit),
        timeout_secs: a.timeout_secs.unwrap_or(profile.timeout_secs),
        max_retries: a.max_retries,
        model: ModelChoice::Platform,
    }
}

/// The effective settings of `assistant`. An assistant whose profile is gone (deleted by hand
/// in the database) runs as `general`, with a warning.
pub async fn effective(
    db: &impl ConnectionTrait,
    scope: &TenantScope,
    assistant: &Assistant,
) -> Result<Arc<AgentConfig>, StoreError> {
    let spec = match find(db, scope, &assistant.spec.profile).await? {
        Some(p) => p.spec,
        None => {
            tracing::warn!(assistant = %assistant.id, profile = %assistant.spec.profile, "the assistant's profile does not exist; it runs as `general`");
            builtin("general").unwrap_or_else(|| unreachable!("general is built in"))
        }
    };
    let mut agent = resolve(assistant, &spec);
    if let Some(id) = &assistant.spec.model_connection {
        agent.model = match agentry_store::model_connections::get(db, scope, id).await? {
            Some(c) => ModelChoice::Connection(Arc::new(c)),
            None => ModelChoice::Missing(id.clone()),
        };
    }
    Ok(Arc::new(agent))
}

/// The values a prompt template may use.
pub struct PromptVars<'a> {
    pub assistant_name: &'a str,
    /// The tools offered to the model in this run.
    pub tools: &'a [&'a str],
}

/// Fill in a system prompt template: `{{assistant_name}}`, `{{date}}` (UTC, `YYYY-MM-DD`) and
/// `{{tools}}` (the names of the tools offered, comma-separated). Other text, including other
/// `{{…}}`, is left as it is.
pub fn render_prompt(template: &str, vars: &PromptVars<'_>) -> String {
    let tools = if vars.tools.is_empty() {
        "none".to_string()
    } else {
        vars.tools.join(", ")
    };
    template
        .replace("{{assistant_name}}", vars.assistant_name)
        .replace(
            "{{date}}",
            &chrono::Utc::now().format("%Y-%m-%d").to_string(),
        )
        .replace("{{tools}}", &tools)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_schema::ids::{AssistantId, TenantId};
    use agentry_store::assistants::AssistantSpec;

    fn assistant(spec: AssistantSpec) -> Assistant {
        let now = chrono::Utc::now();
        Assistant {
            tenant_id: TenantId::new(),
            id: AssistantId::default_assistant(),
            spec,
            created_at: now,
            updated_at: now,
        }
    }

    #[test]
    fn every_builtin_profile_has_its_own_prompt_tools_and_approvals() {
        let all: Vec<ProfileSpec> = BUILTIN_IDS.iter().map(|id| builtin(id).unwrap()).collect();
        for (i, a) in all.iter().enumerate() {
            assert!(a.system_prompt.contains("{{assistant_name}}"));
            assert!(a.system_prompt.len() > 800, "{} is too thin", a.name);
            for b in &all[i + 1..] {
                assert_ne!(a.system_prompt, b.system_prompt);
                assert_ne!(a.tools, b.tools);
            }
        }
        let sre = builtin("sre").unwrap();
        let tools = sre.tools.unwrap();
        assert!(tools.contains(&"files:read_file".to_string()));
        assert!(
            !tools
                .iter()
                .any(|t| t == "files:*" || t == "files:write_file")
        );
        assert!(sre.interrupt_on.contains(&"restart_service".to_string()));
        assert_eq!(
            builtin("orchestrator").unwrap().tools.unwrap()[0],
            "task:*",
            "an orchestrator delegates"
        );
        assert!(builtin("wizard").is_none());
    }

    #[test]
    fn the_assistants_own_fields_override_its_profile() {
        let sre = builtin("sre").unwrap();
        let inherited = resolve(
            &assistant(AssistantSpec {
                profile: ProfileId::try_from("sre").unwrap(),
                ..AssistantSpec::default()
            }),
            &sre,
        );
        assert_eq!(inherited.system_prompt, sre.system_prompt);
        assert_eq!(inherited.tools, sre.tools);
        assert_eq!(inherited.interrupt_on, sre.interrupt_on);
        assert_eq!(
            (inherited.recursion_limit, inherited.timeout_secs),
            (40, 1200)
        );
        let own = resolve(
            &assistant(AssistantSpec {
                profile: ProfileId::try_from("sre").unwrap(),
                system_prompt: Some("Be brief.".into()),
                tools: Some(vec!["files:*".into()]),
                interrupt_on: Some(Vec::new()),
                recursion_limit: Some(3),
                timeout_secs: Some(9),
                ..AssistantSpec::default()
            }),
            &sre,
        );
        assert_eq!(own.system_prompt, "Be brief.");
        assert_eq!(own.tools, Some(vec!["files:*".to_string()]));
        assert!(
            own.interrupt_on.is_empty(),
            "an empty list is an override too"
        );
        assert_eq!((own.recursion_limit, own.timeout_secs), (3, 9));
    }

    #[test]
    fn templates_fill_in_what_they_name_and_leave_the_rest() {
        let out = render_prompt(
            "I am {{assistant_name}} on {{date}} with {{tools}}; {{unknown}} stays.",
            &PromptVars {
                assistant_name: "Ops",
                tools: &["read_file", "execute"],
            },
        );
        let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
        assert_eq!(
            out,
            format!("I am Ops on {today} with read_file, execute; {{{{unknown}}}} stays.")
        );
    }
}
