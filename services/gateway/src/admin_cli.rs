//! `agentry admin …`: the platform admin API from the command line — tenants, users, keys and
//! usage — against a running server with the platform admin key, or (`--direct`) straight
//! against the database the server's configuration names, for bootstrap with no server up.
//!
//! Both ways answer with the API's own JSON (the views in [`crate::views`]): `--json` prints it
//! as is, otherwise a short human summary. An error is the API's `{error_code, message,
//! details}` in either way.

use std::path::{Path, PathBuf};

use agentry_cli::{errln, outln};
use agentry_schema::api::{
    CreateApiKeyRequest, CreateTenantRequest, CreateUserRequest, Page, UpdateUserRequest,
};
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::{ApiKeyId, TenantId, UserId};
use agentry_schema::tenancy::Role;
use agentry_store::{PageRequest, platform_admin_key};
use clap::{Args, Subcommand, ValueEnum};
use sea_orm::DatabaseConnection;
use serde_json::{Value, json};

use crate::auth::PlatformAdmin;
use crate::error::ApiError;
use crate::settings::Settings;
use crate::{routes, views};
use agentry_domain::tenancy::{self, Actor};

#[derive(Args, Debug)]
pub struct AdminArgs {
    /// Server base URL.
    #[arg(
        long,
        alias = "server",
        env = "AGENTRY_URL",
        default_value = "http://127.0.0.1:8000",
        global = true
    )]
    pub url: String,
    /// A file holding the platform admin key (else AGENTRY_ADMIN_KEY, else
    /// AGENTRY_AUTH__ADMIN_KEY).
    #[arg(long, value_name = "FILE", global = true)]
    pub admin_key_file: Option<PathBuf>,
    /// Work on the database directly, with the same configuration as `agentry serve`
    /// (`--config`, AGENTRY_* variables): no server and no admin key needed.
    #[arg(long, global = true)]
    pub direct: bool,
    /// Print the API's JSON (errors too, with a non-zero exit status).
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Create a tenant, an admin user of it and a key for that user in one go: the first
    /// tenant and key of a fresh server. The key is shown once.
    Bootstrap {
        /// The tenant's name.
        tenant: String,
        /// The first user's name (a tenant admin).
        user: String,
        /// The key's name.
        #[arg(long, default_value = "first key")]
        key_name: String,
        /// Also write the key to this file (mode 600), for `agentry chat --key-file`.
        #[arg(long, value_name = "FILE")]
        key_out: Option<PathBuf>,
    },
    /// Tenants and their quotas.
    #[command(subcommand)]
    Tenants(TenantsCommand),
    /// A tenant's users.
    #[command(subcommand)]
    Users(UsersCommand),
    /// A tenant's API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// A tenant's runs, tokens and tool calls by day.
    Usage {
        /// Tenant id or name.
        tenant: String,
        /// First day (UTC, YYYY-MM-DD); default 29 days before --to.
        #[arg(long)]
        from: Option<String>,
        /// Last day (UTC, YYYY-MM-DD); default today.
        #[arg(long)]
        to: Option<String>,
    },
    /// Replace the platform admin key the server generated at its first start (a lost key):
    /// prints the new one once; the old one stops working. Needs --direct.
    ResetAdminKey,
}

#[derive(Subcommand, Debug)]
pub enum TenantsCommand {
    /// List tenants, oldest first.
    List {
        #[arg(long)]
        limit: Option<u64>,
        #[arg(long)]
        offset: Option<u64>,
    },
    /// One tenant with its quotas and policy.
    Get { tenant: String },
    /// Create a tenant (quotas left out get the defaults; 0 = no limit).
    Create {
        name: String,
        #[command(flatten)]
        quotas: QuotaFlags,
        /// More fields of the request, as a JSON object (`{"policy": {…}}`).
        #[arg(long, value_name = "JSON")]
        body: Option<String>,
    },
    /// Change some of a tenant's fields (only those given change).
    Update {
        tenant: String,
        #[arg(long)]
        name: Option<String>,
        #[arg(long, value_enum)]
        status: Option<StatusArg>,
        #[command(flatten)]
        quotas: QuotaFlags,
        /// More fields of the request, as a JSON object (`{"policy": {…}}`).
        #[arg(long, value_name = "JSON")]
        body: Option<String>,
    },
    /// Delete a tenant and everything it owns.
    Delete { tenant: String },
}

