use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use agentry_mcp::client::McpTransportConfig;
use tokio::sync::oneshot;

use super::messages::*;
use super::{McpPoolActor, Origin, PoolServer, SlotState};

/// Tenants whose users may configure stdio (local process) servers themselves.
pub const STDIO_FEATURE: &str = "stdio_mcp";

impl McpPoolActor {
    /// Of the servers configured for a user, those runs may use, by name: enabled, the
    /// platform's over a user's of the same name, stdio only with the tenant's feature, at most
    /// `max_mcp_servers`. What is left out is said in `warnings`.
    fn usable(&self, servers: Vec<PoolServer>, warnings: &mut Vec<String>) -> Vec<PoolServer> {
        // A platform (file) server's name is the platform's: a user's server of the same name
        // (added before the platform took it; the API refuses new ones) is left out, loudly.
        let mut by_name: BTreeMap<String, PoolServer> = BTreeMap::new();
        for s in servers.into_iter().filter(|s| !s.config.disabled) {
            let name = s.config.name.clone();
            match by_name.get(&name) {
                Some(existing) if existing.origin != s.origin => {
                    warnings.push(format!("your MCP server {name:?} is not used: the platform has a server of the same name; delete yours and add it under another name"));
                    if s.origin == Origin::File {
                        by_name.insert(name, s);
                    }
                }
                _ => {
                    by_name.insert(name, s);
                }
            }
        }
        let stdio_ok = self.tenant.has_feature(STDIO_FEATURE);
        let limit = self.tenant.quotas.max_mcp_servers as usize;
        let mut chosen = Vec::new();
        for (name, s) in by_name {
            if s.origin == Origin::User
                && matches!(s.config.transport, McpTransportConfig::Stdio(_))
                && !stdio_ok
            {
                warnings.push(format!(
                        "MCP server {name:?} is a local (stdio) server, which this tenant may not run; only HTTP servers are allowed"
                    ));
                continue;
            }
            if limit > 0 && chosen.len() >= limit {
                warnings.push(format!("MCP server {name:?} was not connected: the tenant allows {limit} servers per user"));
                continue;
            }
            chosen.push(s);
        }
        chosen
    }
}

impl Handler<UserTools> for McpPoolActor {
    type Result = ResponseActFuture<Self, UserToolsReply>;

