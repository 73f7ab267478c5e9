//! A TCP proxy in front of a store's port that the test can blackhole: the gateway
//! behind it keeps its connections, but nothing passes any more, in either
//! direction, and new connections are accepted and left silent. A connection cut
//! that way is what a network partition looks like to the gateway (no reset, no
//! answer), without touching the store or any other gateway.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The proxy; dropped, it stops accepting (its open connections end with their
/// tasks when the runtime ends).
pub struct Blackhole {
    pub port: u16,
    hole: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Blackhole {
    /// Forward `127.0.0.1:<port>` (a new port) to `127.0.0.1:<to>`.
    pub async fn start(to: u16) -> Blackhole {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hole = Arc::new(AtomicBool::new(false));
        let flag = hole.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let hole = flag.clone();
                tokio::spawn(async move {
                    if hole.load(Ordering::SeqCst) {
                        // Accepted, never answered.
                        let _held = client;
                        return std::future::pending::<()>().await;
                    }
                    let Ok(server) = TcpStream::connect(("127.0.0.1", to)).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::spawn(pipe(cr, sw, hole.clone()));
                    pipe(sr, cw, hole).await;
                });
            }
        });
        Blackhole { port, hole, task }
    }

    /// From now on nothing passes.
    pub fn cut(&self) {
        self.hole.store(true, Ordering::SeqCst);
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copy `from` to `to` until either ends; once the hole is cut, what is read is
/// dropped and the copy hangs (the connection stays open, silent).
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    hole: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if hole.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
