//! The authorization matrix (CONVENTIONS §12): every route × {no key, bad key, revoked key,
//! another tenant's key, member, tenant admin, platform admin, a custom role} with the expected
//! status. The custom role (`matrix-auditor`) is member-level and lists only the `audit` and
//! `agents` REST areas: everything else answers it 403 before any handler runs.
//!
//! "Another tenant" is tenant B's *admin* (the strongest outsider): B's key reading A's rows
//! gets 404; on routes that create, it creates in B (and A is checked to be untouched).

use reqwest::Method;
use serde_json::{Value, json};

use crate::ctx::{ADMIN_KEY, Ctx, Seeded, TenantFx, unique};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    NoKey,
    BadKey,
    Revoked,
    OtherTenant,
    Member,
    TenantAdmin,
    PlatformAdmin,
    /// A user of A holding the custom role `matrix-auditor` (areas `audit`, `agents`).
    Custom,
}

pub const WHO: [Who; 8] = [
    Who::NoKey,
    Who::BadKey,
    Who::Revoked,
    Who::OtherTenant,
    Who::Member,
    Who::TenantAdmin,
    Who::PlatformAdmin,
    Who::Custom,
];

/// Every route the gateway serves in this phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Health,
    // The OAuth protected-resource metadata of the origin and of `/mcp` (RFC 9728).
    ResourceMetadata,
    McpResourceMetadata,
    VirtualResourceMetadata,
    HealthLive,
    HealthReady,
    Metrics,
    OpenApi,
    Me,
    ListSessions,
    GetSession,
    ListMessages,
    ListEvents,
    ListAgents,
    CreateAgent,
    GetAgent,
    CreateAgentAt,
    ReplaceAgent,
    DeleteAgent,
    ListExecutions,
    GetExecution,
    ListToolCalls,
    // The audit lists filtered by another user of A (the second member).
    ListExecutionsOfAnother,
    ListToolCallsOfAnother,
    TenantGet,
    TenantUsage,
    TenantWebhookSecret,
    TenantListUsers,
    TenantCreateUser,
    TenantGetUser,
    TenantUpdateUser,
    TenantDeleteUser,
    TenantListKeys,
    TenantCreateKey,
    TenantGetKey,
    TenantRevokeKey,
    TenantListRoles,
    TenantCreateRole,
    TenantGetRole,
    TenantReplaceRole,
    TenantDeleteRole,
    TenantListVirtualServers,
    TenantCreateVirtualServer,
    TenantGetVirtualServer,
    TenantReplaceVirtualServer,
    TenantDeleteVirtualServer,
    AdminListTenants,
    AdminCreateTenant,
    AdminGetTenant,
    AdminUpdateTenant,
    AdminReplaceTenant,
    AdminDeleteTenant,
    AdminListUsers,
    AdminCreateUser,
    AdminGetUser,
    AdminUpdateUser,
    AdminDeleteUser,
    AdminListKeys,
    AdminCreateKey,
    AdminGetKey,
    AdminRevokeKey,
    AdminUsage,
    CreateSession,
    DeleteSession,
    CancelRun,
    Decide,
    Chat,
    ChatStream,
    WsChat,
    ListMcpServers,
    AddMcpServer,
    GetMcpServer,
    ReplaceMcpServer,
    DeleteMcpServer,
    McpInitialize,
    // Rights beyond the route itself (DESIGN §13): the same routes with the body that needs them.
    CreateSessionAutoApprove,
    ReplaceAgentAutoApprove,
    AddStdioMcpServer,
    OpenAiCompletion,
    OpenAiModels,
    OpenAiCreateResponse,
    OpenAiGetResponse,
    OpenAiDeleteResponse,
    OpenAiResponseInputItems,
    OpenAiCancelResponse,
    // An assistant as an A2A agent: its public card and its JSON-RPC endpoint.
    A2aCard,
    A2aSendMessage,
    A2aPushConfigs,
    ListProfiles,
    CreateProfile,
    GetProfile,
    ReplaceProfile,
    DeleteProfile,
    ListModelConnections,
    CreateModelConnection,
    GetModelConnection,
    ReplaceModelConnection,
    DeleteModelConnection,
    ListRemoteAgents,
    CreateRemoteAgent,
    GetRemoteAgent,
    DeleteRemoteAgent,
    ListDataSources,
    CreateDataSource,
    GetDataSource,
    ReplaceDataSource,
    DeleteDataSource,
    GetFile,
    ListSkills,
    UploadSkill,
    GetSkill,
    PutSkill,
    DeleteSkill,
    GetSkillFile,
    ListUserSkills,
    UploadUserSkill,
    GetUserSkill,
    PutUserSkill,
    DeleteUserSkill,
    GetUserSkillFile,
    ListMemories,
    SearchMemories,
    CreateMemory,
    CreateTenantMemory,
    GetMemory,
    GetTenantMemory,
    UpdateMemory,
    UpdateTenantMemory,
    DeleteMemory,
    DeleteTenantMemory,
}

use Route::*;

