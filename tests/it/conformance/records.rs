//! The `Records` part of the store contract, on every backend: revoked console
//! sessions (one, or every one issued until a time), the control audit of pauses
//! and resumes, the providers' last good address ranges, the route registry, and
//! the secrets providers establish in armed handshakes.

use std::time::Duration;

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{
    Actor, CONTROL_AUDIT_KEEP, ControlAction, ControlEvent, Establish, EstablishedSecret,
    HousekeepingPass, KnownRoute, MAX_ESTABLISHED_SECRETS, SavedRanges, Store, TokenHash,
};

use crate::support::{Backend, StoreHandle, wait_until};
use crate::{for_each_fresh_store, for_each_store};

const HOUR: i64 = 3_600_000;

async fn a_revoked_session_stays_revoked_until_it_expires(store: &dyn Store) {
    let t = now_ms();
    assert!(!store.session_revoked("a", t).await.unwrap());
    store.revoke_session("a", t + HOUR, t).await.unwrap();
    assert!(store.session_revoked("a", t).await.unwrap());
    assert!(
        !store.session_revoked("b", t).await.unwrap(),
        "only that one"
    );
    // Housekeeping keeps a revocation that has not expired.
    store
        .housekeeping(HousekeepingPass::Periodic, &[])
        .await
        .unwrap();
    assert!(store.session_revoked("a", t).await.unwrap());
    // One that expires soon is forgotten once it has (by housekeeping, or by Redis).
    store
        .revoke_session("c", now_ms() + 300, now_ms())
        .await
        .unwrap();
    assert!(store.session_revoked("c", t).await.unwrap());
    wait_until(
        "the expired revocation to go",
        Duration::from_secs(10),
        async || {
            store
                .housekeeping(HousekeepingPass::Periodic, &[])
                .await
                .unwrap();
            !store.session_revoked("c", t).await.unwrap()
        },
    )
    .await;
    assert!(store.session_revoked("a", t).await.unwrap());
}
for_each_fresh_store!(
    a_revoked_session_is_refused_until_it_would_have_expired,
    super::a_revoked_session_stays_revoked_until_it_expires
);

async fn every_session_issued_until_a_time_is_revoked(store: &dyn Store) {
    let t = now_ms();
    store.revoke_sessions_until(t).await.unwrap();
    assert!(store.session_revoked("old", t - HOUR).await.unwrap());
    assert!(store.session_revoked("same", t).await.unwrap());
    assert!(!store.session_revoked("new", t + 1).await.unwrap());
    // An earlier time never brings sessions back.
    store.revoke_sessions_until(t - HOUR).await.unwrap();
    assert!(store.session_revoked("same", t).await.unwrap());
    store.revoke_sessions_until(t + 10).await.unwrap();
    assert!(store.session_revoked("new", t + 1).await.unwrap());
    assert!(!store.session_revoked("newer", t + 11).await.unwrap());
}
for_each_fresh_store!(
    log_out_every_session_revokes_those_issued_until_then,
    super::every_session_issued_until_a_time_is_revoked
);

fn event(at: i64, action: ControlAction, route: Option<&str>, by: Actor) -> ControlEvent {
    ControlEvent {
        at,
        action,
        source: "s".into(),
        route: route.map(str::to_string),
        by,
    }
}

async fn controls_are_audited_newest_first(store: &dyn Store) {
    assert!(store.control_audit(10).await.unwrap().is_empty());
    let t = now_ms();
    let console = Actor {
        name: "console".into(),
        session: Some("ab12".into()),
        client: Some("192.0.2.7".into()),
    };
    let recorded = [
        event(t, ControlAction::Pause, None, "alice".into()),
        event(t + 1, ControlAction::Pause, Some("a"), console.clone()),
        event(t + 2, ControlAction::Resume, Some("a"), console),
    ];
    for e in &recorded {
        store.record_control(e).await.unwrap();
    }
    let newest_first: Vec<_> = recorded.iter().rev().cloned().collect();
    assert_eq!(store.control_audit(10).await.unwrap(), newest_first);
    assert_eq!(store.control_audit(2).await.unwrap(), newest_first[..2]);

    // Only the newest are kept.
    let writes = (0..CONTROL_AUDIT_KEEP as i64 + 5).map(|i| {
        let e = event(t + 10 + i, ControlAction::Pause, None, "bulk".into());
        async move { store.record_control(&e).await.unwrap() }
    });
    futures_util::future::join_all(writes).await;
    let kept = store.control_audit(CONTROL_AUDIT_KEEP + 10).await.unwrap();
    assert_eq!(kept.len(), CONTROL_AUDIT_KEEP);
    assert!(kept.iter().all(|e| e.by.name == "bulk"), "the oldest went");
}
for_each_fresh_store!(
    pauses_and_resumes_are_audited_with_their_actor,
    super::controls_are_audited_newest_first
);

