//! Request extractors that fail with our error JSON and name what was wrong:
//!
//! - [`ApiJson`]: a JSON body. Wrong or missing `Content-Type` → 415 `unsupported_media_type`;
//!   over `server.body_limit_bytes` → 413 `payload_too_large`; not JSON → 400 `invalid_json`;
//!   JSON with a missing, unknown or mistyped field → 422 `validation_error` with
//!   `details.field` (a path such as `quotas.max_users` or `tools[2]`).
//! - [`ApiQuery`]: a query string → 400 `invalid_query` with `details.parameter`.
//! - [`path_id`]: an id from the path → 400 `bad_request` with `details.parameter`.
//!
//! [`configure`] also registers error handlers for actix's own `Json`, `Query` and `Path`
//! extractors, so a route that uses them answers in the same shape.

use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;

use actix_web::dev::Payload;
use actix_web::error::{JsonPayloadError, PathError, PayloadError, QueryPayloadError};
use actix_web::{FromRequest, HttpMessage, HttpRequest, mime, web};
use agentry_schema::error::ErrorCode;
use agentry_schema::ids::InvalidId;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::error::ApiError;

/// A JSON request body, deserialized with the failing field named.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T> ApiJson<T> {
    pub fn into_inner(self) -> T {
        self.0
    }
}

fn unsupported_media_type(req: &HttpRequest) -> ApiError {
    let got = req
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| format!("got `{v}`"))
        .unwrap_or_else(|| "none was sent".to_string());
    ApiError::new(
        ErrorCode::UnsupportedMediaType,
        format!("the body must be JSON with `Content-Type: application/json` ({got})"),
    )
}

pub(crate) fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        ErrorCode::PayloadTooLarge,
        format!("the body is larger than the limit of {limit} bytes (server.body_limit_bytes)"),
    )
    .with_details(json!({ "limit_bytes": limit }))
}

fn is_json_content_type(req: &HttpRequest) -> bool {
    match req.mime_type() {
        Ok(Some(mime)) => {
            mime.type_() == mime::APPLICATION
                && (mime.subtype() == mime::JSON || mime.suffix() == Some(mime::JSON))
        }
        _ => false,
    }
}

fn body_limit(req: &HttpRequest) -> usize {
    req.app_data::<web::Data<crate::state::AppState>>()
        .map(|s| s.settings.server.body_limit_bytes)
        .unwrap_or(crate::settings::ServerSettings::default().body_limit_bytes)
}

/// Strip serde_json's " at line L column C" from a data error (the field path says where).
fn without_position(msg: &str) -> &str {
    match msg.rfind(" at line ") {
        Some(i) => &msg[..i],
        None => msg,
    }
}

/// The name inside the first pair of backticks of a serde message (`missing field `x``).
fn quoted(msg: &str) -> Option<&str> {
    let start = msg.find('`')? + 1;
    let len = msg[start..].find('`')?;
    Some(&msg[start..start + len])
}

fn join_path(path: &str, field: &str) -> String {
    if path.is_empty() || path == "." {
        field.to_string()
    } else if path.ends_with(field) {
        path.to_string()
    } else {
        format!("{path}.{field}")
    }
}

/// Map a deserialization failure to 400 (not JSON) or 422 (a field is wrong), naming the field.
pub fn json_error(err: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    use serde_json::error::Category;
    let path = err.path().to_string();
    let inner = err.inner();
    match inner.classify() {
        Category::Syntax | Category::Eof | Category::Io => ApiError::new(
            ErrorCode::InvalidJson,
            format!("the body is not valid JSON: {inner}"),
        ),
        Category::Data => {
            let reason = without_position(&inner.to_string()).to_string();
            let field =
                if reason.starts_with("missing field") || reason.starts_with("unknown field") {
                    quoted(&reason).map(|f| join_path(&path, f)).unwrap_or(path)
                } else if path.is_empty() {
                    ".".to_string()
                } else {
                    path
                };
            ApiError::new(
                ErrorCode::ValidationError,
                format!("invalid field `{field}`: {reason}"),
            )
            .with_details(json!({ "field": field, "reason": reason }))
        }
    }
}

/// Parse a JSON body already read into memory. Every body of this API is an object: serde
/// would otherwise accept `[…]` for a struct (by position), which no client means.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Syntax first, so "not JSON" (400) never hides behind a field error (422).
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidJson,
            format!("the body is not valid JSON: {e}"),
        )
    })?;
    if bytes.trim_ascii_start().first() != Some(&b'{') {
        return Err(
            ApiError::new(ErrorCode::ValidationError, "the body must be a JSON object")
                .with_details(json!({ "field": ".", "reason": "expected a JSON object" })),
        );
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(json_error)?;
    de.end().map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidJson,
            format!("the body is not valid JSON: {e}"),
        )
    })?;
    Ok(value)
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, ApiError>>>>;

