//! The Sources page (`GET /console/sources`): every configured source with its
//! provider and, per route, where it delivers, what its filter takes, its rate limit,
//! retry policy, timeouts, concurrency and ordering, whether it is paused, and a
//! warning where a filter or ordering key reads a value the provider does not sign; and a
//! **Pause** / **Resume** button per source and per route.
//!
//! What is missed, per source: a source that refuses most of what reaches it now is
//! marked **Refusing**, with the notice the Rejections page shows
//! ([`super::rejections::refusing_notice`]); a source with an expected traffic
//! (`[sources.expect]`) says whether it is below it now, and then **Quiet** since its
//! last stored entry. Both are counted from the store
//! ([`crate::operations::rejections::refusing`], [`crate::operations::rejections::quiet`]),
//! so every gateway sharing it shows the same.
//!
//! The page shows what [`SourceView`] holds, which `app` builds from the
//! configuration without any secret: no signing secret, no destination secret (only
//! whether there is one), destinations with their credentials redacted
//! ([`redact_url`]). The buttons post forms checked as every console POST is, then
//! call the admin API's own [`crate::operations::sources::set_paused`], and answer a redirect back to the
//! page (post/redirect/get).

use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};

use super::cross_site::FORM_TOKEN_FIELD;
use super::page::{self, Nav};
use super::posted::Posted;
use super::{ConsoleError, ConsoleState, Visitor, format};
use crate::admin::dto::RefusingSource;
use crate::admin::{dto::ControlEvent, dto::SourceState};
use crate::config::{DestinationKind, Expectation, OrderBy, RateLimit, SourceConfig};
use crate::operations::OpError;
use crate::operations::rejections::{self, Expected, short_time};
use crate::operations::routes::{RouteInfo, RouteStateKind};

/// Where the page is.
const PATH: &str = "/console/sources";

/// What the console shows of a configured source: never a secret.
#[derive(Debug, Clone)]
pub struct SourceView {
    pub name: String,
    pub provider: String,
    /// How long an event id is remembered to recognise a duplicate.
    pub dedupe_ttl: Duration,
    /// Its expected traffic (`[sources.expect]`), if any.
    pub expect: Option<Expectation>,
    pub routes: Vec<RouteView>,
}

/// What the console shows of one route of a source.
#[derive(Debug, Clone)]
pub struct RouteView {
    pub name: String,
    /// The destination URL with its userinfo and query redacted.
    pub destination: String,
    /// HTTP, NATS JetStream or RabbitMQ.
    pub kind: DestinationKind,
    /// Whether deliveries are signed (with a `destination_secret`, never shown).
    pub signed: bool,
    /// The filter, one line per part; empty: every entry.
    pub filter: Vec<String>,
    pub rate_limit: Option<RateLimit>,
    pub max_attempts: u32,
    pub max_age: Duration,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub concurrency: usize,
    /// Ordered delivery: the key, and whether a dead delivery blocks its key.
    pub order: Option<(String, bool)>,
    /// Warnings: a filter part or the ordering key reads a value the provider's
    /// signature does not cover (`provider::signed`), one sentence each.
    pub unsigned: Vec<String>,
}

impl SourceView {
    /// The view of `cfg`: everything the page shows, and no secret.
    pub fn of(cfg: &SourceConfig) -> SourceView {
        SourceView {
            name: cfg.name.clone(),
            provider: cfg.provider.clone(),
            dedupe_ttl: cfg.dedupe_ttl,
            expect: cfg.expect,
            routes: cfg
                .routes
                .iter()
                .map(|r| RouteView {
                    name: r.name.clone(),
                    destination: r.shown_destination(),
                    kind: r.target.kind(),
                    signed: r.destination_secret.is_some(),
                    filter: r.filter.describe(),
                    rate_limit: r.delivery.rate_limit,
                    max_attempts: r.retry.max_attempts,
                    max_age: r.retry.max_age,
                    backoff_base: r.retry.base,
                    backoff_cap: r.retry.cap,
                    timeout: r.delivery.timeout,
                    connect_timeout: r.delivery.connect_timeout,
                    concurrency: r.delivery.concurrency,
                    order: r.order.as_ref().map(|o| {
                        let by = match &o.by {
                            OrderBy::Provider => "the provider's object id".to_string(),
                            OrderBy::Value(v) => v.clone(),
                        };
                        (by, o.block)
                    }),
                    unsigned: Vec::new(),
                })
                .collect(),
        }
    }

