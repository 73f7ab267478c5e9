//! The reference model: the store contract (`hookgate::store`'s trait docs, the
//! conformance suite, the ordered delivery of the design) written as plain data
//! in memory, small enough to read in one sitting. Every store must answer as this
//! does; where one does not, either the store or this file is wrong, and the
//! contract decides which.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use hookgate::store::{
    AuditEvent, DeadLetter, Delivery, DeliveryOrder, Entry, Header, ListedEntry, MinuteActivity,
    NewEntry, Origin, PauseTarget, RouteOrder, RouteStats, SKIP_ACTION, SKIP_ACTOR, SKIP_NOTE,
    SourceStats, Status, Transition,
};

use super::ops::{KEYS, Outcome, ROUTES, SOURCES, blocks};

/// The lease of every claim. Long, so that no lease runs out by itself while a
/// history runs (on Redis a lease is a stream message's idle time, which real time
/// moves): only [`super::ops::Op::ExpireLeases`] ends them.
pub const LEASE: Duration = Duration::from_secs(60);
pub const LEASE_MS: i64 = 60_000;

/// The dedupe TTL of every entry: far longer than any history's time.
pub const DEDUPE_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Who replays and discards.
pub const OPERATOR: &str = "ops";
pub const NOTE: &str = "model";

/// A delivery's lease: the claim holding it (its number) and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub claim: usize,
    pub until: i64,
}

#[derive(Debug, Clone)]
pub struct MDelivery {
    pub route: usize,
    pub status: Status,
    pub attempts: u32,
    pub next: Option<i64>,
    pub last_error: Option<String>,
    /// The kind of its last failed attempt.
    pub last_failure: Option<hookgate::failure::Failure>,
    pub budget_start: i64,
    pub budget_attempts: u32,
    pub key: Option<usize>,
    pub lease: Option<Lease>,
    pub dead_at: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct MEntry {
    pub id: String,
    pub source: usize,
    /// Its event: `e<event>`.
    pub event: usize,
    pub received_at: i64,
    /// Since when the entry has its status (retention counts from there).
    pub updated_at: i64,
    pub purged: bool,
    pub deliveries: Vec<MDelivery>,
    pub attempts: Vec<hookgate::store::Attempt>,
    pub audit: Vec<AuditEvent>,
}

/// A claim handed out: the entry (its number) and the route.
#[derive(Debug, Clone, Copy)]
pub struct MClaim {
    pub entry: usize,
    pub route: usize,
}

/// What a history has made of the store so far.
pub struct Model {
    /// When the history began.
    pub start: i64,
    pub now: i64,
    pub entries: Vec<MEntry>,
    pub claims: Vec<MClaim>,
    /// (source, event) → the entry stored for it.
    dedupe: HashMap<(usize, usize), usize>,
    pub paused: BTreeSet<(usize, Option<usize>)>,
    /// Per source: entries received, duplicates.
    received: [u64; 2],
    duplicates: [u64; 2],
    /// Per source: minute → activity.
    activity: [BTreeMap<i64, MinuteActivity>; 2],
    next_event: usize,
}

fn minute_of(ms: i64) -> i64 {
    ms - ms.rem_euclid(60_000)
}

/// The derived status of an entry with deliveries of these statuses.
fn entry_status(deliveries: &[MDelivery]) -> Status {
    let has = |s: Status| deliveries.iter().any(|d| d.status == s);
    if deliveries.is_empty() {
        Status::Filtered
    } else if has(Status::Pending) {
        Status::Pending
    } else if has(Status::Dead) {
        Status::Dead
    } else if has(Status::Discarded) {
        Status::Discarded
    } else {
        Status::Delivered
    }
}

/// The attempt a worker records for a claimed delivery attempted `n`-th, at `at`.
pub fn attempt(route: usize, n: u32, at: i64, status_code: u16) -> hookgate::store::Attempt {
    hookgate::store::Attempt {
        route: ROUTES[route].to_string(),
        n,
        at,
        status_code: Some(status_code),
        failure: (!(200..300).contains(&status_code))
            .then_some(hookgate::failure::Failure::Status(status_code)),
        error: None,
        latency_ms: 1,
        answer: None,
    }
}

impl Model {
    pub fn new(now: i64) -> Model {
        Model {
            start: now,
            now,
            entries: Vec::new(),
            claims: Vec::new(),
            dedupe: HashMap::new(),
            paused: BTreeSet::new(),
            received: [0; 2],
            duplicates: [0; 2],
            activity: [BTreeMap::new(), BTreeMap::new()],
            next_event: 0,
        }
    }

