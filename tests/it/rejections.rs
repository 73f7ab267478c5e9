//! The rejection log end to end, on every store: a forged, a stale, an oversize and
//! an unknown-source request each kept with its reason, status, client, size and
//! digest, the headers an entry would keep (the signature redacted) and no body
//! unless the source keeps them; counted per group with a hint; listed by the
//! admin API, the CLI and the console. And a burst of 10,000 forgeries leaves at
//! most the bounded rows and every one of them counted, while a genuine webhook
//! is still accepted. And a source refusing most of what reaches it (a rotated
//! secret, an address outside its allowlist) is named with its reason, since when
//! and what it likely means, by the admin API, the CLI and both console pages;
//! too few requests, or not over 80 % refused, and it is not.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use sha2::Digest as _;

use crate::admin::{Admin, TOKEN, admin_config};
use crate::console::{log_in, no_redirects};
use crate::for_each_store;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(15);

fn sources() -> String {
    format!(
        "[server]\nmax_body_bytes = 4096\n\
         [[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
         destination = \"http://127.0.0.1:9/stripe\"\n\
         [[sources]]\nname = \"kept\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
         destination = \"http://127.0.0.1:9/kept\"\nkeep_rejected_bodies = true\n"
    )
}

/// The rows the admin API lists, all pages, with `query`.
async fn rows(admin: &Admin, query: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = admin
            .get(&format!("/admin/rejections?limit=100{query}{cursor}"))
            .await;
        out.extend(page["rejections"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return out,
        }
    }
}

async fn refused_requests_are_kept(backend: Backend) {
    let h = StoreHandle::new(backend);
    let gw = Gateway::start(admin_config(&h, "", &sources())).await;
    let admin = Admin::new(&gw);
    let client = http();
    let body = event_body("stripe", "evt_forged");

    let mut forged = sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), "x");
    flip_signature(&mut forged, "stripe-signature", 3);
    forged.push(("authorization".into(), "Bearer not-for-the-log".into()));
    let (st, _) = post_raw(&client, &gw.ingest, "stripe", &body, &forged).await;
    assert_eq!(st, 401);
    let stale = sign_headers("stripe", STRIPE_SECRET, &body, now_secs() - 3600, "x");
    let (st, _) = post_raw(&client, &gw.ingest, "stripe", &body, &stale).await;
    assert_eq!(st, 401);
    let big = vec![b'x'; 5000];
    let signed_big = sign_headers("stripe", STRIPE_SECRET, &big, now_secs(), "x");
    let (st, _) = post_raw(&client, &gw.ingest, "stripe", &big, &signed_big).await;
    assert_eq!(st, 413);
    let (st, _) = post_raw(&client, &gw.ingest, "stirpe", &body, &forged).await;
    assert_eq!(st, 404);
    let (st, _) = post_raw(&client, &gw.ingest, "kept", &body, &forged).await;
    assert_eq!(st, 401);
    // A genuine one is an entry, not a rejection.
    let (st, _) = post_stripe(&client, &gw.ingest, "evt_genuine").await;
    assert_eq!(st, 200);

    let listed = wait_until_ok("five rejections listed", WAIT, async || {
        let r = rows(&admin, "").await;
        if r.len() == 5 {
            Ok(r)
        } else {
            Err(Value::from(r))
        }
    })
    .await;
    let by: HashMap<(String, String), Value> = listed
        .iter()
        .map(|r| {
            (
                (
                    r["source"].as_str().unwrap().to_string(),
                    r["reason"].as_str().unwrap().to_string(),
                ),
                r.clone(),
            )
        })
        .collect();
    let get = |s: &str, r: &str| {
        by.get(&(s.to_string(), r.to_string()))
            .unwrap_or_else(|| panic!("no {s}/{r} in {listed:?}"))
            .clone()
    };
    let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&body)));

    let m = get("stripe", "mismatch");
    assert_eq!(m["status"], 401);
    assert_eq!(m["known"], true);
    assert_eq!(m["client"], "127.0.0.1");
    assert_eq!(m["size"], body.len());
    assert_eq!(m["digest"], digest.as_str());
    assert!(m.get("body").is_none(), "no body: {m}");
    let headers: HashMap<&str, &str> = m["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["name"].as_str().unwrap(), h["value"].as_str().unwrap()))
        .collect();
    assert_eq!(headers.get("stripe-signature"), Some(&"[redacted]"));
    assert!(!headers.contains_key("authorization"), "{headers:?}");
    assert_eq!(headers.get("content-type"), Some(&"application/json"));

    let s = get("stripe", "stale");
    assert_eq!(s["status"], 401);
    assert!(s.get("body").is_none());

    let t = get("stripe", "too_large");
    assert_eq!(t["status"], 413);
    assert_eq!(t["size"], 5000, "as declared");
    assert_eq!(t["digest"], Value::Null, "the body was never read");

    let u = get("stirpe", "unknown_source");
    assert_eq!(u["status"], 404);
    assert_eq!(u["known"], false);
    let unknown_headers = u["headers"].to_string();
    assert!(unknown_headers.contains("[redacted]"), "{unknown_headers}");
    assert!(
        !unknown_headers.contains("not-for-the-log"),
        "{unknown_headers}"
    );

    let k = get("kept", "mismatch");
    assert_eq!(k["body_encoding"], "utf8");
    assert_eq!(k["body"], String::from_utf8(body.clone()).unwrap());

    // Filters and the cursor.
    assert_eq!(rows(&admin, "&reason=mismatch").await.len(), 2);
    assert_eq!(rows(&admin, "&source=stirpe").await.len(), 1);
    let one = admin.get("/admin/rejections?limit=2").await;
    assert_eq!(one["rejections"].as_array().unwrap().len(), 2);
    assert!(one["next_cursor"].is_string());

    // The groups: every refusal counted, with what usually causes it.
    let groups = wait_until_ok("the counts", WAIT, async || {
        let g = admin.get("/admin/rejections/groups").await;
        let total: u64 = g["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["count"].as_u64().unwrap())
            .sum();
        if total == 5 { Ok(g) } else { Err(g) }
    })
    .await;
    let group = |s: &str, r: &str| {
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["source"] == s && g["reason"] == r)
            .unwrap_or_else(|| panic!("no group {s}/{r}: {groups}"))
            .clone()
    };
    assert!(
        group("stripe", "mismatch")["hint"]
            .as_str()
            .unwrap()
            .contains("secret")
    );
    assert!(
        group("stripe", "stale")["hint"]
            .as_str()
            .unwrap()
            .contains("clock")
    );
    assert_eq!(group("*", "unknown_source")["count"], 1);
    assert_eq!(group("stripe", "too_large")["count"], 1);

    // The console's page.
    let console = no_redirects();
    let cookie = log_in(&console, &gw.admin).await;
    let page = console
        .get(format!("{}/console/rejections", gw.admin))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    for shown in [
        "mismatch",
        "stale",
        "too_large",
        "unknown_source",
        "stirpe",
        "rewrote the body",
    ] {
        assert!(html.contains(shown), "the console shows {shown}");
    }
    assert!(!html.contains("not-for-the-log"));

    // The CLI.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["rejections", "--admin-url", &gw.admin, "--token", TOKEN])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for shown in [
        "mismatch",
        "stale",
        "too_large",
        "stirpe",
        "127.0.0.1",
        &digest,
    ] {
        assert!(text.contains(shown), "the CLI shows {shown}: {text}");
    }
    gw.stop().await;
}
for_each_store!(
    forged_stale_oversize_and_unknown_source_requests_are_kept_with_their_reason,
    super::refused_requests_are_kept
);