impl<T: DeserializeOwned + 'static> FromRequest for ApiJson<T> {
    type Error = ApiError;
    type Future = BoxFuture<Self>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        if !is_json_content_type(req) {
            let err = unsupported_media_type(req);
            return Box::pin(async move { Err(err) });
        }
        let limit = body_limit(req);
        let body = web::Bytes::from_request(req, payload);
        Box::pin(async move {
            let bytes = body.await.map_err(|e| match e.as_error::<PayloadError>() {
                Some(PayloadError::Overflow) => too_large(limit),
                _ => ApiError::new(
                    ErrorCode::BadRequest,
                    format!("could not read the body: {e}"),
                ),
            })?;
            parse_json(&bytes).map(ApiJson)
        })
    }
}

/// A query string, deserialized with the failing parameter named. Unknown parameters are
/// refused (a misspelt `limt=5` would otherwise be ignored silently).
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T> ApiQuery<T> {
    pub fn into_inner(self) -> T {
        self.0
    }
}

pub fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|err| {
        let path = err.path().to_string();
        let reason = err.inner().to_string();
        let parameter =
            if reason.starts_with("missing field") || reason.starts_with("unknown field") {
                quoted(&reason).map(str::to_string).unwrap_or(path)
            } else {
                path
            };
        let reason = reason.replace("field", "parameter");
        ApiError::invalid_query(
            &parameter,
            format!("invalid query parameter `{parameter}`: {reason}"),
        )
        .with_details(json!({ "parameter": parameter, "reason": reason }))
    })
}

impl<T: DeserializeOwned + 'static> FromRequest for ApiQuery<T> {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        std::future::ready(parse_query(req.query_string()).map(ApiQuery))
    }
}

/// Parse an id taken from the path, naming the parameter when it is malformed.
pub fn path_id<T: FromStr<Err = InvalidId>>(parameter: &str, raw: &str) -> Result<T, ApiError> {
    raw.parse::<T>().map_err(|e| {
        ApiError::new(
            ErrorCode::BadRequest,
            format!("path parameter `{parameter}`: {e}"),
        )
        .with_details(json!({ "parameter": parameter, "reason": e.reason }))
    })
}

/// One id from the path, named by its marker ([`param`]). It is checked when extracted, so a
/// malformed id answers 400 before a body next to it is read.
#[derive(Debug, Clone)]
pub struct ApiPath<M: param::Param>(pub M::Id);

impl<M: param::Param> ApiPath<M> {
    pub fn into_inner(self) -> M::Id {
        self.0
    }
}

impl<M: param::Param> FromRequest for ApiPath<M> {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        std::future::ready(match req.match_info().get(M::NAME) {
            Some(raw) => path_id(M::NAME, raw).map(ApiPath),
            None => Err(ApiError::internal(
                "path parameter",
                format!("the route {} has no `{}` parameter", req.path(), M::NAME),
            )),
        })
    }
}

/// The path parameters of this API: each marker names the parameter and its id type.
/// An id from a JSON body field (`assistant_id`, …): absent is `None`, malformed is 422 naming
/// the field.
pub fn body_id<T>(field: &str, raw: Option<&str>) -> Result<Option<T>, ApiError>
where
    T: for<'a> TryFrom<&'a str>,
    for<'a> <T as TryFrom<&'a str>>::Error: std::fmt::Display,
{
    raw.map(|r| T::try_from(r).map_err(|e| ApiError::validation(field, e.to_string())))
        .transpose()
}

pub mod param {
    use std::str::FromStr;

    use agentry_schema::ids::{self, InvalidId};

    pub trait Param: 'static {
        const NAME: &'static str;
        type Id: FromStr<Err = InvalidId> + 'static;
    }

    macro_rules! params {
        ($($(#[$doc:meta])* $marker:ident = ($name:literal, $id:ty)),+ $(,)?) => {$(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy)]
            pub struct $marker;
            impl Param for $marker {
                const NAME: &'static str = $name;
                type Id = $id;
            }
        )+};
    }

    params!(
        /// `{session_id}`
        Session = ("session_id", ids::SessionId),
        /// `{execution_id}`
        Execution = ("execution_id", ids::RunId),
        /// `{agent_id}` (a slug)
        Agent = ("agent_id", ids::AssistantId),
        /// `{tenant_id}`
        Tenant = ("tenant_id", ids::TenantId),
        /// `{user_id}`
        User = ("user_id", ids::UserId),
        /// `{key_id}`
        Key = ("key_id", ids::ApiKeyId),
        /// `{request_id}` (an approval or question)
        Approval = ("request_id", ids::ApprovalId),
        /// `{name}` of a user's MCP server
        McpServer = ("name", ids::McpServerName),
        /// `{profile_id}` (a slug)
        Profile = ("profile_id", ids::ProfileId),
        /// `{connection_id}` (a slug)
        ModelConnection = ("connection_id", ids::ModelConnectionId),
        /// `{remote_agent_id}` (a slug)
        RemoteAgent = ("remote_agent_id", ids::RemoteAgentId),
        /// `{source_id}` (a slug)
        DataSource = ("source_id", ids::DataSourceId),
        /// `{skill}`: a skill's name (a slug)
        Skill = ("skill", ids::SkillName),
        /// `{memory_id}`
        Memory = ("memory_id", ids::MemoryId),
        /// `{role}`: `admin`, `member` or a custom role's name
        Role = ("role", agentry_schema::roles::Grant),
        /// `{name}` of a tenant's MCP virtual server
        VirtualServer = ("name", ids::VirtualServerName),
    );
}