#[derive(Args, Debug, Default)]
pub struct QuotaFlags {
    #[arg(long)]
    max_users: Option<u32>,
    #[arg(long)]
    max_sessions_per_user: Option<u32>,
    #[arg(long)]
    max_mcp_servers: Option<u32>,
    #[arg(long)]
    workspace_quota_bytes: Option<u64>,
    #[arg(long)]
    requests_per_minute: Option<u32>,
    #[arg(long)]
    tokens_per_day: Option<u64>,
    #[arg(long)]
    max_concurrent_runs: Option<u32>,
    /// Feature names, comma-separated (`mcp,stdio_mcp`).
    #[arg(long, value_delimiter = ',')]
    features: Option<Vec<String>>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum StatusArg {
    Active,
    Suspended,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum RoleArg {
    Admin,
    Member,
}

impl RoleArg {
    fn wire(self) -> Role {
        match self {
            RoleArg::Admin => Role::Admin,
            RoleArg::Member => Role::Member,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum UsersCommand {
    /// A tenant's users, oldest first.
    List {
        tenant: String,
        #[arg(long)]
        limit: Option<u64>,
        #[arg(long)]
        offset: Option<u64>,
    },
    /// One user.
    Get { tenant: String, user: String },
    /// Add a user (role member unless --role admin or --custom-role NAME).
    Create {
        tenant: String,
        name: String,
        #[arg(long, value_enum)]
        role: Option<RoleArg>,
        /// One of the tenant's custom roles (docs/admin.md, "Roles").
        #[arg(long, conflicts_with = "role")]
        custom_role: Option<String>,
    },
    /// Change a user's role, or disable / enable them.
    Update {
        tenant: String,
        user: String,
        #[arg(long, value_enum)]
        role: Option<RoleArg>,
        /// One of the tenant's custom roles; `--role member` takes it away.
        #[arg(long, conflicts_with = "role")]
        custom_role: Option<String>,
        #[arg(long)]
        disabled: Option<bool>,
    },
    /// Delete a user with their keys and workspace.
    Delete { tenant: String, user: String },
}

#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// A tenant's keys (never the keys themselves), newest first.
    List {
        tenant: String,
        /// Only this user's keys (id or name).
        #[arg(long)]
        user: Option<String>,
        /// Keys whose visible prefix starts with this (`agk_AbCd`).
        #[arg(long)]
        prefix: Option<String>,
    },
    /// One key's record.
    Get { tenant: String, key_id: String },
    /// Mint a key for a user; shown once.
    Create {
        tenant: String,
        /// The user (id or name).
        #[arg(long)]
        user: String,
        #[arg(long, default_value = "cli")]
        name: String,
        /// Default: the user's role (may not exceed it).
        #[arg(long, value_enum)]
        role: Option<RoleArg>,
        /// A custom role for the key: the user's own, or any when the user is a tenant admin.
        #[arg(long, conflicts_with = "role")]
        custom_role: Option<String>,
        /// RFC 3339, in the future.
        #[arg(long)]
        expires_at: Option<String>,
        /// Also write the key to this file (mode 600).
        #[arg(long, value_name = "FILE")]
        key_out: Option<PathBuf>,
    },
    /// Revoke a key: it answers 401 from now on.
    Revoke { tenant: String, key_id: String },
}

/// What went wrong: the API's error body, or a problem before any API answered.
struct Failure {
    body: Value,
    /// 1: the API refused; 2: usage or configuration; 3: the server could not be reached.
    exit: u8,
}

impl Failure {
    fn api(code: ErrorCode, message: impl Into<String>, details: Value) -> Self {
        Failure {
            body: json!({"error_code": code.as_str(), "message": message.into(), "details": details}),
            exit: 1,
        }
    }

    fn usage(message: impl Into<String>) -> Self {
        Failure {
            exit: 2,
            ..Failure::api(ErrorCode::ValidationError, message, json!({}))
        }
    }
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Self {
        Failure::api(e.code, e.message, e.details)
    }
}

impl From<agentry_domain::DomainError> for Failure {
    fn from(e: agentry_domain::DomainError) -> Self {
        Failure::api(e.code, e.message, e.details)
    }
}

type Outcome<T> = Result<T, Failure>;

/// The admin API, reached one way or the other.
enum Api {
    Remote {
        http: reqwest::Client,
        base: String,
        key: String,
    },
    Direct {
        db: DatabaseConnection,
        admin: PlatformAdmin,
        configured_admin_key: bool,
    },
}

/// Run `agentry admin`; the exit status.
pub async fn main(args: AdminArgs, config: Option<&Path>) -> u8 {
    let json_out = args.json;
    let result = async move {
        let api = if args.direct {
            direct(config).await?
        } else {
            remote(&args)?
        };
        run(&api, args.command).await
    }
    .await;
    match result {
        Ok(printed) => {
            if json_out {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&printed.json).unwrap_or_default()
                );
            } else {
                outln!("{}", printed.text.trim_end());
            }
            0
        }
        Err(f) => {
            if json_out {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&f.body).unwrap_or_default()
                );
            }
            let code = f.body["error_code"].as_str().unwrap_or("error");
            let message = f.body["message"].as_str().unwrap_or("failed");
            errln!("agentry admin: {message} ({code})");
            f.exit
        }
    }
}