    fn handle(&mut self, msg: UserTools, _: &mut Self::Context) -> Self::Result {
        let source = self.source.clone();
        let tenant = self.tenant.clone();
        let user = msg.user;
        let patterns = msg.patterns;
        let cached = self
            .configs
            .get(&user)
            .filter(|(at, _)| at.elapsed() < super::CONFIG_TTL)
            .map(|(_, list)| list.clone());
        let generation = self.configs_generation;
        let load = async move {
            match cached {
                Some(list) => (list, false),
                None => (Arc::new(source.servers_for(&tenant, user).await), true),
            }
        };
        Box::pin(load.into_actor(self).then(move |(list, read), act, ctx| {
            if read && act.configs_generation == generation {
                act.configs.insert(user, (Instant::now(), list.clone()));
            }
            let (servers, mut warnings) = (*list).clone();
            let chosen = act.usable(servers, &mut warnings);
            let now = Instant::now();
            let mut ready = Vec::new();
            let mut waits = Vec::new();
            let mut used = Vec::new();
            for server in chosen {
                let name = server.config.name.clone();
                // A run connects only the servers whose tools its assistant may use.
                if !super::may_use_server(patterns.as_deref(), &name) {
                    continue;
                }
                used.push(name.clone());
                let key = (user, name.clone());
                let current = act.slots.get_mut(&key);
                match current {
                    Some(slot) if slot.server == server => {
                        slot.last_used = now;
                        let known = !slot.known.is_empty();
                        match &mut slot.state {
                            SlotState::Connected { tools, .. } => super::sort_tools(tools, &mut ready, &mut warnings),
                            // Reconnecting, or still on its first try: a run never waits for a
                            // server it knows the tools of (calls answer "unavailable" until it
                            // is back), and waits for a new one only within `connect_wait` of
                            // its first attempt, so a server that hangs at start costs at most
                            // that once, not every run.
                            SlotState::Connecting { waiters, attempt, started } => {
                                let first_wait_ends = *started + act.cfg.connect_wait;
                                if known {
                                    super::sort_tools(&slot.known, &mut ready, &mut warnings);
                                    warnings.push(format!("MCP server {name:?} is reconnecting; its tools answer \"unavailable\" until it is back"));
                                } else if *attempt == 0 && now < first_wait_ends {
                                    let (tx, rx) = oneshot::channel();
                                    waiters.push(tx);
                                    waits.push((name, rx, tokio::time::Instant::from_std(first_wait_ends)));
                                } else {
                                    warnings.push(format!(
                                        "MCP server {name:?} is still connecting; its tools are left out of this run and will be available on a later message"
                                    ));
                                }
                            }
                            SlotState::Failed { error, attempts, retry_at } => {
                                let error = error.clone();
                                let due = now >= *retry_at;
                                let attempts = *attempts;
                                let retry_in = retry_at.saturating_duration_since(now).as_secs().max(1);
                                if known {
                                    super::sort_tools(&slot.known, &mut ready, &mut warnings);
                                    warnings.push(format!(
                                        "MCP server {name:?} is unavailable ({error}); its tools answer \"unavailable\" until it is back"
                                    ));
                                } else if due {
                                    warnings.push(format!(
                                        "MCP server {name:?} failed to connect ({error}); trying again in the background; its tools are left out of this run"
                                    ));
                                } else {
                                    warnings.push(format!(
                                        "MCP server {name:?} is unavailable ({error}); retrying in {retry_in} s; its tools are left out of this run"
                                    ));
                                }
                                if due {
                                    // In the background: this run does not wait for it.
                                    act.connect(ctx, key, server, None, attempts);
                                }
                            }
                        }
                    }
                    _ => {
                        let (tx, rx) = oneshot::channel();
                        act.connect(ctx, key, server, Some(tx), 0);
                        waits.push((name, rx, tokio::time::Instant::now() + act.cfg.connect_wait));
                    }
                }
            }
            async move {
                for (name, rx, deadline) in waits {
                    match tokio::time::timeout_at(deadline, rx).await {
                        Ok(Ok(Ok(tools))) => super::sort_tools(&tools, &mut ready, &mut warnings),
                        Ok(Ok(Err(e))) => warnings.push(format!("MCP server {name:?} failed to connect: {e}; its tools are left out of this run")),
                        Ok(Err(_)) => warnings.push(format!("MCP server {name:?} was closed while connecting")),
                        Err(_) => warnings.push(format!(
                            "MCP server {name:?} is still connecting; its tools will be available on a later message"
                        )),
                    }
                }
                UserToolsReply { tools: ready, warnings, servers: Vec::new() }
            }
            .into_actor(act)
            .map(move |mut reply, act, _| {
                // Every server this reply may use that was listed once, live or reconnecting.
                reply.servers = used
                    .into_iter()
                    .filter_map(|name| {
                        let slot = act.slots.get(&(user, name.clone()))?;
                        slot.was_connected.then(|| super::ServerCatalog::new(name, slot))
                    })
                    .collect();
                reply
            })
        }))
    }
}

