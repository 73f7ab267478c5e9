//! Gateways on one store know each other: `GET /admin/gateways` and
//! `hookgate gateways` list them with the configuration version each runs (one
//! file, one version), and the shipped `HookgateConfigDrift` rule, evaluated by
//! promtool over real scrapes of those gateways, fires when they have run different
//! versions for 10 minutes and stays quiet while they run one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::forward::source;
use crate::observe::promtool_test;
use crate::support::*;
use crate::upstream::Upstream;

/// A config file `name` in `dir` on `store`, delivering to `destination`.
fn file(dir: &Path, name: &str, store: &str, destination: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!("{store}\n{}", source("stripe", destination, "")),
    )
    .unwrap();
    path
}

/// The `hookgate_config_version_info` series of one scrape, by version.
fn version_series(scrape: &str) -> BTreeMap<String, f64> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("hookgate_config_version_info{version=\""))
        .filter_map(|rest| {
            let (version, value) = rest.split_once("\"} ")?;
            Some((version.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// promtool input: the series `hookgate_config_version_info` of each scrape, as
/// Prometheus would store it (with the `instance` and `job` it adds), constant for
/// `minutes`.
fn scraped_series(
    scrapes: &[(&str, &BTreeMap<String, f64>)],
    minutes: u32,
) -> Vec<serde_json::Value> {
    scrapes
        .iter()
        .flat_map(|(instance, series)| {
            series.iter().map(move |(version, value)| {
                serde_json::json!({
                    "series": format!(
                        "hookgate_config_version_info{{instance=\"{instance}\",job=\"hookgate\",version=\"{version}\"}}"
                    ),
                    "values": format!("{value}+0x{minutes}"),
                })
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_list_their_versions_and_drift_fires_after_10_minutes() {
    let _ = crate::observe::promtool();
    let h = StoreHandle::new(Backend::Redis);
    let up = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let first = file(
        dir.path(),
        "first.toml",
        &h.toml(),
        &format!("{}/first", up.url),
    );
    let other = file(
        dir.path(),
        "other.toml",
        &h.toml(),
        &format!("{}/other", up.url),
    );
    // The same file in another place: the same version.
    let same = dir.path().join("same.toml");
    std::fs::copy(&first, &same).unwrap();
    let a = ChildGateway::spawn(&first, &[], &dir.path().join("a.log"));
    let b = ChildGateway::spawn(&other, &[], &dir.path().join("b.log"));
    let a2 = ChildGateway::spawn(&same, &[], &dir.path().join("a2.log"));
    let c = http();
    // The version each runs, as it says (`GET /admin/config`): one per file, the
    // same for the same file on another process with listeners of its own.
    let version_of = async |gw: &ChildGateway| -> String {
        get_json(&c, &format!("{}/admin/config", gw.admin)).await["version"]
            .as_str()
            .expect("a version")
            .to_string()
    };
    let (v_first, v_other) = (version_of(&a).await, version_of(&b).await);
    assert_ne!(v_first, v_other);
    assert_eq!(
        version_of(&a2).await,
        v_first,
        "the same file, the same version"
    );

    // Each gateway writes its heartbeat before it claims: all three are listed.
    let listed = wait_until_ok(
        "three gateways listed",
        Duration::from_secs(15),
        async || {
            let list = get_json(&c, &format!("{}/admin/gateways", b.admin)).await;
            let gateways = list["gateways"].as_array().cloned().unwrap_or_default();
            if gateways.len() == 3 {
                Ok(gateways)
            } else {
                Err(format!("{list}"))
            }
        },
    )
    .await;
    let mut versions: BTreeMap<String, usize> = BTreeMap::new();
    let mut ids = std::collections::BTreeSet::new();
    for g in &listed {
        assert_eq!(g["alive"], true, "{g}");
        assert!(!g["host"].as_str().unwrap().is_empty(), "{g}");
        assert!(g["last_seen"].as_str().unwrap().ends_with('Z'), "{g}");
        assert!(g["started"].as_str().unwrap().ends_with('Z'), "{g}");
        ids.insert(g["id"].as_str().unwrap().to_string());
        *versions
            .entry(g["version"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(ids.len(), 3, "one id per gateway: {listed:?}");
    assert_eq!(
        versions,
        BTreeMap::from([(v_first.clone(), 2), (v_other.clone(), 1)]),
        "one file, one version: {listed:?}"
    );

    // The CLI prints the same list.
    let out = Command::new(bin())
        .args(["gateways", "--admin-url", &a.admin])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(&v_first) && text.contains(&v_other), "{text}");
    assert_eq!(text.matches(" yes").count(), 3, "{text}");

    // Each gateway's scrape names its own version, once.
    let scrape = async |gw: &ChildGateway| {
        version_series(&get_text(&c, &format!("{}/metrics", gw.admin)).await)
    };
    let (sa, sb, sa2) = (scrape(&a).await, scrape(&b).await, scrape(&a2).await);
    assert_eq!(sa, BTreeMap::from([(v_first.clone(), 1.0)]));
    assert_eq!(sb, BTreeMap::from([(v_other.clone(), 1.0)]));
    assert_eq!(sa2, sa);

    let at = |m: u32, firing: bool| {
        let exp = if firing {
            serde_json::json!([{"exp_labels": {"severity": "warning", "job": "hookgate"}}])
        } else {
            serde_json::json!([])
        };
        serde_json::json!({"eval_time": format!("{m}m"), "alertname": "HookgateConfigDrift", "exp_alerts": exp})
    };
    promtool_test(vec![
        // Two versions: pending at first, firing once they have differed 10 minutes.
        serde_json::json!({
            "interval": "1m",
            "input_series": scraped_series(&[("a", &sa), ("b", &sb)], 30),
            "alert_rule_test": [at(5, false), at(9, false), at(11, true), at(25, true)],
        }),
        // One version on both: quiet.
        serde_json::json!({
            "interval": "1m",
            "input_series": scraped_series(&[("a", &sa), ("a2", &sa2)], 30),
            "alert_rule_test": [at(5, false), at(11, false), at(25, false)],
        }),
        // The drift ends when the second gateway runs the first's version again (it
        // restarted with the same file): the alert clears.
        serde_json::json!({
            "interval": "1m",
            "input_series": [
                {"series": format!("hookgate_config_version_info{{instance=\"a\",job=\"hookgate\",version=\"{v_first}\"}}"), "values": "1+0x40"},
                {"series": format!("hookgate_config_version_info{{instance=\"b\",job=\"hookgate\",version=\"{v_other}\"}}"), "values": "1+0x14 _x25"},
                {"series": format!("hookgate_config_version_info{{instance=\"b\",job=\"hookgate\",version=\"{v_first}\"}}"), "values": "_x15 1+0x25"},
            ],
            "alert_rule_test": [at(12, true), at(25, false)],
        }),
        // Or a reload brings it there: the version it ran before stays exported at
        // 0, which is not counted.
        serde_json::json!({
            "interval": "1m",
            "input_series": [
                {"series": format!("hookgate_config_version_info{{instance=\"a\",job=\"hookgate\",version=\"{v_first}\"}}"), "values": "1+0x40"},
                {"series": format!("hookgate_config_version_info{{instance=\"b\",job=\"hookgate\",version=\"{v_other}\"}}"), "values": "1+0x14 0+0x25"},
                {"series": format!("hookgate_config_version_info{{instance=\"b\",job=\"hookgate\",version=\"{v_first}\"}}"), "values": "_x15 1+0x25"},
            ],
            "alert_rule_test": [at(12, true), at(16, false), at(30, false)],
        }),
    ]);
    drop((a, b, a2));
}
