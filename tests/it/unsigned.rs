//! Routing and ordering on values nobody signed: GitHub's `X-GitHub-Event` header
//! is not covered by its signature, nor is a Shopify header. `hookgate check-config`,
//! `hookgate providers` and the console's Sources page name the source and route of
//! every filter or ordering key on such a value, and a delivery whose event type came
//! from one says `hookgate-event-type-signed: false`.

use std::time::Duration;

use crate::admin::{TOKEN, admin_config};
use crate::cli::run;
use crate::support::*;
use crate::upstream::Upstream;

/// GitHub routed by event type (unsigned), Shopify ordered by a header (unsigned)
/// and by its body id (signed), Stripe routed by event type (signed).
fn sources(github: &str, stripe: &str) -> String {
    format!(
        r#"
[[sources]]
name = "gh"
provider = "github"
secret = "{GITHUB_SECRET}"
[[sources.routes]]
name = "deploy"
destination = "{github}/deploy"
filter = {{ event_types = ["test.*", "push"] }}

[[sources]]
name = "shop"
provider = "shopify"
secret = "{SHOPIFY_SECRET}"
[[sources.routes]]
name = "products"
destination = "http://127.0.0.1:9/products"
order = {{ by = "header:X-Shopify-Product-Id", on_dead = "block" }}
[[sources.routes]]
name = "by-id"
destination = "http://127.0.0.1:9/by-id"
order = {{ by = "json:/id" }}

[[sources]]
name = "st"
provider = "stripe"
secret = "{STRIPE_SECRET}"
[[sources.routes]]
name = "billing"
destination = "{stripe}/billing"
filter = {{ event_types = ["payment_intent.*"] }}
"#
    )
}

/// The lines of `out` that warn about an unsigned value.
fn warnings(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.starts_with("warning:") && l.contains("unsigned"))
        .collect()
}

#[test]
fn check_config_and_providers_name_each_route_on_an_unsigned_value() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = write_config(dir.path(), &sources("http://a:1", "http://b:1"));
    let path = path.to_str().expect("a UTF-8 path");
    let (code, out, err) = run(&["check-config", "--config", path], &[]);
    assert_eq!(code, 0, "{out}{err}");
    let w = warnings(&out);
    assert_eq!(w.len(), 2, "{out}");
    assert!(
        w[0].contains("source gh route deploy") && w[0].contains("header:X-GitHub-Event"),
        "{out}"
    );
    assert!(
        w[1].contains("source shop route products")
            && w[1].contains("header:X-Shopify-Product-Id")
            && w[1].contains("json:/pointer"),
        "{out}"
    );
    assert!(out.ends_with("ok\n"), "still a valid configuration: {out}");

    // Per provider: which derived values the signature covers.
    let (code, out, err) = run(&["providers"], &[]);
    assert_eq!(code, 0, "{err}");
    let line = |provider: &str, aspect: &str| -> String {
        out.lines()
            .skip_while(|l| !l.starts_with(&format!("{provider} ")))
            .skip(1)
            .take_while(|l| l.starts_with(' '))
            .find(|l| l.trim_start().starts_with(aspect))
            .unwrap_or_else(|| panic!("no {aspect} line for {provider}:\n{out}"))
            .to_string()
    };
    let github = line("github", "event type");
    assert!(
        github.contains("header:X-GitHub-Event") && github.contains("unsigned"),
        "{github}"
    );
    let stripe = line("stripe", "event type");
    assert!(stripe.contains("(signed)"), "{stripe}");
    let shopify = line("shopify", "object");
    assert!(shopify.contains("json:/id (signed)"), "{shopify}");
    let lemon = line("lemonsqueezy", "event type");
    assert!(lemon.contains("(signed)"), "the body names it: {lemon}");
    // With the configuration, the same warnings as check-config.
    let (code, out, err) = run(&["providers", "--config", path], &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(warnings(&out).len(), 2, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_and_the_sources_page_say_what_is_unsigned() {
    let github = Upstream::ok().await;
    let stripe = Upstream::ok().await;
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(admin_config(&h, "", &sources(&github.url, &stripe.url))).await;
    let client = http();
    // Signed as GitHub signs: the type comes from X-GitHub-Event, outside the signature.
    let body = event_body("github", "gh_unsigned_type");
    let headers = sign_headers("github", GITHUB_SECRET, &body, now_secs(), "d-1");
    let (st, v) = post_raw(&client, &gw.ingest, "gh", &body, &headers).await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = post_stripe_signed(
        &client,
        &gw.ingest,
        "st",
        &event_body("stripe", "evt_signed_type"),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let wait = Duration::from_secs(10);
    github
        .wait_for(wait, "the GitHub delivery", |r| !r.is_empty())
        .await;
    stripe
        .wait_for(wait, "the Stripe delivery", |r| !r.is_empty())
        .await;
    let gh = &github.received()[0];
    assert_eq!(
        gh.header("hookgate-event-type").as_deref(),
        Some("test.event")
    );
    assert_eq!(
        gh.header("hookgate-event-type-signed").as_deref(),
        Some("false")
    );
    let st = &stripe.received()[0];
    assert_eq!(
        st.header("hookgate-event-type").as_deref(),
        Some("payment_intent.succeeded")
    );
    assert_eq!(st.header("hookgate-event-type-signed"), None);

    // The console's Sources page, over plain HTTP after logging in.
    let console = http_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client");
    let login = get_text(&console, &format!("{}/console/login", gw.admin)).await;
    let field = r#"name="csrf" value=""#;
    let at = login.find(field).expect("a form token") + field.len();
    let csrf = &login[at..at + login[at..].find('"').expect("its end")];
    let resp = console
        .post(format!("{}/console/login", gw.admin))
        .form(&[("csrf", csrf), ("token", TOKEN)])
        .send()
        .await
        .expect("log in");
    assert_eq!(resp.status(), 303);
    let cookie = resp.headers()["set-cookie"]
        .to_str()
        .expect("a cookie")
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string();
    let page = console
        .get(format!("{}/console/sources", gw.admin))
        .header("cookie", cookie)
        .send()
        .await
        .expect("the Sources page")
        .text()
        .await
        .expect("its text");
    // Each route's card, from its heading to the next route's.
    let card = |route: &str| -> &str {
        let start = page
            .find(&format!("</span>{route}</h3>"))
            .unwrap_or_else(|| panic!("no route {route} in {page}"));
        let rest = &page[start..];
        &rest[..rest[1..]
            .find("<li class=\"route\"")
            .map_or(rest.len(), |e| e + 1)]
    };
    for (route, value) in [
        ("deploy", "header:X-GitHub-Event"),
        ("products", "header:X-Shopify-Product-Id"),
    ] {
        let c = card(route);
        assert!(
            c.contains("Unsigned value") && c.contains(value) && c.contains("unsigned"),
            "{route}: {c}"
        );
    }
    for route in ["billing", "by-id"] {
        assert!(!card(route).contains("Unsigned value"), "{route}");
    }
    gw.stop().await;
}
