//! The CLI's side of the admin API: `hookgate entries|dlq|sources|stats|gateways`.
//!
//! Talks HTTP to a running gateway (the admin URL and token come from flags or
//! `HOOKGATE_ADMIN_URL` / `HOOKGATE_ADMIN_TOKEN`), prints readable tables by default
//! and the API's JSON with `--json`. Errors say what to check: an unreachable gateway
//! and a refused token are told apart. What it shares with the server is the wire
//! types ([`crate::admin::dto`]) and the few parsers both sides must agree on (a
//! search's predicates, a duration, the token's query parameter).

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};

use super::out::outln;
use serde::de::DeserializeOwned;

use crate::admin::dto::{
    ArmedHandshake, EntryDetail, EntryList, EntrySummary, Gateways, HandshakeState, ReplayFilter,
    ReplayResult, SourceState, Stats, TransitionResult,
};
use crate::operations::search::PredicateKind;

#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// The admin API of a running gateway.
    #[arg(
        long,
        env = "HOOKGATE_ADMIN_URL",
        default_value = "http://127.0.0.1:8081",
        global = true
    )]
    pub admin_url: String,
    /// The admin bearer token.
    #[arg(
        long,
        env = "HOOKGATE_ADMIN_TOKEN",
        hide_env_values = true,
        global = true
    )]
    pub token: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct FilterArgs {
    #[arg(long)]
    pub source: Option<String>,
    /// Only entries with a delivery through this route (of --source, or of every
    /// source with such a route); a --status then applies to that delivery.
    #[arg(long)]
    pub route: Option<String>,
    #[arg(long)]
    pub event_type: Option<String>,
    /// Received at or after (RFC 3339 or unix seconds).
    #[arg(long)]
    pub since: Option<String>,
    /// Received before (RFC 3339 or unix seconds).
    #[arg(long)]
    pub until: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub filter: FilterArgs,
    /// pending, delivered, dead, discarded or filtered.
    #[arg(long)]
    pub status: Option<String>,
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Continue from a previous page's next cursor.
    #[arg(long)]
    pub cursor: Option<String>,
    #[command(flatten)]
    pub search: SearchArgs,
}

/// Payload search: predicates on the body (a JSON pointer) or a stored header
/// (`header.<name>`); each may repeat, and every one must hold.
#[derive(Debug, Clone, Default, Args)]
pub struct SearchArgs {
    /// `<target>:<value>`: the value there equals value (JSON when it is a JSON
    /// scalar, else text), e.g. `/data/object/customer:cus_123`.
    #[arg(long = "match", value_name = "TARGET:VALUE")]
    pub equals: Vec<String>,
    /// `<target>:<v1>,<v2>,…`: the value is one of them.
    #[arg(long = "in", value_name = "TARGET:VALUES")]
    pub one_of: Vec<String>,
    /// `<target>:<text>`: the value is a string starting with text.
    #[arg(long, value_name = "TARGET:TEXT")]
    pub prefix: Vec<String>,
    /// The body has a value at this pointer, or this header is stored.
    #[arg(long, value_name = "TARGET")]
    pub exists: Vec<String>,
    /// The body has no value at this pointer, or this header is not stored.
    #[arg(long, value_name = "TARGET")]
    pub missing: Vec<String>,
}

impl SearchArgs {
    /// The query parameters of the admin API (`GET /admin/entries`).
    fn query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        for (kind, values) in [
            (PredicateKind::Match, &self.equals),
            (PredicateKind::In, &self.one_of),
            (PredicateKind::Prefix, &self.prefix),
            (PredicateKind::Exists, &self.exists),
            (PredicateKind::Missing, &self.missing),
        ] {
            q.extend(values.iter().map(|v| (kind.param(), v.clone())));
        }
        q
    }
}