async fn direct(config: Option<&Path>) -> Outcome<Api> {
    let settings = Settings::load(config).map_err(|e| Failure::usage(e.to_string()))?;
    let db = crate::startup::open_database(&settings)
        .await
        .map_err(|e| Failure {
            exit: 3,
            ..Failure::api(ErrorCode::DatabaseUnavailable, format!("{e:#}"), json!({}))
        })?;
    Ok(Api::Direct {
        db,
        admin: PlatformAdmin::at_the_console(
            "agentry admin --direct: the operator holds the database",
        ),
        configured_admin_key: !settings.auth.admin_key.is_empty(),
    })
}

fn remote(args: &AdminArgs) -> Outcome<Api> {
    let key = match &args.admin_key_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| Failure::usage(format!("reading --admin-key-file {}: {e}", path.display())))?
            .trim()
            .to_string(),
        None => ["AGENTRY_ADMIN_KEY", "AGENTRY_AUTH__ADMIN_KEY"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|k| !k.trim().is_empty()))
            .map(|k| k.trim().to_string())
            .ok_or_else(|| {
                Failure::usage(
                    "no platform admin key: pass --admin-key-file FILE or set AGENTRY_ADMIN_KEY \
                     (the key the server printed at its first start, or its AGENTRY_AUTH__ADMIN_KEY); \
                     on the server's machine, --direct needs no key",
                )
            })?,
    };
    if key.is_empty() {
        return Err(Failure::usage("the admin key file is empty"));
    }
    let base = args.url.trim_end_matches('/').to_string();
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(Failure::usage(format!(
            "--url must start with http:// or https:// (got {base:?})"
        )));
    }
    Ok(Api::Remote {
        http: reqwest::Client::new(),
        base,
        key,
    })
}

/// A result to print: the JSON, and the text a person reads.
struct Printed {
    json: Value,
    text: String,
}

