//! Logging: JSON or human-readable, with a filter from config that `RUST_LOG` overrides. A filter
//! that does not parse, or names no level, stops the start instead of silencing the logs.

use tracing_subscriber::EnvFilter;

use crate::settings::{LogFormat, LogSettings};

const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];

/// Parse a tracing filter (`info`, `agentry=debug,info`, `agentry::access=warn,info`), refusing
/// what `EnvFilter` would take silently but nobody means: a bare word that is not a level
/// (`verbose`) is, to `EnvFilter`, a target at every level, which turns every other log off.
pub fn parse_filter(filter: &str) -> Result<EnvFilter, String> {
    let example =
        "write LEVEL or TARGET=LEVEL, comma-separated, e.g. `info` or `agentry=debug,info`";
    if filter.trim().is_empty() {
        return Err(format!("is empty: {example}"));
    }
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level = directive.rsplit_once('=').map_or(directive, |(_, l)| l);
        let numeric = level.parse::<u8>().is_ok_and(|n| n <= 5);
        if !numeric && !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "`{directive}` names no level (trace, debug, info, warn, error, off): {example}"
            ));
        }
    }
    EnvFilter::try_new(filter)
        .map_err(|e| format!("is not a valid tracing filter ({e}): {example}"))
}

/// Install the subscriber. `RUST_LOG`, when set, wins over `log.level`; either is checked by
/// [`parse_filter`], and a bad one is an error naming where it came from.
pub fn init(log: &LogSettings) -> Result<(), String> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if !env.trim().is_empty() => {
            parse_filter(&env).map_err(|why| format!("RUST_LOG {why}"))?
        }
        _ => parse_filter(&log.level).map_err(|why| format!("log.level {why}"))?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // try_init: a second call (tests) keeps the first subscriber.
    let _ = match log.format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_filter;

    #[test]
    fn filters_that_name_a_level_parse_and_bare_words_do_not() {
        for ok in [
            "info",
            "WARN",
            "agentry=debug,info",
            "agentry::access=warn,info",
            "agentry_gateway=trace, warn",
            "3",
        ] {
            assert!(parse_filter(ok).is_ok(), "{ok}");
        }
        for (bad, needle) in [
            ("verbose", "`verbose` names no level"),
            ("info,agentry", "`agentry` names no level"),
            ("agentry=loud", "`agentry=loud`"),
            ("", "is empty"),
            ("  ", "is empty"),
        ] {
            let err = parse_filter(bad).unwrap_err();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }
}
