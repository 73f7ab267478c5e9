//! The history checker: it reads the load generator's, the upstream's and the fault
//! records, and says what the gateway promised and whether it held.
//!
//! - **Acknowledged, never delivered** (per route; must be 0): an event a gateway
//!   answered 200 for, which the upstream never answered 2xx on that route.
//! - **Delivered, never acknowledged**: allowed only for an event one of whose
//!   attempts got a 503 or no answer at all (a gateway killed mid-request), because
//!   then it may have been stored; anything else is a violation.
//! - **Stored twice**: two different entry ids for one event (dedupe failed); must be 0.
//! - **Duplicates**: a 2xx delivery of an (entry, route) after an earlier 2xx one.
//!   Each is explained by the documented cases (README, "Deliveries twice"), or it
//!   is a violation: a *replay* of that entry through the admin API between the
//!   two; a *gateway crash* shortly after the earlier one (its completion not yet
//!   recorded when SIGKILL came); a *store outage* (Redis or PostgreSQL killed, the
//!   disk full) around the earlier one (its completion refused, then the lease
//!   ran out).
//! - **Order violations** on the ordered route (must be 0): the first 2xx delivery of
//!   a key's event before the first 2xx delivery of an earlier acknowledged event of
//!   the same key. Later redeliveries (a replay, a crash) are duplicates, not
//!   order violations.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crate::record::{Answer, Delivery, Event, Fault, FaultKind};

/// How long after an upstream's 2xx a gateway may still be recording its completion
/// (a group commit on a busy store): a SIGKILL within it can cost a second delivery.
const COMPLETION_WINDOW_MS: u64 = 3_000;
/// How long after a store came back a completion refused during the outage can still
/// cost a second delivery: the completion is retried for about seven seconds, then the
/// lease decides.
const OUTAGE_TAIL_MS: u64 = 15_000;

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Report {
    pub events: usize,
    pub acked: usize,
    pub never_acked: usize,
    pub deliveries: usize,
    /// Attempts the gateways refused (any status but 200) or left unanswered.
    pub attempts_refused: usize,
    pub attempts_unanswered: usize,
    /// Events whose acknowledgement said `duplicate` after a refused or unanswered
    /// attempt: stored, then the answer lost (the provider's retry found it).
    pub stored_before_lost_answer: usize,
    /// Per route: acknowledged events never delivered (must be 0).
    pub acked_never_delivered: BTreeMap<String, Vec<String>>,
    /// Events delivered without an acknowledgement whose attempts got a 503 or no
    /// answer (allowed).
    pub delivered_unacked_allowed: usize,
    /// Events delivered without an acknowledgement and without such an attempt.
    pub delivered_unacked_violations: Vec<String>,
    pub stored_twice: Vec<String>,
    /// Duplicates by explanation: `replay`, `gateway crash`, `store outage`.
    pub duplicates: BTreeMap<&'static str, usize>,
    pub duplicates_unexplained: Vec<String>,
    /// Most duplicates one gateway crash explained.
    pub most_duplicates_per_crash: usize,
    /// Most duplicates one store outage explained.
    pub most_duplicates_per_outage: usize,
    pub order_checked_keys: usize,
    pub order_violations: Vec<String>,
    pub faults: BTreeMap<String, usize>,
}

impl Report {
    /// Every promise held.
    pub fn holds(&self) -> bool {
        self.acked_never_delivered.values().all(Vec::is_empty)
            && self.delivered_unacked_violations.is_empty()
            && self.stored_twice.is_empty()
            && self.duplicates_unexplained.is_empty()
            && self.order_violations.is_empty()
    }

    /// Acknowledged events not yet delivered on some route (what a drain waits for).
    pub fn undelivered(&self) -> usize {
        self.acked_never_delivered.values().map(Vec::len).sum()
    }
}

