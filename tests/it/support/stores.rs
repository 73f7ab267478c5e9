//! A store of a given backend for one test: whatever keeps it alive (a directory, a
//! redis-server), the `[store]` section that points a gateway at it, and the store
//! opened directly.

use std::sync::Arc;

use hookgate::config;
use hookgate::store::{self, Store};

use super::{Backend, RedisServer};

/// Whatever keeps a backend alive for the duration of a test.
pub struct StoreHandle {
    pub backend: Backend,
    pub redis: Option<RedisServer>,
    pub dir: tempfile::TempDir,
}

impl StoreHandle {
    pub fn new(backend: Backend) -> StoreHandle {
        StoreHandle {
            backend,
            redis: (backend == Backend::Redis).then(RedisServer::start),
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// The `[store]` section for this backend.
    pub fn toml(&self) -> String {
        match &self.redis {
            Some(r) => format!(
                "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
                r.url()
            ),
            None => format!(
                "[store]\nkind = \"embedded\"\npath = \"{}\"\n",
                self.dir.path().join("data").display()
            ),
        }
    }

    pub async fn open(&self) -> Arc<dyn Store> {
        let cfg = config::from_toml_str(&self.toml(), &|_| None).expect("store config");
        store::open(&cfg.store, &hookgate::clock::Clock::system())
            .await
            .expect("open store")
    }

    pub fn redis_mut(&mut self) -> &mut RedisServer {
        self.redis.as_mut().expect("a redis backend")
    }
}

/// Open a fresh store of `backend`, run `body` on it, and close it: the frame of every
/// test that needs nothing but a store (see [`both_fresh_stores!`]).
pub async fn on_a_fresh_store(backend: Backend, body: impl AsyncFnOnce(&dyn Store)) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
    body(&*store).await;
    store.close().await;
}
