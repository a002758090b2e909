//! [`Endpoint`]: an actix resource that knows its methods, so a request with another method
//! gets 405 `method_not_allowed` with an `Allow` header listing them (actix's default is an
//! empty 405). Routes are declared as
//!
//! ```ignore
//! cfg.service(endpoint("/sessions").get(list_sessions).post(create_session));
//! ```

use actix_web::dev::{AppService, HttpServiceFactory};
use actix_web::http::Method;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{
    FromRequest, Handler, HttpRequest, HttpResponse, Resource, Responder, ResponseError, web,
};
use agentry_schema::error::ErrorCode;

use crate::error::ApiError;

pub struct Endpoint {
    resource: Resource,
    allow: Vec<Method>,
}

/// A resource at `path` (relative to the enclosing scope).
pub fn endpoint(path: &str) -> Endpoint {
    Endpoint {
        resource: web::resource(path),
        allow: Vec::new(),
    }
}

impl Endpoint {
    pub fn method<F, Args>(mut self, method: Method, handler: F) -> Self
    where
        F: Handler<Args>,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        self.allow.push(method.clone());
        self.resource = self.resource.route(web::method(method).to(handler));
        self
    }

    /// GET, and HEAD with the same handler (the server drops the body of a HEAD response), so
    /// monitors that probe with HEAD get the status GET would.
    pub fn get<F, Args>(self, handler: F) -> Self
    where
        F: Handler<Args>,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        self.method(Method::GET, handler.clone())
            .method(Method::HEAD, handler)
    }

    pub fn post<F, Args>(self, handler: F) -> Self
    where
        F: Handler<Args>,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        self.method(Method::POST, handler)
    }

    pub fn put<F, Args>(self, handler: F) -> Self
    where
        F: Handler<Args>,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        self.method(Method::PUT, handler)
    }

    pub fn patch<F, Args>(self, handler: F) -> Self
    where
        F: Handler<Args>,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        self.method(Method::PATCH, handler)
    }

    pub fn delete<F, Args>(self, handler: F) -> Self
    where
        F: Handler<Args>,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        self.method(Method::DELETE, handler)
    }
}

fn method_not_allowed(req: &HttpRequest, allow: &str) -> HttpResponse {
    let mut res = ApiError::new(
        ErrorCode::MethodNotAllowed,
        format!(
            "{} is not allowed on {}; allowed: {allow}",
            req.method(),
            req.path()
        ),
    )
    .with_details(serde_json::json!({ "allow": allow.split(", ").collect::<Vec<_>>() }))
    .error_response();
    if let Ok(v) = HeaderValue::from_str(allow) {
        res.headers_mut().insert(header::ALLOW, v);
    }
    res
}

impl HttpServiceFactory for Endpoint {
    fn register(self, config: &mut AppService) {
        let allow = self
            .allow
            .iter()
            .map(Method::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        let resource = self
            .resource
            .default_service(web::to(move |req: HttpRequest| {
                let allow = allow.clone();
                async move { method_not_allowed(&req, &allow) }
            }));
        HttpServiceFactory::register(resource, config)
    }
}
