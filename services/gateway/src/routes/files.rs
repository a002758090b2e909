//! `GET /files/{path}`: a file of the caller's own workspace (`{data_dir}/workspaces/{tenant}/
//! {user}/`), e.g. a report `create_report` wrote and its chart images. Read through the
//! workspace jail of the file tools (no `..`, no absolute path outside, no symlink or hard link
//! out), so a caller reaches only their own files; another user's path is simply not in it.
//!
//! The bytes are served with a type from the extension and `Content-Security-Policy: sandbox`
//! plus `nosniff`: an HTML or SVG report written from database contents runs no script on the
//! API's origin.

use actix_web::HttpResponse;
use actix_web::web;
use agentry_builtin::jail;
use agentry_schema::error::ErrorCode;
use agentry_tools::tool::{ToolError, WorkspaceInfo};

use crate::auth::TenantCaller;
use crate::error::{ApiError, ApiResult};
use crate::routes::resource::endpoint;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(endpoint("/files/{path:.*}").get(get_file));
}

/// The largest file served.
pub const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

fn content_type(path: &str) -> &'static str {
    let ext = path
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "png" => "image/png",
        "svg" => "image/svg+xml",
        "jpg" | "jpeg" => "image/jpeg",
        "md" => "text/markdown; charset=utf-8",
        "html" | "htm" => "text/html; charset=utf-8",
        "csv" => "text/csv; charset=utf-8",
        "json" => "application/json",
        "txt" | "log" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// A file of the caller's own workspace.
#[utoipa::path(
    get,
    path = "/api/v1/files/{path}",
    tag = "files",
    params(("path" = String, Path, description = "The file's path relative to the caller's workspace (slashes allowed: `reports/sales/chart-1.png`)")),
    responses(
        (status = 200, description = "The file's bytes, typed by extension (`image/png`, `image/svg+xml`, `text/markdown`, `text/html`, … or `application/octet-stream`), with `Content-Security-Policy: sandbox`", content(
            (String = "text/markdown"),
            (String = "application/octet-stream"),
        )),
        (status = 400, description = "The path leaves the workspace (`..`, an absolute path outside it, a symlink or hard link out) or names the workspace root", body = agentry_schema::ErrorResponse),
        (status = 401, description = "No usable API key", body = agentry_schema::ErrorResponse),
        (status = 403, description = "The platform admin key (it has no workspace)", body = agentry_schema::ErrorResponse),
        (status = 404, description = "No such file in the caller's workspace", body = agentry_schema::ErrorResponse),
    )
)]
pub async fn get_file(
    caller: TenantCaller,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> ApiResult<HttpResponse> {
    let tenant = caller.tenant();
    let workspace = WorkspaceInfo {
        root: state.engine.deps().workspace_root(tenant, caller.user_id()),
        quota_bytes: tenant.quotas.workspace_quota_bytes,
        sandbox: (&tenant.policy().sandbox).into(),
    };
    let input = path.into_inner();
    let read = web::block(move || jail::read_whole(&workspace, &input, MAX_FILE_BYTES))
        .await
        .map_err(|e| ApiError::internal("reading a workspace file", e))?;
    let (rel, bytes) = read.map_err(|e| match e {
        ToolError::NotFound(m) => ApiError::new(ErrorCode::NotFound, m),
        ToolError::Refused(m) | ToolError::InvalidArguments { message: m, .. } => {
            ApiError::new(ErrorCode::BadRequest, m)
                .with_details(serde_json::json!({ "parameter": "path" }))
        }
        other => ApiError::internal("reading a workspace file", other),
    })?;
    Ok(HttpResponse::Ok()
        .content_type(content_type(&rel.to_string_lossy()))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header((
            "Content-Security-Policy",
            "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'",
        ))
        .body(bytes))
}
