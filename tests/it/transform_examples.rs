//! README's worked transform programs, read from README.md and run through the
//! gateway on every store: for each, the provider's body is signed as the provider
//! signs it and posted, and the app must receive exactly the body and content type
//! the README shows (and the headers it names), with a valid `webhook-signature`.

use std::time::Duration;

use hookgate::config::{self, Secret};
use hookgate::forward::request::{decode_destination_secret, sign as sign_delivery};
use hookgate::provider::Registry;
use hookgate::provider::sign::{SignInput, sign};

use crate::for_each_store;
use crate::forward::{DEST_SECRET, FAST};
use crate::support::*;
use crate::upstream::Upstream;

/// One worked example as README.md shows it.
#[derive(Debug)]
struct Example {
    provider: String,
    event: String,
    /// The route's keys (the lines after `[[sources.routes]]`).
    route: String,
    input: String,
    content_type: String,
    /// `Name: value` pairs the README says the app receives besides the content type.
    headers: Vec<(String, String)>,
    received: String,
}

/// The value of `name="…"` in a marker line.
fn attr(line: &str, name: &str) -> String {
    let key = format!("{name}=\"");
    let start = line.find(&key).map(|i| i + key.len()).expect("attribute");
    let end = line[start..].find('"').expect("closing quote") + start;
    line[start..end].to_string()
}

/// Every `<!-- transform-example … -->` of README.md: the toml fence after it (the
/// route), the next fence (what the provider sends) and the fence after the line
/// "The app receives (…)".
fn examples() -> Vec<Example> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let lines: Vec<&str> = readme.lines().collect();
    let fence_after = |from: usize| -> (usize, String) {
        let open = (from..lines.len())
            .find(|&i| lines[i].starts_with("```"))
            .expect("a fence");
        let close = (open + 1..lines.len())
            .find(|&i| lines[i] == "```")
            .expect("a closing fence");
        (close, lines[open + 1..close].join("\n"))
    };
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !line.starts_with("<!-- transform-example") {
            continue;
        }
        let (end, toml) = fence_after(i);
        let route = toml
            .strip_prefix("[[sources.routes]]\n")
            .expect("the example's toml is one route")
            .to_string();
        let (end, input) = fence_after(end + 1);
        let says = (end + 1..lines.len())
            .find(|&j| lines[j].starts_with("The app receives ("))
            .expect("what the app receives");
        let inside = &lines[says]["The app receives (".len()..];
        let mut ticks = inside.split('`').skip(1).step_by(2);
        let content_type = ticks.next().expect("a content type").to_string();
        let headers = ticks
            .map(|h| {
                let (n, v) = h.split_once(": ").expect("Name: value");
                (n.to_ascii_lowercase(), v.to_string())
            })
            .collect();
        let (_, received) = fence_after(says + 1);
        out.push(Example {
            provider: attr(line, "provider"),
            event: attr(line, "event"),
            route,
            input,
            content_type,
            headers,
            received,
        });
    }
    out
}

const SECRET: &str = "whsec_example_secret_for_every_provider_0123456789";

/// The headers `provider` sends for `body` (an event of type `event`, id `id`).
fn provider_headers(provider: &str, event: &str, id: &str, body: &[u8]) -> Vec<(String, String)> {
    let reg = Registry::builtin().unwrap();
    sign(
        reg.get(provider).unwrap(),
        &Secret::new(SECRET),
        &SignInput {
            body,
            timestamp: now_secs(),
            id,
            event_type: Some(event),
            method: "POST",
            path: "/",
            url: None,
        },
    )
    .unwrap()
    .headers
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
}

async fn readme_examples(backend: Backend) {
    let examples = examples();
    assert_eq!(examples.len(), 4, "README shows four worked programs");
    let h = StoreHandle::new(backend);
    let mut ups = Vec::new();
    let mut text = format!("{}\n{FAST}\n", h.toml());
    for (i, ex) in examples.iter().enumerate() {
        let up = Upstream::ok().await;
        // The route as README writes it, delivering to this test's upstream.
        let route: String = ex
            .route
            .lines()
            .map(|l| match l.starts_with("destination = ") {
                true => format!("destination = \"{}\"", up.url),
                false => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        text.push_str(&format!(
            "[[sources]]\nname = \"ex{i}\"\nprovider = \"{}\"\nsecret = \"{SECRET}\"\n\
             destination_secret = \"{DEST_SECRET}\"\n[[sources.routes]]\n{route}\n\n",
            ex.provider
        ));
        ups.push(up);
    }
    let cfg = config::from_toml_str(&text, &|_| None).expect("the README's routes load");
    let gw = Gateway::start(cfg).await;
    let c = http();
    for (i, ex) in examples.iter().enumerate() {
        let id = format!("00000000-0000-4000-8000-00000000000{i}");
        let headers = provider_headers(&ex.provider, &ex.event, &id, ex.input.as_bytes());
        let (st, json) = post_raw(
            &c,
            &gw.ingest,
            &format!("ex{i}"),
            ex.input.as_bytes(),
            &headers,
        )
        .await;
        assert_eq!(st, 200, "example {i} ({}): {json}", ex.provider);
    }
    let key = decode_destination_secret(DEST_SECRET);
    for (i, (ex, up)) in examples.iter().zip(&ups).enumerate() {
        up.wait_for(Duration::from_secs(10), &format!("example {i}"), |r| {
            !r.is_empty()
        })
        .await;
        let r = &up.received()[0];
        assert_eq!(
            String::from_utf8_lossy(&r.body),
            ex.received,
            "example {i}: the body the README shows"
        );
        assert_eq!(
            r.header("content-type").as_deref(),
            Some(ex.content_type.as_str()),
            "example {i}"
        );
        for (name, value) in &ex.headers {
            assert_eq!(
                r.header(name).as_deref(),
                Some(value.as_str()),
                "example {i}: {name}"
            );
        }
        assert_eq!(r.header("hookgate-transformed").as_deref(), Some("true"));
        let wid = r.header("webhook-id").unwrap();
        let ts: i64 = r.header("webhook-timestamp").unwrap().parse().unwrap();
        assert_eq!(
            r.header("webhook-signature").unwrap(),
            sign_delivery(&key, &wid, ts, &r.body),
            "example {i}: signed over what was sent"
        );
    }
    gw.stop().await;
}
for_each_store!(
    the_readme_transform_examples_deliver_exactly_what_they_show,
    super::readme_examples
);