/// A provider's last good ranges: kept per URL, replaced by the next, there for a
/// second process on the store (a gateway restarting without network).
async fn saved_ranges(backend: Backend) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
    let url = "https://api.github.com/meta";
    assert_eq!(store.saved_ranges(url).await.unwrap(), None);
    let first = SavedRanges {
        ranges: "192.0.2.0/24\n2001:db8::/32".into(),
        fetched_at: 1_700_000_000_000,
    };
    store.save_ranges(url, &first).await.unwrap();
    assert_eq!(store.saved_ranges(url).await.unwrap(), Some(first));
    let second = SavedRanges {
        ranges: "198.51.100.0/24".into(),
        fetched_at: 1_700_000_060_000,
    };
    store.save_ranges(url, &second).await.unwrap();
    assert_eq!(store.saved_ranges(url).await.unwrap(), Some(second.clone()));
    assert_eq!(
        store
            .saved_ranges("https://stripe.com/files/ips/ips_webhooks.json")
            .await
            .unwrap(),
        None,
        "another URL has its own"
    );
    store.close().await;
    let again = h.open().await;
    assert_eq!(again.saved_ranges(url).await.unwrap(), Some(second));
    again.close().await;
}
for_each_store!(
    a_providers_last_good_ranges_are_kept_per_url,
    super::saved_ranges
);

/// The route registry: each (source, route) once, replaced by the next word on it,
/// forgotten on request, there for a second process on the store.
async fn known_routes(backend: Backend) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
    assert!(store.known_routes().await.unwrap().is_empty());
    let route =
        |source: &str, route: &str, destination: &str, retired_at: Option<i64>| KnownRoute {
            source: source.into(),
            route: route.into(),
            destination: destination.into(),
            retired_at,
        };
    store
        .remember_routes(&[
            route("stripe", "main", "d1", None),
            route("stripe", "audit", "d2", None),
            route("github", "main", "d3", None),
        ])
        .await
        .unwrap();
    // Retired, then back with another destination.
    store
        .remember_routes(&[route("stripe", "audit", "d2", Some(1_700_000_000_000))])
        .await
        .unwrap();
    store
        .remember_routes(&[route("github", "main", "d4", None)])
        .await
        .unwrap();
    store.forget_route("stripe", "main").await.unwrap();
    store.forget_route("nope", "nothing").await.unwrap();
    let sorted = |mut v: Vec<KnownRoute>| {
        v.sort_by(|a, b| (&a.source, &a.route).cmp(&(&b.source, &b.route)));
        v
    };
    let want = vec![
        route("github", "main", "d4", None),
        route("stripe", "audit", "d2", Some(1_700_000_000_000)),
    ];
    assert_eq!(sorted(store.known_routes().await.unwrap()), want);
    store.close().await;
    let again = h.open().await;
    assert_eq!(sorted(again.known_routes().await.unwrap()), want);
    again.close().await;
}
for_each_store!(
    the_route_registry_keeps_each_route_once,
    super::known_routes
);

