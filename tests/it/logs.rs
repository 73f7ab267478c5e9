//! Secrets, signatures, bodies, a handshake's secret and an arming's token never
//! appear in logs, even at trace level.

use crate::for_each_store;
use crate::support::*;

async fn logs_never_leak(backend: Backend) {
    let h = StoreHandle::new(backend);
    let dir = tempfile::tempdir().unwrap();
    let secret = "whsec_LOGTEST_a8f3c2e1d0b9";
    let cfg_path = write_config(
        dir.path(),
        &format!(
            "{}\n[[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret_env = \"LOGTEST_SECRET\"\ndestination = \"http://127.0.0.1:9/\"\n\
             [[sources]]\nname = \"asana\"\nprovider = \"asana\"\npublic_url = \"https://hooks.example.com/ingest/asana\"\ndestination = \"http://127.0.0.1:9/\"\n",
            h.toml()
        ),
    );
    let log_path = dir.path().join("stderr.log");
    let mut gw = ChildGateway::spawn(
        &cfg_path,
        &[
            ("LOGTEST_SECRET", secret),
            ("RUST_LOG", "trace"),
            ("HOOKGATE_LOG__FORMAT", "json"),
        ],
        &log_path,
    );
    let c = crate::support::http();
    let marker = "BODYMARKER9d41e7";
    let body = format!(r#"{{"id":"evt_log_1","type":"x","data":"{marker}"}}"#).into_bytes();
    let good = sign_headers("stripe", secret, &body, now_secs(), "x");
    let good_sig = good[0].1.split("v1=").nth(1).unwrap().to_string();
    let (st, json) = post_raw(&c, &gw.ingest, "stripe", &body, &good).await;
    assert_eq!(st, 200);
    let entry_id = json["id"].as_str().unwrap().to_string();
    let (st, _) = post_raw(&c, &gw.ingest, "stripe", &body, &good).await;
    assert_eq!(st, 200);
    let forged_sig = "f".repeat(64);
    let forged = vec![(
        "stripe-signature".to_string(),
        format!("t={},v1={forged_sig}", now_secs()),
    )];
    let (st, _) = post_raw(&c, &gw.ingest, "stripe", &body, &forged).await;
    assert_eq!(st, 401);
    let stale = sign_headers("stripe", secret, &body, now_secs() - 3600, "x");
    let stale_sig = stale[0].1.split("v1=").nth(1).unwrap().to_string();
    let (st, _) = post_raw(&c, &gw.ingest, "stripe", &body, &stale).await;
    assert_eq!(st, 401);
    // Asana's handshake: the arming's token (in the URL), and the secret (in a
    // header), refused without the token and taken with it.
    let admin = crate::admin::Admin::at(&gw.admin);
    let (st, armed) = admin
        .call("POST", "/admin/sources/asana/handshake", None)
        .await;
    assert_eq!(st, 200, "{armed}");
    let token = armed["token"].as_str().unwrap().to_string();
    let hook_secret = "HOOKSECRET7c1f0e2d9b8a";
    for query in [String::new(), format!("?hookgate_handshake={token}")] {
        let resp = c
            .post(format!("{}/ingest/asana{query}", gw.ingest))
            .header("x-hook-secret", hook_secret)
            .body("")
            .send()
            .await
            .unwrap();
        let expected = if query.is_empty() { 401 } else { 200 };
        assert_eq!(resp.status(), expected, "{query}");
    }
    gw.terminate();

    let log = std::fs::read_to_string(&log_path).unwrap();
    // The log is there and useful...
    assert!(
        log.contains(&entry_id),
        "the ingest line names the entry id:\n{log}"
    );
    assert!(log.contains("evt_log_1"));
    assert!(log.contains("\"outcome\":\"duplicate\""), "{log}");
    assert!(log.contains("\"outcome\":\"mismatch\""), "{log}");
    assert!(log.contains("\"outcome\":\"stale\""), "{log}");
    assert!(log.contains("\"outcome\":\"handshake_token\""), "{log}");
    assert!(log.contains("\"outcome\":\"handshake\""), "{log}");
    // ... and holds no secret, signature or body.
    for needle in [
        secret,
        "LOGTEST_a8f3c2e1d0b9",
        &good_sig,
        &forged_sig,
        &stale_sig,
        marker,
        hook_secret,
        &token,
    ] {
        assert!(!log.contains(needle), "the log contains {needle:?}:\n{log}");
    }
}
for_each_store!(
    logs_hold_no_secret_signature_or_body,
    super::logs_never_leak
);
