//! A local Redis Cluster of three masters, for the tests that run the Redis store
//! against a cluster rather than a single server.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::redis::redis_ping;
use super::{free_port, wait_until_blocking};

/// A local Redis Cluster of three masters on free ports ([`free_port`]) (no replicas).
pub struct RedisCluster {
    pub nodes: Vec<RedisClusterNode>,
}

pub struct RedisClusterNode {
    pub port: u16,
    _dir: tempfile::TempDir,
    child: Child,
}

impl Drop for RedisClusterNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            let port = free_port();
            let dir = tempfile::tempdir().expect("tempdir");
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(dir.path())
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "always",
                    "--save",
                    "",
                    "--protected-mode",
                    "no",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server (apt-get install redis-server)");
            nodes.push(RedisClusterNode {
                port,
                _dir: dir,
                child,
            });
        }
        for n in &nodes {
            wait_until_blocking(
                &format!("cluster node {} to answer PING", n.port),
                Duration::from_secs(10),
                || redis_ping(n.port),
            );
        }
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        // Wait until every node agrees the cluster is up.
        wait_until_blocking(
            "every cluster node to report cluster_state:ok",
            Duration::from_secs(20),
            || {
                nodes.iter().all(|n| {
                    let info = Command::new("redis-cli")
                        .args(["-p", &n.port.to_string(), "cluster", "info"])
                        .output()
                        .expect("redis-cli");
                    String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok")
                })
            },
        );
        RedisCluster { nodes }
    }

    /// `store.url` for the cluster: every node as a seed.
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }
}
