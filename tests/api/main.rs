//! End to end: the real `agentry` binary (port 0, its own SQLite file; PostgreSQL where said)
//! over real HTTP. Each scenario is a plain async function over a [`ctx::Ctx`], run by its own
//! test here and all together by `openapi_documents_every_route_and_every_documented_status_is_real`,
//! which compares what the servers counted in `/metrics` with `/openapi.json`.

#[path = "../support/mod.rs"]
mod support;

mod a2a;
mod a2a_js;
mod a2a_remote;
mod admission;
mod audit;
mod bench_smoke;
mod budget;
mod chat_cli;
mod cluster;
mod completeness;
mod concurrency;
mod config;
mod console;
mod ctx;
mod data;
mod durability;
mod edge;
mod eviction;
mod fake_model;
mod first_run;
mod flows;
mod health;
mod matrix;
mod mcp;
mod mcp_clients;
mod mcp_conformance;
mod mcp_oauth;
mod mcp_oauth_client;
mod mcp_ops;
mod mcp_server;
mod memory;
mod misc;
mod models;
mod observability;
mod one_path;
mod openai_compat;
mod openai_responses;
mod operations;
mod order;
mod outage;
mod policy;
mod profiles;
mod properties;
mod quickstart;
mod quotas;
mod races;
mod replicas;
mod retention;
mod revocation;
mod roles;
mod sandbox;
mod schemathesis;
mod skills;
mod streaming;
mod tasks;
mod tool_server;
mod traces;
mod visibility;
mod wsproto;

use ctx::Ctx;

/// A fresh PostgreSQL database next to `shared` (dropped first if a previous run left it),
/// for a test whose server is down while other tests' servers start.
async fn own_postgres(shared: &str, suffix: &str) -> String {
    use sea_orm::ConnectionTrait;
    let (prefix, name) = shared
        .rsplit_once('/')
        .expect("a PostgreSQL URL with a database");
    let (name, query) = match name.split_once('?') {
        Some((n, q)) => (n, format!("?{q}")),
        None => (name, String::new()),
    };
    let own = format!("{name}_{suffix}");
    let admin = agentry_store::connect(&agentry_store::DbOptions {
        url: shared.to_string(),
        max_connections: 1,
        connect_timeout: std::time::Duration::from_secs(10),
        acquire_timeout: std::time::Duration::from_secs(10),
    })
    .await
    .expect("connecting to the test PostgreSQL");
    for sql in [
        format!("DROP DATABASE IF EXISTS \"{own}\" WITH (FORCE)"),
        format!("CREATE DATABASE \"{own}\""),
    ] {
        admin.execute_unprepared(&sql).await.expect(&sql);
    }
    admin.close().await.ok();
    format!("{prefix}/{own}{query}")
}

/// A PostgreSQL database of one test's own (`name` tells it apart; a rerun starts it afresh):
/// a single-node server holds its database alone (the database lease), so tests that run at
/// once cannot share one.
async fn postgres_db(name: &str) -> Option<String> {
    let shared = postgres()?;
    Some(own_postgres(&shared, name).await)
}

/// The PostgreSQL test server, unless the developer skipped it (never in CI). A configured but
/// unreachable server fails the test with what to do.
fn postgres() -> Option<String> {
    use agentry_store::testing::Backend;
    if Backend::Postgres.skipped() {
        eprintln!("SKIPPING the PostgreSQL part: AGENTRY_TEST_SKIP_DBS names postgres");
        return None;
    }
    let url = Backend::Postgres.url(std::path::Path::new("."));
    let upstream = outage::upstream_of(&url);
    if std::net::TcpStream::connect(&upstream).is_err() {
        panic!(
            "PostgreSQL is not reachable at {upstream} ({url}): start it (scripts/test.sh does), \
             point AGENTRY_TEST_POSTGRES_URL at one, or set AGENTRY_TEST_SKIP_DBS=postgres"
        );
    }
    Some(url)
}

// ---- agents that differ (issue 16, docs/agents.md) ----

#[tokio::test]
async fn each_builtin_profile_sends_its_own_prompt_and_tool_set() {
    let (fake, ctx) = durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    profiles::builtin_profiles_send_their_own_prompt_and_tools(&ctx, &fake).await;
}

#[tokio::test]
async fn an_assistants_own_prompt_tools_and_approvals_override_its_profile() {
    let (fake, ctx) = durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    profiles::an_assistants_own_fields_override_its_profile(&ctx, &fake).await;
}

#[tokio::test]
async fn profiles_over_rest_are_per_tenant_and_admin_managed() {
    profiles::profiles_flow(&Ctx::start().await).await;
}

// ---- delegation with `task` (issue 16, item 2) ----

#[tokio::test]
async fn task_delegates_to_a_child_run_whose_approval_the_client_decides() {
    let (fake, ctx) = durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    tasks::a_parent_delegates_and_the_client_approves_the_childs_tool(&ctx, &fake).await;
}

#[tokio::test]
async fn task_cancelling_the_parent_cancels_the_child() {
    let (_fake, ctx) = durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    tasks::cancelling_the_parent_cancels_the_child(&ctx).await;
}

#[tokio::test]
async fn task_depth_and_fan_out_limits_refuse_and_parallel_children_overlap() {
    let (_fake, ctx) = durability::start(
        agentry_fake_model::DefaultReply::Auto,
        None,
        &[
            ("AGENTRY_TASKS__MAX_DEPTH", "1"),
            ("AGENTRY_TASKS__MAX_PER_STEP", "2"),
        ],
    )
    .await;
    tasks::depth_and_fan_out_limits_and_parallel_children(&ctx).await;
}

#[tokio::test]
async fn task_kill9_mid_child_ends_it_once_and_the_parent_resumes() {
    let (fake, mut ctx) =
        durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    tasks::a_crash_mid_child_ends_it_once_and_the_parent_resumes(&mut ctx, &fake).await;
}

// ---- models per tenant: bring your own key (issue 16 item 4, docs/models.md) ----

#[tokio::test]
async fn each_tenants_assistants_call_the_model_with_the_tenants_own_key() {
    let (platform, ctx) = models::start().await;
    models::each_tenant_calls_with_its_own_key(&ctx, &platform).await;
}

#[tokio::test]
async fn bad_model_connections_are_refused_and_nothing_is_stored() {
    let (_platform, ctx) = models::start().await;
    models::bad_connections_are_refused_and_nothing_is_stored(&ctx).await;
}

#[tokio::test]
async fn an_assistants_max_retries_governs_its_model_calls() {
    let (platform, ctx) = models::start().await;
    models::max_retries_governs_model_calls(&ctx, &platform).await;
}

#[tokio::test]
async fn a_refused_model_key_is_model_auth_failed_and_leaks_nothing() {
    let (platform, ctx) = models::start().await;
    models::a_refused_key_is_model_auth_failed(&ctx, &platform).await;
}

#[tokio::test]
async fn without_the_platform_model_an_assistant_needs_a_model_connection() {
    let (platform, ctx) = models::start().await;
    models::without_the_platform_model_an_assistant_needs_a_connection(&ctx, &platform).await;
}

#[tokio::test]
async fn an_unreachable_platform_model_does_not_tell_tenants_where_it_is() {
    models::an_unreachable_platform_model_does_not_say_where_it_is().await;
}

// ---- skills (issue 16, item 3; docs/agents.md "Skills") ----

#[tokio::test]
async fn skills_over_rest_per_tenant_and_user() {
    skills::skills_flow(&Ctx::start().await).await;
}

