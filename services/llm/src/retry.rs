//! When and how long to wait before retrying: the one retry policy of the server, on `backon`.
//!
//! The wait before retry `n` (0-based) is `d + jitter`, where `d = min(base_delay * 2^n,
//! max_delay)` and the jitter is random in `[0, d)`, so replicas that failed together do not
//! retry together. A provider that says how long to wait (`Retry-After` in seconds or as an HTTP
//! date, or `retry-after-ms`) wins, capped at [`RetryPolicy::max_retry_after`] so a hostile or
//! confused server cannot park a run for hours.
//!
//! Model requests retry through [`RetryPolicy::backoff`] with `backon`'s `Retryable`; the agent
//! loop and the MCP pool, which wait inside a `select!` or an actor timer, ask [`retry_delay`].

use std::time::{Duration, SystemTime};

use backon::{BackoffBuilder, ExponentialBuilder};
use reqwest::header::HeaderMap;

/// The longest `Retry-After` we honour by default.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The longest backoff step (before jitter) by default.
pub const MAX_DELAY: Duration = Duration::from_secs(30);

/// How a client retries retryable failures (429, 5xx, timeouts, connection failures).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; `3` means at most 4 requests.
    pub max_retries: u32,
    /// The first retry waits this long (plus jitter), the next twice as long, and so on.
    pub base_delay: Duration,
    /// Cap on one backoff step, before jitter.
    pub max_delay: Duration,
    /// Cap on a provider's `Retry-After`.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: MAX_DELAY,
            max_retry_after: MAX_RETRY_AFTER,
        }
    }
}

impl RetryPolicy {
    /// The backoff: `max_retries` waits, doubling from `base_delay`, capped, jittered.
    pub fn backoff(&self) -> ExponentialBuilder {
        ExponentialBuilder::new()
            .with_min_delay(self.base_delay)
            .with_factor(2.0)
            .with_max_delay(self.max_delay)
            .with_max_times(self.max_retries as usize)
            .with_jitter()
    }

    /// The backoff's waits, one per retry.
    pub fn delays(&self) -> impl Iterator<Item = Duration> + use<> {
        self.backoff().build()
    }

    /// The wait actually taken: the provider's `retry_after` (capped) when it gave one, else
    /// the backoff's step; `None` once the backoff is spent (no more retries), whatever the
    /// provider said. This is what `backon`'s `adjust` hook gets.
    pub fn next_delay(
        &self,
        backoff: Option<Duration>,
        retry_after: Option<Duration>,
    ) -> Option<Duration> {
        let step = backoff?;
        Some(retry_after.map_or(step, |wait| wait.min(self.max_retry_after)))
    }
}

/// The wait before retry number `attempt + 1` (`attempt` counts from 0 for the first retry),
/// for loops that count their own attempts. Not bounded by `max_retries`: the caller decides
/// when to stop.
pub fn retry_delay(policy: &RetryPolicy, attempt: u32, retry_after: Option<Duration>) -> Duration {
    // Past 64 doublings every step is the cap (or zero); don't walk further.
    let step = policy
        .backoff()
        .without_max_times()
        .build()
        .nth(attempt.min(64) as usize);
    policy
        .next_delay(step, retry_after)
        .unwrap_or(policy.max_delay)
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
    fn delays_double_with_jitter_and_cap() {
        let policy = RetryPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
            ..RetryPolicy::default()
        };
        // backon computes in f32 seconds: allow a rounding error of 10 ppm.
        let within = |d: Duration, step_ms: u64| {
            let step = Duration::from_millis(step_ms);
            let slack = step / 100_000 + Duration::from_micros(1);
            d + slack >= step && d <= step * 2 + slack
        };
        assert!(within(retry_delay(&policy, 0, None), 100));
        assert!(within(retry_delay(&policy, 1, None), 200));
        assert!(within(retry_delay(&policy, 2, None), 400));
        assert!(within(retry_delay(&policy, 200, None), 2000));
        assert!(within(retry_delay(&policy, u32::MAX, None), 2000));
        assert_eq!(
            retry_delay(&policy, 0, Some(Duration::from_secs(3600))),
            MAX_RETRY_AFTER
        );
        // The backoff itself stops after max_retries, and then Retry-After cannot revive it.
        let mut steps = policy.delays();
        for _ in 0..policy.max_retries {
            assert!(policy.next_delay(steps.next(), None).is_some());
        }
        assert_eq!(
            policy.next_delay(steps.next(), Some(Duration::from_secs(1))),
            None
        );
    }
}
