//! The console in a real browser (Debian's `chromium` over `chromedriver`, driven
//! with WebDriver) against a real gateway: logging in and out, a wrong token, pages
//! behind the login, cross-site form posts refused with a valid session cookie in the
//! browser, and screenshots of each page under `target/console-screenshots/`. Plain
//! HTTP checks the rest: form tokens, the security headers, the redirects, and on
//! every store a source below its expected traffic marked Quiet on the Sources page
//! since its last arrival.

use fantoccini::Locator;

use crate::admin::{Admin, TOKEN, admin_config};
use crate::browser::{Browser, WAIT, other_site};
use crate::support::*;
use crate::upstream::{Reply, Upstream};

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Two sources with routes in every state the overview shows: delivered, dead
/// (a 422 upstream, one attempt), pending on a paused source, duplicates and
/// unverified requests.
async fn busy_gateway(h: &StoreHandle) -> (Gateway, Upstream, Upstream) {
    let ok = Upstream::ok().await;
    let refusing = Upstream::scripted(|_, _| Reply::Status(422)).await;
    let sources = format!(
        "[[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
         [[sources.routes]]\nname = \"billing\"\ndestination = \"{}/billing\"\n\
         [[sources.routes]]\nname = \"analytics\"\ndestination = \"{}/analytics\"\n\
         [sources.routes.retry]\nmax_attempts = 1\n\
         [[sources]]\nname = \"github\"\nprovider = \"github\"\nsecret = \"{GITHUB_SECRET}\"\n\
         destination = \"http://127.0.0.1:9/github\"\n",
        ok.url, refusing.url
    );
    let gw = Gateway::start(admin_config(h, "", &sources)).await;
    let admin = Admin::new(&gw);
    let (st, v) = admin
        .call("POST", "/admin/sources/github/pause", None)
        .await;
    assert_eq!(st, 200, "{v}");
    let client = http();
    for i in 0..6 {
        let (st, v) = post_stripe(&client, &gw.ingest, &format!("evt_console_{i}")).await;
        assert_eq!(st, 200, "{v}");
    }
    let (st, _) = post_stripe(&client, &gw.ingest, "evt_console_0").await;
    assert_eq!(st, 200, "a duplicate is acknowledged");
    let body = event_body("stripe", "evt_forged");
    let mut headers = sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), "x");
    flip_signature(&mut headers, "stripe-signature", 3);
    let (st, _) = post_raw(&client, &gw.ingest, "stripe", &body, &headers).await;
    assert_eq!(st, 401);
    for i in 0..3 {
        let id = format!("gh_console_{i}");
        let (st, v) = post_signed(&client, &gw, "github", &event_body("github", &id), &id).await;
        assert_eq!(st, 200, "{v}");
    }
    wait_until_ok("deliveries to settle", WAIT, async || {
        let s = admin.get("/admin/stats").await;
        let stripe = &s["sources"][0];
        let settled = stripe["routes"][0]["delivered"] == 6 && stripe["routes"][1]["dead"] == 6;
        if settled { Ok(()) } else { Err(s) }
    })
    .await;
    (gw, ok, refusing)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_the_console_logs_in_shows_the_overview_refuses_cross_site_posts_and_logs_out()
{
    let h = StoreHandle::new(Backend::Embedded);
    let (gw, _ok, _refusing) = busy_gateway(&h).await;
    let b = Browser::start().await;
    let console = format!("{}/console/", gw.admin);

    // Logged out, the console sends the browser to the login.
    b.client.goto(&console).await.expect("open the console");
    b.wait_for_path("/console/login").await;
    assert_eq!(b.text_of("h1").await, "Log in to the console");
    let login_form_token = b.value_of("input[name=csrf]").await;
    b.viewport(1280, 800).await;
    b.screenshot("login").await;

    // A wrong token is refused, and the form says so.
    b.fill("Admin token", "not-the-token").await;
    b.click_button("Log in").await;
    let alert = b.text_of("[role=alert]").await;
    assert_eq!(alert, "That is not the admin token.");
    b.screenshot("login-refused").await;
    assert_eq!(
        b.client.current_url().await.unwrap().path(),
        "/console/login"
    );
    assert!(b.client.get_all_cookies().await.unwrap().is_empty());

    // The token logs in: the overview, and a session cookie that is not the token.
    b.fill("Admin token", TOKEN).await;
    b.click_button("Log in").await;
    b.wait_for_path("/console/").await;
    assert_eq!(b.text_of("main h1").await, "Overview");
    let cookies = b.client.get_all_cookies().await.unwrap();
    assert_eq!(cookies.len(), 1, "{cookies:?}");
    let c = &cookies[0];
    assert_eq!(c.name(), "hookgate_console");
    assert!(!c.value().contains(TOKEN), "{c:?}");
    assert_eq!(c.http_only(), Some(true), "{c:?}");
    assert_eq!(c.path(), Some("/console"), "{c:?}");
    assert_eq!(format!("{:?}", c.same_site()), "Some(Strict)", "{c:?}");
    assert!(c.expires().is_some(), "the session expires: {c:?}");

    // What the overview shows, per source and route.
    // WebDriver reads the rendered text: labels in capitals come in capitals.
    let stripe = b
        .text_of("section[aria-labelledby=source-0]")
        .await
        .to_lowercase();
    for word in [
        "stripe",
        "billing",
        "analytics",
        "received",
        "duplicates",
        "unverified",
    ] {
        assert!(stripe.contains(word), "{word} in {stripe}");
    }
    let row = |route: &str| {
        format!("//section[@aria-labelledby='source-0']//tbody/tr[th[normalize-space()='{route}']]")
    };
    let cell = async |route: &str, label: &str| -> String {
        b.client
            .find(Locator::XPath(&format!(
                "{}/td[@data-label='{label}']",
                row(route)
            )))
            .await
            .unwrap_or_else(|e| panic!("no {label} cell for {route}: {e}"))
            .text()
            .await
            .unwrap()
    };
    assert_eq!(cell("billing", "Delivered").await, "6");
    assert_eq!(cell("analytics", "Dead").await, "6");
    let facts = b
        .text_of("section[aria-labelledby=source-0] dl.facts")
        .await
        .to_lowercase();
    for fact in ["received\n6", "duplicates\n1", "unverified\n1"] {
        assert!(facts.contains(fact), "{fact} in {facts}");
    }
    let github = b.text_of("section[aria-labelledby=source-1]").await;
    assert!(github.contains("Paused"), "{github}");
    b.screenshot("overview").await;
    // A phone-width window: the tables stack.
    b.viewport(390, 844).await;
    b.screenshot("overview-phone").await;
    b.viewport(1280, 800).await;

    // Forms on another origin (same site: another port), posting to the console with
    // the session cookie in the browser, and even with the right form tokens: refused.
    let logout_token = b.value_of("form.logout input[name=csrf]").await;
    let (other, other_task) = other_site(format!(
        r#"<!doctype html><title>Another site</title>
<form method="post" action="{admin}/console/logout">
<input type="hidden" name="csrf" value="{logout_token}">
<button type="submit">Cross-site logout</button></form>
<form method="post" action="{admin}/console/login">
<input type="hidden" name="csrf" value="{login_form_token}">
<input type="hidden" name="token" value="{TOKEN}">
<button type="submit">Cross-site login</button></form>"#,
        admin = gw.admin
    ))
    .await;
    for (button, path) in [
        ("Cross-site logout", "/console/logout"),
        ("Cross-site login", "/console/login"),
    ] {
        b.client.goto(&other).await.unwrap();
        b.click_button(button).await;
        b.wait_for_path(path).await;
        assert_eq!(b.text_of("h1").await, "Forbidden", "{button}");
        let said = b.text_of("main p:nth-of-type(2)").await;
        assert!(said.contains("another site"), "{button}: {said}");
        b.screenshot("cross-site-refused").await;
        // Still logged in, with the same session.
        b.client.goto(&console).await.unwrap();
        b.wait_for_path("/console/").await;
        assert_eq!(b.text_of("main h1").await, "Overview");
        let now = b.client.get_all_cookies().await.unwrap();
        assert_eq!(now[0].value(), c.value(), "{button} changed the session");
    }
    other_task.abort();

    // Log out: back to the login, and the console is closed again.
    b.click_button("Log out").await;
    b.wait_for_path("/console/login").await;
    assert!(b.client.get_all_cookies().await.unwrap().is_empty());
    b.client.goto(&console).await.unwrap();
    b.wait_for_path("/console/login").await;

    b.close().await;
    gw.stop().await;
}

