//! The store backends the per-store suites run against, and the macros that expand
//! one test per backend, so that every such suite covers each backend alike.

/// The store backends every store-facing test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Embedded,
    Redis,
}

/// Run the async test body once per backend: `async fn body(backend: Backend)`.
#[macro_export]
macro_rules! both_stores {
    ($name:ident, $body:expr) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                ($body)($crate::support::Backend::Embedded).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                ($body)($crate::support::Backend::Redis).await;
            }
        }
    };
}

/// Run the async test body once per backend, on a fresh store opened for it and closed
/// after it ([`on_a_fresh_store`]): `async fn body(store: &dyn Store)`.
#[macro_export]
macro_rules! both_fresh_stores {
    ($name:ident, $body:path) => {
        $crate::both_stores!($name, |backend| $crate::support::on_a_fresh_store(
            backend, $body
        ));
    };
}
