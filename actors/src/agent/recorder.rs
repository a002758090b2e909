//! RunRecorder: every write of a run, in as few transactions as its guarantees allow.
//!
//! - **Start** ([`RunRecorder::start`]): the execution row (created, or a queued one started),
//!   the user's message and the session's state with its first block of event numbers, in one
//!   transaction: a chat is acknowledged only once all three are stored.
//! - **Steps** ([`RunRecorder::commit_step`]): the rows a step produces (the model's answer, a
//!   tool's result, its audit row) wait in the recorder and go in with the next checkpoint, in
//!   one transaction, at the next point where the run waits on something outside it: before a
//!   model call, before a tool call runs (the `in_flight` checkpoint that keeps calls
//!   at-most-once), before it waits for a person. Between those points nothing awaits but the
//!   write itself, so a crash loses at most a result whose call the checkpoint already marks
//!   as started: on resume the model gets an `interrupted` result and no call runs twice.
//!   The execution's status is written only when it changes (waiting for a person and back);
//!   its steps and usage are in each checkpoint and written on the execution at the end. A
//!   person's decision on an approval waits too: it goes in with the approved call's
//!   `in_flight` checkpoint (the decision → tool result path pays one commit), or with the end
//!   of a run it stops. A fresh run writes no checkpoint before its first model call: it
//!   would only repeat what the start stored (a run without one resumes from its stored
//!   conversation).
//! - **End** ([`RunRecorder::end`]): what is still waiting (the final answer, a refused call),
//!   the run's final status, its events not stored yet with its `done`, the session's state,
//!   in one transaction ([`executions::record_end`]), retried with backoff within a bound.
//!
//! Events are not written per step: the session actor stores them in batches (with the end,
//! or on its flush timer for a run that takes longer).

use std::time::Duration;

use agentry_schema::ids::{RunId, SessionId};
use agentry_store::approvals::ApprovalDecision;
use agentry_store::checkpoints::{self, NewCheckpoint};
use agentry_store::executions::{self, ExecutionStatus, NewExecution, RunEnd};
use agentry_store::messages::{self, Message, NewMessage};
use agentry_store::run_writes;
use agentry_store::sessions::{self, SessionState};
use agentry_store::tool_calls::NewToolCallLog;
use agentry_store::writer::Writer;
use agentry_store::{StoreError, TenantScope};

use super::checkpoint::RunCheckpoint;

/// How a run's rows are started.
#[derive(Debug, Clone)]
pub enum StartRows {
    /// A new message: create the execution (running) and store the message.
    Fresh(NewExecution),
    /// A queued execution: mark it running and store its message (`input`).
    Queued { input: String },
    /// A resumed run: only the session's state and reservation.
    Resume,
}

/// Rows of a step that wait for the step's transaction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepRows {
    pub messages: Vec<NewMessage>,
    pub tool_calls: Vec<NewToolCallLog>,
    /// Decisions on the run's approvals: the decided call runs only after the transaction that
    /// records the decision with the call's `in_flight` checkpoint (one commit, not two).
    pub decisions: Vec<ApprovalDecision>,
}

impl StepRows {
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty() && self.tool_calls.is_empty() && self.decisions.is_empty()
    }
}

pub struct RunRecorder {
    writer: Writer,
    scope: TenantScope,
    session_id: SessionId,
    run_id: RunId,
    waiting: StepRows,
    /// A status change to write with the next step (`None`: unchanged).
    status: Option<(ExecutionStatus, SessionState)>,
    /// Checkpoints this run wrote, so the end prunes only when there are more than it keeps.
    checkpoints: u64,
    /// Cluster mode: the fencing token every transaction checks first
    /// ([`sessions::fence`]), so a replica that lost the session's lease writes nothing.
    fence: Option<i64>,
}

/// The history a run's start reads: the last `n` messages with an `id` above `after` (0: the
/// session's last `n`). A live session keeps its window and reads only what came after it.
#[derive(Debug, Clone, Copy)]
pub struct HistoryRead {
    pub after: i64,
    pub n: u64,
}

impl RunRecorder {
    pub fn new(
        writer: Writer,
        scope: TenantScope,
        session_id: SessionId,
        run_id: RunId,
        fence: Option<i64>,
    ) -> Self {
        RunRecorder {
            writer,
            scope,
            session_id,
            run_id,
            waiting: StepRows::default(),
            status: None,
            checkpoints: 0,
            fence,
        }
    }

    /// Write a run's starting rows (see [`StartRows`]) and reserve event numbers up to
    /// `reserve_seq`, in one transaction. With `history`, the same job reads back the session's
    /// last messages (see [`HistoryRead`]; the new user message last) on the writer's
    /// connection: no read of its own through the pool, whose page cache every commit
    /// invalidates.
    pub async fn start(
        &self,
        rows: StartRows,
        reserve_seq: u64,
        history: Option<HistoryRead>,
    ) -> Result<Option<Vec<Message>>, StoreError> {
        let (scope, session_id, run_id, fence) =
            (self.scope, self.session_id, self.run_id, self.fence);
        self.writer
            .write_for(session_id.0, move |txn| {
                let rows = rows.clone();
                Box::pin(async move {
                    let history = history.map(|h| (h.after, h.n));
                    if let StartRows::Fresh(new) = rows {
                        // The session's row first (its state, event numbers and the fencing
                        // token's check, which locks it), the run's row, the user's message
                        // and the history: one statement where the database allows it.
                        return run_writes::start_fresh(
                            txn,
                            &scope,
                            session_id,
                            reserve_seq,
                            fence,
                            new,
                            history,
                        )
                        .await;
                    }
                    // First: the session's state and event numbers, with the fencing token's
                    // check in the same statement (cluster mode), which locks the session's
                    // row for this transaction.
                    sessions::touch_fenced(
                        txn,
                        &scope,
                        session_id,
                        SessionState::Running,
                        Some(reserve_seq),
                        fence,
                    )
                    .await?;
                    if let StartRows::Queued { input } = rows {
                        executions::start_queued(txn, &scope, run_id).await?;
                        messages::save_many(
                            txn,
                            &scope,
                            session_id,
                            vec![NewMessage::user(input, Some(run_id))],
                        )
                        .await?;
                    }
                    match history {
                        Some((after, n)) => Ok(Some(
                            messages::last_n_after(txn, &scope, session_id, after, n).await?,
                        )),
                        None => Ok(None),
                    }
                })
            })
            .await
    }

