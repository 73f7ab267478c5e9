//! The ingest contract: every row of the answers table in design.md, real provider
//! signatures with their tampered variants, and concurrent redeliveries.

use std::time::Duration;

use hookgate::store::Status;

use crate::for_each_store;
use crate::support::*;

fn shift_timestamp(headers: &mut [(String, String)], provider: &str) {
    match provider {
        "stripe" => {
            let (_, v) = headers
                .iter_mut()
                .find(|(n, _)| n == "stripe-signature")
                .unwrap();
            let rest = v.split_once(',').unwrap().1.to_string();
            let t: i64 = v[2..v.find(',').unwrap()].parse().unwrap();
            *v = format!("t={},{rest}", t + 1);
        }
        "slack" | "standard-webhooks" => {
            let name = if provider == "slack" {
                "x-slack-request-timestamp"
            } else {
                "webhook-timestamp"
            };
            let (_, v) = headers.iter_mut().find(|(n, _)| n == name).unwrap();
            *v = (v.parse::<i64>().unwrap() + 1).to_string();
        }
        _ => unreachable!(),
    }
}

fn sig_header(provider: &str) -> &'static str {
    match provider {
        "stripe" => "stripe-signature",
        "github" => "x-hub-signature-256",
        "slack" => "x-slack-signature",
        "standard-webhooks" => "webhook-signature",
        "shopify" => "x-shopify-hmac-sha256",
        _ => "x-signature",
    }
}

async fn answers_table(backend: Backend) {
    let mut h = StoreHandle::new(backend);
    let gw = Gateway::start(config(&h, "[server]\nmax_body_bytes = 4096\n")).await;
    let store = h.open().await;
    let c = crate::support::http();

    // verified, new -> 200 {id, duplicate: false}, stored
    let body = event_body("stripe", "evt_table_1");
    let (st, json) = post_signed(&c, &gw, "stripe", &body, "x").await;
    assert_eq!(st, 200, "{json}");
    assert_eq!(json["duplicate"], false);
    let id = json["id"].as_str().unwrap().to_string();
    let stored = answered_entry(&*store, &json).await;
    assert_eq!(stored.status, Status::Pending);
    assert_eq!(stored.event_id.as_deref(), Some("evt_table_1"));
    assert_eq!(
        stored.event_type.as_deref(),
        Some("payment_intent.succeeded")
    );
    assert_eq!(stored.body.as_ref(), body.as_slice());

    // verified, seen before -> 200 {original id, duplicate: true}, nothing stored
    let (st, json) = post_signed(&c, &gw, "stripe", &body, "x").await;
    assert_eq!((st, json["duplicate"].clone()), (200, true.into()));
    assert_eq!(json["id"], id.as_str());
    assert_eq!(store.count("stripe").await.unwrap(), 1);

    // Slack url_verification, verified -> 200 with the challenge, not stored
    let challenge = br#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let (st, json) = post_signed(&c, &gw, "slack", challenge, "x").await;
    assert_eq!(st, 200);
    assert_eq!(
        json,
        serde_json::Value::String("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P".into())
    );
    // ... and only after verification: a forged one is refused.
    let mut forged = sign_headers("slack", "wrong", challenge, now_secs(), "x");
    let (st, _) = post_raw(&c, &gw.ingest, "slack", challenge, &forged).await;
    assert_eq!(st, 401);
    forged.retain(|(n, _)| n != "x-slack-signature");
    let (st, _) = post_raw(&c, &gw.ingest, "slack", challenge, &forged).await;
    assert_eq!(st, 401);
    assert_eq!(store.count("slack").await.unwrap(), 0);

    // unknown source -> 404 with an error
    let (st, json) = post_signed(&c, &gw, "nope", &body, "x").await;
    assert_eq!(st, 404);
    assert!(json["error"].as_str().unwrap().contains("unknown source"));

    // missing / bad signature, wrong secret -> 401, never the expected value
    let body2 = event_body("stripe", "evt_table_2");
    let (st, json) = post_raw(&c, &gw.ingest, "stripe", &body2, &[]).await;
    assert_eq!(
        (st, json["error"].as_str()),
        (401, Some("missing signature header"))
    );
    let mut bad = sign_headers("stripe", STRIPE_SECRET, &body2, now_secs(), "x");
    flip_signature(&mut bad, "stripe-signature", 5);
    let (st, json) = post_raw(&c, &gw.ingest, "stripe", &body2, &bad).await;
    assert_eq!(
        (st, json["error"].as_str()),
        (401, Some("signature does not match"))
    );
    let good = sign_headers("stripe", STRIPE_SECRET, &body2, now_secs(), "x");
    let expected_sig = good[0].1.rsplit('=').next().unwrap().to_string();
    let wrong = sign_headers("stripe", "whsec_wrong", &body2, now_secs(), "x");
    let resp = c
        .post(format!("{}/ingest/stripe", gw.ingest))
        .header("stripe-signature", &wrong[0].1)
        .body(body2.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let text = resp.text().await.unwrap();
    assert!(
        !text.contains(&expected_sig),
        "the answer leaks the expected signature"
    );

    // timestamp outside tolerance -> 401 {"error": "timestamp outside tolerance"}
    let stale = sign_headers("stripe", STRIPE_SECRET, &body2, now_secs() - 400, "x");
    let (st, json) = post_raw(&c, &gw.ingest, "stripe", &body2, &stale).await;
    assert_eq!(st, 401);
    assert_eq!(
        json,
        serde_json::json!({"error": "timestamp outside tolerance"})
    );
    let future = sign_headers("stripe", STRIPE_SECRET, &body2, now_secs() + 400, "x");
    let (st, _) = post_raw(&c, &gw.ingest, "stripe", &body2, &future).await;
    assert_eq!(st, 401);

    // body over the limit -> 413 (declared length, and chunked without a length)
    let big = vec![b'x'; 4097];
    let (st, _) = post_signed(&c, &gw, "hmac", &big, "x").await;
    assert_eq!(st, 413);
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..10).map(|_| Ok(vec![b'y'; 1000])).collect();
    let resp = c
        .post(format!("{}/ingest/hmac", gw.ingest))
        .header("x-signature", "00")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    // exactly at the limit is fine
    let (st, _) = post_signed(&c, &gw, "hmac", &vec![b'z'; 4096], "x").await;
    assert_eq!(st, 200);

    // not POST -> 405
    for method in [
        reqwest::Method::GET,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
    ] {
        let resp = c
            .request(method.clone(), format!("{}/ingest/stripe", gw.ingest))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 405, "{method}");
    }

    // source paused -> 200 and stored; delivery waits
    store.set_paused("paused", None, true).await.unwrap();
    let (st, json) = post_signed(&c, &gw, "paused", b"{\"id\":\"p1\"}", "x").await;
    assert_eq!(st, 200);
    let e = answered_entry(&*store, &json).await;
    assert_eq!(e.status, Status::Pending);
    assert!(
        crate::support::paused_sources(&*store)
            .await
            .contains(&"paused".to_string())
    );

    // nothing else was stored by any refusal above
    assert_eq!(store.count("stripe").await.unwrap(), 1);
    assert_eq!(store.count("hmac").await.unwrap(), 1);

    // store unavailable -> 503, never 2xx (Redis only: the embedded store cannot be
    // made to fail from outside while the process runs as root)
    if backend == Backend::Redis {
        h.redis_mut().stop();
        let body3 = event_body("stripe", "evt_table_3");
        let (st, json) = post_signed(&c, &gw, "stripe", &body3, "x").await;
        assert_eq!(st, 503, "{json}");
        h.redis_mut().restart();
    }
    gw.stop().await;
}
for_each_store!(every_row_of_the_answers_table, super::answers_table);

