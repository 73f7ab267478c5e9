//! Durations as operators write them (`30s`, `5m`, `7d`): one parser, whose error
//! names the key and shows the accepted forms, for every section.

use std::time::Duration;

use super::ConfigError;

/// A duration as operators write it (`30s`, `5m`, `7d`), or an error naming `key`.
pub(crate) fn parse_duration(key: &str, value: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(value.trim()).map_err(|e| {
        ConfigError::invalid(
            key,
            format!("invalid duration {value:?} ({e}); use e.g. \"30s\", \"5m\", \"24h\", \"7d\""),
        )
    })
}
