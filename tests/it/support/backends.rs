//! The store backends the per-store suites run against, kept in one list, and the
//! macros that expand one test per backend from it, so that every such suite covers
//! each backend alike and a new backend joins all of them at once.

/// The store backends, one per line as `test name => Backend variant`: the one list
/// that [`Backend`] and every per-store suite ([`for_each_store!`],
/// [`for_each_fresh_store!`]) are generated from. A backend added here gets its
/// variant and a test `<suite>::<test name>` in every per-store suite; the compiler
/// then asks for its arm in `StoreHandle::new`, the one place that starts a backend.
///
/// `backends!(m!(args))` expands to `m!([list] args)`, for `m` a macro exported at
/// this crate's root.
#[macro_export]
macro_rules! backends {
    ($then:ident!($($args:tt)*)) => {
        $crate::$then!(
            [
                embedded => Embedded,
                redis => Redis,
                postgres => Postgres,
            ]
            $($args)*
        );
    };
}

/// [`Backend`], one variant per entry of [`backends!`].
#[doc(hidden)]
#[macro_export]
macro_rules! backend_enum {
    ([$($test:ident => $variant:ident),+ $(,)?]) => {
        /// A store backend the per-store tests run against: one per entry of
        /// [`backends!`](crate::backends).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Backend {
            $($variant),+
        }
    };
}

crate::backends!(backend_enum!());

/// Run the async test body once per backend, as the test `$name::<backend>`
/// (`$name::embedded`, `$name::redis`, …): `async fn body(backend: Backend)`.
#[macro_export]
macro_rules! for_each_store {
    ($name:ident, $body:expr) => {
        $crate::backends!(backend_tests!($name, $body));
    };
}

/// The module `$name` of [`for_each_store!`], one test per entry of [`backends!`].
#[doc(hidden)]
#[macro_export]
macro_rules! backend_tests {
    ([$($test:ident => $variant:ident),+ $(,)?] $name:ident, $body:expr) => {
        mod $name {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    ($body)($crate::support::Backend::$variant).await;
                }
            )+
        }
    };
}

/// Run the async test body once per backend, on a fresh store opened for it and closed
/// after it (`on_a_fresh_store`): `async fn body(store: &dyn Store)`.
#[macro_export]
macro_rules! for_each_fresh_store {
    ($name:ident, $body:path) => {
        $crate::for_each_store!($name, |backend| $crate::support::on_a_fresh_store(
            backend, $body
        ));
    };
}
