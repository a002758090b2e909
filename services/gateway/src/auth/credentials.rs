//! Where a request carries its API key: `Authorization: Bearer <key>`, `X-API-Key: <key>`, or,
//! for browsers (which cannot set headers on a WebSocket), a WebSocket subprotocol
//! `agentry.key.<key>` offered on the upgrade request.

use actix_web::http::header::{self, HeaderMap};

/// The subprotocol prefix that carries a key on a WebSocket upgrade.
pub const WS_KEY_PROTOCOL_PREFIX: &str = "agentry.key.";
/// The subprotocol a WebSocket server should select (echo) when a browser offered its key as
/// `agentry.key.<key>`: browsers require the server to pick one of the offered protocols, and
/// echoing the key back is pointless. Clients offer both: `["agentry.v1", "agentry.key.<key>"]`.
pub const WS_PROTOCOL: &str = "agentry.v1";
pub const X_API_KEY: &str = "x-api-key";

/// What the request presented.
#[derive(Debug, PartialEq, Eq)]
pub enum Presented<'a> {
    /// No credentials at all.
    None,
    /// Something that is not a usable credential (`Authorization: Basic …`, an empty bearer,
    /// a header that is not ASCII). Treated as an invalid key.
    Malformed,
    Key(&'a str),
}

/// The key a request presents, in order of precedence: `Authorization`, `X-API-Key`, then the
/// WebSocket subprotocol (only on an upgrade request).
pub fn presented(headers: &HeaderMap) -> Presented<'_> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let Ok(v) = v.to_str() else {
            return Presented::Malformed;
        };
        let mut parts = v.trim().splitn(2, ' ');
        let scheme = parts.next().unwrap_or_default();
        let token = parts.next().map(str::trim).unwrap_or_default();
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return Presented::Malformed;
        }
        return Presented::Key(token);
    }
    if let Some(v) = headers.get(X_API_KEY) {
        return match v.to_str().map(str::trim) {
            Ok(k) if !k.is_empty() => Presented::Key(k),
            _ => Presented::Malformed,
        };
    }
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if upgrade {
        for v in headers.get_all(header::SEC_WEBSOCKET_PROTOCOL) {
            let Ok(v) = v.to_str() else { continue };
            if let Some(key) = v
                .split(',')
                .map(str::trim)
                .find_map(|p| p.strip_prefix(WS_KEY_PROTOCOL_PREFIX))
            {
                return if key.is_empty() {
                    Presented::Malformed
                } else {
                    Presented::Key(key)
                };
            }
        }
    }
    Presented::None
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn every_carrier_is_read_in_order() {
        assert_eq!(presented(&headers(&[])), Presented::None);
        assert_eq!(
            presented(&headers(&[("authorization", "Bearer agk_1")])),
            Presented::Key("agk_1")
        );
        assert_eq!(
            presented(&headers(&[("authorization", "bearer   agk_1 ")])),
            Presented::Key("agk_1")
        );
        assert_eq!(
            presented(&headers(&[("authorization", "Basic dXNlcjpwdw==")])),
            Presented::Malformed
        );
        assert_eq!(
            presented(&headers(&[("authorization", "Bearer ")])),
            Presented::Malformed
        );
        assert_eq!(
            presented(&headers(&[("x-api-key", "agk_2")])),
            Presented::Key("agk_2")
        );
        assert_eq!(
            presented(&headers(&[("x-api-key", "")])),
            Presented::Malformed
        );
        // Authorization wins over X-API-Key.
        assert_eq!(
            presented(&headers(&[
                ("x-api-key", "agk_2"),
                ("authorization", "Bearer agk_1")
            ])),
            Presented::Key("agk_1")
        );
        let ws = [
            ("upgrade", "websocket"),
            ("sec-websocket-protocol", "agentry.v1, agentry.key.agk_3"),
        ];
        assert_eq!(presented(&headers(&ws)), Presented::Key("agk_3"));
        // The subprotocol counts only on an upgrade.
        assert_eq!(presented(&headers(&ws[1..])), Presented::None);
        assert_eq!(
            presented(&headers(&[
                ("upgrade", "websocket"),
                ("sec-websocket-protocol", "agentry.key.")
            ])),
            Presented::Malformed
        );
    }
}