    /// The view with its routes' warnings about unsigned values: (route, warning).
    pub fn with_unsigned(mut self, warnings: Vec<(String, String)>) -> SourceView {
        for (route, warning) in warnings {
            if let Some(r) = self.routes.iter_mut().find(|r| r.name == route) {
                r.unsigned.push(warning);
            }
        }
        self
    }
}

/// `GET /console/sources`.
pub async fn show(
    State(console): State<Arc<ConsoleState>>,
    Extension(visitor): Extension<Visitor>,
) -> Result<Response, ConsoleError> {
    let states = crate::operations::sources::source_states(&console.admin.ops).await?;
    let controls =
        crate::operations::audit::control_events(&console.admin.ops, CONTROLS_SHOWN).await?;
    let retired: Vec<RouteInfo> = crate::operations::routes::routes(&console.admin.ops)
        .await?
        .into_iter()
        .filter(|r| r.state == RouteStateKind::Retired)
        .collect();
    let views = console.sources.load();
    let ops = &console.admin.ops;
    let now = ops.clock.now_ms();
    let refusing = rejections::refusing(ops, now).await.map_err(store)?;
    let mut expected = Vec::new();
    for v in views.iter() {
        if let Some(e) = &v.expect {
            let counted = rejections::quiet(ops, &v.name, e, now)
                .await
                .map_err(store)?;
            expected.push((v.name.clone(), counted));
        }
    }
    let health = Health {
        refusing: &refusing,
        expected: &expected,
        now,
    };
    let token = console.form_token(&visitor);
    let chrome = console.chrome(&visitor, Nav::Sources);
    Ok(page::html(page::page(
        "Sources",
        &chrome,
        html! {
            (render(&views, &states, &health, &token))
            (retired_routes(&retired))
            (control_audit(&controls))
        },
    )))
}

fn store(e: OpError) -> ConsoleError {
    match e {
        OpError::Store(cause) => ConsoleError::Store(cause),
        _ => ConsoleError::NotFound,
    }
}

/// What the store says of the sources' traffic now: those refusing most of it, and
/// each expectation counted, with the time they were counted at (unix ms).
struct Health<'a> {
    refusing: &'a [RefusingSource],
    expected: &'a [(String, Expected)],
    now: i64,
}

impl Health<'_> {
    fn refusing(&self, source: &str) -> Option<&RefusingSource> {
        self.refusing.iter().find(|r| r.source == source)
    }

    fn expected(&self, source: &str) -> Option<&Expected> {
        self.expected
            .iter()
            .find(|(s, _)| s == source)
            .map(|(_, e)| e)
    }
}

/// `POST /console/sources/{name}/pause` and `…/resume`.
pub async fn source_action(
    State(console): State<Arc<ConsoleState>>,
    path: Result<Path<(String, String)>, PathRejection>,
    Posted { visitor, .. }: Posted,
) -> Result<Response, ConsoleError> {
    let Ok(Path((name, action))) = path else {
        return Err(ConsoleError::NotFound);
    };
    act(&console, &visitor, &name, None, &action).await
}

/// `POST /console/sources/{name}/routes/{route}/pause` and `…/resume`.
pub async fn route_action(
    State(console): State<Arc<ConsoleState>>,
    path: Result<Path<(String, String, String)>, PathRejection>,
    Posted { visitor, .. }: Posted,
) -> Result<Response, ConsoleError> {
    let Ok(Path((name, route, action))) = path else {
        return Err(ConsoleError::NotFound);
    };
    act(&console, &visitor, &name, Some(&route), &action).await
}