async fn a_flood_is_bounded(backend: Backend) {
    let h = StoreHandle::new(backend);
    let gw = Gateway::start(admin_config(&h, "", &sources())).await;
    let admin = Admin::new(&gw);
    let client = http();
    let body = event_body("stripe", "evt_flood");
    let mut forged = sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), "x");
    flip_signature(&mut forged, "stripe-signature", 3);
    let forged = std::sync::Arc::new(forged);
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (client, base, body, forged, sent) = (
            client.clone(),
            gw.ingest.clone(),
            body.clone(),
            forged.clone(),
            sent.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 10_000 {
                let (st, _) = post_raw(&client, &base, "stripe", &body, &forged).await;
                assert_eq!(st, 401);
            }
        }));
    }
    // Meanwhile, a genuine webhook is accepted.
    let (st, v) = post_stripe(&client, &gw.ingest, "evt_during_the_flood").await;
    assert_eq!(st, 200, "{v}");
    for t in tasks {
        t.await.unwrap();
    }
    let counted = wait_until_ok("every forgery counted", WAIT, async || {
        let g = admin.get("/admin/rejections/groups").await;
        let n = g["groups"][0]["count"].as_u64().unwrap_or(0);
        if n == 10_000 { Ok(g) } else { Err(g) }
    })
    .await;
    assert_eq!(counted["groups"].as_array().unwrap().len(), 1, "{counted}");
    let kept = rows(&admin, "").await;
    assert!(!kept.is_empty());
    assert!(
        kept.len() <= hookgate::store::REJECTIONS_KEEP,
        "{} rows kept",
        kept.len()
    );
    gw.stop().await;
}
for_each_store!(
    ten_thousand_forgeries_leave_the_bounded_rows_and_are_all_counted,
    super::a_flood_is_bounded
);

