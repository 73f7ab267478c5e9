//! The console's cookie and headers against what another app on the host, another
//! scheme or a hostile payload can do: the `__Host-` `Secure` cookie behind https,
//! every presented session cookie tried (a shadowing cookie does not log anyone
//! out), `Origin` compared with its scheme, no caching or sniffing of admin JSON,
//! and webhook strings isolated from the text around them (bidi controls), in
//! Chromium.

use crate::admin::{Admin, TOKEN, admin_config};
use crate::browser::Browser;
use crate::console::{form_token, log_in, no_redirects};
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_https_the_session_cookie_is_host_prefixed_and_secure() {
    let h = StoreHandle::new(Backend::Embedded);
    let public = "https://console.example";
    let extra = format!("[admin]\npublic_origin = \"{public}\"\n");
    let gw = Gateway::start(admin_config(&h, &extra, &sources_toml())).await;
    let client = no_redirects();
    let admin = gw.admin.as_str();
    let login = client
        .get(format!("{admin}/console/login"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let login_as = |origin: &'static str| {
        client
            .post(format!("{admin}/console/login"))
            .header("origin", origin)
            .form(&[("csrf", form_token(&login).as_str()), ("token", TOKEN)])
            .send()
    };
    // The proxy's origin over http is another origin.
    assert_eq!(
        login_as("http://console.example").await.unwrap().status(),
        403
    );
    let resp = login_as("https://console.example").await.unwrap();
    assert_eq!(resp.status(), 303);
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(set.starts_with("__Host-hookgate_console="), "{set}");
    for attr in ["; Path=/;", "; Secure", "; HttpOnly", "; SameSite=Strict"] {
        assert!(set.contains(attr), "{attr} in {set}");
    }
    assert!(!set.contains("Domain"), "{set}");
    let cookie = set.split(';').next().unwrap().to_string();
    let overview = client
        .get(format!("{admin}/console/"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(overview.status(), 200);
    let token = form_token(&overview.text().await.unwrap());
    let logout = |origin: &'static str| {
        client
            .post(format!("{admin}/console/logout"))
            .header("cookie", &cookie)
            .header("origin", origin)
            .form(&[("csrf", token.as_str())])
            .send()
    };
    assert_eq!(
        logout("http://console.example").await.unwrap().status(),
        403
    );
    let out = logout("https://console.example").await.unwrap();
    assert_eq!(out.status(), 303);
    let cleared = out.headers()["set-cookie"].to_str().unwrap();
    assert!(
        cleared.starts_with("__Host-hookgate_console=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cookie_another_app_sets_cannot_shadow_the_session() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(admin_config(&h, "", &sources_toml())).await;
    let client = no_redirects();
    let admin = gw.admin.as_str();
    let session = log_in(&client, admin).await;
    let value = session.split_once('=').unwrap().1;
    // An app on the same host set a cookie of the same name with a longer path: the
    // browser sends it first.
    for cookie in [
        format!("hookgate_console=junk; hookgate_console={value}"),
        format!("hookgate_console=1.2.3; other=x; hookgate_console={value}"),
    ] {
        let st = client
            .get(format!("{admin}/console/"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(st, 200, "{cookie}");
    }
    let st = client
        .get(format!("{admin}/console/"))
        .header("cookie", "hookgate_console=junk; hookgate_console=1.2.3")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(st, 303, "no valid one: the login");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_post_from_the_same_host_over_another_scheme_is_refused() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(admin_config(&h, "", &sources_toml())).await;
    let client = no_redirects();
    let admin = gw.admin.as_str();
    let session = log_in(&client, admin).await;
    let page = client
        .get(format!("{admin}/console/sources"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let token = form_token(&page);
    let pause = |origin: String| {
        client
            .post(format!("{admin}/console/sources/stripe/pause"))
            .header("cookie", &session)
            .header("origin", origin)
            .form(&[("csrf", token.as_str())])
            .send()
    };
    let https_same_host = admin.replace("http://", "https://");
    assert_eq!(pause(https_same_host).await.unwrap().status(), 403);
    assert_eq!(
        Admin::new(&gw).get("/admin/sources").await[0]["paused"],
        false
    );
    assert_eq!(pause(admin.to_string()).await.unwrap().status(), 303);
    assert_eq!(
        Admin::new(&gw).get("/admin/sources").await[0]["paused"],
        true
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_json_is_neither_cached_nor_sniffed() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(admin_config(&h, "", &sources_toml())).await;
    let client = http();
    let admin = gw.admin.as_str();
    for (path, token, status) in [
        ("/admin/sources", Some(TOKEN), 200),
        ("/admin/entries/nope", Some(TOKEN), 404),
        ("/admin/stats", None, 401),
        ("/admin/no-such-route", Some(TOKEN), 404),
    ] {
        let mut req = client.get(format!("{admin}{path}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), status, "{path}");
        let h = resp.headers();
        assert_eq!(h["content-type"], "application/json", "{path}");
        assert_eq!(h["cache-control"], "no-store", "{path}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
    }
    gw.stop().await;
}

/// U+202E RIGHT-TO-LEFT OVERRIDE: reverses the text after it, up to the end of its
/// paragraph, unless the element holding it isolates it.
const RLO: char = '\u{202E}';

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_a_bidi_control_in_a_webhook_cannot_reorder_the_page() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(admin_config(&h, "", &sources_toml())).await;
    let event_id = format!("evt_{RLO}fdp.exe");
    let body = serde_json::json!({
        "id": event_id,
        "object": "event",
        "type": format!("invoice.{RLO}diap"),
        "data": {},
    })
    .to_string();
    let client = http();
    let (st, v) = post_stripe_signed(&client, &gw.ingest, "stripe", body.as_bytes()).await;
    assert_eq!(st, 200, "{v}");
    let id = v["id"].as_str().unwrap().to_string();

    let b = Browser::start().await;
    b.log_in(&gw).await;
    for path in [
        "/console/entries".to_string(),
        format!("/console/entries/{id}"),
    ] {
        b.client.goto(&format!("{}{path}", gw.admin)).await.unwrap();
        b.wait_for_path(&path).await;
        // Every innermost element shown whose text holds the control must isolate
        // it (a `<bdi>`, or `unicode-bidi: isolate`), so that it cannot reorder the
        // text around the value. (The Copy button's hidden source is not shown.)
        let found = b
            .client
            .execute(
                "const out = [];
                 for (const el of document.body.querySelectorAll('*:not([aria-hidden=true])')) {
                   const own = [...el.childNodes].some(n => n.nodeType === 3 && n.data.includes('\u{202E}'));
                   if (own) out.push([el.tagName, getComputedStyle(el).unicodeBidi]);
                 }
                 return out;",
                vec![],
            )
            .await
            .unwrap();
        let found = found.as_array().unwrap().clone();
        assert!(!found.is_empty(), "{path}: the payload is on the page");
        for f in &found {
            assert_eq!(f[1], "isolate", "{path}: {found:?}");
        }
    }
    b.close().await;
    gw.stop().await;
}