/// Secrets established in handshakes: only while armed and only with the arming's
/// token (a wrong one keeps nothing and leaves the arming as it was; arming again
/// replaces the token), one per arming (also when two handshakes race), the same
/// secret kept once, at most [`MAX_ESTABLISHED_SECRETS`] per source, forgotten one
/// by one, there after a restart, and each source's apart.
async fn established_secrets(backend: Backend) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
    let t = now_ms();
    let secret = |s: &str, at: i64| EstablishedSecret::new(s, at);
    let token = |s: &str| TokenHash::of(s);
    assert_eq!(
        store
            .establish_secret("asana", &secret("s1", t), &token("t0"), t)
            .await
            .unwrap(),
        Establish::NotArmed,
        "never armed"
    );
    assert_eq!(store.handshake_armed("asana", t).await.unwrap(), None);
    store
        .arm_handshake("asana", t - 1, &token("t0"))
        .await
        .unwrap();
    assert_eq!(
        store
            .establish_secret("asana", &secret("s1", t), &token("t0"), t)
            .await
            .unwrap(),
        Establish::NotArmed,
        "an arming that has expired"
    );
    store
        .arm_handshake("asana", t + 60_000, &token("t1"))
        .await
        .unwrap();
    assert_eq!(
        store.handshake_armed("asana", t).await.unwrap(),
        Some(t + 60_000)
    );
    assert_eq!(store.handshake_armed("other", t).await.unwrap(), None);
    // Wrong tokens (the one of an arming replaced, and a guess), many times:
    // nothing kept, and the arming stays for the handshake that has the token.
    for wrong in ["t0", "planted", ""] {
        for _ in 0..3 {
            assert_eq!(
                store
                    .establish_secret("asana", &secret("planted", t), &token(wrong), t)
                    .await
                    .unwrap(),
                Establish::WrongToken,
                "{wrong:?}"
            );
        }
    }
    assert_eq!(
        store.handshake_armed("asana", t).await.unwrap(),
        Some(t + 60_000),
        "still armed after wrong tokens"
    );
    assert_eq!(store.established_secrets("asana").await.unwrap(), vec![]);
    // The arming's token is another source's nothing.
    assert_eq!(
        store
            .establish_secret("other", &secret("s1", t), &token("t1"), t)
            .await
            .unwrap(),
        Establish::NotArmed
    );
    assert_eq!(
        store
            .establish_secret("asana", &secret("s1", t), &token("t1"), t)
            .await
            .unwrap(),
        Establish::Kept(secret("s1", t))
    );
    assert_eq!(
        store.handshake_armed("asana", t).await.unwrap(),
        None,
        "disarmed"
    );
    assert_eq!(
        store
            .establish_secret("asana", &secret("s2", t + 1), &token("t1"), t + 1)
            .await
            .unwrap(),
        Establish::NotArmed,
        "one arming, one secret: its token is spent"
    );
    // The same secret again: kept once, as it was first kept.
    store
        .arm_handshake("asana", t + 60_000, &token("t2"))
        .await
        .unwrap();
    assert_eq!(
        store
            .establish_secret("asana", &secret("s1", t + 5), &token("t2"), t + 5)
            .await
            .unwrap(),
        Establish::Kept(secret("s1", t))
    );
    // Two handshakes at once: one secret.
    store
        .arm_handshake("asana", t + 60_000, &token("t3"))
        .await
        .unwrap();
    let (race_a, race_b) = (secret("race-a", t + 10), secret("race-b", t + 10));
    let t3 = token("t3");
    let (a, b) = tokio::join!(
        store.establish_secret("asana", &race_a, &t3, t + 10),
        store.establish_secret("asana", &race_b, &t3, t + 10),
    );
    let kept = [a.unwrap(), b.unwrap()]
        .iter()
        .filter(|e| matches!(e, Establish::Kept(_)))
        .count();
    assert_eq!(kept, 1, "two handshakes raced for one arming");
    let listed = store.established_secrets("asana").await.unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0], secret("s1", t), "oldest first");
    assert!(listed[1].secret.starts_with("race-"));
    assert_eq!(store.established_secrets("other").await.unwrap(), vec![]);
    // A handshake with a wrong token racing the genuine one: the genuine one is
    // kept, whichever the store takes first.
    store
        .arm_handshake("asana", t + 60_000, &token("t4"))
        .await
        .unwrap();
    let (forged, genuine) = (secret("forged", t + 20), secret("genuine", t + 20));
    let (guess, t4) = (token("guess"), token("t4"));
    let (forged, genuine) = tokio::join!(
        store.establish_secret("asana", &forged, &guess, t + 20),
        store.establish_secret("asana", &genuine, &t4, t + 20),
    );
    // Refused for its token, or finding the arming spent when the genuine one went
    // first.
    let forged = forged.unwrap();
    assert!(
        matches!(forged, Establish::WrongToken | Establish::NotArmed),
        "{forged:?}"
    );
    assert_eq!(genuine.unwrap(), Establish::Kept(secret("genuine", t + 20)));
    let listed = store.established_secrets("asana").await.unwrap();
    assert_eq!(listed.len(), 3, "{listed:?}");
    // Full: the handshake is refused and stays armed.
    for n in listed.len()..MAX_ESTABLISHED_SECRETS {
        let at = t + 100 + n as i64;
        let tok = token(&format!("fill-{n}"));
        store
            .arm_handshake("asana", at + 60_000, &tok)
            .await
            .unwrap();
        let kept = store
            .establish_secret("asana", &secret(&format!("fill-{n}"), at), &tok, at)
            .await
            .unwrap();
        assert!(matches!(kept, Establish::Kept(_)), "{n}: {kept:?}");
    }
    store
        .arm_handshake("asana", t + 60_000, &token("t5"))
        .await
        .unwrap();
    assert_eq!(
        store
            .establish_secret("asana", &secret("one-more", t + 200), &token("t5"), t + 200)
            .await
            .unwrap(),
        Establish::Full
    );
    assert_eq!(
        store.handshake_armed("asana", t + 200).await.unwrap(),
        Some(t + 60_000),
        "still armed"
    );
    // Forgotten one by one.
    let id = secret("s1", t).id;
    assert!(store.forget_secret("asana", &id).await.unwrap());
    assert!(!store.forget_secret("asana", &id).await.unwrap(), "gone");
    assert!(!store.forget_secret("other", &listed[1].id).await.unwrap());
    let left = store.established_secrets("asana").await.unwrap();
    assert_eq!(left.len(), MAX_ESTABLISHED_SECRETS - 1);
    assert!(left.iter().all(|s| s.id != id));
    store.close().await;
    // After a restart: the secrets, and the arming with its token.
    let again = h.open().await;
    assert_eq!(again.established_secrets("asana").await.unwrap(), left);
    assert_eq!(
        again.handshake_armed("asana", t + 200).await.unwrap(),
        Some(t + 60_000)
    );
    assert_eq!(
        again
            .establish_secret("asana", &secret("after", t + 300), &token("t1"), t + 300)
            .await
            .unwrap(),
        Establish::WrongToken
    );
    assert_eq!(
        again
            .establish_secret("asana", &secret("after", t + 300), &token("t5"), t + 300)
            .await
            .unwrap(),
        Establish::Kept(secret("after", t + 300))
    );
    again.close().await;
}
for_each_store!(
    secrets_are_established_only_in_armed_handshakes,
    super::established_secrets
);