/// Error handlers for actix's own extractors, and the body size limit.
pub fn configure(cfg: &mut web::ServiceConfig, body_limit: usize) {
    cfg.app_data(web::PayloadConfig::new(body_limit))
        .app_data(
            web::JsonConfig::default()
                .limit(body_limit)
                .error_handler(move |err, req| {
                    let e = match err {
                        JsonPayloadError::ContentType => unsupported_media_type(req),
                        JsonPayloadError::Overflow { .. }
                        | JsonPayloadError::OverflowKnownLength { .. } => too_large(body_limit),
                        JsonPayloadError::Deserialize(e) if e.is_data() => ApiError::new(
                            ErrorCode::ValidationError,
                            without_position(&e.to_string()).to_string(),
                        ),
                        JsonPayloadError::Deserialize(e) => ApiError::new(
                            ErrorCode::InvalidJson,
                            format!("the body is not valid JSON: {e}"),
                        ),
                        other => ApiError::new(
                            ErrorCode::BadRequest,
                            format!("could not read the body: {other}"),
                        ),
                    };
                    e.into()
                }),
        )
        .app_data(web::QueryConfig::default().error_handler(|err, _| {
            let reason = match err {
                QueryPayloadError::Deserialize(e) => e.to_string(),
                other => other.to_string(),
            };
            ApiError::new(
                ErrorCode::InvalidQuery,
                format!("invalid query string: {reason}"),
            )
            .into()
        }))
        .app_data(web::PathConfig::default().error_handler(|err, _| {
            let reason = match err {
                PathError::Deserialize(e) => e.to_string(),
                other => other.to_string(),
            };
            ApiError::new(
                ErrorCode::BadRequest,
                format!("invalid path parameter: {reason}"),
            )
            .into()
        }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        max_users: u32,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        name: String,
        #[serde(default)]
        quotas: Option<Inner>,
        #[serde(default)]
        tools: Vec<String>,
    }

    fn field_of(body: &str) -> (ErrorCode, String) {
        let e = parse_json::<Body>(body.as_bytes()).unwrap_err();
        (
            e.code,
            e.details["field"].as_str().unwrap_or_default().to_string(),
        )
    }

    #[test]
    fn json_errors_name_the_field() {
        assert_eq!(field_of("{}"), (ErrorCode::ValidationError, "name".into()));
        assert_eq!(
            field_of(r#"{"name": 1}"#),
            (ErrorCode::ValidationError, "name".into())
        );
        assert_eq!(
            field_of(r#"{"name": "x", "quotas": {"max_users": -1}}"#),
            (ErrorCode::ValidationError, "quotas.max_users".into())
        );
        assert_eq!(
            field_of(r#"{"name": "x", "quotas": {}}"#),
            (ErrorCode::ValidationError, "quotas.max_users".into())
        );
        assert_eq!(
            field_of(r#"{"name": "x", "tools": ["a", 2]}"#),
            (ErrorCode::ValidationError, "tools[1]".into())
        );
        assert_eq!(
            field_of(r#"{"name": "x", "nmae": 1}"#),
            (ErrorCode::ValidationError, "nmae".into())
        );
        assert_eq!(field_of(r#"[1]"#), (ErrorCode::ValidationError, ".".into()));
        assert_eq!(field_of("[]"), (ErrorCode::ValidationError, ".".into()));
        assert_eq!(field_of(" 42"), (ErrorCode::ValidationError, ".".into()));
        assert_eq!(field_of("[1"), (ErrorCode::InvalidJson, "".into()));
        assert_eq!(field_of(r#"{"name": "#).0, ErrorCode::InvalidJson);
        assert_eq!(field_of("not json").0, ErrorCode::InvalidJson);
        assert_eq!(field_of("").0, ErrorCode::InvalidJson);
        assert_eq!(
            field_of(r#"{"name": "x"} trailing"#).0,
            ErrorCode::InvalidJson
        );
        assert!(parse_json::<Body>(br#"{"name": "x"}"#).is_ok());
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Q {
        #[serde(default)]
        limit: Option<u64>,
        #[serde(default)]
        status: Option<String>,
    }

    #[test]
    fn query_errors_name_the_parameter() {
        let e = parse_query::<Q>("limit=ten").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidQuery);
        assert_eq!(e.details["parameter"], "limit");
        let e = parse_query::<Q>("limt=5").unwrap_err();
        assert_eq!(e.details["parameter"], "limt");
        let q = parse_query::<Q>("limit=5&status=running").unwrap();
        assert_eq!((q.limit, q.status.as_deref()), (Some(5), Some("running")));
        assert!(parse_query::<Q>("").is_ok());
    }

    #[test]
    fn path_ids_name_the_parameter() {
        let e = path_id::<agentry_schema::ids::SessionId>("session_id", "nope").unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert_eq!(e.details["parameter"], "session_id");
    }
}
