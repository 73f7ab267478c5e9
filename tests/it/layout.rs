//! The layout's invariants, read off the source tree (ARCHITECTURE.md names them):
//! backend types stay in their store's folder, the layers only point down, the HTTP
//! framework and `anyhow` stay where they belong, every file says why it exists, and
//! no console page skips HTML escaping.

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
            || p.starts_with("admin/")
            || p.starts_with("console/")
            || p.starts_with("serve/")
            || p.starts_with("fuzzing/")
            || p.starts_with("app/")
            || ["error.rs", "app.rs"].contains(&p)
    };
    let bad = violations(http_edge, |_, code| {
        uses_crate(code, "axum") || uses_crate(code, "hyper") || uses_crate(code, "hyper_util")
    });
    assert!(
        bad.is_empty(),
        "axum or hyper used outside the HTTP edge: {bad:?}"
    );
    let cli_side = |p: &str| {
        p.starts_with("cli/") || p.starts_with("app/") || ["main.rs", "app.rs"].contains(&p)
    };
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
