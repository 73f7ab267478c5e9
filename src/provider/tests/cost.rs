//! The work one verification does, stated instead of timed: linear in the body with
//! a small constant for every provider, the sorted form built once, form bombs and
//! extra public-key signatures refused before any work.

use super::*;

/// `body` with `pad` bytes added where the provider's body shape allows it.
fn padded(spec: &Spec, body: &[u8], pad: usize) -> Vec<u8> {
    let filler = "p".repeat(pad);
    if spec.content.contains(&spec::Segment::FormSorted) {
        let mut b = body.to_vec();
        b.extend_from_slice(format!("&Pad={filler}").as_bytes());
        b
    } else {
        let mut b = format!(r#"{{"pad":"{filler}","#).into_bytes();
        b.extend_from_slice(&body[1..]);
        b
    }
}

/// Every verifier's cost is linear in the body with a small constant: the bytes it
/// hashes are at most (keys × algorithms × URL forms) times the body and a bounded
/// rest, genuine or forged, and the sorted form is built at most once.
#[test]
fn verification_work_is_linear_in_the_body_for_every_provider() {
    let reg = Registry::builtin().unwrap();
    // Schemes whose key is fetched (certificates, [jwk]): their vectors and
    // tests/it/certificates.rs and jwk.rs check them.
    for spec in reg.iter().filter(|s| !s.fetches_key()) {
        // Two keys, as during a rotation (public keys: the same key twice).
        let secrets = [
            Secret::new(test_secret(spec)),
            Secret::new(test_secret(spec)),
        ];
        let v = Verifier::new(spec.clone(), &secrets).unwrap();
        let url_forms = if spec.url_port == spec::UrlPort::Either {
            2
        } else {
            1
        };
        let factor = (secrets.len() * spec.algorithms.len() * url_forms) as u64;
        let mut hashed = Vec::new();
        for pad in [0usize, 64 * 1024, 256 * 1024] {
            let body = padded(spec, &test_body(spec, "evt_1"), pad);
            let sent = send(spec, &body, NOW, "d-1").unwrap();
            let _ = verify::take_work();
            assert!(v.verify(sent.req(), NOW).is_ok(), "{}", spec.name);
            let genuine = verify::take_work();
            // The same request with its body changed by one byte.
            let mut forged_body = sent.body.clone();
            if let Some(b) = forged_body.iter_mut().rev().find(|b| **b == b'p') {
                *b = b'q';
            }
            let forged = Sent {
                body: forged_body,
                headers: sent.headers.clone(),
                url: sent.url.clone(),
                path: sent.path.clone(),
            };
            let _ = v.verify(forged.req(), NOW);
            let forged = verify::take_work();
            for (what, w) in [("genuine", genuine), ("forged", forged)] {
                let len = sent.body.len() as u64;
                assert!(
                    w.bytes_hashed <= factor * (len + 1024),
                    "{} {what}: {} bytes hashed for a {len}-byte body",
                    spec.name,
                    w.bytes_hashed
                );
                assert!(w.form_builds <= 1, "{} {what}", spec.name);
                assert!(
                    u64::from(w.signatures_checked) <= factor,
                    "{} {what}: {} signatures checked",
                    spec.name,
                    w.signatures_checked
                );
            }
            hashed.push(genuine.bytes_hashed);
        }
        // Growing the body by 192 KiB grows the work by at most factor × that.
        assert!(
            hashed[2] - hashed[1] <= factor * (192 * 1024 + 64),
            "{}: {hashed:?}",
            spec.name
        );
    }
}

/// Twilio with two secrets, two algorithms and two URL forms computes eight MACs over
/// one sorted form, built once.
#[test]
fn twilio_builds_the_sorted_form_once() {
    let twilio = builtin("twilio");
    let v = Verifier::new(
        twilio.clone(),
        &[Secret::new("old-token"), Secret::new(test_secret(&twilio))],
    )
    .unwrap();
    let params: Vec<String> = (0..900).map(|i| format!("P{i}=v{i}")).collect();
    let body = params.join("&");
    let sent = send(&twilio, body.as_bytes(), NOW, "x").unwrap();
    let _ = verify::take_work();
    assert!(v.verify(sent.req(), NOW).is_ok());
    let w = verify::take_work();
    assert_eq!(w.form_builds, 1, "{w:?}");
    assert_eq!(
        w.signatures_checked, 8,
        "2 secrets x 2 algorithms x 2 URL forms"
    );
    // A forged signature: every MAC computed, the form still built once.
    let mut h = sent.headers.clone();
    h.insert(
        "x-twilio-signature",
        HeaderValue::from_static("AAAAAAAAAAAAAAAAAAAAAAAAAAA="),
    );
    let forged = Request {
        headers: &h,
        ..sent.req()
    };
    assert_eq!(v.verify(forged, NOW).err(), Some(VerifyError::Mismatch));
    assert_eq!(verify::take_work().form_builds, 1);
}

/// A form of 160k parameters is refused as malformed before anything is decoded or
/// hashed.
#[test]
fn form_bombs_are_refused_before_any_mac() {
    let twilio = builtin("twilio");
    let v = verifier(&twilio);
    let body = "ab=1&".repeat(160_000);
    let mut h = HeaderMap::new();
    h.insert(
        "x-twilio-signature",
        HeaderValue::from_static("AAAAAAAAAAAAAAAAAAAAAAAAAAA="),
    );
    let req = Request {
        method: "POST",
        path: "/ingest/x",
        url: Some(URL),
        headers: &h,
        body: body.as_bytes(),
    };
    let _ = verify::take_work();
    assert_eq!(v.verify(req, NOW).err(), Some(VerifyError::MalformedForm));
    assert_eq!(verify::take_work(), verify::Work::default());
}

/// Public-key specs take exactly one signature: sixteen offered is malformed, and
/// nothing is verified.
#[test]
fn public_key_specs_refuse_more_than_one_signature() {
    let reg = Registry::builtin().unwrap();
    for name in ["discord", "sendgrid"] {
        let spec = reg.get(name).unwrap().clone();
        let v = verifier(&spec);
        let sent = send(&spec, &test_body(&spec, "evt_1"), NOW, "d").unwrap();
        assert!(v.verify(sent.req(), NOW).is_ok(), "{name}");
        let header = spec.signature_header().unwrap().clone();
        let genuine = sent.headers.get(&header).unwrap().clone();
        let mut h = sent.headers.clone();
        for _ in 0..15 {
            h.append(header.clone(), genuine.clone());
        }
        let _ = verify::take_work();
        let req = Request {
            headers: &h,
            ..sent.req()
        };
        assert_eq!(
            v.verify(req, NOW).err(),
            Some(VerifyError::MalformedSignature),
            "{name}"
        );
        assert_eq!(verify::take_work().signatures_checked, 0, "{name}");
    }
}
