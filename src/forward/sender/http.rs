//! The HTTP(S) sender: a POST of the message to the destination URL, its answer
//! classified into an [`Outcome`].
//!
//! 2xx is delivered. 429 and 503 ask to slow down, and 408 and the other 5xx are
//! unavailable for now (both retried, after the answer's `Retry-After` at least);
//! every other status (3xx: redirects are not followed; 4xx) is refused for good.
//! No answer within the route's timeout is timed out; a connection that could not
//! be made (refused, DNS, TLS) or broke is unreachable. The failure's kind is the
//! status, or the error's type (a `rustls` error is `tls`): never its text. Up to
//! 64 KiB of an answer's body are read, so that the connection is kept alive.

use std::time::Duration;

use super::{Failed, Message, Outcome, Sender};
use crate::failure::Failure;

/// Build the HTTP client of a destination: no redirects (a 3xx is a final answer),
/// the connect timeout, and keep-alive.
pub fn client(connect_timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    crate::tls::install_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(connect_timeout)
        .pool_idle_timeout(Duration::from_secs(60))
        .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// POSTs to one URL.
pub struct HttpSender {
    client: reqwest::Client,
    url: reqwest::Url,
    timeout: Duration,
}

impl HttpSender {
    pub fn new(client: reqwest::Client, url: reqwest::Url, timeout: Duration) -> HttpSender {
        HttpSender {
            client,
            url,
            timeout,
        }
    }
}

#[async_trait::async_trait]
impl Sender for HttpSender {
    async fn send(&self, message: Message) -> Outcome {
        let req = self
            .client
            .post(self.url.clone())
            .timeout(self.timeout)
            .headers(message.headers)
            .body(message.body);
        match req.send().await {
            Ok(mut resp) => {
                let code = resp.status().as_u16();
                let retry_after = resp
                    .headers()
                    .get(::http::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| crate::forward::retry::parse_retry_after(v, message.now_ms));
                // Read (a bounded part of) the body so the connection can be reused.
                // The status is the answer: a body that fails to arrive does not
                // change it.
                let mut read = 0usize;
                while read < 64 * 1024 {
                    match resp.chunk().await {
                        Ok(Some(c)) => read += c.len(),
                        Ok(None) | Err(_) => break,
                    }
                }
                of_status(code, retry_after)
            }
            Err(e) if e.is_timeout() => Outcome::TimedOut(Failed::new(
                Failure::Timeout,
                format!("timeout after {}", humantime::format_duration(self.timeout)),
            )),
            Err(e) => {
                let kind = if is_tls(&e) {
                    Failure::Tls
                } else if e.is_connect() {
                    Failure::Connect
                } else {
                    Failure::Io
                };
                Outcome::Unreachable(Failed::new(kind, format!("{kind}: {}", root_cause(&e))))
            }
        }
    }
}

/// What an HTTP status means (see the module's documentation).
pub fn of_status(code: u16, retry_after: Option<Duration>) -> Outcome {
    let failed = || Failed::new(Failure::Status(code), format!("HTTP {code}"));
    match code {
        200..=299 => Outcome::Delivered {
            status: Some(code),
            answer: None,
        },
        429 | 503 => Outcome::SlowDown {
            failed: failed(),
            retry_after,
        },
        408 | 500..=599 => Outcome::Unavailable {
            failed: failed(),
            retry_after,
        },
        _ => Outcome::Refused(failed()),
    }
}

/// Whether the TLS layer failed (the handshake, a certificate): a `rustls` error
/// somewhere in the cause chain, as itself or inside I/O errors (the connector
/// wraps it in one, inside another: an I/O error's `source` skips what it wraps,
/// so an I/O error is looked into).
fn is_tls(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<rustls::Error>() {
            return true;
        }
        cur = match err.downcast_ref::<std::io::Error>() {
            Some(io) => match io.get_ref() {
                Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                None => None,
            },
            None => err.source(),
        };
    }
    false
}

/// The innermost error message (e.g. "Connection refused (os error 111)"). It never
/// holds request data, nor a URL's `user:password@` should an error quote its URL.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    let text = without_userinfo(&cur.to_string());
    text.chars().take(200).collect()
}

