//! The frame every console page shares: the document head (the embedded stylesheet,
//! no inline style or script), the top bar with the navigation and the logout
//! button, and the page for an error. Pages render with maud, which escapes every
//! value it is given: webhook data must never go through `PreEscaped`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::assets;
use super::cross_site::FORM_TOKEN_FIELD;

/// The console's pages, for the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Overview,
    Entries,
    DeadLetters,
    Rejections,
    Sources,
}

/// The navigation's links, in order.
const NAV: [(Nav, &str, &str); 5] = [
    (Nav::Overview, "/console/", "Overview"),
    (Nav::Entries, "/console/entries", "Entries"),
    (Nav::DeadLetters, "/console/dead-letters", "Dead letters"),
    (Nav::Rejections, "/console/rejections", "Rejections"),
    (Nav::Sources, "/console/sources", "Sources"),
];

/// What the top bar shows for the visitor: the logout buttons (this session, every
/// session) with their form token when they are logged in (no button on a console
/// without a token).
pub struct Chrome {
    pub current: Option<Nav>,
    /// The form token of the logout form; none when nobody logs in.
    pub logout_token: Option<String>,
}

/// A whole page: `title` in the tab and the heading, `content` in `<main>`.
pub fn page(title: &str, chrome: &Chrome, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                a.skip href="#main" { "Skip to content" }
                header.topbar {
                    a.brand href="/console/" {
                        img src=(assets::ICON_PATH) alt="" width="22" height="22";
                        span { "hookgate" }
                    }
                    nav aria-label="Console" {
                        ul {
                            @for (nav, href, label) in NAV {
                                li {
                                    a href=(href)
                                      aria-current=[(chrome.current == Some(nav)).then_some("page")]
                                      { (label) }
                                }
                            }
                        }
                    }
                    @if let Some(token) = &chrome.logout_token {
                        form.logout method="post" action="/console/logout" {
                            input type="hidden" name=(FORM_TOKEN_FIELD) value=(token);
                            button.quiet type="submit" { "Log out" }
                        }
                        form.logout-all method="post" action="/console/logout-all" {
                            input type="hidden" name=(FORM_TOKEN_FIELD) value=(token);
                            button.quiet type="submit"
                                title="Revoke every console session, on every gateway sharing the store" {
                                "Log out everywhere"
                            }
                        }
                    }
                }
                main #main {
                    (content)
                }
            }
        }
    }
}

/// A page without the navigation (the login, an error).
pub fn bare(title: &str, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body.bare {
                main #main { (content) }
            }
        }
    }
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="color-scheme" content="light";
            title { (title) " · hookgate console" }
            link rel="icon" href=(assets::ICON_PATH) type="image/svg+xml";
            link rel="stylesheet" href=(assets::CSS_PATH);
            script src=(assets::SCRIPT_PATH) defer {}
        }
    }
}

/// The page for an error: what happened, and a way back.
pub fn problem(status: StatusCode, message: &str) -> Markup {
    let title = status.canonical_reason().unwrap_or("Error");
    bare(
        title,
        html! {
            section.card.narrow {
                p.eyebrow { (status.as_u16()) }
                h1 { (title) }
                p.message { (message) }
                p { a href="/console/" { "Back to the console" } }
            }
        },
    )
}

/// `markup` as a `text/html` answer.
pub fn html(markup: Markup) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        markup.into_string(),
    )
        .into_response()
}