pub const ROUTES: &[Route] = &[
    Health,
    ResourceMetadata,
    McpResourceMetadata,
    VirtualResourceMetadata,
    HealthLive,
    HealthReady,
    Metrics,
    OpenApi,
    Me,
    ListSessions,
    GetSession,
    ListMessages,
    ListEvents,
    ListAgents,
    CreateAgent,
    GetAgent,
    CreateAgentAt,
    ReplaceAgent,
    DeleteAgent,
    ListExecutions,
    GetExecution,
    ListToolCalls,
    ListExecutionsOfAnother,
    ListToolCallsOfAnother,
    TenantGet,
    TenantUsage,
    TenantWebhookSecret,
    TenantListUsers,
    TenantCreateUser,
    TenantGetUser,
    TenantUpdateUser,
    TenantDeleteUser,
    TenantListKeys,
    TenantCreateKey,
    TenantGetKey,
    TenantRevokeKey,
    TenantListRoles,
    TenantCreateRole,
    TenantGetRole,
    TenantReplaceRole,
    TenantDeleteRole,
    TenantListVirtualServers,
    TenantCreateVirtualServer,
    TenantGetVirtualServer,
    TenantReplaceVirtualServer,
    TenantDeleteVirtualServer,
    AdminListTenants,
    AdminCreateTenant,
    AdminGetTenant,
    AdminUpdateTenant,
    AdminReplaceTenant,
    AdminDeleteTenant,
    AdminListUsers,
    AdminCreateUser,
    AdminGetUser,
    AdminUpdateUser,
    AdminDeleteUser,
    AdminListKeys,
    AdminCreateKey,
    AdminGetKey,
    AdminRevokeKey,
    AdminUsage,
    CreateSession,
    DeleteSession,
    CancelRun,
    Decide,
    Chat,
    ChatStream,
    WsChat,
    ListMcpServers,
    AddMcpServer,
    GetMcpServer,
    ReplaceMcpServer,
    DeleteMcpServer,
    McpInitialize,
    CreateSessionAutoApprove,
    ReplaceAgentAutoApprove,
    AddStdioMcpServer,
    OpenAiCompletion,
    OpenAiModels,
    OpenAiCreateResponse,
    OpenAiGetResponse,
    OpenAiDeleteResponse,
    OpenAiResponseInputItems,
    OpenAiCancelResponse,
    A2aCard,
    A2aSendMessage,
    A2aPushConfigs,
    ListProfiles,
    CreateProfile,
    GetProfile,
    ReplaceProfile,
    DeleteProfile,
    ListModelConnections,
    CreateModelConnection,
    GetModelConnection,
    ReplaceModelConnection,
    DeleteModelConnection,
    ListRemoteAgents,
    CreateRemoteAgent,
    GetRemoteAgent,
    DeleteRemoteAgent,
    ListDataSources,
    CreateDataSource,
    GetDataSource,
    ReplaceDataSource,
    DeleteDataSource,
    GetFile,
    ListSkills,
    UploadSkill,
    GetSkill,
    PutSkill,
    DeleteSkill,
    GetSkillFile,
    ListUserSkills,
    UploadUserSkill,
    GetUserSkill,
    PutUserSkill,
    DeleteUserSkill,
    GetUserSkillFile,
    ListMemories,
    SearchMemories,
    CreateMemory,
    CreateTenantMemory,
    GetMemory,
    GetTenantMemory,
    UpdateMemory,
    UpdateTenantMemory,
    DeleteMemory,
    DeleteTenantMemory,
];

/// Expected status per caller, in the order of [`WHO`].
/// What the custom role `matrix-auditor` gets: a member's answer where its areas (`audit`,
/// `agents`) or no area apply, else 403.
fn expected_custom(route: Route) -> u16 {
    match route {
        Health | HealthLive | HealthReady | Metrics | OpenApi | Me => 200,
        // Public: no key needed, so no area applies.
        ResourceMetadata | McpResourceMetadata | VirtualResourceMetadata | A2aCard => 200,
        // audit
        ListExecutions | ListToolCalls => 200,
        ListExecutionsOfAnother | ListToolCallsOfAnother => 403,
        // The seeded run is the member's, not the auditor's.
        GetExecution => 404,
        // agents: tenant-wide reads; writes are the admin's
        ListAgents | GetAgent | ListProfiles | GetProfile | ListRemoteAgents | GetRemoteAgent => {
            200
        }
        CreateAgent
        | CreateAgentAt
        | ReplaceAgent
        | DeleteAgent
        | ReplaceAgentAutoApprove
        | CreateProfile
        | ReplaceProfile
        | DeleteProfile
        | CreateRemoteAgent
        | DeleteRemoteAgent => 403,
        // Everything else: another area, or an admin's route.
        _ => 403,
    }
}

pub fn expected(route: Route) -> [u16; 8] {
    let [a, b, c, d, e, f, g] = expected_builtin(route);
    [a, b, c, d, e, f, g, expected_custom(route)]
}

