//! The `Records` part of the store contract, on every backend: revoked console
//! sessions (one, or every one issued until a time), the control audit of pauses
//! and resumes, and the providers' last good address ranges.

use std::time::Duration;

use hookgate::clock::system_now_ms as now_ms;
use hookgate::store::{
    Actor, CONTROL_AUDIT_KEEP, ControlAction, ControlEvent, HousekeepingPass, SavedRanges, Store,
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
