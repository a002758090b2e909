//! Agent cards: the public one at `/a2a/{tenant_id}/{agent_id}/.well-known/agent-card.json`
//! and the extended one (`GetExtendedAgentCard`, the caller's view).
//!
//! The public card is the same for every well-formed path, an assistant or not: Agentry has no
//! flag by which a tenant marks an assistant public, so the card a caller without a key reads
//! tells nothing of the tenant (not even whether the assistant exists) — only how to talk to the
//! agent (the JSON-RPC interface, the bearer scheme) and that an extended card exists. The
//! extended card, for a key of the tenant, carries the assistant's name, description and
//! skills (docs/a2a.md, "Agent cards").

use agentry_actors::profiles;
use agentry_schema::ids::{AssistantId, TenantId};
use agentry_store::assistants::Assistant;
use agentry_store::skills;
use serde_json::{Value, json};

use crate::auth::TenantCaller;
use crate::error::ApiResult;
use crate::state::AppState;

/// The protocol version served (`supportedInterfaces[].protocolVersion`, `A2A-Version`).
pub const PROTOCOL_VERSION: &str = "1.0";

/// Where an agent is served: the server's base URL (as the client reached it), the tenant and
/// the assistant.
pub struct AgentUrl<'a> {
    pub base: &'a str,
    pub tenant: TenantId,
    pub agent: &'a AssistantId,
}

impl AgentUrl<'_> {
    /// The agent's JSON-RPC endpoint, which is also its base URL (the card is below it).
    pub fn endpoint(&self) -> String {
        format!("{}/a2a/{}/{}", self.base, self.tenant, self.agent)
    }
}

/// What both cards share: the interface, the security scheme, the capabilities.
fn card(url: &AgentUrl<'_>, name: &str, description: &str, skills: Vec<Value>) -> Value {
    json!({
        "name": name,
        "description": description,
        "supportedInterfaces": [{
            "url": url.endpoint(),
            "protocolBinding": "JSONRPC",
            "protocolVersion": PROTOCOL_VERSION,
            "tenant": url.tenant.to_string(),
        }],
        "provider": {"organization": "Agentry", "url": url.base},
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": {
            "streaming": true,
            "pushNotifications": true,
            "extendedAgentCard": true,
        },
        "securitySchemes": {
            "bearer": {"httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "bearerFormat": "agk_…",
                "description": "An API key of the agent's tenant (its user's tasks are the \
                                key's user's)",
            }},
        },
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": skills,
    })
}

/// The card anyone may read: nothing of the tenant (see the module's comment).
pub fn public_card(url: &AgentUrl<'_>) -> Value {
    card(
        url,
        "Agentry agent",
        "An assistant of an Agentry tenant. Its name, description and skills are for the \
         tenant's own keys: call GetExtendedAgentCard with an API key of the tenant as a bearer \
         token.",
        vec![json!({
            "id": "chat",
            "name": "Chat",
            "description": "Send a message; the assistant answers, using its tools. A call that \
                            needs a person's approval makes the task input-required.",
            "tags": ["chat"],
        })],
    )
}

/// The card of `assistant` as `caller` sees it: its name and description, one skill for the
/// assistant itself (its profile and tools as tags) and one per skill its runs may read.
pub async fn extended_card(
    state: &AppState,
    caller: &TenantCaller,
    url: &AgentUrl<'_>,
    assistant: &Assistant,
) -> ApiResult<Value> {
    let scope = caller.scope();
    let effective = profiles::effective(&state.db, &scope, assistant).await?;
    let spec = &assistant.spec;
    let mut tags = vec![format!("profile:{}", spec.profile)];
    if let Some(tools) = &effective.tools {
        tags.extend(tools.iter().map(|t| format!("tool:{t}")));
    }
    let description = if spec.description.trim().is_empty() {
        format!("The {} assistant", spec.name)
    } else {
        spec.description.clone()
    };
    let mut skills = vec![json!({
        "id": assistant.id.to_string(),
        "name": spec.name,
        "description": description,
        "tags": tags,
    })];
    let visible = skills::list_visible(&state.db, &scope, caller.user_id()).await?;
    for s in visible {
        let allowed = spec
            .skills
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n.as_str() == s.name.as_str()));
        if allowed {
            skills.push(json!({
                "id": format!("skill:{}", s.name),
                "name": s.name.to_string(),
                "description": s.description,
                "tags": ["skill"],
            }));
        }
    }
    Ok(card(url, &spec.name, &description, skills))
}
