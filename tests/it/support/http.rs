//! HTTP from the test's side: a client set up as the binary sets up its own, and
//! requests to the ingest and admin listeners.

use super::{Gateway, STRIPE_SECRET, event_body, now_secs, provider_for, secret_for, sign_headers};

/// An HTTP client for tests (the TLS provider installed first, as the binary does).
pub fn http() -> reqwest::Client {
    http_builder().build().expect("http client")
}

pub fn http_builder() -> reqwest::ClientBuilder {
    hookgate::tls::install_provider();
    reqwest::Client::builder()
}

/// POST a signed event to `source`; returns (status, json body).
pub async fn post_signed(
    client: &reqwest::Client,
    gw: &Gateway,
    source: &str,
    body: &[u8],
    id: &str,
) -> (u16, serde_json::Value) {
    let headers = sign_headers(
        provider_for(source),
        secret_for(source),
        body,
        now_secs(),
        id,
    );
    post_raw(client, &gw.ingest, source, body, &headers).await
}

pub async fn post_raw(
    client: &reqwest::Client,
    base: &str,
    source: &str,
    body: &[u8],
    headers: &[(String, String)],
) -> (u16, serde_json::Value) {
    let mut req = client
        .post(format!("{base}/ingest/{source}"))
        .header("content-type", "application/json")
        .body(body.to_vec());
    for (n, v) in headers {
        req = req.header(n.as_str(), v.as_str());
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, json)
}

/// POST `body` to `source` at the ingest listener `base`, signed as Stripe signs it
/// with [`STRIPE_SECRET`] (the secret of `stripe` and of every source
/// `forward::source` makes).
pub async fn post_stripe_signed(
    client: &reqwest::Client,
    base: &str,
    source: &str,
    body: &[u8],
) -> (u16, serde_json::Value) {
    let headers = sign_headers("stripe", STRIPE_SECRET, body, now_secs(), "x");
    post_raw(client, base, source, body, &headers).await
}

/// POST the Stripe event `event` (its id) to the `stripe` source at `base`.
pub async fn post_stripe(
    client: &reqwest::Client,
    base: &str,
    event: &str,
) -> (u16, serde_json::Value) {
    post_stripe_signed(client, base, "stripe", &event_body("stripe", event)).await
}

/// GET `url` and return its body as text.
pub async fn get_text(client: &reqwest::Client, url: &str) -> String {
    client
        .get(url)
        .send()
        .await
        .expect("request")
        .text()
        .await
        .expect("body")
}

/// GET `url` and return its body as JSON.
pub async fn get_json(client: &reqwest::Client, url: &str) -> serde_json::Value {
    serde_json::from_str(&get_text(client, url).await).expect("a JSON body")
}

/// Send the headers of a request to `source` at `base` signed as Stripe signs a
/// 200,000-byte body, and none of the body: what the gateway answers within 5 s
/// (nothing, when it waits for the body). A refusal that comes from the headers
/// alone arrives anyway.
pub async fn head_only(base: &str, source: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let addr = base.trim_start_matches("http://");
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let body = vec![b' '; 200_000];
    let headers = sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), "x");
    let mut head = format!(
        "POST /ingest/{source} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes()).await.expect("write");
    let mut answer = vec![0u8; 4096];
    match tokio::time::timeout(std::time::Duration::from_secs(5), conn.read(&mut answer)).await {
        Ok(Ok(n)) => String::from_utf8_lossy(&answer[..n]).into_owned(),
        _ => String::new(),
    }
}
