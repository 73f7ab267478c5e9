//! The provider catalogue end to end, through the real gateway, driven by one table:
//! for every provider a correctly signed request is stored; a one-byte tamper, a
//! wrong secret or key and (where the scheme signs time) a stale timestamp answer 401
//! and store nothing; the provider's redelivery of the same event is a duplicate.
//! Handshakes are answered only after verification, `hookgate sign` output is
//! accepted for every symmetric provider, and `hookgate providers` describes them.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hookgate::config::{self, Secret};
use hookgate::provider::sign::{SignInput, sign};
use hookgate::provider::{Registry, request_url};

use crate::cli::{run, sign_output};
use crate::for_each_store;
use crate::support::*;

/// What a request is signed with.
#[derive(Clone)]
enum Signer {
    /// A shared secret (HMAC or token schemes), as the provider holds it.
    Secret(&'static str),
    /// An Ed25519 private key seed (Discord).
    Ed25519([u8; 32]),
    /// A P-256 private scalar (SendGrid).
    P256([u8; 32]),
}

impl Signer {
    /// What the source is configured with: the secret, or the public key.
    fn configured(&self) -> String {
        use p256::pkcs8::EncodePublicKey as _;
        match self {
            Signer::Secret(s) => s.to_string(),
            Signer::Ed25519(seed) => hex::encode(
                ed25519_dalek::SigningKey::from_bytes(seed)
                    .verifying_key()
                    .to_bytes(),
            ),
            Signer::P256(d) => B64.encode(
                p256::ecdsa::SigningKey::from_slice(d)
                    .unwrap()
                    .verifying_key()
                    .to_public_key_der()
                    .unwrap()
                    .as_bytes(),
            ),
        }
    }
}

/// Which string in the body a one-byte tamper changes.
#[derive(Clone, Copy)]
enum Needle {
    Event,
    /// Mailgun signs its token, not the event, which is where a tamper must land.
    Delivery,
}

struct Case {
    /// The source name (`/ingest/{source}`).
    source: &'static str,
    provider: &'static str,
    signer: Signer,
    wrong: Signer,
    /// The body for an event id.
    body: fn(&str) -> String,
    needle: Needle,
    /// The event id the stored entry carries, from (event id, delivery id).
    event_id: fn(&str, &str) -> Option<String>,
}

fn none(_: &str, _: &str) -> Option<String> {
    None
}
fn event(e: &str, _: &str) -> Option<String> {
    Some(e.to_string())
}
fn delivery(_: &str, d: &str) -> Option<String> {
    Some(d.to_string())
}

fn json_event(e: &str) -> String {
    format!(r#"{{"id":"{e}","type":"thing.happened","n":1}}"#)
}

const WRONG: Signer = Signer::Secret("not-the-secret");
const META_VERIFY_TOKEN: &str = "meta-verify-token-1f3a";
const DISCORD_KEY: [u8; 32] = [7; 32];
const SENDGRID_KEY: [u8; 32] = [0x5a; 32];

/// A case of the Standard Webhooks scheme, which Svix signs under its own name.
fn standard_webhooks(source: &'static str, provider: &'static str) -> Case {
    Case {
        source,
        provider,
        signer: Signer::Secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        wrong: Signer::Secret("whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
        body: json_event,
        needle: Needle::Event,
        event_id: delivery,
    }
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            source: "p-stripe",
            provider: "stripe",
            signer: Signer::Secret("whsec_test_secret"),
            wrong: Signer::Secret("whsec_wrong"),
            body: |e| {
                format!(r#"{{"id":"{e}","object":"event","type":"payment_intent.succeeded"}}"#)
            },
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-github",
            provider: "github",
            signer: Signer::Secret("It's a Secret to Everybody"),
            wrong: WRONG,
            body: json_event,
            needle: Needle::Event,
            event_id: delivery,
        },
        Case {
            source: "p-slack",
            provider: "slack",
            signer: Signer::Secret("8f742231b10e8888abcd99yyyzzz85a5"),
            wrong: WRONG,
            body: |e| {
                format!(
                    r#"{{"type":"event_callback","event_id":"{e}","event":{{"type":"app_mention"}}}}"#
                )
            },
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-slack-slash",
            provider: "slack",
            signer: Signer::Secret("8f742231b10e8888abcd99yyyzzz85a5"),
            wrong: WRONG,
            body: |e| format!("team_id=T1&command=%2Fdeploy&text=now+please&trigger_id={e}"),
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-slack-interactive",
            provider: "slack",
            signer: Signer::Secret("8f742231b10e8888abcd99yyyzzz85a5"),
            wrong: WRONG,
            body: |e| {
                let payload = format!(
                    r#"{{"type":"block_actions","trigger_id":"{e}","actions":[{{"action_id":"ok"}}]}}"#
                );
                form_urlencoded::Serializer::new(String::new())
                    .append_pair("payload", &payload)
                    .finish()
            },
            needle: Needle::Event,
            event_id: event,
        },
        standard_webhooks("p-standard-webhooks", "standard-webhooks"),
        standard_webhooks("p-svix", "svix"),
        Case {
            source: "p-shopify",
            provider: "shopify",
            signer: Signer::Secret("shpss_0123456789abcdef"),
            wrong: WRONG,
            body: json_event,
            needle: Needle::Event,
            event_id: delivery,
        },
        Case {
            source: "p-hmac",
            provider: "hmac",
            signer: Signer::Secret("generic-secret"),
            wrong: WRONG,
            body: json_event,
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-twilio",
            provider: "twilio",
            signer: Signer::Secret("twilio-auth-token"),
            wrong: WRONG,
            body: |e| {
                format!(
                    "MessageSid=SM{e}&AccountSid=AC1&From=%2B15551234567&Body=Hello+world&MessageStatus=received"
                )
            },
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-hubspot",
            provider: "hubspot",
            signer: Signer::Secret("hubspot-client-secret"),
            wrong: WRONG,
            body: |e| {
                format!(
                    r#"[{{"eventId":1,"objectId":"{e}","subscriptionType":"contact.creation","attemptNumber":0}}]"#
                )
            },
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-paddle",
            provider: "paddle",
            signer: Signer::Secret("pdl_ntfset_example"),
            wrong: WRONG,
            body: |e| {
                format!(r#"{{"event_id":"{e}","event_type":"transaction.completed","data":{{}}}}"#)
            },
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-square",
            provider: "square",
            signer: Signer::Secret("square-signature-key"),
            wrong: WRONG,
            body: |e| format!(r#"{{"event_id":"{e}","type":"payment.updated","data":{{}}}}"#),
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-linear",
            provider: "linear",
            signer: Signer::Secret("linear-signing-secret"),
            wrong: WRONG,
            body: |e| {
                format!(
                    r#"{{"action":"create","type":"Issue","createdAt":"2026-01-01T00:00:00.000Z","data":{{"id":"{e}"}},"webhookId":"wh1"}}"#
                )
            },
            needle: Needle::Event,
            event_id: |e, _| Some(format!("wh1:Issue:create:{e}:2026-01-01T00:00:00.000Z")),
        },
        Case {
            source: "p-mailgun",
            provider: "mailgun",
            signer: Signer::Secret("key-mailgun-signing"),
            wrong: WRONG,
            body: |e| format!(r#"{{"event-data":{{"id":"{e}","event":"delivered"}}}}"#),
            needle: Needle::Delivery,
            event_id: delivery,
        },
        Case {
            source: "p-gitlab",
            provider: "gitlab",
            signer: Signer::Secret("gitlab-webhook-token"),
            wrong: WRONG,
            body: |e| format!(r#"{{"object_kind":"push","checkout_sha":"{e}"}}"#),
            needle: Needle::Event,
            event_id: delivery,
        },
        Case {
            source: "p-zoom",
            provider: "zoom",
            signer: Signer::Secret("zoom-secret-token"),
            wrong: WRONG,
            body: |e| {
                format!(r#"{{"event":"meeting.started","payload":{{"object":{{"id":"{e}"}}}}}}"#)
            },
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-intercom",
            provider: "intercom",
            signer: Signer::Secret("intercom-client-secret"),
            wrong: WRONG,
            body: |e| {
                format!(r#"{{"type":"notification_event","id":"{e}","topic":"user.created"}}"#)
            },
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-lemonsqueezy",
            provider: "lemonsqueezy",
            signer: Signer::Secret("lemon-signing-secret"),
            wrong: WRONG,
            body: |e| {
                format!(r#"{{"meta":{{"event_name":"order_created"}},"data":{{"id":"{e}"}}}}"#)
            },
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-typeform",
            provider: "typeform",
            signer: Signer::Secret("typeform-secret"),
            wrong: WRONG,
            body: |e| format!(r#"{{"event_id":"{e}","event_type":"form_response"}}"#),
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-calendly",
            provider: "calendly",
            signer: Signer::Secret("calendly-signing-key"),
            wrong: WRONG,
            body: |e| format!(r#"{{"event":"invitee.created","payload":{{"uri":"{e}"}}}}"#),
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-bitbucket",
            provider: "bitbucket",
            signer: Signer::Secret("bitbucket-secret"),
            wrong: WRONG,
            body: json_event,
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-box",
            provider: "box",
            signer: Signer::Secret("box-primary-key"),
            wrong: WRONG,
            body: |e| {
                format!(
                    r#"{{"type":"webhook_event","id":"{e}","trigger":"FILE.UPLOADED","source":{{"id":"1","type":"file"}}}}"#
                )
            },
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-buildkite",
            provider: "buildkite",
            signer: Signer::Secret("buildkite-secret"),
            wrong: WRONG,
            body: |e| format!(r#"{{"event":"build.finished","build":{{"id":"{e}"}}}}"#),
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-buildkite-token",
            provider: "buildkite-token",
            signer: Signer::Secret("buildkite-token"),
            wrong: WRONG,
            body: |e| format!(r#"{{"event":"build.finished","build":{{"id":"{e}"}}}}"#),
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-circleci",
            provider: "circleci",
            signer: Signer::Secret("circleci-secret"),
            wrong: WRONG,
            body: json_event,
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-coinbase-commerce",
            provider: "coinbase-commerce",
            signer: Signer::Secret("coinbase-shared-secret"),
            wrong: WRONG,
            body: |e| {
                format!(
                    r#"{{"id":1,"event":{{"id":"{e}","type":"charge:created","data":{{"id":"c1"}}}}}}"#
                )
            },
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-docusign",
            provider: "docusign",
            signer: Signer::Secret("docusign-hmac-key"),
            wrong: WRONG,
            body: json_event,
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-jira",
            provider: "jira",
            signer: Signer::Secret("jira-secret"),
            wrong: WRONG,
            body: json_event,
            needle: Needle::Event,
            event_id: delivery,
        },
        Case {
            source: "p-meta",
            provider: "meta",
            signer: Signer::Secret("meta-app-secret"),
            wrong: WRONG,
            body: |e| {
                format!(
                    r#"{{"object":"whatsapp_business_account","entry":[{{"id":"{e}","changes":[{{"field":"messages"}}]}}]}}"#
                )
            },
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-mux",
            provider: "mux",
            signer: Signer::Secret("mux-signing-secret"),
            wrong: WRONG,
            body: json_event,
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-paystack",
            provider: "paystack",
            signer: Signer::Secret("sk_test_paystack"),
            wrong: WRONG,
            body: json_event,
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-postmark",
            provider: "postmark",
            signer: Signer::Secret("QWxhZGRpbjpvcGVuIHNlc2FtZQ=="),
            wrong: WRONG,
            body: |e| format!(r#"{{"RecordType":"Delivery","MessageID":"{e}"}}"#),
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-razorpay",
            provider: "razorpay",
            signer: Signer::Secret("razorpay-webhook-secret"),
            wrong: WRONG,
            body: json_event,
            needle: Needle::Event,
            event_id: delivery,
        },
        Case {
            source: "p-sentry",
            provider: "sentry",
            signer: Signer::Secret("sentry-client-secret"),
            wrong: WRONG,
            body: |e| format!(r#"{{"action":"created","data":{{"issue":{{"id":"{e}"}}}}}}"#),
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-twitch",
            provider: "twitch",
            signer: Signer::Secret("twitch-eventsub-secret"),
            wrong: WRONG,
            body: |e| {
                format!(r#"{{"subscription":{{"id":"{e}","type":"channel.follow"}},"event":{{}}}}"#)
            },
            needle: Needle::Event,
            event_id: delivery,
        },
        Case {
            source: "p-vercel",
            provider: "vercel",
            signer: Signer::Secret("vercel-client-secret"),
            wrong: WRONG,
            body: json_event,
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-webflow",
            provider: "webflow",
            signer: Signer::Secret("webflow-secret"),
            wrong: WRONG,
            body: |e| format!(r#"{{"triggerType":"form_submission","payload":{{"id":"{e}"}}}}"#),
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-zendesk",
            provider: "zendesk",
            signer: Signer::Secret("dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ=="),
            wrong: WRONG,
            body: json_event,
            needle: Needle::Event,
            event_id: delivery,
        },
        Case {
            source: "p-netlify",
            provider: "netlify",
            signer: Signer::Secret("netlify-jws-secret"),
            wrong: WRONG,
            body: |e| format!(r#"{{"id":"{e}","state":"ready"}}"#),
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-notion",
            provider: "notion",
            signer: Signer::Secret("secret_tMrlL1qK5vuQAh1b6cZGhFChZTSYJlce98V0pYn7yBl"),
            wrong: WRONG,
            body: |e| format!(r#"{{"id":"{e}","type":"page.created","entity":{{"id":"p1"}}}}"#),
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-trello",
            provider: "trello",
            signer: Signer::Secret("trello-oauth-secret"),
            wrong: WRONG,
            body: |e| {
                format!(r#"{{"model":{{"id":"b1"}},"action":{{"id":"{e}","type":"voteOnCard"}}}}"#)
            },
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-contentful",
            provider: "contentful",
            signer: Signer::Secret(
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            ),
            wrong: WRONG,
            body: json_event,
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-dropbox",
            provider: "dropbox",
            signer: Signer::Secret("dropbox-app-secret"),
            wrong: WRONG,
            body: json_event,
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-okta",
            provider: "okta",
            signer: Signer::Secret("Bearer okta-hook-secret"),
            wrong: WRONG,
            body: |e| {
                format!(
                    r#"{{"eventType":"com.okta.event_hook","eventId":"{e}","data":{{"events":[{{"eventType":"user.lifecycle.create"}}]}}}}"#
                )
            },
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-graph",
            provider: "microsoft-graph",
            signer: Signer::Secret("graph-client-state"),
            wrong: WRONG,
            body: |e| {
                format!(
                    r#"{{"value":[{{"subscriptionId":"{e}","changeType":"created","resource":"users/1/messages/2"}}]}}"#
                )
            },
            needle: Needle::Event,
            event_id: none,
        },
        Case {
            source: "p-adyen",
            provider: "adyen",
            signer: Signer::Secret("44464231454235343835383935434641"),
            wrong: Signer::Secret("00464231454235343835383935434641"),
            body: |e| {
                format!(
                    r#"{{"live":"false","notificationItems":[{{"NotificationRequestItem":{{"amount":{{"currency":"EUR","value":2599}},"eventCode":"AUTHORISATION","merchantAccountCode":"TestMerchant","merchantReference":"order-1","pspReference":"{e}","success":"true","additionalData":{{}}}}}}]}}"#
                )
            },
            needle: Needle::Event,
            event_id: |e, _| Some(format!("{e}:AUTHORISATION")),
        },
        standard_webhooks("p-clerk", "clerk"),
        standard_webhooks("p-resend", "resend"),
        Case {
            source: "p-discord",
            provider: "discord",
            signer: Signer::Ed25519(DISCORD_KEY),
            wrong: Signer::Ed25519([8; 32]),
            body: |e| format!(r#"{{"id":"{e}","type":2,"application_id":"1"}}"#),
            needle: Needle::Event,
            event_id: event,
        },
        Case {
            source: "p-sendgrid",
            provider: "sendgrid",
            signer: Signer::P256(SENDGRID_KEY),
            wrong: Signer::P256([0x5b; 32]),
            body: |e| format!(r#"[{{"sg_event_id":"{e}","event":"delivered"}}]"#),
            needle: Needle::Event,
            event_id: none,
        },
    ]
}

/// What the providers that sign the URL are configured to call.
fn public_url(source: &str) -> String {
    format!("https://hooks.example.com/ingest/{source}")
}

/// The query string every test request carries (signed by URL-signing providers).
const QUERY: &str = "tenant=acme&env=test";

/// One `[[sources]]` entry per case (and one per handshake-only secret).
fn sources(cases: &[Case]) -> String {
    cases
        .iter()
        .map(|c| {
            format!(
                "[[sources]]\nname = \"{}\"\nprovider = \"{}\"\nsecret = \"{}\"\ndestination = \"http://127.0.0.1:9/{}\"\npublic_url = \"{}\"\n{}",
                c.source,
                c.provider,
                c.signer.configured(),
                c.source,
                public_url(c.source),
                if c.provider == "meta" {
                    format!("verify_token = \"{META_VERIFY_TOKEN}\"\n")
                } else {
                    String::new()
                },
            )
        })
        .collect()
}

/// The headers and body the provider sends for `body` at `ts`.
fn signed(
    case: &Case,
    signer: &Signer,
    body: &[u8],
    ts: i64,
    delivery: &str,
) -> (Vec<(String, String)>, Vec<u8>) {
    let reg = Registry::builtin().unwrap();
    let spec = reg.get(case.provider).unwrap();
    let url = request_url(&public_url(case.source), Some(QUERY));
    match signer {
        Signer::Secret(secret) => {
            let s = sign(
                spec,
                &Secret::new(*secret),
                &SignInput {
                    body,
                    timestamp: ts,
                    id: delivery,
                    event_type: Some("thing.happened"),
                    method: "POST",
                    path: "/",
                    url: Some(&url),
                },
            )
            .unwrap_or_else(|e| panic!("{}: {e}", case.source));
            (
                s.headers
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.clone()))
                    .collect(),
                s.body(body).to_vec(),
            )
        }
        // Discord and SendGrid sign "{timestamp}{body}" with their private key.
        Signer::Ed25519(seed) => {
            use ed25519_dalek::Signer as _;
            let msg = [ts.to_string().as_bytes(), body].concat();
            let sig = ed25519_dalek::SigningKey::from_bytes(seed).sign(&msg);
            (
                vec![
                    ("x-signature-ed25519".into(), hex::encode(sig.to_bytes())),
                    ("x-signature-timestamp".into(), ts.to_string()),
                ],
                body.to_vec(),
            )
        }
        Signer::P256(d) => {
            use p256::ecdsa::signature::Signer as _;
            let msg = [ts.to_string().as_bytes(), body].concat();
            let sig: p256::ecdsa::Signature =
                p256::ecdsa::SigningKey::from_slice(d).unwrap().sign(&msg);
            (
                vec![
                    (
                        "x-twilio-email-event-webhook-signature".into(),
                        B64.encode(sig.to_der().as_bytes()),
                    ),
                    (
                        "x-twilio-email-event-webhook-timestamp".into(),
                        ts.to_string(),
                    ),
                ],
                body.to_vec(),
            )
        }
    }
}

/// POST to `/ingest/{source}?QUERY`; returns (status, content type, body as JSON).
async fn post(
    c: &reqwest::Client,
    gw: &Gateway,
    source: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (u16, String, serde_json::Value) {
    let content_type = match body.first() {
        Some(b'{') | Some(b'[') => "application/json",
        _ => "application/x-www-form-urlencoded",
    };
    let mut req = c
        .post(format!("{}/ingest/{source}?{QUERY}", gw.ingest))
        .header("content-type", content_type)
        .body(body.to_vec());
    for (n, v) in headers {
        req = req.header(n.as_str(), v.as_str());
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let text = resp.text().await.unwrap_or_default();
    let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, ct, json)
}

async fn every_provider(backend: Backend) {
    let h = StoreHandle::new(backend);
    let cases = cases();
    let gw = Gateway::start(config(&h, &sources(&cases))).await;
    let store = h.open().await;
    let c = http();
    let reg = Registry::builtin().unwrap();
    for case in &cases {
        // Per case: some schemes (Linear) allow only 60 s of clock difference.
        let now = now_secs();
        let spec = reg.get(case.provider).unwrap();
        let evt = format!("evt-{}-1", case.source);
        let dlv = format!("dlv-{}-1", case.source);
        let body = (case.body)(&evt).into_bytes();
        let (ok_headers, ok_body) = signed(case, &case.signer, &body, now, &dlv);
        let what = |s: &str| format!("{}: {s}", case.source);

        // One byte of what the signature covers changed.
        let needle = match case.needle {
            Needle::Event => &evt,
            Needle::Delivery => &dlv,
        };
        if spec.algorithm().name() != "token" {
            let mut tampered = ok_body.clone();
            let at = tampered
                .windows(needle.len())
                .position(|w| w == needle.as_bytes())
                .unwrap_or_else(|| panic!("{}", what("the body lacks the needle")));
            tampered[at + needle.len() - 1] = b'2';
            let (st, _, json) = post(&c, &gw, case.source, &ok_headers, &tampered).await;
            assert_eq!(st, 401, "{}: {json}", what("tampered body"));
        }
        // One character of the signature changed (for GitLab: of the token).
        if let Some(name) = spec.signature_header() {
            let mut bad = ok_headers.clone();
            flip_signature(&mut bad, name.as_str(), 3);
            let (st, _, json) = post(&c, &gw, case.source, &bad, &ok_body).await;
            assert_eq!(st, 401, "{}: {json}", what("tampered signature"));
        }
        // Signed with another secret or key.
        let (wrong_headers, wrong_body) = signed(case, &case.wrong, &body, now, &dlv);
        let (st, _, json) = post(&c, &gw, case.source, &wrong_headers, &wrong_body).await;
        assert_eq!(st, 401, "{}: {json}", what("wrong secret"));
        // An hour old, where the scheme signs time.
        if spec.timestamp.is_some() {
            let (stale_headers, stale_body) = signed(case, &case.signer, &body, now - 3600, &dlv);
            let (st, _, json) = post(&c, &gw, case.source, &stale_headers, &stale_body).await;
            assert_eq!(st, 401, "{}: {json}", what("stale"));
            assert_eq!(
                json["error"],
                "timestamp outside tolerance",
                "{}",
                what("stale")
            );
        }
        assert_eq!(
            store.count(case.source).await.unwrap(),
            0,
            "{}",
            what("a refusal stored something")
        );

        // Accepted and stored, with the event id the provider gives.
        let (st, _, json) = post(&c, &gw, case.source, &ok_headers, &ok_body).await;
        assert_eq!(st, 200, "{}: {json}", what("signed"));
        assert_eq!(json["duplicate"], false, "{}", what("first delivery"));
        let id = json["id"].as_str().unwrap().to_string();
        let entry = answered_entry(&*store, &json).await;
        assert_eq!(
            entry.body.as_ref(),
            ok_body.as_slice(),
            "{}",
            what("raw body kept")
        );
        assert_eq!(
            entry.event_id,
            (case.event_id)(&evt, &dlv),
            "{}",
            what("event id")
        );

        // The provider delivers the same event again, signed afresh a second later
        // (Linear and Mailgun write the new time into the body).
        let (again_headers, again_body) = signed(case, &case.signer, &body, now + 1, &dlv);
        let (st, _, json) = post(&c, &gw, case.source, &again_headers, &again_body).await;
        assert_eq!(st, 200, "{}: {json}", what("redelivery"));
        assert_eq!(json["duplicate"], true, "{}", what("redelivery"));
        assert_eq!(json["id"], id.as_str(), "{}", what("redelivery"));
        assert_eq!(
            store.count(case.source).await.unwrap(),
            1,
            "{}",
            what("count")
        );
    }
    gw.stop().await;
}
for_each_store!(
    every_provider_verifies_refuses_and_dedupes,
    super::every_provider
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_are_answered_only_after_verification() {
    let h = StoreHandle::new(Backend::Embedded);
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|c| matches!(c.source, "p-slack" | "p-zoom" | "p-discord" | "p-twitch"))
        .collect();
    let gw = Gateway::start(config(&h, &sources(&cases))).await;
    let store = h.open().await;
    let c = http();
    let now = now_secs();
    let challenge = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P";
    let handshakes = [
        (
            "p-slack",
            format!(r#"{{"token":"x","challenge":"{challenge}","type":"url_verification"}}"#),
            "text/plain",
            serde_json::Value::String(challenge.into()),
        ),
        (
            "p-zoom",
            r#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1700000000000,"event":"endpoint.url_validation"}"#.to_string(),
            "application/json",
            // encryptedToken computed with Python: hmac.new(b"zoom-secret-token",
            // b"qgg8vlvZRS6UYooatFL8Aw", hashlib.sha256).hexdigest()
            serde_json::json!({
                "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
                "encryptedToken": "d9e0d764a78494688ba3f2d5c0ed4ca311394b4834d959759213424d2df961e3",
            }),
        ),
        (
            "p-discord",
            r#"{"type":1,"id":"1","application_id":"2","version":1}"#.to_string(),
            "application/json",
            serde_json::json!({"type": 1}),
        ),
        (
            "p-twitch",
            r#"{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","status":"webhook_callback_verification_pending","type":"channel.follow","version":"1","condition":{"broadcaster_user_id":"12826"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},"created_at":"2019-11-16T10:11:12.634234626Z"}}"#.to_string(),
            "text/plain",
            serde_json::Value::String("pogchamp-kappa-360noscope-vohiyo".into()),
        ),
    ];
    // Twitch says which message is the challenge in a header of its own.
    let kind = |source: &str, mut headers: Vec<(String, String)>| {
        if source == "p-twitch" {
            headers.push((
                "Twitch-Eventsub-Message-Type".into(),
                "webhook_callback_verification".into(),
            ));
        }
        headers
    };
    for (source, body, content_type, answer) in handshakes {
        let case = cases.iter().find(|c| c.source == source).unwrap();
        let body = body.into_bytes();
        // Forged: signed with the wrong secret or key; then with no signature at all.
        let (forged, _) = signed(case, &case.wrong, &body, now, "x");
        let forged = kind(source, forged);
        let (st, _, json) = post(&c, &gw, source, &forged, &body).await;
        assert_eq!(st, 401, "{source}: forged handshake: {json}");
        let unsigned: Vec<(String, String)> = forged
            .into_iter()
            .filter(|(n, _)| n.contains("timestamp"))
            .collect();
        let (st, _, _) = post(&c, &gw, source, &unsigned, &body).await;
        assert_eq!(st, 401, "{source}: unsigned handshake");
        // Stale: a captured handshake cannot be replayed later.
        let (stale, _) = signed(case, &case.signer, &body, now - 3600, "x");
        let (st, _, _) = post(&c, &gw, source, &kind(source, stale), &body).await;
        assert_eq!(st, 401, "{source}: stale handshake");
        // Genuine: answered, as the provider expects.
        let (good, _) = signed(case, &case.signer, &body, now, "x");
        let (st, ct, json) = post(&c, &gw, source, &kind(source, good), &body).await;
        assert_eq!(st, 200, "{source}: {json}");
        assert!(ct.starts_with(content_type), "{source}: content type {ct}");
        assert_eq!(json, answer, "{source}");
        assert_eq!(
            store.count(source).await.unwrap(),
            0,
            "{source}: a handshake is not stored"
        );
    }
    gw.stop().await;
}

#[test]
fn a_provider_that_signs_the_url_needs_public_url() {
    for provider in ["twilio", "square", "hubspot", "trello"] {
        let text = format!(
            "[[sources]]\nname = \"s\"\nprovider = \"{provider}\"\nsecret = \"x\"\ndestination = \"http://127.0.0.1:9/\"\n"
        );
        let cfg = config::from_toml_str(&text, &|_| None).unwrap();
        let reg = hookgate::app::registry(&cfg).unwrap();
        let err = hookgate::app::build_sources(
            &cfg,
            &reg,
            &hookgate::ingest::body::BodyBudget::new(1 << 20),
        )
        .unwrap_err();
        let err = format!("{err:#}");
        assert!(
            err.starts_with("sources[0].public_url:"),
            "{provider}: {err}"
        );
        assert!(err.contains(provider), "{err}");
    }
    // The binary says so too, and exits with a configuration error.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[[sources]]\nname = \"s\"\nprovider = \"twilio\"\nsecret = \"x\"\ndestination = \"http://127.0.0.1:9/\"\n",
    )
    .unwrap();
    let (code, _, err) = run(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("sources[0].public_url"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hookgate_sign_output_is_accepted_for_every_symmetric_provider() {
    let h = StoreHandle::new(Backend::Embedded);
    let cases = cases();
    let cfg_text = format!("{}\n{}", h.toml(), sources(&cases));
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &cfg_text);
    let gw = Gateway::start(config::from_toml_str(&cfg_text, &|_| None).unwrap()).await;
    let c = http();
    for case in &cases {
        let body = (case.body)(&format!("cli-{}", case.source));
        let url = format!("{}/ingest/{}?{QUERY}", gw.ingest, case.source);
        let (code, out, err) = run(
            &[
                "sign",
                "--config",
                path.to_str().unwrap(),
                "--source",
                case.source,
                "--id",
                &format!("cli-dlv-{}", case.source),
                "--body",
                &body,
                "--url",
                &url,
            ],
            &[],
        );
        if let Signer::Secret(_) = case.signer {
            assert_eq!(code, 0, "{}: {err}", case.source);
        } else {
            assert_ne!(
                code, 0,
                "{}: a public-key scheme cannot be signed",
                case.source
            );
            assert!(err.contains("private key"), "{}: {err}", case.source);
            continue;
        }
        // Headers, a blank line, the body when the signer changed it, a blank line,
        // and the curl line.
        let (headers, mut lines) = sign_output(&out);
        let next = lines.next().unwrap();
        let sent_body = if next.starts_with("curl ") {
            body.clone()
        } else {
            next.to_string()
        };
        let (st, _, json) = post(&c, &gw, case.source, &headers, sent_body.as_bytes()).await;
        assert_eq!(st, 200, "{}: {json}\n{out}", case.source);
        assert_eq!(json["duplicate"], false, "{}", case.source);
    }
    gw.stop().await;
}

#[test]
fn hookgate_providers_describes_each_provider() {
    let (code, out, err) = run(&["providers"], &[]);
    assert_eq!(code, 0, "{err}");
    let reg = Registry::builtin().unwrap();
    for spec in reg.iter() {
        let block: Vec<&str> = out
            .lines()
            .skip_while(|l| !l.starts_with(&format!("{} ", spec.name)))
            .take(10)
            .collect();
        assert!(!block.is_empty(), "{} missing:\n{out}", spec.name);
        for aspect in [
            "signature",
            "timestamp",
            "event id",
            "event type",
            "handshake",
            "ranges",
            "config",
            "sign",
        ] {
            assert!(
                block.iter().any(|l| l.trim_start().starts_with(aspect)),
                "{}: no {aspect} line:\n{}",
                spec.name,
                block.join("\n")
            );
        }
    }
    assert!(out.contains("zoom-url-validation"), "{out}");
    assert!(
        out.contains("https://api.github.com/meta at /hooks"),
        "{out}"
    );
    assert!(
        out.contains("public_url = the URL the provider calls"),
        "{out}"
    );
    assert!(out.contains("within 5s either way"), "{out}");
}

/// The endpoint checks that come as a GET: Meta's answered only with the source's
/// verify token, Okta's only with its credential, Dropbox's (which carries nothing to
/// check) only as a short token echoed as plain text, Trello's HEAD with an empty
/// 200; a provider without one answers
/// 405. Microsoft Graph's comes as a POST without a body and is echoed likewise.
/// Nothing is ever stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_endpoint_checks_are_answered_only_as_far_as_they_verify() {
    let h = StoreHandle::new(Backend::Embedded);
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|c| {
            matches!(
                c.source,
                "p-meta" | "p-okta" | "p-dropbox" | "p-stripe" | "p-graph" | "p-trello"
            )
        })
        .collect();
    let gw = Gateway::start(config(&h, &sources(&cases))).await;
    let store = h.open().await;
    let c = http();
    let get = async |path: &str, headers: &[(&str, &str)]| {
        let mut req = c.get(format!("{}/ingest/{path}", gw.ingest));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let nosniff = resp.headers().get("x-content-type-options").is_some();
        (status, ct, nosniff, resp.text().await.unwrap())
    };
    let meta = |token: &str, challenge: &str| {
        format!("p-meta?hub.mode=subscribe&hub.verify_token={token}&hub.challenge={challenge}")
    };
    let (st, ct, nosniff, body) = get(&meta(META_VERIFY_TOKEN, "1158201444"), &[]).await;
    assert_eq!((st, body.as_str()), (200, "1158201444"));
    assert!(ct.starts_with("text/plain") && nosniff, "{ct}");
    assert_eq!(get(&meta("guess", "1158201444"), &[]).await.0, 401);
    assert_eq!(get("p-meta?hub.challenge=1158201444", &[]).await.0, 401);
    let no_mode = format!("p-meta?hub.verify_token={META_VERIFY_TOKEN}&hub.challenge=1");
    assert_eq!(get(&no_mode, &[]).await.0, 401);
    assert_eq!(
        get(&meta(META_VERIFY_TOKEN, "%3Cscript%3E"), &[]).await.0,
        400
    );

    let challenge = ("x-okta-verification-challenge", "j4yh1lkuKV2X0qxZwvW1");
    let (st, _, _, body) = get(
        "p-okta",
        &[("authorization", "Bearer okta-hook-secret"), challenge],
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"verification": "j4yh1lkuKV2X0qxZwvW1"})
    );
    assert_eq!(
        get("p-okta", &[("authorization", "Bearer guess"), challenge])
            .await
            .0,
        401
    );
    assert_eq!(get("p-okta", &[challenge]).await.0, 401);

    let (st, ct, nosniff, body) = get("p-dropbox?challenge=s6FbQmVDXNLpHeZA1BrS", &[]).await;
    assert_eq!((st, body.as_str()), (200, "s6FbQmVDXNLpHeZA1BrS"));
    assert!(ct.starts_with("text/plain") && nosniff, "{ct}");
    assert_eq!(
        get("p-dropbox?challenge=%3Cb%3Ex%3C%2Fb%3E", &[]).await.0,
        400
    );
    assert_eq!(get("p-dropbox", &[]).await.0, 400);

    // Trello checks the callback with a HEAD before it creates the webhook.
    let resp = c
        .head(format!("{}/ingest/p-trello", gw.ingest))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);

    assert_eq!(get("p-stripe", &[]).await.0, 405);
    assert_eq!(get("p-nowhere", &[]).await.0, 405);

    // Microsoft Graph validates with a POST without a body: the token comes back as
    // text; a POST with a body is a notification, verified as usual.
    let token =
        "Validation: Testing client application reachability for subscription Request-Id: 25b8d3b1";
    let validate = |body: &'static str| {
        c.post(format!("{}/ingest/p-graph", gw.ingest))
            .query(&[("validationToken", token)])
            .header("content-type", "text/plain")
            .body(body)
            .send()
    };
    let resp = validate("").await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers().contains_key("x-content-type-options"));
    assert_eq!(resp.text().await.unwrap(), token);
    let resp = validate(r#"{"value":[{"changeType":"created"}]}"#)
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    for source in ["p-meta", "p-okta", "p-dropbox", "p-graph", "p-trello"] {
        assert_eq!(store.count(source).await.unwrap(), 0, "{source}");
    }
    gw.stop().await;
}
