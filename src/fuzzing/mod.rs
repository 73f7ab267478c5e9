//! The fuzz targets' bodies: one function per target, each taking the raw bytes a
//! fuzzer makes and checking properties beyond "no panic" (a verifier never takes a
//! mutated signature, the work counters stay within their bounds, renderers keep to
//! their caps, parsers agree with a reference).
//!
//! They live in the library, compiled only for tests and under `cfg(fuzzing)` (which
//! `cargo fuzz` sets), so that they reach the crate's internals without widening its
//! API, and so that `cargo test` replays every committed corpus and regression input
//! through the same code as the fuzzer (`replay` below). `fuzz/` holds the
//! `cargo fuzz` crate (one thin binary per target), the corpora (one archive per
//! target) and the inputs that once failed; FUZZING.md says what each target covers
//! and what was found.
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
    //! fast, and run by `cargo test` on every change. A corpus is one archive per
    //! target, `fuzz/corpus/<target>.tar.gz` (`fuzz/corpus.py pack` writes it), read
    //! here without unpacking; `fuzz/corpus/counts` says how many inputs, and how many
    //! bytes, each holds, so that an archive read short fails the test instead of
    //! passing it. The inputs that once failed are plain files,
    //! `fuzz/regressions/<target>/<name>`.

    use std::collections::BTreeMap;
    use std::io::Read;
    use std::path::Path;

    use super::Target;

    /// The value of a file operation on `path`, or a panic naming the path.
    fn ok<T>(result: std::io::Result<T>, path: &Path) -> T {
        result.unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// `fuzz/corpus/counts`: each target's inputs and bytes.
    fn counts(corpus: &Path) -> BTreeMap<String, (usize, u64)> {
        let path = corpus.join("counts");
        let text = ok(std::fs::read_to_string(&path), &path);
        text.lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                let (Some(inputs), Some(bytes)) = (
                    fields.get(1).and_then(|n| n.parse::<usize>().ok()),
                    fields.get(2).and_then(|n| n.parse::<u64>().ok()),
                ) else {
                    panic!("{}: {l:?} is not `target inputs bytes`", path.display());
                };
                assert_eq!(fields.len(), 3, "{}: {l:?}", path.display());
                (fields[0].to_string(), (inputs, bytes))
            })
            .collect()
    }

    /// Runs `target` on one input; a broken property names the input it broke on.
    fn replay_one(target: Target, data: &[u8], what: impl FnOnce() -> String) {
        if std::panic::catch_unwind(|| target(data)).is_err() {
            panic!("a fuzz target's property broke on {}", what());
        }
    }

    /// Every input of an archive, replayed through `target`: the inputs and bytes
    /// replayed.
    fn replay_archive(archive: &Path, target: Target) -> (usize, u64) {
        let file = ok(std::fs::File::open(archive), archive);
        let mut tar = tar::Archive::new(flate2::read::MultiGzDecoder::new(file));
        let (mut inputs, mut bytes) = (0, 0);
        for entry in ok(tar.entries(), archive) {
            let mut entry = ok(entry, archive);
            let name = ok(entry.path().map(|p| p.display().to_string()), archive);
            assert!(
                entry.header().entry_type().is_file(),
                "{}: {name} is not an input file",
                archive.display()
            );
            let mut data = Vec::new();
            ok(entry.read_to_end(&mut data), archive);
            replay_one(target, &data, || format!("{name} in {}", archive.display()));
            inputs += 1;
            bytes += data.len() as u64;
        }
        // The rest of the stream, so that gzip's checksum and length are checked too.
        ok(
            std::io::copy(&mut tar.into_inner(), &mut std::io::sink()),
            archive,
        );
        (inputs, bytes)
    }

    /// Every file of a target's regression folder (none when there is no folder),
    /// replayed through `target`: how many.
    fn replay_folder(folder: &Path, target: Target) -> usize {
        let entries = match std::fs::read_dir(folder) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
            Err(e) => panic!("{}: {e}", folder.display()),
        };
        let mut paths: Vec<_> = entries.map(|e| ok(e, folder).path()).collect();
        paths.sort();
        for path in &paths {
            let data = ok(std::fs::read(path), path);
            replay_one(target, &data, || path.display().to_string());
        }
        paths.len()
    }

    #[test]
    fn every_committed_fuzz_input_still_holds() {
        let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
        let corpus = fuzz.join("corpus");
        let counts = counts(&corpus);
        let mut names: Vec<&str> = super::TARGETS.iter().map(|(name, _)| *name).collect();
        names.sort_unstable();
        assert_eq!(
            counts.keys().map(String::as_str).collect::<Vec<_>>(),
            names,
            "fuzz/corpus/counts names every target, and only them"
        );
        let mut regressions = 0;
        for (name, target) in super::TARGETS {
            let archive = corpus.join(format!("{name}.tar.gz"));
            let (inputs, bytes) = replay_archive(&archive, *target);
            assert_eq!(
                (inputs, bytes),
                counts[*name],
                "{name}: the inputs and bytes replayed from {}, against fuzz/corpus/counts",
                archive.display()
            );
            assert!(inputs > 0, "fuzz target {name} has no committed corpus");
            regressions += replay_folder(&fuzz.join("regressions").join(name), *target);
        }
        assert!(regressions > 0, "no regression input replayed");
    }
}