fn to_json<T: serde::Serialize>(v: T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn parse_body(body: Option<&str>) -> Outcome<serde_json::Map<String, Value>> {
    match body {
        None => Ok(Default::default()),
        Some(raw) => match serde_json::from_str(raw) {
            Ok(Value::Object(m)) => Ok(m),
            Ok(_) => Err(Failure::usage("--body must be a JSON object")),
            Err(e) => Err(Failure::usage(format!("--body is not JSON: {e}"))),
        },
    }
}

/// The request body from flags, `--body` under them (flags win).
fn tenant_body(
    name: Option<&str>,
    status: Option<StatusArg>,
    q: &QuotaFlags,
    body: Option<&str>,
) -> Outcome<Value> {
    let mut m = parse_body(body)?;
    let mut set = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    if let Some(n) = name {
        set("name", json!(n));
    }
    if let Some(s) = status {
        set(
            "status",
            json!(match s {
                StatusArg::Active => "active",
                StatusArg::Suspended => "suspended",
            }),
        );
    }
    let numbers = [
        ("max_users", q.max_users.map(u64::from)),
        (
            "max_sessions_per_user",
            q.max_sessions_per_user.map(u64::from),
        ),
        ("max_mcp_servers", q.max_mcp_servers.map(u64::from)),
        ("workspace_quota_bytes", q.workspace_quota_bytes),
        ("requests_per_minute", q.requests_per_minute.map(u64::from)),
        ("tokens_per_day", q.tokens_per_day),
        ("max_concurrent_runs", q.max_concurrent_runs.map(u64::from)),
    ];
    for (k, v) in numbers {
        if let Some(v) = v {
            set(k, json!(v));
        }
    }
    if let Some(f) = &q.features {
        set("features_enabled", json!(f));
    }
    Ok(Value::Object(m))
}

/// Decode a request body as the API would (unknown fields refused, `details.field` named).
fn request<T: serde::de::DeserializeOwned>(body: Value) -> Outcome<T> {
    serde_path_to_error::deserialize(body).map_err(|e| {
        let field = e.path().to_string();
        Failure::api(
            ErrorCode::ValidationError,
            format!("invalid request: {}", e.inner()),
            json!({"field": field}),
        )
    })
}

impl Api {
    async fn remote_call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Outcome<Value> {
        let Api::Remote { http, base, key } = self else {
            return Err(Failure::usage("internal: a server call in --direct mode"));
        };
        let url = format!("{base}/api/v1{path}");
        let mut rb = http.request(method, url.as_str()).bearer_auth(key);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let res = rb.send().await.map_err(|e| Failure {
            exit: 3,
            ..Failure::api(
                ErrorCode::ServiceUnavailable,
                format!(
                    "cannot reach the server at {base}: {e} — is `agentry serve` running there? \
                     (--url picks another; --direct works on the database with no server)"
                ),
                json!({}),
            )
        })?;
        let status = res.status();
        let bytes = res.bytes().await.map_err(|e| Failure {
            exit: 3,
            ..Failure::api(
                ErrorCode::ServiceUnavailable,
                format!("reading the answer: {e}"),
                json!({}),
            )
        })?;
        let value: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                json!({"error_code": "internal_error",
                       "message": format!("the server answered {status} with something that is not JSON: {}",
                                          String::from_utf8_lossy(&bytes).chars().take(200).collect::<String>()),
                       "details": {}})
            })
        };
        if status.is_success() {
            Ok(value)
        } else {
            Err(Failure {
                body: value,
                exit: 1,
            })
        }
    }

    async fn get(&self, path: &str) -> Outcome<Value> {
        self.remote_call(reqwest::Method::GET, path, None).await
    }

    /// A tenant's id from its id or its name.
    async fn tenant_id(&self, r: &str) -> Outcome<TenantId> {
        if let Ok(id) = r.parse::<TenantId>() {
            return Ok(id);
        }
        let mut offset = 0u64;
        loop {
            let page: Page<Value> = match self {
                Api::Remote { .. } => serde_json::from_value(
                    self.get(&format!("/admin/tenants?limit=1000&offset={offset}"))
                        .await?,
                )
                .map_err(|e| Failure::usage(format!("the tenant list is not as expected: {e}")))?,
                Api::Direct { db, admin, .. } => {
                    let (items, total) = tenancy::list_tenants(
                        db,
                        &admin.scope(),
                        PageRequest {
                            limit: 1000,
                            offset,
                        },
                    )
                    .await?;
                    Page {
                        items: items
                            .into_iter()
                            .map(|t| to_json(views::tenant(t)))
                            .collect(),
                        total,
                        limit: 1000,
                        offset,
                    }
                }
            };
            if let Some(t) = page.items.iter().find(|t| t["name"] == r) {
                return t["id"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| Failure::usage("a tenant without an id"));
            }
            offset += page.items.len() as u64;
            if page.items.is_empty() || offset >= page.total {
                return Err(Failure::api(
                    ErrorCode::NotFound,
                    format!(
                        "no tenant is named {r:?} (give its id or exact name; `agentry admin tenants list`)"
                    ),
                    json!({}),
                ));
            }
        }
    }

    /// A user's id from its id or its name within the tenant.
    async fn user_id(&self, tenant: TenantId, r: &str) -> Outcome<UserId> {
        if let Ok(id) = r.parse::<UserId>() {
            return Ok(id);
        }
        let mut offset = 0u64;
        loop {
            let page = self.list_users(tenant, Some(1000), Some(offset)).await?;
            if let Some(u) = page["items"]
                .as_array()
                .and_then(|a| a.iter().find(|u| u["name"] == r))
            {
                return u["id"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| Failure::usage("a user without an id"));
            }
            let n = page["items"].as_array().map_or(0, Vec::len) as u64;
            offset += n;
            if n == 0 || offset >= page["total"].as_u64().unwrap_or(0) {
                return Err(Failure::api(
                    ErrorCode::NotFound,
                    format!(
                        "tenant {tenant} has no user named {r:?} (give their id or exact name)"
                    ),
                    json!({}),
                ));
            }
        }
    }

    async fn list_users(
        &self,
        tenant: TenantId,
        limit: Option<u64>,
        offset: Option<u64>,
    ) -> Outcome<Value> {
        match self {
            Api::Remote { .. } => {
                self.get(&format!(
                    "/admin/tenants/{tenant}/users?limit={}&offset={}",
                    limit.unwrap_or(100),
                    offset.unwrap_or(0)
                ))
                .await
            }
            Api::Direct { db, admin, .. } => {
                let page = routes::page(limit, offset)?;
                let t = tenancy::tenant(db, &admin.scope(), tenant).await?;
                let (items, total) = tenancy::list_users(db, &t.scope(), page).await?;
                Ok(to_json(routes::page_of(items, total, page, views::user)))
            }
        }
    }

    async fn create_tenant(&self, body: Value) -> Outcome<Value> {
        match self {
            Api::Remote { .. } => {
                self.remote_call(reqwest::Method::POST, "/admin/tenants", Some(body))
                    .await
            }
            Api::Direct { db, admin, .. } => {
                let req: CreateTenantRequest = request(body)?;
                Ok(to_json(views::tenant(
                    tenancy::create_tenant(db, &admin.scope(), req).await?,
                )))
            }
        }
    }

    async fn create_user(&self, tenant: TenantId, body: Value) -> Outcome<Value> {
        match self {
            Api::Remote { .. } => {
                self.remote_call(
                    reqwest::Method::POST,
                    &format!("/admin/tenants/{tenant}/users"),
                    Some(body),
                )
                .await
            }
            Api::Direct { db, admin, .. } => {
                let req: CreateUserRequest = request(body)?;
                let t = tenancy::tenant(db, &admin.scope(), tenant).await?;
                Ok(to_json(views::user(
                    tenancy::create_user(db, &t, req).await?,
                )))
            }
        }
    }

    async fn create_key(&self, tenant: TenantId, body: Value) -> Outcome<Value> {
        match self {
            Api::Remote { .. } => {
                self.remote_call(
                    reqwest::Method::POST,
                    &format!("/admin/tenants/{tenant}/api-keys"),
                    Some(body),
                )
                .await
            }
            Api::Direct { db, admin, .. } => {
                let req: CreateApiKeyRequest = request(body)?;
                let t = tenancy::tenant(db, &admin.scope(), tenant).await?;
                let k = tenancy::create_key(db, &t.scope(), req).await?;
                Ok(to_json(routes::admin::created_key(k)))
            }
        }
    }
}