/// A client that shows redirects instead of following them.
pub fn no_redirects() -> reqwest::Client {
    http_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The form token in `html`'s first `csrf` field.
pub fn form_token(html: &str) -> String {
    let at = html
        .find(r#"name="csrf" value=""#)
        .unwrap_or_else(|| panic!("no form token in {html}"));
    let rest = &html[at + r#"name="csrf" value=""#.len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// Log in over HTTP; answers the `name=value` of the session cookie.
pub async fn log_in(client: &reqwest::Client, admin: &str) -> String {
    let page = client
        .get(format!("{admin}/console/login"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let resp = client
        .post(format!("{admin}/console/login"))
        .form(&[("csrf", form_token(&page).as_str()), ("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    for attr in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=43200",
    ] {
        assert!(set.contains(attr), "{attr} in {set}");
    }
    set.split(';').next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_post_needs_the_form_token_of_its_own_session() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(admin_config(&h, "", &sources_toml())).await;
    let client = no_redirects();
    let admin = gw.admin.as_str();
    let session = log_in(&client, admin).await;
    let other_session = log_in(&client, admin).await;
    assert_ne!(session, other_session, "every login has its own session");
    let page = |cookie: String| {
        let client = client.clone();
        async move {
            let resp = client
                .get(format!("{admin}/console/"))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            resp.text().await.unwrap()
        }
    };
    let token = form_token(&page(session.clone()).await);
    let others_token = form_token(&page(other_session.clone()).await);
    assert_ne!(token, others_token);

    let logout = async |cookie: &str, fields: &[(&str, &str)], origin: Option<&str>| {
        let mut req = client
            .post(format!("{admin}/console/logout"))
            .header("cookie", cookie)
            .form(fields);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        let resp = req.send().await.unwrap();
        (resp.status().as_u16(), resp.headers().clone())
    };
    for (fields, origin, what) in [
        (vec![], None, "no form token"),
        (vec![("csrf", "AAAA")], None, "a wrong form token"),
        (
            vec![("csrf", others_token.as_str())],
            None,
            "another session's form token",
        ),
        (
            vec![("csrf", token.as_str())],
            Some("http://evil.example"),
            "another origin",
        ),
    ] {
        let (st, headers) = logout(&session, &fields, origin).await;
        assert_eq!(st, 403, "{what}");
        assert!(!headers.contains_key("set-cookie"), "{what}");
    }
    // Logged out, a console action sends to the login and changes nothing.
    let resp = client
        .post(format!("{admin}/console/logout"))
        .form(&[("csrf", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()["location"], "/console/login");
    // The right token, from the console's own origin: logged out.
    let own = admin.to_string();
    let (st, headers) = logout(&session, &[("csrf", token.as_str())], Some(&own)).await;
    assert_eq!(st, 303);
    assert_eq!(headers["location"], "/console/login");
    assert!(
        headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0"),
        "{headers:?}"
    );
    // A wrong token answers the form again with a 401, and no cookie.
    let login_page = client
        .get(format!("{admin}/console/login"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let resp = client
        .post(format!("{admin}/console/login"))
        .form(&[
            ("csrf", form_token(&login_page).as_str()),
            ("token", "wrong"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert!(!resp.headers().contains_key("set-cookie"));
    assert!(
        resp.text()
            .await
            .unwrap()
            .contains("That is not the admin token.")
    );
    // The login form needs its form token too.
    let resp = client
        .post(format!("{admin}/console/login"))
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    assert!(!resp.headers().contains_key("set-cookie"));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_console_answer_carries_the_security_headers() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(admin_config(&h, "", &sources_toml())).await;
    let client = no_redirects();
    let admin = gw.admin.as_str();

    let resp = client.get(format!("{admin}/")).send().await.unwrap();
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()["location"], "/console/");

    let session = log_in(&client, admin).await;
    for (path, cookie, status, content_type) in [
        ("/console/", "", 303, None),
        (
            "/console/",
            session.as_str(),
            200,
            Some("text/html; charset=utf-8"),
        ),
        (
            "/console",
            session.as_str(),
            200,
            Some("text/html; charset=utf-8"),
        ),
        ("/console/login", "", 200, Some("text/html; charset=utf-8")),
        ("/console/sources", "", 303, None),
        (
            "/console/sources",
            session.as_str(),
            200,
            Some("text/html; charset=utf-8"),
        ),
        (
            "/console/logout",
            session.as_str(),
            405,
            Some("text/html; charset=utf-8"),
        ),
        (
            "/console/assets/console.css",
            "",
            200,
            Some("text/css; charset=utf-8"),
        ),
        ("/console/assets/icon.svg", "", 200, Some("image/svg+xml")),
        (
            "/console/assets/console.js",
            "",
            200,
            Some("text/javascript; charset=utf-8"),
        ),
        ("/console/entries", "", 303, None),
        (
            "/console/entries?status=dead&live=1",
            session.as_str(),
            200,
            Some("text/html; charset=utf-8"),
        ),
        (
            "/console/entries?status=bogus",
            session.as_str(),
            400,
            Some("text/html; charset=utf-8"),
        ),
        (
            "/console/entries/no-such-entry",
            session.as_str(),
            404,
            Some("text/html; charset=utf-8"),
        ),
        ("/console/dead-letters", "", 303, None),
        (
            "/console/dead-letters",
            session.as_str(),
            200,
            Some("text/html; charset=utf-8"),
        ),
        (
            "/console/no-such-page",
            session.as_str(),
            404,
            Some("text/html; charset=utf-8"),
        ),
    ] {
        let resp = client
            .get(format!("{admin}{path}"))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), status, "{path}");
        let h = resp.headers();
        assert_eq!(h["content-security-policy"], CSP, "{path}");
        assert_eq!(h["x-frame-options"], "DENY", "{path}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["referrer-policy"], "same-origin", "{path}");
        assert_eq!(h["cache-control"], "no-store", "{path}");
        if let Some(ct) = content_type {
            assert_eq!(h["content-type"], ct, "{path}");
        }
        let body = resp.text().await.unwrap();
        // The one script is the console's own file, and nothing is inline.
        let own = r#"<script src="/console/assets/console.js" defer></script>"#;
        assert_eq!(
            body.matches("<script").count(),
            body.matches(own).count(),
            "no inline script on {path}"
        );
        assert!(!body.contains("style="), "no inline style on {path}");
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_the_console_needs_no_login_and_its_forms_still_need_their_token() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(config(&h, "")).await;
    let client = no_redirects();
    let admin = gw.admin.as_str();
    let host = admin.trim_start_matches("http://");
    let resp = client
        .get(format!("{admin}/console/"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let page = resp.text().await.unwrap();
    assert!(
        page.contains("Overview") && !page.contains("Log out"),
        "{page}"
    );
    let resp = client
        .get(format!("{admin}/console/login"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303, "nothing to log into");

    // The console's forms carry a per-process form token; the guard lets the
    // console's own origin through, and nothing else.
    let wrong = "AAAA";
    let post = async |origin: Option<&str>, host_header: &str, csrf: &str| {
        let mut req = client
            .post(format!("{admin}/console/logout"))
            .header("host", host_header)
            .form(&[("csrf", csrf)]);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        req.send().await.unwrap().status().as_u16()
    };
    let own = format!("http://{host}");
    assert_eq!(
        post(Some(&own), host, wrong).await,
        403,
        "a wrong form token"
    );
    assert_eq!(post(Some("http://evil.example"), host, wrong).await, 403);
    assert_eq!(post(None, "evil.example", wrong).await, 403);
    gw.stop().await;
}

/// Whether the admin API says `source` (or its `route`) is paused.
async fn paused_per_api(admin: &Admin, source: &str, route: Option<&str>) -> bool {
    let all = admin.get("/admin/sources").await;
    let s = all
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == source)
        .unwrap_or_else(|| panic!("no source {source} in {all}"));
    match route {
        None => s["paused"] == true,
        Some(r) => s["routes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["route"] == r && x["paused"] == true),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_pause_on_the_sources_page_holds_deliveries_and_resume_drains_them() {
    let h = StoreHandle::new(Backend::Embedded);
    let billing = Upstream::ok().await;
    let analytics = Upstream::ok().await;
    let sources = format!(
        "[[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
         destination_secret = \"whsec_console_destination\"\n\
         [[sources.routes]]\nname = \"billing\"\ndestination = \"{}/billing\"\nrate_limit = \"50/s\"\n\
         [sources.routes.retry]\nmax_attempts = 5\nmax_age = \"1h\"\n\
         [[sources.routes]]\nname = \"analytics\"\ndestination = \"{}/analytics?key=k\"\n\
         order = {{ by = \"json:/id\", on_dead = \"block\" }}\n\
         filter.event_types = [\"payment_intent.*\", \"invoice.*\"]\n\
         [[sources]]\nname = \"github\"\nprovider = \"github\"\nsecret = \"{GITHUB_SECRET}\"\n\
         destination = \"{}/github\"\n",
        billing.url, analytics.url, billing.url
    );
    let cfg = admin_config(&h, "", &sources);
    let quiet = quiet_window(&cfg);
    let gw = Gateway::start(cfg).await;
    let admin = Admin::new(&gw);
    let client = http();
    let b = Browser::start().await;
    b.log_in(&gw).await;

    // The navigation leads to the Sources page.
    b.client
        .find(Locator::LinkText("Sources"))
        .await
        .expect("a Sources link")
        .click()
        .await
        .unwrap();
    b.wait_for_path("/console/sources").await;
    assert_eq!(b.text_of("main h1").await, "Sources");
    let card = b.text_of("#source-stripe").await;
    for shown in [
        "billing",
        "analytics",
        "payment_intent.*, invoice.*",
        "json:/id",
        "Up to 5 attempts within 1 h",
        "50 per second",
    ] {
        assert!(card.contains(shown), "{shown} in {card}");
    }

    // Pause the source: what arrives is stored, and nothing is delivered.
    b.click_button("Pause source stripe").await;
    b.wait_for_button("Resume source stripe").await;
    assert_eq!(
        b.text_of("#source-stripe .source-head .badge").await,
        "Paused"
    );
    assert!(paused_per_api(&admin, "stripe", None).await);
    for i in 0..3 {
        let (st, v) = post_stripe(&client, &gw.ingest, &format!("evt_held_{i}")).await;
        assert_eq!(st, 200, "{v}");
    }
    quiet_for(
        "nothing delivered while the source is paused",
        quiet,
        async || billing.count() == 0 && analytics.count() == 0,
    )
    .await;

    // Resume: everything that waited is delivered through both routes.
    b.click_button("Resume source stripe").await;
    b.wait_for_button("Pause source stripe").await;
    assert!(!paused_per_api(&admin, "stripe", None).await);
    wait_until("the held webhooks to be delivered", WAIT, async || {
        billing.count() == 3 && analytics.count() == 3
    })
    .await;

    // Pause one route: the other keeps delivering.
    b.click_button("Pause route analytics of stripe").await;
    b.wait_for_button("Resume route analytics of stripe").await;
    assert!(paused_per_api(&admin, "stripe", Some("analytics")).await);
    for i in 0..2 {
        let (st, v) = post_stripe(&client, &gw.ingest, &format!("evt_route_{i}")).await;
        assert_eq!(st, 200, "{v}");
    }
    wait_until("billing to take the new webhooks", WAIT, async || {
        billing.count() == 5
    })
    .await;
    quiet_for("nothing delivered to the paused route", quiet, async || {
        analytics.count() == 3
    })
    .await;

    b.client
        .goto(&format!("{}/console/sources", gw.admin))
        .await
        .unwrap();
    b.viewport(1280, 800).await;
    b.screenshot("sources").await;
    b.viewport(390, 844).await;
    let widths = b
        .client
        .execute(
            "const e = document.documentElement; return [e.scrollWidth, e.clientWidth];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(widths[0], widths[1], "no sideways scrolling on a phone");
    b.screenshot("sources-phone").await;
    b.viewport(1280, 800).await;

    b.click_button("Resume route analytics of stripe").await;
    b.wait_for_button("Pause route analytics of stripe").await;
    wait_until("the paused route to drain", WAIT, async || {
        analytics.count() == 5
    })
    .await;
    let mut ids = analytics.webhook_ids(None);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 5, "each webhook once: {ids:?}");

    b.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sources_page_shows_no_secret_and_its_buttons_need_the_form_token() {
    const DESTINATION_SECRET: &str = "whsec_destination_never_shown";
    const URL_PASSWORD: &str = "url-password-never-shown";
    const QUERY_TOKEN: &str = "query-token-never-shown";
    let h = StoreHandle::new(Backend::Embedded);
    let sources = format!(
        "[[sources]]\nname = \"vault\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
         destination_secret = \"{DESTINATION_SECRET}\"\n\
         [[sources.routes]]\nname = \"main\"\n\
         destination = \"http://user:{URL_PASSWORD}@127.0.0.1:9/hook?token={QUERY_TOKEN}\"\n\
         [[sources.routes]]\nname = \"audit\"\ndestination = \"http://127.0.0.1:9/audit\"\n"
    );
    let gw = Gateway::start(admin_config(&h, "", &sources)).await;
    let admin = Admin::new(&gw);
    let client = no_redirects();
    let base = gw.admin.as_str();
    let session = log_in(&client, base).await;

    let resp = client
        .get(format!("{base}/console/sources"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-security-policy"], CSP);
    let page = resp.text().await.unwrap();
    for shown in [
        "vault",
        "main",
        "audit",
        "http://[redacted]@127.0.0.1:9/hook?[redacted]",
        "Signed (destination secret)",
    ] {
        assert!(page.contains(shown), "{shown} in {page}");
    }
    for secret in [
        DESTINATION_SECRET,
        URL_PASSWORD,
        QUERY_TOKEN,
        STRIPE_SECRET,
        TOKEN,
    ] {
        assert!(!page.contains(secret), "{secret} in the Sources page");
    }
    let token = form_token(&page);

    let post = async |path: &str, cookie: &str, fields: &[(&str, &str)], origin: Option<&str>| {
        let mut req = client
            .post(format!("{base}{path}"))
            .header("cookie", cookie)
            .form(fields);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        let resp = req.send().await.unwrap();
        let location = resp
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_string());
        (resp.status().as_u16(), location)
    };
    let nothing_paused = async || {
        !paused_per_api(&admin, "vault", None).await
            && !paused_per_api(&admin, "vault", Some("main")).await
    };

    // Refused, and nothing changes: no form token, a wrong one, another origin.
    for path in [
        "/console/sources/vault/pause",
        "/console/sources/vault/routes/main/pause",
    ] {
        for (fields, origin, what) in [
            (vec![], None, "no form token"),
            (vec![("csrf", "AAAA")], None, "a wrong form token"),
            (
                vec![("csrf", token.as_str())],
                Some("http://evil.example"),
                "another origin",
            ),
        ] {
            let (st, _) = post(path, &session, &fields, origin).await;
            assert_eq!(st, 403, "{path}: {what}");
            assert!(nothing_paused().await, "{path}: {what} changed something");
        }
        // Logged out: to the login, and nothing changes.
        let (st, location) = post(path, "", &[("csrf", token.as_str())], None).await;
        assert_eq!(st, 303, "{path} logged out");
        assert_eq!(location.as_deref(), Some("/console/login"));
        assert!(nothing_paused().await);
    }

    // Unknown sources, routes and actions: the console's 404.
    for path in [
        "/console/sources/nope/pause",
        "/console/sources/vault/routes/nope/pause",
        "/console/sources/vault/explode",
        "/console/sources/vault/routes/main/explode",
    ] {
        let resp = client
            .post(format!("{base}{path}"))
            .header("cookie", &session)
            .form(&[("csrf", token.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        assert_eq!(resp.headers()["content-type"], "text/html; charset=utf-8");
        assert!(nothing_paused().await, "{path}");
    }
    let resp = client
        .get(format!("{base}/console/sources/vault/pause"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);

    // With the form token: done, and back to the page.
    let own = Some(base);
    let fields = [("csrf", token.as_str())];
    let (st, location) = post("/console/sources/vault/pause", &session, &fields, own).await;
    assert_eq!(st, 303);
    assert_eq!(location.as_deref(), Some("/console/sources#source-vault"));
    assert!(paused_per_api(&admin, "vault", None).await);
    let (st, _) = post(
        "/console/sources/vault/routes/main/pause",
        &session,
        &fields,
        own,
    )
    .await;
    assert_eq!(st, 303);
    assert!(paused_per_api(&admin, "vault", Some("main")).await);
    assert!(!paused_per_api(&admin, "vault", Some("audit")).await);
    let page = client
        .get(format!("{base}/console/sources"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for button in [
        "Resume source<span class=\"visually-hidden\"> vault</span>",
        "Resume route<span class=\"visually-hidden\"> main of vault</span>",
        "Pause route<span class=\"visually-hidden\"> audit of vault</span>",
    ] {
        assert!(page.contains(button), "{button} in {page}");
    }
    for path in [
        "/console/sources/vault/resume",
        "/console/sources/vault/routes/main/resume",
    ] {
        let (st, _) = post(path, &session, &fields, own).await;
        assert_eq!(st, 303, "{path}");
    }
    assert!(nothing_paused().await);
    gw.stop().await;
}

/// An ordered route whose head went dead with `on_dead = "block"`: the overview
/// counts the blocked key, the entry's page shows its ordering key and that it holds
/// the line, and the Sources page says how the route orders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_ordering_keys_and_the_keys_a_dead_head_blocks() {
    let h = StoreHandle::new(Backend::Embedded);
    let refusing = Upstream::scripted(|_, _| Reply::Status(422)).await;
    let sources = format!(
        "[[sources]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecret = \"{STRIPE_SECRET}\"\n\
         [[sources.routes]]\nname = \"ledger\"\ndestination = \"{}/ledger\"\n\
         order = {{ by = \"json:/object\", on_dead = \"block\" }}\n\
         [sources.routes.retry]\nmax_attempts = 1\n",
        refusing.url
    );
    let gw = Gateway::start(admin_config(&h, "", &sources)).await;
    let admin = Admin::new(&gw);
    let client = http();
    for i in 0..3 {
        let (st, v) = post_stripe(&client, &gw.ingest, &format!("evt_line_{i}")).await;
        assert_eq!(st, 200, "{v}");
    }
    wait_until_ok("the head to block its key", WAIT, async || {
        let s = admin.get("/admin/stats").await;
        let r = &s["sources"][0]["routes"][0];
        if r["blocked_keys"] == 1 && r["dead"] == 1 && r["pending"] == 2 {
            Ok(())
        } else {
            Err(s)
        }
    })
    .await;
    let web = no_redirects();
    let session = log_in(&web, &gw.admin).await;
    let page = async |path: &str| -> String {
        let resp = web
            .get(format!("{}{path}", gw.admin))
            .header("cookie", session.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        resp.text().await.unwrap()
    };
    let overview = page("/console/").await;
    assert!(
        overview.contains(r#"<td class="num bad" data-label="Blocked keys">1</td>"#),
        "{overview}"
    );
    let dead = admin.get("/admin/entries?status=dead").await;
    let head = dead["entries"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(dead["entries"][0]["event_id"], "evt_line_0");
    let entry = page(&format!("/console/entries/{head}")).await;
    assert!(
        entry.contains("<code>event</code>"),
        "the ordering key: {entry}"
    );
    assert!(entry.contains("Blocks its key"), "{entry}");
    let behind = admin.get("/admin/entries?event_id=evt_line_1").await;
    let behind = behind["entries"][0]["id"].as_str().unwrap().to_string();
    let waiting = page(&format!("/console/entries/{behind}")).await;
    assert!(waiting.contains("<code>event</code>"), "{waiting}");
    assert!(
        !waiting.contains("Blocks its key"),
        "only the head blocks: {waiting}"
    );
    let sources = page("/console/sources").await;
    assert!(sources.contains("json:/object"), "{sources}");
    assert!(
        sources.contains("a dead delivery holds its key"),
        "{sources}"
    );
    gw.stop().await;
}

/// The card of source `name` on the Sources page `html`.
fn source_card<'a>(html: &'a str, name: &str) -> &'a str {
    let at = html
        .find(&format!("id=\"source-{name}\""))
        .unwrap_or_else(|| panic!("no card of {name} in {html}"));
    let rest = &html[at..];
    &rest[..rest.find("</section>").unwrap_or(rest.len())]
}

/// A source below its `[sources.expect]` says so since its last stored entry; one
/// that met it, or has none, does not.
async fn quiet_since(backend: Backend) {
    let h = StoreHandle::new(backend);
    // What `calm` stored two hours ago, before this gateway started.
    let two_hours_ago = hookgate::clock::system_now_ms() - 2 * 3_600_000;
    let store = h.open().await;
    crate::conformance::accept_new(
        &*store,
        crate::conformance::entry_at("calm", "evt_old", two_hours_ago, "ping"),
    )
    .await;
    store.close().await;
    drop(store);
    let dest = "http://127.0.0.1:9/x";
    let sources = format!(
        "{}{}{}{}",
        crate::forward::source("calm", dest, "[sources.expect]\nat_least = \"1/1h\"\n"),
        crate::forward::source("thin", dest, "[sources.expect]\nat_least = \"3/1h\"\n"),
        crate::forward::source("steady", dest, "[sources.expect]\nat_least = \"1/1h\"\n"),
        crate::forward::source("plain", dest, ""),
    );
    let gw = Gateway::start(admin_config(&h, "", &sources)).await;
    let admin = Admin::new(&gw);
    let c = http();
    for source in ["thin", "steady", "plain"] {
        let body = event_body("stripe", &format!("evt_{source}"));
        let (st, v) = post_stripe_signed(&c, &gw.ingest, source, &body).await;
        assert_eq!(st, 200, "{v}");
    }
    // The second of an entry's arrival, as the page's <time> carries it.
    let arrived = async |source: &str| {
        let page = admin
            .get(&format!("/admin/entries?source={source}&limit=1"))
            .await;
        let at = page["entries"][0]["received_at"]
            .as_str()
            .unwrap()
            .to_string();
        format!("{}Z", &at[..19])
    };
    let client = no_redirects();
    let session = log_in(&client, &gw.admin).await;
    let html = client
        .get(format!("{}/console/sources", gw.admin))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();

    let calm = source_card(&html, "calm");
    assert!(calm.contains(">Quiet<"), "{calm}");
    let since = format!(
        "<strong>Quiet</strong>: nothing since <time datetime=\"{}\">",
        arrived("calm").await
    );
    assert!(calm.contains(&since), "{since} in {calm}");
    assert!(calm.contains("(expects at least 1 per 1 h)"), "{calm}");

    let thin = source_card(&html, "thin");
    let last = format!(
        "<strong>Quiet</strong>: 1 in the last 1 h, the last at <time datetime=\"{}\">",
        arrived("thin").await
    );
    assert!(thin.contains(&last), "{last} in {thin}");
    assert!(thin.contains("(expects at least 3 per 1 h)"), "{thin}");

    let steady = source_card(&html, "steady");
    assert!(!steady.contains("Quiet"), "{steady}");
    assert!(steady.contains("At least 1 per 1 h"), "{steady}");
    let plain = source_card(&html, "plain");
    assert!(
        !plain.contains("Quiet") && !plain.contains("Expects"),
        "{plain}"
    );
    gw.stop().await;
}
crate::for_each_store!(
    a_source_below_its_expected_traffic_is_quiet_on_the_sources_page_since_its_last_arrival,
    super::quiet_since
);

/// A source that learns what is usual (`[sources.expect] learn = true`): with two
/// weeks of history (30 an hour in the same three hours of each of the last two
/// weeks), one that received nothing in its last three hours is quiet, on the
/// Sources page and in `hookgate_source_quiet`; one that received its usual share
/// is not; one with a week of history is still learning, and never quiet.
async fn learned(backend: Backend) {
    const HOUR: i64 = 3_600_000;
    const WEEK: i64 = 7 * 24 * HOUR;
    let h = StoreHandle::new(backend);
    let b = format!("{backend:?}").to_lowercase();
    let names = [
        format!("usual_silent_{b}"),
        format!("usual_busy_{b}"),
        format!("usual_young_{b}"),
    ];
    let now = hookgate::clock::system_now_ms();
    let store = h.open().await;
    let mut n = 0;
    for (i, name) in names.iter().enumerate() {
        let weeks = if i == 2 { 1 } else { 2 };
        for k in 1..=weeks {
            for hour in 0..3 {
                for e in 0..30 {
                    // Twenty minutes into the hour: the window judged a few seconds
                    // later holds it all the same.
                    let at = now - k * WEEK - (3 - hour) * HOUR + 20 * 60_000 + e * 1_000;
                    n += 1;
                    crate::conformance::accept_new(
                        &*store,
                        crate::conformance::entry_at(name, &format!("evt_u{n}"), at, "ping"),
                    )
                    .await;
                }
            }
        }
    }
    // The busy one's last three hours: 10 an hour, over a tenth of 90.
    for hour in 0..3 {
        for e in 0..10 {
            let at = now - (3 - hour) * HOUR + 20 * 60_000 + e * 1_000;
            n += 1;
            crate::conformance::accept_new(
                &*store,
                crate::conformance::entry_at(&names[1], &format!("evt_u{n}"), at, "ping"),
            )
            .await;
        }
    }
    store.close().await;
    drop(store);
    let dest = "http://127.0.0.1:9/x";
    let sources: String = names
        .iter()
        .map(|n| crate::forward::source(n, dest, "[sources.expect]\nlearn = true\n"))
        .collect();
    let gw = Gateway::start(admin_config(&h, "", &sources)).await;
    let c = http();
    wait_until_ok(
        "the learned gauges",
        std::time::Duration::from_secs(15),
        async || {
            let text = get_text(&c, &format!("{}/metrics", gw.admin)).await;
            let value = |name: &str| {
                let series = format!("hookgate_source_quiet{{source=\"{name}\"}} ");
                text.lines()
                    .find_map(|l| l.strip_prefix(&series))
                    .map(str::to_string)
            };
            let seen: Vec<Option<String>> = names.iter().map(|n| value(n)).collect();
            if seen == [Some("1".into()), Some("0".into()), Some("0".into())] {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        },
    )
    .await;
    let client = no_redirects();
    let session = log_in(&client, &gw.admin).await;
    let html = client
        .get(format!("{}/console/sources", gw.admin))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let silent = source_card(&html, &names[0]);
    assert!(silent.contains(">Quiet<"), "{silent}");
    assert!(
        silent.contains("(usually at least 9 per 3 h at this hour of the week)"),
        "{silent}"
    );
    let busy = source_card(&html, &names[1]);
    assert!(!busy.contains("Quiet"), "{busy}");
    assert!(busy.contains("30 in the last 3 h"), "{busy}");
    let young = source_card(&html, &names[2]);
    assert!(!young.contains("Quiet"), "{young}");
    assert!(young.contains("still learning"), "{young}");
    gw.stop().await;
}
crate::for_each_store!(
    a_source_learning_its_usual_traffic_is_quiet_under_a_tenth_of_it,
    super::learned
);
