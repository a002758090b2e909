//! The process's live session actors, least recently used first, and the cap on how many stay
//! live at once (`session.max_live`, [`crate::EngineConfig::max_live_sessions`]).
//!
//! Every tenant supervisor registers the session actors it starts here and touches one each
//! time it hands it out. Past the cap, the least recently used ones are asked to leave
//! ([`Evict`]); each decides for itself and leaves only when it is idle: no run,
//! nothing queued, no approval waiting, every event stored, no subscriber and no
//! [`LeaseGuard`] held by anyone. An evicted session loses nothing: its next use starts a new
//! actor that numbers on from the database, so replay and chat continue as before. When every
//! session over the cap is busy the cap is exceeded until some become idle (the registry
//! retries every few seconds): a cap never ends or refuses work.
//!
//! A [`Lease`] makes "nobody holds it" exact: a caller gets an actor's address only together
//! with a [`LeaseGuard`], under the lease's lock, and the actor retires only under the same
//! lock when no guard is left. So an address handed out is never one whose actor is about to
//! stop for eviction, and an evicted actor's address is never handed out again.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use actix::{Message, Recipient};
use agentry_schema::ids::SessionId;

/// Asked of a live session actor when the process holds more than `session.max_live`: leave
/// if idle and nobody holds it, or stay and say so ([`Residency::refused`]). The session actor
/// handles it; this module only sends it, so it knows the actors by this message alone.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Evict;

/// One start of one session's actor (a session restarted after eviction is a new instance).
pub type Instance = u64;

/// Who may still use a session actor, and whether it has retired.
#[derive(Debug, Default)]
pub struct Lease {
    state: Mutex<LeaseState>,
}

#[derive(Debug, Default)]
struct LeaseState {
    /// Live [`LeaseGuard`]s.
    guards: usize,
    /// The actor left (eviction or idle timeout): no guard is handed out any more.
    retired: bool,
}

impl Lease {
    fn lock(&self) -> MutexGuard<'_, LeaseState> {
        // The state is two plain fields updated together: a panic elsewhere cannot leave it
        // half-written, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new lease with its first guard, for whoever starts the actor.
    pub fn new_held() -> (Arc<Lease>, LeaseGuard) {
        let lease = Arc::new(Lease {
            state: Mutex::new(LeaseState {
                guards: 1,
                retired: false,
            }),
        });
        (lease.clone(), LeaseGuard(lease))
    }

    /// A guard, unless the actor retired.
    pub fn acquire(self: &Arc<Self>) -> Option<LeaseGuard> {
        let mut s = self.lock();
        if s.retired {
            return None;
        }
        s.guards += 1;
        Some(LeaseGuard(self.clone()))
    }

    /// Retire when nobody holds a guard: from then on no guard is handed out. The caller (the
    /// actor) stops right after.
    pub fn try_retire(&self) -> bool {
        let mut s = self.lock();
        if s.guards == 0 {
            s.retired = true;
        }
        s.retired
    }

    pub fn retired(&self) -> bool {
        self.lock().retired
    }

    pub fn held(&self) -> bool {
        self.lock().guards > 0
    }

    /// The actor stopped (for whatever reason): hand out nothing more.
    pub fn retire_now(&self) {
        self.lock().retired = true;
    }
}

/// Keeps a session actor from being evicted while it is held (a request between opening the
/// session and talking to it, a WebSocket for its whole life).
#[derive(Debug)]
pub struct LeaseGuard(Arc<Lease>);

impl Clone for LeaseGuard {
    fn clone(&self) -> Self {
        self.0.lock().guards += 1;
        LeaseGuard(self.0.clone())
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.guards = s.guards.saturating_sub(1);
    }
}

/// A session actor's place in [`LiveSessions`].
#[derive(Clone)]
pub struct Residency {
    pub live: Arc<LiveSessions>,
    pub lease: Arc<Lease>,
    pub id: SessionId,
    pub instance: Instance,
}

impl Residency {
    /// Asked to leave but busy.
    pub fn refused(&self) {
        self.live.refused(self.id, self.instance);
    }

    /// The actor stopped.
    pub fn leave(&self) {
        self.lease.retire_now();
        self.live.remove(self.id, self.instance);
    }
}

type Key = (SessionId, Instance);

struct Entry {
    /// The actor, to ask it to leave.
    evict: Recipient<Evict>,
    lease: Arc<Lease>,
    /// Position in `order` (larger: used more recently).
    tick: u64,
    /// Asked to leave; its answer (leaving, or [`LiveSessions::refused`]) has not come yet.
    asked: bool,
}

