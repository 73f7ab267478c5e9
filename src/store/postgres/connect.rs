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

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio_postgres::config::{ChannelBinding, Host, SslMode};
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::PgSslMode as Mode;
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
    #[error(
        "store.url: sslrootcert is read with sslmode=verify-full (or no sslmode), not sslmode={0}"
    )]
    RootCertWithoutVerify(&'static str),
    #[error("store.url: sslrootcert {path:?}: {why}")]
    RootCert { path: PathBuf, why: String },
    #[error("store.url: cannot set up TLS: {0}")]
    Tls(#[source] rustls::Error),
    #[error("cannot build the connection pool: {0}")]
    Pool(#[source] deadpool_postgres::BuildError),
}

/// How the connection is encrypted and who may be sent the password, from the URL's
/// `sslmode` and `sslrootcert` and, without an `sslmode`, from its hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tls {
    /// `disable`, asked for: never encrypted; the server is sent what it asks for.
    /// Warned about at start and by `check-config` when a host is not on this
    /// machine ([`UrlWarning`]).
    Off,
    /// No `sslmode`, and every host is a loopback address or a Unix socket: encrypted
    /// if the server offers it (libpq's `prefer`), the certificate not checked, any
    /// authentication: the connection does not leave the machine.
    Local,
    /// `prefer` or `require`, asked for: encrypted (required with `require`), the
    /// certificate not checked, so the server is not known to be the right one, and
    /// channel binding is required: the password goes only through SCRAM-SHA-256-PLUS,
    /// bound to this TLS channel, which proves the server knows the password's
    /// verifier and that no one relays between the two. A server that asks for a
    /// cleartext or MD5 password, for SCRAM without binding (which needs TLS, so
    /// `prefer` to a server without it fails too), or for none is refused before
    /// anything is sent: an impostor learns nothing.
    Unverified(SslMode),
    /// `verify-full`, and the default for any host not on this machine: encrypted,
    /// the certificate checked against `roots` and the host name; then the server is
    /// the right one and may ask for the password however it likes.
    Verified(Roots),
}

/// What a `verify-full` connection trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// The system's trust store (`SSL_CERT_FILE` names another, for every TLS
    /// connection of the process).
    System,
    /// The PEM certificates of `sslrootcert=<file>`, for this store alone: a private
    /// CA trusted here does not replace the system's store for the rest of hookgate.
    File(PathBuf),
}

/// The parsed `store.url` and how to encrypt.
pub(crate) struct Target {
    config: tokio_postgres::Config,
    tls: Tls,
}

/// What an operator should hear about a `store.url` that hookgate nonetheless uses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlWarning {
    /// `sslmode=disable` to a host that is not on this machine.
    #[error(
        "store.url: sslmode=disable to a host that is not on this machine: the password, if the server asks for one, and every webhook cross the network unencrypted to whoever answers at that address; use it only on a private network (remove sslmode to verify the server's certificate)"
    )]
    Unencrypted,
}

/// Parse `url`: tokio-postgres reads the hosts, the user, the database and
/// `target_session_attrs`; hookgate reads `sslmode` and `sslrootcert` itself, because
/// tokio-postgres knows only `disable`, `prefer` and `require` and leaves the checking
/// of the certificate to the connector.
pub(crate) fn parse(url: &str, timeout: Duration) -> Result<Target, UrlError> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut kept = form_urlencoded::Serializer::new(String::new());
    let mut mode: Option<Mode> = None;
    let mut root_cert: Option<String> = None;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match k.as_ref() {
            "sslmode" => {
                mode = Some(Mode::parse(&v).ok_or_else(|| UrlError::SslMode(v.to_string()))?)
            }
            "sslrootcert" => root_cert = Some(v.into_owned()),
            _ => {
                kept.append_pair(&k, &v);
            }
        }
    }
    let kept = kept.finish();
    let rebuilt = match kept.is_empty() {
        true => base.to_string(),
        false => format!("{base}?{kept}"),
    };
    let mut config: tokio_postgres::Config = rebuilt.parse().map_err(UrlError::Parse)?;
    let tls = decide(mode, root_cert, on_this_machine(&config))?;
    config.ssl_mode(match &tls {
        Tls::Off => SslMode::Disable,
        Tls::Local => SslMode::Prefer,
        Tls::Unverified(mode) => *mode,
        Tls::Verified(_) => SslMode::Require,
    });
    // tokio-postgres then refuses cleartext, MD5, unbound SCRAM and no
    // authentication at all (see `Tls::Unverified`).
    config.channel_binding(match &tls {
        Tls::Unverified(_) => ChannelBinding::Require,
        Tls::Off | Tls::Local | Tls::Verified(_) => ChannelBinding::Prefer,
    });
    // A server that stopped answering is given up on within the store's timeout:
    // at connect, and on an idle connection by the kernel's keepalive.
    config.connect_timeout(timeout);
    config.keepalives(true);
    config.keepalives_idle(Duration::from_secs(10));
    config.application_name("hookgate");
    Ok(Target { config, tls })
}

