//! Latency samples and their summary.

use std::time::Duration;

use serde::Serialize;

/// Percentiles of a set of durations, in milliseconds with microsecond precision.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub count: usize,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Summarize `samples` (any order). `None` when there are none.
pub fn summarize(samples: &[Duration]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted: Vec<Duration> = samples.to_vec();
    sorted.sort_unstable();
    let ms = |d: Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
    let total: Duration = sorted.iter().sum();
    Some(Summary {
        count: sorted.len(),
        mean_ms: ms(total / sorted.len() as u32),
        p50_ms: ms(percentile(&sorted, 50.0)),
        p95_ms: ms(percentile(&sorted, 95.0)),
        p99_ms: ms(percentile(&sorted, 99.0)),
        max_ms: ms(sorted[sorted.len() - 1]),
    })
}

/// Nearest-rank percentile of sorted, non-empty samples: the smallest sample with at least
/// `p` percent of the samples at or below it.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).rev().map(ms).collect();
        let s = summarize(&samples).unwrap();
        assert_eq!(s.count, 100);
        assert_eq!(s.p50_ms, 50.0);
        assert_eq!(s.p95_ms, 95.0);
        assert_eq!(s.p99_ms, 99.0);
        assert_eq!(s.max_ms, 100.0);
        assert_eq!(s.mean_ms, 50.5);
    }

    #[test]
    fn one_sample_is_every_percentile() {
        let s = summarize(&[Duration::from_micros(1500)]).unwrap();
        assert_eq!((s.p50_ms, s.p99_ms, s.max_ms), (1.5, 1.5, 1.5));
    }

    #[test]
    fn no_samples_no_summary() {
        assert_eq!(summarize(&[]), None);
    }
}