    /// A fresh event number.
    pub fn new_event(&mut self) -> usize {
        self.next_event += 1;
        self.next_event - 1
    }

    /// The new entry of `event` of `source`, stored for `routes` (route, key), as
    /// ingest would hand it to the store at `now`: its id is a UUIDv7 of `now`
    /// (every step is a millisecond of its own, so ids sort by arrival).
    pub fn new_entry(
        &self,
        source: usize,
        event: usize,
        routes: &[(usize, Option<usize>)],
    ) -> NewEntry {
        let ms = u64::try_from(self.now).expect("a time after 1970");
        let ts = uuid::Timestamp::from_unix(
            uuid::NoContext,
            ms / 1000,
            u32::try_from(ms % 1000).expect("ms") * 1_000_000,
        );
        NewEntry {
            id: uuid::Uuid::new_v7(ts).to_string(),
            source: SOURCES[source].to_string(),
            event_id: Some(format!("e{event}")),
            event_type: Some("thing.happened".to_string()),
            dedupe_key: format!("id:e{event}"),
            dedupe_ttl: DEDUPE_TTL,
            received_at: self.now,
            headers: headers(),
            body: body(event),
            routes: routes.iter().map(|(r, _)| ROUTES[*r].to_string()).collect(),
            ordering: routes
                .iter()
                .filter_map(|(r, k)| {
                    k.map(|k| RouteOrder {
                        route: ROUTES[*r].to_string(),
                        key: KEYS[k].to_string(),
                        block: blocks(*r),
                    })
                })
                .collect(),
            index: Vec::new(),
            origin: Origin::Received,
        }
    }

    /// The entry already stored for `event` of `source`, if any.
    pub fn stored_for(&self, source: usize, event: usize) -> Option<usize> {
        self.dedupe.get(&(source, event)).copied()
    }

    /// A duplicate of `event` of `source`: counted, nothing stored.
    pub fn duplicate(&mut self, source: usize) {
        self.duplicates[source] += 1;
    }

    /// Store `new` (of `event` of `source`, for `routes`): its number.
    pub fn accept(
        &mut self,
        source: usize,
        event: usize,
        routes: &[(usize, Option<usize>)],
        id: String,
    ) -> usize {
        let n = self.entries.len();
        self.entries.push(MEntry {
            id,
            source,
            event,
            received_at: self.now,
            updated_at: self.now,
            purged: false,
            deliveries: routes
                .iter()
                .map(|(r, k)| MDelivery {
                    route: *r,
                    status: Status::Pending,
                    attempts: 0,
                    next: Some(self.now),
                    last_error: None,
                    last_failure: None,
                    budget_start: self.now,
                    budget_attempts: 0,
                    key: *k,
                    lease: None,
                    dead_at: None,
                })
                .collect(),
            attempts: Vec::new(),
            audit: Vec::new(),
        });
        self.dedupe.insert((source, event), n);
        self.received[source] += 1;
        self.count(source, self.now, |a| a.received += 1);
        n
    }

    /// The routes (and keys) entry `n` was stored for.
    pub fn routes_of(&self, n: usize) -> Vec<(usize, Option<usize>)> {
        self.entries[n]
            .deliveries
            .iter()
            .map(|d| (d.route, d.key))
            .collect()
    }

