//! Connections to PostgreSQL: the URL (several hosts, `target_session_attrs`, TLS),
//! the two pools, and the one way every call runs (within `store.timeout`, a
//! connection that timed out thrown away).
//!
//! tokio-postgres with deadpool-postgres: tokio-postgres is the asynchronous client
//! that follows a multi-host URL to the primary (`target_session_attrs=read-write`)
//! and pipelines statements issued together on one connection; deadpool is the pool
//! the Redis store already uses (deadpool-redis), so both stores recycle and size
//! their connections alike. TLS is rustls, as everywhere else in hookgate
//! (tokio-postgres-rustls).
//!
//! Two pools of `store.connections` each: `durable` commits with the server's
//! `synchronous_commit` (an accept, an operator's action: answered only once on disk,
//! and on a synchronous standby when there is one), `relaxed` with
//! `synchronous_commit = off` (leases, completions, purges: a crash that loses one
//! only makes a delivery go again, as on the embedded store, which answers them at
//! commit, before the fsync).

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::store::{Backend, StoreError};

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> StoreError {
        StoreError::backend(Backend::Postgres, e)
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> StoreError {
        StoreError::backend(Backend::Postgres, e)
    }
}

/// A `store.url` hookgate cannot use, said without the URL (it may hold a password).
#[derive(Debug, thiserror::Error)]
pub(crate) enum UrlError {
    #[error("store.url: {0}")]
    Parse(#[source] tokio_postgres::Error),
    #[error(
        "store.url: sslmode={0:?} is not supported; use disable, prefer, require or verify-full"
    )]
    SslMode(String),
    #[error("store.url: cannot set up TLS: {0}")]
    Tls(#[source] rustls::Error),
    #[error("cannot build the connection pool: {0}")]
    Pool(#[source] deadpool_postgres::BuildError),
}

/// How the connection is encrypted, from the URL's `sslmode` (as libpq reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tls {
    /// `disable`: never.
    Off,
    /// `prefer` (libpq's default) and `require`: encrypted (required with `require`),
    /// the server's certificate not checked, as libpq does without a root
    /// certificate: it stops an eavesdropper, not an impostor.
    Unverified(SslMode),
    /// `verify-full`: encrypted, the certificate checked against the system's trust
    /// store (`SSL_CERT_FILE` names another) and the host name.
    Verified,
}

/// The parsed `store.url` and how to encrypt.
pub(crate) struct Target {
    config: tokio_postgres::Config,
    tls: Tls,
}

/// Parse `url`: tokio-postgres reads the hosts, the user, the database and
/// `target_session_attrs`; hookgate reads `sslmode` itself, because tokio-postgres
/// knows only `disable`, `prefer` and `require` and leaves the checking of the
/// certificate to the connector.
pub(crate) fn parse(url: &str, timeout: Duration) -> Result<Target, UrlError> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut kept = form_urlencoded::Serializer::new(String::new());
    let mut tls = Tls::Unverified(SslMode::Prefer);
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k == "sslmode" {
            tls = match v.as_ref() {
                "disable" => Tls::Off,
                "prefer" | "allow" => Tls::Unverified(SslMode::Prefer),
                "require" => Tls::Unverified(SslMode::Require),
                "verify-full" => Tls::Verified,
                other => return Err(UrlError::SslMode(other.to_string())),
            };
        } else {
            kept.append_pair(&k, &v);
        }
    }
    let kept = kept.finish();
    let rebuilt = match kept.is_empty() {
        true => base.to_string(),
        false => format!("{base}?{kept}"),
    };
    let mut config: tokio_postgres::Config = rebuilt.parse().map_err(UrlError::Parse)?;
    config.ssl_mode(match tls {
        Tls::Off => SslMode::Disable,
        Tls::Unverified(mode) => mode,
        Tls::Verified => SslMode::Require,
    });
    // A server that stopped answering is given up on within the store's timeout:
    // at connect, and on an idle connection by the kernel's keepalive.
    config.connect_timeout(timeout);
    config.keepalives(true);
    config.keepalives_idle(Duration::from_secs(10));
    config.application_name("hookgate");
    Ok(Target { config, tls })
}

/// Accepts any certificate (signatures still checked): `sslmode=require`, as libpq.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn connector(tls: Tls) -> Result<MakeRustlsConnect, UrlError> {
    crate::tls::install_provider();
    let config = match tls {
        Tls::Verified => {
            use rustls_platform_verifier::ConfigVerifierExt as _;
            rustls::ClientConfig::with_platform_verifier().map_err(UrlError::Tls)?
        }
        Tls::Off | Tls::Unverified(_) => {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            rustls::ClientConfig::builder()
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth()
        }
    };
    Ok(MakeRustlsConnect::new(config))
}