/// Changes that need the server: it holds live sessions, cached keys and workspaces.
fn needs_server(what: &str) -> Failure {
    Failure::usage(format!(
        "{what} changes live sessions and files the server owns: run it against the server \
         (without --direct), with the platform admin key"
    ))
}

fn parse_key_id(raw: &str) -> Outcome<ApiKeyId> {
    raw.parse().map_err(|e: agentry_schema::ids::InvalidId| {
        Failure::api(
            ErrorCode::BadRequest,
            format!("key id {raw:?}: {e} (the key's id, not the key; `agentry admin keys list`)"),
            json!({"parameter": "key_id"}),
        )
    })
}

fn write_key_file(path: &Path, key: &str) -> Outcome<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Failure::usage(format!("writing the key to {}: {e}", path.display())))?;
    writeln!(f, "{key}")
        .map_err(|e| Failure::usage(format!("writing the key to {}: {e}", path.display())))
}

async fn run(api: &Api, command: AdminCommand) -> Outcome<Printed> {
    use reqwest::Method;
    let direct = matches!(api, Api::Direct { .. });
    match command {
        AdminCommand::Bootstrap {
            tenant,
            user,
            key_name,
            key_out,
        } => {
            let t = api.create_tenant(json!({"name": tenant})).await?;
            let tid: TenantId = t["id"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Failure::usage("no tenant id"))?;
            let u = api
                .create_user(tid, json!({"name": user, "role": "admin"}))
                .await?;
            let uid = u["id"].as_str().unwrap_or_default().to_string();
            let k = api
                .create_key(tid, json!({"user_id": uid, "name": key_name}))
                .await?;
            let secret = k["key"].as_str().unwrap_or_default().to_string();
            if let Some(path) = &key_out {
                write_key_file(path, &secret)?;
            }
            let mut text = format!(
                "tenant {} ({})\nuser   {} ({}, admin)\nkey    {}\n\nThe key is shown this once; store it now.",
                t["name"].as_str().unwrap_or_default(),
                tid,
                u["name"].as_str().unwrap_or_default(),
                uid,
                secret,
            );
            if let Some(path) = &key_out {
                text.push_str(&format!(
                    "\nWritten to {0}: agentry chat --key-file {0}",
                    path.display()
                ));
            } else {
                text.push_str(
                    "\nChat with it: AGENTRY_KEY=<key> agentry chat (or --key-file FILE)",
                );
            }
            Ok(Printed {
                json: json!({"tenant": t, "user": u, "api_key": k}),
                text,
            })
        }
        AdminCommand::Tenants(c) => match c {
            TenantsCommand::List { limit, offset } => {
                let v = match api {
                    Api::Remote { .. } => {
                        api.get(&format!(
                            "/admin/tenants?limit={}&offset={}",
                            limit.unwrap_or(100),
                            offset.unwrap_or(0)
                        ))
                        .await?
                    }
                    Api::Direct { db, admin, .. } => {
                        let page = routes::page(limit, offset)?;
                        let (items, total) =
                            tenancy::list_tenants(db, &admin.scope(), page).await?;
                        to_json(routes::page_of(items, total, page, views::tenant))
                    }
                };
                Ok(page_text(v, tenant_line))
            }
            TenantsCommand::Get { tenant } => {
                let id = api.tenant_id(&tenant).await?;
                let v = match api {
                    Api::Remote { .. } => api.get(&format!("/admin/tenants/{id}")).await?,
                    Api::Direct { db, admin, .. } => to_json(views::tenant(
                        tenancy::tenant(db, &admin.scope(), id).await?,
                    )),
                };
                Ok(pretty(v))
            }
            TenantsCommand::Create { name, quotas, body } => {
                let body = tenant_body(Some(&name), None, &quotas, body.as_deref())?;
                let v = api.create_tenant(body).await?;
                Ok(Printed {
                    text: format!("created {}", tenant_line(&v)),
                    json: v,
                })
            }
            TenantsCommand::Update {
                tenant,
                name,
                status,
                quotas,
                body,
            } => {
                if direct {
                    return Err(needs_server("tenants update"));
                }
                let id = api.tenant_id(&tenant).await?;
                let body = tenant_body(name.as_deref(), status, &quotas, body.as_deref())?;
                let v = api
                    .remote_call(Method::PATCH, &format!("/admin/tenants/{id}"), Some(body))
                    .await?;
                Ok(Printed {
                    text: format!("updated {}", tenant_line(&v)),
                    json: v,
                })
            }
            TenantsCommand::Delete { tenant } => {
                if direct {
                    return Err(needs_server("tenants delete"));
                }
                let id = api.tenant_id(&tenant).await?;
                api.remote_call(Method::DELETE, &format!("/admin/tenants/{id}"), None)
                    .await?;
                Ok(Printed {
                    json: json!({"deleted": true, "tenant_id": id.to_string()}),
                    text: format!("deleted tenant {id} and everything it owned"),
                })
            }
        },
        AdminCommand::Users(c) => match c {
            UsersCommand::List {
                tenant,
                limit,
                offset,
            } => {
                let id = api.tenant_id(&tenant).await?;
                Ok(page_text(
                    api.list_users(id, limit, offset).await?,
                    user_line,
                ))
            }
            UsersCommand::Get { tenant, user } => {
                let tid = api.tenant_id(&tenant).await?;
                let uid = api.user_id(tid, &user).await?;
                let v = match api {
                    Api::Remote { .. } => {
                        api.get(&format!("/admin/tenants/{tid}/users/{uid}"))
                            .await?
                    }
                    Api::Direct { db, admin, .. } => {
                        let t = tenancy::tenant(db, &admin.scope(), tid).await?;
                        to_json(views::user(tenancy::user(db, &t.scope(), uid).await?))
                    }
                };
                Ok(Printed {
                    text: user_line(&v),
                    json: v,
                })
            }
            UsersCommand::Create {
                tenant,
                name,
                role,
                custom_role,
            } => {
                let tid = api.tenant_id(&tenant).await?;
                let mut body = json!({"name": name});
                if let Some(r) = role {
                    body["role"] = to_json(r.wire());
                }
                if let Some(c) = custom_role {
                    body["custom_role"] = json!(c);
                }
                let v = api.create_user(tid, body).await?;
                Ok(Printed {
                    text: format!("created {}", user_line(&v)),
                    json: v,
                })
            }
            UsersCommand::Update {
                tenant,
                user,
                role,
                custom_role,
                disabled,
            } => {
                let tid = api.tenant_id(&tenant).await?;
                let uid = api.user_id(tid, &user).await?;
                let req = UpdateUserRequest {
                    role: role.map(RoleArg::wire),
                    custom_role: custom_role.map(Some),
                    disabled,
                };
                let v = match api {
                    Api::Remote { .. } => {
                        api.remote_call(
                            Method::PATCH,
                            &format!("/admin/tenants/{tid}/users/{uid}"),
                            Some(to_json(&req)),
                        )
                        .await?
                    }
                    Api::Direct { db, admin, .. } => {
                        let t = tenancy::tenant(db, &admin.scope(), tid).await?;
                        to_json(views::user(
                            tenancy::update_user_stored(db, &t.scope(), Actor::Platform, uid, req)
                                .await?,
                        ))
                    }
                };
                Ok(Printed {
                    text: format!("updated {}", user_line(&v)),
                    json: v,
                })
            }
            UsersCommand::Delete { tenant, user } => {
                if direct {
                    return Err(needs_server("users delete"));
                }
                let tid = api.tenant_id(&tenant).await?;
                let uid = api.user_id(tid, &user).await?;
                api.remote_call(
                    Method::DELETE,
                    &format!("/admin/tenants/{tid}/users/{uid}"),
                    None,
                )
                .await?;
                Ok(Printed {
                    json: json!({"deleted": true, "user_id": uid.to_string()}),
                    text: format!("deleted user {uid} with their keys and workspace"),
                })
            }
        },
        AdminCommand::Keys(c) => match c {
            KeysCommand::List {
                tenant,
                user,
                prefix,
            } => {
                let tid = api.tenant_id(&tenant).await?;
                let uid = match &user {
                    Some(u) => Some(api.user_id(tid, u).await?),
                    None => None,
                };
                let v = match api {
                    Api::Remote { .. } => {
                        let mut q: Vec<(&str, String)> = vec![("limit", "1000".into())];
                        if let Some(u) = uid {
                            q.push(("user_id", u.to_string()));
                        }
                        if let Some(p) = &prefix {
                            q.push(("prefix", p.clone()));
                        }
                        let qs = serde_urlencoded::to_string(&q).unwrap_or_default();
                        api.get(&format!("/admin/tenants/{tid}/api-keys?{qs}"))
                            .await?
                    }
                    Api::Direct { db, admin, .. } => {
                        let t = tenancy::tenant(db, &admin.scope(), tid).await?;
                        let q = routes::admin::KeysQuery {
                            limit: Some(1000),
                            offset: None,
                            prefix,
                            user_id: uid.map(|u| u.to_string()),
                        };
                        to_json(routes::admin::keys_page(db, &t.scope(), q).await?)
                    }
                };
                Ok(page_text(v, key_line))
            }
            KeysCommand::Get { tenant, key_id } => {
                let tid = api.tenant_id(&tenant).await?;
                let kid = parse_key_id(&key_id)?;
                let v = match api {
                    Api::Remote { .. } => {
                        api.get(&format!("/admin/tenants/{tid}/api-keys/{kid}"))
                            .await?
                    }
                    Api::Direct { db, admin, .. } => {
                        let t = tenancy::tenant(db, &admin.scope(), tid).await?;
                        to_json(views::api_key(tenancy::key(db, &t.scope(), kid).await?))
                    }
                };
                Ok(Printed {
                    text: key_line(&v),
                    json: v,
                })
            }
            KeysCommand::Create {
                tenant,
                user,
                name,
                role,
                custom_role,
                expires_at,
                key_out,
            } => {
                let tid = api.tenant_id(&tenant).await?;
                let uid = api.user_id(tid, &user).await?;
                let mut body = json!({"user_id": uid.to_string(), "name": name});
                if let Some(r) = role {
                    body["role"] = to_json(r.wire());
                }
                if let Some(c) = custom_role {
                    body["custom_role"] = json!(c);
                }
                if let Some(at) = expires_at {
                    body["expires_at"] = json!(at);
                }
                let v = api.create_key(tid, body).await?;
                let secret = v["key"].as_str().unwrap_or_default().to_string();
                if let Some(path) = &key_out {
                    write_key_file(path, &secret)?;
                }
                Ok(Printed {
                    text: format!(
                        "created {}\nkey {secret}\nThe key is shown this once; store it now.",
                        key_line(&v)
                    ),
                    json: v,
                })
            }
            KeysCommand::Revoke { tenant, key_id } => {
                let tid = api.tenant_id(&tenant).await?;
                let kid = parse_key_id(&key_id)?;
                let v = match api {
                    Api::Remote { .. } => {
                        api.remote_call(
                            Method::DELETE,
                            &format!("/admin/tenants/{tid}/api-keys/{kid}"),
                            None,
                        )
                        .await?
                    }
                    Api::Direct { db, admin, .. } => {
                        let t = tenancy::tenant(db, &admin.scope(), tid).await?;
                        to_json(views::api_key(
                            tenancy::revoke_key_stored(db, &t.scope(), kid).await?,
                        ))
                    }
                };
                Ok(Printed {
                    text: format!("revoked {}", key_line(&v)),
                    json: v,
                })
            }
        },
        AdminCommand::Usage { tenant, from, to } => {
            let tid = api.tenant_id(&tenant).await?;
            let v = match api {
                Api::Remote { .. } => {
                    let mut q: Vec<(&str, String)> = vec![];
                    if let Some(f) = &from {
                        q.push(("from", f.clone()));
                    }
                    if let Some(t) = &to {
                        q.push(("to", t.clone()));
                    }
                    let qs = serde_urlencoded::to_string(&q).unwrap_or_default();
                    api.get(&format!("/admin/tenants/{tid}/usage?{qs}")).await?
                }
                Api::Direct { db, admin, .. } => {
                    let t = tenancy::tenant(db, &admin.scope(), tid).await?;
                    to_json(
                        tenancy::usage_report(db, &t.scope(), from.as_deref(), to.as_deref())
                            .await?,
                    )
                }
            };
            Ok(Printed {
                text: usage_text(&v),
                json: v,
            })
        }
        AdminCommand::ResetAdminKey => {
            let Api::Direct {
                db,
                admin,
                configured_admin_key,
            } = api
            else {
                return Err(Failure::usage(
                    "reset-admin-key works on the database: run it with --direct on the server's machine \
                     (same configuration as serve)",
                ));
            };
            let k = platform_admin_key::replace(db, &admin.scope())
                .await
                .map_err(ApiError::from)?;
            let mut text = format!(
                "new platform admin key (shown this once; the old one stops working within auth.cache_ttl_secs):\n{}",
                k.secret
            );
            if *configured_admin_key {
                text.push_str(
                    "\nNote: this configuration sets AGENTRY_AUTH__ADMIN_KEY, which wins: \
                     a server started with it does not take the generated key.",
                );
            }
            Ok(Printed {
                json: json!({"admin_key": k.secret, "prefix": k.info.prefix, "created_at": k.info.created_at}),
                text,
            })
        }
    }
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or("")
}