fn expected_builtin(route: Route) -> [u16; 7] {
    //                 none bad  rev  other member admin platform
    const OPEN: [u16; 7] = [200, 200, 200, 200, 200, 200, 200];
    const ANY_CALLER: [u16; 7] = [401, 401, 401, 200, 200, 200, 200];
    // Tenant data everyone in the tenant may read; the outsider lists its own (200).
    const TENANT_LIST: [u16; 7] = [401, 401, 401, 200, 200, 200, 403];
    // A row of A the member owns.
    const OWN_ROW: [u16; 7] = [401, 401, 401, 404, 200, 200, 403];
    const ADMIN_LIST: [u16; 7] = [401, 401, 401, 200, 403, 200, 403];
    const ADMIN_CREATE: [u16; 7] = [401, 401, 401, 201, 403, 201, 403];
    const ADMIN_ROW: [u16; 7] = [401, 401, 401, 404, 403, 200, 403];
    const ADMIN_DELETE: [u16; 7] = [401, 401, 401, 404, 403, 204, 403];
    const PLATFORM: [u16; 7] = [401, 401, 401, 403, 403, 403, 200];
    const PLATFORM_CREATE: [u16; 7] = [401, 401, 401, 403, 403, 403, 201];
    const PLATFORM_DELETE: [u16; 7] = [401, 401, 401, 403, 403, 403, 204];
    match route {
        Health
        | HealthLive
        | HealthReady
        | Metrics
        | OpenApi
        | ResourceMetadata
        | McpResourceMetadata
        | VirtualResourceMetadata
        | A2aCard => OPEN,
        Me => ANY_CALLER,
        // A's agent: B's admin finds no such agent for its key (404).
        A2aSendMessage | A2aPushConfigs => [401, 401, 401, 404, 200, 200, 403],
        ListSessions | ListAgents | ListExecutions | ListToolCalls | ListProfiles
        | ListModelConnections | ListRemoteAgents => TENANT_LIST,
        // A member may not name another user; B's admin names a user B does not have (an
        // empty page of B's own rows).
        ListExecutionsOfAnother | ListToolCallsOfAnother => [401, 401, 401, 200, 403, 200, 403],
        GetSession | ListMessages | ListEvents | GetExecution | GetAgent | GetProfile
        | GetModelConnection | GetRemoteAgent => OWN_ROW,
        CreateAgent
        | CreateAgentAt
        | TenantCreateUser
        | CreateProfile
        | CreateModelConnection
        | CreateRemoteAgent => ADMIN_CREATE,
        ReplaceAgent
        | TenantGetUser
        | TenantUpdateUser
        | TenantGetKey
        | TenantRevokeKey
        | ReplaceProfile
        | ReplaceModelConnection => ADMIN_ROW,
        DeleteAgent
        | TenantDeleteUser
        | DeleteProfile
        | DeleteModelConnection
        | DeleteRemoteAgent => ADMIN_DELETE,
        // The outsider reads its own tenant (B), never A.
        TenantGet
        | TenantUsage
        | TenantWebhookSecret
        | TenantListUsers
        | TenantListKeys
        | TenantListRoles
        | TenantListVirtualServers => ADMIN_LIST,
        TenantCreateRole | TenantCreateVirtualServer => ADMIN_CREATE,
        TenantGetRole | TenantReplaceRole | TenantGetVirtualServer | TenantReplaceVirtualServer => {
            ADMIN_ROW
        }
        TenantDeleteRole | TenantDeleteVirtualServer => ADMIN_DELETE,
        // B's admin names a user of A: no such user in B.
        TenantCreateKey => [401, 401, 401, 422, 403, 201, 403],
        AdminCreateTenant | AdminCreateUser | AdminCreateKey => PLATFORM_CREATE,
        AdminDeleteTenant | AdminDeleteUser => PLATFORM_DELETE,
        AdminListTenants | AdminGetTenant | AdminUpdateTenant | AdminReplaceTenant
        | AdminListUsers | AdminGetUser | AdminUpdateUser | AdminListKeys | AdminGetKey
        | AdminRevokeKey | AdminUsage => PLATFORM,
        // Creating works for any tenant caller: the outsider creates in its own tenant.
        CreateSession => [401, 401, 401, 201, 201, 201, 403],
        // The outsider's `default` is its own tenant's assistant.
        Chat | ChatStream | OpenAiCompletion => [401, 401, 401, 200, 200, 200, 403],
        OpenAiModels => TENANT_LIST,
        // The outsider's `default` is its own tenant's assistant.
        OpenAiCreateResponse => [401, 401, 401, 200, 200, 200, 403],
        // A fresh response of A's member each time: only its own user sees it (A's admin too
        // gets 404, as another tenant's key does).
        OpenAiGetResponse
        | OpenAiDeleteResponse
        | OpenAiResponseInputItems
        | OpenAiCancelResponse => [401, 401, 401, 404, 200, 404, 403],
        // A fresh session of A's member each time.
        DeleteSession => [401, 401, 401, 404, 204, 204, 403],
        // The seeded session has no active run (`no_active_run`); 200 is in `streaming`.
        CancelRun => [401, 401, 401, 404, 404, 404, 403],
        // The seeded approval is already decided.
        Decide => [401, 401, 401, 404, 409, 409, 403],
        // A plain GET is not an upgrade: callers who get that far get 400 (101 is in `streaming`).
        WsChat => [401, 401, 401, 404, 400, 400, 403],
        // A's member's servers: the member and A's admin may; B's admin finds no such user.
        ListMcpServers | GetMcpServer | ReplaceMcpServer => OWN_ROW,
        AddMcpServer => [401, 401, 401, 404, 201, 201, 403],
        DeleteMcpServer => [401, 401, 401, 404, 204, 204, 403],
        // Any tenant user may open an MCP session (their own tools); the platform key has none.
        McpInitialize => [401, 401, 401, 200, 200, 200, 403],
        // Switching approvals off is a tenant admin's right (B's admin does it in B).
        CreateSessionAutoApprove => [401, 401, 401, 201, 403, 201, 403],
        ReplaceAgentAutoApprove => ADMIN_ROW,
        // A has the `stdio_mcp` feature; the role right is still the admin's.
        AddStdioMcpServer => [401, 401, 401, 404, 403, 201, 403],
        // Tenant skills: everyone in the tenant reads them, its admins write them; B's admin
        // reads and writes B's (a PUT of the name creates it in B).
        ListSkills => TENANT_LIST,
        UploadSkill => ADMIN_CREATE,
        GetSkill | GetSkillFile => OWN_ROW,
        PutSkill => [401, 401, 401, 201, 403, 200, 403],
        DeleteSkill => ADMIN_DELETE,
        // A's member's own skills: the member and A's admin; B's admin finds no such user.
        ListUserSkills | GetUserSkill | GetUserSkillFile | PutUserSkill => OWN_ROW,
        UploadUserSkill => [401, 401, 401, 404, 201, 201, 403],
        DeleteUserSkill => [401, 401, 401, 404, 204, 204, 403],
        // Data sources: tenant admins only; B's admin manages B's (an empty list, a create in B).
        ListDataSources => ADMIN_LIST,
        CreateDataSource => ADMIN_CREATE,
        GetDataSource | ReplaceDataSource => ADMIN_ROW,
        DeleteDataSource => ADMIN_DELETE,
        // Each caller reads their own workspace: only A's member has the file.
        GetFile => [401, 401, 401, 404, 200, 404, 403],
        // Memories: everyone lists and searches what they see (the outsider, B's); a `user`
        // memory is its owner's alone, A's admin included (404, as if absent); the tenant's
        // are read by all of A and written by A's admins.
        ListMemories | SearchMemories => TENANT_LIST,
        CreateMemory => [401, 401, 401, 201, 201, 201, 403],
        CreateTenantMemory => ADMIN_CREATE,
        GetMemory | UpdateMemory => [401, 401, 401, 404, 200, 404, 403],
        GetTenantMemory => OWN_ROW,
        UpdateTenantMemory => ADMIN_ROW,
        DeleteMemory => [401, 401, 401, 404, 204, 404, 403],
        DeleteTenantMemory => ADMIN_DELETE,
    }
}

pub struct MatrixFx {
    /// The key of A's user holding `matrix-auditor`.
    pub custom_key: String,
    pub a: TenantFx,
    pub b: TenantFx,
    pub revoked_key: String,
    pub seeded: Seeded,
    /// A's member's own memory, and a tenant memory of A.
    pub own_memory: String,
    pub tenant_memory: String,
    /// A remote A2A agent's card (tests/api/a2a_remote.rs): A has it registered as
    /// `matrix-remote`.
    pub remote_card_url: String,
}

