//! Metrics from the first scrape: every family README documents exists on a fresh
//! gateway with a zero series per configured source, and the shipped alert rules
//! (deploy/prometheus/alerts.yml), evaluated by `promtool test rules` over real
//! scrapes, stay quiet on an idle gateway and fire on a single dead letter.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hookgate::config;
use yaml_rust2::YamlLoader;

use crate::for_each_store;
use crate::forward::source;
use crate::support::*;
use crate::upstream::{Reply, Upstream};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The metric families of README's Observability table.
fn readme_families() -> BTreeSet<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let section = readme
        .split("## Observability")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has an Observability section");
    section
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("| `hookgate_"))
        .filter_map(|row| row.split('|').nth(1))
        .flat_map(|first| {
            first
                .split('`')
                .filter(|w| w.starts_with("hookgate_"))
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// One scrape: `# TYPE` per family, and every sample line as `series → value`, the
/// series written as in the exposition format (`name{label="value",…}`).
pub(crate) struct Scrape {
    types: BTreeMap<String, String>,
    samples: BTreeMap<String, f64>,
}

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut types = BTreeMap::new();
        let mut samples = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut words = rest.split_whitespace();
                if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                    types.insert(name.to_string(), kind.to_string());
                }
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            samples.insert(series.to_string(), value.parse().expect("a sample value"));
        }
        Scrape { types, samples }
    }

    /// The value of the series `name{labels}` (labels as written by the exporter).
    fn value(&self, name: &str, label: &str, value: &str) -> Option<f64> {
        let needle = format!("{label}=\"{value}\"");
        self.samples
            .iter()
            .find(|(series, _)| {
                series.strip_prefix(name).is_some_and(|rest| {
                    rest.starts_with('{')
                        && rest
                            .trim_matches(|c| c == '{' || c == '}')
                            .split(',')
                            .any(|l| l == needle)
                })
            })
            .map(|(_, v)| *v)
    }

    /// The series that carry one of `sources` as `source` or `destinations` as
    /// `destination` (the gateway under test's own, not the rest of this process's).
    pub(crate) fn own(&self, sources: &[&str], destinations: &[&str]) -> BTreeMap<String, f64> {
        let mine = |series: &str| {
            sources
                .iter()
                .any(|s| series.contains(&format!("source=\"{s}\"")))
                || destinations
                    .iter()
                    .any(|d| series.contains(&format!("destination=\"{d}\"")))
        };
        self.samples
            .iter()
            .filter(|(k, _)| mine(k))
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }
}