/// A pool of `size` connections to `target`, each opened in `schema` and, when
/// `relaxed`, with `synchronous_commit = off`.
pub(crate) fn pool(
    target: &Target,
    schema: &str,
    size: usize,
    relaxed: bool,
) -> Result<Pool, UrlError> {
    let mut config = target.config.clone();
    // Notices (`CREATE SCHEMA IF NOT EXISTS` skipping an existing one) are not news.
    // Statements are prepared once per connection (`cached`), and PostgreSQL keeps
    // a generic plan for each after a few calls. Made while a table was tiny, that
    // plan would scan the whole table (which PostgreSQL prefers on a tiny one), and
    // every claim would read every entry once the tables grew: every query of
    // hookgate is an index lookup, so its sessions plan no sequential scan where an
    // index serves. And no JIT: it compiles a statement whose estimated cost passes
    // `jit_above_cost`, which a generic plan's guesses (or stale statistics after a
    // bulk load) reach for a page of 500 entries read by index in 8 ms, and then
    // spends 400 ms compiling it (BENCHMARKS.md, payload search); every statement of
    // hookgate is short.
    let mut options = format!(
        "-c search_path={schema} -c client_min_messages=warning -c enable_seqscan=off -c jit=off"
    );
    if relaxed {
        options.push_str(" -c synchronous_commit=off");
    }
    config.options(options);
    let manager = Manager::from_config(
        config,
        connector(target.tls)?,
        ManagerConfig {
            // A connection whose server went away is closed by then, and dropped.
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size.max(1))
        .build()
        .map_err(UrlError::Pool)
}

/// A new connection outside the pools (the listener of notifications), in `schema`.
pub(crate) async fn connect_alone(
    target: &Target,
    schema: &str,
) -> Result<
    (
        tokio_postgres::Client,
        tokio_postgres::Connection<
            tokio_postgres::Socket,
            <MakeRustlsConnect as MakeTlsConnect<tokio_postgres::Socket>>::Stream,
        >,
    ),
    StoreError,
> {
    let mut config = target.config.clone();
    config.options(format!(
        "-c search_path={schema} -c client_min_messages=warning"
    ));
    let tls = connector(target.tls).map_err(|e| StoreError::backend(Backend::Postgres, e))?;
    Ok(config.connect(tls).await?)
}

/// Run `work` on a connection of `pool`, all within `timeout` (the wait for a
/// connection included). A connection whose call timed out is thrown away rather
/// than given back: its server may be frozen, and the next caller would wait on it.
/// A call that failed because the server is in recovery (a standby after a
/// failover) closes it too, so that the pool connects again (and finds the
/// primary).
pub(crate) async fn with<T, F>(pool: &Pool, timeout: Duration, work: F) -> Result<T, StoreError>
where
    F: AsyncFnOnce(&mut Object) -> Result<T, StoreError>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut conn = tokio::time::timeout_at(deadline, pool.get())
        .await
        .map_err(|_| StoreError::Timeout(timeout))??;
    match tokio::time::timeout_at(deadline, work(&mut conn)).await {
        Ok(Err(e)) => {
            if read_only(&e) {
                let _ = Object::take(conn);
            }
            Err(e)
        }
        Ok(done) => done,
        Err(_) => {
            let _ = Object::take(conn);
            Err(StoreError::Timeout(timeout))
        }
    }
}

/// Whether `e` says the server refuses writes because it is a standby.
pub(crate) fn read_only(e: &StoreError) -> bool {
    sql_state(e).is_some_and(|s| *s == SqlState::READ_ONLY_SQL_TRANSACTION)
}

/// Whether `e` is a deadlock or a serialization failure: the transaction was rolled
/// back whole, and running it again is safe.
pub(crate) fn retryable(e: &StoreError) -> bool {
    sql_state(e).is_some_and(|s| {
        *s == SqlState::T_R_DEADLOCK_DETECTED || *s == SqlState::T_R_SERIALIZATION_FAILURE
    })
}

fn sql_state(e: &StoreError) -> Option<&SqlState> {
    match e {
        StoreError::Backend {
            backend: Backend::Postgres,
            source,
        } => source
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_is_read_by_hookgate_and_the_rest_by_tokio_postgres() {
        let t = parse(
            "postgres://u:p@h1:5432,h2:5433/db?sslmode=verify-full&target_session_attrs=read-write",
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(t.tls, Tls::Verified);
        assert_eq!(t.config.get_ssl_mode(), SslMode::Require);
        assert_eq!(t.config.get_hosts().len(), 2);
        assert_eq!(t.config.get_dbname(), Some("db"));
        let t = parse("postgres://u@h/db", Duration::from_secs(5)).unwrap();
        assert_eq!(t.tls, Tls::Unverified(SslMode::Prefer));
        let t = parse("postgres://u@h/db?sslmode=disable", Duration::from_secs(5)).unwrap();
        assert_eq!(t.tls, Tls::Off);
        let err = parse(
            "postgres://u:secret@h/db?sslmode=verify-ca",
            Duration::from_secs(5),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            err.contains("verify-ca") && !err.contains("secret"),
            "{err}"
        );
    }
}
