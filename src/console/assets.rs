//! The console's static files, compiled into the binary: no file to ship, no
//! external host to load from, and the Content-Security-Policy can say `'self'`.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// The stylesheet of every page.
pub const CSS_PATH: &str = "/console/assets/console.css";
const CSS: &str = include_str!("assets/console.css");

/// The icon in the tab and the top bar.
pub const ICON_PATH: &str = "/console/assets/icon.svg";
const ICON: &str = include_str!("assets/icon.svg");

/// The pages' one script: Copy buttons and live mode. Every page works without it.
pub const SCRIPT_PATH: &str = "/console/assets/console.js";
const SCRIPT: &str = include_str!("assets/console.js");

pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

pub async fn icon() -> Response {
    asset("image/svg+xml", ICON)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response()
}
