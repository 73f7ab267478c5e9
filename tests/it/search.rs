//! Payload search end to end, on every store: signed webhooks of a source with an
//! indexed pointer, found by the index and by reading them, through the admin API,
//! the CLI and the console's Entries page, which all search the same way; a
//! signature header cannot be searched, and a malformed predicate is a 400.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::admin::{Admin, TOKEN, admin_config};
use crate::console::{log_in, no_redirects};
use crate::for_each_store;
use crate::support::*;

const N: usize = 24;

fn sources() -> String {
    format!(
        "[[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
         destination = \"http://127.0.0.1:9/stripe\"\n\
         [sources.index]\ncustomer = \"/data/object/customer\"\n"
    )
}

/// Webhook `i`: customer `cus_<i % 4>`, amount `i * 100`.
fn body(i: usize) -> Vec<u8> {
    json!({
        "id": format!("evt_search_{i}"),
        "type": "charge.succeeded",
        "data": {"object": {"customer": format!("cus_{}", i % 4), "amount": i * 100}}
    })
    .to_string()
    .into_bytes()
}

/// Every page of `GET /admin/entries?<query>`, the ids, and the last page's `search`.
async fn search_all(admin: &Admin, query: &str) -> (Vec<String>, Value) {
    let mut ids = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = admin.get(&format!("/admin/entries?{query}{cursor}")).await;
        ids.extend(
            page["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["id"].as_str().unwrap().to_string()),
        );
        match page["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return (ids, page["search"].clone()),
        }
    }
}

async fn searches_find_what_the_bodies_hold(backend: Backend) {
    let h = StoreHandle::new(backend);
    let gw = Gateway::start(admin_config(&h, "", &sources())).await;
    let admin = Admin::new(&gw);
    let client = http();
    let mut by_customer: Vec<BTreeSet<String>> = vec![BTreeSet::new(); 4];
    for i in 0..N {
        let (st, json) = post_stripe_signed(&client, &gw.ingest, "stripe", &body(i)).await;
        assert_eq!(st, 200, "{json}");
        by_customer[i % 4].insert(json["id"].as_str().unwrap().to_string());
    }

    // By the index, in pages of 2.
    let (ids, search) = search_all(
        &admin,
        "source=stripe&limit=2&match=/data/object/customer:cus_3",
    )
    .await;
    assert_eq!(ids.iter().cloned().collect::<BTreeSet<_>>(), by_customer[3]);
    assert_eq!(ids.len(), N / 4, "no entry twice");
    assert_eq!(search["index"], "customer");
    assert_eq!(search["complete"], true);
    let (ids, search) =
        search_all(&admin, "source=stripe&in=/data/object/customer:cus_1,cus_2").await;
    let want: BTreeSet<String> = by_customer[1].union(&by_customer[2]).cloned().collect();
    assert_eq!(ids.iter().cloned().collect::<BTreeSet<_>>(), want);
    assert_eq!(search["index"], "customer");

    // By reading them: a number, a header, a prefix with a missing pointer.
    let (ids, search) = search_all(&admin, "match=/data/object/amount:500").await;
    assert_eq!(ids.len(), 1);
    assert!(by_customer[1].contains(&ids[0]));
    assert_eq!(search["index"], Value::Null);
    assert_eq!(search["scanned"], N);
    let (ids, _) = search_all(
        &admin,
        "source=stripe&prefix=/data/object/customer:cus_&exists=header.content-type&missing=/data/object/refund",
    )
    .await;
    assert_eq!(ids.len(), N);

    // What cannot be asked.
    for bad in [
        "match=header.stripe-signature:t%3D1",
        "match=header.authorization:x",
        "match=/no-value",
        "exists=data",
    ] {
        let (st, v) = admin
            .call("GET", &format!("/admin/entries?{bad}"), None)
            .await;
        assert_eq!(st, 400, "{bad}: {v}");
    }
    // Eight predicates of each kind (the OpenAPI document's bound), not nine.
    let eight_each = [
        "match=/n:1",
        "in=/n:1,2",
        "prefix=/k:a",
        "exists=/n",
        "missing=/z",
    ]
    .map(|p| [p; 8].join("&"))
    .join("&");
    let (st, v) = admin
        .call("GET", &format!("/admin/entries?{eight_each}"), None)
        .await;
    assert_eq!(st, 200, "{v}");
    let nine = ["missing=/z"; 9].join("&");
    let (st, v) = admin
        .call("GET", &format!("/admin/entries?{nine}"), None)
        .await;
    assert_eq!(st, 400, "{v}");

    // The CLI searches the same way.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args([
            "entries",
            "--admin-url",
            &gw.admin,
            "--token",
            TOKEN,
            "list",
            "--source",
            "stripe",
            "--match",
            "/data/object/customer:cus_0",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for id in &by_customer[0] {
        assert!(text.contains(id.as_str()), "the CLI lists {id}: {text}");
    }
    for id in &by_customer[1] {
        assert!(!text.contains(id.as_str()), "the CLI does not list {id}");
    }
    assert!(text.contains("by the index customer"), "{text}");

    // And the console's Entries page.
    let console = no_redirects();
    let cookie = log_in(&console, &gw.admin).await;
    let page = console
        .get(format!("{}/console/entries", gw.admin))
        .query(&[
            ("source", "stripe"),
            ("search", "match=/data/object/customer:cus_2"),
        ])
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    for id in &by_customer[2] {
        assert!(html.contains(id.as_str()), "the console lists {id}");
    }
    for id in &by_customer[3] {
        assert!(
            !html.contains(id.as_str()),
            "the console does not list {id}"
        );
    }
    assert!(html.contains("by the index"));
    let page = console
        .get(format!("{}/console/entries", gw.admin))
        .query(&[("search", "match=header.stripe-signature:x")])
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 400);
    assert!(page.text().await.unwrap().contains("cannot be searched"));
    gw.stop().await;
}
for_each_store!(
    searches_by_index_and_by_reading_agree_in_the_api_cli_and_console,
    super::searches_find_what_the_bodies_hold
);