#[derive(Debug, Subcommand)]
pub enum EntriesCmd {
    /// List entries, newest first; with --match, --in, --prefix, --exists or
    /// --missing, search their bodies and headers.
    List(Box<ListArgs>),
    /// Show one entry: headers (secrets redacted), body, deliveries per route,
    /// attempts, audit trail.
    Show { id: String },
    /// Deliver an entry again (same webhook-id, fresh retry budget): its dead or
    /// discarded deliveries, or the one of --route.
    Replay {
        id: String,
        /// Only this route's delivery.
        #[arg(long)]
        route: Option<String>,
    },
    /// Discard the pending or dead deliveries of an entry (or the one of --route);
    /// they are never delivered.
    Discard {
        id: String,
        /// Why (required; kept in the audit trail).
        #[arg(long)]
        note: String,
        /// Only this route's delivery.
        #[arg(long)]
        route: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum DlqCmd {
    /// List dead entries.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Replay every dead entry matching the filter (spread at admin.replay_rate);
    /// with --failure, one dead-letter group of --source and --route.
    Replay {
        #[command(flatten)]
        filter: FilterArgs,
        /// Only the deliveries that died of this failure kind, as `dlq groups`
        /// lists it (`HTTP 422`, `timeout`, `connect`, `transform: runtime`, …).
        #[arg(long, requires_all = ["source", "route"], conflicts_with_all = ["event_type", "since", "until"])]
        failure: Option<String>,
    },
    /// The dead letters of each route grouped by failure kind, largest first.
    Groups {
        #[arg(long)]
        source: Option<String>,
        #[arg(long)]
        route: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum SourcesCmd {
    /// List sources and their routes, and whether their delivery is paused.
    List,
    /// Pause delivery of a source, or of one of its routes (ingest continues).
    Pause {
        name: String,
        #[arg(long)]
        route: Option<String>,
    },
    /// Resume delivery of a source, or of one of its routes.
    Resume {
        name: String,
        #[arg(long)]
        route: Option<String>,
    },
    /// Arm a source's secret handshake (Asana's X-Hook-Secret) for a while: prints
    /// a one-time token, and the target URL that carries it; create the provider's
    /// webhook with that target within the window: its handshake establishes a
    /// secret, and a handshake without the token is refused.
    Handshake {
        name: String,
        /// How long it stays armed (`90s`, `10m`; at most `1h`).
        #[arg(long, default_value = "10m")]
        within: String,
    },
    /// A source's secret handshake: whether it is armed, and the ids of the
    /// secrets established (never the secrets).
    Secrets { name: String },
    /// Forget an established secret: requests signed with it are refused.
    ForgetSecret { name: String, id: String },
}

pub(crate) struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    pub(crate) fn new(api: &ApiArgs) -> anyhow::Result<Client> {
        crate::tls::install_provider();
        Ok(Client {
            base: api.admin_url.trim_end_matches('/').to_string(),
            token: api.token.clone().filter(|t| !t.is_empty()),
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(60))
                .build()
                .context("cannot build the HTTP client")?,
        })
    }

    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<(T, serde_json::Value)> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url).query(query);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Ok(user) = std::env::var("USER") {
            req = req.header("x-hookgate-actor", user);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| {
            anyhow::anyhow!(
                "cannot reach the admin API at {}: {} (is `hookgate serve` running? is --admin-url right?)",
                self.base,
                anyhow::Error::from(e).root_cause()
            )
        })?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .with_context(|| format!("reading the answer of {url}"))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
        if status == reqwest::StatusCode::UNAUTHORIZED {
            bail!(
                "the admin API refused the token (401): set --token or HOOKGATE_ADMIN_TOKEN to the gateway's admin token"
            );
        }
        if !status.is_success() {
            let msg = json
                .get("error")
                .and_then(|e| e.as_str())
                .unwrap_or(text.as_str());
            bail!(
                "{} {}: {msg}",
                status.as_u16(),
                status.canonical_reason().unwrap_or("")
            );
        }
        let typed = serde_json::from_value(json.clone())
            .with_context(|| format!("unexpected answer from {url}"))?;
        Ok((typed, json))
    }
}