#[tokio::test]
async fn hostile_skill_archives_are_refused_and_store_nothing() {
    skills::hostile_uploads_store_nothing(&Ctx::start().await).await;
}

#[tokio::test]
async fn skills_are_listed_in_the_prompt_and_loaded_by_the_tools() {
    let (fake, ctx) = durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    skills::skills_reach_the_model(&ctx, &fake).await;
}

#[tokio::test]
async fn skills_on_postgres() {
    let Some(url) = postgres_db("skills").await else {
        return;
    };
    let (fake, ctx) =
        durability::start(agentry_fake_model::DefaultReply::Auto, Some(&url), &[]).await;
    skills::skills_flow(&ctx).await;
    skills::hostile_uploads_store_nothing(&ctx).await;
    skills::skills_reach_the_model(&ctx, &fake).await;
}

#[tokio::test]
async fn skills_on_mysql() {
    let Some(url) = cluster::own_mysql("skills").await else {
        return;
    };
    let (fake, ctx) =
        durability::start(agentry_fake_model::DefaultReply::Auto, Some(&url), &[]).await;
    skills::skills_flow(&ctx).await;
    skills::hostile_uploads_store_nothing(&ctx).await;
    skills::skills_reach_the_model(&ctx, &fake).await;
}

// ---- custom roles (issue 17, item 5; docs/admin.md "Roles") ----

#[tokio::test]
async fn custom_roles_narrow_tools_and_rest_areas_and_never_cross_tenants() {
    let (fake, ctx) = fake_model::start(fake_model::Wire::OpenAi, &[]).await;
    roles::custom_roles(&ctx, Some(&fake)).await;
}

#[tokio::test]
async fn custom_roles_on_postgres() {
    let Some(url) = postgres_db("roles").await else {
        return;
    };
    let (fake, ctx) =
        durability::start(agentry_fake_model::DefaultReply::Auto, Some(&url), &[]).await;
    roles::custom_roles(&ctx, Some(&fake)).await;
}

#[tokio::test]
async fn custom_roles_on_mysql() {
    let Some(url) = cluster::own_mysql("roles").await else {
        return;
    };
    let (fake, ctx) =
        durability::start(agentry_fake_model::DefaultReply::Auto, Some(&url), &[]).await;
    roles::custom_roles(&ctx, Some(&fake)).await;
}

// ---- long-term memory (issue 17, item 1; docs/memory.md) ----

#[tokio::test]
async fn memories_over_rest_per_scope_and_expiry() {
    let ctx = Ctx::start().await;
    memory::memory_rest_flow(&ctx).await;
    memory::expiry(&ctx).await;
}

#[tokio::test]
async fn semantic_recall_finds_meaning_with_the_fake_embeddings() {
    let (fake, ctx) = memory::start_semantic(None, &[]).await;
    memory::semantic_recall(&ctx, &fake).await;
    memory::failing_embeddings(&ctx, &fake).await;
}

#[tokio::test]
async fn each_run_gets_the_top_k_memories_relevant_to_its_message() {
    let (fake, ctx) = memory::start_semantic(None, &[("AGENTRY_MEMORY__TOP_K", "2")]).await;
    memory::top_k_injection(&ctx, &fake).await;
}

#[tokio::test]
async fn memory_tools_keep_scopes_forget_and_fall_back_to_words() {
    let (fake, ctx) = durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    memory::tools_scopes_and_forget(&ctx, &fake).await;
    memory::keyword_fallback(&ctx, &fake).await;
}

#[tokio::test]
async fn a_tenants_model_connection_embeds_its_memories() {
    memory::tenant_connection_embeddings(&Ctx::start().await).await;
}

#[tokio::test]
async fn auto_extract_stores_facts_and_merges_duplicates() {
    let (fake, ctx) =
        memory::start_semantic(None, &[("AGENTRY_MEMORY__AUTO_EXTRACT", "true")]).await;
    memory::auto_extract(&ctx, &fake).await;
}

#[tokio::test]
async fn memory_on_postgres() {
    let Some(url) = postgres_db("memory").await else {
        return;
    };
    let (fake, ctx) = memory::start_semantic(Some(&url), &[]).await;
    memory::semantic_recall(&ctx, &fake).await;
    memory::top_k_injection(&ctx, &fake).await;
    memory::tools_scopes_and_forget(&ctx, &fake).await;
    memory::expiry(&ctx).await;
}

#[tokio::test]
async fn memory_on_mysql() {
    let Some(url) = cluster::own_mysql("memory").await else {
        return;
    };
    let (fake, ctx) = memory::start_semantic(Some(&url), &[]).await;
    memory::semantic_recall(&ctx, &fake).await;
    memory::top_k_injection(&ctx, &fake).await;
    memory::tools_scopes_and_forget(&ctx, &fake).await;
    memory::expiry(&ctx).await;
}

// ---- the cap on live sessions (docs/operations.md) ----

#[tokio::test]
async fn evicted_sessions_stay_usable_and_a_waiting_approval_is_never_evicted() {
    let cap = eviction::CAP.to_string();
    let ctx = Ctx::start_with(&[("AGENTRY_SESSION__MAX_LIVE", cap.as_str())], None).await;
    eviction::evicted_sessions_stay_usable_and_a_waiting_approval_is_never_evicted(&ctx).await;
}

// ---- retention (docs/operations.md, "Retention") ----

#[tokio::test]
async fn one_retention_sweep_removes_backdated_rows_and_keeps_active_ones() {
    let ctx = Ctx::start_with(retention::ENV, None).await;
    retention::one_sweep_removes_old_rows_and_keeps_active_ones(&ctx).await;
}

#[tokio::test]
async fn one_retention_sweep_removes_backdated_rows_and_keeps_active_ones_on_postgres() {
    let Some(url) = postgres_db("retention").await else {
        return;
    };
    let ctx = Ctx::start_with(retention::ENV, Some(&url)).await;
    retention::one_sweep_removes_old_rows_and_keeps_active_ones(&ctx).await;
}

#[tokio::test]
async fn one_retention_sweep_removes_backdated_rows_and_keeps_active_ones_on_mysql() {
    let Some(url) = cluster::own_mysql("retention").await else {
        return;
    };
    let ctx = Ctx::start_with(retention::ENV, Some(&url)).await;
    retention::one_sweep_removes_old_rows_and_keeps_active_ones(&ctx).await;
}

#[tokio::test]
async fn exactly_one_replica_of_a_cluster_sweeps_and_another_takes_over() {
    let Some(url) = postgres_db("retention_cluster").await else {
        return;
    };
    retention::one_sweeper_per_cluster(&url).await;
}

// ---- the SQL-statement budget of a run (docs/benchmarks.md) ----

/// The API key is checked once per cache period, not per run: a long period keeps that check
/// out of the runs measured. Every statement is logged, so a failure shows them.
const BUDGET_ENV: &[(&str, &str)] = &[
    ("AGENTRY_AUTH__CACHE_TTL_SECS", "600"),
    ("RUST_LOG", "info,agentry_store::sql=trace"),
];

#[tokio::test]
async fn a_one_tool_run_stays_within_the_sql_statement_budget() {
    let (_fake, ctx) =
        durability::start(agentry_fake_model::DefaultReply::Auto, None, BUDGET_ENV).await;
    budget::one_tool_run_stays_within_the_statement_budget(
        &ctx,
        budget::STATEMENTS_PER_ONE_TOOL_RUN,
    )
    .await;
}

