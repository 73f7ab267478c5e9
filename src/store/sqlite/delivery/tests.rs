//! Tests of the embedded store's deliveries: the plans of claims, what a claim reads
//! behind a line's head, the leases that hold a line back, retention's reads.

use super::*;
use crate::store::sqlite::schema;

/// What SQLite plans for `sql` (a claim query), one line per step.
fn plan(conn: &Connection, sql: &str) -> Vec<String> {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let args: Vec<rusqlite::types::Value> = vec![
        String::from("s").into(),
        String::from("r").into(),
        0i64.into(),
        1i64.into(),
    ];
    let n = stmt.parameter_count();
    stmt.query_map(rusqlite::params_from_iter(args.into_iter().take(n)), |r| {
        r.get::<_, String>(3)
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// Claims and probes walk an index in due order from the route's first due
/// delivery (no sort, no scan of the table): a claim only the deliveries that
/// are not behind a line's head, a probe only deliveries attempted before.
#[test]
fn claims_read_the_route_index_in_due_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = schema::open_connection(&dir.path().join(schema::DB_FILE)).unwrap();
    schema::migrate(&mut conn).unwrap();
    let due = plan(&conn, DUE);
    assert!(
        due[0].contains(
            "USING INDEX deliveries_route (source=? AND route=? AND status=? AND behind=? AND next_attempt_at<?)"
        ),
        "{due:?}"
    );
    let retried = plan(&conn, RETRIED);
    assert!(
        retried[0].contains(
            "USING INDEX deliveries_retried (source=? AND route=? AND next_attempt_at<?)"
        ),
        "{retried:?}"
    );
    for p in [&due, &retried] {
        assert!(!p.iter().any(|l| l.contains("TEMP B-TREE")), "{p:?}");
    }
}

/// A new entry of source `s` through route `r`, stored at `at`; ordered by `key`
/// (`block`ing its line when dead) when there is one.
fn accept(conn: &Connection, id: &str, key: Option<&str>, at: i64) {
    let e = crate::store::NewEntry {
        id: id.to_string(),
        source: "s".into(),
        event_id: Some(id.to_string()),
        event_type: None,
        dedupe_key: id.to_string(),
        dedupe_ttl: std::time::Duration::from_secs(3600),
        received_at: at,
        headers: Vec::new(),
        body: bytes::Bytes::from_static(b"{}"),
        routes: vec!["r".into()],
        ordering: key
            .map(|k| crate::store::RouteOrder {
                route: "r".into(),
                key: k.to_string(),
                block: true,
            })
            .into_iter()
            .collect(),
        index: Vec::new(),
        origin: crate::store::Origin::Received,
    };
    super::super::queries::apply_accept(conn, &e, "[]", at).unwrap();
}

/// What one claim reads, with `waiting` deliveries behind the dead (blocking)
/// head of key `blocked` and as many behind the retrying head of key `retrying`
/// (due in an hour), beside one due unordered delivery: the claim hands out
/// that one alone. Answers the virtual machine steps of the claim's query and
/// the rows it read by walking a table or index from one end (full-scan steps).
fn claim_reads(waiting: usize) -> (i32, i32) {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = schema::open_connection(&dir.path().join(schema::DB_FILE)).unwrap();
    schema::migrate(&mut conn).unwrap();
    let tx = conn.transaction().unwrap();
    accept(&tx, "b0000000", Some("blocked"), 1_000);
    accept(&tx, "r0000000", Some("retrying"), 1_000);
    let heads = claim(&tx, "s", "r", 2_000, 60_000, 10).unwrap();
    assert_eq!(heads.len(), 2);
    for head in heads {
        let completion = match head.entry.id.as_str() {
            "b0000000" => Completion::Dead {
                attempt: None,
                reason: "gone".into(),
            },
            _ => Completion::Release { at: 3_600_000 },
        };
        let done = complete(&tx, &Finished::of(&head), &completion, 2_000);
        assert!(done.unwrap());
    }
    for n in 1..=waiting {
        accept(&tx, &format!("b{n:07}"), Some("blocked"), 3_000);
        accept(&tx, &format!("r{n:07}"), Some("retrying"), 3_000);
    }
    accept(&tx, "u0000000", None, 3_000);
    tx.commit().unwrap();
    let stmt = conn.prepare_cached(DUE).unwrap();
    stmt.reset_status(rusqlite::StatementStatus::VmStep);
    stmt.reset_status(rusqlite::StatementStatus::FullscanStep);
    drop(stmt);
    let claimed = claim(&conn, "s", "r", 4_000, 70_000, 10).unwrap();
    let ids: Vec<&str> = claimed.iter().map(|c| c.entry.id.as_str()).collect();
    assert_eq!(ids, ["u0000000"]);
    let stmt = conn.prepare_cached(DUE).unwrap();
    (
        stmt.get_status(rusqlite::StatementStatus::VmStep),
        stmt.get_status(rusqlite::StatementStatus::FullscanStep),
    )
}

/// A claim reads no delivery that waits behind a line's head: with 20,000
/// behind a blocked head and 20,000 behind a retrying one, it does the work it
/// does with one behind each (before, it read every one of them and looked for
/// an earlier delivery of its key, on the writer thread).
#[test]
fn a_claim_reads_no_delivery_waiting_behind_a_head() {
    let (short_steps, short_scans) = claim_reads(1);
    let (long_steps, long_scans) = claim_reads(20_000);
    assert_eq!((short_scans, long_scans), (0, 0));
    assert!(short_steps < 200, "{short_steps} steps");
    assert_eq!(
        long_steps, short_steps,
        "the line's length costs the claim nothing"
    );
}

/// The rows of `deliveries_leased` (the leases that may hold a line's head back).
fn holding_leases(conn: &Connection) -> Vec<String> {
    conn.prepare(
        "SELECT entry_id FROM deliveries INDEXED BY deliveries_leased
         WHERE source = 's' AND route = 'r' AND order_key = 'k' AND lease_until > 0
           AND (status != 'pending' OR behind = 1) ORDER BY entry_id",
    )
    .unwrap()
    .query_map([], |r| r.get(0))
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// An ordered delivery claimed and delivered writes no lease that holds its line
/// (what made the drain of an ordered route 15-20 % slower, BENCHMARKS.md); a
/// discard while its attempt is in flight does, and the next in line waits for
/// that attempt's end; the completion of a head advances the line by one.
#[test]
fn only_a_lease_that_holds_a_line_back_is_kept_apart() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = schema::open_connection(&dir.path().join(schema::DB_FILE)).unwrap();
    schema::migrate(&mut conn).unwrap();
    let tx = conn.transaction().unwrap();
    for id in ["e1", "e2", "e3"] {
        accept(&tx, id, Some("k"), 1_000);
    }
    let head = claim(&tx, "s", "r", 2_000, 60_000, 10).unwrap();
    assert_eq!(head.len(), 1, "only the head goes");
    assert_eq!(head[0].entry.id, "e1");
    assert!(
        holding_leases(&tx).is_empty(),
        "a head's own lease is not kept apart"
    );
    let delivered = Completion::Delivered {
        attempt: Attempt {
            route: "r".into(),
            n: 1,
            at: 2_000,
            status_code: Some(200),
            failure: None,
            error: None,
            latency_ms: 1,
            answer: None,
        },
    };
    assert!(complete(&tx, &Finished::of(&head[0]), &delivered, 2_100).unwrap());
    let next = claim(&tx, "s", "r", 2_200, 60_000, 10).unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(
        next[0].entry.id, "e2",
        "the completion advanced the line by one"
    );
    let by = Actor::from("test");
    discard(&tx, "e2", Some("r"), &by, "no", 2_300).unwrap();
    assert_eq!(holding_leases(&tx), ["e2"]);
    assert!(
        claim(&tx, "s", "r", 2_400, 60_000, 10).unwrap().is_empty(),
        "e3 waits for the discarded one's attempt in flight"
    );
    assert!(!complete(&tx, &Finished::of(&next[0]), &delivered, 2_500).unwrap());
    assert!(holding_leases(&tx).is_empty());
    let last = claim(&tx, "s", "r", 2_600, 60_000, 10).unwrap();
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].entry.id, "e3");
}

/// A retention pass reads the entries past their cutoff through `entries_done`
/// (status and `updated_at`), never every delivered entry's row: on the writer
/// thread, that walk stalled ingest at each maintenance pass.
#[test]
fn retention_reads_only_the_entries_past_their_cutoff() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = schema::open_connection(&dir.path().join(schema::DB_FILE)).unwrap();
    schema::migrate(&mut conn).unwrap();
    let purge = plan(&conn, super::super::retention::PURGE_CANDIDATES);
    let searches: Vec<&String> = purge.iter().filter(|l| l.contains("entries")).collect();
    assert_eq!(searches.len(), 2, "{purge:?}");
    for s in searches {
        assert!(
            s.contains("USING INDEX entries_done (status=? AND updated_at<?)"),
            "{purge:?}"
        );
    }
}