fn filter_query(f: &FilterArgs) -> Vec<(&'static str, String)> {
    let mut q = Vec::new();
    for (k, v) in [
        ("source", &f.source),
        ("route", &f.route),
        ("event_type", &f.event_type),
        ("since", &f.since),
        ("until", &f.until),
    ] {
        if let Some(v) = v {
            q.push((k, v.clone()));
        }
    }
    q
}

/// Print rows as aligned columns.
pub(crate) fn table(header: &[&str], rows: Vec<Vec<String>>) -> std::io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        outln!("{}", parts.join("  ").trim_end())
    };
    line(header.iter().map(|h| h.to_uppercase()).collect())?;
    for r in rows {
        line(r)?;
    }
    Ok(())
}

fn dash(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "-".into())
}

pub(crate) fn print_json(v: &serde_json::Value) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(v)?)?;
    Ok(())
}

fn print_entries(list: &EntryList) -> std::io::Result<()> {
    table(
        &[
            "id",
            "source",
            "status",
            "attempts",
            "received",
            "event type",
            "last error",
        ],
        list.entries
            .iter()
            .map(|e: &EntrySummary| {
                vec![
                    e.id.clone(),
                    e.source.clone(),
                    e.status.as_str().to_string(),
                    e.attempts.to_string(),
                    e.received_at.clone(),
                    dash(&e.event_type),
                    dash(&e.last_error),
                ]
            })
            .collect(),
    )?;
    if let Some(s) = &list.search {
        let how = match &s.index {
            Some(index) => format!("by the index {index}"),
            None => "by reading them".to_string(),
        };
        outln!("(searched {} entries {how})", s.scanned)?;
        if let (false, Some(at)) = (s.complete, &s.stopped_at) {
            outln!("(stopped at entries received {at}; older ones are not searched yet)")?;
        }
    }
    if let Some(c) = &list.next_cursor {
        outln!("(more: --cursor {c})")?;
    }
    Ok(())
}

async fn list(
    api: &ApiArgs,
    status: Option<String>,
    a: &FilterArgs,
    limit: usize,
    cursor: Option<String>,
    search: &SearchArgs,
) -> anyhow::Result<()> {
    let c = Client::new(api)?;
    let mut q = filter_query(a);
    q.extend(search.query());
    if let Some(s) = status {
        q.push(("status", s));
    }
    q.push(("limit", limit.to_string()));
    if let Some(cur) = cursor {
        q.push(("cursor", cur));
    }
    let (list, raw): (EntryList, _) = c
        .call(reqwest::Method::GET, "/admin/entries", &q, None)
        .await?;
    if api.json {
        return print_json(&raw);
    }
    print_entries(&list)?;
    Ok(())
}

