//! The console's view of a large body costs what it shows: four concurrent views of
//! an entry whose 1 MiB JSON body is nested 120 deep (indented whole, ~120 MB of
//! text) grow the gateway's peak memory by at most 32 MiB. The gateway runs as a
//! child process, so its peak RSS (`VmHWM`) is its own.

use std::time::Duration;

use crate::admin::TOKEN;
use crate::support::*;

/// A kB figure of `/proc/<pid>/status` (`VmHWM`, `VmRSS`), in bytes.
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in {status}"));
    let kb: u64 = line
        .trim_start_matches(field)
        .trim_start_matches(':')
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .expect("a kB figure");
    kb * 1024
}

/// A JSON array nested `depth` deep holding as many `1`s as fit in `size` bytes: each
/// `1` is a line of its own once indented, at the deepest indentation.
fn deep_body(depth: usize, size: usize) -> Vec<u8> {
    let ones = (size - 2 * depth - 1) / 2;
    let mut body = "[".repeat(depth - 1);
    body.push('[');
    body.push_str(&"1,".repeat(ones));
    body.push('1');
    body.push_str(&"]".repeat(depth));
    assert!(body.len() <= size);
    body.into_bytes()
}

/// Log in through the console's login form; the `name=value` of the session cookie.
async fn log_in(client: &reqwest::Client, admin: &str) -> String {
    let page = get_text(client, &format!("{admin}/console/login")).await;
    let field = r#"name="csrf" value=""#;
    let at = page.find(field).expect("a form token") + field.len();
    let csrf = &page[at..at + page[at..].find('"').expect("its end")];
    let resp = client
        .post(format!("{admin}/console/login"))
        .form(&[("csrf", csrf), ("token", TOKEN)])
        .send()
        .await
        .expect("log in");
    assert_eq!(resp.status(), 303);
    let set = resp.headers()["set-cookie"].to_str().expect("a cookie");
    set.split(';').next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_views_of_a_deep_json_body_cost_at_most_32_mib() {
    let h = StoreHandle::new(Backend::Embedded);
    let dir = tempfile::tempdir().expect("a temp dir");
    let cfg = config_file(&h, dir.path());
    let gw = tokio::task::spawn_blocking({
        let log = dir.path().join("gateway.log");
        move || ChildGateway::spawn(&cfg, &[("HOOKGATE_ADMIN_TOKEN", TOKEN)], &log)
    })
    .await
    .expect("the gateway started");
    let client = http_builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(120))
        .build()
        .expect("a client");
    let body = deep_body(120, 1024 * 1024 - 64);
    let headers = sign_headers("hmac", HMAC_SECRET, &body, now_secs(), "deep");
    let (st, v) = post_raw(&client, &gw.ingest, "hmac", &body, &headers).await;
    assert_eq!(st, 200, "{v}");
    let id = v["id"].as_str().expect("an entry id").to_string();
    let cookie = log_in(&client, &gw.admin).await;
    let url = format!("{}/console/entries/{id}", gw.admin);
    // One view first, so what every view shares (pages of the store, the runtime's
    // buffers) is in place before the peak is measured.
    let page = client
        .get(&url)
        .header("cookie", &cookie)
        .send()
        .await
        .expect("the entry page");
    assert_eq!(page.status(), 200);
    let page = page.text().await.expect("its text");
    assert!(page.contains("JSON, "), "the body reads as JSON");
    assert!(page.contains("The body is long"), "the view is cut");

    let pid = gw.child.id();
    // Start the peak afresh at the current RSS (clear_refs 5), so the setup's own
    // peak does not hide the views'.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset the peak RSS");
    let before = status_bytes(pid, "VmRSS");
    let views = (0..4).map(|_| {
        let (client, url, cookie) = (client.clone(), url.clone(), cookie.clone());
        async move {
            let resp = client
                .get(&url)
                .header("cookie", &cookie)
                .send()
                .await
                .expect("the entry page");
            assert_eq!(resp.status(), 200);
            resp.bytes().await.expect("its body").len()
        }
    });
    let sizes = futures_util::future::join_all(views).await;
    assert!(sizes.iter().all(|&n| n > 0), "{sizes:?}");
    let grown = status_bytes(pid, "VmHWM").saturating_sub(before);
    assert!(
        grown <= 32 * 1024 * 1024,
        "four views grew the peak RSS by {} MiB",
        grown / (1024 * 1024)
    );
}
