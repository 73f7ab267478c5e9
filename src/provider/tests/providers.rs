//! Providers with a behaviour of their own, one by one: handshakes (Slack, Zoom,
//! Discord), event ids and types from form and JSON bodies, ECDSA encodings
//! (SendGrid), a signature carried in the body (Mailgun), signed URLs and form
//! parameters (Twilio), redeliveries with a new timestamp (Linear), and the dedupe
//! key each kind of event id gets.

use super::*;

#[test]
fn event_metadata_and_slack_handshake() {
    let slack = builtin("slack");
    let body = br#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let sent = send(&slack, body, NOW, "x").unwrap();
    let v = verifier(&slack);
    let ok = v.verify(sent.req(), NOW + 10).unwrap();
    assert_eq!(
        ok.handshake(),
        Some(HandshakeReply::Text(
            "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P".into()
        ))
    );
    assert_eq!(ok.event_id(), None);
    // Ten minutes later the same request is stale, and no handshake is answered.
    assert_eq!(
        v.verify(sent.req(), NOW + 600).err(),
        Some(VerifyError::TimestampOutsideTolerance)
    );
}

#[test]
fn slack_form_bodies_give_event_ids_and_types() {
    let slack = builtin("slack");
    let v = verifier(&slack);
    // The published slash-command body: its trigger_id.
    let slash = slack.vectors[0].body.as_bytes();
    let sent = send(&slack, slash, NOW, "x").unwrap();
    let ok = v.verify(sent.req(), NOW).unwrap();
    assert_eq!(
        ok.event_id().as_deref(),
        Some("398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
    );
    assert_eq!(ok.event_type().as_deref(), Some("/webhook-collect"));
    // Interactivity: trigger_id inside the JSON `payload` field.
    let interactive = slack
        .vectors
        .iter()
        .find(|v| v.description.contains("interactivity"))
        .unwrap();
    let sent = send(&slack, interactive.body.as_bytes(), NOW, "x").unwrap();
    let ok = v.verify(sent.req(), NOW).unwrap();
    assert_eq!(
        ok.event_id().as_deref(),
        Some("13345224609.738474920.8088930838d88f008e0")
    );
    assert_eq!(ok.event_type().as_deref(), Some("block_actions"));
    assert!(slack.event_id_is_signed());
}

#[test]
fn stripe_event_id_and_type_come_from_the_body() {
    let spec = builtin("stripe");
    let v = spec.vectors[0].clone();
    let verifier = Verifier::new(spec, &[Secret::new(&v.secret)]).unwrap();
    let headers = headers_of(&v);
    let ok = verifier
        .verify(post_to_root(&headers, v.body.as_bytes()), NOW)
        .unwrap();
    assert_eq!(ok.event_id().as_deref(), Some("evt_test_webhook"));
    assert_eq!(ok.event_type().as_deref(), Some("payment_intent.succeeded"));
    assert_eq!(ok.timestamp, Some(NOW));
}

#[test]
fn zoom_url_validation_is_answered_with_the_verifying_secret() {
    let zoom = builtin("zoom");
    let secret = "zoom-secret-token";
    let body = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1700000000000,"event":"endpoint.url_validation"}"#;
    let signed = sign(
        &zoom,
        &Secret::new(secret),
        &SignInput {
            body,
            timestamp: NOW,
            id: "x",
            event_type: None,
            method: "POST",
            path: "/",
            url: None,
        },
    )
    .unwrap();
    let h = header_map(&signed.headers);
    let req = post_to_root(&h, body);
    // With the secret second in a rotation list, the answer still uses it.
    let v = Verifier::new(
        zoom.clone(),
        &[Secret::new("retired-zoom-secret"), Secret::new(secret)],
    )
    .unwrap();
    let ok = v.verify(req, NOW).unwrap();
    // encryptedToken computed with Python: hmac.new(secret, plainToken, sha256).hexdigest()
    assert_eq!(
        ok.handshake(),
        Some(HandshakeReply::Json(serde_json::json!({
            "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
            "encryptedToken": "d9e0d764a78494688ba3f2d5c0ed4ca311394b4834d959759213424d2df961e3",
        })))
    );
    let other = Verifier::new(zoom, &[Secret::new("retired-zoom-secret")]).unwrap();
    assert_eq!(other.verify(req, NOW).err(), Some(VerifyError::Mismatch));
}