pub async fn entries(api: &ApiArgs, cmd: EntriesCmd) -> anyhow::Result<()> {
    let c = Client::new(api)?;
    match cmd {
        EntriesCmd::List(a) => list(api, a.status, &a.filter, a.limit, a.cursor, &a.search).await,
        EntriesCmd::Show { id } => {
            let (e, raw): (EntryDetail, _) = c
                .call(
                    reqwest::Method::GET,
                    &format!("/admin/entries/{id}"),
                    &[],
                    None,
                )
                .await?;
            if api.json {
                return print_json(&raw);
            }
            let s = &e.summary;
            outln!("id:           {}", s.id)?;
            outln!("source:       {}", s.source)?;
            outln!(
                "event:        {} ({})",
                dash(&s.event_id),
                dash(&s.event_type)
            )?;
            outln!("received:     {}", s.received_at)?;
            outln!("status:       {}", s.status.as_str())?;
            outln!("attempts:     {}", s.attempts)?;
            outln!("next attempt: {}", dash(&s.next_attempt_at))?;
            outln!("last error:   {}", dash(&s.last_error))?;
            if let Some(t) = &e.trace_id {
                outln!("trace id:     {t}")?;
            }
            outln!("\nheaders:")?;
            for h in &e.headers {
                outln!("  {}: {}", h.name, h.value)?;
            }
            outln!("\nbody ({}):\n{}", e.body_encoding, e.body)?;
            outln!("\ndeliveries:")?;
            table(
                &[
                    "route",
                    "status",
                    "attempts",
                    "next attempt",
                    "last error",
                    "ordering key",
                ],
                e.deliveries
                    .iter()
                    .map(|d| {
                        vec![
                            d.route.clone(),
                            d.status.as_str().to_string(),
                            d.attempts.to_string(),
                            dash(&d.next_attempt_at),
                            dash(&d.last_error),
                            d.order
                                .as_ref()
                                .map(|o| format!("{} (on dead: {})", o.key, o.on_dead))
                                .unwrap_or_else(|| "-".into()),
                        ]
                    })
                    .collect(),
            )?;
            outln!("\nattempts:")?;
            table(
                &["route", "n", "at", "status", "error", "latency ms"],
                e.attempt_log
                    .iter()
                    .map(|a| {
                        vec![
                            a.route.clone(),
                            a.n.to_string(),
                            a.at.clone(),
                            a.status_code
                                .map(|c| c.to_string())
                                .unwrap_or_else(|| "-".into()),
                            dash(&a.error),
                            a.latency_ms.to_string(),
                        ]
                    })
                    .collect(),
            )?;
            outln!("\naudit:")?;
            table(
                &["at", "action", "route", "actor", "note"],
                e.audit
                    .iter()
                    .map(|a| {
                        vec![
                            a.at.clone(),
                            a.action.clone(),
                            a.route.clone().unwrap_or_else(|| "(all)".into()),
                            a.actor.clone(),
                            dash(&a.note),
                        ]
                    })
                    .collect(),
            )?;
            Ok(())
        }
        EntriesCmd::Replay { id, route } => {
            let (r, raw): (TransitionResult, _) = c
                .call(
                    reqwest::Method::POST,
                    &format!("/admin/entries/{id}/replay"),
                    &[],
                    route.map(|r| serde_json::json!({ "route": r })),
                )
                .await?;
            if api.json {
                return print_json(&raw);
            }
            outln!("replay queued: {} is {}", r.id, r.status.as_str())?;
            for l in &r.lines {
                outln!(
                    "  route {}, ordering key {}: {} ahead of it, {} waiting behind it",
                    l.route,
                    l.key,
                    l.ahead,
                    l.behind
                )?;
            }
            Ok(())
        }
        EntriesCmd::Discard { id, note, route } => {
            let (r, raw): (TransitionResult, _) = c
                .call(
                    reqwest::Method::POST,
                    &format!("/admin/entries/{id}/discard"),
                    &[],
                    Some(serde_json::json!({ "note": note, "route": route })),
                )
                .await?;
            if api.json {
                return print_json(&raw);
            }
            outln!("{} is {}", r.id, r.status.as_str())?;
            Ok(())
        }
    }
}

pub async fn dlq(api: &ApiArgs, cmd: DlqCmd) -> anyhow::Result<()> {
    match cmd {
        DlqCmd::List {
            filter,
            limit,
            cursor,
        } => {
            let search = SearchArgs::default();
            list(api, Some("dead".into()), &filter, limit, cursor, &search).await
        }
        DlqCmd::Groups { source, route } => super::dead_letters::groups(api, source, route).await,
        DlqCmd::Replay {
            filter:
                FilterArgs {
                    source: Some(source),
                    route: Some(route),
                    ..
                },
            failure: Some(failure),
        } => super::dead_letters::replay_group(api, source, route, failure).await,
        DlqCmd::Replay { filter, .. } => {
            let c = Client::new(api)?;
            let body = ReplayFilter {
                source: filter.source,
                route: filter.route,
                status: Some("dead".into()),
                event_type: filter.event_type,
                since: filter.since,
                until: filter.until,
            };
            let (r, raw): (ReplayResult, _) = c
                .call(
                    reqwest::Method::POST,
                    "/admin/replay",
                    &[],
                    Some(serde_json::to_value(body)?),
                )
                .await?;
            if api.json {
                return print_json(&raw);
            }
            outln!(
                "{} dead deliveries queued for replay{}",
                r.queued,
                r.last_due_at
                    .map(|t| format!("; the last goes out at {t}"))
                    .unwrap_or_default()
            )?;
            Ok(())
        }
    }
}

