//! End to end: the real `agentry` binary (port 0, its own SQLite file; PostgreSQL where said)
//! over real HTTP. Each scenario is a plain async function over a [`ctx::Ctx`], run by its own
//! test here and all together by `openapi_documents_every_route_and_every_documented_status_is_real`,
//! which compares what the servers counted in `/metrics` with `/openapi.json`.

#[path = "../support/mod.rs"]
mod support;

mod completeness;
mod concurrency;
mod ctx;
mod edge;
mod fake_model;
mod flows;
mod matrix;
mod mcp;
mod mcp_conformance;
mod mcp_server;
mod misc;
mod observability;
mod properties;
mod quotas;
mod streaming;
mod visibility;

use ctx::Ctx;

/// The PostgreSQL test server, unless the developer skipped it (never in CI). A configured but
/// unreachable server fails the test with what to do.
fn postgres() -> Option<String> {
    use agentry_store::testing::Backend;
    if Backend::Postgres.skipped() {
        eprintln!("SKIPPING the PostgreSQL part: AGENTRY_TEST_SKIP_DBS names postgres");
        return None;
    }
    let url = Backend::Postgres.url(std::path::Path::new("."));
    let upstream = misc::upstream_of(&url);
    if std::net::TcpStream::connect(&upstream).is_err() {
        panic!(
            "PostgreSQL is not reachable at {upstream} ({url}): start it (scripts/test.sh does), \
             point AGENTRY_TEST_POSTGRES_URL at one, or set AGENTRY_TEST_SKIP_DBS=postgres"
        );
    }
    Some(url)
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
    let Some(url) = postgres() else { return };
    let ctx = Ctx::start_with(&[], Some(&url)).await;
    flows::admin_flow(&ctx).await;
    flows::usage_flow(&ctx).await;
    flows::tenant_admin_flow(&ctx).await;
    matrix::authorization_matrix(&ctx).await;
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
async fn messages_and_events_page_in_order() {
    let ctx = Ctx::start().await;
    visibility::pagination(&ctx).await;
}

#[tokio::test]
async fn the_admin_api_is_off_without_an_admin_key() {
    let ctx = Ctx::start_with(&[("AGENTRY_AUTH__ADMIN_KEY", "")], None).await;
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

#[tokio::test]
async fn readiness_and_key_checks_report_an_unreachable_database_as_503() {
    let Some(url) = postgres() else { return };
    let relay = misc::Relay::start(misc::upstream_of(&url)).await;
    let ctx = Ctx::start_with(
        &[("AGENTRY_DATABASE__CONNECT_TIMEOUT_SECS", "1")],
        Some(&misc::via(&url, relay.addr)),
    )
    .await;
    misc::database_outage(&ctx, &relay).await;
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
async fn mcp_config_file_servers_reach_every_user_and_reload() {
    let fake = mcp::fake();
    mcp::mcp_config_file(&fake).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_serves_builtin_tools_with_approvals_and_audit() {
    mcp_server::builtin_tools(&Ctx::start().await).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_conformance_scenarios_match_the_recorded_baseline() {
    mcp_conformance::server_scenarios(&Ctx::start().await).await;
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
async fn engine_metrics_follow_sessions_runs_tokens_approvals_and_quotas() {
    observability::engine_metrics(&Ctx::start().await).await;
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
    edge::malformed_requests(&ctx).await;
    edge::auth_before_body(&ctx).await;
    visibility::members_admins_and_tenants(&ctx).await;
    visibility::pagination(&ctx).await;
    misc::metrics(&ctx).await;
    mcp::mcp_servers_flow(&ctx).await;
    streaming::rest_and_sse(&ctx).await;
    streaming::websocket(&ctx).await;
    streaming::quotas(&ctx).await;
    quotas::requests_per_minute_on_every_keyed_route(&ctx).await;
    let doc = ctx
        .call(reqwest::Method::GET, "/openapi.json", None, None)
        .await
        .body;
    let mut seen = ctx.observed().await;
    // …one with it off…
    let off = Ctx::start_with(&[("AGENTRY_AUTH__ADMIN_KEY", "")], None).await;
    misc::admin_api_off(&off).await;
    seen.extend(off.observed().await);
    // …one without an MCP encryption key…
    let nokey = Ctx::start_with(&[("AGENTRY_MCP__ENCRYPTION_KEY", "")], None).await;
    mcp::mcp_without_key(&nokey).await;
    seen.extend(nokey.observed().await);
    // …one that holds a single WebSocket…
    let full = Ctx::start_with(&[("AGENTRY_SERVER__MAX_CONNECTIONS", "1")], None).await;
    streaming::full_server(&full).await;
    seen.extend(full.observed().await);
    // …and one that loses its database.
    let mut exempt = std::collections::BTreeSet::new();
    if let Some(url) = postgres() {
        let relay = misc::Relay::start(misc::upstream_of(&url)).await;
        let down = Ctx::start_with(
            &[("AGENTRY_DATABASE__CONNECT_TIMEOUT_SECS", "1")],
            Some(&misc::via(&url, relay.addr)),
        )
        .await;
        misc::database_outage(&down, &relay).await;
        seen.extend(down.observed().await);
    } else {
        exempt.insert(("GET".to_string(), "/api/v1/health/ready".to_string(), 503));
    }
    completeness::check(&doc, &seen, &exempt);
}
