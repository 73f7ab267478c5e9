//! The private RabbitMQ nodes the AMQP destination's suites run on: two start at
//! once, each on its own ports with its own epmd, `rabbitmqctl` reaches each as its
//! own node, a SIGKILLed one comes back on the same port with its data, and all of
//! it is gone when the test ends.

use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use crate::support::*;

/// The processes whose working directory is `dir` (or was, before it was removed):
/// a node's broker, its epmd and their helpers all run there.
fn processes_in(dir: &Path) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|p| {
            let pid: u32 = p.file_name().to_str()?.parse().ok()?;
            let cwd = std::fs::read_link(p.path().join("cwd")).ok()?;
            cwd.starts_with(dir).then_some(pid)
        })
        .collect()
}

/// The broker's OS pid as `rabbitmqctl status` reports it.
fn status_pid(node: &RabbitMq) -> Option<u32> {
    let (ok, out) = node.ctl(&["-q", "status"]);
    assert!(ok, "rabbitmqctl status: {out}");
    out.lines()
        .find_map(|l| l.trim().strip_prefix("OS PID:"))
        .and_then(|p| p.trim().parse().ok())
}

#[test]
fn private_rabbitmq_nodes_start_side_by_side_and_survive_a_sigkill() {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(RabbitMq::start);
        let b = s.spawn(RabbitMq::start);
        (
            a.join().expect("start node a"),
            b.join().expect("start node b"),
        )
    });
    let mut a = a;
    assert_ne!(a.port(), b.port());
    assert_ne!(a.port(), 5672, "never the machine's broker");
    assert_eq!(a.url(), format!("amqp://127.0.0.1:{}/%2F", a.port()));
    for node in [&a, &b] {
        TcpStream::connect(("127.0.0.1", node.port())).expect("the AMQP port answers");
        // rabbitmqctl reaches this node, and the child is the broker itself.
        assert_eq!(status_pid(node), node.pid(), "{}", node.node());
        assert_eq!(node.queues(), Vec::new(), "a fresh node has no queues");
    }

    // Something durable (a user is kept in mnesia, as durable queues are).
    a.add_user("hg-second", "s3cret");
    let b_pid = b.pid();
    let old_pid = a.pid().expect("a runs");
    a.kill();
    assert_eq!(a.pid(), None);
    assert!(
        TcpStream::connect(("127.0.0.1", a.port())).is_err(),
        "the killed broker's port is closed"
    );
    assert!(!a.ctl(&["-q", "status"]).0, "status fails while it is down");
    // The other node did not notice.
    assert_eq!(status_pid(&b), b_pid);

    let port = a.port();
    a.restart();
    assert_eq!(a.port(), port, "the same port after a restart");
    assert_ne!(a.pid(), Some(old_pid));
    TcpStream::connect(("127.0.0.1", a.port())).expect("the AMQP port answers again");
    assert_eq!(status_pid(&a), a.pid());
    let (ok, users) = a.ctl(&["-q", "--no-table-headers", "list_users"]);
    assert!(ok, "{users}");
    assert!(
        users.lines().any(|l| l.starts_with("hg-second\t")),
        "the user survived the SIGKILL: {users}"
    );

    let dirs = [a.dir().to_path_buf(), b.dir().to_path_buf()];
    let ports = [a.port(), b.port()];
    for dir in &dirs {
        // The broker and its epmd at least.
        assert!(processes_in(dir).len() >= 2, "{}", dir.display());
    }
    drop(a);
    drop(b);
    for (dir, port) in dirs.iter().zip(ports) {
        assert!(!dir.exists(), "{} is removed", dir.display());
        assert!(
            TcpStream::connect(("127.0.0.1", port)).is_err(),
            "port {port} is closed"
        );
        // The broker's helpers (erl_child_setup, the disk monitor) end once it has.
        wait_until_blocking(
            "every process of the node to end",
            Duration::from_secs(10),
            || processes_in(dir).is_empty(),
        );
    }
}