    fn count(&mut self, source: usize, at: i64, f: impl FnOnce(&mut MinuteActivity)) {
        let minute = minute_of(at);
        let a = self.activity[source]
            .entry(minute)
            .or_insert(MinuteActivity {
                minute,
                ..MinuteActivity::default()
            });
        f(a);
    }

    fn delivery(&self, n: usize, route: usize) -> Option<&MDelivery> {
        self.entries[n].deliveries.iter().find(|d| d.route == route)
    }

    fn delivery_mut(&mut self, n: usize, route: usize) -> Option<&mut MDelivery> {
        self.entries[n]
            .deliveries
            .iter_mut()
            .find(|d| d.route == route)
    }

    /// Derive entry `n`'s status again; `updated_at` moves when it changes.
    fn settle(&mut self, n: usize, before: Status) {
        let now = self.now;
        let e = &mut self.entries[n];
        if entry_status(&e.deliveries) != before {
            e.updated_at = now;
        }
    }

    pub fn status(&self, n: usize) -> Status {
        entry_status(&self.entries[n].deliveries)
    }

    // -----------------------------------------------------------------------
    // Lines.
    // -----------------------------------------------------------------------

    /// The line of `key` through `route` of `source`: the entries (numbers) whose
    /// delivery of the key is pending, or dead through a route that blocks, in
    /// arrival (id) order. Its first is the head.
    pub fn line(&self, source: usize, route: usize, key: usize) -> Vec<usize> {
        let mut line: Vec<usize> = (0..self.entries.len())
            .filter(|&n| {
                let e = &self.entries[n];
                !e.purged
                    && e.source == source
                    && self.delivery(n, route).is_some_and(|d| {
                        d.key == Some(key)
                            && (d.status == Status::Pending
                                || (d.status == Status::Dead && blocks(route)))
                    })
            })
            .collect();
        line.sort_by(|a, b| self.entries[*a].id.cmp(&self.entries[*b].id));
        line
    }

    /// Whether any entry of `source` was stored with key `key` through `route`.
    pub fn keyed(&self, source: usize, route: usize, key: usize) -> bool {
        self.entries.iter().any(|e| {
            e.source == source
                && e.deliveries
                    .iter()
                    .any(|d| d.route == route && d.key == Some(key))
        })
    }

    /// How many keys of `route` of `source` a dead head holds.
    pub fn blocked_keys(&self, source: usize, route: usize) -> u64 {
        (0..KEYS.len())
            .filter(|&k| {
                self.line(source, route, k).first().is_some_and(|&n| {
                    self.delivery(n, route)
                        .is_some_and(|d| d.status == Status::Dead)
                })
            })
            .count() as u64
    }

    fn live(&self, lease: Option<Lease>) -> bool {
        lease.is_some_and(|l| l.until > self.now)
    }

    /// The entries (numbers) whose delivery through `route` of `source` a claim may
    /// hand out now: pending, due, not under a live lease, neither the source nor
    /// the route paused; an ordered one only as the head of its line while no
    /// other delivery of its key is under a live lease (one in flight behind it, or
    /// discarded in flight).
    pub fn claimable(&self, source: usize, route: usize) -> Vec<usize> {
        if self.paused.contains(&(source, None)) || self.paused.contains(&(source, Some(route))) {
            return Vec::new();
        }
        (0..self.entries.len())
            .filter(|&n| {
                let e = &self.entries[n];
                if e.purged || e.source != source {
                    return false;
                }
                let Some(d) = self.delivery(n, route) else {
                    return false;
                };
                if d.status != Status::Pending
                    || d.next.is_none_or(|t| t > self.now)
                    || self.live(d.lease)
                {
                    return false;
                }
                match d.key {
                    None => true,
                    Some(k) => {
                        self.line(source, route, k).first() == Some(&n)
                            && !(0..self.entries.len()).any(|o| {
                                o != n
                                    && !self.entries[o].purged
                                    && self.entries[o].source == source
                                    && self
                                        .delivery(o, route)
                                        .is_some_and(|od| od.key == Some(k) && self.live(od.lease))
                            })
                    }
                }
            })
            .collect()
    }

