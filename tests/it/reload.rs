//! Reloading the configuration of a running gateway process: through the admin API,
//! `hookgate reload` and `SIGHUP`. A reload puts sources, rotated secrets and
//! changed routes in force as soon as it returns; a configuration that cannot run,
//! or that changes a key only a restart changes, is refused whole and the table in
//! force keeps serving; a removed route's deliveries wait, and go when it is back.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::for_each_store;
use crate::forward::source;
use crate::support::*;
use crate::upstream::Upstream;

/// A second Stripe secret, for a source added or rotated by a reload.
const OTHER_SECRET: &str = "whsec_other_secret";

/// The file of a gateway on `h` with `sources`, polling fast; its breakers do not
/// open on a few failures (a delivery the open breaker gives back waits out the
/// cooldown, whatever the route becomes).
fn file(h: &StoreHandle, sources: &str) -> String {
    format!(
        "{}\n[forwarder]\npoll_interval = \"50ms\"\nmaintenance_interval = \"200ms\"\nbreaker_failures = 1000\n[log]\nformat = \"json\"\n{sources}",
        h.toml()
    )
}

/// `hookgate <args>` against the gateway's admin listener: (exit code, stdout,
/// stderr).
fn cli(gw: &ChildGateway, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .args(args)
        .arg("--admin-url")
        .arg(&gw.admin)
        .output()
        .expect("run hookgate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// POST to the admin API; (status, JSON body).
async fn admin_post(gw: &ChildGateway, path: &str) -> (u16, Value) {
    let r = http()
        .post(format!("{}{path}", gw.admin))
        .send()
        .await
        .expect("admin request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A Stripe event `id` to `source`, signed with `secret`: the status.
async fn post_with(gw: &ChildGateway, source: &str, secret: &str, id: &str) -> u16 {
    let body = event_body("stripe", id);
    let headers = sign_headers("stripe", secret, &body, now_secs(), id);
    post_raw(&http(), &gw.ingest, source, &body, &headers)
        .await
        .0
}

/// The value of the metric series named exactly `series` (`name{labels}` or
/// `name`) in a scrape, 0 when absent.
async fn metric(gw: &ChildGateway, series: &str) -> f64 {
    let text = get_text(&http(), &format!("{}/metrics", gw.admin)).await;
    text.lines()
        .filter_map(|l| l.strip_prefix(series))
        .filter_map(|rest| rest.strip_prefix(' '))
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .next()
        .unwrap_or(0.0)
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write the configuration");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_puts_a_new_source_a_rotated_secret_and_a_moved_route_in_force_when_it_returns() {
    let h = StoreHandle::new(Backend::Embedded);
    let (first, second) = (Upstream::ok().await, Upstream::ok().await);
    let dir = tempfile::tempdir().unwrap();
    let secret_path = dir.path().join("stripe.secret");
    std::fs::write(&secret_path, format!("{STRIPE_SECRET}\n")).unwrap();
    let stripe = |dest: &str| {
        format!(
            "[[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret_file = {:?}\ndestination = \"{dest}\"\n",
            secret_path.display().to_string()
        )
    };
    let cfg = write_config(dir.path(), &file(&h, &stripe(&first.url)));
    let mut gw = ChildGateway::spawn(&cfg, &[], &dir.path().join("stderr.log"));
    let before = get_json(&http(), &format!("{}/admin/config", gw.admin)).await;
    assert_eq!(before["generation"], 0, "{before}");
    assert_eq!(post_with(&gw, "fresh", OTHER_SECRET, "evt_0").await, 404);

    // The next file: a source added, the secret file rotated, the route moved.
    let next = format!(
        "{}{}",
        stripe(&second.url),
        source("fresh", &second.url, "").replace(STRIPE_SECRET, OTHER_SECRET)
    );
    write(&cfg, &file(&h, &next));
    std::fs::write(&secret_path, format!("{OTHER_SECRET}\n")).unwrap();

    // A dry run says what would change and changes nothing.
    let (code, out, err) = cli(&gw, &["reload", "--dry-run"]);
    assert_eq!(code, 0, "{out}{err}");
    for line in [
        "dry run",
        "source stripe: secrets rotated",
        "route changed: stripe/default (destination)",
        "source added: fresh",
    ] {
        assert!(out.contains(line), "{line:?} not in:\n{out}");
    }
    assert!(!out.contains(OTHER_SECRET) && !out.contains(STRIPE_SECRET));
    assert_eq!(post_with(&gw, "fresh", OTHER_SECRET, "evt_1").await, 404);
    assert_eq!(post_with(&gw, "stripe", STRIPE_SECRET, "evt_2").await, 200);

    let (code, out, err) = cli(&gw, &["reload"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("reloaded"), "{out}");
    // In force as soon as the call returned.
    assert_eq!(post_with(&gw, "fresh", OTHER_SECRET, "evt_3").await, 200);
    assert_eq!(post_with(&gw, "stripe", OTHER_SECRET, "evt_4").await, 200);
    assert_eq!(
        post_with(&gw, "stripe", STRIPE_SECRET, "evt_5").await,
        401,
        "the rotated-out secret no longer verifies"
    );
    second
        .wait_for(
            Duration::from_secs(10),
            "both sources' webhooks at the new destination",
            |r| r.len() >= 2,
        )
        .await;
    let after = get_json(&http(), &format!("{}/admin/config", gw.admin)).await;
    assert_eq!(after["generation"], 1, "{after}");
    assert_ne!(after["version"], before["version"]);
    assert_eq!(after["sources"], 2);
    // The webhook accepted before the reload went to the destination of its time
    // (or, if it was still waiting, to the new one): it is delivered once.
    wait_until("evt_2 delivered", Duration::from_secs(10), async || {
        first.count() + second.count() >= 3
    })
    .await;
    let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
    assert!(log.contains("configuration reloaded"), "{log}");
    for secret in [STRIPE_SECRET, OTHER_SECRET] {
        assert!(!log.contains(secret), "a secret in the log");
    }
    gw.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_reload_is_refused_whole_with_its_message_and_the_table_in_force_keeps_serving() {
    let h = StoreHandle::new(Backend::Embedded);
    let up = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let good = file(&h, &source("stripe", &up.url, ""));
    let cfg = write_config(dir.path(), &good);
    let mut gw = ChildGateway::spawn(&cfg, &[], &dir.path().join("stderr.log"));
    let version = get_json(&http(), &format!("{}/admin/config", gw.admin)).await["version"].clone();
    let added = source("added", &up.url, "");
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "a TOML error",
            format!("{good}{added}[[sources"),
            "invalid configuration",
        ),
        (
            "an unknown provider",
            format!(
                "{good}{}",
                added.replace("provider = \"stripe\"", "provider = \"nope\"")
            ),
            "nope",
        ),
        (
            "an invalid program",
            format!(
                "{good}[[sources]]\nname = \"added\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
                 [[sources.routes]]\nname = \"shaped\"\ndestination = \"{}\"\ntransform = \".a | (\"\n",
                up.url
            ),
            "sources[1].routes[0].transform",
        ),
        (
            "a missing secret variable",
            format!(
                "{good}{}",
                added.replace(
                    &format!("secret = \"{STRIPE_SECRET}\""),
                    "secret_env = \"HOOKGATE_TEST_UNSET\""
                )
            ),
            "HOOKGATE_TEST_UNSET",
        ),
        (
            "a key only a restart changes",
            format!("{good}{added}[server]\nmax_body_bytes = 4096\n"),
            "server.max_body_bytes changed: needs a restart",
        ),
    ];
    for (i, (what, text, message)) in cases.iter().enumerate() {
        write(&cfg, text);
        let (status, body) = admin_post(&gw, "/admin/config/reload").await;
        assert_eq!(status, 422, "{what}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(message),
            "{what}: {error:?} lacks {message:?}"
        );
        let (code, _, err) = cli(&gw, &["reload"]);
        assert_eq!(code, 1, "{what}: hookgate reload exits non-zero");
        assert!(err.contains(message), "{what}: {err}");
        // Nothing applied: the new source is unknown, the old one serves.
        assert_eq!(
            post_with(&gw, "added", STRIPE_SECRET, &format!("evt_a{i}")).await,
            404,
            "{what}"
        );
        assert_eq!(
            post_with(&gw, "stripe", STRIPE_SECRET, &format!("evt_s{i}")).await,
            200,
            "{what}"
        );
        let now = get_json(&http(), &format!("{}/admin/config", gw.admin)).await;
        assert_eq!(now["version"], version, "{what}");
        assert_eq!(now["generation"], 0, "{what}");
    }
    assert_eq!(
        metric(&gw, "hookgate_config_reload_failures_total").await,
        (cases.len() * 2) as f64
    );
    // The check-config of the same bad file prints the same message.
    let out = Command::new(bin())
        .args(["check-config", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "a restart-only change is a valid file"
    );
    write(&cfg, &cases[2].1);
    let out = Command::new(bin())
        .args(["check-config", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains(cases[2].2));
    // A good file afterwards is taken.
    write(&cfg, &format!("{good}{added}"));
    let (status, body) = admin_post(&gw, "/admin/config/reload").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(post_with(&gw, "added", STRIPE_SECRET, "evt_ok").await, 200);
    gw.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_file() {
    let h = StoreHandle::new(Backend::Embedded);
    let up = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &file(&h, &source("stripe", &up.url, "")));
    let mut gw = ChildGateway::spawn(&cfg, &[], &dir.path().join("stderr.log"));
    write(
        &cfg,
        &file(
            &h,
            &format!(
                "{}{}",
                source("stripe", &up.url, ""),
                source("hup", &up.url, "")
            ),
        ),
    );
    assert_eq!(post_with(&gw, "hup", STRIPE_SECRET, "evt_0").await, 404);
    let pid = gw.child.id().to_string();
    let sent = Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    assert!(sent.success());
    wait_until(
        "the source SIGHUP added answers",
        Duration::from_secs(10),
        async || post_with(&gw, "hup", STRIPE_SECRET, "evt_1").await == 200,
    )
    .await;
    assert_eq!(metric(&gw, "hookgate_config_reloads_total").await, 1.0);
    gw.kill();
}

/// How a removed route ends in [`removed_route`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Back {
    /// A route of the same name and destination comes back: the kept deliveries go.
    Same,
    /// It comes back with another destination: paused until an operator resumes it.
    Elsewhere,
    /// Never: the operator discards what it kept, with a note.
    Discarded,
}

/// A route removed by a reload keeps its pending deliveries (not sent, not lost),
/// listed as retired and counted; then it ends as `back` says.
async fn removed_route(backend: Backend, back: Back) {
    let h = StoreHandle::new(backend);
    let main = Upstream::ok().await;
    let (audit, fixed) = Upstream::failing_until_fixed(503).await;
    let elsewhere = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let routes = |audit_at: Option<&str>| {
        let mut s = format!(
            "[[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
             [[sources.routes]]\nname = \"main\"\ndestination = \"{}\"\n",
            main.url
        );
        if let Some(url) = audit_at {
            s.push_str(&format!(
                "[[sources.routes]]\nname = \"audit\"\ndestination = \"{url}\"\n[sources.routes.retry]\nbase = \"100ms\"\ncap = \"200ms\"\nmax_attempts = 1000\n"
            ));
        }
        s
    };
    let cfg = write_config(dir.path(), &file(&h, &routes(Some(&audit.url))));
    let mut gw = ChildGateway::spawn(&cfg, &[], &dir.path().join("stderr.log"));
    for i in 0..5 {
        assert_eq!(
            post_with(&gw, "stripe", STRIPE_SECRET, &format!("evt_{i}")).await,
            200
        );
    }
    audit
        .wait_for(Duration::from_secs(10), "every audit delivery tried", |r| {
            r.len() >= 5
        })
        .await;
    write(&cfg, &file(&h, &routes(None)));
    let (status, body) = admin_post(&gw, "/admin/config/reload").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["changes"]
            .as_array()
            .is_some_and(|c| c.iter().any(|l| l == "route removed: stripe/audit")),
        "{body}"
    );
    // Nothing more reaches the removed route's destination, even once it would
    // accept; the main route goes on.
    fixed.store(true, std::sync::atomic::Ordering::SeqCst);
    let tried = audit.count();
    for i in 5..8 {
        assert_eq!(
            post_with(&gw, "stripe", STRIPE_SECRET, &format!("evt_{i}")).await,
            200
        );
    }
    main.wait_for(Duration::from_secs(10), "the main route's 8", |r| {
        r.len() >= 8
    })
    .await;
    // An attempt already sent when the route went may still land: at most one
    // per delivery in flight.
    let settled = audit.count();
    assert!(settled <= tried + 5, "{tried} → {settled}");
    let kept = 5 - audit
        .received()
        .iter()
        .filter(|x| x.answered == 200)
        .count() as u64;
    // Listed as retired, with what it keeps, and counted.
    let listed = get_json(&http(), &format!("{}/admin/routes", gw.admin)).await;
    let retired = listed
        .as_array()
        .and_then(|l| l.iter().find(|r| r["route"] == "audit").cloned())
        .unwrap_or_else(|| panic!("audit not listed: {listed}"));
    assert_eq!(retired["state"], "retired", "{listed}");
    assert_eq!(retired["pending"], kept, "{listed}");
    assert!(
        listed.to_string().contains("\"state\":\"active\""),
        "{listed}"
    );
    let series = "hookgate_route_retired_pending{source=\"stripe\",route=\"audit\"}";
    wait_until(
        "the retired route counted",
        Duration::from_secs(10),
        async || metric(&gw, series).await == kept as f64,
    )
    .await;
    let ok_at = |up: &Upstream| up.received().iter().filter(|x| x.answered == 200).count();
    match back {
        Back::Same => {
            let page = get_text(&http(), &format!("{}/console/sources", gw.admin)).await;
            assert!(
                page.contains("Retired routes") && page.contains("stripe / audit"),
                "the console lists the retired route: {page}"
            );
            // Back with the same name and destination: the kept deliveries go.
            write(&cfg, &file(&h, &routes(Some(&audit.url))));
            let (status, body) = admin_post(&gw, "/admin/config/reload").await;
            assert_eq!(status, 200, "{body}");
            audit
                .wait_for(Duration::from_secs(15), "the kept deliveries", |r| {
                    r.iter().filter(|x| x.answered == 200).count() >= 5
                })
                .await;
        }
        Back::Elsewhere => {
            write(&cfg, &file(&h, &routes(Some(&elsewhere.url))));
            let (status, body) = admin_post(&gw, "/admin/config/reload").await;
            assert_eq!(status, 200, "{body}");
            let sources = get_json(&http(), &format!("{}/admin/sources", gw.admin)).await;
            let paused = sources[0]["routes"]
                .as_array()
                .and_then(|r| r.iter().find(|r| r["route"] == "audit"))
                .map(|r| r["paused"].clone());
            assert_eq!(
                paused,
                Some(Value::Bool(true)),
                "paused until an operator resumes it: {sources}"
            );
            let audited = get_json(&http(), &format!("{}/admin/audit", gw.admin)).await;
            assert_eq!(audited[0]["action"], "pause", "{audited}");
            assert_eq!(audited[0]["actor"], "reload", "{audited}");
            // The forwarder goes on (a new webhook reaches main) and the new
            // destination gets nothing.
            assert_eq!(post_with(&gw, "stripe", STRIPE_SECRET, "evt_8").await, 200);
            main.wait_for(Duration::from_secs(10), "the main route's 9", |r| {
                r.len() >= 9
            })
            .await;
            assert_eq!(elsewhere.count(), 0, "sent to another app unasked");
            let (status, body) = admin_post(&gw, "/admin/sources/stripe/routes/audit/resume").await;
            assert_eq!(status, 200, "{body}");
            elsewhere
                .wait_for(
                    Duration::from_secs(15),
                    "the kept deliveries, once resumed",
                    |r| r.len() as u64 > kept,
                )
                .await;
        }
        Back::Discarded => {
            let (code, out, err) = cli(&gw, &["routes", "list"]);
            assert_eq!(code, 0, "{err}");
            let line = out
                .lines()
                .find(|l| l.contains("audit"))
                .unwrap_or_else(|| panic!("{out}"));
            assert!(line.contains("retired"), "{out}");
            let r = http()
                .post(format!("{}/admin/routes/stripe/audit/discard", gw.admin))
                .json(&serde_json::json!({"note": "audit moved to the warehouse"}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 200);
            let done: Value = r.json().await.unwrap();
            assert_eq!(done["discarded"], kept, "{done}");
            assert_eq!(done["forgotten"], true, "{done}");
            let listed = get_json(&http(), &format!("{}/admin/routes", gw.admin)).await;
            assert!(!listed.to_string().contains("audit"), "{listed}");
            let gone = get_json(
                &http(),
                &format!("{}/admin/entries?route=audit&status=discarded", gw.admin),
            )
            .await;
            assert_eq!(
                gone["entries"].as_array().map(Vec::len),
                Some(kept as usize),
                "{gone}"
            );
            wait_until(
                "the retired count back to 0",
                Duration::from_secs(10),
                async || metric(&gw, series).await == 0.0,
            )
            .await;
            assert_eq!(ok_at(&audit) as u64, 5 - kept, "nothing more sent");
        }
    }
    gw.kill();
}
for_each_store!(
    a_removed_route_keeps_its_deliveries_until_it_comes_back,
    async |b| super::removed_route(b, super::Back::Same).await
);
for_each_store!(
    a_retired_route_back_with_another_destination_waits_for_a_resume,
    async |b| super::removed_route(b, super::Back::Elsewhere).await
);
for_each_store!(
    a_retired_routes_deliveries_are_discarded_with_a_note,
    async |b| super::removed_route(b, super::Back::Discarded).await
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_a_reload_brings_is_redacted_in_rejections_and_in_the_entries_of_a_removed_source()
 {
    let h = StoreHandle::new(Backend::Embedded);
    let up = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let specs = dir.path().join("providers");
    std::fs::create_dir(&specs).unwrap();
    let base = format!(
        "providers_dir = {:?}\n{}",
        specs.display().to_string(),
        file(&h, &source("stripe", &up.url, ""))
    );
    let cfg = write_config(dir.path(), &base);
    let mut gw = ChildGateway::spawn(&cfg, &[], &dir.path().join("stderr.log"));
    // A provider of the operator's own, signing in a header no built-in one uses.
    let stripe = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("providers/stripe.toml"),
    )
    .unwrap();
    let spec = stripe
        .replacen("name = \"stripe\"", "name = \"acme\"", 1)
        .replace("Stripe-Signature", "X-Acme-Mac");
    assert!(spec.contains("X-Acme-Mac"));
    std::fs::write(specs.join("acme.toml"), spec).unwrap();
    write(
        &cfg,
        &format!(
            "{base}{}",
            source("acme", &up.url, "").replacen("provider = \"stripe\"", "provider = \"acme\"", 1)
        ),
    );
    let (status, body) = admin_post(&gw, "/admin/config/reload").await;
    assert_eq!(status, 200, "{body}");
    // A request to a name that is no source, carrying a genuine-looking signature
    // in the new provider's header.
    let r = http()
        .post(format!("{}/ingest/not-a-source", gw.ingest))
        .header("content-type", "application/json")
        .header("x-acme-mac", "t=1,v1=deadbeefsecretlooking")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let row = wait_until_ok(
        "the refusal in the log",
        Duration::from_secs(10),
        async || {
            let page = get_json(&http(), &format!("{}/admin/rejections", gw.admin)).await;
            page["rejections"]
                .as_array()
                .and_then(|rows| rows.first().cloned())
                .ok_or_else(|| page.to_string())
        },
    )
    .await;
    let shown = row.to_string();
    assert!(!shown.contains("deadbeefsecretlooking"), "{shown}");
    assert!(shown.contains("[redacted]"), "{shown}");

    // A genuine webhook of the new source; then a reload removes the source: its
    // entry stays readable, its signature still redacted.
    let body = event_body("stripe", "evt_acme");
    let headers: Vec<(String, String)> =
        sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), "evt_acme")
            .into_iter()
            .map(|(n, v)| match n.eq_ignore_ascii_case("stripe-signature") {
                true => ("X-Acme-Mac".to_string(), v),
                false => (n, v),
            })
            .collect();
    let signature = headers
        .iter()
        .find(|(n, _)| n == "X-Acme-Mac")
        .map(|(_, v)| v.clone())
        .expect("signed");
    let (status, json) = post_raw(&http(), &gw.ingest, "acme", &body, &headers).await;
    assert_eq!(status, 200, "{json}");
    let id = json["id"].as_str().expect("an entry id").to_string();
    write(&cfg, &base);
    let (status, body) = admin_post(&gw, "/admin/config/reload").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(post_with(&gw, "acme", STRIPE_SECRET, "evt_gone").await, 404);
    let entry = get_json(&http(), &format!("{}/admin/entries/{id}", gw.admin)).await;
    let shown = entry.to_string();
    assert!(shown.contains("x-acme-mac"), "the header is kept: {shown}");
    assert!(!shown.contains(&signature), "the signature shown: {shown}");
    gw.kill();
}
