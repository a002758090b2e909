//! Faults on demand, for the tests of supervision only: this module exists with the
//! `test-hooks` feature, which only the crate's own tests turn on (a dev-dependency on itself),
//! so no production build can reach it.

use actix::prelude::*;

use crate::mcp_pool::McpPoolActor;
use crate::quota::QuotaActor;
use crate::session::SessionActor;

/// Panic inside the handler.
#[derive(Message)]
#[rtype(result = "()")]
pub struct PanicNow;

/// Stop the actor (`ctx.stop()`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopNow;

macro_rules! panics {
    ($($actor:ty),*) => {$(
        impl Handler<PanicNow> for $actor {
            type Result = ();
            fn handle(&mut self, _: PanicNow, _: &mut Self::Context) {
                panic!("test hook: a panic inside a handler");
            }
        }
    )*};
}

macro_rules! stops {
    ($($actor:ty),*) => {$(
        impl Handler<StopNow> for $actor {
            type Result = ();
            fn handle(&mut self, _: StopNow, ctx: &mut Self::Context) {
                ctx.stop();
            }
        }
    )*};
}

panics!(QuotaActor, McpPoolActor, SessionActor);
stops!(QuotaActor, McpPoolActor);