    /// Lease the delivery of entry `n` through `route` to a new claim: its number.
    pub fn lease(&mut self, n: usize, route: usize) -> usize {
        let claim = self.claims.len();
        self.claims.push(MClaim { entry: n, route });
        let until = self.now + LEASE_MS;
        if let Some(d) = self.delivery_mut(n, route) {
            d.lease = Some(Lease { claim, until });
        }
        claim
    }

    /// Every lease taken so far runs out.
    pub fn expire_leases(&mut self) {
        self.now += LEASE_MS + 1;
    }

    // -----------------------------------------------------------------------
    // Completions, replays, discards, pauses, purges.
    // -----------------------------------------------------------------------

    /// The attempt a completion of claim `c` with `outcome` carries, numbered after
    /// the delivery's attempts as claimed (`as_claimed`).
    pub fn attempt_of(
        &self,
        c: usize,
        as_claimed: u32,
        outcome: Outcome,
    ) -> Option<hookgate::store::Attempt> {
        let route = self.claims[c].route;
        let n = as_claimed + 1;
        match outcome {
            Outcome::Delivered => Some(attempt(route, n, self.now, 200)),
            Outcome::Retry { .. } => Some(attempt(route, n, self.now, 503)),
            Outcome::Dead { attempted: true } => Some(attempt(route, n, self.now, 400)),
            Outcome::Dead { attempted: false } | Outcome::Release { .. } => None,
        }
    }

    /// Complete claim `c` with `outcome` (its attempt `attempt`): whether it applied.
    /// Only the claim holding the delivery's lease completes a pending delivery; a
    /// delivery discarded while the claim's attempt ran records the attempt and
    /// loses the lease; anything else changes nothing.
    pub fn complete(
        &mut self,
        c: usize,
        outcome: Outcome,
        attempt: Option<hookgate::store::Attempt>,
    ) -> bool {
        let MClaim { entry: n, route } = self.claims[c];
        let now = self.now;
        let source = self.entries[n].source;
        if self.entries[n].purged {
            return false;
        }
        let before = self.status(n);
        let Some(d) = self.delivery_mut(n, route) else {
            return false;
        };
        let holds = d.lease.is_some_and(|l| l.claim == c);
        if !holds {
            return false;
        }
        if d.status == Status::Discarded {
            d.lease = None;
            if let Some(a) = attempt {
                d.attempts += 1;
                self.entries[n].attempts.push(a);
            }
            return false;
        }
        if d.status != Status::Pending {
            return false;
        }
        d.lease = None;
        if attempt.is_some() {
            d.attempts += 1;
        }
        let mut skipped = false;
        match outcome {
            Outcome::Delivered => {
                d.status = Status::Delivered;
                d.next = None;
            }
            Outcome::Retry { after } => {
                d.next = Some(now + after);
                d.last_error = Some("HTTP 503".to_string());
                d.last_failure = Some(hookgate::failure::Failure::Status(503));
            }
            Outcome::Dead { attempted } => {
                if attempted {
                    d.last_failure = Some(hookgate::failure::Failure::Status(400));
                }
                d.status = Status::Dead;
                d.next = None;
                d.last_error = Some("refused".to_string());
                d.dead_at = Some(now);
                skipped = d.key.is_some() && !blocks(route);
            }
            Outcome::Release { after } => {
                d.next = Some(now + after);
            }
        }
        let counted = attempt.is_some();
        if let Some(a) = attempt {
            self.entries[n].attempts.push(a);
        }
        if skipped {
            self.entries[n].audit.push(AuditEvent {
                at: now,
                action: SKIP_ACTION.to_string(),
                actor: SKIP_ACTOR.to_string(),
                note: Some(SKIP_NOTE.to_string()),
                route: Some(ROUTES[route].to_string()),
                session: None,
                client: None,
            });
        }
        match outcome {
            Outcome::Delivered => self.count(source, now, |a| a.delivered += 1),
            Outcome::Retry { .. } | Outcome::Dead { .. } if counted => {
                self.count(source, now, |a| a.failed += 1)
            }
            _ => {}
        }
        self.settle(n, before);
        true
    }

