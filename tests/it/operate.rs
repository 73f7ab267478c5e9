//! Operating hookgate: metrics move as the flow goes ingest → retry → dead, the alert
//! webhook gets one batched message, the shipped alert rules and dashboard use only
//! metrics the server exports, and every file in deploy/ parses and is accepted.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use hookgate::config;
use yaml_rust2::{Yaml, YamlLoader};

use crate::forward::{FAST_RETRY, ingest_many, source};
use crate::support::*;
use crate::upstream::{Reply, Upstream};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Parse the Prometheus text format into `name{labels}` → value, plus the set of
/// metric names declared by `# TYPE`.
fn scrape(text: &str) -> (HashMap<String, f64>, BTreeSet<String>) {
    let mut values = HashMap::new();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(name) = rest.split_whitespace().next() {
                names.insert(name.to_string());
            }
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some((k, v)) = line.rsplit_once(' ')
            && let Ok(v) = v.parse::<f64>()
        {
            values.insert(k.to_string(), v);
        }
    }
    (values, names)
}

/// The value of `name` with exactly these labels (in any order).
fn value(values: &HashMap<String, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let want: BTreeSet<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    values
        .iter()
        .find(|(k, _)| {
            let Some(rest) = k.strip_prefix(name) else {
                return false;
            };
            let Some(inner) = rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) else {
                return labels.is_empty() && rest.is_empty();
            };
            let got: BTreeSet<String> = inner.split(',').map(String::from).collect();
            got == want
        })
        .map(|(_, v)| *v)
        .unwrap_or(0.0)
}

