//! `[sources.expect]`: how much a source is expected to send. A webhook the
//! provider never sends leaves no trace at the gateway: a webhook disabled on the
//! provider's side after failures, or a sender that stopped, goes unnoticed for
//! hours unless someone says what "normal" is. `at_least = "1/1h"` says it: fewer
//! webhooks than that in the last hour, and the source is quiet
//! (`hookgate_source_quiet`, the `HookgateSourceQuiet` alert). `learn = true` lets
//! the store's history say it (`store::usual`: the same hours of the last weeks).

use std::time::Duration;

use super::ConfigError;
use super::durations::parse_duration;

/// The shortest window: the store counts arrivals per minute.
pub const EXPECT_WINDOW_MIN: Duration = Duration::from_secs(60);

/// The longest window: the store keeps its per-minute counts for eight days.
pub const EXPECT_WINDOW_MAX: Duration = Duration::from_secs(7 * 24 * 3600);

/// What a source is expected to send (`[sources.expect]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expectation {
    /// `at_least = "N/window"`.
    AtLeast(Expect),
    /// `learn = true`: what it usually receives at this hour of the week
    /// (`store::usual`).
    Learned,
}

impl Expectation {
    /// Read `[sources.expect]`: `at_least` or `learn = true`, one of them; `key` is
    /// the table's key (`sources[0].expect`).
    pub fn parse(
        key: &str,
        at_least: Option<&str>,
        learn: bool,
    ) -> Result<Expectation, ConfigError> {
        match (at_least, learn) {
            (Some(text), false) => Ok(Expectation::AtLeast(Expect::parse(
                &format!("{key}.at_least"),
                text,
            )?)),
            (None, true) => Ok(Expectation::Learned),
            (Some(_), true) => Err(ConfigError::invalid(
                key,
                "set at_least or learn = true, not both",
            )),
            (None, false) => Err(ConfigError::invalid(
                key,
                "say what the source is expected to send: at_least = \"1/1h\", or learn = true",
            )),
        }
    }
}

/// A source's expected traffic: at least `at_least` webhooks stored in any window
/// of `within` (duplicates not counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    pub at_least: u64,
    pub within: Duration,
}

impl Expect {
    /// Parse `"<count>/<window>"` (`"1/1h"`, `"100/15m"`) for the key `key`.
    pub fn parse(key: &str, text: &str) -> Result<Expect, ConfigError> {
        let invalid = |problem: &str| {
            ConfigError::invalid(
                key,
                format!("{text:?}: {problem} (write a count and a window: \"1/1h\", \"100/15m\")"),
            )
        };
        let (count, window) = text.trim().split_once('/').ok_or(invalid("no `/`"))?;
        let at_least: u64 = count
            .trim()
            .parse()
            .map_err(|_| invalid("the count is not a whole number"))?;
        if at_least == 0 {
            return Err(invalid("the count must be at least 1"));
        }
        let within = parse_duration(key, window)?;
        if within < EXPECT_WINDOW_MIN {
            return Err(invalid("the window is shorter than a minute"));
        }
        if within > EXPECT_WINDOW_MAX {
            return Err(invalid(
                "the window is longer than 7 days, more than the store keeps its counts",
            ));
        }
        Ok(Expect { at_least, within })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expectation_is_a_count_or_learned_and_never_both_or_neither() {
        assert_eq!(
            Expectation::parse("k", None, true).unwrap(),
            Expectation::Learned
        );
        assert!(matches!(
            Expectation::parse("k", Some("1/1h"), false).unwrap(),
            Expectation::AtLeast(Expect { at_least: 1, .. })
        ));
        for (at_least, learn, says) in [
            (Some("1/1h"), true, "not both"),
            (None, false, "learn = true"),
        ] {
            let e = Expectation::parse("sources[0].expect", at_least, learn)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says) && e.contains("sources[0].expect"), "{e}");
        }
    }

    #[test]
    fn a_count_and_a_window_parse_and_what_is_not_one_is_refused_saying_why() {
        assert_eq!(
            Expect::parse("k", "1/1h").unwrap(),
            Expect {
                at_least: 1,
                within: Duration::from_secs(3600)
            }
        );
        assert_eq!(
            Expect::parse("k", " 100 / 15m ").unwrap(),
            Expect {
                at_least: 100,
                within: Duration::from_secs(900)
            }
        );
        for (text, says) in [
            ("1h", "no `/`"),
            ("x/1h", "whole number"),
            ("1.5/1h", "whole number"),
            ("0/1h", "at least 1"),
            ("1/30s", "shorter than a minute"),
            ("1/8d", "longer than 7 days"),
            ("1/soon", "invalid duration"),
        ] {
            let e = Expect::parse("sources[0].expect.at_least", text)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(says) && e.contains("sources[0].expect.at_least"),
                "{text}: {e}"
            );
        }
    }
}
