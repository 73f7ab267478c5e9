//! The gateway running inside the test process on ephemeral ports: the fastest way
//! to exercise it end to end, with its shutdown in the test's hands.

use std::time::Duration;

use hookgate::config::Config;
use tokio_util::sync::CancellationToken;

use super::{http, wait_until};

/// The gateway running in this process on ephemeral ports.
pub struct Gateway {
    pub ingest: String,
    pub admin: String,
    /// The probe listener's URL, when the configuration sets `admin.probe_listen`.
    pub probes: Option<String>,
    pub shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Gateway {
    pub async fn start(mut cfg: Config) -> Gateway {
        // Transforms run in `hookgate transform-worker`, not in this test binary.
        cfg.transform_worker = Some(env!("CARGO_BIN_EXE_hookgate").into());
        let ingest = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let probes = match cfg.admin.probe_listen {
            Some(_) => Some(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()),
            None => None,
        };
        let ingest_url = format!("http://{}", ingest.local_addr().unwrap());
        let admin_url = format!("http://{}", admin.local_addr().unwrap());
        let probes_url = probes
            .as_ref()
            .map(|p| format!("http://{}", p.local_addr().unwrap()));
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(hookgate::app::run(
            cfg,
            hookgate::app::Listeners {
                ingest,
                admin,
                probes,
            },
            shutdown.clone(),
        ));
        let gw = Gateway {
            ingest: ingest_url,
            admin: admin_url,
            probes: probes_url,
            shutdown,
            task: Some(task),
        };
        gw.wait_ready().await;
        gw
    }

    pub async fn wait_ready(&self) {
        let client = http();
        let url = format!("{}/readyz", self.admin);
        wait_until(
            "the gateway to be ready",
            Duration::from_secs(15),
            async || {
                client
                    .get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 200)
            },
        )
        .await;
    }

    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
