//! The steps a history is made of, how proptest draws them, and how a step is
//! written in a failure report. A step names what it acts on by position (the n-th
//! entry accepted, the n-th claim handed out), never by a store's id, so that a
//! history means the same on every store and still means something once proptest
//! has removed steps from it while shrinking.

use proptest::prelude::*;

/// The sources of every history.
pub const SOURCES: [&str; 2] = ["s0", "s1"];
/// The routes every entry may be stored for. Both are ordered routes (a delivery
/// carries a key or goes without order): a dead delivery through `a` blocks its
/// key's line (`on_dead = "block"`), one through `b` lets the next go (`skip`).
pub const ROUTES: [&str; 2] = ["a", "b"];
/// The ordering keys: two, so that lines form and also run side by side.
pub const KEYS: [&str; 2] = ["k0", "k1"];

/// Whether a dead delivery through route `r` blocks its key's line.
pub fn blocks(route: usize) -> bool {
    route == 0
}

/// What a worker makes of a claimed delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered 200.
    Delivered,
    /// Answered 503: again in `after` ms.
    Retry { after: i64 },
    /// Dead, with a refused attempt (400) or without any attempt.
    Dead { attempted: bool },
    /// The lease given back without an attempt: due again in `after` ms.
    Release { after: i64 },
}

/// One step of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A new event of `source`, stored for each route `routes[r]` is `Some` for:
    /// with the key `Some(k)`, or without order (`None`). No route: filtered.
    Accept {
        source: usize,
        routes: [Option<Option<usize>>; 2],
    },
    /// The event of an earlier entry sent again: to its own source (a duplicate)
    /// or, with `elsewhere`, to the other source (a new entry there).
    Again { entry: usize, elsewhere: bool },
    /// Claim up to `limit` deliveries through a route of a source.
    Claim {
        source: usize,
        route: usize,
        limit: usize,
    },
    /// Complete a claim: `claim` counts back from the latest one handed out that
    /// was not completed yet (0 is the latest), or, `again`, from the latest one
    /// handed out at all, so that stale and repeated completions occur too.
    Complete {
        claim: usize,
        again: bool,
        outcome: Outcome,
    },
    /// Time runs past every lease taken so far.
    ExpireLeases,
    /// Time moves on by `ms`.
    Tick { ms: i64 },
    /// Replay an entry (`route: None`: what replay without a route takes), due in
    /// `after` ms: with `ended`, `entry` counts among the entries with a delivery
    /// that is not pending (what a replay acts on), else among all.
    Replay {
        entry: usize,
        ended: bool,
        route: Option<usize>,
        after: i64,
    },
    /// Discard an entry (`route: None`: every pending or dead delivery).
    Discard { entry: usize, route: Option<usize> },
    /// Pause or resume a source (`route: None`) or one of its routes.
    Pause {
        source: usize,
        route: Option<usize>,
        paused: bool,
    },
    /// Purge with the delivered and the dead cutoffs `delivered_age` and
    /// `dead_age` ms before now.
    Purge { delivered_age: i64, dead_age: i64 },
}

fn source() -> impl Strategy<Value = usize> {
    prop_oneof![6 => Just(0usize), 1 => Just(1usize)]
}

fn route_spec() -> impl Strategy<Value = Option<Option<usize>>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(None)),
        3 => Just(Some(Some(0))),
        1 => Just(Some(Some(1))),
    ]
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        4 => Just(Outcome::Delivered),
        3 => prop_oneof![Just(0i64), Just(1_000), Just(5_000)]
            .prop_map(|after| Outcome::Retry { after }),
        3 => Just(Outcome::Dead { attempted: true }),
        1 => Just(Outcome::Dead { attempted: false }),
        1 => prop_oneof![Just(0i64), Just(1_000)].prop_map(|after| Outcome::Release { after }),
    ]
}

fn route_or_all() -> impl Strategy<Value = Option<usize>> {
    prop_oneof![Just(None), (0..ROUTES.len()).prop_map(Some)]
}