#[derive(Default)]
struct Inner {
    clock: u64,
    entries: HashMap<Key, Entry>,
    order: BTreeMap<u64, Key>,
    asked: usize,
}

impl Inner {
    fn bump(&mut self, key: Key) {
        self.clock += 1;
        let clock = self.clock;
        if let Some(e) = self.entries.get_mut(&key) {
            self.order.remove(&e.tick);
            e.tick = clock;
            if std::mem::take(&mut e.asked) {
                self.asked -= 1;
            }
            self.order.insert(clock, key);
        }
    }
}

/// See the module documentation.
pub struct LiveSessions {
    /// 0: no cap.
    cap: usize,
    inner: Mutex<Inner>,
    next_instance: AtomicU64,
}

impl LiveSessions {
    pub fn new(cap: usize) -> Self {
        LiveSessions {
            cap,
            inner: Mutex::new(Inner::default()),
            next_instance: AtomicU64::new(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update keeps `entries`, `order` and `asked` consistent before it can panic
        // (it does not): a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// A process-wide number for the next actor start, so two starts of a session never share
    /// one (supervisors come and go).
    pub fn next_instance(&self) -> Instance {
        self.next_instance.fetch_add(1, Ordering::Relaxed)
    }

    /// How many session actors are live.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A new actor, as the most recently used; past the cap, the least recently used others
    /// are asked to leave.
    pub fn insert(
        &self,
        id: SessionId,
        instance: Instance,
        evict: Recipient<Evict>,
        lease: Arc<Lease>,
    ) {
        let mut inner = self.lock();
        inner.clock += 1;
        let tick = inner.clock;
        inner.entries.insert(
            (id, instance),
            Entry {
                evict,
                lease,
                tick,
                asked: false,
            },
        );
        inner.order.insert(tick, (id, instance));
        self.ask_over_cap(&mut inner);
    }

    /// The session was just handed out.
    pub fn touch(&self, id: SessionId, instance: Instance) {
        self.lock().bump((id, instance));
    }

    /// The actor stopped.
    pub fn remove(&self, id: SessionId, instance: Instance) {
        let mut inner = self.lock();
        if let Some(e) = inner.entries.remove(&(id, instance)) {
            inner.order.remove(&e.tick);
            if e.asked {
                inner.asked -= 1;
            }
        }
    }

    /// The actor was asked to leave and is busy: it counts as recently used, so the next
    /// eviction asks others first.
    pub fn refused(&self, id: SessionId, instance: Instance) {
        self.lock().bump((id, instance));
    }

    /// Ask sessions to leave until the ones staying fit the cap (the registry calls this
    /// periodically, for sessions that were busy when last asked).
    pub fn evict_excess(&self) {
        let mut inner = self.lock();
        self.ask_over_cap(&mut inner);
    }

    /// Ask the least recently used sessions nobody holds to leave, as many as are over the cap
    /// and not asked yet. Never the most recently used one (the session being opened).
    fn ask_over_cap(&self, inner: &mut Inner) {
        if self.cap == 0 {
            return;
        }
        let mut excess = inner
            .entries
            .len()
            .saturating_sub(inner.asked)
            .saturating_sub(self.cap);
        if excess == 0 {
            return;
        }
        let newest = inner.order.last_key_value().map(|(t, _)| *t);
        let mut ask = Vec::new();
        for (tick, key) in inner.order.iter() {
            if excess == 0 || Some(*tick) == newest {
                break;
            }
            let Some(e) = inner.entries.get(key) else {
                continue;
            };
            if e.asked || e.lease.held() || e.lease.retired() {
                continue;
            }
            ask.push(*key);
            excess -= 1;
        }
        for key in ask {
            if let Some(e) = inner.entries.get_mut(&key) {
                e.asked = true;
                e.evict.do_send(Evict);
            }
            inner.asked += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_blocks_retirement_and_a_retired_lease_hands_out_none() {
        let lease = Arc::new(Lease::default());
        let g = lease.acquire().expect("a fresh lease hands out guards");
        let g2 = g.clone();
        assert!(!lease.try_retire(), "two guards are held");
        drop(g);
        assert!(!lease.try_retire(), "one guard is still held");
        drop(g2);
        assert!(lease.try_retire(), "nobody holds it");
        assert!(
            lease.acquire().is_none(),
            "a retired lease hands out nothing"
        );
        assert!(lease.retired());
    }
}