/// The JSON Schema of `name` in `openapi.json`, its references resolved.
fn schema(name: &str) -> jsonschema::Validator {
    let doc: Value = serde_json::from_str(hookgate::admin::OPENAPI).unwrap();
    let root = serde_json::json!({
        "$ref": format!("#/components/schemas/{name}"),
        "components": doc["components"].clone(),
    });
    jsonschema::validator_for(&root).expect("schema compiles")
}

/// The card of source `name` on the console's Sources page.
fn card<'a>(html: &'a str, name: &str) -> &'a str {
    let at = html
        .find(&format!("id=\"source-{name}\""))
        .unwrap_or_else(|| panic!("no card of {name} in {html}"));
    let rest = &html[at..];
    &rest[..rest.find("</section>").unwrap_or(rest.len())]
}

/// A hostile client address, as a forged store write could hold it.
const HOSTILE: &str = "<img src=x onerror=alert(1)>";

/// Rows a gateway never writes (an address is parsed before it is kept): 25
/// refusals of `hostile` from [`HOSTILE`], written to the store directly.
async fn plant_hostile_rows(h: &StoreHandle) {
    use hookgate::store::{Rejection, RejectionBatch, RejectionCount};
    let store = h.open().await;
    let now = hookgate::clock::system_now_ms();
    let rows: Vec<Rejection> = (0..25)
        .map(|i| Rejection {
            id: uuid::Uuid::now_v7().to_string(),
            at: now - 25 + i,
            source: "hostile".into(),
            known: true,
            reason: "ip_not_allowed".into(),
            status: 403,
            client: Some(HOSTILE.into()),
            size: None,
            digest: None,
            headers: Vec::new(),
            body: None,
        })
        .collect();
    let batch = RejectionBatch {
        rows,
        counts: vec![RejectionCount {
            source: "hostile".into(),
            reason: "ip_not_allowed".into(),
            count: 25,
            last_at: now,
        }],
    };
    store.record_rejections(&batch).await.unwrap();
    store.close().await;
}

