//! Connection pressure: connections that send nothing never keep a signed webhook
//! waiting. One client is held to its per-client cap (the rest of its connections
//! are closed at accept), and near `server.max_connections` the connection idle the
//! longest is shed for a new one, while a request in progress never is.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

use crate::support::*;

/// How long a signed webhook may take to be answered under connection pressure.
pub(crate) const ANSWERED_WITHIN: Duration = Duration::from_secs(1);

/// A header read timeout far beyond any test here: only the cap and shedding close
/// connections.
const NO_HEADER_TIMEOUT: &str = "header_read_timeout = \"300s\"\n";

/// Make sure this process may hold `files` descriptors, raising the soft limit up to
/// the hard one if needed; false (with the reason on stderr) when the hard limit is
/// too low.
pub(crate) fn room_for_files(files: usize) -> bool {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        eprintln!("skipped: cannot read the open-file limit");
        return false;
    }
    let wanted = files as libc::rlim_t;
    if limit.rlim_cur >= wanted {
        return true;
    }
    if limit.rlim_max < wanted {
        eprintln!(
            "skipped: this test holds {files} open files and the hard limit is {} \
             (raise it, e.g. `ulimit -Hn {files}` as root)",
            limit.rlim_max
        );
        return false;
    }
    limit.rlim_cur = wanted;
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        eprintln!("skipped: cannot raise the open-file soft limit to {files}");
        return false;
    }
    true
}

pub(crate) fn ingest_addr(gw: &Gateway) -> SocketAddr {
    gw.ingest
        .trim_start_matches("http://")
        .parse()
        .expect("the ingest address")
}

/// A TCP connection to `to` from the loopback address `source` (Linux loopback
/// answers for all of 127/8, so each address is another client to the gateway).
pub(crate) async fn connect_from(source: Ipv4Addr, to: SocketAddr) -> tokio::net::TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .bind(SocketAddr::new(IpAddr::V4(source), 0))
        .expect("bind the source address");
    socket.connect(to).await.expect("connect")
}

/// [`connect_from`], as a non-blocking std stream that nothing will ever be sent on.
pub(crate) async fn idle_from(source: Ipv4Addr, to: SocketAddr) -> std::net::TcpStream {
    let s = connect_from(source, to)
        .await
        .into_std()
        .expect("a std stream");
    s.set_nonblocking(true).expect("non-blocking");
    s
}

/// Whether the server has closed `s` (end of stream or reset), without waiting.
pub(crate) fn closed_by_server(s: &std::net::TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match (&*s).read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// An HTTP client whose connections come from `source`.
pub(crate) fn client_from(source: Ipv4Addr) -> reqwest::Client {
    http_builder()
        .local_address(IpAddr::V4(source))
        .build()
        .expect("http client")
}

/// The value of the series `series` (as the exporter writes it) on `admin`'s
/// `/metrics`; 0 when absent.
pub(crate) async fn metric(admin: &str, series: &str) -> f64 {
    let text = get_text(&http(), &format!("{admin}/metrics")).await;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.parse().expect("a sample value"))
}

/// POST a signed Stripe event from `source`, assert that it is stored (200); how
/// long it took.
pub(crate) async fn timed_webhook(gw: &Gateway, source: Ipv4Addr, event: &str) -> Duration {
    let client = client_from(source);
    let body = event_body("stripe", event);
    let started = Instant::now();
    // Bounded well past the one second asserted, so that a failure is reported, not
    // waited out (the header read timeout here is minutes).
    let (status, body) = tokio::time::timeout(
        ANSWERED_WITHIN * 10,
        post_signed(&client, gw, "stripe", &body, event),
    )
    .await
    .unwrap_or_else(|_| panic!("{event} not answered within {:?}", ANSWERED_WITHIN * 10));
    let took = started.elapsed();
    assert_eq!(status, 200, "{body}");
    took
}