async fn provider_signatures(backend: Backend) {
    let h = StoreHandle::new(backend);
    let gw = Gateway::start(config(&h, "")).await;
    let store = h.open().await;
    let c = crate::support::http();
    for source in [
        "stripe",
        "github",
        "slack",
        "standard-webhooks",
        "shopify",
        "hmac",
    ] {
        let provider = provider_for(source);
        let body = event_body(source, &format!("evt_{source}"));
        let delivery = format!("delivery-{source}");
        let ok = sign_headers(provider, secret_for(source), &body, now_secs(), &delivery);

        // one flipped byte in the body
        let mut tampered = body.clone();
        let i = tampered.len() / 2;
        tampered[i] ^= 0x01;
        let (st, _) = post_raw(&c, &gw.ingest, source, &tampered, &ok).await;
        assert_eq!(st, 401, "{source}: tampered body");

        // one flipped character in the signature
        let mut bad = ok.clone();
        flip_signature(&mut bad, sig_header(provider), 5);
        let (st, _) = post_raw(&c, &gw.ingest, source, &body, &bad).await;
        assert_eq!(st, 401, "{source}: tampered signature");

        // wrong secret
        let wrong_secret = if provider == "standard-webhooks" {
            "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        } else {
            "not-the-secret"
        };
        let wrong = sign_headers(provider, wrong_secret, &body, now_secs(), &delivery);
        let (st, _) = post_raw(&c, &gw.ingest, source, &body, &wrong).await;
        assert_eq!(st, 401, "{source}: wrong secret");

        if matches!(provider, "stripe" | "slack" | "standard-webhooks") {
            let mut shifted = ok.clone();
            shift_timestamp(&mut shifted, provider);
            let (st, _) = post_raw(&c, &gw.ingest, source, &body, &shifted).await;
            assert_eq!(st, 401, "{source}: timestamp changed after signing");
            let stale = sign_headers(
                provider,
                secret_for(source),
                &body,
                now_secs() - 3600,
                &delivery,
            );
            let (st, json) = post_raw(&c, &gw.ingest, source, &body, &stale).await;
            assert_eq!(st, 401, "{source}: stale");
            assert_eq!(json["error"], "timestamp outside tolerance");
        }
        assert_eq!(
            store.count(source).await.unwrap(),
            0,
            "{source}: a refusal stored something"
        );

        let (st, json) = post_raw(&c, &gw.ingest, source, &body, &ok).await;
        assert_eq!(st, 200, "{source}: {json}");
        assert_eq!(json["duplicate"], false, "{source}");
        let e = answered_entry(&*store, &json).await;
        let want_id = match provider {
            "github" | "standard-webhooks" | "shopify" => Some(delivery.clone()),
            "hmac" => None,
            _ => Some(format!("evt_{source}")),
        };
        assert_eq!(e.event_id, want_id, "{source}");
        // the provider's own headers are kept, for pass-through to legacy consumers
        assert!(
            e.headers.iter().any(|hd| hd.name == sig_header(provider)),
            "{source}: signature header not kept"
        );
        assert_eq!(store.count(source).await.unwrap(), 1, "{source}");
    }

    // GitHub's documented vector, byte for byte, end to end.
    let vector = vec![(
        "x-hub-signature-256".to_string(),
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17".to_string(),
    )];
    let (st, json) = post_raw(&c, &gw.ingest, "github", b"Hello, World!", &vector).await;
    assert_eq!(st, 200, "{json}");
    let e = answered_entry(&*store, &json).await;
    assert!(
        e.dedupe_key.starts_with("body-sha256:"),
        "no delivery id: body hash dedupe"
    );

    // A rotated secret list accepts old and new.
    for (i, secret) in ["new-secret-2026", GITHUB_SECRET].into_iter().enumerate() {
        let body = event_body("rotated", &format!("rot-{i}"));
        let headers = sign_headers("github", secret, &body, now_secs(), &format!("rot-{i}"));
        let (st, _) = post_raw(&c, &gw.ingest, "rotated", &body, &headers).await;
        assert_eq!(st, 200, "rotated secret #{i}");
    }
    let body = event_body("rotated", "rot-x");
    let headers = sign_headers("github", "retired-secret", &body, now_secs(), "rot-x");
    let (st, _) = post_raw(&c, &gw.ingest, "rotated", &body, &headers).await;
    assert_eq!(st, 401);
    assert_eq!(store.count("rotated").await.unwrap(), 2);
    gw.stop().await;
}
for_each_store!(
    real_provider_signatures_and_tampering,
    super::provider_signatures
);