fn tenant_line(t: &Value) -> String {
    format!(
        "tenant {}  {}  {}  users≤{} rpm≤{} tokens/day≤{}",
        s(t, "id"),
        s(t, "name"),
        s(t, "status"),
        t["max_users"],
        t["requests_per_minute"],
        t["tokens_per_day"],
    )
}

/// `member`, `admin`, or `member (analyst)` for a custom role.
fn role_of(v: &Value) -> String {
    match v["custom_role"].as_str() {
        Some(c) => format!("{} ({c})", s(v, "role")),
        None => s(v, "role").to_string(),
    }
}

fn user_line(u: &Value) -> String {
    format!(
        "user {}  {}  {}{}",
        s(u, "id"),
        s(u, "name"),
        role_of(u),
        if u["disabled"] == true {
            "  disabled"
        } else {
            ""
        }
    )
}

fn key_line(k: &Value) -> String {
    let state = if !k["revoked_at"].is_null() {
        format!("revoked {}", s(k, "revoked_at"))
    } else if !k["expires_at"].is_null() {
        format!("expires {}", s(k, "expires_at"))
    } else {
        "active".to_string()
    };
    format!(
        "key {}  {}…  {:?}  {}  user {}  {}",
        s(k, "id"),
        s(k, "prefix"),
        s(k, "name"),
        role_of(k),
        s(k, "user_id"),
        state
    )
}