/// Check the records. `routes`: every route every event goes to; `ordered`: the one
/// that delivers a key's events in order.
pub fn check(
    events: &[Event],
    deliveries: &[Delivery],
    faults: &[Fault],
    routes: &[&str],
    ordered: &str,
) -> Report {
    let mut r = Report {
        events: events.len(),
        deliveries: deliveries.len(),
        ..Report::default()
    };
    for f in faults {
        *r.faults.entry(format!("{:?}", f.kind)).or_default() += 1;
    }
    // Successful deliveries by (event, route), in the upstream's order.
    let mut ok: HashMap<(&str, &str), Vec<&Delivery>> = HashMap::new();
    let mut sorted: Vec<&Delivery> = deliveries.iter().filter(|d| d.succeeded()).collect();
    sorted.sort_by_key(|d| d.order);
    for d in &sorted {
        ok.entry((d.event.as_str(), d.route.as_str()))
            .or_default()
            .push(d);
    }
    let delivered_events: std::collections::HashSet<&str> =
        sorted.iter().map(|d| d.event.as_str()).collect();

    for e in events {
        for a in &e.attempts {
            match a.answer {
                Answer::Status(_) => r.attempts_refused += 1,
                Answer::Unanswered => r.attempts_unanswered += 1,
                Answer::Accepted { .. } => {}
            }
        }
        let first_ok = e
            .attempts
            .iter()
            .position(|a| matches!(a.answer, Answer::Accepted { .. }));
        if let Some(i) = first_ok
            && i > 0
            && matches!(
                e.attempts[i].answer,
                Answer::Accepted {
                    duplicate: true,
                    ..
                }
            )
        {
            r.stored_before_lost_answer += 1;
        }
        if e.entries().len() > 1 {
            r.stored_twice.push(e.event.clone());
        }
        match e.acked() {
            Some(_) => {
                r.acked += 1;
                for route in routes {
                    if !ok.contains_key(&(e.event.as_str(), *route)) {
                        r.acked_never_delivered
                            .entry(route.to_string())
                            .or_default()
                            .push(e.event.clone());
                    }
                }
            }
            None => {
                r.never_acked += 1;
                if delivered_events.contains(e.event.as_str()) {
                    if e.answer_unknown() {
                        r.delivered_unacked_allowed += 1;
                    } else {
                        r.delivered_unacked_violations.push(e.event.clone());
                    }
                }
            }
        }
    }
    for route in routes {
        r.acked_never_delivered
            .entry(route.to_string())
            .or_default();
    }

    // Duplicates.
    let mut per_crash: HashMap<usize, usize> = HashMap::new();
    let mut per_outage: HashMap<usize, usize> = HashMap::new();
    for ((event, route), ds) in &ok {
        for pair in ds.windows(2) {
            let (first, again) = (pair[0], pair[1]);
            let why = explain(first, again, faults);
            match why {
                Some((label, fault)) => {
                    *r.duplicates.entry(label).or_default() += 1;
                    match label {
                        "gateway crash" => *per_crash.entry(fault).or_default() += 1,
                        "store outage" => *per_outage.entry(fault).or_default() += 1,
                        _ => {}
                    }
                }
                None => r.duplicates_unexplained.push(format!(
                    "{event} on {route}: delivered at {} ms and again at {} ms (entry {})",
                    first.at, again.at, first.entry
                )),
            }
        }
    }
    r.most_duplicates_per_crash = per_crash.values().copied().max().unwrap_or(0);
    r.most_duplicates_per_outage = per_outage.values().copied().max().unwrap_or(0);

    // Order on the ordered route: per key, the acknowledged events by seq, and the
    // upstream order of each one's first 2xx.
    let mut lines: BTreeMap<&str, Vec<(u64, &str)>> = BTreeMap::new();
    for e in events {
        if e.acked().is_some() {
            lines
                .entry(e.key.as_str())
                .or_default()
                .push((e.seq, &e.event));
        }
    }
    for (key, mut line) in lines {
        line.sort_unstable();
        r.order_checked_keys += 1;
        // Walking the line in seq order, each event's first delivery must come after
        // every earlier one's.
        let mut latest: Option<(u64, &str)> = None;
        for (seq, event) in line {
            let Some(first) = ok.get(&(event, ordered)).and_then(|ds| ds.first()) else {
                continue; // counted as acknowledged, never delivered
            };
            if let Some((order, earlier)) = latest
                && first.order < order
            {
                r.order_violations.push(format!(
                    "key {key}: {event} (seq {seq}) first delivered before {earlier}"
                ));
            }
            if latest.is_none_or(|(o, _)| first.order > o) {
                latest = Some((first.order, event));
            }
        }
    }
    r
}

/// Which documented case explains delivering `again` after `first` succeeded, and
/// the index of the fault that does.
fn explain(first: &Delivery, again: &Delivery, faults: &[Fault]) -> Option<(&'static str, usize)> {
    for (i, f) in faults.iter().enumerate() {
        let ok = match f.kind {
            FaultKind::Replay => {
                f.detail == first.entry && f.start >= first.at && f.start <= again.at
            }
            _ => false,
        };
        if ok {
            return Some(("replay", i));
        }
    }
    for (i, f) in faults.iter().enumerate() {
        if f.kind == FaultKind::GatewayKill
            && f.start + 100 >= first.at
            && f.start <= first.at + COMPLETION_WINDOW_MS
        {
            return Some(("gateway crash", i));
        }
    }
    for (i, f) in faults.iter().enumerate() {
        if matches!(f.kind, FaultKind::StoreKill | FaultKind::DiskFull)
            && first.at + COMPLETION_WINDOW_MS >= f.start
            && first.at <= f.end + OUTAGE_TAIL_MS
        {
            return Some(("store outage", i));
        }
    }
    None
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "  events {} (acknowledged {}, never acknowledged {}), deliveries {}",
            self.events, self.acked, self.never_acked, self.deliveries
        )?;
        writeln!(
            f,
            "  attempts refused {}, unanswered {}; stored before the answer was lost (the resend answered duplicate): {}",
            self.attempts_refused, self.attempts_unanswered, self.stored_before_lost_answer
        )?;
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(f, "  faults and admin actions: {}", faults.join(", "))?;
        for (route, missing) in &self.acked_never_delivered {
            writeln!(
                f,
                "  acknowledged, never delivered on {route}: {}{}",
                missing.len(),
                sample(missing)
            )?;
        }
        writeln!(
            f,
            "  delivered, never acknowledged: {} after a 503 or no answer (allowed), {} otherwise{}",
            self.delivered_unacked_allowed,
            self.delivered_unacked_violations.len(),
            sample(&self.delivered_unacked_violations)
        )?;
        writeln!(
            f,
            "  stored twice: {}{}",
            self.stored_twice.len(),
            sample(&self.stored_twice)
        )?;
        let dups: Vec<String> = self
            .duplicates
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(
            f,
            "  duplicates explained: {} (most from one gateway crash: {}, from one store outage: {}); unexplained: {}{}",
            if dups.is_empty() {
                "none".to_string()
            } else {
                dups.join(", ")
            },
            self.most_duplicates_per_crash,
            self.most_duplicates_per_outage,
            self.duplicates_unexplained.len(),
            sample(&self.duplicates_unexplained)
        )?;
        write!(
            f,
            "  order violations: {} over {} keys{}",
            self.order_violations.len(),
            self.order_checked_keys,
            sample(&self.order_violations)
        )
    }
}

fn sample(v: &[String]) -> String {
    if v.is_empty() {
        String::new()
    } else {
        let shown: Vec<&str> = v.iter().take(5).map(String::as_str).collect();
        format!(" (e.g. {})", shown.join("; "))
    }
}