/// One step, weighted towards what makes lines move: accepts, claims and
/// completions.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (source(), [route_spec(), route_spec()])
            .prop_map(|(source, routes)| Op::Accept { source, routes }),
        1 => (0..16usize, proptest::bool::weighted(0.3))
            .prop_map(|(entry, elsewhere)| Op::Again { entry, elsewhere }),
        7 => (source(), 0..ROUTES.len(), 1..=3usize)
            .prop_map(|(source, route, limit)| Op::Claim { source, route, limit }),
        7 => (0..4usize, proptest::bool::weighted(0.15), outcome())
            .prop_map(|(claim, again, outcome)| Op::Complete { claim, again, outcome }),
        1 => Just(Op::ExpireLeases),
        2 => prop_oneof![Just(1i64), Just(1_000), Just(5_000)].prop_map(|ms| Op::Tick { ms }),
        3 => (
            0..16usize,
            proptest::bool::weighted(0.8),
            route_or_all(),
            prop_oneof![Just(0i64), Just(1_000)]
        )
            .prop_map(|(entry, ended, route, after)| Op::Replay {
                entry,
                ended,
                route,
                after
            }),
        1 => (0..16usize, route_or_all()).prop_map(|(entry, route)| Op::Discard { entry, route }),
        1 => (source(), route_or_all(), any::<bool>())
            .prop_map(|(source, route, paused)| Op::Pause { source, route, paused }),
        1 => (prop_oneof![Just(0i64), Just(5_000)], prop_oneof![Just(0i64), Just(5_000)])
            .prop_map(|(delivered_age, dead_age)| Op::Purge { delivered_age, dead_age }),
    ]
}

impl Op {
    /// The same step naming an earlier entry or a later claim: what a history
    /// that fails may try instead, to name what it acts on as plainly as it can
    /// (an entry's number is taken modulo the entries stored, so once the steps
    /// before are left out the same number names another entry).
    pub fn plainer(&self) -> Vec<Op> {
        match *self {
            Op::Again { entry, elsewhere } => (0..entry)
                .map(|entry| Op::Again { entry, elsewhere })
                .collect(),
            Op::Complete {
                claim,
                again,
                outcome,
            } => (0..claim)
                .map(|claim| Op::Complete {
                    claim,
                    again,
                    outcome,
                })
                .collect(),
            Op::Replay {
                entry,
                ended,
                route,
                after,
            } => (0..entry)
                .map(|entry| Op::Replay {
                    entry,
                    ended,
                    route,
                    after,
                })
                .collect(),
            Op::Discard { entry, route } => (0..entry)
                .map(|entry| Op::Discard { entry, route })
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// A history: up to `max` steps.
pub fn history(max: usize) -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 1..=max)
}

/// The route spec of an accepted entry as a report writes it: `a:k0` (ordered by
/// `k0`), `a` (without order); `[]` for none (filtered).
pub fn routes_text(routes: &[(usize, Option<usize>)]) -> String {
    let parts: Vec<String> = routes
        .iter()
        .map(|(r, k)| match k {
            Some(k) => format!("{}:{}", ROUTES[*r], KEYS[*k]),
            None => ROUTES[*r].to_string(),
        })
        .collect();
    format!("[{}]", parts.join(" "))
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Delivered => write!(f, "delivered"),
            Outcome::Retry { after } => write!(f, "retry in {after} ms"),
            Outcome::Dead { attempted: true } => write!(f, "dead (refused)"),
            Outcome::Dead { attempted: false } => write!(f, "dead without an attempt"),
            Outcome::Release { after } => write!(f, "released, due in {after} ms"),
        }
    }
}

/// `s0`, or `s0/a` with a route.
pub fn target(source: usize, route: Option<usize>) -> String {
    match route {
        Some(r) => format!("{}/{}", SOURCES[source], ROUTES[r]),
        None => SOURCES[source].to_string(),
    }
}
