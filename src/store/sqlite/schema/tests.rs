//! Tests of the embedded store's schema: each migration on rows written before it,
//! the indexes created at open, the statement cache, a newer schema refused.

use super::*;

/// The move to routes spells the default route out in its SQL.
#[test]
fn the_route_migration_moves_entries_to_the_default_route() {
    assert_eq!(DEFAULT_ROUTE, "default");
    assert_eq!(ROUTES.matches("'default'").count(), 2);
}

/// An index outside the migrations is created on a store that lacks it (one an
/// older release wrote), and leaves its schema version as it is.
#[test]
fn missing_indexes_are_created_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = open_connection(&dir.path().join(DB_FILE)).unwrap();
    let has = |conn: &Connection, name: &str| -> bool {
        conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'index' AND name = ?1)",
            [name],
            |r| r.get(0),
        )
        .unwrap()
    };
    let version = |conn: &Connection| -> i64 {
        conn.pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap()
    };
    migrate(&mut conn).unwrap();
    let current = version(&conn);
    for (name, _) in INDEXES {
        assert!(has(&conn, name), "{name}");
        conn.execute_batch(&format!("DROP INDEX {name}")).unwrap();
    }
    migrate(&mut conn).unwrap();
    for (name, _) in INDEXES {
        assert!(has(&conn, name), "{name} created again");
    }
    assert_eq!(version(&conn), current);
}

/// A store an older release wrote has its tokenless armings dropped at open: none is
/// honoured (an arming with no token takes anyone's handshake), and armings have a
/// table of their own, with the token's hash.
#[test]
fn armings_without_a_token_are_dropped_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = open_connection(&dir.path().join(DB_FILE)).unwrap();
    migrate(&mut conn).unwrap();
    conn.execute_batch(
        "CREATE TABLE handshakes (source TEXT PRIMARY KEY, until INTEGER NOT NULL) WITHOUT ROWID;
         INSERT INTO handshakes VALUES ('asana', 9223372036854775807);",
    )
    .unwrap();
    migrate(&mut conn).unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE '%handshake%'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(tables, ["armed_handshakes"]);
    let hash = crate::store::TokenHash::of("t");
    assert_eq!(
        crate::store::sqlite::controls::handshake_armed(&conn, "asana", 0).unwrap(),
        None
    );
    crate::store::sqlite::controls::arm_handshake(&conn, "asana", 10, &hash).unwrap();
    assert_eq!(
        crate::store::sqlite::controls::handshake_armed(&conn, "asana", 0).unwrap(),
        Some(10)
    );
}

/// A statement the cache keeps runs with new values without being compiled
/// again. The cache clears a statement's bindings after each use; without the
/// planner's stability guarantee, a statement whose plan SQLite tied to a bound
/// value (the outer join to `payloads`, a delivery's routes in order) is then
/// compiled again at its next use: a third of the writer's time went there while
/// it delivered.
#[test]
fn cached_statements_are_not_compiled_again_for_new_values() {
    use rusqlite::StatementStatus;
    let dir = tempfile::tempdir().unwrap();
    let mut conn = open_connection(&dir.path().join(DB_FILE)).unwrap();
    migrate(&mut conn).unwrap();
    for sql in [
        "SELECT e.id, coalesce(p.body, e.body) FROM entries e
         LEFT JOIN payloads p ON p.n = e.payload WHERE e.id = ?1",
        "SELECT route, status FROM deliveries WHERE entry_id = ?1 ORDER BY position",
    ] {
        for id in ["a", "b", "c", "d"] {
            let mut stmt = conn.prepare_cached(sql).unwrap();
            let mut rows = stmt.query([id]).unwrap();
            while rows.next().unwrap().is_some() {}
        }
        let stmt = conn.prepare_cached(sql).unwrap();
        assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0, "{sql}");
    }
}

/// A store written before lines keeps its lines: each pending ordered delivery
/// with an earlier pending or blocking one of its key is behind, every other is
/// not (a line's first member, whatever ended before it; unordered deliveries;
/// another route's or key's), and what waits behind is out of the claims' index.
#[test]
fn the_lines_migration_finds_the_head_of_every_existing_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = open_connection(&dir.path().join(DB_FILE)).unwrap();
    let before_lines = MIGRATIONS.iter().position(|m| *m == LINES).unwrap();
    for sql in &MIGRATIONS[..before_lines] {
        conn.execute_batch(sql).unwrap();
    }
    conn.pragma_update(None, "user_version", i64::try_from(before_lines).unwrap())
        .unwrap();
    // (entry, route, key, status, block): key k of route r is delivered, then
    // skipped (dead), then blocked (dead), then waits; key j's head retries.
    let rows = [
        ("01", "r", Some("k"), "delivered", 1),
        ("02", "r", Some("k"), "dead", 0),
        ("03", "r", Some("k"), "pending", 1),
        ("04", "r", Some("k"), "dead", 1),
        ("05", "r", Some("k"), "pending", 1),
        ("06", "r", Some("k"), "pending", 1),
        ("07", "r", Some("j"), "pending", 0),
        ("08", "q", Some("k"), "pending", 0),
        ("09", "r", None, "pending", 0),
        ("10", "r", Some("j"), "pending", 0),
        ("11", "r", Some("m"), "dead", 1),
        ("12", "r", Some("m"), "pending", 1),
    ];
    for (id, route, key, status, block) in rows {
        conn.execute(
            "INSERT INTO deliveries (entry_id, route, position, source, status,
                 next_attempt_at, budget_start, updated_at, order_key, order_block)
             VALUES (?1, ?2, 0, 's', ?3, CASE WHEN ?3 = 'pending' THEN 5 END, 0, 0, ?4, ?5)",
            rusqlite::params![id, route, status, key, block],
        )
        .unwrap();
    }
    migrate(&mut conn).unwrap();
    let behind: Vec<(String, bool)> = conn
        .prepare("SELECT entry_id, behind FROM deliveries ORDER BY entry_id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let expected = [
        ("01", false),
        ("02", false),
        ("03", false),
        ("04", false),
        ("05", true),
        ("06", true),
        ("07", false),
        ("08", false),
        ("09", false),
        ("10", true),
        ("11", false),
        ("12", true),
    ];
    let expected: Vec<(String, bool)> = expected
        .iter()
        .map(|(id, b)| (id.to_string(), *b))
        .collect();
    assert_eq!(behind, expected);
    let due: Vec<String> = conn
        .prepare(
            "SELECT entry_id FROM deliveries INDEXED BY deliveries_route
             WHERE source = 's' AND route = 'r' AND status = 'pending' AND behind = 0
             ORDER BY next_attempt_at, entry_id",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(due, ["03", "07", "09"]);
}

