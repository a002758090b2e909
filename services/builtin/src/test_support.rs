//! Test helpers: a context on a temp workspace, an event recorder, a scripted user.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

use agentry_schema::events::Question;
use async_trait::async_trait;
use serde_json::Value;

use agentry_tools::tool::{InteractionError, ToolContext, UserInteraction, WorkspaceInfo};

pub fn ctx_with_quota(root: &Path, quota_bytes: u64) -> ToolContext {
    ToolContext::standalone(WorkspaceInfo {
        root: root.to_path_buf(),
        quota_bytes,
        sandbox: Default::default(),
    })
}

pub fn ctx(root: &Path) -> ToolContext {
    ctx_with_quota(root, 100 * 1024 * 1024)
}

/// A user who answers from a script and remembers every question.
#[derive(Default)]
pub struct ScriptedUser {
    answers: Mutex<VecDeque<Result<Value, InteractionError>>>,
    pub asked: Mutex<Vec<Question>>,
}

impl ScriptedUser {
    pub fn answering(answers: Vec<Result<Value, InteractionError>>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into()),
            asked: Mutex::new(Vec::new()),
        })
    }

    pub fn questions(&self) -> Vec<Question> {
        self.asked.lock().unwrap().clone()
    }
}

#[async_trait]
impl UserInteraction for ScriptedUser {
    async fn ask(&self, question: Question) -> Result<Value, InteractionError> {
        self.asked.lock().unwrap().push(question);
        let next = self.answers.lock().unwrap().pop_front();
        match next {
            Some(answer) => answer,
            // Nobody answers: wait until the caller's timeout fires.
            None => std::future::pending().await,
        }
    }
}
