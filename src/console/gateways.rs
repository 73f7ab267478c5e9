//! The overview's card of the gateways sharing the store
//! (`crate::operations::gateways`): who runs, which configuration version each
//! runs, and whether each is alive by the store's clock. Every value is escaped, as
//! everywhere in the console.

use maud::{Markup, html};

use super::format::rfc3339_seconds;
use crate::admin::dto::Gateways;

/// How many characters of a version the card shows (the whole one is its title).
const VERSION_SHOWN: usize = 12;

/// The card.
pub(super) fn card(list: &Gateways) -> Markup {
    let mut versions: Vec<&str> = list.gateways.iter().map(|g| g.version.as_str()).collect();
    versions.sort_unstable();
    versions.dedup();
    html! {
        section.card aria-labelledby="gateways" {
            h2 id="gateways" { "Gateways" }
            @if versions.len() > 1 {
                p.bad { "The gateways run " (versions.len()) " configuration versions." }
            }
            @if list.gateways.is_empty() {
                p.muted { "No gateway has written its heartbeat yet." }
            } @else {
                div.table-wrap {
                    table.gateways {
                        caption.visually-hidden { "Gateways on this store" }
                        thead {
                            tr {
                                th scope="col" { "Gateway" }
                                th scope="col" { "Host" }
                                th scope="col" { "Version" }
                                th scope="col" { "Started" }
                                th scope="col" { "Last seen" }
                                th scope="col" { "Alive" }
                            }
                        }
                        tbody {
                            @for g in &list.gateways {
                                tr {
                                    th scope="row" { code { (g.id) } }
                                    td data-label="Host" { (g.host) }
                                    td data-label="Version" {
                                        code title=(g.version) { (g.version.chars().take(VERSION_SHOWN).collect::<String>()) }
                                    }
                                    td data-label="Started" { (rfc3339_seconds(&g.started)) }
                                    td data-label="Last seen" { (rfc3339_seconds(&g.last_seen)) }
                                    td data-label="Alive" {
                                        @if g.alive {
                                            span.badge.active { "Alive" }
                                        } @else {
                                            span.badge.status-dead title="No heartbeat for 10 s or more" { "Silent" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::dto::GatewayState;

    #[test]
    fn values_are_escaped_and_drift_is_said() {
        let evil = "<script>alert(1)</script>";
        let gw = |version: &str, alive| GatewayState {
            id: evil.into(),
            host: evil.into(),
            version: version.into(),
            started: "2026-11-29T04:00:00.000Z".into(),
            last_seen: "2026-11-29T04:10:00.000Z".into(),
            alive,
        };
        let html = card(&Gateways {
            gateways: vec![gw(evil, true), gw("v2", false)],
        })
        .into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(html.contains("run 2 configuration versions"), "{html}");
        assert!(html.contains("Silent"), "{html}");
        let one = card(&Gateways {
            gateways: vec![gw("v2", true)],
        })
        .into_string();
        assert!(!one.contains("configuration versions"), "{one}");
    }
}
