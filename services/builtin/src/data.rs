//! The data tools (issue 17 item 2, seed 001): `list_data_sources`, `describe_data_source`,
//! `run_sql` and `create_report`, over the tenant's data sources (`agentry_store::data_sources`,
//! registered by tenant admins over REST) and the engine of `agentry-data`.
//!
//! Who may use what:
//! - the tool itself: the tenant's role permissions (`data:run_sql`, `data:*`, …), checked by
//!   the pipeline before any call, as for every tool;
//! - each source: its `allowed_roles`, checked here against the caller's role. A source the
//!   role may not use is answered exactly like one that does not exist (and is not listed), so
//!   its name tells a caller nothing.
//!
//! Every connection goes through [`DataSources::target`]: the sealed URL is opened, parsed and
//! checked again against the network rule (the host is resolved now, not when it was
//! registered) and the platform's own services, or the SQLite file is opened beneath the
//! tenant's area. Every statement goes through `agentry_data::exec::run_sql`'s three read-only
//! layers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentry_data::DataError;
use agentry_data::catalog;
use agentry_data::exec::{self, Limits, QueryOutput};
use agentry_data::report::{self, ChartKind, Data, Format, ImageFormat};
use agentry_data::source::{NetPolicy, SourceUrl, SystemResolve, Target};
use agentry_schema::events::{
    EventPayload, FileMetrics, FileOperationData, FileOperationKind, ToolStatus,
};
use agentry_schema::ids::{DataSourceId, TenantId};
use agentry_sealing::SecretBox;
use agentry_store::data_sources::{self as stored, DataSource};
use agentry_store::{PlatformScope, TenantScope};
use agentry_tools::tool::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use async_trait::async_trait;
use sea_orm::DatabaseConnection;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::jail::{Jail, display, io_error, write_lock};
use crate::{BuiltinConfig, blocking, net_guard, parse_args};

pub const SERVICE: &str = "data";

/// Queries one report may run.
pub const MAX_REPORT_QUERIES: usize = 20;

/// The network rule data sources follow: the web tools' rule (`tools.allow_private_addresses`,
/// `tools.allowed_networks`), the platform's own database and Redis (never reachable), and the
/// directory under which each tenant's SQLite files live (`{data_dir}/workspaces/{tenant}/`).
pub fn net_policy(
    cfg: &BuiltinConfig,
    platform_endpoints: Vec<SocketAddr>,
    workspaces: PathBuf,
) -> NetPolicy {
    let cfg = cfg.clone();
    NetPolicy {
        refusal: Arc::new(move |ip| net_guard::refusal(&cfg, ip)),
        platform_endpoints,
        workspaces,
        resolver: Arc::new(SystemResolve),
    }
}

/// The tenants' data sources as the tools and the REST routes reach them.
pub struct DataSources {
    db: DatabaseConnection,
    secrets: Option<SecretBox>,
    policy: NetPolicy,
    limits: Limits,
}

impl std::fmt::Debug for DataSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataSources")
            .field("policy", &self.policy)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

fn data_error(e: DataError) -> ToolError {
    match e {
        DataError::Invalid(m) => ToolError::invalid(m),
        DataError::Refused(m) => ToolError::Refused(m),
        DataError::Unavailable(m) => ToolError::Unavailable(m),
        // Not retried: the same statement would time out again.
        e @ DataError::Timeout(_) => ToolError::Failed {
            message: format!("{e}; make the query cheaper (filter, aggregate, LIMIT)"),
            retryable: false,
        },
        DataError::Query(m) => ToolError::Failed {
            message: format!("the database refused the statement: {m}"),
            retryable: false,
        },
    }
}

fn store_error(e: agentry_store::StoreError) -> ToolError {
    ToolError::Failed {
        message: format!("could not read the tenant's data sources: {e}"),
        retryable: true,
    }
}

fn scope(tenant: TenantId) -> TenantScope {
    PlatformScope::new().tenant(tenant)
}

impl DataSources {
    pub fn new(
        db: DatabaseConnection,
        secrets: Option<SecretBox>,
        policy: NetPolicy,
        limits: Limits,
    ) -> Self {
        DataSources {
            db,
            secrets,
            policy,
            limits,
        }
    }