    fn audit(&mut self, n: usize, action: &str, note: Option<&str>, route: Option<usize>) {
        let now = self.now;
        self.entries[n].audit.push(AuditEvent {
            at: now,
            action: action.to_string(),
            actor: OPERATOR.to_string(),
            note: note.map(str::to_string),
            route: route.map(|r| ROUTES[r].to_string()),
            session: None,
            client: None,
        });
    }

    /// The deliveries (routes) of entry `n` an operator's action takes, or why
    /// none: the named one if `takes` it, else without a name every one it takes
    /// (or `fallback`'s).
    fn targets(
        &self,
        n: usize,
        route: Option<usize>,
        takes: impl Fn(Status) -> bool,
        fallback: impl Fn(&[MDelivery]) -> Vec<usize>,
    ) -> Result<Vec<usize>, Transition> {
        let e = &self.entries[n];
        if e.purged {
            return Err(Transition::NotFound);
        }
        if let Some(r) = route {
            return match self.delivery(n, r) {
                None => Err(Transition::NoSuchRoute),
                Some(d) if takes(d.status) => Ok(vec![r]),
                Some(d) => Err(Transition::Conflict(d.status)),
            };
        }
        let mut chosen: Vec<usize> = e
            .deliveries
            .iter()
            .filter(|d| takes(d.status))
            .map(|d| d.route)
            .collect();
        if chosen.is_empty() {
            chosen = fallback(&e.deliveries);
        }
        match chosen.is_empty() {
            true => Err(Transition::Conflict(self.status(n))),
            false => Ok(chosen),
        }
    }

    /// Replay entry `n` (the named route's delivery unless pending; else every dead
    /// or discarded one, or every one when all were delivered), due at `at`.
    pub fn replay(&mut self, n: usize, route: Option<usize>, at: i64) -> Transition {
        let chosen = match route {
            Some(_) => self.targets(n, route, |s| s != Status::Pending, |_| Vec::new()),
            None => self.targets(
                n,
                None,
                |s| matches!(s, Status::Dead | Status::Discarded),
                |all| match all.iter().all(|d| d.status == Status::Delivered) {
                    true => all.iter().map(|d| d.route).collect(),
                    false => Vec::new(),
                },
            ),
        };
        let routes = match chosen {
            Ok(routes) => routes,
            Err(refused) => return refused,
        };
        let before = self.status(n);
        let now = self.now;
        for r in routes {
            let d = self.delivery_mut(n, r).expect("a target delivery");
            d.status = Status::Pending;
            d.next = Some(at);
            d.budget_start = now;
            d.budget_attempts = d.attempts;
            d.lease = None;
        }
        self.audit(n, "replay", None, route);
        self.settle(n, before);
        Transition::Done
    }

    /// Discard entry `n`'s deliveries (the named one, or every one) that are
    /// pending or dead. A lease stays: its holder's attempt is still recorded.
    pub fn discard(&mut self, n: usize, route: Option<usize>) -> Transition {
        let routes = match self.targets(
            n,
            route,
            |s| matches!(s, Status::Pending | Status::Dead),
            |_| Vec::new(),
        ) {
            Ok(routes) => routes,
            Err(refused) => return refused,
        };
        let before = self.status(n);
        for r in routes {
            let d = self.delivery_mut(n, r).expect("a target delivery");
            d.status = Status::Discarded;
            d.next = None;
        }
        self.audit(n, "discard", Some(NOTE), route);
        self.settle(n, before);
        Transition::Done
    }

