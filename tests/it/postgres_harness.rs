//! The private PostgreSQL server the PostgreSQL store's suites run on: it starts on a
//! free port as an unprivileged user, takes connections, runs with the durability
//! settings the store will require, and is gone, data directory included, when the
//! test ends.

use crate::support::*;

#[tokio::test]
async fn a_private_postgres_starts_answers_and_is_durable() {
    let pg = PostgresServer::start();
    let (client, conn) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
        .await
        .expect("connect as hookgate");
    let driver = tokio::spawn(conn);
    let row = client
        .query_one("SELECT current_user::text, current_database()::text", &[])
        .await
        .expect("query");
    assert_eq!(row.get::<_, String>(0), "hookgate");
    assert_eq!(row.get::<_, String>(1), "hookgate");
    for (setting, want) in [("fsync", "on"), ("synchronous_commit", "on")] {
        let row = client
            .query_one(&format!("SHOW {setting}"), &[])
            .await
            .expect("show");
        assert_eq!(row.get::<_, String>(0), want, "{setting}");
    }
    // The server is ours: its data directory is the test's.
    let (ok, dir) = pg.psql("SHOW data_directory");
    assert!(ok, "{dir}");
    assert_eq!(dir.trim(), pg.data_dir().display().to_string());
    drop(client);
    driver.abort();
    let data = pg.data_dir();
    let port = pg.port;
    drop(pg);
    assert!(
        !data.exists(),
        "the data directory is removed with the server"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server is stopped with the test"
    );
}
