//! Waiting on what a test can observe. Tests never sleep for a guessed time: they
//! poll a condition until it holds or a deadline passes (`wait_until`), and the one
//! fixed wait, `quiet_for`, only bounds an absence over a window taken from the
//! configuration under test.

use std::time::{Duration, Instant};

use hookgate::config::Config;

/// How often the waits below look at their condition again.
pub const POLL: Duration = Duration::from_millis(25);

/// Look at `probe` every [`POLL`] until it answers `Ok`, for at most `deadline`; after
/// that, its last `Err` (what it saw instead). The probe runs at least once, and once
/// more at or after the deadline.
pub async fn poll_until<T, E>(
    deadline: Duration,
    mut probe: impl AsyncFnMut() -> Result<T, E>,
) -> Result<T, E> {
    let end = Instant::now() + deadline;
    loop {
        match probe().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= end => return Err(e),
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Wait until `cond` holds (looked at every [`POLL`]); panic naming `what` once
/// `deadline` has passed without it.
pub async fn wait_until(what: &str, deadline: Duration, mut cond: impl AsyncFnMut() -> bool) {
    let got = poll_until(
        deadline,
        async || if cond().await { Ok(()) } else { Err(()) },
    )
    .await;
    assert!(
        got.is_ok(),
        "timed out after {deadline:?} waiting for {what}"
    );
}

/// As [`wait_until`], for a probe that returns what it waited for, or what it saw
/// instead (shown in the panic).
pub async fn wait_until_ok<T, E: std::fmt::Display>(
    what: &str,
    deadline: Duration,
    probe: impl AsyncFnMut() -> Result<T, E>,
) -> T {
    poll_until(deadline, probe).await.unwrap_or_else(|last| {
        panic!("timed out after {deadline:?} waiting for {what}; last seen: {last}")
    })
}

/// [`poll_until`] for code that runs outside the runtime (child processes, servers).
pub fn poll_until_blocking<T, E>(
    deadline: Duration,
    mut probe: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let end = Instant::now() + deadline;
    loop {
        match probe() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= end => return Err(e),
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// [`wait_until`] for code that runs outside the runtime.
pub fn wait_until_blocking(what: &str, deadline: Duration, mut cond: impl FnMut() -> bool) {
    let got = poll_until_blocking(deadline, || if cond() { Ok(()) } else { Err(()) });
    assert!(
        got.is_ok(),
        "timed out after {deadline:?} waiting for {what}"
    );
}

/// The longest window [`quiet_for`] accepts.
pub const QUIET_MAX: Duration = Duration::from_secs(2);

/// Assert that something does not happen: `still` (say, "the destination has seen one
/// request") holds throughout `window`, looked at every [`POLL`] and once more at its
/// end. Panics naming `what` the moment it stops holding.
///
/// This is the one place the suite waits a fixed time, and it does so only to show an
/// absence. That something happens is waited for ([`wait_until`]); that it does not
/// cannot be observed, only bounded: a wrong attempt, delivery or alert would show up
/// within some time, and the window is that time. So the caller derives it from the
/// configuration under test ([`quiet_window`]: a few forwarder poll intervals; a
/// breaker's cooldown) rather than picking a number. The window is at most
/// [`QUIET_MAX`] (2 s, refused above): long enough for anything the configurations
/// here would do, short enough that a fixed wait cannot stand in for synchronization.
pub async fn quiet_for(what: &str, window: Duration, mut still: impl AsyncFnMut() -> bool) {
    assert!(
        window <= QUIET_MAX,
        "quiet_for({what}): a {window:?} window is above the {QUIET_MAX:?} bound"
    );
    let start = Instant::now();
    loop {
        let last = start.elapsed() >= window;
        assert!(
            still().await,
            "{what}: broken {:?} into a {window:?} quiet window",
            start.elapsed()
        );
        if last {
            return;
        }
        tokio::time::sleep(POLL.min(window.saturating_sub(start.elapsed()))).await;
    }
}

/// Ten forwarder poll intervals of `cfg`: the [`quiet_for`] window after which a
/// forwarder that would act (claim, retry, deliver) has acted, since it looks for due
/// work at least once per interval.
pub fn quiet_window(cfg: &Config) -> Duration {
    cfg.forwarder.poll_interval * 10
}

#[tokio::test]
#[should_panic(expected = "above the 2s bound")]
async fn quiet_for_refuses_a_window_above_its_bound() {
    quiet_for("nothing", QUIET_MAX + POLL, async || true).await;
}

#[tokio::test]
#[should_panic(expected = "the clock stands still: broken")]
async fn quiet_for_fails_once_its_condition_breaks() {
    let start = Instant::now();
    quiet_for("the clock stands still", QUIET_MAX, async || {
        start.elapsed() < 4 * POLL
    })
    .await;
}

#[tokio::test]
#[should_panic(expected = "timed out after 100ms waiting for the impossible")]
async fn wait_until_gives_up_at_its_deadline() {
    wait_until("the impossible", 4 * POLL, async || false).await;
}
