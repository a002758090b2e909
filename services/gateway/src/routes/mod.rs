//! HTTP routes, one module per resource; each ends in `configure`. Every resource is declared
//! with [`resource::endpoint`], which answers other methods with 405 and an `Allow` header.
//! The protocol adapters (chat over REST, SSE, WebSocket, `/v1`, `/mcp`) are not here but in
//! [`crate::protocols`]; `/chat` and `/chat/stream` are mounted under `/api/v1` below. The web
//! page at `/` is [`page`].

use actix_web::{HttpRequest, HttpResponse, web};
use agentry_schema::api::Page;
use agentry_schema::error::ErrorCode;
use agentry_store::PageRequest;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::error::{ApiError, ApiResult};

pub mod admin;
pub mod agents;
pub mod data_sources;
pub mod executions;
pub mod files;
pub mod health;
pub mod mcp_oauth;
pub mod mcp_servers;
pub mod me;
pub mod memories;
pub mod model_connections;
pub mod page;
pub mod profiles;
pub mod remote_agents;
pub mod resource;
pub mod sessions;
pub mod skills;
pub mod tenant;

/// Everything under `/api/v1`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/api/v1")
            .configure(health::configure)
            .configure(me::configure)
            .configure(sessions::configure)
            .configure(crate::protocols::rest_chat::configure)
            .configure(crate::protocols::sse::configure)
            .configure(mcp_servers::configure)
            .configure(mcp_oauth::configure)
            .configure(agents::configure)
            .configure(profiles::configure)
            .configure(model_connections::configure)
            .configure(remote_agents::configure)
            .configure(data_sources::configure)
            .configure(files::configure)
            .configure(skills::configure)
            .configure(memories::configure)
            .configure(executions::configure)
            .configure(tenant::configure)
            .configure(admin::configure),
    );
}

/// Unknown routes get our error body, not actix's empty 404.
pub async fn route_not_found(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(
        ErrorCode::RouteNotFound,
        format!("no route for {} {}", req.method(), req.path()),
    ))
}

/// Default page size of every list.
pub const DEFAULT_LIMIT: u64 = 100;

/// `?limit&offset` of a list: `limit` 1–1000 (default 100), `offset` from 0.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Items per page, 1–1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u64>,
    /// Items to skip (default 0).
    pub offset: Option<u64>,
}

impl PageQuery {
    pub fn page(&self) -> ApiResult<PageRequest> {
        page(self.limit, self.offset)
    }
}

/// Check `limit` and `offset` and turn them into a page request.
pub fn page(limit: Option<u64>, offset: Option<u64>) -> ApiResult<PageRequest> {
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=PageRequest::MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid_query(
            "limit",
            format!(
                "`limit` must be between 1 and {} (got {limit})",
                PageRequest::MAX_LIMIT
            ),
        ));
    }
    let offset = offset.unwrap_or(0);
    if offset > i64::MAX as u64 {
        return Err(ApiError::invalid_query("offset", "`offset` is too large"));
    }
    Ok(PageRequest::new(limit, offset))
}

/// A page of a list, converted item by item.
pub fn page_of<T, U>(
    items: Vec<T>,
    total: u64,
    page: PageRequest,
    view: impl FnMut(T) -> U,
) -> Page<U> {
    Page {
        items: items.into_iter().map(view).collect(),
        total,
        limit: page.limit,
        offset: page.offset,
    }
}