    /// A message of the current step; stored with the step.
    pub fn message(&mut self, m: NewMessage) {
        self.waiting.messages.push(m);
    }

    /// An audit row of the current step; stored with the step.
    pub fn audit(&mut self, row: NewToolCallLog) {
        self.waiting.tool_calls.push(row);
    }

    /// A decision on one of the run's approvals; stored with the step.
    pub fn decided(&mut self, decision: ApprovalDecision) {
        self.waiting.decisions.push(decision);
    }

    /// Whether a checkpoint now would only repeat what the store already knows: nothing waits
    /// to be written and none was written yet (a fresh run before its first step resumes from
    /// its stored conversation, as its first checkpoint would have it).
    pub fn nothing_to_write(&self) -> bool {
        self.waiting.is_empty() && self.status.is_none() && self.checkpoints == 0
    }

    /// The run waits for a person (`true`) or goes on (`false`): written with the next step.
    pub fn set_waiting(&mut self, waiting: bool) {
        self.status = Some(if waiting {
            (
                ExecutionStatus::WaitingApproval,
                SessionState::WaitingApproval,
            )
        } else {
            (ExecutionStatus::Running, SessionState::Running)
        });
    }

    /// One transaction: the step's waiting rows, then the checkpoint, and the status change if
    /// there is one. On failure nothing is written and the rows keep waiting (for the end).
    pub async fn commit_step(&mut self, cp: &RunCheckpoint) -> Result<(), StoreError> {
        let (scope, session_id, run_id, fence) =
            (self.scope, self.session_id, self.run_id, self.fence);
        let status = self.status;
        let rows = self.waiting.clone();
        let checkpoint = NewCheckpoint {
            session_id,
            execution_id: run_id,
            step: cp.step,
            node: cp.node.as_str().to_string(),
            state: cp.to_json(),
        };
        let (step, usage) = (cp.step, cp.usage);
        self.writer
            .write_for(session_id.0, move |txn| {
                let rows = rows.clone();
                let checkpoint = checkpoint.clone();
                Box::pin(async move {
                    // The fencing token's check (cluster mode), folded into the session's
                    // state change when the step has one; decisions, the messages, the audit
                    // rows and the run's status change: one statement where the database
                    // allows it.
                    run_writes::step(
                        txn,
                        &scope,
                        run_writes::StepWrite {
                            session_id,
                            run_id,
                            status,
                            fence,
                            decisions: rows.decisions,
                            messages: rows.messages,
                            tool_calls: rows.tool_calls,
                            steps: step,
                            usage,
                        },
                    )
                    .await?;
                    checkpoints::write(txn, &scope, checkpoint).await?;
                    Ok(())
                })
            })
            .await?;
        self.waiting = StepRows::default();
        self.status = None;
        self.checkpoints += 1;
        Ok(())
    }

    /// What still waits to be written: it goes into the run's end.
    pub fn take_waiting(&mut self) -> StepRows {
        std::mem::take(&mut self.waiting)
    }

    pub fn checkpoints_written(&self) -> u64 {
        self.checkpoints
    }

    /// Write a run's end (see [`RunEnd`]), retrying database errors with backoff; each attempt
    /// and the whole are bounded ([`END_BOUND`]), after which the caller ends the run failed in
    /// memory and journals it.
    pub async fn end(
        writer: &Writer,
        scope: &TenantScope,
        end: &std::sync::Arc<RunEnd>,
    ) -> Result<(), StoreError> {
        use backon::{ExponentialBuilder, Retryable};
        let attempt = || async {
            match tokio::time::timeout(
                END_ATTEMPT_TIMEOUT,
                executions::write_end(writer, scope, end.clone()),
            )
            .await
            {
                Ok(r) => r,
                Err(_) => Err(StoreError::Db(sea_orm::DbErr::Custom(
                    "the database did not answer in time".into(),
                ))),
            }
        };
        let retried = attempt
            .retry(
                ExponentialBuilder::default()
                    .with_min_delay(Duration::from_millis(100))
                    .with_max_delay(Duration::from_secs(2))
                    .with_max_times(END_RETRIES)
                    .with_total_delay(Some(Duration::from_secs(6))),
            )
            .sleep(tokio::time::sleep)
            .when(|e| matches!(e, StoreError::Db(_)))
            .notify(|e, after| {
                tracing::warn!(error = %e, run_id = %end.run_id, "recording the end of a run failed; retrying in {after:?}");
            });
        match tokio::time::timeout(END_BOUND, retried).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Db(sea_orm::DbErr::Custom(format!(
                "the database did not take the run's end within {} s",
                END_BOUND.as_secs()
            )))),
        }
    }
}

const END_RETRIES: usize = 5;
const END_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a run's end may take to be written before the run ends failed in memory.
pub const END_BOUND: Duration = Duration::from_secs(8);