pub async fn sources(api: &ApiArgs, cmd: SourcesCmd) -> anyhow::Result<()> {
    let c = Client::new(api)?;
    let (path, method) = match &cmd {
        SourcesCmd::List => ("/admin/sources".to_string(), reqwest::Method::GET),
        SourcesCmd::Pause { name, route } => (
            paused_path(name, route.as_deref(), "pause"),
            reqwest::Method::POST,
        ),
        SourcesCmd::Resume { name, route } => (
            paused_path(name, route.as_deref(), "resume"),
            reqwest::Method::POST,
        ),
        SourcesCmd::Handshake { .. }
        | SourcesCmd::Secrets { .. }
        | SourcesCmd::ForgetSecret { .. } => {
            return handshake(&c, api, &cmd).await;
        }
    };
    if let SourcesCmd::List = cmd {
        let (list, raw): (Vec<SourceState>, _) = c.call(method, &path, &[], None).await?;
        if api.json {
            return print_json(&raw);
        }
        let state = |paused: bool| if paused { "paused" } else { "active" }.to_string();
        table(
            &["source", "route", "delivery"],
            list.iter()
                .flat_map(|s| {
                    std::iter::once(vec![s.source.clone(), "(all)".into(), state(s.paused)]).chain(
                        s.routes
                            .iter()
                            .map(|r| vec![s.source.clone(), r.route.clone(), state(r.paused)]),
                    )
                })
                .collect(),
        )?;
        return Ok(());
    }
    let (s, raw): (SourceState, _) = c.call(method, &path, &[], None).await?;
    if api.json {
        return print_json(&raw);
    }
    let word = |paused: bool| if paused { "paused" } else { "resumed" };
    match &cmd {
        SourcesCmd::Pause {
            route: Some(route), ..
        }
        | SourcesCmd::Resume {
            route: Some(route), ..
        } => {
            let paused = s.routes.iter().any(|r| &r.route == route && r.paused);
            outln!("{} route {route}: delivery {}", s.source, word(paused))?;
        }
        _ => outln!("{}: delivery {}", s.source, word(s.paused))?,
    }
    Ok(())
}

/// `hookgate sources handshake | secrets | forget-secret`: a source's secret
/// handshake, and what it established.
async fn handshake(c: &Client, api: &ApiArgs, cmd: &SourcesCmd) -> anyhow::Result<()> {
    let (method, path, body) = match cmd {
        SourcesCmd::Handshake { name, within } => {
            let within = crate::config::parse_duration("--within", within)?;
            let path = format!("/admin/sources/{name}/handshake");
            let body = serde_json::json!({ "within_secs": within.as_secs() });
            let (armed, raw): (ArmedHandshake, _) = c
                .call(reqwest::Method::POST, &path, &[], Some(body))
                .await?;
            if api.json {
                return print_json(&raw);
            }
            return print_armed(&armed);
        }
        SourcesCmd::Secrets { name } => (
            reqwest::Method::GET,
            format!("/admin/sources/{name}/handshake"),
            None,
        ),
        SourcesCmd::ForgetSecret { name, id } => (
            reqwest::Method::DELETE,
            format!("/admin/sources/{name}/secrets/{id}"),
            None,
        ),
        SourcesCmd::List | SourcesCmd::Pause { .. } | SourcesCmd::Resume { .. } => {
            bail!("not a handshake command")
        }
    };
    let (state, raw): (HandshakeState, _) = c.call(method, &path, &[], body).await?;
    if api.json {
        return print_json(&raw);
    }
    match &state.armed_until {
        Some(until) => outln!("{}: handshake armed until {until}", state.source)?,
        None => outln!("{}: handshake not armed", state.source)?,
    }
    secrets_table(&state.secrets)
}