    /// The network rule and the SQLite area (for the REST routes' checks at registration).
    pub fn policy(&self) -> &NetPolicy {
        &self.policy
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The source `id` of the caller's tenant when the caller's role may use it; a source it
    /// may not use gets the same answer as one that does not exist.
    async fn usable(&self, ctx: &ToolContext, id: &str) -> Result<DataSource, ToolError> {
        let not_found = || {
            ToolError::NotFound(format!(
                "no data source {id:?} that your role may use; list_data_sources shows them"
            ))
        };
        let Ok(id) = DataSourceId::try_from(id.trim()) else {
            return Err(not_found());
        };
        let source = stored::get(&self.db, &scope(ctx.tenant_id), &id)
            .await
            .map_err(store_error)?
            .ok_or_else(not_found)?;
        if !source.spec.allows(ctx.role_name()) {
            return Err(not_found());
        }
        Ok(source)
    }

    /// Where a connection to `source` may go, checked now.
    async fn target(&self, source: &DataSource) -> Result<Target, ToolError> {
        let Some(secrets) = &self.secrets else {
            return Err(ToolError::failed(
                "this server has no encryption key, so it cannot open the data source's sealed URL",
            ));
        };
        let raw = secrets.open(&source.spec.url_sealed).map_err(|e| {
            ToolError::failed(format!(
                "the data source's URL cannot be opened ({e}); a tenant admin should set it again"
            ))
        })?;
        let url = SourceUrl::parse(&raw).map_err(data_error)?;
        check_owned(url, self.policy.clone(), source.tenant_id.to_string())
            .await
            .map_err(data_error)
    }

    /// One read-only statement on a source, under `limits`.
    async fn query(
        &self,
        ctx: &ToolContext,
        source: &DataSource,
        sql: &str,
        limits: &Limits,
    ) -> Result<QueryOutput, ToolError> {
        // The parser first: a statement it refuses never opens a connection.
        let engine = source_engine(source)?;
        agentry_data::guard::check(sql, engine).map_err(data_error)?;
        let target = self.target(source).await?;
        let work = run_sql_owned(target, sql.to_string(), *limits);
        tokio::select! {
            out = work => out,
            () = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
        }
    }
}

/// A future the async tools can hold across an `.await`.
type SendFuture<T> = std::pin::Pin<Box<dyn Future<Output = Result<T, DataError>> + Send>>;

/// Run one of the engine's connections to its end on a blocking-pool thread that drives it
/// with `block_on`. The engine's futures hold sqlx executors (`&'c mut PgConnection:
/// Executor<'c>`) for which the compiler cannot prove `Send` (rust-lang/rust#102211), and a
/// tool's future must be `Send`; this thread's future need not be. The work stays bounded by
/// the statement timeout (plus the engine's own timer), also when the caller stops waiting.
async fn on_own_thread<T, F>(work: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce(&tokio::runtime::Handle) -> Result<T, DataError> + Send + 'static,
{
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || work(&handle))
        .await
        .map_err(|e| ToolError::failed(format!("the query was aborted: {e}")))?
        .map_err(data_error)
}

fn run_sql_owned(
    target: Target,
    sql: String,
    limits: Limits,
) -> impl Future<Output = Result<QueryOutput, ToolError>> + Send {
    on_own_thread(move |rt| rt.block_on(exec::run_sql(&target, &sql, &limits)))
}

fn describe_owned(
    target: Target,
    limits: Limits,
) -> impl Future<Output = Result<catalog::Catalog, ToolError>> + Send {
    on_own_thread(move |rt| {
        rt.block_on(async {
            let mut conn = exec::connect(&target, &limits).await?;
            let out = catalog::describe(&mut conn, &limits).await;
            conn.close().await;
            out
        })
    })
}

fn check_owned(url: SourceUrl, policy: NetPolicy, tenant: String) -> SendFuture<Target> {
    Box::pin(async move { url.check(&policy, &tenant).await })
}

fn source_engine(source: &DataSource) -> Result<agentry_data::Engine, ToolError> {
    match source.spec.engine.as_str() {
        "postgres" => Ok(agentry_data::Engine::Postgres),
        "mysql" => Ok(agentry_data::Engine::Mysql),
        "sqlite" => Ok(agentry_data::Engine::Sqlite),
        other => Err(ToolError::failed(format!(
            "the data source has an unknown engine {other:?}"
        ))),
    }
}

/// The four data tools over `sources`.
pub fn data_tools(sources: Arc<DataSources>) -> Vec<Arc<dyn Tool>> {
    let l = sources.limits;
    let query_timeout = l.timeout + l.connect_timeout + Duration::from_secs(10);
    vec![
        Arc::new(ListSources {
            sources: sources.clone(),
            spec: ToolSpec::new(
                SERVICE,
                "list_data_sources",
                "List the databases (data sources) you may query: their ids, names and engines \
                 (postgres, mysql, sqlite). Use an id with describe_data_source and run_sql.",
                json!({"type": "object", "properties": {}}),
            ),
        }),
        Arc::new(Describe {
            sources: sources.clone(),
            spec: ToolSpec::new(
                SERVICE,
                "describe_data_source",
                "The catalog of a data source: its tables and views with their columns, types, \
                 nullability, primary and foreign keys and a row estimate. Cached; pass \
                 refresh=true to read it again from the database.",
                json!({
                    "type": "object",
                    "properties": {
                        "source": {"type": "string", "description": "The data source's id"},
                        "refresh": {"type": "boolean", "default": false},
                        "table": {"type": "string", "description": "Only this table (by name)"}
                    },
                    "required": ["source"]
                }),
            )
            .with_timeout(query_timeout),
        }),
        Arc::new(RunSql {
            sources: sources.clone(),
            spec: ToolSpec::new(
                SERVICE,
                "run_sql",
                &format!(
                    "Run one read-only SQL statement on a data source: a SELECT, WITH … SELECT \
                     or EXPLAIN, in the source's dialect. Anything that writes is refused. The \
                     result is its columns and rows, cut at {} rows or {} bytes (truncated=true \
                     then); a statement is stopped after {} s.",
                    l.max_rows,
                    l.max_bytes,
                    l.timeout.as_secs()
                ),
                json!({
                    "type": "object",
                    "properties": {
                        "source": {"type": "string", "description": "The data source's id"},
                        "sql": {"type": "string", "minLength": 1, "maxLength": 100000},
                        "max_rows": {"type": "integer", "minimum": 1, "maximum": l.max_rows},
                        "timeout_secs": {"type": "integer", "minimum": 1, "maximum": l.timeout.as_secs().max(1)}
                    },
                    "required": ["source", "sql"]
                }),
            )
            .with_timeout(query_timeout),
        }),
        Arc::new(CreateReport {
            sources,
            spec: ToolSpec::new(
                SERVICE,
                "create_report",
                "Write a report (Markdown or HTML) into the user's workspace: text, tables and \
                 charts (bar, line, scatter, pie; PNG or SVG files beside the document). A \
                 table's or chart's data is the result of a read-only `sql` on a `source`, or \
                 given inline as `columns` and `rows`. Returns the document's path.",
                json!({
                    "type": "object",
                    "properties": {
                        "title": {"type": "string", "minLength": 1, "maxLength": 200},
                        "format": {"type": "string", "enum": ["markdown", "html"], "default": "markdown"},
                        "folder": {"type": "string", "description": "Workspace folder for the report (default reports/<title>); it must not exist yet"},
                        "sections": {
                            "type": "array",
                            "maxItems": report::MAX_SECTIONS,
                            "items": {
                                "type": "object",
                                "properties": {
                                    "type": {"type": "string", "enum": ["text", "table", "chart"]},
                                    "text": {"type": "string"},
                                    "title": {"type": "string"},
                                    "source": {"type": "string"},
                                    "sql": {"type": "string"},
                                    "columns": {"type": "array", "items": {"type": "string"}},
                                    "rows": {"type": "array", "items": {"type": "array"}},
                                    "chart": {"type": "string", "enum": ["bar", "line", "scatter", "pie"]},
                                    "x": {"type": "string", "description": "The column of the x values (categories)"},
                                    "y": {"type": "array", "items": {"type": "string"}, "description": "The columns of the y values, one series each"},
                                    "image": {"type": "string", "enum": ["png", "svg"], "default": "png"}
                                },
                                "required": ["type"]
                            }
                        }
                    },
                    "required": ["title", "sections"]
                }),
            )
            .with_timeout(query_timeout * 4),
        }),
    ]
}

struct ListSources {
    sources: Arc<DataSources>,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for ListSources {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let all = stored::list(&self.sources.db, &scope(ctx.tenant_id))
            .await
            .map_err(store_error)?;
        let items: Vec<Value> = all
            .iter()
            .filter(|s| s.spec.allows(ctx.role_name()))
            .map(|s| {
                json!({
                    "id": s.id.to_string(),
                    "name": s.spec.name,
                    "engine": s.spec.engine,
                    "catalog_cached_at": s.catalog.as_ref().map(|(_, at)| at),
                })
            })
            .collect();
        Ok(ToolOutput::ok(
            json!({"data_sources": items, "count": items.len()}),
        ))
    }
}

struct Describe {
    sources: Arc<DataSources>,
    spec: ToolSpec,
}

#[derive(Deserialize)]
struct DescribeArgs {
    source: String,
    #[serde(default)]
    refresh: bool,
    #[serde(default)]
    table: Option<String>,
}

#[async_trait]
impl Tool for Describe {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: DescribeArgs = parse_args("describe_data_source", args)?;
        let sources = &self.sources;
        let source = sources.usable(ctx, &args.source).await?;
        let (mut catalog, described_at, cached) = match (&source.catalog, args.refresh) {
            (Some((c, at)), false) => (c.clone(), *at, true),
            _ => {
                let target = sources.target(&source).await?;
                let read = describe_owned(target, sources.limits);
                let described = tokio::select! {
                    out = read => out?,
                    () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
                };
                let value = serde_json::to_value(&described).map_err(|e| {
                    ToolError::failed(format!("the catalog could not be kept: {e}"))
                })?;
                let at = match stored::set_catalog(
                    &sources.db,
                    &scope(ctx.tenant_id),
                    &source.id,
                    value.clone(),
                )
                .await
                {
                    Ok(at) => at,
                    Err(e) => {
                        tracing::warn!(error = %e, "caching a data source's catalog failed");
                        agentry_store::now()
                    }
                };
                (value, at, false)
            }
        };
        if let Some(table) = args.table.as_deref().map(str::trim)
            && let Some(tables) = catalog.get_mut("tables").and_then(Value::as_array_mut)
        {
            tables.retain(|t| t["name"].as_str() == Some(table));
            if tables.is_empty() {
                return Err(ToolError::NotFound(format!(
                    "no table {table:?} in data source {:?}",
                    source.id.to_string()
                )));
            }
        }
        let mut out = json!({
            "source": source.id.to_string(),
            "cached": cached,
            "described_at": described_at,
        });
        if let (Some(o), Some(c)) = (out.as_object_mut(), catalog.as_object()) {
            for (k, v) in c {
                o.insert(k.clone(), v.clone());
            }
        }
        Ok(ToolOutput::ok(out))
    }
}

