//! The skill tools (`load_skill`, `read_skill_file`, service `skills`): progressive disclosure
//! of the skills the caller sees (the tenant's and their own, narrowed by the assistant's
//! `skills` selection). The system prompt lists only each skill's name and description;
//! `load_skill` returns its instructions (the body of `SKILL.md`) and its file listing, and
//! `read_skill_file` reads one of its other files as text.
//!
//! These tools only return text. A script shipped in a skill is never run by them: the model
//! runs it, if at all, through the `execute` tool, in the sandbox, with that tool's approval.

use std::sync::Arc;

use agentry_schema::ids::{SkillName, TenantId, UserId};
use agentry_store::skills::{self, Skill};
use agentry_store::{PlatformScope, TenantScope, assistants, sessions};
use agentry_tools::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use async_trait::async_trait;
use sea_orm::DatabaseConnection;
use serde_json::{Value, json};

pub const SERVICE: &str = "skills";
/// Bytes of a file `read_skill_file` returns in one call (more: ask with `offset`).
pub const MAX_READ_BYTES: usize = 64 * 1024;

pub fn skill_tools(db: DatabaseConnection) -> Vec<Arc<dyn Tool>> {
    let name_schema = json!({"type": "string", "minLength": 1, "maxLength": 64});
    vec![
        Arc::new(LoadSkill {
            db: db.clone(),
            spec: ToolSpec::new(
                SERVICE,
                "load_skill",
                "Load one of the skills listed in the system prompt: returns its instructions (follow them) and the list of its other files (read them with read_skill_file). Scripts in a skill are not run by this tool; run them only with the execute tool, which asks for approval.",
                json!({
                    "type": "object",
                    "properties": {"name": name_schema},
                    "required": ["name"],
                    "additionalProperties": false
                }),
            ),
        }),
        Arc::new(ReadSkillFile {
            db,
            spec: ToolSpec::new(
                SERVICE,
                "read_skill_file",
                "Read a file of a skill (a path from load_skill's file list) as text, up to 64 KiB per call; use `offset` for the rest. Binary files are reported, not returned.",
                json!({
                    "type": "object",
                    "properties": {
                        "name": name_schema,
                        "path": {"type": "string", "minLength": 1, "maxLength": 255},
                        "offset": {"type": "integer", "minimum": 0, "default": 0}
                    },
                    "required": ["name", "path"],
                    "additionalProperties": false
                }),
            ),
        }),
    ]
}

fn store_failed(e: impl std::fmt::Display) -> ToolError {
    ToolError::Failed {
        message: format!("could not read the skill: {e}"),
        retryable: true,
    }
}

/// Which skills the run's assistant sees: `None` = all, else these names. Read from the
/// session's assistant; a call with no stored session (the `/mcp` server, a tool server) sees
/// every skill its user sees.
pub async fn selection(
    db: &DatabaseConnection,
    scope: &TenantScope,
    ctx: &ToolContext,
) -> Result<Option<Vec<String>>, ToolError> {
    let Some(session) = sessions::get(db, scope, ctx.session_id)
        .await
        .map_err(store_failed)?
    else {
        return Ok(None);
    };
    Ok(assistants::get(db, scope, &session.assistant_id)
        .await
        .map_err(store_failed)?
        .and_then(|a| a.spec.skills))
}

/// Whether a selection admits a skill.
pub fn admits(selection: Option<&[String]>, name: &str) -> bool {
    selection.is_none_or(|names| names.iter().any(|n| n == name))
}

/// The skill `name` as the caller sees it, or a not-found that says what to do.
async fn visible(
    db: &DatabaseConnection,
    tenant: TenantId,
    user: UserId,
    ctx: &ToolContext,
    raw: &str,
) -> Result<(TenantScope, Skill), ToolError> {
    let unknown = || {
        ToolError::NotFound(format!(
            "no skill named {raw:?} is available; use one of the names the system prompt lists"
        ))
    };
    let name = SkillName::try_from(raw.trim()).map_err(|_| unknown())?;
    let scope = PlatformScope::new().tenant(tenant);
    let sel = selection(db, &scope, ctx).await?;
    if !admits(sel.as_deref(), name.as_str()) {
        return Err(unknown());
    }
    let skill = skills::find_visible(db, &scope, user, &name)
        .await
        .map_err(store_failed)?
        .ok_or_else(unknown)?;
    Ok((scope, skill))
}

struct LoadSkill {
    db: DatabaseConnection,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for LoadSkill {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let raw = args["name"].as_str().unwrap_or_default();
        let (scope, skill) = visible(&self.db, ctx.tenant_id, ctx.user_id, ctx, raw).await?;
        let files: Vec<Value> = skills::files(&self.db, &scope, skill.owner, &skill.name)
            .await
            .map_err(store_failed)?
            .into_iter()
            .filter(|f| f.path != "SKILL.md")
            .map(|f| json!({"path": f.path, "size": f.size}))
            .collect();
        Ok(ToolOutput::ok(json!({
            "name": skill.name.as_str(),
            "description": skill.description,
            "scope": skill.owner.scope_name(),
            "instructions": skill.instructions,
            "files": files,
        })))
    }
}

struct ReadSkillFile {
    db: DatabaseConnection,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for ReadSkillFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let raw = args["name"].as_str().unwrap_or_default();
        let path = args["path"].as_str().unwrap_or_default();
        let offset = usize::try_from(args["offset"].as_u64().unwrap_or(0)).unwrap_or(usize::MAX);
        let (scope, skill) = visible(&self.db, ctx.tenant_id, ctx.user_id, ctx, raw).await?;
        let Some(bytes) = skills::file(&self.db, &scope, skill.owner, &skill.name, path)
            .await
            .map_err(store_failed)?
        else {
            return Err(ToolError::NotFound(format!(
                "skill {:?} has no file {path:?}; load_skill lists its files",
                skill.name.as_str()
            )));
        };
        let size = bytes.len();
        let Ok(text) = String::from_utf8(bytes) else {
            return Ok(ToolOutput::ok(json!({
                "name": skill.name.as_str(),
                "path": path,
                "size": size,
                "binary": true,
                "content": null,
                "note": "a binary file: its content is not shown; if a script of the skill needs it, use it through the execute tool",
            })));
        };
        if offset > size {
            return Err(ToolError::invalid(format!(
                "offset {offset} is past the end of the file ({size} bytes)"
            )));
        }
        // Cut on character boundaries.
        let mut start = offset;
        while !text.is_char_boundary(start) {
            start += 1;
        }
        let mut end = (start + MAX_READ_BYTES).min(size);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let truncated = end < size;
        Ok(ToolOutput::ok(json!({
            "name": skill.name.as_str(),
            "path": path,
            "size": size,
            "binary": false,
            "offset": start,
            "content": &text[start..end],
            "truncated": truncated,
            "next_offset": truncated.then_some(end),
        })))
    }
}