pub async fn fixture(ctx: &Ctx) -> MatrixFx {
    let a = ctx
        .tenant_with(json!({ "features_enabled": ["stdio_mcp"] }))
        .await;
    let b = ctx.tenant().await;
    let revoked = ctx.member(&a.id, "admin").await;
    ctx.ok(
        Method::DELETE,
        &format!("/api/v1/admin/tenants/{}/api-keys/{}", a.id, revoked.key_id),
        ADMIN_KEY,
        None,
        200,
    )
    .await;
    ctx.ok(
        Method::POST,
        "/api/v1/agents",
        &a.admin.key,
        Some(json!({ "id": "extra" })),
        201,
    )
    .await;
    ctx.ok(
        Method::POST,
        "/api/v1/profiles",
        &a.admin.key,
        Some(json!({ "id": "matrix-profile" })),
        201,
    )
    .await;
    ctx.ok(
        Method::POST,
        "/api/v1/model-connections",
        &a.admin.key,
        Some(json!({ "id": "matrix-model", "provider": "openai",
                     "base_url": "http://127.0.0.2:9/v1", "api_key": "matrix-key" })),
        201,
    )
    .await;
    let remote_card_url = crate::a2a_remote::static_card_server().await;
    ctx.ok(
        Method::POST,
        "/api/v1/remote-agents",
        &a.admin.key,
        Some(json!({ "id": "matrix-remote", "url": remote_card_url,
                     "auth": {"type": "bearer", "token": "matrix-token"} })),
        201,
    )
    .await;
    ctx.ok(
        Method::POST,
        "/api/v1/skills",
        &a.admin.key,
        Some(skill_body("matrix-skill")),
        201,
    )
    .await;
    ctx.ok(
        Method::POST,
        "/api/v1/skills",
        &a.admin.key,
        Some(skill_body("matrix-put")),
        201,
    )
    .await;
    ctx.ok(
        Method::POST,
        &format!("/api/v1/users/{}/skills", a.member.user_id),
        &a.member.key,
        Some(skill_body("matrix-own")),
        201,
    )
    .await;
    ctx.ok(
        Method::POST,
        "/api/v1/data-sources",
        &a.admin.key,
        Some(json!({ "id": "matrix-source", "url": "postgres://reader:pw@127.0.0.2:6432/matrix" })),
        201,
    )
    .await;
    let own = ctx
        .server
        .data_dir
        .path()
        .join("workspaces")
        .join(&a.id)
        .join(&a.member.user_id);
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("matrix.txt"), "the member's own file").unwrap();
    let seeded = ctx.seed_session(&a, &a.member.user_id, 4, 4).await;
    ctx.ok(
        Method::POST,
        &format!("/api/v1/users/{}/mcp-servers", a.member.user_id),
        &a.member.key,
        Some(json!({ "name": "matrix", "url": "http://127.0.0.2:9/matrix" })),
        201,
    )
    .await;
    let own_memory = create_memory(ctx, &a.member.key, "user").await;
    let tenant_memory = create_memory(ctx, &a.admin.key, "tenant").await;
    ctx.ok(
        Method::POST,
        "/api/v1/tenant/roles",
        &a.admin.key,
        Some(json!({ "name": "matrix-auditor", "tools": [], "areas": ["audit", "agents"] })),
        201,
    )
    .await;
    ctx.ok(
        Method::POST,
        "/api/v1/tenant/mcp-virtual-servers",
        &a.admin.key,
        Some(json!({ "name": "matrix-desk", "tools": ["files:read_*"] })),
        201,
    )
    .await;
    let auditor = ctx
        .ok(
            Method::POST,
            "/api/v1/tenant/users",
            &a.admin.key,
            Some(json!({ "name": unique("auditor"), "custom_role": "matrix-auditor" })),
            201,
        )
        .await;
    let custom_key = ctx
        .ok(
            Method::POST,
            "/api/v1/tenant/api-keys",
            &a.admin.key,
            Some(json!({ "user_id": auditor["id"], "name": "auditor" })),
            201,
        )
        .await["key"]
        .as_str()
        .unwrap()
        .to_string();
    MatrixFx {
        custom_key,
        a,
        b,
        revoked_key: revoked.key,
        seeded,
        own_memory,
        tenant_memory,
        remote_card_url,
    }
}

/// A new memory of `scope` (unique content, so it never merges into another), by `key`.
async fn create_memory(ctx: &Ctx, key: &str, scope: &str) -> String {
    let m = ctx
        .ok(
            Method::POST,
            "/api/v1/memories",
            key,
            Some(json!({ "content": unique("matrix memory"), "scope": scope })),
            201,
        )
        .await;
    m["id"].as_str().unwrap().to_string()
}

/// A skill uploaded as JSON files.
fn skill_body(name: &str) -> Value {
    json!({"files": [{
        "path": "SKILL.md",
        "content": format!("---\nname: {name}\ndescription: A skill of the matrix.\n---\nDo nothing.\n"),
    }]})
}

fn key_of(who: Who, fx: &MatrixFx) -> Option<String> {
    match who {
        Who::NoKey => None,
        Who::BadKey => Some("agk_NotAReal_0000000000000000000000000000000000000000".into()),
        Who::Revoked => Some(fx.revoked_key.clone()),
        Who::OtherTenant => Some(fx.b.admin.key.clone()),
        Who::Member => Some(fx.a.member.key.clone()),
        Who::TenantAdmin => Some(fx.a.admin.key.clone()),
        Who::PlatformAdmin => Some(ADMIN_KEY.into()),
        Who::Custom => Some(fx.custom_key.clone()),
    }
}

pub struct Req {
    pub method: Method,
    pub path: String,
    pub body: Option<Value>,
    /// Extra headers (`/mcp` needs its `Accept`).
    pub headers: Vec<(&'static str, &'static str)>,
}

fn req(method: Method, path: String, body: Option<Value>) -> Req {
    Req {
        method,
        path,
        body,
        headers: Vec::new(),
    }
}

/// A fresh tenant, for the routes that replace or delete one.
async fn fresh_tenant(ctx: &Ctx) -> String {
    let t = ctx
        .ok(
            Method::POST,
            "/api/v1/admin/tenants",
            ADMIN_KEY,
            Some(json!({ "name": unique("victim") })),
            201,
        )
        .await;
    t["id"].as_str().unwrap().to_string()
}

