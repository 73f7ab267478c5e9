//! Stored XSS, in real Chromium: a signed webhook whose event id, event type, body
//! and headers carry `<script>`, `<img onerror>`, `<svg onload>`, `javascript:` URLs
//! and a `</textarea>` breakout, shown on every console page that shows webhook
//! data (and in what a route's transform makes of them). Each payload, if it ran, would change `document.title` and call the test's
//! sink; the test asserts that neither happened, that no element the payloads carry
//! made it into the page, and that each payload is shown as text.

use fantoccini::Locator;

use crate::admin::{Admin, admin_config};
use crate::browser::{Browser, WAIT};
use crate::support::*;
use crate::upstream::{Reply, Upstream};

/// What the page's title is while nothing ran.
const TITLE_END: &str = " · hookgate console";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_no_webhook_value_runs_on_any_console_page() {
    let sink = Upstream::ok().await;
    let refusing = Upstream::scripted(|_, _| Reply::Status(422)).await;
    let h = StoreHandle::new(Backend::Embedded);
    let sources = format!(
        "[[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
         [[sources.routes]]\nname = \"orders\"\ndestination = \"{}/orders\"\n\
         [sources.routes.retry]\nmax_attempts = 1\n\
         [[sources.routes]]\nname = \"legacy\"\ndestination = \"{}/legacy\"\n\
         transform_output = \"envelope\"\n\
         transform = '{{body: {{note: .data.object.note, id: .id}}, headers: {{\"X-Kind\": .type}}}}'\n\
         [sources.routes.retry]\nmax_attempts = 1\n",
        refusing.url, refusing.url
    );
    let gw = Gateway::start(admin_config(&h, "", &sources)).await;
    let admin = Admin::new(&gw);
    let s = &sink.url;
    // Each payload names what it would do: set the title, call the sink.
    let run = |what: &str| format!("document.title='pwned-{what}';fetch('{s}/{what}')");
    let event_id = format!("<script>{}</script>", run("id"));
    let event_type = format!("<img src=x onerror=\"{}\">", run("type"));
    let breakout = format!("</textarea></pre><script>{}</script>", run("body"));
    let link = format!("javascript:{}", run("link"));
    let body = serde_json::json!({
        "id": event_id,
        "object": "event",
        "type": event_type,
        "data": {"object": {"note": breakout, "url": link, "svg": format!("<svg onload=\"{}\">", run("svg"))}},
    })
    .to_string();
    let mut headers = sign_headers("stripe", STRIPE_SECRET, body.as_bytes(), now_secs(), "x");
    headers.push((
        "x-note".into(),
        format!("<svg onload=\"{}\">", run("header")),
    ));
    headers.push(("x-link".into(), link.clone()));
    let client = http();
    let (st, v) = post_raw(&client, &gw.ingest, "stripe", body.as_bytes(), &headers).await;
    assert_eq!(st, 200, "{v}");
    wait_until_ok("the entry to go dead", WAIT, async || {
        let s = admin.get("/admin/stats").await;
        if s["sources"][0]["routes"][0]["dead"] == 1 {
            Ok(())
        } else {
            Err(s)
        }
    })
    .await;
    // Refused requests carry payloads too: a forgery with the same headers, and a
    // source name that is one.
    let mut forged = headers.clone();
    flip_signature(&mut forged, "stripe-signature", 3);
    let (st, _) = post_raw(&client, &gw.ingest, "stripe", body.as_bytes(), &forged).await;
    assert_eq!(st, 401);
    let unknown = format!("<img src=x onerror=\"{}\">", run("source"));
    let (st, _) = post_raw(
        &client,
        &gw.ingest,
        &form_urlencoded::byte_serialize(unknown.as_bytes())
            .collect::<String>()
            .replace('+', "%20"),
        body.as_bytes(),
        &headers,
    )
    .await;
    assert_eq!(st, 404);
    wait_until_ok("the refusals to be kept", WAIT, async || {
        let r = admin.get("/admin/rejections").await;
        if r["rejections"].as_array().map_or(0, Vec::len) == 2 {
            Ok(())
        } else {
            Err(r)
        }
    })
    .await;
    let listed = admin.get("/admin/entries").await;
    let id = listed["entries"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(listed["entries"][0]["event_id"], event_id.as_str());

    let b = Browser::start().await;
    b.log_in(&gw).await;
    b.viewport(1280, 800).await;
    let q = |v: &str| form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>();
    let pages = [
        ("entries", "/console/entries".to_string()),
        (
            "entries-filtered",
            format!(
                "/console/entries?event_type={}&event_id={}",
                q(&event_type),
                q(&event_id)
            ),
        ),
        ("entries-live", "/console/entries?live=1".to_string()),
        ("entry", format!("/console/entries/{id}")),
        ("dead-letters", "/console/dead-letters".to_string()),
        ("rejections", "/console/rejections".to_string()),
        ("overview", "/console/".to_string()),
    ];
    for (name, path) in &pages {
        b.client.goto(&format!("{}{path}", gw.admin)).await.unwrap();
        b.text_of("main h1").await;
        if *name == "entries-live" {
            // Let the live script poll and insert the row again.
            wait_until_ok("a live poll", WAIT, async || {
                let said = b.text_of("#live-status").await;
                if said.starts_with("Live: checked") {
                    Ok(())
                } else {
                    Err(said)
                }
            })
            .await;
        }
        let text = b.text_of("main").await;
        match *name {
            "entries" | "entries-live" => {
                assert!(text.contains(&event_id), "{name}: the event id as text");
                assert!(text.contains(&event_type), "{name}: the event type as text");
            }
            "entries-filtered" => {
                let typed = b.value_of("#f-type").await;
                assert_eq!(typed, event_type, "the filter field holds the text");
                assert!(text.contains(&event_id), "{name}: the match, as text");
            }
            "entry" => {
                for shown in [&event_id, &event_type, &link] {
                    assert!(text.contains(shown.as_str()), "{name}: {shown} as text");
                }
                let body_shown = b.text_of("pre.body").await;
                assert!(
                    body_shown.contains("</textarea></pre><script>"),
                    "{body_shown}"
                );
                let raw = b
                    .client
                    .execute("return document.getElementById('body-raw').value;", vec![])
                    .await
                    .unwrap();
                assert_eq!(
                    raw.as_str(),
                    Some(body.as_str()),
                    "the copy source holds the body whole"
                );
                let header = b.text_of("table.headers").await;
                assert!(header.contains("<svg onload="), "{header}");
                // What the transformed route receives: the payloads, as text.
                let receives = b.text_of("div.receives").await;
                assert!(receives.contains("</textarea></pre><script>"), "{receives}");
                assert!(receives.contains(&event_id), "{receives}");
                assert!(receives.contains(&event_type), "{receives}");
                b.client
                    .execute(
                        "document.getElementById('receives-heading').scrollIntoView();",
                        vec![],
                    )
                    .await
                    .unwrap();
                b.screenshot("xss-entry-receives").await;
            }
            "dead-letters" => {
                assert!(
                    text.contains(&event_id),
                    "{name}: the sample's event id as text"
                );
            }
            "rejections" => {
                // Kept as the log keeps a name that is not configured: escaped,
                // its first 64 characters.
                let shown: String = unknown.escape_debug().take(64).collect();
                assert!(
                    text.contains(&shown),
                    "{name}: the source name as text: {shown} in {text}"
                );
                // Open every row's headers: the payloads in them, as text.
                b.client
                    .execute(
                        "document.querySelectorAll('details').forEach(d => d.open = true);",
                        vec![],
                    )
                    .await
                    .unwrap();
                let rows = b.text_of("table.rejections").await;
                assert!(rows.contains("<svg onload="), "{rows}");
                assert!(rows.contains("[redacted]"), "the signature: {rows}");
            }
            _ => {}
        }
        // Nothing ran: the title is the page's, no element of a payload exists, and
        // the only script is the console's own.
        let title = b.client.title().await.unwrap();
        assert!(title.ends_with(TITLE_END), "{name}: title {title:?}");
        let found = b
            .client
            .execute(
                "return [document.querySelectorAll('main script, [onerror], [onload], a[href^=\"javascript:\" i]').length, \
                 Array.from(document.scripts).map(s => s.src)];",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(found[0], 0, "{name}: an element from a payload: {found}");
        let scripts = found[1].as_array().unwrap();
        assert_eq!(scripts.len(), 1, "{name}: {found}");
        assert!(
            scripts[0]
                .as_str()
                .unwrap()
                .ends_with("/console/assets/console.js"),
            "{name}: {found}"
        );
        b.screenshot(&format!("xss-{name}")).await;
    }
    // Links on the pages lead nowhere near a payload.
    for a in b.client.find_all(Locator::Css("a[href]")).await.unwrap() {
        let href = a.attr("href").await.unwrap().unwrap_or_default();
        assert!(
            !href.to_ascii_lowercase().starts_with("javascript:"),
            "{href}"
        );
    }
    assert_eq!(sink.count(), 0, "no payload reached the sink");

    b.close().await;
    gw.stop().await;
}
