//! The layout's invariants, read off the source tree (ARCHITECTURE.md names them):
//! backend types stay in their store's folder, the layers only point down, the HTTP
//! framework and `anyhow` stay where they belong, every file says why it exists, no
//! console page skips HTML escaping, no code derives a failure kind from text, and
//! ARCHITECTURE.md stays a map: short, naming only paths that exist, and listing
//! the rooms `src/lib.rs` lists.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/`, as (path relative to `src/`, code without comments).
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read src") {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read source");
            let rel = p
                .strip_prefix(&root)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            (rel, code_only(&text))
        })
        .collect()
}

/// The text without `//` comments (doc comments included), so prose may name anything.
fn code_only(text: &str) -> String {
    text.lines()
        .map(|l| match l.trim_start().starts_with("//") {
            true => "",
            false => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `code` uses the path `name::` of an external crate (not a module of ours
/// that happens to share the name, written `store::redis::`, `super::redis::` …).
fn uses_crate(code: &str, name: &str) -> bool {
    let pat = format!("{name}::");
    code.match_indices(&pat).any(|(i, _)| {
        let before = &code[..i];
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        match before.chars().next_back() {
            None => true,
            // `deadpool_redis::` is another crate.
            Some(c) if ident(c) => false,
            // `::redis::` is the crate; `store::redis::`, `super::redis::` our module.
            Some(':') => before
                .trim_end_matches(':')
                .chars()
                .next_back()
                .is_none_or(|c| !ident(c)),
            Some(_) => true,
        }
    }) || code.contains(&format!("use {name};"))
}

fn violations(allowed: impl Fn(&str) -> bool, bad: impl Fn(&str, &str) -> bool) -> Vec<String> {
    sources()
        .into_iter()
        // Unit-test folders (`provider/tests/`) may use what a test needs.
        .filter(|(path, _)| !path.contains("/tests/"))
        .filter(|(path, code)| !allowed(path) && bad(path, code))
        .map(|(path, _)| path)
        .collect()
}

/// Whether some file under `room` uses crate `name`: the checks below would pass
/// vacuously if a folder moved or the detection broke.
fn some_file_in(room: &str, name: &str) -> bool {
    sources()
        .iter()
        .any(|(path, code)| path.starts_with(room) && uses_crate(code, name))
}

#[test]
fn backend_types_stay_in_their_store_folder() {
    assert!(some_file_in("store/sqlite/", "rusqlite"));
    assert!(some_file_in("store/redis/", "redis"));
    let sqlite = violations(
        |p| p.starts_with("store/sqlite/"),
        |_, code| uses_crate(code, "rusqlite") || code.contains("store::sqlite::"),
    );
    assert!(
        sqlite.is_empty(),
        "rusqlite or the embedded store's internals used in {sqlite:?}"
    );
    let redis = violations(
        |p| p.starts_with("store/redis/"),
        |path, code| {
            // `open()` names the two backends: the one place that chooses one; the
            // fuzz target of the Redis record codec reaches it through `store`.
            let code = match path {
                "store/mod.rs" => code
                    .replace("redis::RedisStore::open", "")
                    .replace(
                        "redis::{entry_from_map as redis_entry_from_map, pack_record as redis_pack_record}",
                        "",
                    )
                    .replace("sqlite::SqliteStore::open", ""),
                _ => code.to_string(),
            };
            uses_crate(&code, "redis")
                || uses_crate(&code, "deadpool_redis")
                || code.contains("store::redis::")
        },
    );
    assert!(
        redis.is_empty(),
        "the redis crate or the Redis store's internals used in {redis:?}"
    );
    // The store's own module names each backend once, to open it, and the embedded
    // store once more, to register its metric families.
    let store_mod = violations(
        |p| p != "store/mod.rs",
        |_, code| {
            code.replace("sqlite::SqliteStore::open", "")
                .replace("sqlite::register_metrics", "")
                .contains("sqlite::")
        },
    );
    assert!(
        store_mod.is_empty(),
        "store/mod.rs reaches into the embedded store"
    );
}

#[test]
fn layers_point_down_only() {
    // main → cli → app → {ingest, admin, forward} → {store, provider} → config
    let above_store = [
        "ingest", "admin", "console", "forward", "app", "cli", "serve",
    ];
    let bad = violations(
        |p| {
            !(p.starts_with("store/")
                || p.starts_with("provider/")
                || p.starts_with("config/")
                || p.starts_with("routing/"))
        },
        |_, code| {
            above_store.iter().any(|m| {
                code.contains(&format!("crate::{m}::")) || code.contains(&format!("crate::{m};"))
            })
        },
    );
    assert!(
        bad.is_empty(),
        "store, provider, routing or config import a layer above them: {bad:?}"
    );
    // Ingest, the admin API and the forwarder meet only in the store; the console
    // sits on the admin API, which does not know it.
    for (room, others) in [
        ("ingest/", ["forward", "admin", "console"]),
        ("admin/", ["ingest", "forward", "console"]),
        ("forward/", ["ingest", "admin", "console"]),
        ("pull/", ["ingest", "admin", "console"]),
        ("console/", ["ingest", "forward", "cli"]),
    ] {
        let bad = violations(
            |p| !p.starts_with(room),
            |_, code| others.iter().any(|m| code.contains(&format!("crate::{m}"))),
        );
        assert!(bad.is_empty(), "{room} imports a sibling layer: {bad:?}");
    }
    let config_up = violations(
        |p| !p.starts_with("config/"),
        |_, code| code.contains("crate::provider") || code.contains("crate::store"),
    );
    assert!(
        config_up.is_empty(),
        "config imports provider or store: {config_up:?}"
    );
    let provider_store = violations(
        |p| !p.starts_with("provider/"),
        |_, code| code.contains("crate::store"),
    );
    assert!(
        provider_store.is_empty(),
        "provider imports the store: {provider_store:?}"
    );
}

/// The declared order of the top-level modules, read from ARCHITECTURE.md's
/// "Layers" section: the line of backticked names joined by arrows.
fn declared_layers() -> Vec<String> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
            .expect("read ARCHITECTURE.md");
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Layers"))
        .expect("ARCHITECTURE.md has a Layers section");
    let line = section
        .lines()
        .find(|l| l.starts_with('`') && l.contains(" → "))
        .expect("the Layers section declares the order as `a → b → …`");
    line.trim()
        .trim_matches('`')
        .split(" → ")
        .map(|m| m.trim().to_string())
        .collect()
}

/// The top-level modules of `src/` and, for each, the top-level modules its files
/// name through `crate::` (outside unit-test folders and `mod tests`), with the
/// first file that does.
fn import_graph() -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>
{
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> =
        std::collections::BTreeMap::new();
    let files = sources();
    let top = |path: &str| -> String {
        path.split('/')
            .next()
            .unwrap_or(path)
            .trim_end_matches(".rs")
            .to_string()
    };
    for (path, _) in &files {
        let m = top(path);
        if m != "main" && m != "lib" {
            graph.entry(m).or_default();
        }
    }
    let modules: Vec<String> = graph.keys().cloned().collect();
    for (path, code) in files {
        let from = top(&path);
        if path.contains("/tests/") || !graph.contains_key(&from) {
            continue;
        }
        let code = match code.find("#[cfg(test)]\nmod tests") {
            Some(i) => &code[..i],
            None => &code[..],
        };
        // `crate::x` and `crate::{x, y::z}`.
        let mut named: Vec<&str> = Vec::new();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            match rest.strip_prefix('{') {
                Some(group) => {
                    let group = group.split('}').next().unwrap_or("");
                    named.extend(
                        group
                            .split(',')
                            .map(|p| p.trim().split("::").next().unwrap_or("")),
                    );
                }
                None => named.push(
                    rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .next()
                        .unwrap_or(""),
                ),
            }
        }
        for to in named {
            if to != from && modules.iter().any(|m| m == to) {
                graph
                    .get_mut(&from)
                    .expect("known module")
                    .entry(to.to_string())
                    .or_insert_with(|| path.clone());
            }
        }
    }
    graph
}

#[test]
fn the_top_level_modules_form_a_line() {
    let order = declared_layers();
    let graph = import_graph();
    assert!(
        graph.len() > 15 && graph.values().any(|to| to.contains_key("store")),
        "the import graph came out empty: {graph:?}"
    );
    let undeclared: Vec<&String> = graph.keys().filter(|m| !order.contains(m)).collect();
    assert!(
        undeclared.is_empty(),
        "top-level modules missing from ARCHITECTURE.md's Layers line: {undeclared:?}"
    );
    // A loop is an arrow against the order somewhere along it; naming the loop
    // itself says what to untie.
    let mut loops = Vec::new();
    for start in graph.keys() {
        let mut path = vec![start.clone()];
        let mut seen = std::collections::BTreeSet::new();
        fn walk(
            graph: &std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
            start: &str,
            path: &mut Vec<String>,
            seen: &mut std::collections::BTreeSet<String>,
            loops: &mut Vec<String>,
        ) {
            let at = path.last().cloned().unwrap_or_default();
            for to in graph.get(&at).map(|t| t.keys()).into_iter().flatten() {
                if to == start {
                    loops.push(format!("{} → {start}", path.join(" → ")));
                } else if seen.insert(to.clone()) {
                    path.push(to.clone());
                    walk(graph, start, path, seen, loops);
                    path.pop();
                }
            }
        }
        walk(&graph, start, &mut path, &mut seen, &mut loops);
    }
    assert!(
        loops.is_empty(),
        "the top-level modules import in a loop: {loops:?}"
    );
    let rank = |m: &str| order.iter().position(|o| o == m).unwrap_or(usize::MAX);
    let against: Vec<String> = graph
        .iter()
        .flat_map(|(from, to)| {
            to.iter()
                .filter(|(t, _)| rank(t) <= rank(from))
                .map(move |(t, file)| format!("{from} → {t} (src/{file})"))
        })
        .collect();
    assert!(
        against.is_empty(),
        "imports against ARCHITECTURE.md's order of layers: {against:?}"
    );
}

#[test]
fn the_http_framework_and_anyhow_stay_at_the_edges() {
    assert!(some_file_in("admin/", "axum") && some_file_in("cli/", "anyhow"));
    let http_edge = |p: &str| {
        p.starts_with("ingest/")
            || p.starts_with("pull/")
            || p.starts_with("admin/")
            || p.starts_with("console/")
            || p.starts_with("serve/")
            || p.starts_with("fuzzing/")
            || p.starts_with("app/")
            || p == "error/mod.rs"
    };
    let bad = violations(http_edge, |_, code| {
        uses_crate(code, "axum") || uses_crate(code, "hyper") || uses_crate(code, "hyper_util")
    });
    assert!(
        bad.is_empty(),
        "axum or hyper used outside the HTTP edge: {bad:?}"
    );
    let cli_side = |p: &str| p.starts_with("cli/") || p.starts_with("app/") || p == "main.rs";
    let bad = violations(cli_side, |_, code| uses_crate(code, "anyhow"));
    assert!(
        bad.is_empty(),
        "anyhow used outside the command-line side: {bad:?}"
    );
}

#[test]
fn every_file_says_why_it_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let missing: Vec<String> = sources()
        .into_iter()
        .filter(|(path, _)| {
            let text = std::fs::read_to_string(root.join(path)).unwrap_or_default();
            !text.trim_start().starts_with("//!")
        })
        .map(|(path, _)| path)
        .collect();
    assert!(
        missing.is_empty(),
        "files without a //! module doc: {missing:?}"
    );
}

#[test]
fn console_pages_never_skip_html_escaping() {
    // maud escapes every value spliced into a page; `PreEscaped` is the one way
    // around it, and webhook payloads are attacker-controlled.
    assert!(some_file_in("console/", "maud"));
    let bad = violations(
        |p| !p.starts_with("console/"),
        |_, code| code.contains("PreEscaped"),
    );
    assert!(bad.is_empty(), "PreEscaped used in {bad:?}");
}

/// A failure's kind is decided where the failure happens (a sender, the transform)
/// and read back from the store; nothing derives one from an error's text. Only
/// `failure` itself reads kind names; the store reads back the names it wrote, and
/// the dead-letter operations the group name an operator gives.
#[test]
fn no_code_derives_a_failure_kind_from_text() {
    let reads_names = |code: &str| {
        [
            "Failure::of_group",
            "parse::<Failure>",
            "failure::stored(",
            "Failure::from_str",
        ]
        .iter()
        .any(|p| code.contains(p))
    };
    let readers = violations(
        |path| {
            path == "failure.rs"
                || path.starts_with("store/")
                || path == "operations/dead_letters.rs"
        },
        |_, code| reads_names(code),
    );
    assert!(
        readers.is_empty(),
        "kinds read from text outside the failure module, the store and the dead-letter operations: {readers:?}"
    );
    assert!(
        sources()
            .iter()
            .any(|(p, code)| p.starts_with("store/") && reads_names(code)),
        "the check found no reader at all: did the names move?"
    );
    // The text shapes failures were once grouped by.
    let shapes = [
        "strip_prefix(\"HTTP ",
        "starts_with(\"HTTP ",
        "strip_prefix(\"transform: ",
        "starts_with(\"timeout",
        "strip_prefix(\"not retryable",
        "rsplit_once(\"; last: ",
    ];
    let parsers = violations(
        |path| path == "failure.rs",
        |_, code| shapes.iter().any(|s| code.contains(s)),
    );
    assert!(
        parsers.is_empty(),
        "failure texts taken apart outside the failure module: {parsers:?}"
    );
}

/// The backticked spans of `text` outside fenced code blocks.
fn code_spans(text: &str) -> Vec<String> {
    let mut fenced = false;
    let prose: Vec<&str> = text
        .lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect();
    let prose = prose.join("\n");
    assert!(
        prose.matches('`').count().is_multiple_of(2),
        "an unclosed backtick: the spans would be read inside out"
    );
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The top-level modules `src/lib.rs`'s `//!` map lists, in the order it first
/// names them: `[`name`]` links (and `[`name::…`]`), and a bullet opening with a
/// plain `` `name` `` for a module rustdoc does not see.
fn lib_rs_map() -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("read src/lib.rs");
    let doc: Vec<&str> = text
        .lines()
        .map_while(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let start = doc
        .iter()
        .position(|l| *l == "# Layout")
        .expect("src/lib.rs's //! has a `# Layout` section");
    let mut named: Vec<String> = Vec::new();
    let mut add = |name: &str| {
        if !named.iter().any(|n| n == name) {
            named.push(name.to_string());
        }
    };
    for line in doc[start + 1..].iter().take_while(|l| !l.starts_with("# ")) {
        if let Some(rest) = line.strip_prefix("* `")
            && let Some((name, _)) = rest.split_once('`')
        {
            add(name);
        }
        let mut rest = *line;
        while let Some(i) = rest.find("[`") {
            rest = &rest[i + 2..];
            if let Some(j) = rest.find("`]") {
                add(rest[..j].split("::").next().unwrap_or(""));
                rest = &rest[j + 2..];
            }
        }
    }
    named
}

/// The modules `src/lib.rs` declares (`pub mod name;`, under a `cfg` or not).
fn lib_rs_modules() -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("read src/lib.rs");
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect()
}

/// ARCHITECTURE.md is the map a newcomer reads: short enough to read, naming only
/// paths that exist, and listing the rooms `src/lib.rs`'s map lists, in the order
/// of its Layers line.
#[test]
fn the_map_names_real_paths_and_lib_rs_lists_its_rooms() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("read ARCHITECTURE.md");
    let words = doc.split_whitespace().count();
    assert!(
        words <= 2_000,
        "ARCHITECTURE.md has {words} words: a map, at most 2,000 (file detail goes in each module's //!)"
    );

    // Every path it names exists: a span under one of these folders, or a file at
    // the root. A file named without its folder (`deliver.rs`) could not be
    // checked, so it is refused too.
    let folders = [
        "src/",
        "tests/",
        "benches/",
        "fuzz/",
        "scripts/",
        "providers/",
        "deploy/",
        "examples/",
    ];
    let root_file = |s: &str| {
        !s.contains('/')
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && [".md", ".json", ".toml", ".lock"]
                .iter()
                .any(|x| s.ends_with(x))
    };
    let exists = |p: &str| match p.rsplit_once('/') {
        // `providers/*.toml`: the folder holds a match.
        Some((dir, pattern)) if pattern.contains('*') => {
            let (head, tail) = pattern.split_once('*').unwrap_or((pattern, ""));
            std::fs::read_dir(root.join(dir)).is_ok_and(|entries| {
                entries.flatten().any(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    name.starts_with(head) && name.ends_with(tail)
                })
            })
        }
        _ => root.join(p).exists(),
    };
    let spans = code_spans(&doc);
    let paths: Vec<&String> = spans
        .iter()
        .filter(|s| !s.contains(char::is_whitespace))
        .filter(|s| folders.iter().any(|f| s.starts_with(f)) || root_file(s.as_str()))
        .collect();
    assert!(
        paths.len() > 20,
        "the check found almost no paths in ARCHITECTURE.md: {paths:?}"
    );
    let missing: Vec<&&String> = paths.iter().filter(|p| !exists(p.as_str())).collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
    let partial: Vec<&String> = spans
        .iter()
        .filter(|s| !s.contains(char::is_whitespace))
        .filter(|s| s.ends_with(".rs") || s.ends_with(".lua"))
        .filter(|s| !folders.iter().any(|f| s.starts_with(f)))
        .collect();
    assert!(
        partial.is_empty(),
        "ARCHITECTURE.md names files without their folder (name them from the repository root): {partial:?}"
    );

    // Its rooms: the top-level modules its Rooms section names by path.
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Rooms"))
        .expect("ARCHITECTURE.md has a Rooms section");
    let mut rooms: Vec<String> = Vec::new();
    for span in code_spans(section) {
        let Some(rest) = span.strip_prefix("src/") else {
            continue;
        };
        let top = rest
            .split('/')
            .next()
            .unwrap_or(rest)
            .trim_end_matches(".rs");
        if top != "main" && top != "lib" && !rooms.iter().any(|r| r == top) {
            rooms.push(top.to_string());
        }
    }

    let modules = lib_rs_modules();
    assert!(
        modules.len() > 15,
        "no modules read from src/lib.rs: {modules:?}"
    );
    let map = lib_rs_map();
    let unreal: Vec<&String> = map
        .iter()
        .filter(|m| {
            !modules.contains(*m)
                || !(root.join(format!("src/{m}.rs")).exists()
                    || root.join(format!("src/{m}/mod.rs")).exists())
        })
        .collect();
    assert!(
        unreal.is_empty(),
        "src/lib.rs's map lists what is no module of the crate: {unreal:?}"
    );
    let unlisted: Vec<&String> = rooms.iter().filter(|r| !map.contains(*r)).collect();
    assert!(
        unlisted.is_empty(),
        "rooms of ARCHITECTURE.md that src/lib.rs's map does not list: {unlisted:?}"
    );
    let unmapped: Vec<&String> = modules.iter().filter(|m| !rooms.contains(*m)).collect();
    assert!(
        unmapped.is_empty(),
        "modules that ARCHITECTURE.md's Rooms section does not name: {unmapped:?}"
    );
    assert_eq!(
        map,
        declared_layers(),
        "src/lib.rs's map lists the modules in ARCHITECTURE.md's order of layers"
    );
}