#[test]
fn discord_ping_is_answered_and_webhook_events_are_not_pings() {
    let discord = builtin("discord");
    let v = verifier(&discord);
    let ping = send(
        &discord,
        br#"{"type":1,"id":"1","application_id":"2"}"#,
        NOW,
        "x",
    )
    .unwrap();
    let ok = v.verify(ping.req(), NOW).unwrap();
    assert_eq!(
        ok.handshake(),
        Some(HandshakeReply::Json(serde_json::json!({"type": 1})))
    );
    let event = send(
        &discord,
        br#"{"version":1,"application_id":"2","type":1,"event":{"type":"APPLICATION_AUTHORIZED"}}"#,
        NOW,
        "x",
    )
    .unwrap();
    assert_eq!(v.verify(event.req(), NOW).unwrap().handshake(), None);
    let command = send(&discord, br#"{"type":2,"id":"1103"}"#, NOW, "x").unwrap();
    let ok = v.verify(command.req(), NOW).unwrap();
    assert_eq!(ok.handshake(), None);
    assert_eq!(ok.event_id().as_deref(), Some("1103"));
    assert_eq!(ok.event_type().as_deref(), Some("2"));
    // Discord's check when the URL is saved: a bad signature must answer 401.
    let mut bad = ping;
    bad.headers.insert(
        "x-signature-ed25519",
        HeaderValue::from_str(&"00".repeat(64)).unwrap(),
    );
    assert_eq!(v.verify(bad.req(), NOW).err(), Some(VerifyError::Mismatch));
}

#[test]
fn ecdsa_signatures_in_every_encoding_sendgrid_may_use() {
    use p256::ecdsa::signature::Signer as _;
    let reg = Registry::builtin().unwrap();
    let sendgrid = reg.get("sendgrid").unwrap().clone();
    let v = verifier(&sendgrid);
    let body = br#"[{"event":"delivered","sg_event_id":"a"}]"#;
    let msg = [b"1700000000".as_slice(), body].concat();
    let sig: p256::ecdsa::Signature = sendgrid_key().sign(&msg);
    let (r, s) = sig.split_scalars();
    // The same signature with s replaced by n - s ("high S"), as signers that do not
    // normalise produce half the time.
    let high =
        p256::ecdsa::Signature::from_scalars(r.to_bytes(), (-*s.as_ref()).to_bytes()).unwrap();
    for (what, bytes) in [
        ("DER", sig.to_der().as_bytes().to_vec()),
        ("r||s", sig.to_bytes().to_vec()),
        ("DER, high S", high.to_der().as_bytes().to_vec()),
    ] {
        let mut h = HeaderMap::new();
        h.insert(
            "x-twilio-email-event-webhook-signature",
            HeaderValue::from_str(&B64.encode(&bytes)).unwrap(),
        );
        h.insert(
            "x-twilio-email-event-webhook-timestamp",
            HeaderValue::from_static("1700000000"),
        );
        let req = post_to_root(&h, body);
        assert!(v.verify(req, NOW).is_ok(), "{what}");
    }
    // A SEC1 point is accepted as the key too.
    let sec1 = B64.encode(sendgrid_key().verifying_key().to_sec1_bytes());
    assert!(Verifier::new(sendgrid.clone(), &[Secret::new(sec1)]).is_ok());
    for bad in ["", "AAAA", "not base64!"] {
        assert!(
            Verifier::new(sendgrid.clone(), &[Secret::new(bad)]).is_err(),
            "{bad:?}"
        );
    }
    let discord = reg.get("discord").unwrap().clone();
    for bad in ["00", "zz", &"00".repeat(33)] {
        assert!(
            Verifier::new(discord.clone(), &[Secret::new(bad)]).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn mailgun_signature_lives_in_the_body_and_its_token_is_the_event_id() {
    let mailgun = builtin("mailgun");
    let v = verifier(&mailgun);
    let sent = send(&mailgun, &test_body(&mailgun, "ev1"), NOW, "tok-123").unwrap();
    let body: serde_json::Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(body["signature"]["token"], "tok-123");
    assert_eq!(body["signature"]["timestamp"], NOW);
    assert!(body["signature"]["signature"].is_string());
    assert!(sent.headers.is_empty(), "no header carries anything");
    let ok = v.verify(sent.req(), NOW).unwrap();
    assert_eq!(ok.event_id().as_deref(), Some("tok-123"));
    assert_eq!(ok.event_type().as_deref(), Some("delivered"));
    assert!(mailgun.event_id_is_signed());
    // event-data is not signed by Mailgun: a replayed signature with another event
    // verifies, and dedupes on the same token (so it is refused as a duplicate).
    let mut forged = body.clone();
    forged["event-data"]["event"] = "failed".into();
    let forged = Sent {
        body: serde_json::to_vec(&forged).unwrap(),
        headers: HeaderMap::new(),
        url: None,
        path: "/".into(),
    };
    let ok = v.verify(forged.req(), NOW).unwrap();
    assert_eq!(ok.event_id().as_deref(), Some("tok-123"));
}

#[test]
fn twilio_signs_the_url_and_form_parameters() {
    let twilio = builtin("twilio");
    let v = verifier(&twilio);
    let body = b"MessageSid=SM1&Body=hi+there&From=%2B15551234567";
    let sent = send(&twilio, body, NOW, "x").unwrap();
    let ok = v.verify(sent.req(), NOW).unwrap();
    let digest = ok.content_digest();
    assert!(digest.starts_with("form-sha256:"), "{digest}");
    assert_eq!(ok.event_id(), None, "no delivery id: the content dedupes");
    // The same parameters reordered and re-encoded verify and dedupe the same.
    let again = Sent {
        body: b"From=%2b15551234567&Body=hi%20there&MessageSid=SM1".to_vec(),
        headers: sent.headers.clone(),
        url: sent.url.clone(),
        path: sent.path.clone(),
    };
    assert_eq!(v.verify(again.req(), NOW).unwrap().content_digest(), digest);
    // The SharedKey variant: HMAC-SHA256 under the same scheme.
    let mut sha256 = (*twilio).clone();
    sha256.algorithms = vec![Algorithm::HmacSha256];
    let sent = send(&sha256, body, NOW, "x").unwrap();
    assert!(v.verify(sent.req(), NOW).is_ok());
    // A JSON body is bound by its digest in the URL, and dedupes on the raw bytes.
    let json = br#"{"a":1}"#;
    let url = format!(
        "https://hooks.example.com/ingest/x?bodySHA256={}",
        hex::encode(sha2::Sha256::digest(json))
    );
    let path = path_of(Some(&url));
    let signed = sign(
        &twilio,
        &Secret::new(test_secret(&twilio)),
        &SignInput {
            body: json,
            timestamp: NOW,
            id: "x",
            event_type: None,
            method: "POST",
            path: &path,
            url: Some(&url),
        },
    )
    .unwrap();
    let h = header_map(&signed.headers);
    let req = Request {
        method: "POST",
        path: &path,
        url: Some(&url),
        headers: &h,
        body: json,
    };
    let ok = v.verify(req, NOW).unwrap();
    assert!(ok.content_digest().starts_with("body-sha256:"));
    let req = Request {
        body: br#"{"a":2}"#,
        ..req
    };
    assert_eq!(
        v.verify(req, NOW).err(),
        Some(VerifyError::BodyDigestMismatch)
    );
}

#[test]
fn linear_event_ids_survive_a_redelivery_with_a_new_timestamp() {
    let linear = builtin("linear");
    let v = verifier(&linear);
    let body = test_body(&linear, "issue-1");
    let first = send(&linear, &body, NOW, "x").unwrap();
    let retry = send(&linear, &body, NOW + 600, "x").unwrap();
    assert_ne!(first.body, retry.body, "webhookTimestamp differs");
    let a = v.verify(first.req(), NOW).unwrap();
    let b = v.verify(retry.req(), NOW + 600).unwrap();
    assert_eq!(a.event_id(), b.event_id());
    assert_eq!(
        a.event_id().as_deref(),
        Some("wh:thing.happened:create:issue-1:2026-01-01T00:00:00Z")
    );
    assert_eq!(a.event_type().as_deref(), Some("thing.happened.create"));
}

/// The dedupe key trusts an event id alone only when the signature covers the id and
/// the whole body (Stripe). An unsigned id (GitHub's delivery header) is bound to the
/// body's digest, an id signed without the body (Mailgun's token) to the digest of
/// the event's part, and without an id (Twilio) the content digest is the key. The
/// keys are stored with every entry, so their form is pinned here.
#[test]
fn dedupe_keys_trust_an_id_alone_only_when_the_id_and_the_body_are_signed() {
    let reg = Registry::builtin().unwrap();
    let identity_of = |name: &str, body: &[u8], id: &str| {
        let spec = reg.get(name).unwrap().clone();
        let sent = send(&spec, body, NOW, id).unwrap();
        let v = verifier(&spec);
        let ok = v.verify(sent.req(), NOW).unwrap();
        let identity = ok.identity();
        assert_eq!(identity.event_id, ok.event_id(), "{name}");
        assert_eq!(identity.dedupe_key, ok.dedupe_key(), "{name}");
        (identity, sent.body)
    };
    let sha256_hex = |bytes: &[u8]| hex::encode(sha2::Sha256::digest(bytes));

    let stripe = reg.get("stripe").unwrap();
    let (identity, _) = identity_of("stripe", &test_body(stripe, "evt_1"), "d-1");
    assert_eq!(identity.event_id.as_deref(), Some("evt_1"));
    assert_eq!(identity.dedupe_key, "id:evt_1");

    let github = reg.get("github").unwrap();
    let (identity, body) = identity_of("github", &test_body(github, "evt_1"), "delivery-1");
    assert_eq!(identity.event_id.as_deref(), Some("delivery-1"));
    assert_eq!(
        identity.dedupe_key,
        format!("id:delivery-1:body-sha256:{}", sha256_hex(&body))
    );

    let mailgun = reg.get("mailgun").unwrap();
    let (identity, body) = identity_of("mailgun", &test_body(mailgun, "ev1"), "tok-123");
    let parts: std::collections::HashMap<String, &serde_json::value::RawValue> =
        serde_json::from_slice(&body).unwrap();
    let event_data = parts["event-data"].get().as_bytes();
    assert_eq!(
        identity.dedupe_key,
        format!("id:tok-123:part-sha256:{}", sha256_hex(event_data))
    );

    let (identity, _) = identity_of("twilio", b"MessageSid=SM1&Body=hi", "x");
    assert_eq!(identity.event_id, None);
    let mut form = sha2::Sha256::new();
    for part in ["Body", "hi", "MessageSid", "SM1"] {
        form.update((part.len() as u64).to_be_bytes());
        form.update(part.as_bytes());
    }
    assert_eq!(
        identity.dedupe_key,
        format!("form-sha256:{}", hex::encode(form.finalize()))
    );
}
