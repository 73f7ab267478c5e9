//! A real browser for the console's tests: Debian's headless `chromium` behind a
//! private `chromedriver` on a free port, driven over WebDriver (fantoccini),
//! with the steps the tests share: log in, find buttons and fields by their names,
//! set the viewport, save screenshots under `target/console-screenshots/`.

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::admin::TOKEN;
use crate::support::*;

/// How long a browser step may take.
pub const WAIT: Duration = Duration::from_secs(20);

/// Headless Chromium behind a private chromedriver on a free port; both end
/// with it.
pub struct Browser {
    pub client: Client,
    driver: Child,
    /// chromedriver's port and the session's id: ending the session ends Chromium,
    /// which runs outside chromedriver's process group.
    port: u16,
    session: String,
    /// Chromium's profile, removed at the end.
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> Browser {
        let binary = |name: &str, package: &str| -> PathBuf {
            let p = PathBuf::from("/usr/bin").join(name);
            assert!(
                p.exists(),
                "{} is missing: install it with `apt-get install -y {package}` (.ci/run does)",
                p.display()
            );
            p
        };
        let chromedriver = binary("chromedriver", "chromium-driver");
        let chromium = binary("chromium", "chromium");
        let port = free_port();
        // In a process group of its own, so that ending the group ends the browsers
        // it started too, even when a test fails half-way.
        let driver = Command::new(chromedriver)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let probe = http();
        wait_until("chromedriver to answer", WAIT, async || {
            probe
                .get(format!("{url}/status"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await;
        let profile = tempfile::tempdir().expect("a profile directory");
        let caps = json!({
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--window-size=1280,800",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }
        });
        let Value::Object(caps) = caps else {
            unreachable!()
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&url)
            .await
            .expect("a WebDriver session in headless Chromium");
        let session = client
            .session_id()
            .await
            .expect("the session id")
            .expect("a session");
        Browser {
            client,
            driver,
            port,
            session,
            _profile: profile,
        }
    }

    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        // The session is over; drop ends chromedriver.
        self.session.clear();
    }

    /// The path of the page the browser shows, once it is `path`.
    pub async fn wait_for_path(&self, path: &str) {
        let c = &self.client;
        wait_until(&format!("the browser to show {path}"), WAIT, async || {
            c.current_url().await.is_ok_and(|u| u.path() == path)
        })
        .await;
    }

    /// The text of the first element matching `css`, once there is one.
    pub async fn text_of(&self, css: &str) -> String {
        self.client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
            .text()
            .await
            .expect("element text")
    }

    /// The `value` of the first element matching `css`.
    pub async fn value_of(&self, css: &str) -> String {
        self.client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
            .attr("value")
            .await
            .expect("attribute")
            .unwrap_or_default()
    }

    /// Click the button named `name` (as a screen reader would find it).
    pub async fn click_button(&self, name: &str) {
        self.client
            .find(Locator::XPath(&format!(
                "//button[normalize-space()='{name}']"
            )))
            .await
            .unwrap_or_else(|e| panic!("no button {name:?}: {e}"))
            .click()
            .await
            .expect("click");
    }

    /// Type `text` into the field labelled `label` (a real `<label for>`).
    pub async fn fill(&self, label: &str, text: &str) {
        let id = self
            .client
            .find(Locator::XPath(&format!(
                "//label[normalize-space()='{label}']"
            )))
            .await
            .unwrap_or_else(|e| panic!("no label {label:?}: {e}"))
            .attr("for")
            .await
            .expect("attribute")
            .unwrap_or_else(|| panic!("label {label:?} names no field"));
        let field = self
            .client
            .find(Locator::Id(&id))
            .await
            .expect("the labelled field");
        field.clear().await.expect("clear");
        field.send_keys(text).await.expect("type");
    }

    /// Make the page's viewport `width`×`height` CSS pixels: the window is larger by
    /// its frame (a headless window has one too), and a narrow window keeps a
    /// minimum width, so the window is corrected until the viewport is right.
    pub async fn viewport(&self, width: u32, height: u32) {
        let c = &self.client;
        wait_until(&format!("a {width}x{height} viewport"), WAIT, async || {
            let Ok(got) = c
                .execute(
                    "return [window.innerWidth, window.innerHeight, window.outerWidth, window.outerHeight];",
                    vec![],
                )
                .await
            else {
                return false;
            };
            let n = |i: usize| got[i].as_i64().unwrap_or(0);
            if (n(0), n(1)) == (i64::from(width), i64::from(height)) {
                return true;
            }
            let outer = |i: usize, want: u32| (n(i + 2) + i64::from(want) - n(i)).max(1) as u32;
            let _ = c.set_window_size(outer(0, width), outer(1, height)).await;
            false
        })
        .await;
    }

    /// Assert that the page is no wider than the window (tables scroll inside their
    /// own box).
    pub async fn assert_no_sideways_scroll(&self, what: &str) {
        let widths = self
            .client
            .execute(
                "const e = document.documentElement; return [e.scrollWidth, e.clientWidth];",
                vec![],
            )
            .await
            .expect("page widths");
        assert_eq!(widths[0], widths[1], "{what}: the page scrolls sideways");
    }

    /// Save what the browser shows as `target/console-screenshots/{name}.png`.
    pub async fn screenshot(&self, name: &str) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots");
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A test that failed half-way never reached `close`: end the session here
        // (blocking, as a drop must), which quits Chromium. After `close` it is gone
        // already and chromedriver says so.
        use std::io::{Read as _, Write as _};
        if !self.session.is_empty()
            && let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port))
        {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let req = format!(
                "DELETE /session/{} HTTP/1.1\r\nhost: 127.0.0.1:{}\r\nconnection: close\r\n\r\n",
                self.session, self.port
            );
            if s.write_all(req.as_bytes()).is_ok() {
                // The answer comes once Chromium has quit.
                let _ = s.read(&mut [0u8; 64]);
            }
        }
        // SAFETY: a plain kill(2) of the group whose leader is our own child.
        if let Ok(pid) = i32::try_from(self.driver.id()) {
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        let _ = self.driver.wait();
    }
}

impl Browser {
    /// Log in through the login form, landing on the overview.
    pub async fn log_in(&self, gw: &Gateway) {
        self.client
            .goto(&format!("{}/console/", gw.admin))
            .await
            .expect("open the console");
        self.wait_for_path("/console/login").await;
        self.fill("Admin token", TOKEN).await;
        self.click_button("Log in").await;
        self.wait_for_path("/console/").await;
    }

    /// Wait until the page has a button named `name` (after a form's redirect back
    /// to the same page, say).
    pub async fn wait_for_button(&self, name: &str) {
        self.client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::XPath(&format!(
                "//button[normalize-space()='{name}']"
            )))
            .await
            .unwrap_or_else(|e| panic!("no button {name:?} on the page: {e}"));
    }
}

/// A page on another origin (another port of 127.0.0.1: same site, other origin)
/// serving `html`.
pub async fn other_site(html: String) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let html = html.clone();
            async move { axum::response::Html(html) }
        }),
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}