#[tokio::test]
async fn a_changed_assistant_reaches_the_live_session_at_once() {
    let (fake, ctx) = durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    budget::a_changed_assistant_reaches_the_live_session_at_once(&ctx, &fake).await;
}

#[tokio::test]
async fn a_one_tool_run_stays_within_the_sql_statement_budget_on_postgres() {
    let Some(url) = postgres_db("budget").await else {
        return;
    };
    let (_fake, ctx) = durability::start(
        agentry_fake_model::DefaultReply::Auto,
        Some(&url),
        BUDGET_ENV,
    )
    .await;
    budget::one_tool_run_stays_within_the_statement_budget(
        &ctx,
        budget::STATEMENTS_PER_ONE_TOOL_RUN_POSTGRES,
    )
    .await;
}

// ---- crash durability (docs/operations.md, "What a client sees on crash") ----

fn churn_model() -> agentry_fake_model::DefaultReply {
    agentry_fake_model::DefaultReply::Always(
        agentry_fake_model::FakeReply::text("one short answer")
            .in_chunks(3)
            .with_chunk_delay(std::time::Duration::from_millis(20)),
    )
}

#[tokio::test]
async fn kill9_mid_stream_never_reuses_a_seq_and_resuming_clients_get_the_notice() {
    let (fake, mut ctx) =
        durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    durability::seqs_keep_their_meaning_across_kill9(&mut ctx, &fake).await;
    durability::a_background_response_survives_kill9(&mut ctx, &fake).await;
    durability::paused_responses_survive_kill9(&mut ctx).await;
}

#[tokio::test]
async fn kill9_a_resumed_run_keeps_the_role_of_the_key_that_started_it() {
    let (fake, mut ctx) =
        durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    durability::a_resumed_run_keeps_its_keys_role(&mut ctx, &fake).await;
}

#[tokio::test]
async fn kill9_churn_leaves_every_run_with_exactly_one_done() {
    let (_fake, mut ctx) = durability::start(churn_model(), None, &[]).await;
    durability::churn_every_run_has_exactly_one_done(&mut ctx).await;
}

#[tokio::test]
async fn kill9_churn_leaves_every_run_with_exactly_one_done_on_postgres() {
    let Some(url) = postgres_db("churn").await else {
        return;
    };
    let (_fake, mut ctx) = durability::start(churn_model(), Some(&url), &[]).await;
    durability::churn_every_run_has_exactly_one_done(&mut ctx).await;
}

#[tokio::test]
async fn kill9_during_a_shell_command_does_not_run_it_again() {
    let (fake, mut ctx) =
        durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    durability::an_interrupted_tool_call_is_not_run_again(&mut ctx, &fake).await;
}

#[tokio::test]
async fn a_database_lost_at_the_end_of_a_run_never_runs_it_twice() {
    let Some(shared) = postgres() else { return };
    // Its own database: while this server is down, another test's server starting on the
    // shared database would recover (and run) this server's unfinished run.
    let url = own_postgres(&shared, "run_end").await;
    let relay = durability::pg_relay(&url).await;
    let env = durability::relayed_env(&url, &relay);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (fake, mut ctx) =
        durability::start(agentry_fake_model::DefaultReply::Auto, Some(&url), &env).await;
    durability::a_run_whose_end_cannot_be_written_is_never_run_twice(&mut ctx, &fake, &relay).await;
}

#[tokio::test]
async fn authorization_matrix_every_route_times_every_caller() {
    let ctx = Ctx::start().await;
    matrix::authorization_matrix(&ctx).await;
}

#[tokio::test]
async fn admin_flow_tenant_user_key_revoke_suspend_quotas() {
    let ctx = Ctx::start().await;
    flows::admin_flow(&ctx).await;
}

#[tokio::test]
async fn admin_flow_on_postgres() {
    let Some(url) = postgres_db("admin_flow").await else {
        return;
    };
    let ctx = Ctx::start_with(&[], Some(&url)).await;
    flows::admin_flow(&ctx).await;
    flows::usage_flow(&ctx).await;
    flows::tenant_admin_flow(&ctx).await;
    policy::tenant_policy(&ctx).await;
    matrix::authorization_matrix(&ctx).await;
    audit::audit_queries(&ctx).await;
}

#[tokio::test]
async fn the_tenant_policy_is_stored_merged_and_validated() {
    let ctx = Ctx::start().await;
    policy::tenant_policy(&ctx).await;
}

#[tokio::test]
async fn only_admins_or_the_tenant_policy_switch_approvals_off() {
    policy::auto_approve_rights(&Ctx::start().await).await;
}

#[tokio::test]
async fn tools_a_caller_may_not_use_are_never_offered_to_the_model() {
    let (fake, ctx) = fake_model::start(fake_model::Wire::OpenAi, &[]).await;
    policy::tools_offered_to_the_model(&ctx, &fake).await;
}

#[tokio::test]
async fn stdio_mcp_servers_need_the_role_the_tenant_policy_names() {
    policy::stdio_rights(&Ctx::start().await).await;
}

#[tokio::test]
async fn a_put_of_a_masked_mcp_server_keeps_its_secrets() {
    policy::masked_secrets_survive_a_put(&Ctx::start().await).await;
}

#[tokio::test]
async fn platform_mcp_servers_are_listed_read_only_and_cannot_be_shadowed() {
    let (_dir, file) = policy::platform_config();
    let ctx = Ctx::start_with(&[("AGENTRY_MCP__CONFIG_FILE", &file)], None).await;
    policy::platform_servers(&ctx).await;
}

#[tokio::test]
async fn deleting_a_user_or_a_tenant_removes_their_workspaces() {
    policy::deletion_removes_workspaces(&Ctx::start().await).await;
}

#[tokio::test]
async fn usage_reports_runs_tokens_and_tool_calls_by_day() {
    let ctx = Ctx::start().await;
    flows::usage_flow(&ctx).await;
}

#[tokio::test]
async fn tenant_admins_manage_their_own_users_and_keys_only() {
    let ctx = Ctx::start().await;
    flows::tenant_admin_flow(&ctx).await;
}

#[tokio::test]
async fn agents_are_created_replaced_validated_and_default_stays() {
    let ctx = Ctx::start().await;
    flows::agents_flow(&ctx).await;
}

#[tokio::test]
async fn client_mistakes_answer_our_error_json_never_500() {
    let ctx = Ctx::start().await;
    edge::malformed_requests(&ctx).await;
}

#[tokio::test]
async fn the_key_is_checked_before_the_body_is_read() {
    let ctx = Ctx::start().await;
    edge::auth_before_body(&ctx).await;
}

#[tokio::test]
async fn members_see_their_own_admins_the_tenants_and_tenants_never_meet() {
    let ctx = Ctx::start().await;
    visibility::members_admins_and_tenants(&ctx).await;
}

#[tokio::test]
async fn audit_lists_filter_by_user_assistant_status_tool_and_time_and_members_see_their_own() {
    audit::audit_queries(&Ctx::start().await).await;
}

#[tokio::test]
async fn messages_and_events_page_in_order() {
    let ctx = Ctx::start().await;
    visibility::pagination(&ctx).await;
}

#[tokio::test]
async fn the_admin_api_is_off_without_an_admin_key() {
    let ctx = Ctx::start_with(
        &[
            ("AGENTRY_AUTH__ADMIN_KEY", ""),
            ("AGENTRY_AUTH__GENERATE_ADMIN_KEY", "false"),
        ],
        None,
    )
    .await;
    misc::admin_api_off(&ctx).await;
}

