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
            // `open()` names the two backends: the one place that chooses one.
            let code = match path {
                "store/mod.rs" => code
                    .replace("redis::RedisStore::open", "")
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
    // The store's own module names each backend once, to open it.
    let store_mod = violations(
        |p| p != "store/mod.rs",
        |_, code| {
            code.replace("sqlite::SqliteStore::open", "")
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

#[test]
fn the_http_framework_and_anyhow_stay_at_the_edges() {
    assert!(some_file_in("admin/", "axum") && some_file_in("cli/", "anyhow"));
    let http_edge = |p: &str| {
        p.starts_with("ingest/")
            || p.starts_with("admin/")
            || p.starts_with("console/")
            || p.starts_with("telemetry/")
            || p.starts_with("serve/")
            || ["error.rs", "app.rs"].contains(&p)
    };
    let bad = violations(http_edge, |_, code| {
        uses_crate(code, "axum") || uses_crate(code, "hyper") || uses_crate(code, "hyper_util")
    });
    assert!(
        bad.is_empty(),
        "axum or hyper used outside the HTTP edge: {bad:?}"
    );
    let cli_side = |p: &str| p.starts_with("cli/") || ["main.rs", "app.rs"].contains(&p);
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
