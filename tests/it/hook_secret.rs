//! Asana's secret handshake end to end, on every store: refused (and in the
//! rejection log) until an operator arms it; armed, only the handshake that carries
//! the arming's one-time token in its URL has its `X-Hook-Secret` echoed and kept,
//! and it verifies events on every gateway of the store (a second gateway reads it
//! when an event matches none of its keys); an outsider polling the endpoint while
//! the operator arms plants nothing and cannot use the arming up; one arming takes
//! one secret; a forgotten secret stops verifying; each action is in the control
//! audit, and neither the secret nor the token is kept in the rejection log or the
//! audit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::admin::{Admin, admin_config};
use crate::for_each_store;
use crate::support::*;
use crate::upstream::Upstream;

const WAIT: Duration = Duration::from_secs(15);
/// The source's `public_url`: where the arming's target URL points.
const PUBLIC_URL: &str = "https://hooks.example.com/ingest/asana";
/// The secret an outsider tries to plant.
const PLANTED: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

/// An Asana event body and its signature under `secret`.
fn asana_event(gid: &str, secret: &str) -> (Vec<u8>, Vec<(String, String)>) {
    let body = format!(
        r#"{{"events":[{{"action":"changed","resource":{{"gid":"{gid}","resource_type":"task"}}}}]}}"#
    );
    let headers = sign_headers("asana", secret, body.as_bytes(), now_secs(), "x");
    (body.into_bytes(), headers)
}

/// POST Asana's handshake to `/ingest/asana` with `query` (none: no `?`): its
/// status and the `X-Hook-Secret` it was answered with.
async fn handshake(
    c: &reqwest::Client,
    base: &str,
    query: Option<&str>,
    secret: &str,
) -> (u16, Option<String>) {
    let url = match query {
        Some(q) => format!("{base}/ingest/asana?{q}"),
        None => format!("{base}/ingest/asana"),
    };
    let resp = c
        .post(url)
        .header("x-hook-secret", secret)
        .header("content-type", "application/json")
        .body("")
        .send()
        .await
        .unwrap();
    let echoed = resp
        .headers()
        .get("x-hook-secret")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    (resp.status().as_u16(), echoed)
}

/// POST an event to `/ingest/asana?<query>`, as Asana sends to the target URL.
async fn post_event(
    c: &reqwest::Client,
    base: &str,
    query: &str,
    (body, headers): (Vec<u8>, Vec<(String, String)>),
) -> u16 {
    let mut req = c
        .post(format!("{base}/ingest/asana?{query}"))
        .header("content-type", "application/json")
        .body(body);
    for (n, v) in &headers {
        req = req.header(n.as_str(), v.as_str());
    }
    req.send().await.unwrap().status().as_u16()
}

/// The rejection log's rows of `asana` for `reason`, once there are some.
async fn rejected(admin: &Admin, reason: &str) -> Vec<Value> {
    wait_until_ok(
        &format!("{reason} in the rejection log"),
        WAIT,
        async || {
            let page = admin
                .get(&format!("/admin/rejections?source=asana&reason={reason}"))
                .await;
            match page["rejections"].as_array() {
                Some(rows) if !rows.is_empty() => Ok(rows.clone()),
                _ => Err(page),
            }
        },
    )
    .await
}

fn asana_sources(upstream: &str) -> String {
    format!(
        "[[sources]]\nname = \"asana\"\nprovider = \"asana\"\npublic_url = \"{PUBLIC_URL}\"\n\
         destination = \"{upstream}\"\n\
         [[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\ndestination = \"{upstream}\"\n"
    )
}

