//! The run's state machine (DESIGN §4), enforced: every move of the agent loop goes through
//! [`transition`], which refuses a move the design does not allow.
//!
//! ```text
//!            ToolsCalled            ApprovalNeeded
//!   Reason ───────────────▶ Act ─────────────────▶ Approve
//!     ▲  │                   │ ▲                      │
//!     │  │ Answered          │ └──────────────────────┘ Approved (or edited)
//!     │  ▼                   │
//!     │ Respond              │ CallsDone
//!     │  │ Responded         │
//!     │  ▼                   │
//!     │ End ◀── Stopped ─────┴─ (from any state but End: cancel, reject, timeout, failure)
//!     └──────────────────────┘
//! ```
//!
//! `approve -> reason` of the design is `Approve -> Act -> Reason`: an approved call runs
//! before the model is asked again. A checkpoint stores the state the run resumes in
//! (`Reason` or `Act`).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Asking the model.
    Reason,
    /// Running the pending tool calls of the model's answer, one by one.
    Act,
    /// Waiting for a person's decision on the current call.
    Approve,
    /// The model answered without tool calls: the answer is final.
    Respond,
    /// Over; nothing moves the run out of here.
    End,
}

/// What happened, as far as the state machine cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunEvent {
    /// The model's answer asks for tool calls.
    ToolsCalled,
    /// The model's answer has no tool calls.
    Answered,
    /// The current call needs a person's approval.
    ApprovalNeeded,
    /// The person approved (or edited) the call: it runs.
    Approved,
    /// Every pending call has its result: back to the model.
    CallsDone,
    /// The final answer went out.
    Responded,
    /// The run stops before its answer: cancelled, rejected, timed out or failed.
    Stopped,
}

impl RunState {
    pub const ALL: [RunState; 5] = [
        RunState::Reason,
        RunState::Act,
        RunState::Approve,
        RunState::Respond,
        RunState::End,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Reason => "reason",
            RunState::Act => "act",
            RunState::Approve => "approve",
            RunState::Respond => "respond",
            RunState::End => "end",
        }
    }
}

impl RunEvent {
    pub const ALL: [RunEvent; 7] = [
        RunEvent::ToolsCalled,
        RunEvent::Answered,
        RunEvent::ApprovalNeeded,
        RunEvent::Approved,
        RunEvent::CallsDone,
        RunEvent::Responded,
        RunEvent::Stopped,
    ];
}

/// A move the state machine refuses: a bug in the loop, reported as the run's failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the run cannot go from {} on {event:?}", from.as_str())]
pub struct IllegalTransition {
    pub from: RunState,
    pub event: RunEvent,
}

