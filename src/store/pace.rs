//! Send slots of a paced route: the generic cell rate algorithm (GCRA) both backends
//! run, the embedded store in process and the Redis store in a script
//! (`redis/scripts/pace.lua`), so that a route keeps one pace whatever shares it.
//! A source's request limit is one more pace, under a name no route can have.

/// The pace name of a source's incoming requests (`Pacing::take_request_slot`):
/// a route name is `[a-z0-9_-]`, so no route can take it.
pub(crate) const REQUESTS: &str = "@requests";

/// One step of the generic cell rate algorithm (GCRA), in microseconds: a send at
/// `now` against the route's theoretical arrival time `tat` (0 when none), at one
/// send per `spacing` with up to `burst` at once. `Ok(tat')` takes the slot and gives
/// the new arrival time; `Err(at)` takes nothing and says when the next slot opens.
/// The Redis store runs the same arithmetic in a script, so that every process
/// sharing it keeps one pace.
pub(crate) fn gcra(tat: i64, now: i64, spacing: i64, burst: u32) -> Result<i64, i64> {
    let spacing = spacing.max(1);
    let tolerance = spacing.saturating_mul(i64::from(burst.max(1)) - 1);
    let tat = tat.max(now);
    match tat - now > tolerance {
        true => Err(tat - tolerance),
        false => Ok(tat.saturating_add(spacing)),
    }
}

/// The arrival time `tat` after a hold until `until` (both in microseconds): no slot
/// opens before `until`, and from then on the route is paced as before (its burst is
/// not given back at once). A hold never brings a later arrival time forward.
pub(crate) fn held(tat: i64, until: i64, spacing: i64, burst: u32) -> i64 {
    let tolerance = spacing.max(1).saturating_mul(i64::from(burst.max(1)) - 1);
    tat.max(until.saturating_add(tolerance))
}

/// Microseconds as milliseconds, rounded up (a slot opening at 1.2 ms is free at 2).
pub(crate) fn ceil_ms(us: i64) -> i64 {
    us.div_euclid(1000) + i64::from(us.rem_euclid(1000) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcra_allows_the_burst_then_one_per_spacing() {
        let (spacing, burst) = (50_000, 2);
        let mut tat = 0;
        let mut sent = Vec::new();
        // Ask every millisecond for three seconds; send whenever allowed.
        for ms in 0..3_000i64 {
            let now = 1_000_000_000 + ms * 1000;
            if let Ok(next) = gcra(tat, now, spacing, burst) {
                tat = next;
                sent.push(ms);
            }
        }
        // The burst of two goes at once (one per ask here), then one per 50 ms.
        assert_eq!(&sent[..4], &[0, 1, 50, 100]);
        for w in 0..2_000 {
            let in_window = sent.iter().filter(|&&t| t >= w && t < w + 1000).count();
            assert!(in_window <= 22, "{in_window} sends in [{w}, {w}+1000)");
        }
        assert!(sent.len() >= 60, "{}", sent.len());
        // A denied send says when the next slot opens, and that slot is free.
        let now = 5_000_000;
        let tat = gcra(gcra(0, now, spacing, burst).unwrap(), now, spacing, burst).unwrap();
        let at = gcra(tat, now, spacing, burst).unwrap_err();
        assert_eq!(at, now + spacing);
        assert!(gcra(tat, at, spacing, burst).is_ok());
        assert!(gcra(tat, at - 1, spacing, burst).is_err());
    }

    #[test]
    fn a_hold_opens_no_slot_before_its_end_then_paces_as_before() {
        let (spacing, burst) = (50_000, 2);
        let now = 1_000_000_000;
        let until = now + 2_000_000;
        let tat = held(0, until, spacing, burst);
        assert_eq!(gcra(tat, now, spacing, burst), Err(until));
        assert_eq!(gcra(tat, until - 1, spacing, burst), Err(until));
        let next = gcra(tat, until, spacing, burst).unwrap();
        // One slot at the end of the hold, the next one spacing later.
        assert_eq!(gcra(next, until, spacing, burst), Err(until + spacing));
        // A hold that ends sooner than the pace already would changes nothing.
        assert_eq!(held(until * 2, until, spacing, burst), until * 2);
    }
}
