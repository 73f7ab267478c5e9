//! Triage in the console, in real Chromium against a real gateway: dead letters
//! grouped by failure and replayed as a group once the destination is fixed (both
//! stores), the Entries page (filters, event-id search, paging, live mode) and an
//! entry's page (attempts, body, headers redacted, Replay, Discard that needs a
//! note, the audit trail). Screenshots of each page go to
//! `target/console-screenshots/`.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use fantoccini::Locator;

use crate::admin::{Admin, admin_config};
use crate::browser::{Browser, WAIT, other_site};
use crate::support::*;
use crate::upstream::Upstream;

/// A config with one Stripe source delivering to `destination` through route
/// `orders`, replays paced fast enough for a test.
fn one_route(h: &StoreHandle, destination: &str) -> hookgate::config::Config {
    let sources = format!(
        "[[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
         [[sources.routes]]\nname = \"orders\"\ndestination = \"{destination}/orders\"\n\
         [sources.routes.retry]\nmax_attempts = 1\n"
    );
    admin_config(h, "[admin]\nreplay_rate = 200\n", &sources)
}

async fn dead_letters_group_and_replay(backend: Backend) {
    let h = StoreHandle::new(backend);
    let (upstream, fixed) = Upstream::failing_until_fixed(422).await;
    let gw = Gateway::start(one_route(&h, &upstream.url)).await;
    let admin = Admin::new(&gw);
    let client = http();
    for i in 0..50 {
        let (st, v) = post_stripe(&client, &gw.ingest, &format!("evt_dead_{i:02}")).await;
        assert_eq!(st, 200, "{v}");
    }
    wait_until_ok("50 dead deliveries", WAIT, async || {
        let s = admin.get("/admin/stats").await;
        if s["sources"][0]["routes"][0]["dead"] == 50 {
            Ok(())
        } else {
            Err(s)
        }
    })
    .await;
    let refused: BTreeSet<String> = upstream.webhook_ids(Some(422)).into_iter().collect();
    assert_eq!(refused.len(), 50, "each webhook was tried once");

    let b = Browser::start().await;
    b.log_in(&gw).await;
    b.client
        .find(Locator::LinkText("Dead letters"))
        .await
        .expect("a Dead letters link")
        .click()
        .await
        .unwrap();
    b.wait_for_path("/console/dead-letters").await;
    let rows = b
        .client
        .find_all(Locator::Css("table.groups tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "one failure, one group");
    assert_eq!(b.text_of("table.groups td.failure").await, "HTTP 422");
    assert_eq!(b.text_of("table.groups td.count").await, "50");
    let sample = b.text_of("table.groups td[data-label=Sample]").await;
    assert!(sample.contains("evt_dead_"), "{sample}");
    b.viewport(1280, 800).await;
    b.assert_no_sideways_scroll("dead letters").await;
    b.screenshot("dead-letters").await;
    b.viewport(390, 844).await;
    b.assert_no_sideways_scroll("dead letters on a phone").await;
    b.screenshot("dead-letters-phone").await;
    b.viewport(1280, 800).await;

    // The destination is fixed. A page of another origin posting Replay group, with
    // the session cookie in the browser and even the right form token, is refused.
    fixed.store(true, Ordering::SeqCst);
    let token = b.value_of("table.groups input[name=csrf]").await;
    let (other, other_task) = other_site(format!(
        r#"<!doctype html><title>Another site</title>
<form method="post" action="{admin}/console/dead-letters/replay">
<input type="hidden" name="csrf" value="{token}">
<input type="hidden" name="source" value="stripe">
<input type="hidden" name="route" value="orders">
<input type="hidden" name="failure" value="HTTP 422">
<button type="submit">Cross-site replay</button></form>"#,
        admin = gw.admin
    ))
    .await;
    b.client.goto(&other).await.unwrap();
    b.click_button("Cross-site replay").await;
    b.wait_for_path("/console/dead-letters/replay").await;
    assert_eq!(b.text_of("h1").await, "Forbidden");
    other_task.abort();
    let quiet = std::time::Duration::from_millis(500);
    quiet_for(
        "nothing replayed by the cross-site post",
        quiet,
        async || upstream.count() == 50,
    )
    .await;
    b.client
        .goto(&format!("{}/console/dead-letters", gw.admin))
        .await
        .unwrap();

    // Replay group sends all 50 again, with their ids.
    b.click_button("Replay group HTTP 422 of orders of stripe")
        .await;
    let said = b.text_of("p.notice").await;
    assert!(said.starts_with("Queued 50 replays"), "{said}");
    upstream
        .wait_for(WAIT, "the 50 replays", |r| {
            r.iter().filter(|x| x.answered == 200).count() >= 50
        })
        .await;
    let delivered: BTreeSet<String> = upstream.webhook_ids(Some(200)).into_iter().collect();
    assert_eq!(delivered, refused, "each replay kept its webhook-id");
    assert_eq!(
        upstream.webhook_ids(Some(200)).len(),
        50,
        "each replayed once"
    );

    // The overview's counts moved, and the group is gone.
    wait_until_ok("the overview to show them delivered", WAIT, async || {
        b.client
            .goto(&format!("{}/console/", gw.admin))
            .await
            .unwrap();
        let delivered = b
            .text_of("section[aria-labelledby=source-0] tbody td[data-label=Delivered]")
            .await;
        let dead = b
            .text_of("section[aria-labelledby=source-0] tbody td[data-label=Dead]")
            .await;
        if (delivered.as_str(), dead.as_str()) == ("50", "0") {
            Ok(())
        } else {
            Err(format!("delivered {delivered}, dead {dead}"))
        }
    })
    .await;
    let s = admin.get("/admin/stats").await;
    assert_eq!(s["sources"][0]["routes"][0]["delivered"], 50, "{s}");
    assert_eq!(s["sources"][0]["routes"][0]["dead"], 0, "{s}");
    b.client
        .goto(&format!("{}/console/dead-letters", gw.admin))
        .await
        .unwrap();
    assert_eq!(b.text_of("main h2").await, "No dead letters");

    b.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_dead_letters_show_one_group_and_replay_it_embedded() {
    dead_letters_group_and_replay(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_dead_letters_show_one_group_and_replay_it_redis() {
    dead_letters_group_and_replay(Backend::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_entries_filter_and_page_and_an_entry_shows_attempts_body_and_needs_a_note_to_discard()
 {
    let h = StoreHandle::new(Backend::Embedded);
    let (upstream, fixed) = Upstream::failing_until_fixed(422).await;
    let gw = Gateway::start(one_route(&h, &upstream.url)).await;
    let admin = Admin::new(&gw);
    let client = http();
    for i in 0..60 {
        let (st, v) = post_stripe(&client, &gw.ingest, &format!("evt_entry_{i:02}")).await;
        assert_eq!(st, 200, "{v}");
    }
    wait_until_ok("60 dead deliveries", WAIT, async || {
        let s = admin.get("/admin/stats").await;
        if s["sources"][0]["routes"][0]["dead"] == 60 {
            Ok(())
        } else {
            Err(s)
        }
    })
    .await;
    fixed.store(true, Ordering::SeqCst);

    let b = Browser::start().await;
    b.log_in(&gw).await;
    b.client
        .find(Locator::LinkText("Entries"))
        .await
        .expect("an Entries link")
        .click()
        .await
        .unwrap();
    b.wait_for_path("/console/entries").await;
    b.viewport(1280, 800).await;

    // 60 entries: a page of 50, newest first, and the 10 older ones on the next.
    // Read in one script: the page may be replaced between two WebDriver calls.
    let ids = async || -> Vec<String> {
        b.client
            .execute(
                "return Array.from(document.querySelectorAll(\"table.entries td[data-label='Event ID']\"), td => td.textContent.trim());",
                vec![],
            )
            .await
            .ok()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default()
    };
    wait_until_ok("the first page", WAIT, async || {
        let first = ids().await;
        if first.len() == 50 && first[0] == "evt_entry_59" && first[49] == "evt_entry_10" {
            Ok(())
        } else {
            Err(format!("{first:?}"))
        }
    })
    .await;
    b.assert_no_sideways_scroll("entries").await;
    b.screenshot("entries").await;
    b.viewport(390, 844).await;
    b.assert_no_sideways_scroll("entries on a phone").await;
    b.screenshot("entries-phone").await;
    b.viewport(1280, 800).await;
    b.client
        .find(Locator::LinkText("Older entries →"))
        .await
        .expect("a next page")
        .click()
        .await
        .unwrap();
    wait_until_ok("the second page", WAIT, async || {
        let second = ids().await;
        if second.len() == 10 && second[0] == "evt_entry_09" {
            Ok(())
        } else {
            Err(format!("{second:?}"))
        }
    })
    .await;

    // Event-id search finds the one entry.
    b.client
        .goto(&format!("{}/console/entries", gw.admin))
        .await
        .unwrap();
    b.fill("Event ID", "evt_entry_07").await;
    b.click_button("Apply filters").await;
    wait_until_ok("one entry found", WAIT, async || {
        let found = ids().await;
        if found == ["evt_entry_07"] {
            Ok(())
        } else {
            Err(format!("{found:?}"))
        }
    })
    .await;

    // Its page: the attempt, the body, the signature redacted.
    b.client
        .find(Locator::Css("table.entries tbody a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait_for_button("Discard").await;
    let path = b.client.current_url().await.unwrap().path().to_string();
    let attempts = b.text_of("section[aria-labelledby=attempts-heading]").await;
    assert!(attempts.contains("orders #1"), "{attempts}");
    assert!(attempts.contains("HTTP 422"), "{attempts}");
    let body = b.text_of("pre.body").await;
    assert!(
        body.contains("\"id\": \"evt_entry_07\""),
        "indented JSON: {body}"
    );
    let headers = b.text_of("table.headers").await;
    assert!(headers.contains("[redacted]"), "{headers}");
    assert!(
        !headers.contains("v1="),
        "no signature on the page: {headers}"
    );
    b.assert_no_sideways_scroll("an entry").await;
    b.screenshot("entry").await;
    b.viewport(390, 844).await;
    b.assert_no_sideways_scroll("an entry on a phone").await;
    b.screenshot("entry-phone").await;
    b.viewport(1280, 800).await;

    // Discard without a note is refused, and changes nothing.
    b.click_button("Discard").await;
    let alert = b.text_of("[role=alert]").await;
    assert!(alert.starts_with("A note is required"), "{alert}");
    let id = path.rsplit('/').next().unwrap().to_string();
    let e = admin.get(&format!("/admin/entries/{id}")).await;
    assert_eq!(e["status"], "dead", "{e}");
    b.screenshot("entry-discard-refused").await;

    // With a note it is discarded, and the note shows in the audit trail.
    b.fill(
        "Note (required: why it will never be delivered)",
        "Customer deleted; never send",
    )
    .await;
    b.click_button("Discard").await;
    let said = b.text_of("p.notice").await;
    assert!(said.starts_with("Discarded"), "{said}");
    let audit = b.text_of("section[aria-labelledby=audit-heading]").await;
    assert!(audit.contains("discard"), "{audit}");
    assert!(audit.contains("Customer deleted; never send"), "{audit}");
    let e = admin.get(&format!("/admin/entries/{id}")).await;
    assert_eq!(e["status"], "discarded", "{e}");

    // Replay from an entry's page: delivered again, with its webhook-id.
    let e = admin.get("/admin/entries?event_id=evt_entry_08").await;
    let other = e["entries"][0]["id"].as_str().unwrap().to_string();
    b.client
        .goto(&format!("{}/console/entries/{other}", gw.admin))
        .await
        .unwrap();
    b.click_button("Replay").await;
    assert!(b.text_of("p.notice").await.starts_with("Replay queued"));
    upstream
        .wait_for(WAIT, "the replay", |r| {
            r.iter().any(|x| {
                x.answered == 200 && x.header("webhook-id").as_deref() == Some(other.as_str())
            })
        })
        .await;

    // Live mode: a webhook that arrives shows without a reload.
    b.client
        .goto(&format!("{}/console/entries?live=1", gw.admin))
        .await
        .unwrap();
    b.text_of("#live-status").await;
    let (st, v) = post_stripe(&client, &gw.ingest, "evt_entry_live").await;
    assert_eq!(st, 200, "{v}");
    wait_until_ok("the new entry to show", WAIT, async || {
        let shown = ids().await;
        if shown.first().map(String::as_str) == Some("evt_entry_live") {
            Ok(())
        } else {
            Err(format!("{shown:?}"))
        }
    })
    .await;
    assert_eq!(ids().await.len(), 51, "added on top, nothing lost");

    b.close().await;
    gw.stop().await;
}