/// How to connect, from the `sslmode` and `sslrootcert` asked for and whether every
/// host is on this machine: without an `sslmode`, `verify-full` unless the
/// connection stays on the machine (or a root certificate was named).
fn decide(mode: Option<Mode>, root_cert: Option<String>, local: bool) -> Result<Tls, UrlError> {
    let roots = match root_cert {
        // libpq's word for the system's store.
        Some(path) if path == "system" => Some(Roots::System),
        Some(path) => Some(Roots::File(PathBuf::from(path))),
        None => None,
    };
    Ok(match (mode, roots) {
        (Some(Mode::VerifyFull) | None, Some(roots)) => Tls::Verified(roots),
        (Some(Mode::VerifyFull), None) => Tls::Verified(Roots::System),
        (None, None) if local => Tls::Local,
        (None, None) => Tls::Verified(Roots::System),
        (Some(Mode::Disable), None) => Tls::Off,
        (Some(Mode::Prefer), None) => Tls::Unverified(SslMode::Prefer),
        (Some(Mode::Require), None) => Tls::Unverified(SslMode::Require),
        (Some(other), Some(_)) => {
            return Err(UrlError::RootCertWithoutVerify(other.label()));
        }
    })
}

/// Whether every host of `config` is on this machine: a Unix socket, `localhost` or
/// a loopback address (and every `hostaddr` given, which is what is connected to, a
/// loopback address). No host at all is the local socket.
fn on_this_machine(config: &tokio_postgres::Config) -> bool {
    let hosts_local = config.get_hosts().iter().all(|h| match h {
        Host::Unix(_) => true,
        Host::Tcp(name) => is_loopback_name(name),
    });
    hosts_local && config.get_hostaddrs().iter().all(IpAddr::is_loopback)
}

/// `localhost` or a loopback address (an IPv6 one with or without brackets).
fn is_loopback_name(name: &str) -> bool {
    let bare = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    name.eq_ignore_ascii_case("localhost") || bare.parse::<IpAddr>().is_ok_and(|a| a.is_loopback())
}