fn referenced_metrics(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(pos) = text[i..].find("hookgate_") {
        let start = i + pos;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        out.insert(text[start..end].to_string());
        i = end;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_alerts_and_dashboards_agree_with_the_server() {
    let h = StoreHandle::new(Backend::Embedded);
    let flow = Upstream::scripted(|_, n| Reply::Status(if n == 0 { 503 } else { 404 })).await;
    let gone = Upstream::scripted(|_, _| Reply::Status(404)).await;
    let alert_hook = Upstream::ok().await;
    let sources = format!(
        "{}{}{}",
        source("metrics_flow", &flow.url, FAST_RETRY),
        source("alerted", &gone.url, FAST_RETRY),
        source("pulled", "pull", "pull_token_env = \"PULL_TOKEN\"\n")
    );
    let text = format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\nmaintenance_interval = \"200ms\"\nlease = \"15s\"\n\
         [alerts]\nwebhook_url = \"{}/alert\"\ninterval = \"4s\"\n{sources}",
        h.toml(),
        alert_hook.url
    );
    let cfg = config::from_toml_str(&text, &crate::pull::env).unwrap();
    let gw = Gateway::start(cfg).await;
    // 20 entries that die at once: one batched alert.
    ingest_many(&gw.ingest, "alerted", "evt_alert", 20).await;

    // ingest (accepted, duplicate, unverified) → attempt 503 → retry → 404 → dead
    let c = http();
    let body = event_body("stripe", "evt_metrics_flow");
    let signed = sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), "x");
    let forged = sign_headers("stripe", "whsec_other", &body, now_secs(), "x");
    for (headers, status) in [(&signed, 200), (&signed, 200), (&forged, 401)] {
        let (st, json) = post_raw(&c, &gw.ingest, "metrics_flow", &body, headers).await;
        assert_eq!(st, status, "{json}");
    }
    flow.wait_for(Duration::from_secs(10), "two attempts", |r| r.len() >= 2)
        .await;

    let (values, names) = wait_until_ok(
        "the metrics to settle",
        Duration::from_secs(15),
        async || {
            let text = c
                .get(format!("{}/metrics", gw.admin))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let (values, names) = scrape(&text);
            let settled = value(
                &values,
                "hookgate_dead_entries",
                &[("source", "metrics_flow")],
            ) == 1.0
                && value(&values, "hookgate_dead_entries", &[("source", "alerted")]) == 20.0
                && value(&values, "hookgate_alerts_sent_total", &[("result", "sent")]) >= 1.0;
            if settled {
                Ok((values, names))
            } else {
                Err(format!("\n{text}"))
            }
        },
    )
    .await;
    let src = ("source", "metrics_flow");
    let route = ("route", "default");
    let expect = [
        (
            "hookgate_ingest_requests_total",
            vec![src, ("outcome", "accepted")],
            1.0,
        ),
        (
            "hookgate_ingest_requests_total",
            vec![src, ("outcome", "duplicate")],
            1.0,
        ),
        (
            "hookgate_ingest_requests_total",
            vec![src, ("outcome", "unverified")],
            1.0,
        ),
        (
            "hookgate_ingest_unverified_total",
            vec![src, ("reason", "mismatch")],
            1.0,
        ),
        (
            "hookgate_delivery_attempts_total",
            vec![src, route, ("result", "5xx")],
            1.0,
        ),
        (
            "hookgate_delivery_attempts_total",
            vec![src, route, ("result", "4xx")],
            1.0,
        ),
        (
            "hookgate_deliveries_total",
            vec![src, route, ("outcome", "retry")],
            1.0,
        ),
        (
            "hookgate_deliveries_total",
            vec![src, route, ("outcome", "dead")],
            1.0,
        ),
        ("hookgate_retries_scheduled_total", vec![src, route], 1.0),
        ("hookgate_dead_lettered_total", vec![src, route], 1.0),
        ("hookgate_pending_entries", vec![src], 0.0),
        ("hookgate_route_pending_deliveries", vec![src, route], 0.0),
        ("hookgate_ingest_ack_seconds_count", vec![src], 2.0),
        ("hookgate_delivery_seconds_count", vec![src, route], 2.0),
        (
            "hookgate_dead_lettered_total",
            vec![("source", "alerted"), route],
            20.0,
        ),
    ];
    for (name, labels, want) in expect {
        assert_eq!(value(&values, name, &labels), want, "{name} {labels:?}");
    }
    // No unbounded labels: unknown sources are one label value, no ids anywhere.
    assert!(
        values
            .keys()
            .all(|k| !k.contains("evt_") && !k.contains("entry_id"))
    );

    // One message for the 20 dead entries of "alerted", with count and reasons. (The
    // sent counter above may count only the other source's message so far.)
    let for_alerted = |r: &[crate::upstream::Received]| {
        r.iter().any(|m| {
            serde_json::from_slice::<serde_json::Value>(&m.body).unwrap()["source"] == "alerted"
        })
    };
    alert_hook
        .wait_for(
            Duration::from_secs(10),
            "the alert for \"alerted\"",
            for_alerted,
        )
        .await;
    let alerts: Vec<serde_json::Value> = alert_hook
        .received()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .filter(|m: &serde_json::Value| m["source"] == "alerted")
        .collect();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0]["dead"], 20);
    let text = alerts[0]["text"].as_str().unwrap();
    assert!(
        text.contains("20 deliveries") && text.contains("HTTP 404"),
        "{text}"
    );

    // The shipped rules and dashboard reference only metrics the server exports.
    for file in [
        "deploy/prometheus/alerts.yml",
        "deploy/grafana/hookgate-dashboard.json",
    ] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        let used = referenced_metrics(&text);
        assert!(!used.is_empty(), "{file} references no metric");
        for m in used {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| m.strip_suffix(s).filter(|b| names.contains(*b)))
                .unwrap_or(&m);
            assert!(
                names.contains(base),
                "{file} uses {m}, which the server does not export"
            );
        }
    }
    gw.stop().await;
}