async fn the_handshake(backend: Backend) {
    let h = StoreHandle::new(backend);
    let up = Upstream::ok().await;
    let sources = asana_sources(&up.url);
    let cfg = || admin_config(&h, "", &sources);
    let a = Gateway::start(cfg()).await;
    // A second gateway on the store, where the store is shared by processes.
    let b = match backend {
        Backend::Embedded => None,
        _ => Some(Gateway::start(cfg()).await),
    };
    let b_ingest = b.as_ref().map_or(a.ingest.clone(), |b| b.ingest.clone());
    let admin = Admin::new(&a);
    let c = http();
    const S1: &str = "b537207f20cbfa02357cf448134da559e8bd39d61597dcd5631b8012eae53e81";
    const S2: &str = "0f6a1c2b3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";
    let guess = "hookgate_handshake=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

    // Not armed: refused, nothing kept (without a token, before the store is
    // asked); no key verifies an event.
    assert_eq!(handshake(&c, &a.ingest, None, S1).await, (401, None));
    assert_eq!(handshake(&c, &a.ingest, Some(guess), S1).await, (401, None));
    let (body, headers) = asana_event("1", S1);
    let (st, _) = post_raw(&c, &a.ingest, "asana", &body, &headers).await;
    assert_eq!(st, 401);
    let state = admin.get("/admin/sources/asana/handshake").await;
    assert_eq!(state["armed_until"], Value::Null, "{state}");
    assert_eq!(state["secrets"], serde_json::json!([]), "{state}");
    // Only a source whose provider has the handshake can be armed; for a while; and
    // with no field but within_secs.
    let (st, json) = admin
        .call("POST", "/admin/sources/stripe/handshake", None)
        .await;
    assert_eq!(st, 409, "{json}");
    for (body, says) in [
        (serde_json::json!({"within_secs": 0}), "within_secs"),
        (serde_json::json!({"within": 5}), "\"within\""),
        (
            serde_json::json!({"within_secs": 5, "token": "mine"}),
            "\"token\"",
        ),
    ] {
        let (st, json) = admin
            .call("POST", "/admin/sources/asana/handshake", Some(body.clone()))
            .await;
        assert_eq!(st, 400, "{body}: {json}");
        assert!(json["error"].as_str().unwrap().contains(says), "{json}");
    }
    let state = admin.get("/admin/sources/asana/handshake").await;
    assert_eq!(
        state["armed_until"],
        Value::Null,
        "a refused body arms nothing"
    );

    // Armed: the answer has the token and the target URL that carries it.
    let (st, armed) = admin
        .call(
            "POST",
            "/admin/sources/asana/handshake",
            Some(serde_json::json!({"within_secs": 60})),
        )
        .await;
    assert_eq!(st, 200, "{armed}");
    assert!(armed["armed_until"].is_string(), "{armed}");
    let token = armed["token"].as_str().unwrap().to_string();
    assert_eq!(token.len(), 43, "{armed}");
    let query = format!("hookgate_handshake={token}");
    assert_eq!(armed["target_url"], format!("{PUBLIC_URL}?{query}"));
    // A handshake without the token, or with another, is refused and leaves the
    // arming; so does a malformed secret with the right token (and a proxy's copy
    // of the URL in a header is not kept).
    assert_eq!(handshake(&c, &a.ingest, None, S2).await, (401, None));
    assert_eq!(handshake(&c, &b_ingest, Some(guess), S2).await, (401, None));
    let resp = c
        .post(format!("{}/ingest/asana?{query}", a.ingest))
        .header("x-hook-secret", "not a secret")
        .header("x-forwarded-uri", format!("/ingest/asana?{query}"))
        .body("")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    // The one with the token is echoed and its secret kept; the next is refused.
    assert_eq!(
        handshake(&c, &a.ingest, Some(&query), S1).await,
        (200, Some(S1.to_string()))
    );
    assert_eq!(
        handshake(&c, &b_ingest, Some(&query), S2).await,
        (401, None),
        "one arming: its token is spent"
    );

    // Events signed with it verify on every gateway, at the target URL (whose
    // parameter they ignore) as without it; one signed with a refused secret does
    // not.
    for (n, base) in [&a.ingest, &b_ingest].into_iter().enumerate() {
        let (body, headers) = asana_event(&format!("task-{n}"), S1);
        let (st, json) = post_raw(&c, base, "asana", &body, &headers).await;
        assert_eq!(st, 200, "gateway {n}: {json}");
        let at_target = asana_event(&format!("task-target-{n}"), S1);
        assert_eq!(post_event(&c, base, &query, at_target).await, 200);
    }
    let (body, headers) = asana_event("task-x", S2);
    let (st, _) = post_raw(&c, &b_ingest, "asana", &body, &headers).await;
    assert_eq!(st, 401);
    wait_until("the events delivered", WAIT, async || up.count() >= 4).await;
    assert_eq!(up.count(), 4);

    let state = admin.get("/admin/sources/asana/handshake").await;
    let id = hookgate::store::secret_id(S1);
    assert_eq!(state["armed_until"], Value::Null, "disarmed: {state}");
    assert_eq!(
        state["secrets"].as_array().map(Vec::len),
        Some(1),
        "{state}"
    );
    assert_eq!(state["secrets"][0]["id"], id.as_str());
    for shown in [
        state.to_string(),
        admin.get("/admin/audit").await.to_string(),
    ] {
        assert!(
            !shown.contains(S1) && !shown.contains(&token),
            "neither the secret nor the token is shown again: {shown}"
        );
    }

    // Forgotten: refused at once on the gateway that was told.
    let path = format!("/admin/sources/asana/secrets/{id}");
    let (st, json) = admin.call("DELETE", &path, None).await;
    assert_eq!(st, 200, "{json}");
    assert_eq!(json["secrets"], serde_json::json!([]), "{json}");
    let (body, headers) = asana_event("task-after", S1);
    let (st, _) = post_raw(&c, &a.ingest, "asana", &body, &headers).await;
    assert_eq!(st, 401);
    let (st, _) = admin.call("DELETE", &path, None).await;
    assert_eq!(st, 404);

    // The control audit tells the story, and the refused handshakes are in the
    // rejection log under their own reasons, with neither secret nor token.
    let audit = admin.get("/admin/audit").await;
    let actions: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == "asana")
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert_eq!(
        actions,
        ["forget_secret", "establish_secret", "arm_handshake"],
        "{audit}"
    );
    for reason in [
        "handshake_not_armed",
        "handshake_token",
        "malformed_signature",
    ] {
        for row in rejected(&admin, reason).await {
            let shown = row.to_string();
            for kept in [S1, S2, &token] {
                assert!(!shown.contains(kept), "{reason} keeps {kept:?}: {shown}");
            }
            let secret = row["headers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|h| h["name"] == "x-hook-secret");
            assert_eq!(
                secret.map(|h| &h["value"]),
                Some(&Value::from("[redacted]")),
                "{shown}"
            );
        }
    }
    let malformed = Value::from(rejected(&admin, "malformed_signature").await).to_string();
    assert!(
        malformed.contains("hookgate_handshake=[redacted]"),
        "the proxy's copy of the URL is kept without the token: {malformed}"
    );
    if let Some(b) = b {
        b.stop().await;
    }
    a.stop().await;
}
for_each_store!(
    a_secret_handshake_is_taken_only_while_armed,
    super::the_handshake
);

