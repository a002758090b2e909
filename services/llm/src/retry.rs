//! When and how long to wait before retrying a model request.
//!
//! The delay is `base_delay * 2^attempt` unless the provider said how long to wait with
//! `Retry-After` (seconds or an HTTP date) or `retry-after-ms`, which wins, capped at
//! [`RetryPolicy::max_retry_after`] so a hostile or confused server cannot park a run for hours.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

/// The longest `Retry-After` we honour by default.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How a provider retries retryable failures (429, 5xx, timeouts, connection failures).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; `3` means at most 4 requests.
    pub max_retries: u32,
    /// The first retry waits this long, the next twice as long, and so on.
    pub base_delay: Duration,
    /// Cap on a provider's `Retry-After`.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_retry_after: MAX_RETRY_AFTER,
        }
    }
}

/// The wait before retry number `attempt + 1` (`attempt` counts from 0 for the first retry).
///
/// `retry_after` (from the provider) wins when present, capped at `policy.max_retry_after`;
/// otherwise `base_delay * 2^attempt`, saturating instead of overflowing.
pub fn retry_delay(policy: &RetryPolicy, attempt: u32, retry_after: Option<Duration>) -> Duration {
    if let Some(wait) = retry_after {
        return wait.min(policy.max_retry_after);
    }
    match 1u32.checked_shl(attempt) {
        Some(factor) => policy
            .base_delay
            .checked_mul(factor)
            .unwrap_or(Duration::MAX),
        None if policy.base_delay.is_zero() => Duration::ZERO,
        None => Duration::MAX,
    }
}

/// How long the provider asked us to wait, from `retry-after-ms` (OpenAI, Azure) or `Retry-After`
/// (delta-seconds, possibly fractional, or an HTTP date). Unparseable values are ignored.
pub fn parse_retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
    {
        return Some(Duration::from_secs_f64(ms.min(1e12) / 1000.0));
    }
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = value.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Some(Duration::from_secs_f64(secs.min(1e9)));
        }
        return None;
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderValue, RETRY_AFTER};

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn retry_after_seconds_and_fractions() {
        let now = SystemTime::now();
        assert_eq!(
            parse_retry_after(&headers("retry-after", "7"), now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            parse_retry_after(&headers("retry-after", "0.5"), now),
            Some(Duration::from_millis(500))
        );
        assert_eq!(parse_retry_after(&headers("retry-after", "-3"), now), None);
        assert_eq!(
            parse_retry_after(&headers("retry-after", "soon"), now),
            None
        );
        assert_eq!(parse_retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn retry_after_http_date_is_relative_to_now() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let later = httpdate::fmt_http_date(now + Duration::from_secs(42));
        assert_eq!(
            parse_retry_after(&headers("retry-after", &later), now),
            Some(Duration::from_secs(42))
        );
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(42));
        assert_eq!(
            parse_retry_after(&headers("retry-after", &earlier), now),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn retry_after_ms_wins_over_retry_after() {
        let mut h = headers("retry-after-ms", "250");
        h.insert(RETRY_AFTER, HeaderValue::from_static("9"));
        assert_eq!(
            parse_retry_after(&h, SystemTime::now()),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn delays_double_and_saturate() {
        let policy = RetryPolicy {
            base_delay: Duration::from_millis(100),
            ..RetryPolicy::default()
        };
        assert_eq!(retry_delay(&policy, 0, None), Duration::from_millis(100));
        assert_eq!(retry_delay(&policy, 1, None), Duration::from_millis(200));
        assert_eq!(retry_delay(&policy, 2, None), Duration::from_millis(400));
        assert_eq!(retry_delay(&policy, 200, None), Duration::MAX);
        assert_eq!(
            retry_delay(&policy, 0, Some(Duration::from_secs(3600))),
            MAX_RETRY_AFTER
        );
    }
}