/// The one table of allowed moves.
pub fn transition(from: RunState, event: RunEvent) -> Result<RunState, IllegalTransition> {
    use RunEvent as E;
    use RunState as S;
    match (from, event) {
        (S::Reason, E::ToolsCalled) => Ok(S::Act),
        (S::Reason, E::Answered) => Ok(S::Respond),
        (S::Act, E::ApprovalNeeded) => Ok(S::Approve),
        (S::Approve, E::Approved) => Ok(S::Act),
        (S::Act, E::CallsDone) => Ok(S::Reason),
        (S::Respond, E::Responded) => Ok(S::End),
        (S::Reason | S::Act | S::Approve | S::Respond, E::Stopped) => Ok(S::End),
        (from, event) => Err(IllegalTransition { from, event }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RunEvent as E;
    use RunState as S;
    use proptest::prelude::*;

    /// Every allowed move, written out once more by hand: `transition` must agree with it on
    /// all 35 pairs.
    const ALLOWED: [(S, E, S); 10] = [
        (S::Reason, E::ToolsCalled, S::Act),
        (S::Reason, E::Answered, S::Respond),
        (S::Reason, E::Stopped, S::End),
        (S::Act, E::ApprovalNeeded, S::Approve),
        (S::Act, E::CallsDone, S::Reason),
        (S::Act, E::Stopped, S::End),
        (S::Approve, E::Approved, S::Act),
        (S::Approve, E::Stopped, S::End),
        (S::Respond, E::Responded, S::End),
        (S::Respond, E::Stopped, S::End),
    ];

    #[test]
    fn transition_allows_exactly_the_table_and_refuses_every_other_pair() {
        for from in RunState::ALL {
            for event in RunEvent::ALL {
                let expected = ALLOWED
                    .iter()
                    .find(|(f, e, _)| *f == from && *e == event)
                    .map(|(_, _, to)| *to);
                match (transition(from, event), expected) {
                    (Ok(to), Some(want)) => assert_eq!(to, want, "{from:?} on {event:?}"),
                    (Err(e), None) => {
                        assert_eq!(e, IllegalTransition { from, event });
                        assert!(e.to_string().contains(from.as_str()), "{e}");
                    }
                    (got, want) => panic!("{from:?} on {event:?}: got {got:?}, want {want:?}"),
                }
            }
        }
    }

    #[test]
    fn end_is_final_and_every_other_state_can_stop() {
        for event in RunEvent::ALL {
            assert!(transition(S::End, event).is_err(), "End moved on {event:?}");
        }
        for from in RunState::ALL.into_iter().filter(|s| *s != S::End) {
            assert_eq!(transition(from, E::Stopped), Ok(S::End), "{from:?}");
        }
    }

    #[test]
    fn a_one_tool_run_with_an_approval_is_a_legal_path() {
        let path = [
            E::ToolsCalled,
            E::ApprovalNeeded,
            E::Approved,
            E::CallsDone,
            E::Answered,
            E::Responded,
        ];
        let end = path
            .iter()
            .try_fold(S::Reason, |s, e| transition(s, *e))
            .unwrap();
        assert_eq!(end, S::End);
    }

    #[test]
    fn states_keep_the_checkpoint_names() {
        for s in RunState::ALL {
            let json = serde_json::to_value(s).unwrap();
            assert_eq!(json, serde_json::json!(s.as_str()));
            assert_eq!(serde_json::from_value::<RunState>(json).unwrap(), s);
        }
    }

    fn any_event() -> impl Strategy<Value = RunEvent> {
        proptest::sample::select(RunEvent::ALL.to_vec())
    }

    proptest! {
        /// Over random event sequences from `Reason`, applying the accepted events and
        /// skipping refused ones: the run only ever makes moves of the table, leaves `End`
        /// never, reaches `End` only by `Responded` from `Respond` or by `Stopped`, and a
        /// refused event leaves the state as it was.
        #[test]
        fn random_event_sequences_only_make_allowed_moves(events in proptest::collection::vec(any_event(), 0..64)) {
            let mut state = S::Reason;
            let mut ended = false;
            for event in events {
                match transition(state, event) {
                    Ok(next) => {
                        prop_assert!(!ended, "moved out of End on {:?}", event);
                        prop_assert!(
                            ALLOWED.contains(&(state, event, next)),
                            "{:?} on {:?} went to {:?}", state, event, next
                        );
                        if next == S::End {
                            prop_assert!(
                                event == E::Stopped || (state == S::Respond && event == E::Responded),
                                "reached End from {:?} on {:?}", state, event
                            );
                            ended = true;
                        }
                        state = next;
                    }
                    Err(e) => {
                        prop_assert_eq!(e, IllegalTransition { from: state, event });
                        prop_assert!(!ALLOWED.iter().any(|(f, ev, _)| *f == state && *ev == event));
                    }
                }
            }
            // Whatever happened, a run that is not over can still be stopped.
            prop_assert_eq!(transition(state, E::Stopped).is_ok(), state != S::End);
        }

        /// The paths the loop takes: any number of model rounds, each with any number of
        /// calls, each approved or not, then an answer: all legal, ending in `End`.
        #[test]
        fn every_loop_shaped_path_is_legal(rounds in proptest::collection::vec(proptest::collection::vec(any::<bool>(), 1..4), 0..6)) {
            let mut state = S::Reason;
            for calls in rounds {
                state = transition(state, E::ToolsCalled).unwrap();
                for needs_approval in calls {
                    if needs_approval {
                        state = transition(state, E::ApprovalNeeded).unwrap();
                        state = transition(state, E::Approved).unwrap();
                    }
                    prop_assert_eq!(state, S::Act);
                }
                state = transition(state, E::CallsDone).unwrap();
            }
            state = transition(state, E::Answered).unwrap();
            prop_assert_eq!(transition(state, E::Responded), Ok(S::End));
        }
    }
}
