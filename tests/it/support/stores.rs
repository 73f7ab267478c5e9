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
    /// The server of the Redis backend; `None` for the others.
    pub redis: Option<RedisServer>,
    /// A directory of the test's own; the embedded store keeps its data in `data`.
    pub dir: tempfile::TempDir,
    /// The `[store]` section naming this store.
    section: String,
}

impl StoreHandle {
    /// Start what `backend` needs and write the `[store]` section that names it: the
    /// one place that knows, per backend, how its store is brought up.
    pub fn new(backend: Backend) -> StoreHandle {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut redis = None;
        let section = match backend {
            Backend::Embedded => format!(
                "[store]\nkind = \"embedded\"\npath = \"{}\"\n",
                dir.path().join("data").display()
            ),
            Backend::Redis => format!(
                "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
                redis.insert(RedisServer::start()).url()
            ),
            // The run's shared server, in a schema of this test's own.
            Backend::Postgres => format!(
                "[store]\nkind = \"postgres\"\nurl = \"{}\"\nprefix = \"{}\"\ntimeout = \"2s\"\n",
                super::postgres::shared().url(),
                super::postgres::fresh_schema()
            ),
        };
        StoreHandle {
            backend,
            redis,
            dir,
            section,
        }
    }

    /// The `[store]` section for this backend.
    pub fn toml(&self) -> String {
        self.section.clone()
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
/// test that needs nothing but a store (see [`for_each_fresh_store!`]).
pub async fn on_a_fresh_store(backend: Backend, body: impl AsyncFnOnce(&dyn Store)) {
    let h = StoreHandle::new(backend);
    let store = h.open().await;
    body(&*store).await;
    store.close().await;
}