/// Schema 7 leaves no delivery that is not pending marked behind (a discard
/// used to keep the mark), and keeps in `deliveries_leased` only the leases that
/// may hold a head back: of a discarded delivery and of one behind, not of a
/// line's head.
#[test]
fn the_lean_lines_migration_clears_ended_marks_and_keeps_only_holding_leases() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = open_connection(&dir.path().join(DB_FILE)).unwrap();
    let before = MIGRATIONS.iter().position(|m| *m == LEAN_LINES).unwrap();
    for sql in &MIGRATIONS[..before] {
        conn.execute_batch(sql).unwrap();
    }
    conn.pragma_update(None, "user_version", i64::try_from(before).unwrap())
        .unwrap();
    // (entry, status, behind, leased): a leased head, a discarded delivery that
    // kept its lease and its mark, one behind with a lease, one behind without.
    let rows = [
        ("01", "pending", 0, true),
        ("02", "discarded", 1, true),
        ("03", "pending", 1, true),
        ("04", "pending", 1, false),
    ];
    for (id, status, behind, leased) in rows {
        conn.execute(
            "INSERT INTO deliveries (entry_id, route, position, source, status,
                 next_attempt_at, budget_start, updated_at, order_key, behind,
                 lease_owner, lease_until)
             VALUES (?1, 'r', 0, 's', ?2, CASE WHEN ?2 = 'pending' THEN 5 END, 0, 0,
                     'k', ?3, CASE WHEN ?4 THEN 'w' END, CASE WHEN ?4 THEN 9 END)",
            rusqlite::params![id, status, behind, leased],
        )
        .unwrap();
    }
    migrate(&mut conn).unwrap();
    let ids = |sql: &str| -> Vec<String> {
        conn.prepare(sql)
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(
        ids("SELECT entry_id FROM deliveries WHERE behind = 1 ORDER BY entry_id"),
        ["03", "04"]
    );
    assert_eq!(
        ids(
            "SELECT entry_id FROM deliveries INDEXED BY deliveries_leased
             WHERE source = 's' AND route = 'r' AND order_key = 'k' AND lease_until > 0
               AND (status != 'pending' OR behind = 1)
             ORDER BY entry_id"
        ),
        ["02", "03"]
    );
    assert_eq!(
        ids("SELECT entry_id FROM deliveries INDEXED BY deliveries_route
             WHERE source = 's' AND route = 'r' AND status = 'pending' AND behind = 0
             ORDER BY next_attempt_at"),
        ["01"]
    );
}

/// An entry stored before origins were kept reads as received, in full and in a
/// listing, and the migration rewrites no row.
#[test]
fn entries_stored_before_origins_read_as_received() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = open_connection(&dir.path().join(DB_FILE)).unwrap();
    let before = MIGRATIONS.iter().position(|m| *m == ORIGINS).unwrap();
    for sql in &MIGRATIONS[..before] {
        conn.execute_batch(sql).unwrap();
    }
    conn.pragma_update(None, "user_version", i64::try_from(before).unwrap())
        .unwrap();
    conn.execute_batch(
        "INSERT INTO entries (id, source, dedupe_key, received_at, status, budget_start,
                              updated_at, headers, body)
             VALUES ('01', 's', 'id:e', 5, 'pending', 5, 5, '[]', x'7b7d');
         INSERT INTO deliveries (entry_id, route, position, source, status,
                                 next_attempt_at, budget_start, updated_at)
             VALUES ('01', 'default', 0, 's', 'pending', 5, 5, 5);",
    )
    .unwrap();
    let changes_before = conn.total_changes();
    migrate(&mut conn).unwrap();
    assert_eq!(conn.total_changes(), changes_before, "no row rewritten");
    let e = crate::store::sqlite::rows::load_entry(&conn, "01")
        .unwrap()
        .unwrap();
    assert_eq!(e.origin, crate::store::Origin::Received);
    let page = crate::store::sqlite::queries::list(
        &conn,
        &crate::store::ListQuery {
            limit: 10,
            ..Default::default()
        },
        10,
    )
    .unwrap();
    assert_eq!(page.entries, vec![e.listed()]);
}

/// A store a newer release migrated is refused, and left as it is.
#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = open_connection(&dir.path().join(DB_FILE)).unwrap();
    migrate(&mut conn).unwrap();
    let newer = i64::try_from(MIGRATIONS.len() + 1).unwrap();
    conn.pragma_update(None, "user_version", newer).unwrap();
    let refused = migrate(&mut conn).unwrap_err().to_string();
    assert!(
        refused.contains("newer than this hookgate knows"),
        "{refused}"
    );
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, newer);
    // The current schema opens again and again.
    conn.pragma_update(None, "user_version", newer - 1).unwrap();
    migrate(&mut conn).unwrap();
    migrate(&mut conn).unwrap();
}