#[tokio::test]
async fn cors_allows_the_configured_origins_only() {
    let ctx = Ctx::start_with(
        &[(
            "AGENTRY_SERVER__CORS_ORIGINS",
            "https://app.example,https://other.example",
        )],
        None,
    )
    .await;
    misc::cors(&ctx, "https://app.example").await;
    misc::cors(&ctx, "https://other.example").await;
}

#[tokio::test]
async fn metrics_count_requests_by_route_pattern_and_status() {
    let ctx = Ctx::start().await;
    misc::metrics(&ctx).await;
}

/// A server whose PostgreSQL goes through a relay the test controls.
async fn behind_relay(url: &str) -> (outage::Relay, Ctx) {
    let relay = outage::Relay::start(outage::upstream_of(url)).await;
    let ctx = Ctx::start_with(
        &[("AGENTRY_DATABASE__CONNECT_TIMEOUT_SECS", "1")],
        Some(&outage::via(url, relay.addr)),
    )
    .await;
    (relay, ctx)
}

#[tokio::test]
async fn revoking_disabling_deleting_or_suspending_closes_open_sockets_with_1008() {
    let ctx = Ctx::start().await;
    revocation::through_this_server(&ctx).await;
}

#[tokio::test]
async fn a_key_revoked_elsewhere_is_refused_at_the_next_chat_frame() {
    let ctx = Ctx::start_with(&[("AGENTRY_AUTH__CACHE_TTL_SECS", "1")], None).await;
    revocation::at_the_next_chat_frame(&ctx).await;
}

/// On PostgreSQL (where statements really run at once) when it is there, else SQLite.
async fn racing_server() -> Ctx {
    match postgres_db("races").await {
        Some(url) => Ctx::start_with(&[], Some(&url)).await,
        None => Ctx::start().await,
    }
}

#[tokio::test]
async fn updates_and_deletes_racing_deletes_answer_404_or_409_never_5xx() {
    let ctx = racing_server().await;
    let started = std::time::Instant::now();
    tokio::join!(
        races::tenants(&ctx),
        races::agents(&ctx),
        races::users(&ctx)
    );
    eprintln!("3 × 200 races in {:?}", started.elapsed());
}

#[tokio::test]
async fn websocket_fragments_are_joined_bad_utf8_is_1007_protocol_errors_1002_and_close_completes()
{
    let ctx = Ctx::start().await;
    wsproto::fragments_utf8_protocol_errors_and_close(&ctx).await;
}

#[tokio::test]
async fn every_keyed_route_answers_503_database_unavailable_while_the_database_is_refused() {
    let Some(url) = postgres_db("keyed_outage").await else {
        return;
    };
    let (relay, ctx) = behind_relay(&url).await;
    outage::every_keyed_route(&ctx, &relay).await;
}

#[tokio::test]
async fn a_refused_or_black_holed_database_answers_503_fast_and_the_server_recovers() {
    let Some(url) = postgres_db("refused_outage").await else {
        return;
    };
    let (relay, ctx) = behind_relay(&url).await;
    outage::refused_and_black_holed(&ctx, &relay).await;
}

/// Issue 31 item 5: a run in flight when the database goes away gets its failed `done` within
/// its end's bound, the session's next chat is refused at once while the database is away and
/// taken as soon as it is back.
#[tokio::test]
async fn a_run_in_flight_when_the_database_goes_away_ends_failed_within_its_bound() {
    let Some(url) = postgres_db("inflight_outage").await else {
        return;
    };
    let (relay, ctx) = behind_relay(&url).await;
    outage::a_run_in_flight_ends_failed_and_its_session_takes_the_next_chat(&ctx, &relay).await;
}

#[test]
fn http_properties_hold_for_100_plus_cases_each() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ctx = rt.block_on(Ctx::start());
    let t = rt.block_on(ctx.tenant());
    properties::requests_without_a_valid_key_are_refused_with_401(&rt, &ctx);
    properties::every_failed_request_has_the_error_shape(&rt, &ctx, &t);
    properties::message_pages_have_the_right_count_and_order(&rt, &ctx, &t);
}

/// schemathesis against `/openapi.json`: no 5xx, no undocumented status, no response that
/// breaks its schema. The model is the local fake: generated chats start real runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_5xx_and_no_response_outside_the_document() {
    let reply = agentry_fake_model::DefaultReply::Always(agentry_fake_model::FakeReply::text("ok"));
    let (_fake, ctx) = durability::start(reply, None, &[]).await;
    schemathesis::fuzz(&ctx).await;
}

#[tokio::test]
async fn mcp_servers_over_rest_follow_the_tenant_rules() {
    let ctx = Ctx::start().await;
    mcp::mcp_servers_flow(&ctx).await;
}