async fn refusing_sources_are_named(backend: Backend) {
    let h = StoreHandle::new(backend);
    plant_hostile_rows(&h).await;
    let dest = "http://127.0.0.1:9/x";
    let sources = format!(
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]\n{}{}{}{}{}",
        crate::forward::source("rotated", dest, ""),
        crate::forward::source("few", dest, ""),
        crate::forward::source("mixed", dest, ""),
        crate::forward::source("shut", dest, "allow_ips = [\"192.0.2.0/24\"]\n"),
        crate::forward::source("hostile", dest, ""),
    );
    let gw = Gateway::start(admin_config(&h, "", &sources)).await;
    let admin = Admin::new(&gw);
    let client = http();
    let send = async |source: &str, event: &str, secret: &str, from: Option<&str>| {
        let body = event_body("stripe", event);
        let mut headers = sign_headers("stripe", secret, &body, now_secs(), "x");
        if let Some(ip) = from {
            headers.push(("x-forwarded-for".into(), ip.into()));
        }
        post_raw(&client, &gw.ingest, source, &body, &headers)
            .await
            .0
    };
    const ROTATED: &str = "whsec_the_provider_rotated_to_this";
    // A source that stored a webhook, then its secret was rotated on the
    // provider's side: 25 signatures that fail.
    assert_eq!(
        send("rotated", "evt_before", STRIPE_SECRET, None).await,
        200
    );
    for i in 0..25 {
        assert_eq!(
            send("rotated", &format!("evt_r{i}"), ROTATED, None).await,
            401
        );
    }
    // Too few to say: 15 refused, nothing stored.
    for i in 0..15 {
        assert_eq!(send("few", &format!("evt_f{i}"), ROTATED, None).await, 401);
    }
    // 20 of 25 refused: 80 %, not over it.
    for i in 0..5 {
        assert_eq!(
            send("mixed", &format!("evt_m{i}"), STRIPE_SECRET, None).await,
            200
        );
    }
    for i in 0..20 {
        assert_eq!(
            send("mixed", &format!("evt_mx{i}"), ROTATED, None).await,
            401
        );
    }
    // The provider sends from an address outside the allowlist (mostly one).
    let inside = Some("192.0.2.7");
    assert_eq!(send("shut", "evt_in", STRIPE_SECRET, inside).await, 200);
    for i in 0..20 {
        let from = Some("203.0.113.9");
        assert_eq!(
            send("shut", &format!("evt_s{i}"), STRIPE_SECRET, from).await,
            403
        );
    }
    for i in 0..2 {
        let from = Some("198.51.100.4");
        assert_eq!(
            send("shut", &format!("evt_o{i}"), STRIPE_SECRET, from).await,
            403
        );
    }

    let groups = wait_until_ok("every refusal counted", WAIT, async || {
        let g = admin.get("/admin/rejections/groups").await;
        let total: u64 = g["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["count"].as_u64().unwrap())
            .sum();
        if total == 25 + 15 + 20 + 22 + 25 {
            Ok(g)
        } else {
            Err(g)
        }
    })
    .await;
    let valid = schema("RejectionGroups");
    let errors: Vec<String> = valid.iter_errors(&groups).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?} in {groups}");
    let refusing = groups["refusing"].as_array().unwrap();
    let named: Vec<&str> = refusing
        .iter()
        .map(|r| r["source"].as_str().unwrap())
        .collect();
    assert_eq!(named, ["rotated", "shut", "hostile"], "{groups}");
    let of = |name: &str| refusing.iter().find(|r| r["source"] == name).unwrap();

    let r = of("rotated");
    assert_eq!(r["reason"], "mismatch");
    assert_eq!(r["refused"], 25);
    assert_eq!(r["total"], 26);
    assert_eq!(r["client"], Value::Null);
    assert_eq!(r["since_exact"], true);
    // Since the first refusal (a gateway always keeps the first of a second), after
    // the webhook stored before it.
    let kept = rows(&admin, "&source=rotated&reason=mismatch").await;
    let first = kept.last().unwrap()["at"].as_str().unwrap();
    assert_eq!(r["since"], first, "{kept:?}");
    let stored = admin.get("/admin/entries?source=rotated&limit=1").await;
    assert!(stored["entries"][0]["received_at"].as_str().unwrap() < first);
    let since = r["since"].as_str().unwrap();
    assert_eq!(
        r["likely"],
        format!(
            "Every signature fails since {} UTC: was the secret rotated on the provider's side?",
            &since[11..16]
        )
    );

    let s = of("shut");
    assert_eq!(s["reason"], "ip_not_allowed");
    assert_eq!(s["refused"], 22);
    assert_eq!(s["total"], 23);
    assert_eq!(s["client"], "203.0.113.9");
    let likely = s["likely"].as_str().unwrap();
    assert!(
        likely.starts_with(
            "The requests come from 203.0.113.9, outside the source's allowlist, since "
        ),
        "{likely}"
    );
    assert_eq!(of("hostile")["client"], HOSTILE);

    // The CLI: first, one line per refusing source.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["rejections", "--admin-url", &gw.admin, "--token", TOKEN])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("Refusing most requests now"), "{text}");
    assert!(
        lines[1].starts_with(&format!(
            "  rotated: 25 of 26 refused, mismatch since {since}: Every signature fails since "
        )),
        "{text}"
    );
    assert!(
        lines[1].ends_with("was the secret rotated on the provider's side?"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("  shut: 22 of 23 refused, ip_not_allowed since "),
        "{text}"
    );
    assert!(lines[2].contains("come from 203.0.113.9"), "{text}");
    assert!(
        lines[3].starts_with("  hostile: 25 of 25 refused"),
        "{text}"
    );
    assert_eq!(lines[4], "", "{text}");
    assert!(lines[5].starts_with("Refused since "), "{text}");

    // The console: a notice per refusing source on the Rejections page, and the
    // same on its card of the Sources page; the hostile address escaped.
    let console = no_redirects();
    let cookie = log_in(&console, &gw.admin).await;
    let page = async |path: &str| {
        let resp = console
            .get(format!("{}{path}", gw.admin))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        resp.text().await.unwrap()
    };
    let html = page("/console/rejections").await;
    for shown in [
        "rotated refuses most requests",
        "25 of 26 in the last 10 minutes",
        "Every signature fails since",
        "shut refuses most requests",
        "The requests come from 203.0.113.9, outside the source's allowlist",
        "hostile refuses most requests",
        "&lt;img src=x onerror=alert(1)&gt;",
    ] {
        assert!(html.contains(shown), "{shown} in {html}");
    }
    for hidden in ["few refuses", "mixed refuses", "<img src=x"] {
        assert!(!html.contains(hidden), "{hidden} in {html}");
    }
    let html = page("/console/sources").await;
    for name in ["rotated", "shut", "hostile"] {
        let card = card(&html, name);
        assert!(card.contains(">Refusing<"), "{name}: {card}");
        assert!(
            card.contains(&format!("{name} refuses most requests")),
            "{card}"
        );
    }
    assert!(card(&html, "rotated").contains("was the secret rotated"));
    assert!(card(&html, "hostile").contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(!html.contains("<img src=x"), "{html}");
    for name in ["few", "mixed"] {
        let card = card(&html, name);
        assert!(!card.contains("Refusing"), "{name}: {card}");
        assert!(!card.contains("refuses most"), "{name}: {card}");
    }
    gw.stop().await;
}
for_each_store!(
    a_source_refusing_most_requests_is_named_with_its_reason_since_when_and_what_it_likely_means,
    super::refusing_sources_are_named
);