async fn fresh_user(ctx: &Ctx, tenant: &str) -> String {
    let u = ctx
        .ok(
            Method::POST,
            &format!("/api/v1/admin/tenants/{tenant}/users"),
            ADMIN_KEY,
            Some(json!({ "name": unique("victim") })),
            201,
        )
        .await;
    u["id"].as_str().unwrap().to_string()
}

async fn fresh_key(ctx: &Ctx, fx: &MatrixFx) -> String {
    ctx.member(&fx.a.id, "member").await.key_id
}

/// The request for `route`, creating a fresh target where the call would consume it.
pub async fn build(ctx: &Ctx, fx: &MatrixFx, route: Route) -> Req {
    let a = &fx.a.id;
    let s = fx.seeded.session_id;
    let r = fx.seeded.run_id;
    let m2 = &fx.a.member2.user_id;
    let adm = format!("/api/v1/admin/tenants/{a}");
    let mcp = format!("/api/v1/users/{}/mcp-servers", fx.a.member.user_id);
    let own_skills = format!("/api/v1/users/{}/skills", fx.a.member.user_id);
    match route {
        Health => req(Method::GET, "/api/v1/health".into(), None),
        HealthLive => req(Method::GET, "/api/v1/health/live".into(), None),
        HealthReady => req(Method::GET, "/api/v1/health/ready".into(), None),
        Metrics => req(Method::GET, "/metrics".into(), None),
        ResourceMetadata => req(
            Method::GET,
            "/.well-known/oauth-protected-resource".into(),
            None,
        ),
        McpResourceMetadata => req(
            Method::GET,
            "/.well-known/oauth-protected-resource/mcp".into(),
            None,
        ),
        VirtualResourceMetadata => req(
            Method::GET,
            "/.well-known/oauth-protected-resource/mcp/matrix-desk".into(),
            None,
        ),
        OpenApi => req(Method::GET, "/openapi.json".into(), None),
        Me => req(Method::GET, "/api/v1/me".into(), None),
        ListSessions => req(Method::GET, "/api/v1/sessions".into(), None),
        GetSession => req(Method::GET, format!("/api/v1/sessions/{s}"), None),
        ListMessages => req(Method::GET, format!("/api/v1/sessions/{s}/messages"), None),
        ListEvents => req(Method::GET, format!("/api/v1/sessions/{s}/events"), None),
        ListAgents => req(Method::GET, "/api/v1/agents".into(), None),
        CreateAgent => req(
            Method::POST,
            "/api/v1/agents".into(),
            Some(json!({ "id": unique("agent") })),
        ),
        GetAgent => req(Method::GET, "/api/v1/agents/extra".into(), None),
        CreateAgentAt => req(
            Method::POST,
            format!("/api/v1/agents/{}", unique("agent")),
            Some(json!({})),
        ),
        ReplaceAgent => req(
            Method::PUT,
            "/api/v1/agents/extra".into(),
            Some(json!({ "recursion_limit": 30 })),
        ),
        DeleteAgent => {
            let id = unique("doomed");
            ctx.ok(
                Method::POST,
                "/api/v1/agents",
                &fx.a.admin.key,
                Some(json!({ "id": id })),
                201,
            )
            .await;
            req(Method::DELETE, format!("/api/v1/agents/{id}"), None)
        }
        ListProfiles => req(Method::GET, "/api/v1/profiles".into(), None),
        CreateProfile => req(
            Method::POST,
            "/api/v1/profiles".into(),
            Some(json!({ "id": unique("profile") })),
        ),
        GetProfile => req(Method::GET, "/api/v1/profiles/matrix-profile".into(), None),
        ReplaceProfile => req(
            Method::PUT,
            "/api/v1/profiles/matrix-profile".into(),
            Some(json!({ "recursion_limit": 30 })),
        ),
        DeleteProfile => {
            let id = unique("doomed");
            ctx.ok(
                Method::POST,
                "/api/v1/profiles",
                &fx.a.admin.key,
                Some(json!({ "id": id })),
                201,
            )
            .await;
            req(Method::DELETE, format!("/api/v1/profiles/{id}"), None)
        }
        ListModelConnections => req(Method::GET, "/api/v1/model-connections".into(), None),
        CreateModelConnection => req(
            Method::POST,
            "/api/v1/model-connections".into(),
            Some(json!({ "id": unique("model"), "provider": "anthropic" })),
        ),
        GetModelConnection => req(
            Method::GET,
            "/api/v1/model-connections/matrix-model".into(),
            None,
        ),
        ReplaceModelConnection => req(
            Method::PUT,
            "/api/v1/model-connections/matrix-model".into(),
            Some(
                json!({ "provider": "openai", "base_url": "http://127.0.0.2:9/v1", "timeout_secs": 30 }),
            ),
        ),
        DeleteModelConnection => {
            let id = unique("doomed");
            ctx.ok(
                Method::POST,
                "/api/v1/model-connections",
                &fx.a.admin.key,
                Some(json!({ "id": id, "provider": "openai" })),
                201,
            )
            .await;
            req(
                Method::DELETE,
                format!("/api/v1/model-connections/{id}"),
                None,
            )
        }
        ListRemoteAgents => req(Method::GET, "/api/v1/remote-agents".into(), None),
        CreateRemoteAgent => req(
            Method::POST,
            "/api/v1/remote-agents".into(),
            Some(json!({ "id": unique("remote"), "url": fx.remote_card_url })),
        ),
        GetRemoteAgent => req(
            Method::GET,
            "/api/v1/remote-agents/matrix-remote".into(),
            None,
        ),
        DeleteRemoteAgent => {
            let id = unique("doomed");
            ctx.ok(
                Method::POST,
                "/api/v1/remote-agents",
                &fx.a.admin.key,
                Some(json!({ "id": id, "url": fx.remote_card_url })),
                201,
            )
            .await;
            req(Method::DELETE, format!("/api/v1/remote-agents/{id}"), None)
        }
        ListDataSources => req(Method::GET, "/api/v1/data-sources".into(), None),
        CreateDataSource => req(
            Method::POST,
            "/api/v1/data-sources".into(),
            Some(json!({ "id": unique("source"), "url": "mysql://u@127.0.0.2:6306/shop" })),
        ),
        GetDataSource => req(
            Method::GET,
            "/api/v1/data-sources/matrix-source".into(),
            None,
        ),
        ReplaceDataSource => req(
            Method::PUT,
            "/api/v1/data-sources/matrix-source".into(),
            Some(
                json!({ "url": "postgres://reader@127.0.0.2:6432/matrix", "allowed_roles": ["admin", "member"] }),
            ),
        ),
        DeleteDataSource => {
            let id = unique("doomed");
            ctx.ok(
                Method::POST,
                "/api/v1/data-sources",
                &fx.a.admin.key,
                Some(json!({ "id": id, "url": "postgres://u@127.0.0.2:6432/doomed" })),
                201,
            )
            .await;
            req(Method::DELETE, format!("/api/v1/data-sources/{id}"), None)
        }
        GetFile => req(Method::GET, "/api/v1/files/matrix.txt".into(), None),
        ListSkills => req(Method::GET, "/api/v1/skills".into(), None),
        UploadSkill => req(
            Method::POST,
            "/api/v1/skills".into(),
            Some(skill_body(&unique("skill"))),
        ),
        GetSkill => req(Method::GET, "/api/v1/skills/matrix-skill".into(), None),
        GetSkillFile => req(
            Method::GET,
            "/api/v1/skills/matrix-skill/file?path=SKILL.md".into(),
            None,
        ),
        // Its own name: B's admin creates B's `matrix-put`, which no other cell reads.
        PutSkill => req(
            Method::PUT,
            "/api/v1/skills/matrix-put".into(),
            Some(skill_body("matrix-put")),
        ),
        DeleteSkill => {
            let id = unique("doomed");
            ctx.ok(
                Method::POST,
                "/api/v1/skills",
                &fx.a.admin.key,
                Some(skill_body(&id)),
                201,
            )
            .await;
            req(Method::DELETE, format!("/api/v1/skills/{id}"), None)
        }
        ListUserSkills => req(Method::GET, own_skills.clone(), None),
        UploadUserSkill => req(
            Method::POST,
            own_skills.clone(),
            Some(skill_body(&unique("skill"))),
        ),
        GetUserSkill => req(Method::GET, format!("{own_skills}/matrix-own"), None),
        GetUserSkillFile => req(
            Method::GET,
            format!("{own_skills}/matrix-own/file?path=SKILL.md"),
            None,
        ),
        PutUserSkill => req(
            Method::PUT,
            format!("{own_skills}/matrix-own"),
            Some(skill_body("matrix-own")),
        ),
        DeleteUserSkill => {
            let id = unique("doomed");
            ctx.ok(
                Method::POST,
                &own_skills,
                &fx.a.member.key,
                Some(skill_body(&id)),
                201,
            )
            .await;
            req(Method::DELETE, format!("{own_skills}/{id}"), None)
        }
        ListMemories => req(Method::GET, "/api/v1/memories".into(), None),
        SearchMemories => req(Method::GET, "/api/v1/memories/search?q=matrix".into(), None),
        CreateMemory => req(
            Method::POST,
            "/api/v1/memories".into(),
            Some(json!({ "content": unique("created in the matrix") })),
        ),
        CreateTenantMemory => req(
            Method::POST,
            "/api/v1/memories".into(),
            Some(json!({ "content": unique("tenant knowledge"), "scope": "tenant" })),
        ),
        GetMemory => req(
            Method::GET,
            format!("/api/v1/memories/{}", fx.own_memory),
            None,
        ),
        GetTenantMemory => req(
            Method::GET,
            format!("/api/v1/memories/{}", fx.tenant_memory),
            None,
        ),
        UpdateMemory => req(
            Method::PATCH,
            format!("/api/v1/memories/{}", fx.own_memory),
            Some(json!({ "kind": "preference" })),
        ),
        UpdateTenantMemory => req(
            Method::PATCH,
            format!("/api/v1/memories/{}", fx.tenant_memory),
            Some(json!({ "kind": "decision" })),
        ),
        DeleteMemory => {
            let id = create_memory(ctx, &fx.a.member.key, "user").await;
            req(Method::DELETE, format!("/api/v1/memories/{id}"), None)
        }
        DeleteTenantMemory => {
            let id = create_memory(ctx, &fx.a.admin.key, "tenant").await;
            req(Method::DELETE, format!("/api/v1/memories/{id}"), None)
        }
        ListExecutions => req(Method::GET, "/api/v1/executions".into(), None),
        GetExecution => req(Method::GET, format!("/api/v1/executions/{r}"), None),
        ListToolCalls => req(
            Method::GET,
            "/api/v1/tool-calls?tool_name=read_file".into(),
            None,
        ),
        ListExecutionsOfAnother => req(
            Method::GET,
            format!("/api/v1/executions?user_id={m2}&tool_name=write_file"),
            None,
        ),
        ListToolCallsOfAnother => req(
            Method::GET,
            format!("/api/v1/tool-calls?user_id={m2}"),
            None,
        ),
        TenantGet => req(Method::GET, "/api/v1/tenant".into(), None),
        TenantUsage => req(Method::GET, "/api/v1/tenant/usage".into(), None),
        TenantWebhookSecret => req(Method::GET, "/api/v1/tenant/webhook-secret".into(), None),
        TenantListUsers => req(Method::GET, "/api/v1/tenant/users".into(), None),
        TenantCreateUser => req(
            Method::POST,
            "/api/v1/tenant/users".into(),
            Some(json!({ "name": unique("new") })),
        ),
        TenantGetUser => req(Method::GET, format!("/api/v1/tenant/users/{m2}"), None),
        TenantUpdateUser => req(
            Method::PATCH,
            format!("/api/v1/tenant/users/{m2}"),
            Some(json!({ "disabled": false })),
        ),
        TenantDeleteUser => {
            let u = fresh_user(ctx, a).await;
            req(Method::DELETE, format!("/api/v1/tenant/users/{u}"), None)
        }
        TenantListKeys => req(Method::GET, "/api/v1/tenant/api-keys".into(), None),
        TenantCreateKey => req(
            Method::POST,
            "/api/v1/tenant/api-keys".into(),
            Some(json!({ "user_id": m2, "name": "minted" })),
        ),
        TenantGetKey => req(
            Method::GET,
            format!("/api/v1/tenant/api-keys/{}", fx.a.member2.key_id),
            None,
        ),
        TenantRevokeKey => {
            let k = fresh_key(ctx, fx).await;
            req(Method::DELETE, format!("/api/v1/tenant/api-keys/{k}"), None)
        }
        TenantListRoles => req(Method::GET, "/api/v1/tenant/roles".into(), None),
        TenantCreateRole => req(
            Method::POST,
            "/api/v1/tenant/roles".into(),
            Some(json!({ "name": unique("role"), "tools": ["files:read_*"], "areas": ["files"] })),
        ),
        TenantGetRole => req(
            Method::GET,
            "/api/v1/tenant/roles/matrix-auditor".into(),
            None,
        ),
        // The same definition again: the auditor's column stays what it is.
        TenantReplaceRole => req(
            Method::PUT,
            "/api/v1/tenant/roles/matrix-auditor".into(),
            Some(json!({ "tools": [], "areas": ["agents", "audit"] })),
        ),
        TenantDeleteRole => {
            let name = unique("doomed");
            ctx.ok(
                Method::POST,
                "/api/v1/tenant/roles",
                &fx.a.admin.key,
                Some(json!({ "name": name, "tools": [], "areas": [] })),
                201,
            )
            .await;
            req(Method::DELETE, format!("/api/v1/tenant/roles/{name}"), None)
        }
        TenantListVirtualServers => req(
            Method::GET,
            "/api/v1/tenant/mcp-virtual-servers".into(),
            None,
        ),
        TenantCreateVirtualServer => req(
            Method::POST,
            "/api/v1/tenant/mcp-virtual-servers".into(),
            Some(json!({ "name": unique("desk"), "tools": ["files:read_*"] })),
        ),
        TenantGetVirtualServer => req(
            Method::GET,
            "/api/v1/tenant/mcp-virtual-servers/matrix-desk".into(),
            None,
        ),
        TenantReplaceVirtualServer => req(
            Method::PUT,
            "/api/v1/tenant/mcp-virtual-servers/matrix-desk".into(),
            Some(json!({ "tools": ["files:read_*"] })),
        ),
        TenantDeleteVirtualServer => {
            let name = unique("doomed");
            ctx.ok(
                Method::POST,
                "/api/v1/tenant/mcp-virtual-servers",
                &fx.a.admin.key,
                Some(json!({ "name": name, "tools": ["files:*"] })),
                201,
            )
            .await;
            req(
                Method::DELETE,
                format!("/api/v1/tenant/mcp-virtual-servers/{name}"),
                None,
            )
        }
        AdminListTenants => req(Method::GET, "/api/v1/admin/tenants".into(), None),
        AdminCreateTenant => req(
            Method::POST,
            "/api/v1/admin/tenants".into(),
            Some(json!({ "name": unique("t") })),
        ),
        AdminGetTenant => req(Method::GET, adm, None),
        AdminUpdateTenant => req(Method::PATCH, adm, Some(json!({ "max_mcp_servers": 10 }))),
        AdminReplaceTenant => {
            let t = fresh_tenant(ctx).await;
            req(
                Method::PUT,
                format!("/api/v1/admin/tenants/{t}"),
                Some(json!({ "name": unique("replaced") })),
            )
        }
        AdminDeleteTenant => {
            let t = fresh_tenant(ctx).await;
            req(Method::DELETE, format!("/api/v1/admin/tenants/{t}"), None)
        }
        AdminListUsers => req(Method::GET, format!("{adm}/users"), None),
        AdminCreateUser => req(
            Method::POST,
            format!("{adm}/users"),
            Some(json!({ "name": unique("u") })),
        ),
        AdminGetUser => req(Method::GET, format!("{adm}/users/{m2}"), None),
        AdminUpdateUser => req(
            Method::PATCH,
            format!("{adm}/users/{m2}"),
            Some(json!({ "role": "member" })),
        ),
        AdminDeleteUser => {
            let u = fresh_user(ctx, a).await;
            req(Method::DELETE, format!("{adm}/users/{u}"), None)
        }
        AdminListKeys => req(Method::GET, format!("{adm}/api-keys"), None),
        AdminCreateKey => req(
            Method::POST,
            format!("{adm}/api-keys"),
            Some(json!({ "user_id": m2, "name": "k" })),
        ),
        AdminGetKey => req(
            Method::GET,
            format!("{adm}/api-keys/{}", fx.a.member2.key_id),
            None,
        ),
        AdminRevokeKey => {
            let k = fresh_key(ctx, fx).await;
            req(Method::DELETE, format!("{adm}/api-keys/{k}"), None)
        }
        AdminUsage => req(Method::GET, format!("{adm}/usage"), None),
        CreateSession => req(
            Method::POST,
            "/api/v1/sessions".into(),
            Some(json!({ "metadata": { "from": "matrix" } })),
        ),
        DeleteSession => {
            let doomed = ctx.seed_session(&fx.a, &fx.a.member.user_id, 1, 1).await;
            req(
                Method::DELETE,
                format!("/api/v1/sessions/{}", doomed.session_id),
                None,
            )
        }
        CancelRun => req(Method::POST, format!("/api/v1/sessions/{s}/cancel"), None),
        Decide => req(
            Method::POST,
            format!("/api/v1/sessions/{s}/approvals/{}", fx.seeded.approval_id),
            Some(json!({ "type": "approve" })),
        ),
        Chat => req(
            Method::POST,
            "/api/v1/chat".into(),
            Some(json!({ "message": "hello from the matrix" })),
        ),
        ChatStream => req(
            Method::POST,
            "/api/v1/chat/stream".into(),
            Some(json!({ "message": "hello from the matrix" })),
        ),
        WsChat => req(Method::GET, format!("/ws/chat/{s}"), None),
        OpenAiCompletion => req(
            Method::POST,
            "/v1/chat/completions".into(),
            Some(json!({
                "model": "default",
                "messages": [{"role": "user", "content": "hello from the matrix"}],
            })),
        ),
        OpenAiModels => req(Method::GET, "/v1/models".into(), None),
        OpenAiCreateResponse => req(
            Method::POST,
            "/v1/responses".into(),
            Some(json!({"model": "default", "input": "hello from the matrix"})),
        ),
        OpenAiGetResponse
        | OpenAiDeleteResponse
        | OpenAiResponseInputItems
        | OpenAiCancelResponse => {
            // Only a background response can be cancelled.
            let made = ctx
                .ok(
                    Method::POST,
                    "/v1/responses",
                    &fx.a.member.key,
                    Some(
                        json!({"model": "default", "input": "/echo a response of the matrix",
                                "background": route == OpenAiCancelResponse}),
                    ),
                    200,
                )
                .await;
            let id = made["id"].as_str().unwrap();
            match route {
                OpenAiGetResponse => req(Method::GET, format!("/v1/responses/{id}"), None),
                OpenAiDeleteResponse => req(Method::DELETE, format!("/v1/responses/{id}"), None),
                OpenAiCancelResponse => {
                    req(Method::POST, format!("/v1/responses/{id}/cancel"), None)
                }
                _ => req(Method::GET, format!("/v1/responses/{id}/input_items"), None),
            }
        }
        A2aCard => req(
            Method::GET,
            format!("/a2a/{a}/default/.well-known/agent-card.json"),
            None,
        ),
        A2aSendMessage => Req {
            headers: vec![("a2a-version", "1.0")],
            ..req(
                Method::POST,
                format!("/a2a/{a}/default"),
                Some(json!({
                    "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                    "params": {"message": {"messageId": "m1", "role": "ROLE_USER",
                                           "parts": [{"text": "hello from the matrix"}]}}
                })),
            )
        },
        // The push configs of a task (none of the caller's: a JSON-RPC TaskNotFound in a 200).
        A2aPushConfigs => Req {
            headers: vec![("a2a-version", "1.0")],
            ..req(
                Method::POST,
                format!("/a2a/{a}/default"),
                Some(json!({
                    "jsonrpc": "2.0", "id": 1, "method": "ListTaskPushNotificationConfigs",
                    "params": {"taskId": uuid::Uuid::new_v4().to_string()}
                })),
            )
        },
        ListMcpServers => req(Method::GET, mcp.clone(), None),
        AddMcpServer => req(
            Method::POST,
            mcp.clone(),
            Some(json!({ "name": unique("added"), "url": "http://127.0.0.2:9/added" })),
        ),
        GetMcpServer => req(Method::GET, format!("{mcp}/matrix"), None),
        ReplaceMcpServer => req(
            Method::PUT,
            format!("{mcp}/matrix"),
            Some(json!({ "name": "matrix", "url": "http://127.0.0.2:9/replaced" })),
        ),
        DeleteMcpServer => {
            let name = unique("doomed");
            ctx.ok(
                Method::POST,
                &mcp,
                &fx.a.member.key,
                Some(json!({ "name": name, "url": "http://127.0.0.2:9/doomed" })),
                201,
            )
            .await;
            req(Method::DELETE, format!("{mcp}/{name}"), None)
        }
        CreateSessionAutoApprove => req(
            Method::POST,
            "/api/v1/sessions".into(),
            Some(json!({ "auto_approve": true })),
        ),
        ReplaceAgentAutoApprove => req(
            Method::PUT,
            "/api/v1/agents/extra".into(),
            Some(json!({ "auto_approve": true })),
        ),
        AddStdioMcpServer => req(
            Method::POST,
            mcp.clone(),
            Some(json!({ "name": unique("stdio"), "command": "sh", "args": ["-c", "id"] })),
        ),
        McpInitialize => Req {
            headers: vec![("accept", "application/json, text/event-stream")],
            ..req(
                Method::POST,
                "/mcp".into(),
                Some(json!({
                    "jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                               "clientInfo": {"name": "matrix", "version": "0"}}
                })),
            )
        },
    }
}

