//! `GET /` and `GET /assets/{name}`: the web console (chat, MCP servers, runs, agents, admin) —
//! plain HTML, CSS and ES modules compiled into the binary, so it works offline and needs no
//! build step. It talks to the REST API and the WebSocket like any other client (docs/console.md).

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use agentry_schema::error::ErrorCode;

use crate::error::ApiError;
use crate::routes::resource::endpoint;

const INDEX: &str = include_str!("../../static/console/index.html");

/// Scripts and styles from this server only: no inline script, no inline style attribute, no
/// frame, no plugin. `connect-src 'self'` covers the same-origin WebSocket.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Every asset of the console: name, content type, content. Vendored libraries keep their
/// licence headers (their full licences are beside them in `static/console/vendor/`).
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.css", CSS, include_str!("../../static/console/app.css")),
    ("app.js", JS, include_str!("../../static/console/app.js")),
    ("api.js", JS, include_str!("../../static/console/api.js")),
    ("ui.js", JS, include_str!("../../static/console/ui.js")),
    ("chat.js", JS, include_str!("../../static/console/chat.js")),
    ("mcp.js", JS, include_str!("../../static/console/mcp.js")),
    ("runs.js", JS, include_str!("../../static/console/runs.js")),
    (
        "agents.js",
        JS,
        include_str!("../../static/console/agents.js"),
    ),
    (
        "admin.js",
        JS,
        include_str!("../../static/console/admin.js"),
    ),
    (
        "marked.esm.js",
        JS,
        include_str!("../../static/console/vendor/marked.esm.js"),
    ),
    (
        "purify.es.mjs",
        JS,
        include_str!("../../static/console/vendor/purify.es.mjs"),
    ),
    (
        "highlight.esm.js",
        JS,
        include_str!("../../static/console/vendor/highlight.esm.js"),
    ),
    (
        "highlight.css",
        CSS,
        include_str!("../../static/console/vendor/highlight-github-dark.css"),
    ),
];

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(endpoint("/").get(index))
        .service(endpoint("/assets/{name}").get(asset));
}

/// The web console: chat with an assistant, approvals and questions, MCP servers, runs, agents,
/// and the tenant and platform administration.
#[utoipa::path(
    get,
    path = "/",
    tag = "meta",
    security(()),
    responses((status = 200, description = "The web console (HTML)", content_type = "text/html"))
)]
pub async fn index() -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/html; charset=utf-8"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("content-security-policy", CSP))
        .insert_header(("x-content-type-options", "nosniff"))
        .insert_header(("referrer-policy", "no-referrer"))
        .body(INDEX)
}

/// One script or stylesheet of the console (not part of the REST API, so not in
/// `/openapi.json`, like `/docs`).
pub async fn asset(req: HttpRequest, name: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let name = name.into_inner();
    let Some((_, kind, body)) = ASSETS.iter().find(|(n, _, _)| *n == name) else {
        return Err(ApiError::new(
            ErrorCode::RouteNotFound,
            format!("no route for {} {}", req.method(), req.path()),
        ));
    };
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, *kind))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("x-content-type-options", "nosniff"))
        .body(*body))
}
