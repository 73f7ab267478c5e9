//! What only the PostgreSQL store has, beyond the contract every store passes:
//! wake-ups across gateways (`LISTEN/NOTIFY`), its versioned schema, and TLS to the
//! server.

use std::time::Duration;

use hookgate::config;
use hookgate::store::{self, Accepted, Store, StoreError};

use crate::forward::source;
use crate::support::*;
use crate::upstream::Upstream;

async fn open_store(toml: &str) -> Result<std::sync::Arc<dyn Store>, StoreError> {
    let cfg = config::from_toml_str(toml, &|_| None).expect("store config");
    store::open(&cfg.store, &hookgate::clock::Clock::system()).await
}

/// The schema of `h`'s store on the shared server (its `prefix`).
fn schema_of(h: &StoreHandle) -> String {
    h.toml()
        .lines()
        .find_map(|l| {
            l.strip_prefix("prefix = \"")
                .map(|p| p.trim_end_matches('"').to_string())
        })
        .expect("a prefix")
}

/// A webhook stored by another process (here: a store opened beside the gateway)
/// reaches a gateway whose forwarder polls only every 30 s within a second: the
/// accept's notification wakes the route that has new work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accept_on_another_gateway_wakes_this_ones_forwarder() {
    let h = StoreHandle::new(Backend::Postgres);
    let up = Upstream::ok().await;
    let text = format!(
        "{}[forwarder]\npoll_interval = \"30s\"\n{}",
        h.toml(),
        source("stripe", &up.url, "")
    );
    let gw = Gateway::start(config::from_toml_str(&text, &|_| None).unwrap()).await;
    // A first webhook through the gateway itself: once it is delivered and nothing
    // more comes, the route's loop has claimed again, found nothing, and waits.
    let (st, _) = post_stripe(&http(), &gw.ingest, "evt_first").await;
    assert_eq!(st, 200);
    up.wait_for(Duration::from_secs(5), "the first delivery", |r| {
        r.len() == 1
    })
    .await;
    quiet_for(
        "the forwarder waits",
        Duration::from_millis(300),
        async || up.count() == 1,
    )
    .await;
    let other = h.open().await;
    let accepted = other
        .accept(crate::conformance::entry("stripe", "evt_woken"))
        .await
        .unwrap();
    assert!(matches!(accepted, Accepted::New(_)), "{accepted:?}");
    up.wait_for(
        Duration::from_secs(2),
        "the delivery, woken by the notification",
        |r| r.len() == 2,
    )
    .await;
    other.close().await;
    gw.stop().await;
}

/// Migrations are one-way: a schema a newer release migrated is refused at open,
/// saying so; the schema this release made opens again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_migrated_by_a_newer_release_is_refused() {
    let h = StoreHandle::new(Backend::Postgres);
    let store = h.open().await;
    store.close().await;
    let reopened = h.open().await;
    reopened.close().await;
    let schema = schema_of(&h);
    let (ok, out) = shared().psql_in(
        "hookgate",
        &format!("INSERT INTO {schema}.migrations (version) VALUES (99)"),
    );
    assert!(ok, "{out}");
    match open_store(&h.toml()).await {
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains("version 99") && text.contains("newer"),
                "{text}"
            );
        }
        Ok(_) => panic!("a schema newer than this release was opened"),
    }
}

/// A connection keeps the generic plan it made for a prepared statement when a table
/// was empty, until autovacuum first analyzes it (a minute later or more). The claim
/// is written so that this plan cannot turn into a walk of the whole table: prepared
/// and run six times on the empty schema as a connection of the store runs it, then
/// explained once 20,000 deliveries are due, it leases the chosen rows by their key,
/// with no join whose filter compares every row with every chosen one (which took
/// 1.2 s a claim at 100,000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_plan_made_on_an_empty_table_still_leases_by_key() {
    let h = StoreHandle::new(Backend::Postgres);
    let store = h.open().await;
    store.close().await;
    let schema = schema_of(&h);
    let claim = hookgate::store::POSTGRES_CLAIM_STATEMENT;
    let run = "EXECUTE claim('stripe', 'default', 9000000000000, 64, 9000000000001, 'g');";
    let (ok, out) = shared().psql_in(
        "hookgate",
        &format!(
            "SET search_path = {schema}; SET enable_seqscan = off; SET jit = off;
             PREPARE claim(text, text, int8, int8, int8, text) AS {claim};
             {run} {run} {run} {run} {run} {run}
             INSERT INTO deliveries (entry_id, route, position, source, status,
                 next_attempt_at, budget_start, updated_at)
             SELECT lpad(i::text, 12, '0'), 'default', 0, 'stripe', 'pending', i, 0, 0
             FROM generate_series(1, 20000) i;
             EXPLAIN EXECUTE claim('stripe', 'default', 9000000000000, 64, 9000000000001, 'g');"
        ),
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("Index Cond: ((entry_id = ANY") && !out.contains("Join Filter"),
        "the claim's cached plan after the table grew:\n{out}"
    );
}

/// TLS to the server: with `sslmode=verify-full` and the server's CA named by
/// `sslrootcert` (a CA of its own, which the system's store does not know) the
/// store's connections are encrypted (the server says so of each); without it, the
/// certificate is refused; and with `sslmode=require`, whose certificate nothing
/// checks, a server that asks for no password is refused too: nothing would have
/// shown it to be the right one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_verified_against_sslrootcert_and_an_unknown_certificate_is_refused() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, crt, key) = crate::postgres_tls::certificates(certs.path());
    hand_to_server_user(certs.path(), &[&crt, &key]);
    let pg = PostgresServer::start_in(
        None,
        &[
            "ssl=on",
            &format!("ssl_cert_file={}", crt.display()),
            &format!("ssl_key_file={}", key.display()),
        ],
    );
    let toml = |params: &str| {
        format!(
            "[store]\nkind = \"postgres\"\nurl = \"{}?{params}\"\nprefix = \"tls\"\ntimeout = \"5s\"\n",
            pg.url()
        )
    };
    let root = format!("sslmode=verify-full&sslrootcert={}", ca.display());
    let store = open_store(&toml(&root)).await.expect("opens over TLS");
    store.ping().await.unwrap();
    let (ok, out) = pg.psql(
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
         WHERE a.application_name = 'hookgate' AND s.ssl",
    );
    assert!(ok, "{out}");
    assert!(
        out.trim().parse::<u32>().unwrap() >= 1,
        "no encrypted connection: {out}"
    );
    let (ok, out) = pg.psql(
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
         WHERE a.application_name = 'hookgate' AND NOT s.ssl",
    );
    assert!(ok && out.trim() == "0", "an unencrypted connection: {out}");
    store.close().await;
    assert!(
        open_store(&toml("sslmode=verify-full")).await.is_err(),
        "a certificate of an unknown CA was trusted"
    );
    assert!(
        open_store(&toml("sslmode=require")).await.is_err(),
        "an unverified server that asked for no password was trusted"
    );
}

/// Give `files` (and their directory) to the server's user when the suite runs as
/// root: PostgreSQL reads its key only when it owns it, mode 0600.
fn hand_to_server_user(dir: &std::path::Path, files: &[&std::path::Path]) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for f in files {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).unwrap();
        // SAFETY: geteuid only reads the process's effective user id.
        if unsafe { libc::geteuid() } == 0 {
            let ok = std::process::Command::new("chown")
                .arg("postgres:")
                .arg(f)
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown {}", f.display());
        }
    }
}
