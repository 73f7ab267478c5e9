//! The command line: check-config (layering, errors naming keys, exit codes) and
//! sign (its output is accepted by a running gateway).

use std::process::Command;

use crate::support::*;

pub fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    for var in [
        "HOOKGATE_CONFIG",
        "HOOKGATE_ADMIN_TOKEN",
        "HOOKGATE_STORE__KIND",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What `hookgate sign` prints: the headers (up to the blank line after them), and
/// the lines after that.
pub fn sign_output(out: &str) -> (Vec<(String, String)>, std::str::Lines<'_>) {
    let mut lines = out.lines();
    let mut headers = Vec::new();
    for line in lines.by_ref() {
        if line.is_empty() {
            break;
        }
        let (n, v) = line.split_once(": ").expect("a header line");
        headers.push((n.to_string(), v.to_string()));
    }
    (headers, lines)
}

#[test]
fn check_config_layers_file_and_environment_without_printing_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[admin]\nlisten = \"0.0.0.0:8081\"\n[[sources]]\nname = \"gh\"\nprovider = \"github\"\nsecret_env = \"GH_SECRET\"\nsecrets = [\"hunter2-old\"]\ndestination = \"http://app:3000/gh\"\n\
         [sources.expect]\nlearn = true\n[sources.reconcile]\ntoken_env = \"GH_TOKEN\"\nhook = \"orgs/acme/hooks/9\"\ninterval = \"10m\"\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    // HOOKGATE_CONFIG names the file; HOOKGATE_ADMIN_TOKEN is a value, not a key.
    let (code, out, err) = run(
        &["check-config"],
        &[
            ("HOOKGATE_CONFIG", p),
            ("HOOKGATE_ADMIN_TOKEN", "tok-sekrit"),
            ("GH_SECRET", "hunter2-new"),
            ("GH_TOKEN", "ghp_sekrit_token"),
            ("HOOKGATE_STORE__KIND", "redis"),
            ("HOOKGATE_SERVER__MAX_BODY_BYTES", "2048"),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("store: redis"), "{out}");
    assert!(out.contains("token set"), "{out}");
    assert!(out.contains("gh") && out.contains("secrets=2"), "{out}");
    assert!(out.contains("expects what it usually receives"), "{out}");
    assert!(
        out.contains("reconciled with github at https://api.github.com every 10m"),
        "{out}"
    );
    for s in [
        "hunter2-old",
        "hunter2-new",
        "tok-sekrit",
        "ghp_sekrit_token",
    ] {
        assert!(!out.contains(s) && !err.contains(s), "printed a secret");
    }
    // Without the token, a public admin bind is refused, naming the key.
    let (code, _, err) = run(
        &["check-config", "--config", p],
        &[("GH_SECRET", "x"), ("GH_TOKEN", "x")],
    );
    assert_eq!(code, 2);
    assert!(err.contains("admin.listen"), "{err}");
}

#[test]
fn config_errors_name_the_key_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[server]\nlisten = \"nope\"\n", "server.listen"),
        ("[server]\nlistn = \"x\"\n", "listn"),
        ("[store]\nkind = \"mongo\"\n", "store.kind"),
        ("[retention]\ndead = \"soon\"\n", "retention.dead"),
        (
            "[[sources]]\nname = \"a\"\nprovider = \"nope\"\nsecret = \"x\"\ndestination = \"http://h/\"\n",
            "sources[0].provider",
        ),
        (
            "[[sources]]\nname = \"a\"\nprovider = \"github\"\nsecret_env = \"UNSET_VAR_XYZ\"\ndestination = \"http://h/\"\n",
            "sources[0].secret_env",
        ),
        (
            "[[sources]]\nname = \"a\"\nprovider = \"standard-webhooks\"\nsecret = \"whsec_!!!\"\ndestination = \"http://h/\"\n",
            "sources[0].secret",
        ),
        (
            "[[sources]]\nname = \"a\"\nprovider = \"hmac\"\nsecret = \"x\"\ndestination = \"http://h/\"\n[sources.provider_options.signature]\nencoding = \"rot13\"\n",
            "signature.encoding",
        ),
        (
            "[[sources]]\nname = \"a\"\nprovider = \"slack\"\nsecret = \"x\"\ndestination = \"http://h/\"\n[sources.order]\nby = \"provider\"\n",
            "sources[0].routes[0].order.by",
        ),
    ];
    for (i, (text, key)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("c{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let (code, out, err) = run(&["check-config", "--config", path.to_str().unwrap()], &[]);
        assert_eq!(code, 2, "{text}: {out}{err}");
        assert!(
            err.contains(key),
            "{text}: error does not name {key}: {err}"
        );
    }
    // `serve` refuses the same configs before binding anything.
    let path = dir.path().join("c0.toml");
    let (code, _, err) = run(&["serve", "--config", path.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(&["check-config", "--config", "/no/such/file.toml"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("does not exist"), "{err}");
}

#[test]
fn example_configs_are_valid() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for f in ["examples/quickstart.toml", "deploy/hookgate.example.toml"] {
        let (code, out, err) = run(
            &["check-config", "--config", root.join(f).to_str().unwrap()],
            &[
                ("HOOKGATE_ADMIN_TOKEN", "t"),
                ("STRIPE_WEBHOOK_SECRET", "whsec_x"),
                ("GITHUB_WEBHOOK_SECRET", "x"),
                ("SLACK_SIGNING_SECRET", "x"),
                ("SHOPIFY_CLIENT_SECRET", "x"),
                (
                    "CLERK_WEBHOOK_SECRET",
                    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                ),
                ("ACME_WEBHOOK_SECRET", "x"),
                ("TWILIO_AUTH_TOKEN", "x"),
            ],
        );
        assert_eq!(code, 0, "{f}: {out}{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_output_is_accepted_by_the_gateway() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(config(&h, "")).await;
    let c = crate::support::http();
    for (source, provider, secret) in [
        ("stripe", "stripe", STRIPE_SECRET),
        ("standard-webhooks", "standard-webhooks", SW_SECRET),
        ("slack", "slack", SLACK_SECRET),
    ] {
        let body = event_body(source, &format!("evt_cli_{source}"));
        let url = format!("{}/ingest/{source}", gw.ingest);
        let (code, out, err) = run(
            &[
                "sign",
                "--provider",
                provider,
                "--secret-env",
                "S",
                "--body",
                std::str::from_utf8(&body).unwrap(),
                "--url",
                &url,
            ],
            &[("S", secret)],
        );
        assert_eq!(code, 0, "{err}");
        let (headers, mut lines) = sign_output(&out);
        let curl = lines.next().unwrap();
        assert!(curl.starts_with("curl ") && curl.contains(&url), "{curl}");
        let (st, json) = post_raw(&c, &gw.ingest, source, &body, &headers).await;
        assert_eq!(st, 200, "{source}: {json}");
        assert_eq!(json["duplicate"], false);
    }
    // The curl line itself works too.
    let body = r#"{"id":"evt_curl","type":"x"}"#;
    let (_, out, _) = run(
        &[
            "sign",
            "--provider",
            "stripe",
            "--secret",
            STRIPE_SECRET,
            "--body",
            body,
            "--url",
            &format!("{}/ingest/stripe", gw.ingest),
        ],
        &[],
    );
    let curl = out.lines().last().unwrap();
    let got = Command::new("sh").arg("-c").arg(curl).output().unwrap();
    let answer = String::from_utf8_lossy(&got.stdout);
    assert!(answer.contains("\"duplicate\":false"), "{answer}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_drives_a_running_gateway() {
    use crate::admin::{TOKEN, admin_config};
    use crate::forward::{FAST_RETRY, ingest_many, source};
    use crate::upstream::{Reply, Upstream};
    let h = StoreHandle::new(Backend::Embedded);
    let up = Upstream::scripted(|_, _| Reply::Status(404)).await;
    let gw = Gateway::start(admin_config(&h, "", &source("cli", &up.url, FAST_RETRY))).await;
    let ids = ingest_many(&gw.ingest, "cli", "evt_cli", 2).await;
    let mut ids = ids.into_values();
    let (a, b) = (ids.next().unwrap(), ids.next().unwrap());
    let store = h.open().await;
    wait_until(
        "both entries dead",
        std::time::Duration::from_secs(10),
        async || {
            store
                .count_status("cli", hookgate::store::Status::Dead)
                .await
                .unwrap()
                >= 2
        },
    )
    .await;
    let env = [
        ("HOOKGATE_ADMIN_URL", gw.admin.as_str()),
        ("HOOKGATE_ADMIN_TOKEN", TOKEN),
    ];
    let cli = |args: Vec<&str>| {
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        async move {
            tokio::task::spawn_blocking(move || {
                let a: Vec<&str> = args.iter().map(String::as_str).collect();
                let e: Vec<(&str, &str)> =
                    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                run(&a, &e)
            })
            .await
            .unwrap()
        }
    };

    let (code, out, err) = cli(vec!["entries", "list", "--status", "dead"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("ID"), "a table: {out}");
    assert!(
        out.contains(&a) && out.contains(&b) && out.contains("HTTP 404"),
        "{out}"
    );

    let (code, out, _) = cli(vec!["dlq", "list", "--json"]).await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["entries"].as_array().unwrap().len(), 2);

    let (code, out, _) = cli(vec!["entries", "show", &a]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("status:       dead") && out.contains("[redacted]"),
        "{out}"
    );
    // The deliveries per route, and the attempts with their route.
    assert!(out.contains("deliveries:\nROUTE"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("default") && l.contains("dead") && l.contains("HTTP 404")),
        "{out}"
    );
    let (code, out, _) = cli(vec![
        "dlq", "list", "--source", "cli", "--route", "default", "--json",
    ])
    .await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["entries"].as_array().unwrap().len(), 2);
    // Without --source: that route of every source.
    let (code, out, _) = cli(vec!["dlq", "list", "--route", "default", "--json"]).await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["entries"].as_array().unwrap().len(), 2);
    let (code, out, _) = cli(vec!["dlq", "list", "--route", "nope", "--json"]).await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["entries"].as_array().unwrap().is_empty());
    // The dead letters by failure kind: one group, both entries in it.
    let (code, out, err) = cli(vec!["dlq", "groups", "--source", "cli"]).await;
    assert_eq!(code, 0, "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("cli"))
        .unwrap_or_else(|| panic!("a group row: {out}"));
    assert!(
        row.contains("default") && row.contains("HTTP 404") && row.contains(" 2 "),
        "{out}"
    );
    // A name that is no group's is refused, and says what a group's name is.
    let (code, _, err) = cli(vec![
        "dlq",
        "replay",
        "--source",
        "cli",
        "--route",
        "default",
        "--failure",
        "HTTP x",
    ])
    .await;
    assert_eq!(code, 1);
    assert!(
        err.contains("400") && err.contains("names no dead-letter group"),
        "{err}"
    );
    // --failure needs the route it is a group of.
    let (code, _, _) = cli(vec![
        "dlq",
        "replay",
        "--source",
        "cli",
        "--failure",
        "HTTP 404",
    ])
    .await;
    assert_eq!(code, 2);
    let (code, _, err) = cli(vec!["entries", "replay", &a, "--route", "nope"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("404") && err.contains("nope"), "{err}");

    let (code, out, err) = cli(vec!["entries", "discard", &b, "--note", "bad payload"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("discarded"));
    let (code, _, err) = cli(vec!["entries", "discard", &a]).await;
    assert_eq!(code, 2, "clap refuses a discard without --note: {err}");

    let (code, out, _) = cli(vec!["sources", "pause", "cli"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("paused"));
    // A pause made through this gateway holds its forwarder once the call answers, so
    // the replay below stays pending instead of being delivered and dying again.
    let (code, out, err) = cli(vec!["entries", "replay", &a]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replay queued"), "{out}");
    // Replaying what is already pending is refused, with the reason.
    let (code, _, err) = cli(vec!["entries", "replay", &a]).await;
    assert_eq!(code, 1);
    assert!(err.contains("409") && err.contains("pending"), "{err}");

    let (code, out, _) = cli(vec!["stats"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("cli") && out.contains("paused"), "{out}");
    let (code, _, _) = cli(vec!["sources", "resume", "cli"]).await;
    assert_eq!(code, 0);
    // One route paused, then resumed: `sources list` shows each route's state.
    let (code, out, err) = cli(vec!["sources", "pause", "cli", "--route", "default"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cli route default: delivery paused"), "{out}");
    let (code, out, _) = cli(vec!["sources", "list"]).await;
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.starts_with("cli") && l.contains("default") && l.contains("paused")),
        "{out}"
    );
    let (code, out, _) = cli(vec!["sources", "resume", "cli", "--route", "default"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("delivery resumed"), "{out}");

    // Clear errors: a wrong token, an unreachable gateway.
    let (code, _, err) = run(
        &["stats"],
        &[
            ("HOOKGATE_ADMIN_URL", gw.admin.as_str()),
            ("HOOKGATE_ADMIN_TOKEN", "wrong"),
        ],
    );
    assert_eq!(code, 1);
    assert!(err.contains("refused the token"), "{err}");
    let (code, _, err) = run(&["stats", "--admin-url", "http://127.0.0.1:1"], &[]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot reach the admin API"), "{err}");
    gw.stop().await;
}

/// `hookgate sources handshake` arms and prints where the arming's token goes: the
/// whole target URL for a source with a `public_url`, the parameter to append for
/// one without; the handshake that carries it is taken, and `sources secrets` lists
/// what it established (never the secret).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_arms_a_handshake_and_prints_its_target_url() {
    use crate::admin::{TOKEN, admin_config};
    let h = StoreHandle::new(Backend::Embedded);
    let sources = "[[sources]]\nname = \"asana\"\nprovider = \"asana\"\n\
                   public_url = \"https://hooks.example.com/ingest/asana\"\n\
                   destination = \"http://127.0.0.1:9/\"\n\
                   [[sources]]\nname = \"bare\"\nprovider = \"asana\"\n\
                   destination = \"http://127.0.0.1:9/\"\n";
    let gw = Gateway::start(admin_config(&h, "", sources)).await;
    let env = [
        ("HOOKGATE_ADMIN_URL", gw.admin.clone()),
        ("HOOKGATE_ADMIN_TOKEN", TOKEN.to_string()),
    ];
    let cli = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let env = env.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let a: Vec<&str> = args.iter().map(String::as_str).collect();
                let e: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
                run(&a, &e)
            })
            .await
            .unwrap()
        }
    };
    let param = "hookgate_handshake=";

    let (code, out, err) = cli(&["sources", "handshake", "asana", "--within", "2m"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("asana: handshake armed until"), "{out}");
    let prefix = format!("https://hooks.example.com/ingest/asana?{param}");
    let url = out
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no target URL: {out}"));
    let token = &url[prefix.len()..];
    assert_eq!(token.len(), 43, "{out}");
    // The handshake at that URL is taken.
    let secret = "b537207f20cbfa02357cf448134da559e8bd39d61597dcd5631b8012eae53e81";
    let resp = http()
        .post(format!("{}/ingest/asana?{param}{token}", gw.ingest))
        .header("x-hook-secret", secret)
        .body("")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (code, out, _) = cli(&["sources", "secrets", "asana"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("asana: handshake not armed"), "{out}");
    assert!(out.contains(&hookgate::store::secret_id(secret)), "{out}");
    assert!(!out.contains(secret) && !out.contains(token), "{out}");

    // No public_url: the parameter to append, with the token.
    let (code, out, err) = cli(&["sources", "handshake", "bare"]).await;
    assert_eq!(code, 0, "{err}");
    let at = out.find(&format!("?{param}")).expect(&out) + 1 + param.len();
    let bare: String = out[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    assert_eq!(bare.len(), 43, "{out}");
    // --json: the answer as the API gave it.
    let (code, out, _) = cli(&["sources", "handshake", "bare", "--json"]).await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["target_url"], serde_json::Value::Null, "{v}");
    assert_ne!(
        v["token"].as_str(),
        Some(bare.as_str()),
        "arming again: a new token"
    );
    gw.stop().await;
}

/// Without an admin token, the admin listener refuses browser requests; the CLI is
/// not one: it sends a loopback Host, no Origin, and JSON bodies as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_drives_a_gateway_without_an_admin_token() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(config(&h, "")).await;
    // A pending entry: its destination refuses connections.
    let (st, v) = post_stripe(&http(), &gw.ingest, "evt_cli_tokenless").await;
    assert_eq!(st, 200, "{v}");
    let id = v["id"].as_str().expect("entry id").to_string();
    let port = gw
        .admin
        .rsplit_once(':')
        .map(|(_, p)| p)
        .unwrap_or_default();
    let localhost = format!("http://localhost:{port}");
    let cli = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            run(&a, &[])
        })
    };
    let args = |url: &str, rest: &[&str]| -> Vec<String> {
        rest.iter()
            .map(|s| s.to_string())
            .chain(["--admin-url".to_string(), url.to_string()])
            .collect()
    };

    for url in [gw.admin.as_str(), localhost.as_str()] {
        let (code, out, err) = cli(args(url, &["entries", "list"])).await.unwrap();
        assert_eq!(code, 0, "{url}: {err}");
        assert!(out.contains(&id), "{url}: {out}");
    }
    let (code, out, err) = cli(args(&gw.admin, &["sources", "pause", "stripe"]))
        .await
        .unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("paused"), "{out}");
    // JSON bodies: a bulk replay and a discard.
    let (code, out, err) = cli(args(&gw.admin, &["dlq", "replay", "--source", "stripe"]))
        .await
        .unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("0 dead deliveries queued"), "{out}");
    let (code, out, err) = cli(args(
        &localhost,
        &["entries", "discard", &id, "--note", "spam"],
    ))
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("discarded"), "{out}");
    let (code, out, err) = cli(args(&gw.admin, &["entries", "show", &id, "--json"]))
        .await
        .unwrap();
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["status"], "discarded", "{v}");
    let (code, out, err) = cli(args(&gw.admin, &["sources", "list", "--json"]))
        .await
        .unwrap();
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let stripe = v
        .as_array()
        .and_then(|a| a.iter().find(|s| s["source"] == "stripe"))
        .unwrap_or_else(|| panic!("no stripe in {v}"));
    assert_eq!(stripe["paused"], true, "{v}");
    gw.stop().await;
}