/// What the review reproduced: an outsider sends `X-Hook-Secret` every 50 ms, with
/// no token and with a guessed one, on every gateway, while the operator arms the
/// source and, a second later, Asana's handshake comes with the token. Every one of
/// the outsider's is refused (none disarms the source), Asana's is taken, and
/// events signed with the secret the outsider tried to plant are refused while
/// Asana's are stored.
async fn an_outsider_polling(backend: Backend) {
    let h = StoreHandle::new(backend);
    let up = Upstream::ok().await;
    let sources = asana_sources(&up.url);
    let cfg = || admin_config(&h, "", &sources);
    let a = Gateway::start(cfg()).await;
    let b = match backend {
        Backend::Embedded => None,
        _ => Some(Gateway::start(cfg()).await),
    };
    let b_ingest = b.as_ref().map_or(a.ingest.clone(), |b| b.ingest.clone());
    let admin = Admin::new(&a);
    let c = http();
    const ASANA: &str = "5c0ffee5c0ffee5c0ffee5c0ffee5c0ffee5c0ffee5c0ffee5c0ffee5c0ffee5";

    let stop = Arc::new(AtomicBool::new(false));
    let polled = Arc::new(AtomicUsize::new(0));
    // Until the outsider has polled `n` more times.
    let polls = async |n: usize| {
        let until = polled.load(Ordering::SeqCst) + n;
        wait_until(
            "the outsider's polls",
            Duration::from_secs(30),
            async || polled.load(Ordering::SeqCst) >= until,
        )
        .await;
    };
    let outsider = tokio::spawn({
        let (stop, c, polled) = (stop.clone(), c.clone(), polled.clone());
        let targets = [a.ingest.clone(), b_ingest.clone()];
        async move {
            let mut answers = Vec::new();
            let mut n = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let base = &targets[n % 2];
                let query = match n % 3 {
                    0 => None,
                    1 => Some("hookgate_handshake=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
                    _ => Some("hookgate_handshake="),
                };
                answers.push((n, handshake(&c, base, query, PLANTED).await));
                polled.fetch_add(1, Ordering::SeqCst);
                n += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            answers
        }
    });
    polls(6).await;
    let (st, armed) = admin
        .call(
            "POST",
            "/admin/sources/asana/handshake",
            Some(serde_json::json!({"within_secs": 60})),
        )
        .await;
    assert_eq!(st, 200, "{armed}");
    let target = armed["target_url"].as_str().unwrap().to_string();
    let query = target.split_once('?').unwrap().1.to_string();
    // The outsider keeps polling through the window; Asana comes about a second
    // later (20 polls).
    polls(20).await;
    assert_eq!(
        handshake(&c, &b_ingest, Some(&query), ASANA).await,
        (200, Some(ASANA.to_string())),
        "Asana's handshake, after a second of polling"
    );
    polls(6).await;
    stop.store(true, Ordering::SeqCst);
    let answers = outsider.await.unwrap();
    assert!(answers.len() >= 20, "{} requests", answers.len());
    for (n, answer) in &answers {
        assert_eq!(*answer, (401, None), "the outsider's request {n}");
    }

    // The planted secret verifies nothing; Asana's does, on every gateway.
    for (n, base) in [&a.ingest, &b_ingest].into_iter().enumerate() {
        let planted = asana_event(&format!("planted-{n}"), PLANTED);
        assert_eq!(
            post_event(&c, base, &query, planted).await,
            401,
            "gateway {n}"
        );
        let genuine = asana_event(&format!("genuine-{n}"), ASANA);
        assert_eq!(
            post_event(&c, base, &query, genuine).await,
            200,
            "gateway {n}"
        );
    }
    wait_until("Asana's events delivered", WAIT, async || up.count() >= 2).await;
    assert_eq!(up.count(), 2);
    let state = admin.get("/admin/sources/asana/handshake").await;
    assert_eq!(
        state["secrets"].as_array().map(Vec::len),
        Some(1),
        "{state}"
    );
    assert_eq!(
        state["secrets"][0]["id"],
        hookgate::store::secret_id(ASANA).as_str()
    );

    // Every refusal is counted (the log keeps a few rows of each), and no row keeps
    // a secret or the token.
    let token = query.split_once('=').unwrap().1.to_string();
    wait_until_ok("the outsider's requests counted", WAIT, async || {
        let groups = admin.get("/admin/rejections/groups").await;
        let counted: u64 = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["source"] == "asana")
            .filter(|g| g["reason"] == "handshake_token" || g["reason"] == "handshake_not_armed")
            .filter_map(|g| g["count"].as_u64())
            .sum();
        if counted == answers.len() as u64 {
            Ok(())
        } else {
            Err(format!("{counted} of {}: {groups}", answers.len()))
        }
    })
    .await;
    let rows = Value::from(rejected(&admin, "handshake_token").await).to_string();
    for kept in [PLANTED, ASANA, &token] {
        assert!(
            !rows.contains(kept),
            "the rejection log keeps {kept:?}: {rows}"
        );
    }
    if let Some(b) = b {
        b.stop().await;
    }
    a.stop().await;
}
for_each_store!(
    an_outsider_polling_the_handshake_plants_no_secret,
    super::an_outsider_polling
);