fn page_text(v: Value, line: fn(&Value) -> String) -> Printed {
    let items = v["items"].as_array().cloned().unwrap_or_default();
    let mut text: String = items.iter().map(|i| line(i) + "\n").collect();
    text.push_str(&format!(
        "({} of {}, from {})",
        items.len(),
        v["total"],
        v["offset"]
    ));
    Printed { json: v, text }
}

fn pretty(v: Value) -> Printed {
    Printed {
        text: serde_json::to_string_pretty(&v).unwrap_or_default(),
        json: v,
    }
}

fn usage_text(v: &Value) -> String {
    let mut text = format!(
        "usage of tenant {} from {} to {}\n",
        s(v, "tenant_id"),
        s(v, "from"),
        s(v, "to")
    );
    text.push_str("day         runs  tokens in  tokens out  tool calls\n");
    for d in v["days"].as_array().into_iter().flatten() {
        text.push_str(&format!(
            "{:<10}  {:>4}  {:>9}  {:>10}  {:>10}\n",
            s(d, "day"),
            d["runs"].to_string(),
            d["input_tokens"].to_string(),
            d["output_tokens"].to_string(),
            d["tool_calls"].to_string()
        ));
    }
    let t = &v["totals"];
    text.push_str(&format!(
        "total       {:>4}  {:>9}  {:>10}  {:>10}",
        t["runs"].to_string(),
        t["input_tokens"].to_string(),
        t["output_tokens"].to_string(),
        t["tool_calls"].to_string()
    ));
    text
}
