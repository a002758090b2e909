//! Keeping a tenant's long-lived helper actors (quota, MCP pool) alive.
//!
//! actix's own `Supervisor` restarts an actor that stops, but not one whose handler panicked:
//! the panic unwinds out of the arbiter's task and the actor is gone, with every address the
//! tenant's sessions hold on it (CONVENTIONS 5). [`start_supervised`] restarts it in both cases,
//! in place: the same mailbox and the same addresses, and the actor's own state, which its
//! [`Supervised::restarting`] hook may clean up. The message that panicked gets no reply (its
//! sender sees a mailbox error); the next one is served.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use actix::ArbiterHandle;
use actix::dev::{ContextFut, channel};
use actix::prelude::*;

/// How many messages may wait in a supervised actor's mailbox before senders wait (actix's
/// default).
const MAILBOX: usize = 16;

/// Start `f`'s actor on `arbiter`, restarted whenever it stops or a handler panics, for as long
/// as anyone holds its address. `name` goes into the log line and the restart metric.
pub fn start_supervised<A, F>(arbiter: &ArbiterHandle, name: &'static str, f: F) -> Addr<A>
where
    A: Supervised + Actor<Context = Context<A>>,
    F: FnOnce(&mut Context<A>) -> A + Send + 'static,
{
    let (tx, rx) = channel::channel(MAILBOX);
    arbiter.spawn_fn(move || {
        let mut ctx = Context::with_receiver(rx);
        let act = f(&mut ctx);
        actix::spawn(Restarting {
            fut: ctx.into_future(act),
            name,
        });
    });
    Addr::new(tx)
}

struct Restarting<A: Actor<Context = Context<A>>> {
    fut: ContextFut<A, Context<A>>,
    name: &'static str,
}

impl<A> Future for Restarting<A>
where
    A: Supervised + Actor<Context = Context<A>>,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        let this = self.get_mut();
        loop {
            let polled = catch_unwind(AssertUnwindSafe(|| Pin::new(&mut this.fut).poll(cx)));
            let why = match polled {
                Ok(Poll::Pending) => return Poll::Pending,
                Ok(Poll::Ready(())) => "stopped",
                Err(panic) => {
                    tracing::error!(
                        actor = this.name,
                        panic = %panic_text(panic.as_ref()),
                        "an actor's handler panicked; restarting it"
                    );
                    "panicked"
                }
            };
            // False once every address is gone: then it is meant to end.
            if !this.fut.restart() {
                return Poll::Ready(());
            }
            tracing::warn!(actor = this.name, why, "restarted an actor");
            crate::metrics::actor_restarted(this.name, why);
        }
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}
