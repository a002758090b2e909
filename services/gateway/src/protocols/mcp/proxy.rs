//! Cluster mode: a request for an MCP session another replica holds
//! ([`agentry_mcp_server::Admission::Elsewhere`]) is proxied there over HTTP, its answer (an
//! event stream included) streamed back.

use std::time::Duration;

use actix_web::body::BoxBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::{FromRequest, HttpResponse, ResponseError, web};
use agentry_mcp_server::SessionDirectory;
use agentry_schema::error::ErrorCode;
use futures::StreamExt;

use crate::cluster::PEER_HEADER;
use crate::error::ApiError;

/// What `/mcp` needs in cluster mode: where the replicas' sessions are, and how to reach them.
pub struct McpPeers {
    pub(super) directory: SessionDirectory,
    pub(super) proxy: PeerProxy,
}

impl McpPeers {
    /// `url`: this replica's advertised base URL (`cluster.advertise_url`); `secret`: the
    /// cluster's peer secret.
    pub fn new(
        coordination: agentry_store::coordination::Coordination,
        url: String,
        secret: String,
    ) -> anyhow::Result<McpPeers> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()?;
        Ok(McpPeers {
            directory: SessionDirectory::new(coordination, url),
            proxy: PeerProxy { secret, http },
        })
    }
}

/// Passes requests on to the replica that holds their session.
pub struct PeerProxy {
    /// Sent with proxied requests: the replica that proxied one admitted it already.
    secret: String,
    http: reqwest::Client,
}

impl PeerProxy {
    /// Send `req` to the replica at `base` and stream its answer back.
    pub(super) async fn proxy(&self, req: ServiceRequest, base: &str) -> ServiceResponse<BoxBody> {
        let (http_req, mut payload) = req.into_parts();
        let body = match web::Bytes::from_request(&http_req, &mut payload).await {
            Ok(b) => b,
            Err(e) => return ServiceResponse::new(http_req, e.error_response()),
        };
        let path = http_req
            .uri()
            .path_and_query()
            .map_or("/mcp", |p| p.as_str());
        let url = format!("{}{path}", base.trim_end_matches('/'));
        let method = reqwest::Method::from_bytes(http_req.method().as_str().as_bytes())
            .unwrap_or(reqwest::Method::POST);
        let mut out = self.http.request(method, url);
        for (name, value) in http_req.headers() {
            if !hop_by_hop(name.as_str()) && name.as_str() != PEER_HEADER {
                out = out.header(name.as_str(), value.as_bytes());
            }
        }
        let sent = out
            .header(PEER_HEADER, &self.secret)
            .body(body)
            .send()
            .await;
        let res = match sent {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, replica_url = %base, "proxying an /mcp request to the replica that holds its session failed");
                let err = ApiError::new(
                    ErrorCode::CoordinationUnavailable,
                    "the replica that holds this MCP session does not answer; retry, or send a \
                     new initialize without the Mcp-Session-Id header",
                )
                .with_retry_after(2);
                return ServiceResponse::new(http_req, err.error_response());
            }
        };
        let status = StatusCode::from_u16(res.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let mut answer = HttpResponse::build(status);
        for (name, value) in res.headers() {
            if !hop_by_hop(name.as_str()) {
                answer.append_header((name.as_str(), value.as_bytes()));
            }
        }
        let stream = res
            .bytes_stream()
            .map(|chunk| chunk.map_err(actix_web::error::ErrorBadGateway));
        ServiceResponse::new(http_req, answer.streaming(stream))
    }
}

/// Headers that belong to one connection, not to the request or answer being proxied.
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "content-length"
    )
}