    pub fn set_paused(&mut self, source: usize, route: Option<usize>, paused: bool) {
        match paused {
            true => self.paused.insert((source, route)),
            false => self.paused.remove(&(source, route)),
        };
    }

    /// Purge the delivered and filtered entries that reached their status before
    /// `delivered_before`, the dead and discarded ones before `dead_before`: how
    /// many went. (The dedupe keys stay until their TTL.)
    pub fn purge(&mut self, delivered_before: i64, dead_before: i64) -> u64 {
        let mut gone = 0;
        for n in 0..self.entries.len() {
            let status = self.status(n);
            let e = &mut self.entries[n];
            if e.purged {
                continue;
            }
            let cutoff = match status {
                Status::Pending => continue,
                Status::Delivered | Status::Filtered => delivered_before,
                Status::Dead | Status::Discarded => dead_before,
            };
            if e.updated_at < cutoff {
                e.purged = true;
                gone += 1;
            }
        }
        gone
    }

    // -----------------------------------------------------------------------
    // What a store shows.
    // -----------------------------------------------------------------------

    /// Entry `n` as `get` answers it (`None` once purged).
    pub fn entry(&self, n: usize) -> Option<Entry> {
        let e = &self.entries[n];
        if e.purged {
            return None;
        }
        let deliveries: Vec<Delivery> = e
            .deliveries
            .iter()
            .map(|d| Delivery {
                route: ROUTES[d.route].to_string(),
                status: d.status,
                attempts: d.attempts,
                next_attempt_at: match d.status {
                    Status::Pending => d.next,
                    _ => None,
                },
                last_error: d.last_error.clone(),
                last_failure: d.last_failure,
                budget_start: d.budget_start,
                budget_attempts: d.budget_attempts,
                order: d.key.map(|k| DeliveryOrder {
                    key: KEYS[k].to_string(),
                    block: blocks(d.route),
                }),
            })
            .collect();
        let next_attempt_at = e
            .deliveries
            .iter()
            .filter(|d| d.status == Status::Pending)
            .filter_map(|d| d.next)
            .min();
        let last_error = e
            .deliveries
            .iter()
            .filter(|d| d.status != Status::Delivered)
            .find_map(|d| d.last_error.clone());
        Some(Entry {
            id: e.id.clone(),
            source: SOURCES[e.source].to_string(),
            event_id: Some(format!("e{}", e.event)),
            event_type: Some("thing.happened".to_string()),
            dedupe_key: format!("id:e{}", e.event),
            received_at: e.received_at,
            status: entry_status(&e.deliveries),
            attempts: e.deliveries.iter().map(|d| d.attempts).sum(),
            next_attempt_at,
            last_error,
            deliveries,
            headers: headers(),
            body: body(e.event),
            origin: Origin::Received,
        })
    }

    /// The delivery of entry `n` through `route`, as a claim hands it out.
    pub fn claimed_delivery(&self, n: usize, route: usize) -> Option<Delivery> {
        self.entry(n)?
            .deliveries
            .into_iter()
            .find(|d| d.route == ROUTES[route])
    }

    /// Entry `n`'s attempts, oldest first (ties by route, then `n`).
    pub fn attempts(&self, n: usize) -> Vec<hookgate::store::Attempt> {
        let e = &self.entries[n];
        if e.purged {
            return Vec::new();
        }
        let mut out = e.attempts.clone();
        out.sort_by(|a, b| (a.at, &a.route, a.n).cmp(&(b.at, &b.route, b.n)));
        out
    }

    pub fn audit_trail(&self, n: usize) -> Vec<AuditEvent> {
        let e = &self.entries[n];
        if e.purged {
            return Vec::new();
        }
        e.audit.clone()
    }