pub(crate) async fn scrape(client: &reqwest::Client, admin: &str) -> Scrape {
    Scrape::parse(&get_text(client, &format!("{admin}/metrics")).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_scrape_lists_every_documented_family_with_zero_series() {
    let h = StoreHandle::new(Backend::Embedded);
    let sources = format!(
        "{}{}",
        source(
            "first_a",
            "http://127.0.0.1:9/a",
            "allow_ips = \"provider\"\n[sources.provider_options]\nfetch_base = \"http://127.0.0.1:9\"\n\
             [sources.reconcile]\napi_key_env = \"STRIPE_KEY\"\nendpoint = \"we_1\"\n\
             api_base = \"http://127.0.0.1:9\"\ninterval = \"1h\"\n"
        ),
        source("first_b", "http://user:pw@127.0.0.1:19/b", ""),
    ) + &source("first_q", "nats://127.0.0.1:9/first", "")
        + &source("first_p", "pull", "pull_token_env = \"PULL_TOKEN\"\n");
    let env = |v: &str| match v {
        "STRIPE_KEY" => Some("sk_test_x".to_string()),
        other => crate::pull::env(other),
    };
    let cfg = config::from_toml_str(&format!("{}\n{sources}", h.toml()), &env).unwrap();
    let gw = Gateway::start(cfg).await;
    let s = scrape(&http(), &gw.admin).await;

    let documented = readme_families();
    assert!(documented.len() >= 13, "{documented:?}");
    for family in &documented {
        let kind = s
            .types
            .get(family)
            .unwrap_or_else(|| panic!("{family} is missing from the first scrape"));
        match family.as_str() {
            "hookgate_circuit_breaker_state" => {
                for d in ["http://127.0.0.1:9", "http://127.0.0.1:19"] {
                    assert_eq!(s.value(family, "destination", d), Some(0.0), "{family} {d}");
                }
            }
            "hookgate_broker_connected" => {
                assert_eq!(
                    s.value(family, "broker", "nats://127.0.0.1:9"),
                    Some(0.0),
                    "{family}: a broker no delivery has connected to yet"
                );
            }
            "hookgate_alerts_sent_total" => {
                for r in ["sent", "failed"] {
                    assert!(s.value(family, "result", r).is_some(), "{family} {r}");
                }
            }
            "hookgate_log_lines_dropped_total"
            | "hookgate_trace_spans_exported_total"
            | "hookgate_trace_spans_failed_total" => {
                assert!(s.samples.contains_key(family), "{family}");
            }
            "hookgate_connections_open"
            | "hookgate_connections_idle"
            | "hookgate_connections_shed_total"
            | "hookgate_connections_refused_total"
            | "hookgate_request_bodies_cut_total" => {
                for l in ["ingest", "admin"] {
                    assert!(s.value(family, "listener", l).is_some(), "{family} {l}");
                }
            }
            // Process-wide (every in-process gateway of the test binary shares the
            // recorder): present, whatever other tests made of it.
            "hookgate_store_ready"
            | "hookgate_store_unsafe"
            | "hookgate_store_sync_standbys"
            | "hookgate_ingest_storing"
            | "hookgate_ingest_saturated_windows_total"
            | "hookgate_gateway_fenced"
            | "hookgate_heartbeat_failures_total"
            | "hookgate_leases_taken_over_total"
            | "hookgate_config_reloads_total"
            | "hookgate_config_reload_failures_total" => {
                assert!(s.samples.contains_key(family), "{family}");
            }
            // One series per version this process's gateways run.
            "hookgate_config_version_info" => {
                let prefix = format!("{family}{{version=\"");
                assert!(
                    s.samples
                        .iter()
                        .any(|(k, v)| k.starts_with(&prefix) && *v == 1.0),
                    "{family}"
                );
            }
            "hookgate_store_write_wait_seconds" => {
                for k in ["accept", "claim", "complete", "other"] {
                    let name = format!("{family}_count");
                    assert!(s.value(&name, "kind", k).is_some(), "{family} {k}");
                }
            }
            // Per provider list: the one source `first_a` takes.
            "hookgate_allowlist_ranges"
            | "hookgate_allowlist_refresh_failing"
            | "hookgate_allowlist_fetched_timestamp_seconds"
            | "hookgate_allowlist_refreshes_total"
            | "hookgate_allowlist_changes_total" => {
                assert!(s.value(family, "provider", "stripe").is_some(), "{family}");
            }
            // Per reconciled source: `first_a` (its API is unreachable, so its pass
            // at start fails as `transport`).
            "hookgate_reconcile_found_total"
            | "hookgate_reconcile_recovered_total"
            | "hookgate_reconcile_last_success_timestamp_seconds" => {
                assert_eq!(s.value(family, "source", "first_a"), Some(0.0), "{family}");
                assert_eq!(s.value(family, "source", "first_b"), None, "{family}");
            }
            "hookgate_reconcile_errors_total" => {
                let series = format!("{family}{{source=\"first_a\",kind=\"unauthorized\"}}");
                assert_eq!(s.samples.get(&series), Some(&0.0), "{series}");
            }
            // Per pull route: `first_p`'s only.
            "hookgate_pull_backlog"
            | "hookgate_pull_oldest_age_seconds"
            | "hookgate_pull_leased"
            | "hookgate_pull_acked_total"
            | "hookgate_pull_consumer_seen_timestamp_seconds" => {
                assert_eq!(s.value(family, "source", "first_p"), Some(0.0), "{family}");
                assert_eq!(s.value(family, "source", "first_a"), None, "{family}");
            }
            "hookgate_store_readiness_changes_total" => {
                for r in ["true", "false"] {
                    assert!(s.value(family, "ready", r).is_some(), "{family} {r}");
                }
            }
            _ => {
                // A histogram's series: its count.
                let name = if kind == "histogram" {
                    format!("{family}_count")
                } else {
                    family.clone()
                };
                for src in ["first_a", "first_b"] {
                    assert_eq!(s.value(&name, "source", src), Some(0.0), "{name} {src}");
                }
            }
        }
    }
    // Every label value of a labelled counter, at zero.
    for (family, label, value) in [
        ("hookgate_ingest_requests_total", "outcome", "store_error"),
        ("hookgate_ingest_unverified_total", "reason", "stale"),
        ("hookgate_delivery_attempts_total", "result", "connect"),
        ("hookgate_deliveries_total", "outcome", "dead"),
    ] {
        let per_route = family.starts_with("hookgate_deliver");
        let series = if per_route {
            format!("{family}{{source=\"first_a\",route=\"default\",{label}=\"{value}\"}}")
        } else {
            format!("{family}{{source=\"first_a\",{label}=\"{value}\"}}")
        };
        assert!(
            s.samples.get(&series) == Some(&0.0),
            "{series} missing or not 0"
        );
    }
    // No userinfo of a destination ever becomes a label.
    assert!(!s.samples.keys().any(|k| k.contains("pw@")));
    gw.stop().await;
}

/// The install command named when promtool is missing (CI runs it, see .ci/run).
const PROMTOOL_INSTALL: &str = "apt-get install -y --no-install-recommends prometheus";

pub(crate) fn promtool() -> std::path::PathBuf {
    let found = Command::new("promtool").arg("--version").output();
    match found {
        Ok(out) if out.status.success() => "promtool".into(),
        _ => panic!(
            "promtool is needed to evaluate deploy/prometheus/alerts.yml; install it with \
             `{PROMTOOL_INSTALL}` (Debian's package ships /usr/bin/promtool)"
        ),
    }
}

/// The shipped rules as a promtool rule file, without their annotations (their
/// `{{ $value }}` would have to be predicted to the last digit; the expressions,
/// `for` and labels are what decides whether an alert fires).
fn rules_without_annotations() -> (serde_json::Value, Vec<String>) {
    let text = std::fs::read_to_string(root().join("deploy/prometheus/alerts.yml")).unwrap();
    let docs = YamlLoader::load_from_str(&text).unwrap();
    let mut names = Vec::new();
    let mut groups = Vec::new();
    for g in docs[0]["groups"].as_vec().expect("groups") {
        let mut rules = Vec::new();
        for r in g["rules"].as_vec().expect("rules") {
            let alert = r["alert"].as_str().expect("alert rules only").to_string();
            let mut rule = serde_json::json!({
                "alert": alert,
                "expr": r["expr"].as_str().expect("expr"),
            });
            if let Some(f) = r["for"].as_str() {
                rule["for"] = f.into();
            }
            if let Some(labels) = r["labels"].as_hash() {
                let mut out = serde_json::Map::new();
                for (k, v) in labels {
                    out.insert(k.as_str().unwrap().to_string(), v.as_str().unwrap().into());
                }
                rule["labels"] = out.into();
            }
            names.push(alert);
            rules.push(rule);
        }
        groups.push(serde_json::json!({"name": g["name"].as_str(), "rules": rules}));
    }
    (serde_json::json!({ "groups": groups }), names)
}

/// Run `promtool test rules` on `tests` (JSON is YAML) against the shipped rules.
pub(crate) fn promtool_test(tests: Vec<serde_json::Value>) {
    let promtool = promtool();
    let dir = tempfile::tempdir().unwrap();
    let (rules, _) = rules_without_annotations();
    std::fs::write(dir.path().join("rules.yml"), rules.to_string()).unwrap();
    let file = serde_json::json!({
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": tests,
    });
    std::fs::write(dir.path().join("test.yml"), file.to_string()).unwrap();
    let out = Command::new(promtool)
        .current_dir(dir.path())
        .args(["test", "rules", "test.yml"])
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool test rules failed:\n{}\n{}\ninput: {file:#}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// promtool input series: each series of `phases` (value, minutes) in order, one
/// sample a minute. A series absent from a phase has no sample there.
pub(crate) fn input_series(phases: &[(&BTreeMap<String, f64>, u32)]) -> Vec<serde_json::Value> {
    let names: BTreeSet<&String> = phases.iter().flat_map(|(s, _)| s.keys()).collect();
    names
        .into_iter()
        .map(|name| {
            let values: Vec<String> = phases
                .iter()
                .map(|(s, minutes)| match s.get(name) {
                    Some(v) => format!("{v}+0x{}", minutes - 1),
                    None => format!("_x{minutes}"),
                })
                .collect();
            serde_json::json!({"series": name, "values": values.join(" ")})
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_alert_rules_are_quiet_when_idle_and_fire_on_one_dead_letter() {
    let _ = promtool();
    let (_, alerts) = rules_without_annotations();
    let refuses = Upstream::scripted(|_, _| Reply::Status(404)).await;
    let idle = Upstream::ok().await;
    let h = StoreHandle::new(Backend::Embedded);
    // (An idle pull route: its consumer was never seen, and it holds nothing.)
    let sources = format!(
        "{}{}{}",
        source("rules_dead", &refuses.url, ""),
        source("rules_idle", &idle.url, ""),
        source("rules_pull", "pull", "pull_token_env = \"PULL_TOKEN\"\n")
    );
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\nmaintenance_interval = \"100ms\"\n{sources}",
        h.toml()
    );
    let cfg = config::from_toml_str(&text, &crate::pull::env).unwrap();
    let gw = Gateway::start(cfg).await;
    let c = http();
    // Every family a rule reads is in the first scrape, though no source here has
    // an allowlist (the allowlist families carry one series without a provider).
    let first = scrape(&c, &gw.admin).await;
    let (rules, _) = rules_without_annotations();
    for group in rules["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let expr = rule["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if !word.starts_with("hookgate_") {
                    continue;
                }
                let family = ["_bucket", "_count", "_sum"]
                    .iter()
                    .find_map(|suffix| word.strip_suffix(suffix))
                    .filter(|f| first.types.contains_key(*f))
                    .unwrap_or(word);
                assert!(
                    first.types.contains_key(family),
                    "{family}, read by {}, is missing from the first scrape",
                    rule["alert"]
                );
            }
        }
    }
    let own_sources = ["rules_dead", "rules_idle", "rules_pull"];
    let own_destinations = [
        hookgate::forward::origin(&refuses.url),
        hookgate::forward::origin(&idle.url),
    ];
    let own_destinations: Vec<&str> = own_destinations.iter().map(String::as_str).collect();
    let mut fresh = scrape(&c, &gw.admin)
        .await
        .own(&own_sources, &own_destinations);
    // The allowlist families' series without a provider: the rules leave it out.
    for family in [
        "hookgate_allowlist_ranges",
        "hookgate_allowlist_refresh_failing",
    ] {
        assert_eq!(first.samples.get(family), Some(&0.0), "{family}");
        fresh.insert(family.to_string(), 0.0);
    }
    assert!(
        fresh
            .keys()
            .any(|k| k.starts_with("hookgate_dead_lettered_total")),
        "{fresh:?}"
    );

    // One webhook; its destination refuses it for good (404): one dead letter.
    let body = event_body("stripe", "evt_rules_1");
    let (status, json) = post_stripe_signed(&c, &gw.ingest, "rules_dead", &body).await;
    assert_eq!(status, 200, "{json}");
    let dead = wait_until_ok(
        "the dead letter to show in the metrics",
        Duration::from_secs(15),
        async || {
            let s = scrape(&c, &gw.admin).await;
            if s.value("hookgate_dead_lettered_total", "source", "rules_dead") == Some(1.0)
                && s.value("hookgate_dead_entries", "source", "rules_dead") == Some(1.0)
            {
                Ok(s.own(&own_sources, &own_destinations))
            } else {
                Err("not there yet")
            }
        },
    )
    .await;
    gw.stop().await;

    // Idle for two hours: no rule fires (ratios of nothing are empty, not 0).
    let quiet: Vec<serde_json::Value> = [5, 30, 60, 119]
        .iter()
        .flat_map(|m| {
            alerts.iter().map(move |a| {
                serde_json::json!({"eval_time": format!("{m}m"), "alertname": a, "exp_alerts": []})
            })
        })
        .collect();
    // Fresh for 5 minutes, then the dead letter: HookgateDeadLetters fires at once,
    // and only while the 15-minute window holds the increase.
    let fires = |m: u32| {
        serde_json::json!({
            "eval_time": format!("{m}m"),
            "alertname": "HookgateDeadLetters",
            "exp_alerts": [{"exp_labels": {"severity": "warning", "source": "rules_dead", "route": "default"}}],
        })
    };
    let quiet_dead = |m: u32| serde_json::json!({"eval_time": format!("{m}m"), "alertname": "HookgateDeadLetters", "exp_alerts": []});
    promtool_test(vec![
        serde_json::json!({
            "interval": "1m",
            "input_series": input_series(&[(&fresh, 120)]),
            "alert_rule_test": quiet,
        }),
        serde_json::json!({
            "interval": "1m",
            "input_series": input_series(&[(&fresh, 5), (&dead, 40)]),
            "alert_rule_test": [quiet_dead(4), fires(5), fires(12), quiet_dead(25)],
        }),
    ]);
}

/// The allowlist rules on the gauges a provider's list raises: a list never known
/// (`hookgate_allowlist_ranges` 0) pages within minutes and clears once one is; a
/// refresh failing for 30 minutes warns while the list in force stays.
#[test]
fn shipped_allowlist_rules_fire_on_a_list_unknown_or_stale() {
    let _ = promtool();
    let series = |name: &str, values: &str| serde_json::json!({"series": format!("{name}{{provider=\"github\"}}"), "values": values});
    let at = |m: u32, alert: &str, labels: Option<&str>| {
        let exp = match labels {
            Some(severity) => {
                serde_json::json!([{"exp_labels": {"severity": severity, "provider": "github"}}])
            }
            None => serde_json::json!([]),
        };
        serde_json::json!({"eval_time": format!("{m}m"), "alertname": alert, "exp_alerts": exp})
    };
    promtool_test(vec![serde_json::json!({
        "interval": "1m",
        // No list for 10 minutes, then 12 ranges; the refresh fails from minute 10.
        "input_series": [
            series("hookgate_allowlist_ranges", "0x9 12x60"),
            series("hookgate_allowlist_refresh_failing", "0x9 1x60"),
        ],
        "alert_rule_test": [
            at(3, "HookgateAllowlistEmpty", None),
            at(6, "HookgateAllowlistEmpty", Some("critical")),
            at(12, "HookgateAllowlistEmpty", None),
            at(35, "HookgateAllowlistStale", None),
            at(45, "HookgateAllowlistStale", Some("warning")),
        ],
    })]);
}

/// `HookgateSourceRefusing` over real scrapes: a source whose requests mostly fail
/// verification (a secret rotated on the provider's side) fires it with the dominant
/// reason, within minutes, and it clears once the 10-minute window has passed; a
/// source with a few refusals among many accepted, and one with fewer than 20
/// requests, stay quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_refusing_most_requests_fires_with_its_dominant_reason() {
    let _ = promtool();
    let up = Upstream::ok().await;
    let h = StoreHandle::new(Backend::Embedded);
    let names = ["refusing_rotated", "refusing_few", "refusing_mostly_ok"];
    let sources: String = names.iter().map(|n| source(n, &up.url, "")).collect();
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\n{sources}",
        h.toml()
    );
    let gw = Gateway::start(config::from_toml_str(&text, &|_| None).unwrap()).await;
    let c = http();
    let destinations = [hookgate::forward::origin(&up.url)];
    let destinations: Vec<&str> = destinations.iter().map(String::as_str).collect();
    let fresh = scrape(&c, &gw.admin).await.own(&names, &destinations);
    // (source, genuine, signed with the old secret)
    let traffic = [
        ("refusing_rotated", 2, 30),
        ("refusing_few", 0, 10),
        ("refusing_mostly_ok", 30, 3),
    ];
    for (source, genuine, forged) in traffic {
        for i in 0..genuine {
            let body = event_body("stripe", &format!("evt_{source}_{i}"));
            let (status, json) = post_stripe_signed(&c, &gw.ingest, source, &body).await;
            assert_eq!(status, 200, "{json}");
        }
        for i in 0..forged {
            let body = event_body("stripe", &format!("evt_{source}_old_{i}"));
            let headers = sign_headers(
                "stripe",
                "whsec_before_the_rotation",
                &body,
                now_secs(),
                "x",
            );
            let (status, _) = post_raw(&c, &gw.ingest, source, &body, &headers).await;
            assert_eq!(status, 401, "{source}");
        }
    }
    let after = wait_until_ok(
        "every request counted",
        Duration::from_secs(10),
        async || {
            let s = scrape(&c, &gw.admin).await;
            let counted = traffic.iter().all(|(source, _, forged)| {
                let refused: f64 = s
                    .samples
                    .iter()
                    .filter(|(series, _)| {
                        series.starts_with("hookgate_ingest_unverified_total{")
                            && series.contains(&format!("source=\"{source}\""))
                    })
                    .map(|(_, v)| v)
                    .sum();
                refused == f64::from(*forged)
            });
            if counted {
                Ok(s.own(&names, &destinations))
            } else {
                Err("not yet")
            }
        },
    )
    .await;
    gw.stop().await;
    let at = |m: u32, source: &str, firing: bool| {
        let exp = if firing {
            serde_json::json!([{"exp_labels": {"severity": "warning", "source": source, "reason": "mismatch"}}])
        } else {
            serde_json::json!([])
        };
        serde_json::json!({"eval_time": format!("{m}m"), "alertname": "HookgateSourceRefusing", "exp_alerts": exp})
    };
    // Idle for 5 minutes, then the traffic above, counted by the next scrape.
    promtool_test(vec![serde_json::json!({
        "interval": "1m",
        "input_series": input_series(&[(&fresh, 5), (&after, 40)]),
        "alert_rule_test": [
            at(4, "refusing_rotated", false),
            at(8, "refusing_rotated", true),
            at(13, "refusing_rotated", true),
            at(20, "refusing_rotated", false),
        ],
    })]);
}

/// Silence on every store: a source with `[sources.expect] at_least` that received
/// fewer webhooks in its window is quiet (`hookgate_source_quiet` 1) within a
/// maintenance pass, and no longer once enough arrived; a source without an
/// expectation never is. Over those scrapes, `HookgateSourceQuiet` fires after 5
/// minutes for each quiet source and stops for the one that recovered.
async fn silence(backend: Backend) {
    let _ = promtool();
    let up = Upstream::ok().await;
    let h = StoreHandle::new(backend);
    // Names of this backend's own: the metrics registry is the test process's, and
    // the other backends' runs of this test set the same gauge meanwhile.
    let b = format!("{backend:?}").to_lowercase();
    let names = [
        format!("quiet_never_sent_{b}"),
        format!("quiet_too_few_{b}"),
        format!("quiet_unwatched_{b}"),
    ];
    let names: [&str; 3] = [&names[0], &names[1], &names[2]];
    let sources = format!(
        "{}{}{}",
        source(names[0], &up.url, "[sources.expect]\nat_least = \"1/1m\"\n"),
        source(names[1], &up.url, "[sources.expect]\nat_least = \"3/5m\"\n"),
        source(names[2], &up.url, ""),
    );
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\nmaintenance_interval = \"100ms\"\n{sources}",
        h.toml()
    );
    let gw = Gateway::start(config::from_toml_str(&text, &|_| None).unwrap()).await;
    let c = http();
    let destinations = [hookgate::forward::origin(&up.url)];
    let destinations: Vec<&str> = destinations.iter().map(String::as_str).collect();
    let quiet_of = |s: &Scrape, source: &str| s.value("hookgate_source_quiet", "source", source);
    let when = async |what: &str, want: [f64; 3]| {
        wait_until_ok(what, Duration::from_secs(15), async || {
            let s = scrape(&c, &gw.admin).await;
            let seen: Vec<Option<f64>> = names.iter().map(|n| quiet_of(&s, n)).collect();
            if seen == want.map(Some) {
                Ok(s.own(&names, &destinations))
            } else {
                Err(format!("{seen:?}"))
            }
        })
        .await
    };
    let quiet = when("both watched sources quiet", [1.0, 1.0, 0.0]).await;
    for i in 0..2 {
        let body = event_body("stripe", &format!("evt_quiet_{i}"));
        let (status, json) = post_stripe_signed(&c, &gw.ingest, names[1], &body).await;
        assert_eq!(status, 200, "{json}");
    }
    // Two of three: still quiet (a pass or two later, with the two counted).
    quiet_for(
        "two webhooks are fewer than three",
        Duration::from_millis(400),
        async || {
            let s = scrape(&c, &gw.admin).await;
            quiet_of(&s, names[1]) == Some(1.0)
        },
    )
    .await;
    let body = event_body("stripe", "evt_quiet_2");
    let (status, json) = post_stripe_signed(&c, &gw.ingest, names[1], &body).await;
    assert_eq!(status, 200, "{json}");
    let recovered = when("three arrived: no longer quiet", [1.0, 0.0, 0.0]).await;
    gw.stop().await;
    let at = |m: u32, quiet: &[&str]| {
        let exp: Vec<serde_json::Value> = quiet
            .iter()
            .map(|s| serde_json::json!({"exp_labels": {"severity": "warning", "source": s}}))
            .collect();
        serde_json::json!({"eval_time": format!("{m}m"), "alertname": "HookgateSourceQuiet", "exp_alerts": exp})
    };
    promtool_test(vec![serde_json::json!({
        "interval": "1m",
        "input_series": input_series(&[(&quiet, 10), (&recovered, 20)]),
        "alert_rule_test": [
            at(3, &[]),
            at(7, &[names[0], names[1]]),
            at(15, &[names[0]]),
        ],
    })]);
}
for_each_store!(a_source_below_its_expected_traffic_is_quiet, super::silence);

/// `HookgatePullConsumerAway` fires when a pull route holds deliveries and no
/// consumer pulled for 15 minutes, and `HookgateBacklogAge` leaves pull routes to it
/// (a pull route's backlog waits for its consumers by design).
#[test]
fn shipped_pull_rules_fire_when_consumers_are_away_not_on_the_backlog_age() {
    let _ = promtool();
    let series = |name: &str, values: &str| serde_json::json!({"series": format!("{name}{{source=\"shop\",route=\"dev\"}}"), "values": values});
    let at = |m: u32, alert: &str, fires: bool| {
        let exp = if fires {
            serde_json::json!([{"exp_labels": {"severity": "warning", "source": "shop", "route": "dev"}}])
        } else {
            serde_json::json!([])
        };
        serde_json::json!({"eval_time": format!("{m}m"), "alertname": alert, "exp_alerts": exp})
    };
    promtool_test(vec![serde_json::json!({
        "interval": "1m",
        // 5 deliveries wait for 40 minutes; a consumer pulls every minute until
        // minute 10, then goes away.
        "input_series": [
            series("hookgate_pull_backlog", "5x40"),
            series("hookgate_pull_consumer_seen_timestamp_seconds", "60+60x10 660x30"),
            series("hookgate_route_oldest_pending_age_seconds", "0+60x40"),
        ],
        "alert_rule_test": [
            at(12, "HookgatePullConsumerAway", false),
            at(24, "HookgatePullConsumerAway", false),
            at(27, "HookgatePullConsumerAway", true),
            at(35, "HookgateBacklogAge", false),
        ],
    })]);
}