fn yaml_docs(file: &str) -> Vec<Yaml> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn deploy_files_parse_and_hold_together() {
    // Kubernetes manifests.
    let mut kinds = Vec::new();
    let mut configmap_toml = None;
    for f in [
        "configmap.yaml",
        "secret.yaml",
        "deployment.yaml",
        "service.yaml",
        "pdb.yaml",
        "networkpolicy.yaml",
    ] {
        for doc in yaml_docs(&format!("deploy/k8s/{f}")) {
            let kind = doc["kind"]
                .as_str()
                .unwrap_or_else(|| panic!("{f}: no kind"))
                .to_string();
            if kind == "Deployment" {
                let spec = &doc["spec"];
                assert_eq!(spec["replicas"].as_i64(), Some(2));
                let pod = &spec["template"]["spec"];
                assert!(pod["terminationGracePeriodSeconds"].as_i64().unwrap() >= 25);
                let c = &pod["containers"][0];
                assert_eq!(
                    c["livenessProbe"]["httpGet"]["path"].as_str(),
                    Some("/healthz")
                );
                assert_eq!(
                    c["readinessProbe"]["httpGet"]["path"].as_str(),
                    Some("/readyz")
                );
                // The probes go to the probe listener, which the NetworkPolicy
                // admits only from the kubelet and Prometheus.
                for probe in ["livenessProbe", "readinessProbe"] {
                    assert_eq!(c[probe]["httpGet"]["port"].as_str(), Some("probes"));
                }
                let ports: Vec<(&str, i64)> = c["ports"]
                    .as_vec()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        (
                            p["name"].as_str().unwrap(),
                            p["containerPort"].as_i64().unwrap(),
                        )
                    })
                    .collect();
                assert_eq!(ports, [("ingest", 8080), ("probes", 8082)]);
                assert!(!c["resources"]["requests"].is_badvalue());
            }
            if kind == "ConfigMap" {
                configmap_toml = doc["data"]["hookgate.toml"].as_str().map(String::from);
            }
            if kind == "NetworkPolicy" {
                let rules = doc["spec"]["ingress"].as_vec().unwrap();
                let ports: Vec<&str> = rules
                    .iter()
                    .map(|r| r["ports"][0]["port"].as_str().unwrap())
                    .collect();
                assert_eq!(ports, ["ingest", "probes"], "nothing else is admitted");
                let probes = &rules[1]["from"][0];
                assert_eq!(
                    probes["podSelector"]["matchLabels"]["app.kubernetes.io/name"].as_str(),
                    Some("prometheus")
                );
            }
            kinds.push(kind);
        }
    }
    for k in [
        "ConfigMap",
        "Secret",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
    ] {
        assert!(kinds.iter().any(|x| x == k), "no {k} in deploy/k8s");
    }
    let k8s_config = configmap_toml.as_deref().unwrap_or_default();
    assert!(k8s_config.contains("listen = \"127.0.0.1:8081\""));
    assert!(k8s_config.contains("probe_listen = \"0.0.0.0:8082\""));
    // Compose: hookgate + Redis with the shipped redis.conf.
    let compose = &yaml_docs("deploy/docker-compose.yml")[0];
    assert!(!compose["services"]["hookgate"].is_badvalue());
    let redis_cmd = format!("{:?}", compose["services"]["redis"]["command"]);
    assert!(redis_cmd.contains("redis.conf"), "{redis_cmd}");
    let redis_conf = std::fs::read_to_string(root().join("deploy/redis.conf")).unwrap();
    assert!(redis_conf.lines().any(|l| l.trim() == "appendfsync always"));
    assert!(
        redis_conf.contains("everysec"),
        "the trade-off is written down"
    );
    // Compose with PostgreSQL: the durability settings hookgate requires, written out.
    let compose_pg = &yaml_docs("deploy/docker-compose.postgres.yml")[0];
    let pg_cmd = format!("{:?}", compose_pg["services"]["postgres"]["command"]);
    for want in ["fsync=on", "synchronous_commit=on"] {
        assert!(pg_cmd.contains(want), "compose's postgres lacks {want}");
    }
    assert!(!compose_pg["services"]["hookgate"].is_badvalue());
    // Kubernetes with PostgreSQL: a CloudNativePG cluster with a synchronous standby,
    // and hookgate's configuration requiring one.
    let mut pg_toml = None;
    let mut cluster = false;
    for f in ["cluster.yaml", "configmap.yaml", "deployment.patch.yaml"] {
        for doc in yaml_docs(&format!("deploy/k8s/postgres/{f}")) {
            match doc["kind"].as_str() {
                Some("Cluster") => {
                    let spec = &doc["spec"];
                    assert!(spec["instances"].as_i64().unwrap() >= 2, "{f}");
                    assert!(
                        spec["postgresql"]["synchronous"]["number"]
                            .as_i64()
                            .unwrap()
                            >= 1,
                        "{f}: a synchronous standby"
                    );
                    cluster = true;
                }
                Some("ConfigMap") => {
                    pg_toml = doc["data"]["hookgate.toml"].as_str().map(String::from);
                }
                _ => {}
            }
        }
    }
    assert!(cluster, "no Cluster in deploy/k8s/postgres");
    let pg_toml = pg_toml.expect("hookgate.toml in deploy/k8s/postgres");
    assert!(pg_toml.contains("kind = \"postgres\""));
    assert!(pg_toml.contains("require_sync_standby = true"));
    // Prometheus rules and the dashboard.
    let rules = &yaml_docs("deploy/prometheus/alerts.yml")[0];
    let rules = rules["groups"][0]["rules"].as_vec().unwrap();
    assert!(rules.len() >= 5);
    let names: Vec<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    for want in [
        "HookgateDLQGrowing",
        "HookgateDeliveryFailureRatio",
        "HookgateBacklogAge",
        "HookgateBreakerOpen",
        "HookgateStoreUnsafe",
    ] {
        assert!(names.contains(&want), "{want} missing");
    }
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("deploy/grafana/hookgate-dashboard.json")).unwrap(),
    )
    .unwrap();
    assert!(dash["panels"].as_array().unwrap().len() >= 6);
    // The systemd unit and the Dockerfile say what matters.
    let unit = std::fs::read_to_string(root().join("deploy/systemd/hookgate.service")).unwrap();
    for want in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "KillSignal=SIGTERM",
        "ExecStart=",
    ] {
        assert!(unit.contains(want), "systemd unit lacks {want}");
    }
    let docker = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    for want in [
        "AS build",
        "USER nonroot",
        "HEALTHCHECK",
        "hookgate\", \"healthcheck",
    ] {
        assert!(docker.contains(want), "Dockerfile lacks {want}");
    }

    // check-config accepts every configuration shipped in deploy/.
    let dir = tempfile::tempdir().unwrap();
    let k8s = dir.path().join("k8s.toml");
    std::fs::write(
        &k8s,
        configmap_toml.expect("hookgate.toml in the ConfigMap"),
    )
    .unwrap();
    let k8s_pg = dir.path().join("k8s-postgres.toml");
    std::fs::write(&k8s_pg, &pg_toml).unwrap();
    let env = [
        ("HOOKGATE_ADMIN_TOKEN", "t"),
        (
            "HOOKGATE_ALERT_WEBHOOK_URL",
            "https://hooks.slack.com/services/x",
        ),
        ("STRIPE_WEBHOOK_SECRET", "whsec_x"),
        ("GITHUB_WEBHOOK_SECRET", "x"),
    ];
    for path in [
        root().join("deploy/compose.toml"),
        root().join("deploy/compose-postgres.toml"),
        k8s,
        k8s_pg,
    ] {
        let mut cmd = std::process::Command::new(bin());
        cmd.arg("check-config").arg("--config").arg(&path);
        cmd.env_remove("HOOKGATE_CONFIG");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        // The compose file's unencrypted PostgreSQL connection is warned about.
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout.contains("warning: store.url: sslmode=disable"),
            path.ends_with("compose-postgres.toml"),
            "{}: {stdout}",
            path.display()
        );
    }
}
