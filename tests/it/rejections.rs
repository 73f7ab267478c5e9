//! The rejection log end to end, on every store: a forged, a stale, an oversize and
//! an unknown-source request each kept with its reason, status, client, size and
//! digest, the headers an entry would keep (the signature redacted) and no body
//! unless the source keeps them; counted per group with a hint; listed by the
//! admin API, the CLI and the console. And a burst of 10,000 forgeries leaves at
//! most the bounded rows and every one of them counted, while a genuine webhook
//! is still accepted.

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