/// Run every route as every caller; fail with the full list of mismatches.
pub async fn authorization_matrix(ctx: &Ctx) {
    let fx = fixture(ctx).await;
    let mut mismatches = Vec::new();
    let mut cells = 0;
    for &route in ROUTES {
        let want = expected(route);
        for (who, want) in WHO.iter().zip(want) {
            let r = build(ctx, &fx, route).await;
            let key = key_of(*who, &fx);
            let mut rb = ctx.request(r.method.clone(), &r.path, key.as_deref());
            for (name, value) in &r.headers {
                rb = rb.header(*name, *value);
            }
            if let Some(body) = &r.body {
                rb = rb.json(body);
            }
            let got = ctx.send(rb).await;
            cells += 1;
            if got.status != want {
                mismatches.push(format!(
                    "{route:?} as {who:?}: {} {} → {} (want {want}) {}",
                    r.method, r.path, got.status, got.body
                ));
            }
            // The kinds of refusal are told apart by their codes, and a bad key never says why.
            match got.status {
                401 => assert_eq!(got.code(), "unauthorized"),
                403 => assert!(matches!(got.code(), "forbidden" | "tenant_suspended")),
                _ => {}
            }
            if matches!(who, Who::BadKey | Who::Revoked) && got.status == 401 {
                assert_eq!(
                    got.message(),
                    ctx.call(Method::GET, "/api/v1/me", Some("agk_AAAAAAAA_x"), None)
                        .await
                        .message(),
                    "an unusable key answers the same message whatever the reason"
                );
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {cells} cells differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert_eq!(cells, ROUTES.len() * WHO.len());

    // Tenant B's admin created agents and a user in B; A saw none of it.
    let a_agents = ctx
        .ok(Method::GET, "/api/v1/agents", &fx.a.admin.key, None, 200)
        .await;
    let b_agents = ctx
        .ok(Method::GET, "/api/v1/agents", &fx.b.admin.key, None, 200)
        .await;
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_str().unwrap().to_string())
            .collect()
    };
    let (a_ids, b_ids) = (ids(&a_agents), ids(&b_agents));
    assert!(a_ids.contains(&"extra".to_string()) && !b_ids.contains(&"extra".to_string()));
    assert!(
        b_ids.iter().filter(|i| i.starts_with("agent-")).count() >= 2,
        "{b_ids:?}"
    );
    assert!(
        a_ids.iter().all(|i| !b_ids.contains(i) || i == "default"),
        "{a_ids:?} vs {b_ids:?}"
    );
}