struct RunSql {
    sources: Arc<DataSources>,
    spec: ToolSpec,
}

#[derive(Deserialize)]
struct RunSqlArgs {
    source: String,
    sql: String,
    #[serde(default)]
    max_rows: Option<usize>,
    #[serde(default)]
    timeout_secs: Option<u64>,
}

#[async_trait]
impl Tool for RunSql {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: RunSqlArgs = parse_args("run_sql", args)?;
        let sources = &self.sources;
        let source = sources.usable(ctx, &args.source).await?;
        let mut limits = sources.limits;
        if let Some(n) = args.max_rows {
            limits.max_rows = n.clamp(1, limits.max_rows);
        }
        if let Some(s) = args.timeout_secs {
            limits.timeout = Duration::from_secs(s.max(1)).min(limits.timeout);
        }
        let out = sources.query(ctx, &source, &args.sql, &limits).await?;
        let mut v = serde_json::to_value(&out)
            .map_err(|e| ToolError::failed(format!("the result could not be encoded: {e}")))?;
        v["source"] = json!(source.id.to_string());
        Ok(ToolOutput::ok(v))
    }
}

struct CreateReport {
    sources: Arc<DataSources>,
    spec: ToolSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportArgs {
    title: String,
    #[serde(default)]
    format: Format,
    #[serde(default)]
    folder: Option<String>,
    sections: Vec<SectionArgs>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum SectionKind {
    Text,
    Table,
    Chart,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SectionArgs {
    #[serde(rename = "type")]
    kind: SectionKind,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    sql: Option<String>,
    #[serde(default)]
    columns: Option<Vec<String>>,
    #[serde(default)]
    rows: Option<Vec<Vec<Value>>>,
    #[serde(default)]
    chart: Option<ChartKind>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<Vec<String>>,
    #[serde(default)]
    image: ImageFormat,
}

/// A folder name from a title: lowercase letters, digits and dashes.
fn slug(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
        if out.len() >= 60 {
            break;
        }
    }
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() { "report".into() } else { out }
}

impl CreateReport {
    /// A section's data: the rows of its query, or the rows given inline.
    async fn data(
        &self,
        ctx: &ToolContext,
        i: usize,
        s: &SectionArgs,
        queries: &mut usize,
    ) -> Result<(Data, bool), ToolError> {
        match (&s.source, &s.sql, &s.columns) {
            (Some(source), Some(sql), None) => {
                *queries += 1;
                if *queries > MAX_REPORT_QUERIES {
                    return Err(ToolError::invalid(format!(
                        "a report runs at most {MAX_REPORT_QUERIES} queries"
                    )));
                }
                let src = self.sources.usable(ctx, source).await?;
                let out = self
                    .sources
                    .query(ctx, &src, sql, &self.sources.limits)
                    .await
                    .map_err(|e| match e {
                        ToolError::InvalidArguments { message, details } => {
                            ToolError::InvalidArguments {
                                message: format!("section {}: {message}", i + 1),
                                details,
                            }
                        }
                        other => other,
                    })?;
                Ok((
                    Data {
                        columns: out.columns.into_iter().map(|c| c.name).collect(),
                        rows: out.rows,
                    },
                    out.truncated,
                ))
            }
            (None, None, Some(columns)) => {
                let rows = s.rows.clone().unwrap_or_default();
                if let Some(bad) = rows.iter().position(|r| r.len() != columns.len()) {
                    return Err(ToolError::invalid(format!(
                        "section {}: row {} has {} values for {} columns",
                        i + 1,
                        bad + 1,
                        rows[bad].len(),
                        columns.len()
                    )));
                }
                Ok((
                    Data {
                        columns: columns.clone(),
                        rows,
                    },
                    false,
                ))
            }
            _ => Err(ToolError::invalid(format!(
                "section {}: give either `source` and `sql`, or `columns` and `rows`",
                i + 1
            ))),
        }
    }
}

#[async_trait]
impl Tool for CreateReport {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: ReportArgs = parse_args("create_report", args)?;
        let title = args.title.trim().to_string();
        if title.is_empty() {
            return Err(ToolError::invalid("`title` must not be empty"));
        }
        let mut sections = Vec::with_capacity(args.sections.len());
        let mut queries = 0;
        for (i, s) in args.sections.iter().enumerate() {
            let section = match s.kind {
                SectionKind::Text => report::Section::Text(s.text.clone().ok_or_else(|| {
                    ToolError::invalid(format!("section {}: a text section needs `text`", i + 1))
                })?),
                SectionKind::Table => {
                    let (data, truncated) = self.data(ctx, i, s, &mut queries).await?;
                    report::Section::Table {
                        title: s.title.clone(),
                        data,
                        truncated,
                    }
                }
                SectionKind::Chart => {
                    let (Some(kind), Some(x), Some(y)) = (s.chart, &s.x, &s.y) else {
                        return Err(ToolError::invalid(format!(
                            "section {}: a chart needs `chart` (bar, line, scatter, pie), `x` and `y`",
                            i + 1
                        )));
                    };
                    let (data, _) = self.data(ctx, i, s, &mut queries).await?;
                    report::Section::Chart(report::Chart {
                        title: s.title.clone().unwrap_or_else(|| title.clone()),
                        kind,
                        x: x.clone(),
                        y: y.clone(),
                        data,
                        image: s.image,
                    })
                }
            };
            sections.push(section);
        }
        let doc = report::Report {
            title: title.clone(),
            format: args.format,
            sections,
        };
        let workspace = ctx.workspace.clone();
        let folder = args.folder.clone();
        let _guard = write_lock(&workspace.root).await;
        blocking(move || {
            // Charts are drawn here, off the async runtime: they are CPU work.
            let rendered = report::render(&doc).map_err(data_error)?;
            let jail = Jail::open(&workspace)?;
            let rel = match folder.as_deref().map(str::trim).filter(|f| !f.is_empty()) {
                Some(f) => {
                    let rel = jail.resolve(f)?;
                    if rel.as_os_str().is_empty() {
                        return Err(ToolError::invalid(
                            "`folder` names the workspace root; name a new folder",
                        ));
                    }
                    if jail.dir().exists(&rel) {
                        return Err(ToolError::invalid(format!(
                            "{} exists; a report goes into a new folder (nothing is overwritten)",
                            display(&rel)
                        )));
                    }
                    rel
                }
                None => free_folder(&jail, &Path::new("reports").join(slug(&title)))?,
            };
            // The document first, then the charts, named relative to the folder.
            let document = rendered.document;
            let files = rendered.files;
            let total: u64 = files.iter().map(|(_, b)| b.len() as u64).sum();
            jail.check_quota(0, total)?;
            jail.dir()
                .create_dir_all(&rel)
                .map_err(|e| io_error(&rel, e))?;
            let mut output = ToolOutput::default();
            let mut written = Vec::new();
            for (name, bytes) in &files {
                let path = rel.join(name);
                jail.dir()
                    .write(&path, bytes)
                    .map_err(|e| io_error(&path, e))?;
                let shown = display(&path);
                let lines = if name.ends_with(".md") || name.ends_with(".html") {
                    bytes.iter().filter(|b| **b == b'\n').count() as u64
                } else {
                    0
                };
                output
                    .events
                    .push(EventPayload::FileOperation(FileOperationData {
                        operation: FileOperationKind::Write,
                        file_path: shown.clone(),
                        metrics: FileMetrics {
                            lines_written: lines,
                            ..FileMetrics::default()
                        },
                        diff: None,
                        status: ToolStatus::Success,
                    }));
                written.push(json!({"path": shown, "bytes": bytes.len()}));
            }
            output.content = json!({
                "folder": display(&rel),
                "document": display(&rel.join(&document)),
                "files": written,
                "charts": files.len() - 1,
            });
            Ok(output)
        })
        .await
    }
}

/// `base`, or `base-2`, `base-3`, … : the first that does not exist.
fn free_folder(jail: &Jail, base: &Path) -> Result<PathBuf, ToolError> {
    let rel = jail.resolve(&base.to_string_lossy())?;
    if !jail.dir().exists(&rel) {
        return Ok(rel);
    }
    for n in 2..1000 {
        let candidate = PathBuf::from(format!("{}-{n}", rel.to_string_lossy()));
        if !jail.dir().exists(&candidate) {
            return Ok(candidate);
        }
    }
    Err(ToolError::invalid(
        "too many reports with this title; give a `folder`",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_folders_are_slugs_of_the_title() {
        assert_eq!(slug("Sales by Region (2026)"), "sales-by-region-2026");
        assert_eq!(slug("../../etc"), "etc");
        assert_eq!(slug("%%%"), "report");
        assert!(slug(&"x".repeat(500)).len() <= 60);
    }

    #[test]
    fn engine_errors_keep_their_meaning_for_the_model() {
        assert!(matches!(
            data_error(DataError::Refused("no".into())),
            ToolError::Refused(_)
        ));
        assert!(!data_error(DataError::Timeout(Duration::from_secs(1))).is_retryable());
        assert!(data_error(DataError::Unavailable("down".into())).is_retryable());
        assert!(matches!(
            data_error(DataError::Invalid("bad".into())),
            ToolError::InvalidArguments { .. }
        ));
    }
}