/// Pause or resume as the admin API does (the form was checked), and go back to the
/// page.
async fn act(
    console: &ConsoleState,
    visitor: &Visitor,
    name: &str,
    route: Option<&str>,
    action: &str,
) -> Result<Response, ConsoleError> {
    let paused = match action {
        "pause" => true,
        "resume" => false,
        _ => return Err(ConsoleError::NotFound),
    };
    crate::operations::sources::set_paused(
        &console.admin.ops,
        name,
        route,
        paused,
        &visitor.actor(),
    )
    .await
    .map_err(|e| match e {
        OpError::Store(cause) => ConsoleError::Store(cause),
        // The only other answers: no such source, no such route (nothing changed).
        _ => ConsoleError::NotFound,
    })?;
    // The name is a configured source's: URL-safe by configuration.
    Ok(Redirect::to(&format!("{PATH}#{}", anchor(name))).into_response())
}

/// The `id` of a source's card.
fn anchor(source: &str) -> String {
    format!("source-{source}")
}

/// The page's content: `views` in configuration order, with what `states` says is
/// paused, and forms carrying `token`.
/// The pauses and resumes the page lists (`GET /admin/audit` has more).
const CONTROLS_SHOWN: usize = 20;

/// The newest pauses and resumes, with who made them.
/// The routes a reload retired that still keep deliveries, unsent.
fn retired_routes(routes: &[RouteInfo]) -> Markup {
    html! {
        @if !routes.is_empty() {
            section.card #retired-routes aria-labelledby="retired-routes-heading" {
                h2 #retired-routes-heading { "Retired routes" }
                p.muted {
                    "A reload removed these routes. Their pending deliveries are kept, unsent: "
                    "they go when a route of the same name and destination comes back "
                    "(with another destination, once the route is resumed), or are discarded "
                    "with a note (hookgate routes discard)."
                }
                div.table-wrap {
                    table {
                        thead { tr { th { "Source / route" } th { "Retired (UTC)" } th { "Pending" } th { "Dead" } } }
                        tbody {
                            @for r in routes {
                                tr {
                                    td { (r.source) " / " (r.route) }
                                    td { @match &r.retired_at { Some(at) => (at), None => span.muted { "—" } } }
                                    td { (r.pending) }
                                    td { (r.dead) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn control_audit(events: &[ControlEvent]) -> Markup {
    html! {
        section.card #control-audit aria-labelledby="control-audit-heading" {
            h2 #control-audit-heading { "Recent pauses and resumes" }
            @if events.is_empty() {
                p.muted { "Nothing was paused or resumed yet." }
            } @else {
                div.table-wrap {
                    table {
                        thead { tr { th { "When (UTC)" } th { "Action" } th { "Source / route" } th { "By" } th { "Session" } th { "Client" } } }
                        tbody {
                            @for e in events {
                                tr {
                                    td { (format::rfc3339(&e.at)) }
                                    td { (e.action) }
                                    td { (e.source) @if let Some(r) = &e.route { " / " (r) } }
                                    td { (format::untrusted(&e.actor)) }
                                    td.mono { @match &e.session { Some(s) => (s), None => span.muted { "—" } } }
                                    td.mono { @match &e.client { Some(c) => (c), None => span.muted { "—" } } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn render(views: &[SourceView], states: &[SourceState], health: &Health, token: &str) -> Markup {
    html! {
        div.page-head {
            h1 { "Sources" }
            p.muted {
                "As configured. A paused source or route still receives and stores "
                "webhooks; resuming delivers what waited."
            }
        }
        @if views.is_empty() {
            section.card {
                h2 { "No sources" }
                p { "No sources are configured: add a " code { "[[sources]]" } " entry to the configuration." }
            }
        }
        @for (i, v) in views.iter().enumerate() {
            (source(i, v, states.iter().find(|s| s.source == v.name), health, token))
        }
    }
}

fn source(
    i: usize,
    v: &SourceView,
    state: Option<&SourceState>,
    health: &Health,
    token: &str,
) -> Markup {
    let heading = format!("source-{i}-name");
    let refusing = health.refusing(&v.name);
    let expected = health.expected(&v.name);
    let paused = state.is_some_and(|s| s.paused);
    let route_paused =
        |r: &str| state.is_some_and(|s| s.routes.iter().any(|rs| rs.route == r && rs.paused));
    html! {
        section.card.source.config id=(anchor(&v.name)) aria-labelledby=(heading) {
            div.source-head {
                h2 id=(heading) { (v.name) }
                (badge(paused, false))
                @if refusing.is_some() {
                    span.badge.status-dead.refusing { "Refusing" }
                }
                @if expected.is_some_and(|e| e.quiet) {
                    span.badge.paused.quiet { "Quiet" }
                }
                dl.facts {
                    div { dt { "Provider" } dd { (v.provider) } }
                    div { dt { "Dedupe window" } dd { (duration(v.dedupe_ttl)) } }
                    div { dt { "Routes" } dd { (v.routes.len()) } }
                    @if let Some(e) = expected {
                        div.expects {
                            dt { "Expects" }
                            dd {
                                @if e.learning {
                                    "What it usually receives at this hour of the week"
                                    span.muted { "; still learning (it needs two weeks with traffic)" }
                                } @else if e.learned {
                                    "At least " (e.at_least) " per " (duration(e.within)) " at this hour of the week"
                                    span.muted { " (a tenth of what it usually receives then); " (e.received) " in the last " (duration(e.within)) }
                                } @else {
                                    "At least " (e.at_least) " per " (duration(e.within))
                                    span.muted { "; " (e.received) " in the last " (duration(e.within)) }
                                }
                            }
                        }
                    }
                }
                (toggle(&format!("{PATH}/{}", v.name), paused, "source", &v.name, token))
            }
            @if let Some(r) = refusing {
                (super::rejections::refusing_notice(r))
            }
            @if let Some(e) = expected.filter(|e| e.quiet) {
                (quiet_notice(e, health.now))
            }
            ul.route-list aria-label={ "Routes of " (v.name) } {
                @for r in &v.routes {
                    (route(v, r, paused, route_paused(&r.name), token))
                }
            }
        }
    }
}

fn route(s: &SourceView, r: &RouteView, source_paused: bool, paused: bool, token: &str) -> Markup {
    let action = format!("{PATH}/{}/routes/{}", s.name, r.name);
    let who = format!("{} of {}", r.name, s.name);
    html! {
        li.route {
            div.route-head {
                h3 { span.visually-hidden { "Route " } (r.name) }
                (badge(paused, source_paused && !paused))
                (toggle(&action, paused, "route", &who, token))
            }
            @for w in &r.unsigned {
                p.alert.unsigned role="note" { "Unsigned value: " (w) }
            }
            dl.settings {
                div.wide {
                    dt { "Destination" }
                    dd.mono {
                        (r.destination)
                        @match r.kind {
                            DestinationKind::Nats => { " " span.badge.kind { "NATS JetStream" } }
                            DestinationKind::Amqp => { " " span.badge.kind { "RabbitMQ" } }
                            DestinationKind::Pull => { " " span.badge.kind { "pulled by consumers" } }
                            DestinationKind::Http => {}
                        }
                    }
                }
                div.wide {
                    dt { "Filter" }
                    dd {
                        @if r.filter.is_empty() {
                            "Every entry"
                        } @else {
                            ul.filter {
                                @for line in &r.filter { li { code { (line) } } }
                            }
                        }
                    }
                }
                div {
                    dt { "Retries" }
                    dd {
                        "Up to " (r.max_attempts) " "
                        (if r.max_attempts == 1 { "attempt" } else { "attempts" })
                        " within " (duration(r.max_age))
                    }
                }
                div {
                    dt { "Backoff" }
                    dd { (duration(r.backoff_base)) ", doubling up to " (duration(r.backoff_cap)) }
                }
                div {
                    dt { "Timeout" }
                    dd { (duration(r.timeout)) span.muted { " (connect " (duration(r.connect_timeout)) ")" } }
                }
                div {
                    dt { "Concurrency" }
                    dd { (r.concurrency) " at once" }
                }
                div {
                    dt { "Rate limit" }
                    dd {
                        @match &r.rate_limit {
                            Some(l) => (rate(l)),
                            None => span.muted { "None" },
                        }
                    }
                }
                div.wide {
                    dt { "Ordering" }
                    dd {
                        @match &r.order {
                            Some((by, block)) => {
                                "By " code { (by) }
                                span.muted {
                                    @if *block { "; a dead delivery holds its key" }
                                    @else { "; a dead delivery is skipped" }
                                }
                            }
                            None => span.muted { "None (in parallel)" },
                        }
                    }
                }
                div {
                    dt { "Signing" }
                    dd {
                        @if r.signed { "Signed (destination secret)" }
                        @else { span.muted { "Not signed" } }
                    }
                }
            }
        }
    }
}

/// The notice of a source below its expected traffic, since its last stored entry.
fn quiet_notice(e: &Expected, now: i64) -> Markup {
    let expects = if e.learned {
        format!(
            "(usually at least {} per {} at this hour of the week)",
            e.at_least,
            duration(e.within)
        )
    } else {
        format!(
            "(expects at least {} per {})",
            e.at_least,
            duration(e.within)
        )
    };
    let at = |ms: i64| html! { time datetime=(format::stamp(ms)) { (short_time(ms, now)) } };
    html! {
        p.alert.quiet role="note" {
            strong { "Quiet" } ": "
            @match e.last_at {
                Some(last) if e.received == 0 => { "nothing since " (at(last)) " " (expects) }
                Some(last) => {
                    (e.received) " in the last " (duration(e.within)) ", the last at " (at(last))
                    " " (expects)
                }
                None => { "no webhook stored " (expects) }
            }
        }
    }
}

/// The state badge: paused itself, held by its paused source, or active.
fn badge(paused: bool, held_by_source: bool) -> Markup {
    html! {
        @if paused {
            span.badge.paused { "Paused" }
        } @else if held_by_source {
            span.badge.paused title="Its source is paused" { "Paused with its source" }
        } @else {
            span.badge.active { "Active" }
        }
    }
}

/// The Pause or Resume form of a source or route (`what`, named `who`) at `action`.
fn toggle(action: &str, paused: bool, what: &str, who: &str, token: &str) -> Markup {
    let (verb, path) = if paused {
        ("Resume", "resume")
    } else {
        ("Pause", "pause")
    };
    html! {
        form.toggle method="post" action={ (action) "/" (path) } {
            input type="hidden" name=(FORM_TOKEN_FIELD) value=(token);
            button class={ "toggle " (path) } type="submit" {
                (verb) " " (what)
                span.visually-hidden { " " (who) }
            }
        }
    }
}

/// A duration as the overview writes ages: `10 s`, `12 h`, `1 min 30 s`, `7 d`,
/// `250 ms`.
fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    let parts = [
        (ms / 86_400_000, "d"),
        (ms / 3_600_000 % 24, "h"),
        (ms / 60_000 % 60, "min"),
        (ms / 1000 % 60, "s"),
        (ms % 1000, "ms"),
    ];
    let shown: Vec<String> = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n} {unit}"))
        .collect();
    if shown.is_empty() {
        "0 s".to_string()
    } else {
        shown.join(" ")
    }
}

/// A rate limit in the unit it reads best in, with its burst.
fn rate(l: &RateLimit) -> String {
    let (n, unit) = if l.per_second >= 1.0 {
        (l.per_second, "second")
    } else if l.per_second * 60.0 >= 1.0 {
        (l.per_second * 60.0, "minute")
    } else {
        (l.per_second * 3600.0, "hour")
    };
    let n = if (n - n.round()).abs() < 1e-6 {
        format!("{}", n.round())
    } else {
        format!("{n:.2}")
    };
    format!("{n} per {unit} (bursts of {})", l.burst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::dto::RouteState;
    use crate::config::from_toml_str;

    const CONFIG: &str = r#"
[[sources]]
name = "vault"
provider = "stripe"
secret = "whsec_signing_secret_1"
destination_secret = "dest_secret_2"
dedupe_ttl = "1d"
[[sources.routes]]
name = "main"
destination = "http://user:url_password_3@billing.internal:3000/hook?token=query_token_4"
rate_limit = "600/m"
retry = { max_attempts = 3, max_age = "1h", base = "2s", cap = "1m" }
delivery = { timeout = "5s", concurrency = 4 }
order = { by = "json:/data/object/id", on_dead = "block" }
[[sources.routes]]
name = "audit"
destination = "https://audit.internal/in"
filter.event_types = ["<script>alert(1)</script>"]
"#;

    fn views() -> Vec<SourceView> {
        let cfg = from_toml_str(CONFIG, &|_| None).expect("config");
        cfg.sources.iter().map(SourceView::of).collect()
    }

    #[test]
    fn the_view_of_a_source_holds_no_secret() {
        let v = views();
        let shown = format!("{v:?}");
        for secret in [
            "whsec_signing_secret_1",
            "dest_secret_2",
            "url_password_3",
            "query_token_4",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        let main = &v[0].routes[0];
        assert_eq!(
            main.destination,
            "http://[redacted]@billing.internal:3000/hook?[redacted]"
        );
        assert!(main.signed, "the source's destination secret is inherited");
        assert_eq!(main.order, Some(("json:/data/object/id".to_string(), true)));
    }

    #[test]
    fn the_page_shows_the_settings_escaped_and_the_state_of_each_route() {
        let v = views();
        let states = [SourceState {
            source: "vault".into(),
            paused: false,
            routes: vec![
                RouteState {
                    route: "main".into(),
                    paused: true,
                },
                RouteState {
                    route: "audit".into(),
                    paused: false,
                },
            ],
        }];
        let none = Health {
            refusing: &[],
            expected: &[],
            now: 0,
        };
        let html = render(&v, &states, &none, "tok").into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        for shown in [
            "Up to 3 attempts within 1 h",
            "2 s, doubling up to 1 min",
            "10 per second (bursts of 1)",
            "4 at once",
            "json:/data/object/id",
            r#"action="/console/sources/vault/pause""#,
            r#"action="/console/sources/vault/routes/main/resume""#,
            r#"action="/console/sources/vault/routes/audit/pause""#,
            r#"name="csrf" value="tok""#,
        ] {
            assert!(html.contains(shown), "{shown} in {html}");
        }
        for secret in ["whsec_signing_secret_1", "dest_secret_2", "url_password_3"] {
            assert!(!html.contains(secret), "{secret} in {html}");
        }
        assert!(!html.contains("Unsigned value"), "{html}");
        let warned: Vec<SourceView> = v
            .into_iter()
            .map(|s| s.with_unsigned(vec![("audit".into(), "order.by reads <b>x</b>".into())]))
            .collect();
        let html = render(&warned, &states, &none, "tok").into_string();
        assert!(
            html.contains("Unsigned value: order.by reads &lt;b&gt;x&lt;/b&gt;"),
            "{html}"
        );
    }

    #[test]
    fn a_refusing_source_and_a_quiet_one_are_marked_with_what_the_store_says_escaped() {
        let v = views();
        assert_eq!(v[0].expect, None);
        // 2026-11-24 06:35 UTC, and the page drawn at 09:00 the same day.
        let last = 1_795_502_100_000;
        let now = last + 8_700_000;
        let hostile = "<img src=x onerror=alert(1)>";
        let refusing = [RefusingSource {
            source: "vault".into(),
            reason: "ip_not_allowed".into(),
            since: "2026-11-24T06:35:00.000Z".into(),
            since_exact: true,
            refused: 25,
            total: 26,
            client: Some(hostile.into()),
            likely: rejections::likely("ip_not_allowed", "06:35 UTC", Some(hostile)),
        }];
        let expect = crate::config::Expect::parse("k", "2/1h").unwrap();
        let quiet = |received: u64, last_at: Option<i64>| Expected {
            at_least: 2,
            within: expect.within,
            learned: false,
            learning: false,
            received,
            quiet: received < 2,
            last_at,
        };
        let mut v = v;
        v[0].expect = Some(Expectation::AtLeast(expect));
        let expected = [("vault".to_string(), quiet(0, Some(last)))];
        let health = Health {
            refusing: &refusing,
            expected: &expected,
            now,
        };
        let html = render(&v, &[], &health, "tok").into_string();
        for shown in [
            "Refusing",
            "vault refuses most requests",
            "25 of 26",
            "since <time datetime=\"2026-11-24T06:35:00.000Z\">2026-11-24 06:35:00 UTC</time>",
            "The requests come from &lt;img src=x onerror=alert(1)&gt;, outside the source's allowlist",
            "reason=ip_not_allowed",
            "Quiet</strong>: nothing since <time datetime=\"2026-11-24T06:35:00Z\">06:35 UTC</time> (expects at least 2 per 1 h)",
            "At least 2 per 1 h",
        ] {
            assert!(html.contains(shown), "{shown} in {html}");
        }
        assert!(!html.contains("<img"), "{html}");

        // Some arrived, too few: how many, and the last.
        let expected = [("vault".to_string(), quiet(1, Some(last)))];
        let health = Health {
            refusing: &[],
            expected: &expected,
            now: last + 86_400_000,
        };
        let html = render(&v, &[], &health, "tok").into_string();
        assert!(
            html.contains("1 in the last 1 h, the last at <time datetime=\"2026-11-24T06:35:00Z\">2026-11-24 06:35 UTC</time> (expects at least 2 per 1 h)"),
            "{html}"
        );
        assert!(!html.contains("Refusing"), "{html}");
        // Enough: the expectation, and no mark.
        let expected = [("vault".to_string(), quiet(3, None))];
        let health = Health {
            refusing: &[],
            expected: &expected,
            now,
        };
        let html = render(&v, &[], &health, "tok").into_string();
        assert!(html.contains("At least 2 per 1 h"), "{html}");
        assert!(html.contains("3 in the last 1 h"), "{html}");
        assert!(!html.contains("Quiet"), "{html}");
        // Never anything.
        let expected = [("vault".to_string(), quiet(0, None))];
        let health = Health {
            refusing: &[],
            expected: &expected,
            now,
        };
        let html = render(&v, &[], &health, "tok").into_string();
        assert!(
            html.contains("Quiet</strong>: no webhook stored (expects at least 2 per 1 h)"),
            "{html}"
        );
    }

    #[test]
    fn durations_read_as_on_the_overview() {
        let d = |ms: u64| duration(Duration::from_millis(ms));
        assert_eq!(d(0), "0 s");
        assert_eq!(d(250), "250 ms");
        assert_eq!(d(10_000), "10 s");
        assert_eq!(d(90_000), "1 min 30 s");
        assert_eq!(d(12 * 3_600_000), "12 h");
        assert_eq!(d(7 * 86_400_000), "7 d");
    }

    #[test]
    fn rates_read_in_their_best_unit() {
        let r = |t: &str| rate(&RateLimit::parse(t).unwrap());
        assert_eq!(r("20/s"), "20 per second (bursts of 2)");
        assert_eq!(r("2.5/s"), "2.50 per second (bursts of 1)");
        assert_eq!(r("30/m"), "30 per minute (bursts of 1)");
        assert_eq!(r("10/h"), "10 per hour (bursts of 1)");
    }
}
