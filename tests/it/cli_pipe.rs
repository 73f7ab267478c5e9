//! The command line on a closed stdout (`hookgate providers | head -5`): every
//! command that prints stops quietly with exit status 0, no panic, no backtrace.

use std::process::Command;

use crate::support::*;

/// Run the binary with stdout a pipe whose read end is already closed, so its first
/// write fails with `EPIPE`; its exit code and stderr.
fn run_into_closed_pipe(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .stdout(writer)
        .env_remove("HOOKGATE_CONFIG")
        .env_remove("HOOKGATE_ADMIN_TOKEN")
        .env("RUST_BACKTRACE", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run hookgate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_printing_command_stops_quietly_on_a_closed_stdout() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(config(&h, "")).await;
    let (st, v) = post_stripe(&http(), &gw.ingest, "evt_closed_pipe").await;
    assert_eq!(st, 200, "{v}");
    let id = v["id"].as_str().expect("entry id").to_string();
    let dir = tempfile::tempdir().expect("a temp dir");
    let cfg = config_file(&h, dir.path());
    let cfg = cfg.to_str().expect("a UTF-8 path");
    let admin = gw.admin.as_str();
    let commands: Vec<Vec<&str>> = vec![
        vec!["providers"],
        vec!["check-config", "--config", cfg],
        vec![
            "sign",
            "--provider",
            "stripe",
            "--secret",
            STRIPE_SECRET,
            "--body",
            "{\"id\":\"evt_1\"}",
        ],
        vec!["entries", "list", "--admin-url", admin],
        vec!["entries", "show", &id, "--admin-url", admin],
        vec!["entries", "show", &id, "--json", "--admin-url", admin],
        vec!["dlq", "list", "--admin-url", admin],
        vec!["sources", "list", "--admin-url", admin],
        vec!["stats", "--admin-url", admin],
    ];
    for args in commands {
        let (code, err) = tokio::task::spawn_blocking({
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            move || {
                let a: Vec<&str> = args.iter().map(String::as_str).collect();
                run_into_closed_pipe(&a, &[])
            }
        })
        .await
        .expect("the command ran");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
        assert_eq!(err, "", "{args:?} wrote to stderr");
        assert_eq!(code, 0, "{args:?}: {err}");
    }
    gw.stop().await;
}
