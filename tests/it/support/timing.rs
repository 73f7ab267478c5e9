//! The lock that keeps timed tests and the heaviest ones from running at the same
//! time, since on a small machine one's load moves another's timings. The tests
//! with the tightest bounds also sit in modules named `alone`, which the test
//! command (`scripts/test`) runs after all the others, one at a time.

/// Held by the tests that time the gateway against a bound (answers within the store
/// timeout, one source's ingest against another's) and by the tests that load the
/// machine most, so that no two of them run at once: on two cores one's load moves
/// the other's timings, which neither measures.
pub static TIMED_ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
