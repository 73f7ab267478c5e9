//! One history run against a store and the reference model side by side: each step
//! goes to both, its answer must agree, and after it what the store shows must be
//! what the model shows: every entry, the counts, the route counts (blocked keys
//! included) and the lines after every step; the attempts and audit trails of the
//! entries a step acted on, and the listings, dead letters, activity and pauses
//! after each step that changes them; all of it after the last step. The first
//! disagreement ends the run with a report: the history as run so far, one step a
//! line, entries and claims named by number (`entry#0`, `claim#0`), and what
//! differs.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::pin::Pin;

use hookgate::store::{
    Accepted, Actor, Claim, Completion, ListQuery, Purged, Status, Store, StoreError,
};

use super::ops::{KEYS, Op, Outcome, ROUTES, SOURCES, routes_text, target};
use super::reference::{LEASE, Model, NOTE, OPERATOR};
use super::stores::CaseStore;

/// The worker every claim and completion names.
const WORKER: &str = "w";

/// A history in progress.
pub struct Run {
    case: CaseStore,
    model: Model,
    /// The claims the store handed out, by number.
    claims: Vec<Claim>,
    /// The steps run so far, as a report writes them.
    trace: Vec<String>,
    /// The entries (numbers) the current step acted on.
    touched: BTreeSet<usize>,
    /// The claims (numbers) not completed yet, in the order handed out.
    open: Vec<usize>,
}

fn failed(what: &str, e: StoreError) -> String {
    format!("{what}: the store failed: {e}")
}

fn same<T: PartialEq + Debug>(what: &str, store: &T, model: &T) -> Result<(), String> {
    match store == model {
        true => Ok(()),
        false => Err(format!(
            "{what} differs:\n{}",
            difference(&format!("{store:#?}"), &format!("{model:#?}"))
        )),
    }
}

