//! Crash safety: SIGKILL the gateway under load; every request that got a 2xx must
//! be in the store afterwards, and its dedupe key must still hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::for_each_store;
use crate::support::*;

async fn sigkill_under_load(backend: Backend) {
    let h = StoreHandle::new(backend);
    let dir = tempfile::tempdir().unwrap();
    let cfg_path = config_file(&h, dir.path());
    let mut gw = ChildGateway::spawn(&cfg_path, &[], &dir.path().join("stderr.log"));

    let acked: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let client = crate::support::http_builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for worker in 0..16 {
        let acked = acked.clone();
        let client = client.clone();
        let url = gw.ingest.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0.. {
                let event = format!("evt_crash_{worker}_{n}");
                let body = event_body("stripe", &event);
                let headers = sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), "x");
                let mut req = client.post(format!("{url}/ingest/stripe")).body(body);
                for (k, v) in &headers {
                    req = req.header(k.as_str(), v.as_str());
                }
                match req.send().await {
                    Ok(resp) if resp.status() == 200 => {
                        let json: serde_json::Value = match resp.json().await {
                            Ok(j) => j,
                            // The connection died after the status line: not acknowledged.
                            Err(_) => break,
                        };
                        let id = json["id"].as_str().unwrap().to_string();
                        acked.lock().unwrap().insert(event, id);
                    }
                    Ok(resp) => panic!("unexpected answer {}", resp.status()),
                    Err(_) => break, // the gateway is gone
                }
            }
        }));
    }
    // Let load build up, then kill the gateway mid-flight.
    wait_until_ok(
        "300 acknowledged before the kill",
        Duration::from_secs(20),
        async || match acked.lock().unwrap().len() {
            n if n >= 300 => Ok(()),
            n => Err(format!("{n} acknowledged")),
        },
    )
    .await;
    gw.kill();
    for t in tasks {
        t.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();

    // Every acknowledged request is in the store, under the id it was given.
    let store = h.open().await;
    let mut missing = Vec::new();
    for (event, id) in &acked {
        match store.get(id).await.unwrap() {
            Some(e) => assert_eq!(e.event_id.as_deref(), Some(event.as_str())),
            None => missing.push(event.clone()),
        }
    }
    assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");
    store.close().await;
    drop(store);

    // After a restart, redeliveries of acknowledged events are duplicates of the
    // original entries.
    let gw2 = ChildGateway::spawn(&cfg_path, &[], &dir.path().join("stderr2.log"));
    for (event, id) in acked.iter().take(20) {
        let (st, json) = post_stripe(&client, &gw2.ingest, event).await;
        assert_eq!(st, 200);
        assert_eq!(json["duplicate"], true, "{event}");
        assert_eq!(json["id"], id.as_str());
    }
    eprintln!(
        "{backend:?}: {} acknowledged before SIGKILL, none lost",
        acked.len()
    );
}
for_each_store!(
    sigkill_under_load_loses_no_acknowledged_entry,
    super::sigkill_under_load
);
