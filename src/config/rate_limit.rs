//! A rate limit as the configuration writes it (`rate_limit = "20/s"`): the pace
//! an internal app can take, and the burst allowed above it.

/// The configured limit of a route.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Sustained deliveries per second.
    pub per_second: f64,
    /// Deliveries that may go out at once above the sustained pace: a tenth of a
    /// second's worth, at least one. In any one-second window the destination sees
    /// at most `per_second + burst` deliveries.
    pub burst: u32,
}

/// Why a `rate_limit` value is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "rate limit {text:?}: {problem} (write it as a count per unit: \"20/s\", \"600/m\", \"1000/h\")"
)]
pub struct RateLimitError {
    pub text: String,
    pub problem: &'static str,
}

impl RateLimit {
    /// Parse `"<count>/<unit>"`, the unit being `s`, `m` or `h`.
    pub fn parse(text: &str) -> Result<RateLimit, RateLimitError> {
        let err = |problem| RateLimitError {
            text: text.to_string(),
            problem,
        };
        let (count, unit) = text.trim().split_once('/').ok_or(err("no `/`"))?;
        let count: f64 = count
            .trim()
            .parse()
            .map_err(|_| err("the count is not a number"))?;
        if !count.is_finite() || count <= 0.0 {
            return Err(err("the count must be above zero"));
        }
        let seconds = match unit.trim() {
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err("the unit is not s, m or h")),
        };
        let per_second = count / seconds;
        // Below one delivery a day the limit says "never" in all but name.
        if per_second < 1.0 / 86_400.0 {
            return Err(err("the pace is below one delivery a day"));
        }
        let burst = (per_second / 10.0).floor().clamp(1.0, f64::from(u32::MAX)) as u32;
        Ok(RateLimit { per_second, burst })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_with_their_burst() {
        let l = RateLimit::parse("20/s").unwrap();
        assert_eq!((l.per_second, l.burst), (20.0, 2));
        let l = RateLimit::parse(" 600 / m ").unwrap();
        assert_eq!((l.per_second, l.burst), (10.0, 1));
        let l = RateLimit::parse("1000/h").unwrap();
        assert!((l.per_second - 1000.0 / 3600.0).abs() < 1e-9);
        assert_eq!(l.burst, 1);
        assert_eq!(RateLimit::parse("2.5/s").unwrap().per_second, 2.5);
        assert_eq!(RateLimit::parse("500/s").unwrap().burst, 50);
        for bad in [
            "20", "20/d", "0/s", "-1/s", "x/s", "NaN/s", "inf/s", "1/h/2", "0.001/h",
        ] {
            assert!(RateLimit::parse(bad).is_err(), "{bad}");
        }
        let e = RateLimit::parse("20/d").unwrap_err().to_string();
        assert!(e.contains("\"20/d\"") && e.contains("unit"), "{e}");
    }
}
