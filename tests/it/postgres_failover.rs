//! The promise past one machine: a private primary and its synchronous standby
//! (`pg_basebackup -R`, `synchronous_standby_names`), steady ingest from several
//! clients, every process of the primary SIGKILLed (its machine dies), the standby
//! promoted. The gateway, given both hosts with `target_session_attrs=read-write`,
//! follows the new primary by itself.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::forward::source;
use crate::support::*;
use crate::upstream::Upstream;

/// What one client heard: (when it was answered, status, entry id).
type Heard = Arc<Mutex<Vec<(Instant, u16, Option<String>)>>>;

/// Every webhook answered 2xx is delivered (0 lost); answers during the failover
/// are 503, never a 2xx for a webhook not stored; ingest answers 200 again within
/// 20 s of the primary's death, without a restart of the gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_and_its_promoted_synchronous_standby_lose_no_acknowledged_webhook() {
    let _alone = TIMED_ALONE.lock().await;
    let mut primary = PostgresServer::start();
    let standby = primary.start_standby();
    primary.require_sync_standby();
    let up = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[store]\nkind = \"postgres\"\n\
         url = \"postgres://hookgate@127.0.0.1:{},127.0.0.1:{}/hookgate?target_session_attrs=read-write\"\n\
         prefix = \"failover\"\ntimeout = \"1s\"\n\
         [forwarder]\npoll_interval = \"50ms\"\nmaintenance_interval = \"500ms\"\n{}",
        primary.port,
        standby.port,
        source(
            "stripe",
            &up.url,
            "[sources.retry]\nbase = \"100ms\"\ncap = \"1s\"\n"
        )
    );
    let cfg = write_config(dir.path(), &text);
    let log = dir.path().join("stderr.log");
    let mut gw = ChildGateway::spawn(&cfg, &[("RUST_LOG", "info")], &log);

    // Eight clients, each a webhook every 40 ms (200 a second in all), until told
    // to stop.
    let heard: Heard = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let c = http_builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut clients = Vec::new();
    for client in 0..8 {
        let (heard, stop, c, base) = (heard.clone(), stop.clone(), c.clone(), gw.ingest.clone());
        clients.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(40));
            for n in 0.. {
                tick.tick().await;
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                let (status, json) = post_stripe(&c, &base, &format!("evt_fo_{client}_{n}")).await;
                let id = json["id"].as_str().map(String::from);
                heard.lock().unwrap().push((Instant::now(), status, id));
            }
        }));
    }
    let acked_before = |heard: &Heard| heard.lock().unwrap().iter().filter(|h| h.1 == 200).count();
    wait_until(
        "400 webhooks acknowledged before the primary dies",
        Duration::from_secs(30),
        async || acked_before(&heard) >= 400,
    )
    .await;

    // The primary's machine dies; the standby is promoted.
    primary.kill_all();
    let died = Instant::now();
    standby.promote();
    let promoted = died.elapsed();

    // Ingest comes back by itself; let it run a while on the new primary.
    wait_until_ok(
        "200s again after the failover",
        Duration::from_secs(25),
        async || {
            let after = heard
                .lock()
                .unwrap()
                .iter()
                .filter(|h| h.0 > died && h.1 == 200)
                .count();
            match after >= 200 {
                true => Ok(()),
                false => Err(format!("{after} acknowledged since the primary died")),
            }
        },
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }

    let heard = heard.lock().unwrap().clone();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    for (_, status, _) in &heard {
        assert!(
            *status == 200 || *status == 503,
            "an answer {status} during the failover\n{}",
            log_text()
        );
    }
    let refused = heard.iter().filter(|h| h.1 == 503).count();
    let back = heard
        .iter()
        .filter(|h| h.0 > died && h.1 == 200)
        .map(|h| h.0 - died)
        .min()
        .expect("acknowledged after the failover");
    assert!(
        back <= Duration::from_secs(20),
        "200 again {back:?} after the primary died (promoted after {promoted:?})"
    );
    // Every acknowledged webhook reaches the app: none was lost with the primary.
    let acked: BTreeSet<String> = heard
        .iter()
        .filter(|h| h.1 == 200)
        .filter_map(|h| h.2.clone())
        .collect();
    up.wait_for(
        Duration::from_secs(60),
        "every acknowledged webhook delivered",
        |r| {
            let got: BTreeSet<String> = r.iter().filter_map(|x| x.header("webhook-id")).collect();
            acked.is_subset(&got)
        },
    )
    .await;
    eprintln!(
        "failover: {} acknowledged ({} after the death), {refused} answered 503, \
         promoted {promoted:?} after the death, 200 again after {back:?}; none lost",
        acked.len(),
        heard.iter().filter(|h| h.0 > died && h.1 == 200).count(),
    );
    gw.kill();
}
