//! Who the PostgreSQL store gives its password to. An impostor on loopback speaks
//! just enough of the wire protocol to answer the TLS request (declining it, or with
//! a certificate no one checked) and to ask for the password in cleartext, and keeps
//! whatever it is sent: over a channel whose server is not verified, the store sends
//! nothing; over a verified one (its CA named by `sslrootcert`), and with
//! `sslmode=disable` asked for, it does.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookgate::config;
use hookgate::store;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

const PASSWORD: &str = "s3cret-pg-password";
/// The protocol's code of an SSLRequest (in place of a protocol version).
const SSL_REQUEST: u32 = 80_877_103;

/// What the impostor saw: connections, TLS sessions it completed, passwords sent.
#[derive(Debug, Default, Clone)]
struct Seen {
    connections: usize,
    tls_sessions: usize,
    passwords: Vec<String>,
}

/// A fake PostgreSQL server on loopback that asks every client for a cleartext
/// password; with a certificate, it accepts TLS when asked, else declines it.
struct Impostor {
    port: u16,
    seen: Arc<Mutex<Seen>>,
}

impl Impostor {
    fn start(tls: Option<Arc<rustls::ServerConfig>>) -> Impostor {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (tls, record) = (tls.clone(), record.clone());
                std::thread::spawn(move || {
                    record.lock().unwrap().connections += 1;
                    let _ = serve(stream, tls, &record);
                });
            }
        });
        Impostor { port, seen }
    }

    fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }
}

/// One client: the TLS request if it makes one, the startup message, then a request
/// for a cleartext password and whatever answer comes.
fn serve(
    mut s: TcpStream,
    tls: Option<Arc<rustls::ServerConfig>>,
    record: &Mutex<Seen>,
) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let first = read_untyped(&mut s)?;
    if first.get(..4) != Some(&SSL_REQUEST.to_be_bytes()[..]) {
        // No TLS asked for: that was the startup message.
        return ask_password(&mut s, record);
    }
    match tls {
        None => {
            s.write_all(b"N")?;
            read_untyped(&mut s)?;
            ask_password(&mut s, record)
        }
        Some(config) => {
            s.write_all(b"S")?;
            let conn = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
            let mut tls = rustls::StreamOwned::new(conn, s);
            read_untyped(&mut tls)?;
            record.lock().unwrap().tls_sessions += 1;
            ask_password(&mut tls, record)
        }
    }
}

/// A message without a type byte (the first a client sends): its body.
fn read_untyped(io: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    io.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len).saturating_sub(4).min(10_000) as usize;
    let mut body = vec![0u8; len];
    io.read_exact(&mut body)?;
    Ok(body)
}

/// AuthenticationCleartextPassword, then keep a PasswordMessage if one comes.
fn ask_password(io: &mut (impl Read + Write), record: &Mutex<Seen>) -> std::io::Result<()> {
    io.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3])?;
    io.flush()?;
    let mut kind = [0u8; 1];
    io.read_exact(&mut kind)?;
    let body = read_untyped(io)?;
    if kind[0] == b'p' {
        let password = String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(&body));
        record.lock().unwrap().passwords.push(password.into_owned());
    }
    Ok(())
}

/// A CA, and a certificate it signed for 127.0.0.1 and localhost, made with openssl
/// in `dir`: (the CA's certificate, the server's certificate, its key).
pub(crate) fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let p = |name: &str| dir.join(name);
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::write(
        p("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=impostor test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "server.ext",
        "-out",
        "server.crt",
    ]);
    (p("ca.crt"), p("server.crt"), p("server.key"))
}

fn server_config(crt: &Path, key: &Path) -> Arc<rustls::ServerConfig> {
    let certs = CertificateDer::pem_file_iter(crt)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    Arc::new(config)
}

/// Open the PostgreSQL store at the impostor with `params` in its URL; whether it
/// opened (it never should: the impostor answers no query).
async fn open_at(impostor: &Impostor, params: &str) -> bool {
    let toml = format!(
        "[store]\nkind = \"postgres\"\nurl = \"postgres://hookgate:{PASSWORD}@127.0.0.1:{}/hookgate?{params}\"\ntimeout = \"3s\"\n",
        impostor.port
    );
    let cfg = config::from_toml_str(&toml, &|_| None).expect("store config");
    store::open(&cfg.store, &hookgate::clock::Clock::system())
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impostor_that_declines_tls_is_not_sent_the_password() {
    let impostor = Impostor::start(None);
    assert!(!open_at(&impostor, "sslmode=prefer").await);
    let seen = impostor.seen();
    assert!(seen.connections >= 1, "the store never came: {seen:?}");
    assert_eq!(seen.passwords, Vec::<String>::new(), "{seen:?}");

    // The impostor works: asked for no encryption, the store sends the password.
    assert!(!open_at(&impostor, "sslmode=disable").await);
    let seen = impostor.seen();
    assert!(seen.passwords.iter().all(|p| p == PASSWORD), "{seen:?}");
    assert!(!seen.passwords.is_empty(), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impostor_with_a_certificate_no_one_checked_is_not_sent_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, crt, key) = certificates(dir.path());
    let impostor = Impostor::start(Some(server_config(&crt, &key)));

    // Encrypted, the certificate unchecked: the channel is up, the password stays.
    for mode in ["sslmode=require", "sslmode=prefer"] {
        assert!(!open_at(&impostor, mode).await);
    }
    let seen = impostor.seen();
    assert!(seen.tls_sessions >= 2, "no TLS session: {seen:?}");
    assert_eq!(seen.passwords, Vec::<String>::new(), "{seen:?}");

    // Checked against the system's trust store, which does not know its CA: refused
    // before the startup message.
    assert!(!open_at(&impostor, "sslmode=verify-full").await);
    assert_eq!(impostor.seen().passwords, Vec::<String>::new());

    // Its CA named by sslrootcert: the server is the one the URL names, and may ask
    // for the password as it likes.
    let root = format!("sslrootcert={}", ca.display());
    assert!(!open_at(&impostor, &root).await);
    let seen = impostor.seen();
    assert!(seen.passwords.iter().all(|p| p == PASSWORD), "{seen:?}");
    assert!(!seen.passwords.is_empty(), "{seen:?}");
}

/// `sslmode=disable` to a host that is not on this machine is used as asked, and
/// said at start, before connecting (here nothing answers, and the start fails).
#[test]
fn an_unencrypted_connection_to_another_host_is_warned_about_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let closed = crate::support::free_port();
    let path = crate::support::write_config(
        dir.path(),
        &format!(
            "[store]\nkind = \"postgres\"\nurl = \"postgres://hookgate:{PASSWORD}@db.example:{closed}/hookgate?sslmode=disable&hostaddr=127.0.0.1\"\ntimeout = \"2s\"\n"
        ),
    );
    let (status, stderr) =
        crate::support::serve_until_it_exits(&path, "without a PostgreSQL server");
    assert!(!status.success());
    assert!(
        stderr.contains("sslmode=disable to a host that is not on this machine"),
        "{stderr}"
    );
    assert!(!stderr.contains(PASSWORD), "{stderr}");
}
