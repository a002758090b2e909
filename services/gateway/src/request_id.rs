//! `X-Request-Id` on every response: kept from the request when it is sane, generated
//! otherwise, and recorded on the request's tracing span.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{Error, HttpMessage};
use tracing::Instrument;

pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The request's id, available to handlers through `req.extensions()`.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

fn acceptable(v: &HeaderValue) -> Option<String> {
    let s = v.to_str().ok()?;
    (!s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic()))
        .then(|| s.to_string())
}

pub async fn request_id(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let id = req
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(acceptable)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    req.extensions_mut().insert(RequestId(id.clone()));
    let span = tracing::info_span!(
        "http",
        request_id = %id,
        method = %req.method(),
        path = %req.path(),
        tenant_id = tracing::field::Empty,
        user_id = tracing::field::Empty,
    );
    let header = HeaderValue::from_str(&id).ok();
    match next.call(req).instrument(span).await {
        Ok(res) => {
            let mut res = res.map_into_boxed_body();
            if let Some(v) = header {
                res.headers_mut().insert(X_REQUEST_ID, v);
            }
            Ok(res)
        }
        // An error that escaped the handlers (a middleware's, say): keep its response, add the
        // header. (The request cannot be cloned here: routing needs it uniquely owned.)
        Err(e) => {
            let mut resp = e.error_response();
            if let Some(v) = header {
                resp.headers_mut().insert(X_REQUEST_ID, v);
            }
            Err(actix_web::error::InternalError::from_response(e.to_string(), resp).into())
        }
    }
}