/// An arming: until when, and where its token goes (shown this once).
fn print_armed(armed: &ArmedHandshake) -> anyhow::Result<()> {
    outln!(
        "{}: handshake armed until {}",
        armed.source,
        armed.armed_until
    )?;
    match &armed.target_url {
        Some(url) => outln!(
            "create the webhook with this target URL (it carries the arming's one-time token):\n  {url}"
        )?,
        None => outln!(
            "create the webhook with its target URL ending in ?{}={} (the arming's one-time token; \
             the source has no public_url to show the whole URL)",
            crate::store::TOKEN_PARAM,
            armed.token
        )?,
    }
    outln!("a handshake without the token is refused; arming again makes a new token")?;
    secrets_table(&armed.secrets)
}

fn secrets_table(secrets: &[crate::admin::dto::EstablishedSecret]) -> anyhow::Result<()> {
    table(
        &["secret id", "established at"],
        secrets
            .iter()
            .map(|s| vec![s.id.clone(), s.established_at.clone()])
            .collect(),
    )?;
    Ok(())
}

/// The admin path that pauses or resumes a source or one of its routes.
fn paused_path(name: &str, route: Option<&str>, action: &str) -> String {
    match route {
        Some(r) => format!("/admin/sources/{name}/routes/{r}/{action}"),
        None => format!("/admin/sources/{name}/{action}"),
    }
}

pub async fn stats(api: &ApiArgs) -> anyhow::Result<()> {
    let c = Client::new(api)?;
    let (stats, raw): (Stats, _) = c
        .call(reqwest::Method::GET, "/admin/stats", &[], None)
        .await?;
    if api.json {
        return print_json(&raw);
    }
    let state = |paused: bool| if paused { "paused" } else { "active" }.to_string();
    let age = |a: Option<u64>| {
        a.map(|a| humantime::format_duration(std::time::Duration::from_secs(a)).to_string())
            .unwrap_or_else(|| "-".into())
    };
    let mut rows = Vec::new();
    for s in &stats.sources {
        rows.push(vec![
            s.source.clone(),
            "(entries)".into(),
            state(s.paused),
            s.received.to_string(),
            s.duplicates.to_string(),
            s.unverified.to_string(),
            s.pending.to_string(),
            s.delivered.to_string(),
            s.dead.to_string(),
            s.discarded.to_string(),
            s.filtered.to_string(),
            age(s.oldest_pending_age_seconds),
            "".into(),
        ]);
        for r in &s.routes {
            rows.push(vec![
                s.source.clone(),
                r.route.clone(),
                state(r.paused),
                "".into(),
                "".into(),
                "".into(),
                r.pending.to_string(),
                r.delivered.to_string(),
                r.dead.to_string(),
                r.discarded.to_string(),
                "".into(),
                age(r.oldest_pending_age_seconds),
                r.blocked_keys.to_string(),
            ]);
        }
    }
    table(
        &[
            "source",
            "route",
            "delivery",
            "received",
            "dupes",
            "unverified",
            "pending",
            "delivered",
            "dead",
            "discarded",
            "filtered",
            "oldest pending",
            "blocked keys",
        ],
        rows,
    )?;
    Ok(())
}

/// `hookgate gateways`: the gateways sharing the store, one row each.
pub async fn gateways(api: &ApiArgs) -> anyhow::Result<()> {
    let c = Client::new(api)?;
    let (list, raw): (Gateways, _) = c
        .call(reqwest::Method::GET, "/admin/gateways", &[], None)
        .await?;
    if api.json {
        return print_json(&raw);
    }
    let rows = list
        .gateways
        .iter()
        .map(|g| {
            vec![
                g.id.clone(),
                g.host.clone(),
                g.version.clone(),
                g.started.clone(),
                g.last_seen.clone(),
                if g.alive { "yes" } else { "no" }.to_string(),
            ]
        })
        .collect();
    table(
        &["id", "host", "version", "started", "last seen", "alive"],
        rows,
    )?;
    Ok(())
}