/// Where two pretty-printed values differ: the lines from the first that differs
/// to the last, each side's, after the three lines before them.
fn difference(store: &str, model: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (store.lines().collect(), model.lines().collect());
    let before = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let after = a[before..]
        .iter()
        .rev()
        .zip(b[before..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let mut out = String::new();
    for line in &a[before.saturating_sub(3)..before] {
        out.push_str(&format!("      {line}\n"));
    }
    for (side, lines) in [("store", &a), ("model", &b)] {
        out.push_str(&format!("  {side}:\n"));
        for line in &lines[before..lines.len() - after] {
            out.push_str(&format!("      {line}\n"));
        }
    }
    out
}

/// `n` counted back from the latest of `len` (0 is the latest).
fn back(n: usize, len: usize) -> Option<usize> {
    (len > 0).then(|| len - 1 - n % len)
}

impl Run {
    pub fn new(case: CaseStore, start: i64) -> Run {
        Run {
            case,
            model: Model::new(start),
            claims: Vec::new(),
            trace: Vec::new(),
            touched: BTreeSet::new(),
            open: Vec::new(),
        }
    }

    /// Run `ops`, comparing after each; the report of the first disagreement. The
    /// store is handed back, to be closed.
    pub async fn history(mut self, ops: &[Op]) -> (CaseStore, Result<(), String>) {
        let mut outcome = Ok(());
        for (i, op) in ops.iter().enumerate() {
            self.touched.clear();
            let step = self.step(op).await;
            let step = match step {
                Ok(()) => {
                    let views = match i + 1 == ops.len() {
                        true => Views::ALL,
                        false => Views::after(op),
                    };
                    self.observe(views).await
                }
                Err(e) => Err(e),
            };
            if let Err(e) = step {
                outcome = Err(self.report(&e));
                break;
            }
        }
        (self.case, outcome)
    }

    /// The history so far and the disagreement, every id named by its number.
    fn report(&self, what: &str) -> String {
        let mut out = String::from(
            "history (entry#N: the N-th entry stored, eN: an event, claim#N: the N-th claim handed out):\n",
        );
        for (i, line) in self.trace.iter().enumerate() {
            out.push_str(&format!("  {:>2}. {line}\n", i + 1));
        }
        out.push_str(&format!("after the last step: {what}\n"));
        self.symbolic(&out)
    }

    /// `text` with each entry id replaced by `entry#N`.
    fn symbolic(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (n, e) in self.model.entries.iter().enumerate() {
            out = out.replace(&e.id, &format!("entry#{n}"));
        }
        out
    }

    fn entry_name(n: usize) -> String {
        format!("entry#{n}")
    }

    async fn step(&mut self, op: &Op) -> Result<(), String> {
        self.model.now += 1;
        self.case.set_now(self.model.now);
        let store = self.case.store.clone();
        let store: &dyn Store = &*store;
        let now = self.model.now;
        match *op {
            Op::Accept { source, routes } => {
                let routes: Vec<(usize, Option<usize>)> = routes
                    .iter()
                    .enumerate()
                    .filter_map(|(r, spec)| spec.map(|k| (r, k)))
                    .collect();
                let event = self.model.new_event();
                self.accept(store, source, event, &routes, "").await?;
            }
            Op::Again { entry, elsewhere } => {
                let Some(n) = self.pick_entry(entry) else {
                    self.trace
                        .push("send an event again (no entry yet: nothing)".into());
                    return Ok(());
                };
                let e = &self.model.entries[n];
                let source = match elsewhere {
                    true => 1 - e.source,
                    false => e.source,
                };
                let event = e.event;
                let routes = self.model.routes_of(n);
                self.accept(store, source, event, &routes, " again").await?;
            }
            Op::Claim {
                source,
                route,
                limit,
            } => {
                let want = self.model.claimable(source, route);
                let got = store
                    .claim(SOURCES[source], ROUTES[route], WORKER, now, limit, LEASE)
                    .await
                    .map_err(|e| failed("claim", e))?;
                let mut taken = Vec::new();
                let mut names = Vec::new();
                for c in &got {
                    let n = self.number_of(&c.entry.id).ok_or_else(|| {
                        format!("the claim handed out an unknown entry {}", c.entry.id)
                    })?;
                    names.push(n);
                }
                let first = self.model.claims.len();
                let line = format!(
                    "claim {} limit {limit} -> {}",
                    target(source, Some(route)),
                    match names.is_empty() {
                        true => "none".to_string(),
                        false => names
                            .iter()
                            .enumerate()
                            .map(|(i, n)| format!("claim#{} {}", first + i, Self::entry_name(*n)))
                            .collect::<Vec<_>>()
                            .join(", "),
                    }
                );
                self.trace.push(line);
                let mut sorted = names.clone();
                sorted.sort();
                sorted.dedup();
                if sorted.len() != names.len() {
                    return Err("the claim handed out one delivery twice".into());
                }
                let wanted: Vec<String> = want.iter().map(|n| Self::entry_name(*n)).collect();
                if let Some(n) = names.iter().find(|n| !want.contains(n)) {
                    return Err(format!(
                        "the claim handed out {}, which the model does not let go now (claimable: {wanted:?})",
                        Self::entry_name(*n)
                    ));
                }
                if names.len() != limit.min(want.len()) {
                    return Err(format!(
                        "the claim handed out {} deliveries, the model {} (limit {limit}; claimable: {wanted:?})",
                        names.len(),
                        limit.min(want.len())
                    ));
                }
                for (c, n) in got.iter().zip(&names) {
                    same(
                        &format!("the entry of the claim of {}", Self::entry_name(*n)),
                        &Some(c.entry.clone()),
                        &self.model.entry(*n),
                    )?;
                    same(
                        &format!("the claimed delivery of {}", Self::entry_name(*n)),
                        &Some(c.delivery.clone()),
                        &self.model.claimed_delivery(*n, route),
                    )?;
                    let claim = self.model.lease(*n, route);
                    self.open.push(claim);
                    self.touched.insert(*n);
                    taken.push(c.clone());
                }
                self.claims.extend(taken);
            }
            Op::Complete {
                claim,
                again,
                outcome,
            } => {
                let c = match again {
                    true => back(claim, self.claims.len()),
                    false => back(claim, self.open.len()).map(|i| self.open[i]),
                };
                let Some(c) = c else {
                    self.trace
                        .push("complete a claim (no claim: nothing)".into());
                    return Ok(());
                };
                self.open.retain(|o| *o != c);
                let held = self.claims[c].clone();
                let attempt = self.model.attempt_of(c, held.delivery.attempts, outcome);
                let completion = match outcome {
                    Outcome::Delivered => Completion::Delivered {
                        attempt: attempt.clone().expect("an attempt"),
                    },
                    Outcome::Retry { after } => Completion::Retry {
                        attempt: attempt.clone().expect("an attempt"),
                        at: now + after,
                    },
                    Outcome::Dead { .. } => Completion::Dead {
                        attempt: attempt.clone(),
                        reason: "refused".into(),
                    },
                    Outcome::Release { after } => Completion::Release { at: now + after },
                };
                let got = store
                    .complete(&held, WORKER, completion, now)
                    .await
                    .map_err(|e| failed("complete", e))?;
                let mc = self.model.claims[c];
                self.trace.push(format!(
                    "complete claim#{c} ({}/{}) {outcome} -> {got}",
                    Self::entry_name(mc.entry),
                    ROUTES[mc.route]
                ));
                self.touched.insert(mc.entry);
                let want = self.model.complete(c, outcome, attempt);
                same("what complete answered", &got, &want)?;
            }
            Op::ExpireLeases => {
                self.model.expire_leases();
                self.case.set_now(self.model.now);
                self.trace.push(format!(
                    "every lease runs out (time +{} ms)",
                    LEASE.as_millis() + 1
                ));
                self.case.expire_leases().await?;
            }
            Op::Tick { ms } => {
                self.model.now += ms;
                self.case.set_now(self.model.now);
                self.trace.push(format!("time +{ms} ms"));
            }
            Op::Replay {
                entry,
                ended,
                route,
                after,
            } => {
                let n = match ended {
                    true => self.pick_ended(entry).or_else(|| self.pick_entry(entry)),
                    false => self.pick_entry(entry),
                };
                let Some(n) = n else {
                    self.trace.push("replay (no entry yet: nothing)".into());
                    return Ok(());
                };
                let id = self.model.entries[n].id.clone();
                let got = store
                    .replay(
                        &id,
                        route.map(|r| ROUTES[r]),
                        now + after,
                        &Actor::from(OPERATOR),
                        now,
                    )
                    .await
                    .map_err(|e| failed("replay", e))?;
                self.trace.push(format!(
                    "replay {}{} due in {after} ms -> {got:?}",
                    Self::entry_name(n),
                    route.map(|r| format!("/{}", ROUTES[r])).unwrap_or_default()
                ));
                self.touched.insert(n);
                let want = self.model.replay(n, route, now + after);
                same("what replay answered", &got, &want)?;
            }
            Op::Discard { entry, route } => {
                let Some(n) = self.pick_entry(entry) else {
                    self.trace.push("discard (no entry yet: nothing)".into());
                    return Ok(());
                };
                let id = self.model.entries[n].id.clone();
                let got = store
                    .discard(
                        &id,
                        route.map(|r| ROUTES[r]),
                        &Actor::from(OPERATOR),
                        NOTE,
                        now,
                    )
                    .await
                    .map_err(|e| failed("discard", e))?;
                self.trace.push(format!(
                    "discard {}{} -> {got:?}",
                    Self::entry_name(n),
                    route.map(|r| format!("/{}", ROUTES[r])).unwrap_or_default()
                ));
                self.touched.insert(n);
                let want = self.model.discard(n, route);
                same("what discard answered", &got, &want)?;
            }
            Op::Pause {
                source,
                route,
                paused,
            } => {
                store
                    .set_paused(SOURCES[source], route.map(|r| ROUTES[r]), paused)
                    .await
                    .map_err(|e| failed("set_paused", e))?;
                self.trace.push(format!(
                    "{} {}",
                    if paused { "pause" } else { "resume" },
                    target(source, route)
                ));
                self.model.set_paused(source, route, paused);
            }
            Op::Purge {
                delivered_age,
                dead_age,
            } => {
                let got = store
                    .purge(now, now - delivered_age, now - dead_age, 1000)
                    .await
                    .map_err(|e| failed("purge", e))?;
                self.trace.push(format!(
                    "purge what ended over {delivered_age} ms ago (delivered), {dead_age} ms ago (dead) -> {} entries",
                    got.entries
                ));
                self.touched.extend(0..self.model.entries.len());
                let want = Purged {
                    entries: self.model.purge(now - delivered_age, now - dead_age),
                    dedupe_keys: 0,
                };
                same("what purge answered", &got, &want)?;
            }
        }
        Ok(())
    }

    /// Accept event `event` of `source` for `routes`: new unless the source has it.
    async fn accept(
        &mut self,
        store: &dyn Store,
        source: usize,
        event: usize,
        routes: &[(usize, Option<usize>)],
        again: &str,
    ) -> Result<(), String> {
        let new = self.model.new_entry(source, event, routes);
        let id = new.id.clone();
        let got = store.accept(new).await.map_err(|e| failed("accept", e))?;
        let earlier = self.model.stored_for(source, event);
        let line = format!(
            "accept{again} {} e{event} {}",
            SOURCES[source],
            routes_text(routes)
        );
        match earlier {
            Some(n) => {
                self.trace
                    .push(format!("{line} -> duplicate of {}", Self::entry_name(n)));
                self.model.duplicate(source);
                same(
                    "what accept answered",
                    &got,
                    &Accepted::Duplicate(self.model.entries[n].id.clone()),
                )
            }
            None => {
                let n = self.model.accept(source, event, routes, id.clone());
                self.touched.insert(n);
                self.trace
                    .push(format!("{line} -> {}", Self::entry_name(n)));
                same("what accept answered", &got, &Accepted::New(id))
            }
        }
    }

    fn pick_entry(&self, n: usize) -> Option<usize> {
        let len = self.model.entries.len();
        (len > 0).then(|| n % len)
    }

    /// The `n`-th (modulo) of the entries with a delivery that is not pending.
    fn pick_ended(&self, n: usize) -> Option<usize> {
        let ended: Vec<usize> = (0..self.model.entries.len())
            .filter(|&e| {
                self.model
                    .entry(e)
                    .is_some_and(|e| e.deliveries.iter().any(|d| d.status != Status::Pending))
            })
            .collect();
        (!ended.is_empty()).then(|| ended[n % ended.len()])
    }

    fn number_of(&self, id: &str) -> Option<usize> {
        self.model.entries.iter().position(|e| e.id == id)
    }

    /// What the store shows must be what the model shows: each entry, the
    /// attempts and audit trail of those the step touched (of every entry with
    /// `views.all`), each source's stats, each route's stats, the line of each key
    /// a delivery was stored with, and the other `views`. The reads go out
    /// together.
    async fn observe(&self, views: Views) -> Result<(), String> {
        let all = views.all;
        let store: &dyn Store = &*self.case.store;
        let m = &self.model;
        let mut checks: Vec<Check<'_>> = Vec::new();
        for (n, e) in m.entries.iter().enumerate() {
            let id = e.id.as_str();
            checks.push(Box::pin(async move {
                let got = store.get(id).await.map_err(|e| failed("get", e))?;
                same(&Self::entry_name(n), &got, &m.entry(n))
            }));
            if !all && !self.touched.contains(&n) {
                continue;
            }
            checks.push(Box::pin(async move {
                let got = store
                    .attempts(id)
                    .await
                    .map_err(|e| failed("attempts", e))?;
                same(
                    &format!("the attempts of {}", Self::entry_name(n)),
                    &got,
                    &m.attempts(n),
                )
            }));
            checks.push(Box::pin(async move {
                let got = store.audit(id).await.map_err(|e| failed("audit", e))?;
                same(
                    &format!("the audit trail of {}", Self::entry_name(n)),
                    &got,
                    &m.audit_trail(n),
                )
            }));
        }
        for (s, source) in SOURCES.iter().enumerate() {
            checks.push(Box::pin(async move {
                let got = store.stats(source).await.map_err(|e| failed("stats", e))?;
                same(&format!("the stats of {source}"), &got, &m.stats(s))
            }));
            if !m.entries.iter().any(|e| e.source == s) {
                // Nothing was ever stored there: the stats say so, and nothing
                // else of the source can show anything.
                continue;
            }
            if views.listings {
                checks.push(Box::pin(async move {
                    let query = ListQuery {
                        source: Some(source.to_string()),
                        limit: 1000,
                        ..ListQuery::default()
                    };
                    let page = store.list(&query).await.map_err(|e| failed("list", e))?;
                    same(
                        &format!("the listing of {source}"),
                        &page.entries,
                        &m.listing(s),
                    )
                }));
            }
            if views.activity {
                checks.push(Box::pin(async move {
                    let since = m.start - m.start.rem_euclid(60_000);
                    let got = store
                        .activity(source, since, m.now + 60_000)
                        .await
                        .map_err(|e| failed("activity", e))?;
                    same(&format!("the activity of {source}"), &got, &m.activity(s))
                }));
            }
            for (r, route) in ROUTES.iter().enumerate() {
                checks.push(Box::pin(async move {
                    let got = store
                        .route_stats(source, route)
                        .await
                        .map_err(|e| failed("route_stats", e))?;
                    same(
                        &format!("the stats of {source}/{route}"),
                        &got,
                        &m.route_stats(s, r),
                    )
                }));
                if views.dead_letters {
                    checks.push(Box::pin(async move {
                        let got = store
                            .dead_letters(source, route, 1000)
                            .await
                            .map_err(|e| failed("dead_letters", e))?;
                        same(
                            &format!("the dead letters of {source}/{route}"),
                            &got,
                            &m.dead_letters(s, r),
                        )
                    }));
                }
                for (k, key) in KEYS.iter().enumerate() {
                    if !m.keyed(s, r, k) {
                        continue;
                    }
                    checks.push(Box::pin(async move {
                        let got = store
                            .order_line(source, route, key)
                            .await
                            .map_err(|e| failed("order_line", e))?;
                        same(
                            &format!("the line of {key} through {source}/{route}"),
                            &got,
                            &m.order_line(s, r, k),
                        )
                    }));
                }
            }
        }
        if views.paused {
            checks.push(Box::pin(async move {
                let got = store.paused().await.map_err(|e| failed("paused", e))?;
                same("what is paused", &got, &m.paused_targets())
            }));
        }
        futures_util::future::join_all(checks)
            .await
            .into_iter()
            .collect()
    }
}

/// What is compared after a step besides the entries, the counts and the lines.
#[derive(Debug, Clone, Copy)]
struct Views {
    /// The attempts and audit trail of every entry, not only of those the step
    /// acted on.
    all: bool,
    listings: bool,
    activity: bool,
    dead_letters: bool,
    paused: bool,
}

impl Views {
    const ALL: Views = Views {
        all: true,
        listings: true,
        activity: true,
        dead_letters: true,
        paused: true,
    };

    /// The views `op` may change (a claim, the time and the leases change none of
    /// them: what a claim changes shows in the entries and the lines).
    fn after(op: &Op) -> Views {
        let none = Views {
            all: false,
            listings: false,
            activity: false,
            dead_letters: false,
            paused: false,
        };
        match op {
            Op::Accept { .. } | Op::Again { .. } => Views {
                listings: true,
                activity: true,
                ..none
            },
            Op::Complete { .. } => Views {
                listings: true,
                activity: true,
                dead_letters: true,
                ..none
            },
            Op::Replay { .. } | Op::Discard { .. } | Op::Purge { .. } => Views {
                listings: true,
                dead_letters: true,
                ..none
            },
            Op::Pause { .. } => Views {
                paused: true,
                ..none
            },
            Op::Claim { .. } | Op::ExpireLeases | Op::Tick { .. } => none,
        }
    }
}

/// One comparison of what the store shows with what the model shows.
type Check<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + 'a>>;