impl Handler<ServerStatuses> for McpPoolActor {
    type Result = MessageResult<ServerStatuses>;
    fn handle(&mut self, msg: ServerStatuses, _: &mut Self::Context) -> Self::Result {
        let mut out: Vec<_> = self
            .slots
            .iter()
            .filter(|((u, _), _)| *u == msg.user)
            .map(|((_, name), slot)| {
                let (status, message) = slot.status();
                (name.clone(), status, message)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        MessageResult(out)
    }
}

impl Handler<ServerReports> for McpPoolActor {
    type Result = MessageResult<ServerReports>;
    fn handle(&mut self, msg: ServerReports, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.reports(msg.user))
    }
}

impl Handler<ServerTools> for McpPoolActor {
    type Result = MessageResult<ServerTools>;
    fn handle(&mut self, msg: ServerTools, _: &mut Self::Context) -> Self::Result {
        let mut out: Vec<_> = self
            .slots
            .iter()
            .filter(|((u, _), _)| *u == msg.user)
            .filter_map(|((_, name), slot)| match &slot.state {
                SlotState::Connected { tools, .. } => {
                    let mut list: Vec<(String, String)> = tools
                        .iter()
                        .flatten()
                        .map(|t| {
                            let spec = t.spec();
                            let first = spec.description.lines().next().unwrap_or_default();
                            (spec.name.clone(), first.trim().to_string())
                        })
                        .collect();
                    list.sort();
                    Some((name.clone(), list))
                }
                _ => None,
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        MessageResult(out)
    }
}

impl Handler<UserConfigChanged> for McpPoolActor {
    type Result = ();
    fn handle(&mut self, msg: UserConfigChanged, _: &mut Self::Context) {
        self.forget_configs();
        self.close_user(msg.user, msg.server.as_deref());
    }
}

impl Handler<ConnectInBackground> for McpPoolActor {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, msg: ConnectInBackground, _: &mut Self::Context) -> Self::Result {
        let source = self.source.clone();
        let tenant = self.tenant.clone();
        let user = msg.user;
        let load = async move { source.servers_for(&tenant, user).await };
        Box::pin(load.into_actor(self).map(move |(servers, _), act, ctx| {
            let mut ignored = Vec::new();
            let Some(server) = act
                .usable(servers, &mut ignored)
                .into_iter()
                .find(|s| s.config.name == msg.server)
            else {
                return;
            };
            let key = (user, msg.server);
            if act.slots.get(&key).is_some_and(|s| s.server == server) {
                return;
            }
            act.connect(ctx, key, server, None, 0);
        }))
    }
}

impl Handler<FileConfigChanged> for McpPoolActor {
    type Result = ();
    fn handle(&mut self, msg: FileConfigChanged, _: &mut Self::Context) {
        self.forget_configs();
        let affected: Vec<String> = msg
            .0
            .removed
            .iter()
            .map(|e| e.config.name.clone())
            .chain(msg.0.changed.iter().map(|c| c.name().to_string()))
            .collect();
        let keys: Vec<_> = self
            .slots
            .iter()
            .filter(|(k, s)| s.server.origin == Origin::File && affected.contains(&k.1))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            if let Some(slot) = self.slots.remove(&key) {
                super::close_slot(slot);
            }
            self.stats.remove(&key);
        }
    }
}

impl Handler<UserIdle> for McpPoolActor {
    type Result = ();
    fn handle(&mut self, msg: UserIdle, _: &mut Self::Context) {
        self.close_user(msg.user, None);
    }
}

impl Handler<OpenConnections> for McpPoolActor {
    type Result = usize;
    fn handle(&mut self, _: OpenConnections, _: &mut Self::Context) -> usize {
        self.slots
            .values()
            .filter(|s| matches!(s.state, SlotState::Connected { .. }))
            .count()
    }
}

impl Handler<ToolsChanged> for McpPoolActor {
    type Result = ();
    fn handle(&mut self, msg: ToolsChanged, ctx: &mut Self::Context) {
        let Some(slot) = self
            .slots
            .get(&msg.key)
            .filter(|s| s.generation == msg.generation)
        else {
            return;
        };
        let SlotState::Connected { conn, .. } = &slot.state else {
            return;
        };
        let conn = conn.clone();
        let conn_now = conn.clone();
        let policy = slot.server.policy.clone();
        let fut = async move { agentry_mcp::client::tools_for(&conn).await };
        ctx.spawn(fut.into_actor(self).map(move |res, act, _| {
            let Some(slot) = act
                .slots
                .get_mut(&msg.key)
                .filter(|s| s.generation == msg.generation)
            else {
                return;
            };
            if let (Ok(tools), SlotState::Connected { tools: current, .. }) = (res, &mut slot.state)
            {
                let raw = super::allowed_tools(tools, &policy);
                *current = super::bind_tools(&raw, &policy, &slot.live);
                slot.known = current.clone();
                slot.live.set(super::Live::Up(
                    conn_now.clone(),
                    raw.into_iter()
                        .map(|t| (t.spec().name.clone(), t))
                        .collect(),
                ));
            }
        }));
    }
}

impl Handler<CatalogChanged> for McpPoolActor {
    type Result = ();
    fn handle(&mut self, msg: CatalogChanged, ctx: &mut Self::Context) {
        let Some(slot) = self
            .slots
            .get(&msg.key)
            .filter(|s| s.generation == msg.generation)
        else {
            return;
        };
        let SlotState::Connected { conn, .. } = &slot.state else {
            return;
        };
        let conn = conn.clone();
        self.refresh_catalog(ctx, msg.key, msg.generation, conn);
    }
}

impl Handler<ConnectionLost> for McpPoolActor {
    type Result = ();
    fn handle(&mut self, msg: ConnectionLost, ctx: &mut Self::Context) {
        self.lost(ctx, msg.key, msg.generation, msg.error);
    }
}

impl Handler<TenantUpdated> for McpPoolActor {
    type Result = ();
    fn handle(&mut self, msg: TenantUpdated, _: &mut Self::Context) {
        self.forget_configs();
        self.tenant = msg.0;
    }
}

impl Handler<ProcessGroups> for McpPoolActor {
    type Result = MessageResult<ProcessGroups>;
    fn handle(&mut self, msg: ProcessGroups, _: &mut Self::Context) -> Self::Result {
        MessageResult(
            self.slots
                .iter()
                .filter(|((u, _), _)| *u == msg.user)
                .filter_map(|((_, name), slot)| match &slot.state {
                    SlotState::Connected { conn, .. } => {
                        conn.process_group().map(|pg| (name.clone(), pg))
                    }
                    _ => None,
                })
                .collect(),
        )
    }
}