async fn concurrent_redeliveries(backend: Backend) {
    let h = StoreHandle::new(backend);
    let gw = Gateway::start(config(&h, "")).await;
    let store = h.open().await;
    let c = crate::support::http();
    let body = event_body("stripe", "evt_concurrent");
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let c = c.clone();
        let body = body.clone();
        let url = gw.ingest.clone();
        tasks.push(tokio::spawn(async move {
            post_stripe_signed(&c, &url, "stripe", &body).await
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    assert!(answers.iter().all(|(st, _)| *st == 200), "{answers:?}");
    let new: Vec<_> = answers
        .iter()
        .filter(|(_, j)| j["duplicate"] == false)
        .collect();
    assert_eq!(new.len(), 1, "exactly one new entry");
    let id = new[0].1["id"].clone();
    assert!(answers.iter().all(|(_, j)| j["id"] == id));
    assert_eq!(
        answers
            .iter()
            .filter(|(_, j)| j["duplicate"] == true)
            .count(),
        49
    );
    assert_eq!(store.count("stripe").await.unwrap(), 1);
    gw.stop().await;
}
for_each_store!(
    fifty_concurrent_deliveries_store_one_entry,
    super::concurrent_redeliveries
);

async fn redis_outage(_: Backend) {
    let mut h = StoreHandle::new(Backend::Redis);
    let gw = Gateway::start(config(&h, "")).await;
    let c = crate::support::http_builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let (st, _) = post_signed(&c, &gw, "stripe", &event_body("stripe", "before"), "x").await;
    assert_eq!(st, 200);

    h.redis_mut().stop();
    for i in 0..5 {
        let (st, json) = post_signed(
            &c,
            &gw,
            "stripe",
            &event_body("stripe", &format!("down-{i}")),
            "x",
        )
        .await;
        assert_eq!(st, 503, "while redis is down: {json}");
    }
    let ready = c.get(format!("{}/readyz", gw.admin)).send().await.unwrap();
    assert_eq!(ready.status(), 503);

    h.redis_mut().restart();
    // The gateway reconnects by itself; no restart.
    wait_until("ingest to recover", Duration::from_secs(15), async || {
        let (st, _) = post_signed(&c, &gw, "stripe", &event_body("stripe", "after"), "x").await;
        assert!(st == 200 || st == 503, "{st}");
        st == 200
    })
    .await;
    let store = h.open().await;
    assert_eq!(
        store.count("stripe").await.unwrap(),
        2,
        "before + after, none of the 503s"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_answers_503_then_recovers_without_restart() {
    redis_outage(Backend::Redis).await;
}
