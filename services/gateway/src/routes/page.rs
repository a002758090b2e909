//! `GET /`: the web page (chat, approvals, questions, cancel, resume) — one static file that
//! talks to the REST API and the WebSocket like any client.

use actix_web::http::header;
use actix_web::{HttpResponse, web};

use crate::routes::resource::endpoint;

const INDEX: &str = include_str!("../../static/index.html");

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(endpoint("/").get(index));
}

/// The web page: chat with an assistant, answer approvals and questions, cancel, resume.
#[utoipa::path(
    get,
    path = "/",
    tag = "meta",
    security(()),
    responses((status = 200, description = "The web page (HTML)", content_type = "text/html"))
)]
pub async fn index() -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/html; charset=utf-8"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("content-security-policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self' ws: wss:"))
        .body(INDEX)
}
