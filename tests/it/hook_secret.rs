//! Asana's secret handshake end to end, on every store: refused (and in the
//! rejection log) until an operator arms it; armed, the first handshake's
//! `X-Hook-Secret` is echoed and kept, and verifies events on every gateway of the
//! store (a second gateway reads it when an event matches none of its keys); one
//! arming takes one secret; a forgotten secret stops verifying; each action is in
//! the control audit.

use std::time::Duration;

use serde_json::Value;

use crate::admin::{Admin, admin_config};
use crate::for_each_store;
use crate::support::*;
use crate::upstream::Upstream;

const WAIT: Duration = Duration::from_secs(15);

/// An Asana event body and its signature under `secret`.
fn asana_event(gid: &str, secret: &str) -> (Vec<u8>, Vec<(String, String)>) {
    let body = format!(
        r#"{{"events":[{{"action":"changed","resource":{{"gid":"{gid}","resource_type":"task"}}}}]}}"#
    );
    let headers = sign_headers("asana", secret, body.as_bytes(), now_secs(), "x");
    (body.into_bytes(), headers)
}

/// POST Asana's handshake: its status and the `X-Hook-Secret` it was answered with.
async fn handshake(c: &reqwest::Client, base: &str, secret: &str) -> (u16, Option<String>) {
    let resp = c
        .post(format!("{base}/ingest/asana"))
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

async fn the_handshake(backend: Backend) {
    let h = StoreHandle::new(backend);
    let up = Upstream::ok().await;
    let sources = format!(
        "[[sources]]\nname = \"asana\"\nprovider = \"asana\"\ndestination = \"{}\"\n\
         [[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\ndestination = \"{}\"\n",
        up.url, up.url
    );
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

    // Not armed: refused, nothing kept; no key verifies an event.
    assert_eq!(handshake(&c, &a.ingest, S1).await, (401, None));
    let (body, headers) = asana_event("1", S1);
    let (st, _) = post_raw(&c, &a.ingest, "asana", &body, &headers).await;
    assert_eq!(st, 401);
    let state = admin.get("/admin/sources/asana/handshake").await;
    assert_eq!(state["armed_until"], Value::Null, "{state}");
    assert_eq!(state["secrets"], serde_json::json!([]), "{state}");
    // Only a source whose provider has the handshake can be armed; and for a while.
    let (st, json) = admin
        .call("POST", "/admin/sources/stripe/handshake", None)
        .await;
    assert_eq!(st, 409, "{json}");
    let (st, json) = admin
        .call(
            "POST",
            "/admin/sources/asana/handshake",
            Some(serde_json::json!({"within_secs": 0})),
        )
        .await;
    assert_eq!(st, 400, "{json}");

    // Armed: the first handshake is echoed and its secret kept; the next is refused.
    let (st, json) = admin
        .call(
            "POST",
            "/admin/sources/asana/handshake",
            Some(serde_json::json!({"within_secs": 60})),
        )
        .await;
    assert_eq!(st, 200, "{json}");
    assert!(json["armed_until"].is_string(), "{json}");
    assert_eq!(
        handshake(&c, &a.ingest, S1).await,
        (200, Some(S1.to_string()))
    );
    assert_eq!(
        handshake(&c, &b_ingest, S2).await,
        (401, None),
        "one arming"
    );

    // Events signed with it verify on every gateway; one signed with the refused
    // secret does not.
    for (n, base) in [&a.ingest, &b_ingest].into_iter().enumerate() {
        let (body, headers) = asana_event(&format!("task-{n}"), S1);
        let (st, json) = post_raw(&c, base, "asana", &body, &headers).await;
        assert_eq!(st, 200, "gateway {n}: {json}");
    }
    let (body, headers) = asana_event("task-x", S2);
    let (st, _) = post_raw(&c, &b_ingest, "asana", &body, &headers).await;
    assert_eq!(st, 401);
    wait_until("both events delivered", WAIT, async || up.count() >= 2).await;
    assert_eq!(up.count(), 2);

    let state = admin.get("/admin/sources/asana/handshake").await;
    let id = hookgate::store::secret_id(S1);
    assert_eq!(state["armed_until"], Value::Null, "disarmed: {state}");
    assert_eq!(
        state["secrets"].as_array().map(Vec::len),
        Some(1),
        "{state}"
    );
    assert_eq!(state["secrets"][0]["id"], id.as_str());
    assert!(
        !state.to_string().contains(S1),
        "the secret itself is never shown: {state}"
    );

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
    // rejection log under their own reason.
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
    wait_until_ok("the refused handshakes logged", WAIT, async || {
        let page = admin
            .get("/admin/rejections?source=asana&reason=handshake_not_armed")
            .await;
        match page["rejections"].as_array().map(Vec::len) {
            Some(2) => Ok(()),
            _ => Err(page),
        }
    })
    .await;
    if let Some(b) = b {
        b.stop().await;
    }
    a.stop().await;
}
for_each_store!(
    a_secret_handshake_is_taken_only_while_armed,
    super::the_handshake
);