/// Measured alone: the gateway's peak memory while it scans.
mod alone {

    use bytes::Bytes;

    use crate::conformance::{accept_new, entry};
    use crate::support::*;

    /// Entries of [`BODY`] bytes: a scan that read a round of them at once (up to
    /// 500) would hold hundreds of MiB.
    const ENTRIES: usize = 600;
    const BODY: usize = 1 << 20;
    /// What the search may add to the gateway's resident memory at its peak.
    const GROWTH_MAX_KIB: u64 = 64 * 1024;

    /// A field (`VmRSS:`, `VmHWM:`) of the process's status, in KiB.
    fn status_kib(pid: u32, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in {status}"))
    }

    /// An unindexed search over entries of 1 MiB reads them a few at a time: the
    /// gateway's peak resident memory grows by at most 64 MiB while it reads 600 of
    /// them, and the search still reads every one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_scan_over_large_entries_holds_a_few_at_a_time() {
        let h = StoreHandle::new(Backend::Embedded);
        let store = h.open().await;
        let pad = "x".repeat(BODY);
        let body = Bytes::from(format!("{{\"id\":\"evt\",\"pad\":\"{pad}\"}}"));
        // Many at a time: the embedded store commits them in groups.
        for chunk in 0..ENTRIES / 20 {
            let accepts = (0..20).map(|i| {
                let mut e = entry("stripe", &format!("evt_large_{chunk}_{i}"));
                e.body = body.clone();
                // No route: nothing is delivered, so only the search reads them.
                e.routes.clear();
                let store = store.clone();
                async move { accept_new(&*store, e).await }
            });
            futures_util::future::join_all(accepts).await;
        }
        store.close().await;

        let dir = tempfile::tempdir().unwrap();
        let path = config_file(&h, dir.path());
        let gw = ChildGateway::spawn(&path, &[], &dir.path().join("stderr"));
        let pid = gw.child.id();
        // Reset the peak to what the process holds now.
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("clear_refs");
        let before = status_kib(pid, "VmRSS:");
        let page = get_json(
            &http(),
            &format!("{}/admin/entries?source=stripe&match=/nope:1", gw.admin),
        )
        .await;
        assert_eq!(page["entries"].as_array().map(Vec::len), Some(0), "{page}");
        assert_eq!(page["search"]["scanned"], ENTRIES, "{page}");
        assert_eq!(page["search"]["complete"], true, "{page}");
        let peak = status_kib(pid, "VmHWM:");
        let grew = peak.saturating_sub(before);
        assert!(
            grew <= GROWTH_MAX_KIB,
            "the search took the gateway from {before} KiB to a peak of {peak} KiB"
        );
    }
}