    /// The entries of `source` still stored, newest first.
    fn stored(&self, source: usize) -> Vec<usize> {
        let mut ns: Vec<usize> = (0..self.entries.len())
            .filter(|&n| !self.entries[n].purged && self.entries[n].source == source)
            .collect();
        ns.sort_by(|a, b| self.entries[*b].id.cmp(&self.entries[*a].id));
        ns
    }

    /// The listing of `source`, newest first.
    pub fn listing(&self, source: usize) -> Vec<ListedEntry> {
        self.stored(source)
            .into_iter()
            .filter_map(|n| self.entry(n))
            .map(|e| e.listed())
            .collect()
    }

    pub fn stats(&self, source: usize) -> SourceStats {
        let mut s = SourceStats {
            received: self.received[source],
            duplicates: self.duplicates[source],
            ..SourceStats::default()
        };
        for n in self.stored(source) {
            match self.status(n) {
                Status::Pending => s.pending += 1,
                Status::Delivered => s.delivered += 1,
                Status::Dead => s.dead += 1,
                Status::Discarded => s.discarded += 1,
                Status::Filtered => s.filtered += 1,
            }
        }
        s.oldest_pending_at = self
            .stored(source)
            .into_iter()
            .rev()
            .find(|&n| self.status(n) == Status::Pending)
            .map(|n| self.entries[n].received_at);
        s
    }

    pub fn route_stats(&self, source: usize, route: usize) -> RouteStats {
        let mut s = RouteStats::default();
        let mut oldest = None;
        for n in self.stored(source).into_iter().rev() {
            let Some(d) = self.delivery(n, route) else {
                continue;
            };
            match d.status {
                Status::Pending => {
                    s.pending += 1;
                    oldest = oldest.or(Some(self.entries[n].received_at));
                }
                Status::Delivered => s.delivered += 1,
                Status::Dead => s.dead += 1,
                Status::Discarded => s.discarded += 1,
                Status::Filtered => {}
            }
        }
        s.oldest_pending_at = oldest;
        s.blocked_keys = self.blocked_keys(source, route);
        s
    }

    /// The dead deliveries through `route` of `source`, newest entry first.
    pub fn dead_letters(&self, source: usize, route: usize) -> Vec<DeadLetter> {
        self.stored(source)
            .into_iter()
            .filter_map(|n| {
                let d = self.delivery(n, route)?;
                (d.status == Status::Dead).then(|| DeadLetter {
                    id: self.entries[n].id.clone(),
                    event_id: Some(format!("e{}", self.entries[n].event)),
                    event_type: Some("thing.happened".to_string()),
                    received_at: self.entries[n].received_at,
                    dead_at: d.dead_at.expect("a dead delivery's time"),
                    attempts: d.attempts,
                    last_error: d.last_error.clone(),
                    failure: d.last_failure,
                })
            })
            .collect()
    }

    /// The ids of the line of `key` through `route` of `source`, head first.
    pub fn order_line(&self, source: usize, route: usize, key: usize) -> Vec<String> {
        self.line(source, route, key)
            .into_iter()
            .map(|n| self.entries[n].id.clone())
            .collect()
    }

    pub fn paused_targets(&self) -> Vec<PauseTarget> {
        self.paused
            .iter()
            .map(|(s, r)| PauseTarget {
                source: SOURCES[*s].to_string(),
                route: r.map(|r| ROUTES[r].to_string()),
            })
            .collect()
    }

    /// The activity of `source`, oldest minute first.
    pub fn activity(&self, source: usize) -> Vec<MinuteActivity> {
        self.activity[source].values().copied().collect()
    }
}

fn headers() -> Vec<Header> {
    vec![Header {
        name: "content-type".into(),
        value: b"application/json".to_vec(),
    }]
}

fn body(event: usize) -> Bytes {
    Bytes::from(format!("{{\"event\":{event}}}"))
}