/// Read from `s` until a blank line ends a response head; the head. Panics naming
/// `what` if the server closes `s` first.
pub(crate) async fn read_head(s: &mut tokio::net::TcpStream, what: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let read = async {
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).await.expect("read");
            assert!(
                n > 0,
                "{what}: closed by the server after {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("a response head within 10 s");
    String::from_utf8_lossy(&got).into_owned()
}

const REFUSED: &str =
    "hookgate_connections_refused_total{listener=\"ingest\",reason=\"per_client\"}";
const SHED: &str = "hookgate_connections_shed_total{listener=\"ingest\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_with_thousands_of_idle_connections_keeps_only_its_cap_open() {
    const IDLE: usize = 4_000;
    // The client's ends, the server's ends it keeps (at most the cap) and the rest
    // of the process.
    if !room_for_files(IDLE + 2_048) {
        return;
    }
    let h = StoreHandle::new(Backend::Embedded);
    let cfg = config(&h, &format!("[server]\n{NO_HEADER_TIMEOUT}"));
    let cap = cfg
        .server
        .max_connections_per_client
        .expect("a per-client cap by default");
    assert!(cap < IDLE && IDLE < cfg.server.max_connections);
    let gw = Gateway::start(cfg).await;
    let refused_before = metric(&gw.admin, REFUSED).await;

    let to = ingest_addr(&gw);
    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        idle.push(idle_from(Ipv4Addr::LOCALHOST, to).await);
    }
    let closed = || idle.iter().filter(|s| closed_by_server(s)).count();
    wait_until(
        "the gateway to close the idle client's connections over its cap",
        Duration::from_secs(30),
        async || closed() >= IDLE - cap,
    )
    .await;

    // Another client is answered at once.
    let took = timed_webhook(&gw, Ipv4Addr::new(127, 0, 0, 2), "evt_conn_other").await;
    assert!(took < ANSWERED_WITHIN, "answered after {took:?}");
    assert_eq!(
        closed(),
        IDLE - cap,
        "the idle client keeps exactly its cap of connections"
    );
    let refused = metric(&gw.admin, REFUSED).await - refused_before;
    assert!(
        refused >= (IDLE - cap) as f64,
        "{REFUSED} grew by {refused}"
    );
    drop(idle);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_max_connections_the_longest_idle_is_shed_and_a_request_in_progress_never() {
    const MAX: usize = 64;
    const CLIENTS: usize = 8;
    let h = StoreHandle::new(Backend::Embedded);
    let cfg = config(
        &h,
        &format!("[server]\nmax_connections = {MAX}\n{NO_HEADER_TIMEOUT}"),
    );
    // Each idle client stays well under its cap: only shedding makes room.
    assert!(cfg.server.max_connections_per_client > Some(MAX / CLIENTS));
    let gw = Gateway::start(cfg).await;
    let shed_before = metric(&gw.admin, SHED).await;
    let to = ingest_addr(&gw);

    // A request in progress, opened first so that it is the oldest connection: its
    // head is sent and read (the gateway asks for the body: 100 Continue), its body
    // is half sent.
    let event = "evt_in_progress";
    let body = event_body("stripe", event);
    let mut head = format!(
        "POST /ingest/stripe HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nexpect: 100-continue\r\n",
        body.len()
    );
    for (name, value) in sign_headers("stripe", STRIPE_SECRET, &body, now_secs(), event) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut in_progress = connect_from(Ipv4Addr::new(127, 0, 0, 20), to).await;
    in_progress
        .write_all(head.as_bytes())
        .await
        .expect("send the head");
    let answer = read_head(&mut in_progress, "the request in progress").await;
    assert!(answer.starts_with("HTTP/1.1 100 Continue"), "{answer}");
    let half = body.len() / 2;
    in_progress
        .write_all(&body[..half])
        .await
        .expect("send half the body");

    // Idle connections from several clients fill every other connection slot.
    let mut idle = Vec::with_capacity(MAX - 1);
    for i in 0..MAX - 1 {
        let client = Ipv4Addr::new(127, 0, 0, 30 + (i % CLIENTS) as u8);
        idle.push(idle_from(client, to).await);
    }

    // A webhook from yet another client is answered at once.
    let took = timed_webhook(&gw, Ipv4Addr::new(127, 0, 0, 2), "evt_conn_shed").await;
    assert!(took < ANSWERED_WITHIN, "answered after {took:?}");

    // The request in progress, the oldest connection, was never shed: its body
    // completes and it is stored.
    in_progress
        .write_all(&body[half..])
        .await
        .expect("send the rest of the body");
    let answer = read_head(&mut in_progress, "the request in progress").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // Idle connections were shed to make room, the ones idle the longest first (each
    // once it had been idle for `SHED_AFTER`, so how many depends on how fast they
    // were opened): the closed ones are the first ones opened, in order.
    wait_until(
        "the longest idle connections to be shed",
        Duration::from_secs(10),
        async || closed_by_server(&idle[0]),
    )
    .await;
    let closed: Vec<usize> = (0..idle.len())
        .filter(|&i| closed_by_server(&idle[i]))
        .collect();
    let shed = closed.len();
    assert_eq!(
        closed,
        (0..shed).collect::<Vec<_>>(),
        "shed, by opening order (oldest first)"
    );
    let counted = metric(&gw.admin, SHED).await - shed_before;
    assert!(counted >= shed as f64, "{SHED} grew by {counted}");
    drop(idle);
    gw.stop().await;
}