/// `text` with the userinfo of every URL in it removed.
fn without_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace() || c == ')')
            .unwrap_or(tail.len());
        match tail[..end].rfind('@') {
            Some(at) => rest = &tail[at + 1..],
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::retry::{Verdict, classify};

    fn message() -> Message {
        Message {
            headers: ::http::HeaderMap::new(),
            body: bytes::Bytes::from_static(b"{}"),
            now_ms: 0,
            identity: super::super::Identity {
                entry_id: "e".into(),
                source: "s".into(),
                route: "r".into(),
                generation: 0,
                event_type: None,
            },
        }
    }

    #[test]
    fn error_texts_lose_url_userinfo() {
        assert_eq!(
            without_userinfo("error sending request for url (http://u:S3cretPW@h:81/x): boom"),
            "error sending request for url (http://h:81/x): boom"
        );
        assert_eq!(
            without_userinfo("Connection refused (os error 111)"),
            "Connection refused (os error 111)"
        );
        assert_eq!(without_userinfo("a https://h/x@y b"), "a https://h/x@y b");
    }

    #[test]
    fn statuses_are_classified_as_the_contract_says() {
        for code in [200, 201, 204, 299] {
            assert_eq!(
                of_status(code, None),
                Outcome::Delivered {
                    status: Some(code),
                    answer: None
                }
            );
        }
        for code in [429, 503] {
            assert!(
                matches!(of_status(code, None), Outcome::SlowDown { .. }),
                "{code}"
            );
        }
        for code in [408, 500, 502, 504, 599] {
            assert!(
                matches!(of_status(code, None), Outcome::Unavailable { .. }),
                "{code}"
            );
        }
        for code in [
            100, 301, 302, 307, 400, 401, 403, 404, 410, 413, 422, 600, 999,
        ] {
            let o = of_status(code, None);
            assert!(matches!(o, Outcome::Refused(_)), "{code}");
            assert_eq!(o.kind(), Some(Failure::Status(code)));
            assert_eq!(classify(&o), Verdict::Fail);
        }
        let ra = Some(Duration::from_secs(3));
        assert_eq!(of_status(502, ra).retry_after(), ra);
        assert_eq!(of_status(429, ra).retry_after(), ra);
        assert_eq!(of_status(404, ra).retry_after(), None);
    }

    #[tokio::test]
    async fn a_refused_connection_is_unreachable_and_says_why() {
        let s = HttpSender::new(
            client(Duration::from_secs(1)).unwrap(),
            "http://u:S3cretPW@127.0.0.1:1/".parse().unwrap(),
            Duration::from_secs(1),
        );
        let o = s.send(message()).await;
        let Outcome::Unreachable(f) = &o else {
            panic!("{o:?}")
        };
        assert_eq!(f.kind, Failure::Connect);
        assert!(f.detail.starts_with("connect: "), "{}", f.detail);
        assert!(!f.detail.contains("S3cretPW"));
        assert!(o.is_destination_failure());
    }

    #[tokio::test]
    async fn a_server_that_speaks_no_tls_is_a_tls_failure() {
        // An HTTPS destination whose server answers in plain HTTP: the handshake
        // fails, and the kind says TLS (from the error's type).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut sock, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = sock.read(&mut buf).await;
                let _ = sock
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        let s = HttpSender::new(
            client(Duration::from_secs(2)).unwrap(),
            format!("https://{addr}/").parse().unwrap(),
            Duration::from_secs(2),
        );
        let o = s.send(message()).await;
        assert_eq!(o.kind(), Some(Failure::Tls), "{o:?}");
        assert!(matches!(o, Outcome::Unreachable(_)));
    }

    #[tokio::test]
    async fn no_answer_in_time_is_timed_out() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Accepts and never answers.
        let held = tokio::spawn(async move {
            let mut socks = Vec::new();
            while let Ok((sock, _)) = listener.accept().await {
                socks.push(sock);
            }
        });
        let s = HttpSender::new(
            client(Duration::from_secs(1)).unwrap(),
            format!("http://{addr}/").parse().unwrap(),
            Duration::from_millis(200),
        );
        let o = s.send(message()).await;
        held.abort();
        assert_eq!(o.kind(), Some(Failure::Timeout), "{o:?}");
        assert_eq!(o.failed().unwrap().detail, "timeout after 200ms");
    }
}
