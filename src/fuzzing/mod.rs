//! The fuzz targets' bodies: one function per target, each taking the raw bytes a
//! fuzzer makes and checking properties beyond "no panic" (a verifier never takes a
//! mutated signature, the work counters stay within their bounds, renderers keep to
//! their caps, parsers agree with a reference).
//!
//! They live in the library, compiled only for tests and under `cfg(fuzzing)` (which
//! `cargo fuzz` sets), so that they reach the crate's internals without widening its
//! API, and so that `cargo test` replays every committed corpus and regression input
//! through the same code as the fuzzer (`replay` below). `fuzz/` holds the
//! `cargo fuzz` crate (one thin binary per target), the seed corpora and the inputs
//! that once crashed; FUZZING.md says what each target covers and what was found.
//!
//! Inputs are text where they can be, so that seeds are written by hand or taken from
//! the providers' vectors: a head of lines, an empty line, then the rest (a body).

mod config;
mod fetched;
mod http;
mod routing;
mod stored;
mod verify;

pub use config::config;
pub use fetched::fetched;
pub use http::http;
pub use routing::routing;
pub use stored::stored;
pub use verify::verify;

/// One fuzz target: it takes any bytes and panics only on a broken property.
pub type Target = fn(&[u8]);

/// Every target, by the name of its `fuzz/fuzz_targets/` binary and corpus folder.
pub const TARGETS: &[(&str, Target)] = &[
    ("verify", verify),
    ("routing", routing),
    ("config", config),
    ("http", http),
    ("stored", stored),
    ("fetched", fetched),
];

/// An input split at its first empty line: the lines before it (as bytes, without
/// their `\r`), and everything after it.
pub(crate) fn head_and_rest(data: &[u8]) -> (Vec<&[u8]>, &[u8]) {
    let (head, rest) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &[][..]),
    };
    let lines = head
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .collect();
    (lines, rest)
}

/// A line as text (lossy: a target that needs the exact bytes keeps them).
pub(crate) fn text(line: Option<&&[u8]>) -> String {
    line.map(|l| String::from_utf8_lossy(l).into_owned())
        .unwrap_or_default()
}

/// A small number taken from the input, for choices a target makes (which provider,
/// which position to mutate): a hash of `bytes`, so that it moves when they do.
pub(crate) fn pick(bytes: &[u8], n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    (h % n as u64) as usize
}

#[cfg(test)]
mod replay {
    //! Every committed corpus and regression input, replayed through its target:
    //! fast, and run by `cargo test` on every change.

    use std::path::Path;

    #[test]
    fn every_committed_fuzz_input_still_holds() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
        let mut replayed = 0usize;
        for (name, target) in super::TARGETS {
            let mut files = 0usize;
            for dir in ["corpus", "regressions"] {
                let Ok(entries) = std::fs::read_dir(root.join(dir).join(name)) else {
                    continue;
                };
                let mut paths: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
                paths.sort();
                for path in paths {
                    // A running fuzzer may replace files while this reads them.
                    let Ok(data) = std::fs::read(&path) else {
                        continue;
                    };
                    target(&data);
                    files += 1;
                }
            }
            assert!(files > 0, "fuzz target {name} has no committed corpus");
            replayed += files;
        }
        assert!(replayed > 0);
    }
}