#[tokio::test]
async fn mcp_secrets_need_an_encryption_key() {
    let ctx = Ctx::start_with(&[("AGENTRY_MCP__ENCRYPTION_KEY", "")], None).await;
    mcp::mcp_without_key(&ctx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_configured_over_rest_are_called_in_a_chat() {
    let fake = mcp::fake();
    let env = mcp::model_env(&fake);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let ctx = Ctx::start_with(&env, None).await;
    mcp::mcp_tools_in_a_chat(&ctx, &fake).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_a_hanging_server_costs_unrelated_runs_nothing() {
    let fake = mcp::fake();
    let mut env = mcp::model_env(&fake);
    env.push(("AGENTRY_MCP__CONNECT_WAIT_SECS", "15".to_string()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let ctx = Ctx::start_with(&env, None).await;
    mcp::a_hanging_server_costs_unrelated_runs_nothing(&ctx, &fake).await;
}

/// OAuth sign-in to a user's MCP server through the REST routes and the callback, against a
/// real authorization server and protected MCP server; attacks on the state and the tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_oauth_sign_in_connects_the_users_server() {
    let fake = mcp::fake();
    let mut env = mcp::model_env(&fake);
    // The fixture listens on 127.0.0.1: let users' servers reach it, as allowed_networks would.
    env.push((
        "AGENTRY_TOOLS__ALLOWED_NETWORKS",
        format!("127.0.0.1/32,{}", mcp::TEST_MCP_NETWORK),
    ));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let ctx = Ctx::start_with(&env, None).await;
    mcp_oauth_client::sign_in_to_a_users_oauth_server(&ctx, &fake).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_servers_report_their_history_metrics_and_connection_fields_over_rest() {
    // The probe runs on the venv's Python, whose interpreter lives outside the test cache.
    let paths = mcp_ops::sandbox_paths_for_the_probe();
    let ctx = Ctx::start_with(
        &[("AGENTRY_SANDBOX__READ_ONLY_PATHS", paths.as_str())],
        None,
    )
    .await;
    mcp_ops::server_history_over_rest(&ctx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_a_hung_stdio_server_costs_unrelated_runs_nothing() {
    let fake = mcp::fake();
    let mut env = mcp::model_env(&fake);
    env.push(("AGENTRY_MCP__CONNECT_WAIT_SECS", "15".to_string()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let ctx = Ctx::start_with(&env, None).await;
    mcp_ops::a_hung_stdio_server_costs_unrelated_runs_nothing(&ctx, &fake).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_config_file_servers_reach_every_user_and_reload() {
    let fake = mcp::fake();
    mcp::mcp_config_file(&fake).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_serves_builtin_tools_with_approvals_and_audit() {
    mcp_server::builtin_tools(&Ctx::start().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_tool_timeouts_stand_still_while_an_elicitation_waits() {
    let ctx = Ctx::start_with(&[("AGENTRY_TOOLS__INTERACTION_TIMEOUT_SECS", "1")], None).await;
    mcp_server::elicitation_stops_the_clock(&ctx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_asks_assistants_with_elicitation_and_cancel() {
    mcp_server::ask_assistant(&Ctx::start().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_serves_2026_clients_without_a_session() {
    mcp_server::sessionless_era(&Ctx::start().await).await;
}

#[tokio::test]
async fn mcp_server_checks_the_key_and_the_session_owner_on_every_request() {
    mcp_server::keys_and_sessions(&Ctx::start().await).await;
}

#[tokio::test]
async fn mcp_server_works_with_the_official_python_sdk_and_an_api_key() {
    mcp_server::python_sdk_client(&Ctx::start().await).await;
}

#[tokio::test]
async fn mcp_server_reexports_only_the_callers_own_mcp_servers() {
    mcp_server::reexports_the_callers_mcp_servers(&Ctx::start().await).await;
}

#[tokio::test]
async fn mcp_server_virtual_servers_narrow_tools_per_path_and_tenant() {
    mcp_server::virtual_servers(&Ctx::start().await).await;
}

#[tokio::test]
async fn mcp_server_reexports_the_callers_resources_and_prompts() {
    mcp_server::reexports_the_callers_resources_and_prompts(&Ctx::start().await).await;
}

#[tokio::test]
async fn mcp_servers_take_the_config_files_policy_over_rest() {
    mcp_server::rest_policy_of_a_users_server(&Ctx::start().await).await;
}

#[tokio::test]
async fn mcp_server_challenges_with_oauth_resource_metadata() {
    mcp_server::oauth_resource_metadata(&Ctx::start().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_conformance_scenarios_match_the_recorded_baseline() {
    mcp_conformance::server_scenarios(&Ctx::start().await).await;
}

/// `/mcp` with `[mcp.oauth]` trusting the OAuth test fixture: one authorization server and one
/// Agentry for the whole story (tokens, attacks, quotas, the Python SDK's own OAuth flow).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_accepts_tokens_of_an_external_authorization_server() {
    let fx = agentry_mcp::testing::OAuthFixture::start(&["--scopes", "mcp"]).await;
    let ctx = mcp_oauth::start(&fx, true).await;
    mcp_oauth::external_tokens(&fx, &ctx).await;
    mcp_oauth::quotas_apply(&fx, &ctx).await;
    mcp_oauth::python_sdk_oauth(&fx, &ctx).await;
}

/// `/mcp` asking the authorization server's introspection endpoint (RFC 7662) about opaque
/// tokens, and about JWTs so a revocation counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_introspects_opaque_and_revoked_tokens() {
    let fx = agentry_mcp::testing::OAuthFixture::start(&[
        "--scopes",
        "mcp other",
        "--client",
        "intro:intro-secret",
    ])
    .await;
    let ctx = mcp_oauth::start_introspecting(&fx).await;
    mcp_oauth::introspected_tokens(&fx, &ctx).await;
}

/// The official TypeScript SDK and MCP Inspector against `/mcp`, by key and by their own OAuth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_works_with_the_typescript_sdk_and_inspector_by_key_and_oauth() {
    let fx = agentry_mcp::testing::OAuthFixture::start(&["--scopes", "mcp"]).await;
    let ctx = mcp_oauth::start(&fx, true).await;
    mcp_clients::official_clients(&fx, &ctx).await;
}

#[tokio::test]
async fn mcp_server_fetches_oauth_keys_only_where_the_network_policy_allows() {
    let fx = agentry_mcp::testing::OAuthFixture::start(&["--scopes", "mcp"]).await;
    let ctx = mcp_oauth::start(&fx, false).await;
    mcp_oauth::keys_obey_the_network_policy(&fx, &ctx).await;
}

#[tokio::test]
async fn mcp_server_refuses_hosts_not_allowed() {
    mcp_server::allowed_hosts(&Ctx::start().await).await;
}

#[tokio::test]
async fn chat_over_rest_and_sse_answers_queues_cancels_and_refuses_cleanly() {
    streaming::rest_and_sse(&Ctx::start().await).await;
}

#[tokio::test]
async fn chat_over_the_websocket_with_approvals_cancel_and_replay() {
    streaming::websocket(&Ctx::start().await).await;
}

#[tokio::test]
async fn session_quotas_refuse_with_429_before_creating_anything() {
    streaming::quotas(&Ctx::start().await).await;
}

#[tokio::test]
async fn rest_sse_and_websocket_show_the_same_run_and_sessions_do_not_block_each_other() {
    streaming::one_stream_many_views(&Ctx::start().await).await;
}

#[tokio::test]
async fn an_undecided_approval_times_out_and_the_run_ends() {
    let ctx = Ctx::start_with(&[("AGENTRY_HITL__TIMEOUT_SECS", "1")], None).await;
    streaming::approval_times_out(&ctx).await;
}

#[tokio::test]
async fn silent_websocket_clients_are_dropped_and_deleted_sessions_close_their_sockets() {
    let ctx = Ctx::start_with(
        &[
            ("AGENTRY_SERVER__WS_HEARTBEAT_SECS", "1"),
            ("AGENTRY_SERVER__WS_CLIENT_TIMEOUT_SECS", "2"),
        ],
        None,
    )
    .await;
    streaming::silent_clients_are_dropped(&ctx).await;
}

#[tokio::test]
async fn the_documented_websocket_client_chats_and_approves() {
    streaming::example_client(&Ctx::start().await).await;
}

#[tokio::test]
async fn a_full_server_refuses_websockets_with_503() {
    let ctx = Ctx::start_with(&[("AGENTRY_SERVER__MAX_CONNECTIONS", "1")], None).await;
    streaming::full_server(&ctx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_flows_over_the_fake_model_on_the_openai_wire() {
    fake_model::all_flows(fake_model::Wire::OpenAi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_flows_over_the_fake_model_on_the_anthropic_wire() {
    fake_model::all_flows(fake_model::Wire::Anthropic).await;
}

#[tokio::test]
async fn tenant_quotas_refuse_with_429_naming_the_quota_over_rest_and_websocket() {
    let ctx = Ctx::start().await;
    quotas::requests_per_minute(&ctx).await;
    quotas::max_concurrent_runs(&ctx).await;
    quotas::tokens_per_day(&ctx).await;
}

#[tokio::test]
async fn tokens_per_day_is_reserved_before_each_model_call_and_rpm_counts_websocket_frames() {
    let ctx = Ctx::start().await;
    quotas::tokens_per_day_parallel_runs(&ctx).await;
    quotas::requests_per_minute_on_one_socket(&ctx).await;
}

#[tokio::test]
async fn engine_metrics_follow_sessions_runs_tokens_approvals_and_quotas() {
    let ctx = Ctx::start_with(&[("AGENTRY_METRICS__TENANT_LABELS", "true")], None).await;
    observability::engine_metrics(&ctx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_runs_and_refused_keys_are_logged_and_metrics_cover_models_tools_and_the_process() {
    let (fake, ctx) = fake_model::start(
        fake_model::Wire::OpenAi,
        &[
            ("AGENTRY_METRICS__TOKEN", operations::METRICS_TOKEN),
            ("AGENTRY_METRICS__TENANT_LABELS", "true"),
        ],
    )
    .await;
    operations::failures_are_logged_with_the_request_id(&ctx, &fake).await;
    operations::metrics_need_the_token_and_cover_models_tools_and_the_process(&ctx).await;
}

#[tokio::test]
async fn sigterm_closes_idle_websockets_with_1001_and_exits_at_once() {
    operations::sigterm_closes_idle_sockets_and_exits_quickly(Ctx::start().await).await;
}

#[tokio::test]
async fn sigterm_refuses_new_runs_and_leaves_a_long_run_for_recovery() {
    let ctx = Ctx::start_with(&[("AGENTRY_SERVER__SHUTDOWN_TIMEOUT_SECS", "2")], None).await;
    operations::sigterm_refuses_new_runs_and_leaves_a_long_run_for_recovery(ctx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_reach_an_otlp_receiver_as_one_tree_per_chat_mcp_call_and_resumed_run() {
    let otlp = traces::OtlpReceiver::start().await;
    let (fake, ctx) = traces::start(&otlp).await;
    traces::a_chat_with_an_approval_is_one_trace(&ctx, &fake, &otlp).await;
    traces::a_request_without_traceparent_starts_a_trace(&ctx, &otlp).await;
    traces::an_mcp_call_over_http_carries_the_trace_context(&ctx, &otlp).await;
    traces::a_refused_request_is_logged_with_its_trace_id(&ctx).await;
    let mut ctx = ctx;
    traces::a_run_resumed_after_a_restart_continues_its_trace(&mut ctx, &otlp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_trace_collector_never_slows_a_run_and_drops_are_counted() {
    traces::a_hanging_collector_never_slows_a_run().await;
}

#[tokio::test]
async fn the_swagger_ui_is_served_from_the_binary_without_network() {
    observability::swagger_ui(&Ctx::start().await).await;
}

#[tokio::test]
async fn openapi_documents_every_route_and_every_documented_status_is_real() {
    // Everything the suite does, on one server with the admin API on…
    let ctx = Ctx::start().await;
    matrix::authorization_matrix(&ctx).await;
    flows::admin_flow(&ctx).await;
    flows::usage_flow(&ctx).await;
    flows::tenant_admin_flow(&ctx).await;
    flows::agents_flow(&ctx).await;
    profiles::profiles_flow(&ctx).await;
    skills::skills_flow(&ctx).await;
    skills::hostile_uploads_store_nothing(&ctx).await;
    memory::memory_rest_flow(&ctx).await;
    models::model_connections_rest(&ctx).await;
    data::data_sources_flow(&ctx).await;
    a2a_remote::rest_statuses(&ctx).await;
    roles::custom_roles(&ctx, None).await;
    mcp_server::virtual_servers(&ctx).await;
    policy::tenant_policy(&ctx).await;
    policy::auto_approve_rights(&ctx).await;
    policy::stdio_rights(&ctx).await;
    policy::masked_secrets_survive_a_put(&ctx).await;
    edge::malformed_requests(&ctx).await;
    edge::auth_before_body(&ctx).await;
    visibility::members_admins_and_tenants(&ctx).await;
    visibility::pagination(&ctx).await;
    audit::audit_queries(&ctx).await;
    misc::metrics(&ctx).await;
    mcp::mcp_servers_flow(&ctx).await;
    streaming::rest_and_sse(&ctx).await;
    streaming::websocket(&ctx).await;
    streaming::quotas(&ctx).await;
    openai_compat::scenario(&ctx).await;
    openai_responses::wire(&ctx).await;
    a2a::wire(&ctx).await;
    quotas::requests_per_minute_on_every_keyed_route(&ctx).await;
    let doc = ctx
        .call(reqwest::Method::GET, "/openapi.json", None, None)
        .await
        .body;
    let mut seen = ctx.observed().await;
    // …one with it off…
    let off = Ctx::start_with(
        &[
            ("AGENTRY_AUTH__ADMIN_KEY", ""),
            ("AGENTRY_AUTH__GENERATE_ADMIN_KEY", "false"),
        ],
        None,
    )
    .await;
    misc::admin_api_off(&off).await;
    seen.extend(off.observed().await);
    // …one without an MCP encryption key…
    let nokey = Ctx::start_with(&[("AGENTRY_MCP__ENCRYPTION_KEY", "")], None).await;
    mcp::mcp_without_key(&nokey).await;
    models::model_connections_without_encryption_key(&nokey).await;
    data::data_sources_without_encryption_key(&nokey).await;
    a2a_remote::without_encryption_key(&nokey).await;
    seen.extend(nokey.observed().await);
    // …one that holds a single WebSocket…
    let full = Ctx::start_with(&[("AGENTRY_SERVER__MAX_CONNECTIONS", "1")], None).await;
    streaming::full_server(&full).await;
    seen.extend(full.observed().await);
    // …one with platform MCP servers…
    let (_dir, file) = policy::platform_config();
    let platform = Ctx::start_with(&[("AGENTRY_MCP__CONFIG_FILE", &file)], None).await;
    policy::platform_servers(&platform).await;
    seen.extend(platform.observed().await);
    // …one whose users' servers may be on 127.0.0.1, with a real OAuth server to sign in to…
    let fake = mcp::fake();
    let mut env = mcp::model_env(&fake);
    env.push((
        "AGENTRY_TOOLS__ALLOWED_NETWORKS",
        format!("127.0.0.1/32,{}", mcp::TEST_MCP_NETWORK),
    ));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let oauth = Ctx::start_with(&env, None).await;
    mcp_oauth_client::sign_in_to_a_users_oauth_server(&oauth, &fake).await;
    seen.extend(oauth.observed().await);
    // …and one that loses its database.
    let mut exempt = std::collections::BTreeSet::new();
    // A change of a virtual server is 409 only when five edits in a row lose the tenant's
    // compare-and-swap to other admins' edits: a race no sequential test makes.
    for method in ["PUT", "DELETE"] {
        exempt.insert((
            method.to_string(),
            "/api/v1/tenant/mcp-virtual-servers/{name}".to_string(),
            409,
        ));
    }
    if let Some(url) = postgres_db("completeness").await {
        let (relay, down) = behind_relay(&url).await;
        outage::every_keyed_route(&down, &relay).await;
        seen.extend(down.observed().await);
    } else {
        // Without a database to take away, no 503 can be produced.
        let (_, statuses) = completeness::documented(&doc);
        exempt.extend(statuses.into_iter().filter(|(_, _, status)| *status == 503));
    }
    completeness::check(&doc, &seen, &exempt);
}

#[tokio::test]
async fn openai_sdk_streams_and_not_runs_tools_and_refuses_what_it_cannot_do() {
    let (fake, ctx) = durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    openai_compat::sdk_client(&ctx, &fake).await;
}

/// Issue 26: the Responses API through the official `openai` package, one server.
#[tokio::test]
async fn openai_responses_sdk_streams_runs_tools_and_takes_approvals_as_mcp_items() {
    openai_responses::sdk_client(&Ctx::start().await).await;
}

/// Issue 26 item 4: client function tools through the official `openai` package (the fake
/// model calls the client's function; its output continues the same run), one server.
#[tokio::test]
async fn openai_responses_client_function_tools_round_trip_streamed_stateless_and_refused() {
    let (fake, ctx) = durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    openai_responses::client_function_tools(&ctx, &fake).await;
}

/// Issue 26 item 4: an unanswered client function call waits `hitl.timeout_secs`, like a question.
#[tokio::test]
async fn openai_responses_unanswered_function_call_waits_the_hitl_timeout() {
    let (fake, ctx) = durability::start(
        agentry_fake_model::DefaultReply::Auto,
        None,
        &[("AGENTRY_HITL__TIMEOUT_SECS", "2")],
    )
    .await;
    openai_responses::unanswered_function_call_times_out(&ctx, &fake).await;
}

/// Issue 26 item 4: the OpenAI Agents SDK runs its own function tool against Agentry, with
/// `Runner.run` and `Runner.run_streamed`, one server.
#[tokio::test]
async fn openai_agents_sdk_runs_its_function_tool_through_the_responses_api() {
    let (fake, ctx) = durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    openai_responses::agents_sdk(&ctx, &fake).await;
}

/// Issue 26: the Responses API's SSE framing and error shapes on the wire.
#[tokio::test]
async fn openai_responses_wire_event_names_sequence_numbers_and_refusals() {
    openai_responses::wire(&Ctx::start().await).await;
}

/// Issue 27: every assistant an A2A v1.0 agent, through the official `a2a-sdk`, one server.
#[tokio::test]
async fn a2a_sdk_cards_tasks_streams_input_required_and_tenancy() {
    a2a::sdk_client(&Ctx::start().await).await;
}

/// Issue 27: the JavaScript `@a2a-js/sdk` client, a second implementation: one send, one stream.
#[tokio::test]
async fn a2a_js_sdk_send_and_stream_round_trip() {
    a2a_js::js_client(&Ctx::start().await).await;
}

/// Issue 27 item 4: push notifications, signed and retried, to a loopback receiver (private
/// addresses allowed on this server).
#[tokio::test]
async fn a2a_push_notifications_signed_retried_and_tenant_bound() {
    let ctx = Ctx::start_with(&[("AGENTRY_TOOLS__ALLOW_PRIVATE_ADDRESSES", "true")], None).await;
    a2a::push_notifications(&ctx).await;
}

/// Issue 27 item 5: a remote A2A agent (the Python `a2a-sdk` server) registered over REST: its
/// card checked, its credential sealed, the network rule, tenancy.
#[tokio::test]
async fn a2a_remote_agent_registration_checks_the_card_seals_the_token_and_refuses_private_urls() {
    let remote = a2a_remote::RemoteAgent::start("127.0.0.2").await;
    a2a_remote::registration(&Ctx::start().await, &remote).await;
}

/// Issue 27 item 5: `task` delegates to a remote A2A agent: streamed as the child run, its
/// question answered by the user, cancel propagated, a hanging and a dead agent.
#[tokio::test]
async fn a2a_remote_agent_as_task_target_streams_asks_cancels_and_times_out() {
    let remote = a2a_remote::RemoteAgent::start("127.0.0.2").await;
    let (_fake, ctx) = durability::start(agentry_fake_model::DefaultReply::Auto, None, &[]).await;
    a2a_remote::delegation(&ctx, &remote).await;
}

/// Issue 27: the A2A routes' statuses, JSON-RPC error bodies and SSE framing on the wire.
#[tokio::test]
async fn a2a_wire_statuses_json_rpc_errors_and_sse_frames() {
    a2a::wire(&Ctx::start().await).await;
}

#[tokio::test]
async fn one_run_path_same_bad_message_same_code_on_every_transport() {
    one_path::same_bad_message_same_code_everywhere(&Ctx::start().await).await;
}

#[tokio::test]
async fn openai_wire_format_done_marker_and_error_shape() {
    openai_compat::scenario(&Ctx::start().await).await;
}

/// Issue 31 item 9: a client that hangs up cancels its run.
#[tokio::test]
async fn openai_a_client_that_hangs_up_cancels_its_run() {
    openai_compat::hanging_up_cancels_the_run(&Ctx::start().await).await;
}

/// Issue 31 item 9: stateless completions never run into `max_sessions_per_user`.
#[tokio::test]
async fn openai_stateless_completions_do_not_count_against_max_sessions_per_user() {
    openai_compat::stateless_completions_do_not_count_against_max_sessions(&Ctx::start().await)
        .await;
}

/// Issue 31 item 9: 150 stateless completions with the default quotas all answer.
#[tokio::test]
async fn openai_150_stateless_completions_with_default_quotas_all_answer() {
    openai_compat::a_hundred_and_fifty_stateless_completions_with_default_quotas(
        &Ctx::start().await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_cli_chats_with_an_approval_and_keeps_slash_commands_local() {
    chat_cli::chat_with_an_approval_and_local_commands(&Ctx::start().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_cli_ctrl_c_cancels_the_run_on_the_server() {
    chat_cli::ctrl_c_cancels_the_run_on_the_server(&Ctx::start().await).await;
}

/// Issue 31 item 6: `approve?` goes when its request is decided elsewhere or its run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_cli_withdraws_an_approval_prompt_decided_elsewhere() {
    chat_cli::an_approval_decided_elsewhere_withdraws_the_prompt(&Ctx::start().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_cli_gives_up_visibly_when_the_server_is_gone() {
    chat_cli::a_gone_server_is_retried_visibly_then_given_up(&mut Ctx::start().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_cli_survives_a_closed_stdout_and_explains_a_missing_key() {
    chat_cli::a_closed_stdout_and_a_missing_key(&Ctx::start().await).await;
}

#[tokio::test]
async fn tenant_programs_cannot_reach_the_platform_with_bwrap() {
    sandbox::tenant_programs_cannot_reach_the_platform("bwrap").await;
}

#[tokio::test]
async fn tenant_programs_cannot_reach_the_platform_with_landlock() {
    sandbox::tenant_programs_cannot_reach_the_platform("landlock").await;
}

#[tokio::test]
async fn a_killed_server_takes_its_commands_along_with_bwrap() {
    sandbox::a_killed_server_takes_its_commands_along("bwrap").await;
}

#[tokio::test]
async fn a_killed_server_takes_its_commands_along_with_landlock() {
    sandbox::a_killed_server_takes_its_commands_along("landlock").await;
}

#[tokio::test]
async fn a_killed_server_takes_its_commands_along_with_no_sandbox() {
    sandbox::a_killed_server_takes_its_commands_along("none").await;
}

// ---- modes and the database lease (issue 13; docs/operations.md, "Running N replicas") ----

#[tokio::test]
async fn a_second_single_node_server_on_the_same_sqlite_file_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("shared.db").display()
    );
    cluster::a_second_single_node_server_is_refused(&url).await;
}

#[tokio::test]
async fn a_second_single_node_server_on_the_same_postgres_refuses_to_start() {
    let Some(url) = postgres_db("single_guard").await else {
        return;
    };
    cluster::a_second_single_node_server_is_refused(&url).await;
}

#[tokio::test]
async fn a_second_single_node_server_on_the_same_mysql_refuses_to_start() {
    let Some(url) = cluster::own_mysql("single_guard").await else {
        return;
    };
    cluster::a_second_single_node_server_is_refused(&url).await;
}

#[tokio::test]
async fn replicas_share_postgres_and_redis_and_a_single_node_server_is_refused() {
    let Some(url) = postgres_db("replicas").await else {
        return;
    };
    cluster::replicas_share_the_database_and_exclude_single_node_servers(&url).await;
    cluster::cluster_mode_refuses_sqlite_and_an_unreachable_redis(&url).await;
}

#[tokio::test]
async fn replicas_share_mysql_and_redis_and_a_single_node_server_is_refused() {
    let Some(url) = cluster::own_mysql("replicas").await else {
        return;
    };
    cluster::replicas_share_the_database_and_exclude_single_node_servers(&url).await;
}

#[tokio::test]
async fn a_lost_redis_refuses_new_runs_with_503_and_everything_recovers_postgres() {
    let Some(url) = postgres_db("redis_outage").await else {
        return;
    };
    cluster::a_lost_redis_refuses_new_runs_and_recovers(&url).await;
}

#[tokio::test]
async fn a_key_revoked_or_tenant_suspended_on_one_replica_is_refused_on_another_at_once() {
    let Some(url) = postgres_db("changes").await else {
        return;
    };
    cluster::changes_on_one_replica_reach_the_others_caches(&url).await;
}

#[tokio::test]
async fn a_model_connection_changed_on_one_replica_reaches_a_live_session_on_another() {
    let Some(url) = postgres_db("byok_changes").await else {
        return;
    };
    models::a_connection_changed_on_one_replica_reaches_a_live_session_on_another(&url).await;
}

#[tokio::test]
async fn a_paused_owner_loses_the_session_to_another_replica_and_its_late_writes_are_refused() {
    let Some(url) = postgres_db("fence").await else {
        return;
    };
    cluster::a_paused_owner_loses_the_session_and_its_late_writes_are_refused(&url).await;
}

// ---- three replicas (issue 13; docs/operations.md, "Running N replicas") ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_on_postgres_serve_any_session_anywhere() {
    let Some(url) = postgres_db("trio").await else {
        return;
    };
    let mut trio = replicas::Trio::start(&url).await;
    let t = trio.a().tenant().await;
    replicas::any_replica_serves_any_session(&trio, &t).await;
    replicas::responses_across_replicas(&trio, &t).await;
    a2a::across_replicas(&trio, &t).await;
    replicas::back_to_back_runs_keep_the_lease(&trio, &t).await;
    replicas::mcp_without_stickiness(&trio, &t).await;
    let took = replicas::failover_of_a_streaming_run(&mut trio, &t).await;
    eprintln!("a streaming run resumed {took:?} after kill -9 of its replica");
    assert!(
        took < std::time::Duration::from_secs(30),
        "took over after {took:?}"
    );
    let took = replicas::failover_of_an_approval_wait(&mut trio, &t).await;
    eprintln!("an approval was asked again {took:?} after kill -9 of its replica");
    assert!(
        took < std::time::Duration::from_secs(30),
        "took over after {took:?}"
    );
    replicas::quotas_hold_across_replicas(&trio).await;
    replicas::redis_restarted_under_load(&trio, &t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_on_mysql_serve_any_session_anywhere() {
    let Some(url) = cluster::own_mysql("trio").await else {
        return;
    };
    let mut trio = replicas::Trio::start(&url).await;
    let t = trio.a().tenant().await;
    replicas::any_replica_serves_any_session(&trio, &t).await;
    replicas::responses_across_replicas(&trio, &t).await;
    a2a::across_replicas(&trio, &t).await;
    let took = replicas::failover_of_an_approval_wait(&mut trio, &t).await;
    eprintln!("an approval was asked again {took:?} after kill -9 of its replica");
    assert!(
        took < std::time::Duration::from_secs(30),
        "took over after {took:?}"
    );
}

// ---- data sources and the data tools (issue 17 item 2, docs/data.md) ----

#[tokio::test]
async fn data_sources_over_rest_are_checked_sealed_and_per_tenant() {
    data::data_sources_flow(&Ctx::start().await).await;
}

/// Real PostgreSQL, MariaDB and SQLite sources: the catalog, SELECTs, both read-only layers,
/// the timeout and the row cap, a report with charts, roles and tenants. The server allows
/// loopback for data sources here (the test databases live there), as
/// `tools.allowed_networks` would on a real network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_tools_query_postgres_mariadb_and_sqlite_read_only_and_write_reports() {
    use agentry_store::testing::Backend;
    let networks = format!("127.0.0.1/32,{}", mcp::TEST_MCP_NETWORK);
    let ctx = Ctx::start_with(&[("AGENTRY_TOOLS__ALLOWED_NETWORKS", &networks)], None).await;
    let pg = postgres();
    let mysql = (!Backend::MySql.skipped()).then(|| Backend::MySql.url(std::path::Path::new(".")));
    data::data_tools(&ctx, pg, mysql).await;
}

// ---- a user's instructions run in the order sent (issue 31 item 1) ----

/// 20 trials on each: a 1 s run, then three `chat` frames with `enqueue: true` on the same
/// WebSocket; the answers come back in the order sent.
#[tokio::test]
async fn queued_chats_on_one_socket_run_in_the_order_sent() {
    let ctx = Ctx::start().await;
    let t = ctx
        .tenant_with(serde_json::json!({"requests_per_minute": 0}))
        .await;
    order::queued_chats_run_in_the_order_sent(&ctx, &ctx, &t.member.key, 20).await;
}

#[tokio::test]
async fn queued_chats_on_one_socket_run_in_the_order_sent_on_postgres() {
    let Some(url) = postgres_db("order").await else {
        return;
    };
    let ctx = Ctx::start_with(&[], Some(&url)).await;
    let t = ctx
        .tenant_with(serde_json::json!({"requests_per_minute": 0}))
        .await;
    order::queued_chats_run_in_the_order_sent(&ctx, &ctx, &t.member.key, 20).await;
}

/// Three replicas on PostgreSQL and Redis (one cluster for both checks):
/// - replica C runs the session, the socket is on A (its queued chats are forwarded to C); then
///   the socket's own replica runs it: the queued chats run in the order sent (issue 31 item 1);
/// - 100 tries, 10 at a time: a socket opens on replica A and at once a chat on replica C
///   starts a run that waits for an approval; A's socket gets the approval request while the
///   run waits, and every event of the run gap-free (issue 31 item 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_keep_a_users_order_and_a_watcher_misses_nothing() {
    let Some(url) = postgres_db("trio_order").await else {
        return;
    };
    let trio = replicas::Trio::start(&url).await;
    let t = trio
        .a()
        .tenant_with(serde_json::json!({"requests_per_minute": 0, "max_sessions_per_user": 0}))
        .await;
    order::queued_chats_run_in_the_order_sent(trio.c(), trio.a(), &t.member.key, 20).await;
    order::queued_chats_run_in_the_order_sent(trio.b(), trio.b(), &t.member.key, 20).await;
    order::a_watcher_on_another_replica_sees_a_run_from_its_start(
        trio.c(),
        trio.a(),
        &t.member.key,
        100,
    )
    .await;
}

// ---- tokens_per_day refuses at admission (issue 31 item 4) ----

/// One node: after the budget is spent, 100 requests at once over every chat route (and chat
/// frames on open sockets) are all 429 and nothing is stored.
#[tokio::test]
async fn a_spent_token_budget_refuses_a_burst_at_admission_and_stores_nothing() {
    let ctx = Ctx::start().await;
    admission::a_spent_budget_refuses_a_burst_and_stores_nothing(&[&ctx], 100).await;
    admission::a_burst_is_admitted_only_as_far_as_the_budget_holds(&[&ctx], 40).await;
}

/// The same on three replicas over PostgreSQL and Redis: with one socket per replica on the
/// same session, a frame used to meet another replica's frame in the owner's session and get
/// `run_in_progress`; the WebSocket adapter now checks the budget first, as REST does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_token_budget_refuses_a_burst_on_three_replicas() {
    let Some(url) = postgres_db("trio_budget").await else {
        return;
    };
    let trio = replicas::Trio::start(&url).await;
    let all: Vec<&Ctx> = trio.replicas.iter().collect();
    admission::a_spent_budget_refuses_a_burst_and_stores_nothing(&all, 99).await;
    admission::a_burst_is_admitted_only_as_far_as_the_budget_holds(&all, 39).await;
}