/// The warnings `url` deserves (see [`UrlWarning`]); none for a URL that does not
/// parse (the store says why when it opens).
pub fn url_warnings(url: &str) -> Vec<UrlWarning> {
    match parse(url, Duration::from_secs(1)) {
        Ok(t) if t.tls == Tls::Off && !on_this_machine(&t.config) => vec![UrlWarning::Unencrypted],
        _ => Vec::new(),
    }
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

fn connector(tls: &Tls) -> Result<MakeRustlsConnect, UrlError> {
    crate::tls::install_provider();
    let config = match tls {
        Tls::Verified(Roots::System) => {
            use rustls_platform_verifier::ConfigVerifierExt as _;
            rustls::ClientConfig::with_platform_verifier().map_err(UrlError::Tls)?
        }
        Tls::Verified(Roots::File(path)) => rustls::ClientConfig::builder()
            .with_root_certificates(root_store(path)?)
            .with_no_client_auth(),
        Tls::Off | Tls::Local | Tls::Unverified(_) => {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            rustls::ClientConfig::builder()
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth()
        }
    };
    Ok(MakeRustlsConnect::new(config))
}

/// The certificates of the PEM file `path`, as the roots of a `verify-full`
/// connection.
fn root_store(path: &Path) -> Result<rustls::RootCertStore, UrlError> {
    use rustls::pki_types::pem::PemObject as _;
    let bad = |why: String| UrlError::RootCert {
        path: path.to_path_buf(),
        why,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(bad("holds no usable PEM certificate".to_string()));
    }
    Ok(roots)
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
        connector(&target.tls)?,
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
    let tls = connector(&target.tls).map_err(|e| StoreError::backend(Backend::Postgres, e))?;
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
        assert_eq!(t.tls, Tls::Verified(Roots::System));
        assert_eq!(t.config.get_ssl_mode(), SslMode::Require);
        assert_eq!(t.config.get_hosts().len(), 2);
        assert_eq!(t.config.get_dbname(), Some("db"));
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

    fn tls_of(url: &str) -> Tls {
        parse(url, Duration::from_secs(5)).unwrap().tls
    }

    #[test]
    fn without_sslmode_a_host_off_this_machine_is_verified() {
        for url in [
            "postgres://u@db.example/db",
            "postgres://u@10.0.0.5:5432/db",
            "postgres://u@[2001:db8::1]/db",
            "postgres://u@localhost,db.example/db",
            "postgres://u@127.0.0.1,10.0.0.5/db",
            "postgres://u@localhost.example/db",
            "postgres://u@127.0.0.1/db?hostaddr=10.0.0.5",
        ] {
            assert_eq!(tls_of(url), Tls::Verified(Roots::System), "{url}");
        }
        for url in [
            "postgres://u@127.0.0.1/db",
            "postgres://u@127.0.0.2:5433/db",
            "postgres://u@LocalHost/db",
            "postgres://u@[::1]:5432/db",
            "postgres://u@localhost,127.0.0.1/db",
            "postgres://u@%2Fvar%2Frun%2Fpostgresql/db",
            "postgres://u@/db?host=/var/run/postgresql",
        ] {
            assert_eq!(tls_of(url), Tls::Local, "{url}");
        }
    }

    #[test]
    fn an_unverified_channel_requires_channel_binding() {
        for (url, mode) in [
            ("postgres://u@db.example/db?sslmode=prefer", SslMode::Prefer),
            ("postgres://u@127.0.0.1/db?sslmode=allow", SslMode::Prefer),
            (
                "postgres://u@db.example/db?sslmode=require",
                SslMode::Require,
            ),
        ] {
            let t = parse(url, Duration::from_secs(5)).unwrap();
            assert_eq!(t.tls, Tls::Unverified(mode), "{url}");
            assert_eq!(t.config.get_channel_binding(), ChannelBinding::Require);
        }
        for url in [
            "postgres://u@db.example/db",
            "postgres://u@127.0.0.1/db",
            "postgres://u@db.example/db?sslmode=disable",
        ] {
            let t = parse(url, Duration::from_secs(5)).unwrap();
            assert_eq!(
                t.config.get_channel_binding(),
                ChannelBinding::Prefer,
                "{url}"
            );
        }
    }

    #[test]
    fn sslrootcert_names_the_roots_of_verify_full() {
        assert_eq!(
            tls_of("postgres://u@db.example/db?sslrootcert=/etc/pg/ca.crt"),
            Tls::Verified(Roots::File("/etc/pg/ca.crt".into()))
        );
        assert_eq!(
            tls_of("postgres://u@127.0.0.1/db?sslmode=verify-full&sslrootcert=%2Fca.pem"),
            Tls::Verified(Roots::File("/ca.pem".into()))
        );
        assert_eq!(
            tls_of("postgres://u@127.0.0.1/db?sslrootcert=system"),
            Tls::Verified(Roots::System)
        );
        for mode in ["disable", "prefer", "require"] {
            let url = format!("postgres://u@db.example/db?sslmode={mode}&sslrootcert=/ca.pem");
            assert!(parse(&url, Duration::from_secs(5)).is_err(), "{url}");
        }
        let t = parse(
            "postgres://u@127.0.0.1/db?sslrootcert=/nonexistent/ca.pem",
            Duration::from_secs(5),
        )
        .unwrap();
        let err = connector(&t.tls).err().expect("no such file").to_string();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
    }

    #[test]
    fn only_disable_to_another_host_is_warned_about() {
        assert_eq!(
            url_warnings("postgres://u:p@db.example/db?sslmode=disable"),
            vec![UrlWarning::Unencrypted]
        );
        for url in [
            "postgres://u:p@127.0.0.1/db?sslmode=disable",
            "postgres://u:p@db.example/db",
            "postgres://u:p@db.example/db?sslmode=require",
            "not a url",
        ] {
            assert!(url_warnings(url).is_empty(), "{url}");
        }
    }
}
