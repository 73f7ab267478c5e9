//! Repeated identical errors are logged once per window, with a count.
//!
//! A full disk at 300 requests a second, or a Redis gone away, fails every request
//! and every claim the same way: one line each is thousands of lines a minute that
//! say nothing new, bury the one that does, and fill the log's queue (lines past it
//! are dropped). So each hot-path warning or error passes through [`hit`] with a key
//! (its message, plus what makes two of them different: source, route, the error's
//! kind). The first of a key is logged; the repeats within [`WINDOW`] are counted,
//! and [`flush`] (run every [`WINDOW`] by [`run`]) logs one line per key that
//! repeated: "… (repeated 3412 times in the last 10 s)".

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// How long the repeats of one message are counted before they are reported.
pub const WINDOW: Duration = Duration::from_secs(10);

/// Keys tracked at once; past it, new keys share one (their lines are still
/// limited, only counted together).
const MAX_KEYS: usize = 4096;

struct Slot {
    opened: Instant,
    repeats: u64,
}

type Key = (&'static str, String);

static SLOTS: LazyLock<Mutex<HashMap<Key, Slot>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Whether a line with `message` (and what tells its kind apart, `detail`) is to be
/// logged now: `true` for the first of its kind in a window, `false` for a repeat,
/// which is counted instead.
pub fn hit(message: &'static str, detail: &str) -> bool {
    let Ok(mut slots) = SLOTS.lock() else {
        return true;
    };
    let now = Instant::now();
    let key = if slots.len() >= MAX_KEYS && !slots.contains_key(&(message, detail.to_string())) {
        (message, String::from("(others)"))
    } else {
        (message, detail.to_string())
    };
    match slots.get_mut(&key) {
        Some(slot) if now.duration_since(slot.opened) < WINDOW => {
            slot.repeats += 1;
            false
        }
        Some(slot) => {
            // A new window: report the last one's repeats with this line's own.
            let repeats = std::mem::replace(&mut slot.repeats, 0);
            slot.opened = now;
            report(&key, repeats);
            true
        }
        None => {
            slots.insert(
                key,
                Slot {
                    opened: now,
                    repeats: 0,
                },
            );
            true
        }
    }
}

/// Report the repeats of every window that has ended, and forget keys that were
/// quiet for a whole window.
pub fn flush() {
    let Ok(mut slots) = SLOTS.lock() else {
        return;
    };
    let now = Instant::now();
    slots.retain(|key, slot| {
        if now.duration_since(slot.opened) < WINDOW {
            return true;
        }
        let repeats = std::mem::replace(&mut slot.repeats, 0);
        report(key, repeats);
        false
    });
}

fn report((message, detail): &Key, repeats: u64) {
    if repeats > 0 {
        tracing::warn!(
            repeated = repeats,
            detail = %detail,
            "{message} (repeated {repeats} times in the last {} s)",
            WINDOW.as_secs()
        );
    }
}

/// Report repeats every window until `shutdown`, and once more then.
pub async fn run(shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                flush();
                return;
            }
            _ = tokio::time::sleep(WINDOW) => flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_of_a_kind_passes_and_its_repeats_are_counted() {
        assert!(hit("test: first passes", "a"));
        for _ in 0..100 {
            assert!(!hit("test: first passes", "a"));
        }
        // Another kind of the same message is a line of its own.
        assert!(hit("test: first passes", "b"));
        let slots = SLOTS.lock().unwrap();
        assert_eq!(slots[&("test: first passes", "a".to_string())].repeats, 100);
    }
}
