//! Console sessions held in the store: a logout revokes the session on every gateway
//! sharing the store (its cookie opens no page and pauses nothing afterwards), "log
//! out everywhere" revokes every session issued until then, and the console's and
//! the API's pauses, resumes and discards are audited with the actor, the session
//! and the client's address. Plain HTTP against real gateways on one Redis.

use serde_json::Value;

use crate::admin::{Admin, admin_config};
use crate::console::{form_token, log_in, no_redirects};
use crate::support::*;

/// The page at `path` with `cookie`: its status, and its body.
async fn page(client: &reqwest::Client, admin: &str, path: &str, cookie: &str) -> (u16, String) {
    let resp = client
        .get(format!("{admin}{path}"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// POST a console form at `path` with `cookie` and the form token `token`.
async fn post_form(
    client: &reqwest::Client,
    admin: &str,
    path: &str,
    cookie: &str,
    fields: &[(&str, &str)],
) -> reqwest::Response {
    client
        .post(format!("{admin}{path}"))
        .header("cookie", cookie)
        .header("origin", admin)
        .form(fields)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logout_revokes_the_session_on_every_gateway_sharing_the_store() {
    let h = StoreHandle::new(Backend::Redis);
    let one = Gateway::start(admin_config(&h, "", &sources_toml())).await;
    let two = Gateway::start(admin_config(&h, "", &sources_toml())).await;
    let client = no_redirects();
    let (a1, a2) = (one.admin.as_str(), two.admin.as_str());
    let session = log_in(&client, a1).await;
    let (st, overview) = page(&client, a2, "/console/", &session).await;
    assert_eq!(st, 200, "a session opens every gateway on the store");
    let token = form_token(&overview);

    let out = post_form(
        &client,
        a1,
        "/console/logout",
        &session,
        &[("csrf", &token)],
    )
    .await;
    assert_eq!(out.status(), 303);
    assert_eq!(out.headers()["location"], "/console/login");

    // The copied cookie opens nothing and pauses nothing, on either gateway.
    for admin in [a1, a2] {
        let (st, _) = page(&client, admin, "/console/sources", &session).await;
        assert_eq!(st, 303, "{admin}: back to the login");
        let pause = post_form(
            &client,
            admin,
            "/console/sources/stripe/pause",
            &session,
            &[("csrf", &token)],
        )
        .await;
        assert_eq!(pause.status(), 303);
        assert_eq!(pause.headers()["location"], "/console/login");
    }
    let api = Admin::new(&two);
    assert_eq!(api.get("/admin/sources").await[0]["paused"], false);
    assert_eq!(api.get("/admin/audit").await, Value::Array(vec![]));
    // Another session is untouched.
    let other = log_in(&client, a2).await;
    assert_eq!(page(&client, a1, "/console/", &other).await.0, 200);
    one.stop().await;
    two.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_out_everywhere_revokes_every_session_issued_until_then() {
    let h = StoreHandle::new(Backend::Redis);
    let one = Gateway::start(admin_config(&h, "", &sources_toml())).await;
    let two = Gateway::start(admin_config(&h, "", &sources_toml())).await;
    let client = no_redirects();
    let (a1, a2) = (one.admin.as_str(), two.admin.as_str());
    let mine = log_in(&client, a1).await;
    let theirs = log_in(&client, a2).await;
    let (_, overview) = page(&client, a1, "/console/", &mine).await;
    assert!(overview.contains("Log out everywhere"));
    let all = post_form(
        &client,
        a1,
        "/console/logout-all",
        &mine,
        &[("csrf", &form_token(&overview))],
    )
    .await;
    assert_eq!(all.status(), 303);
    assert_eq!(all.headers()["location"], "/console/login");
    for (who, cookie) in [("mine", &mine), ("theirs", &theirs)] {
        for admin in [a1, a2] {
            assert_eq!(
                page(&client, admin, "/console/", cookie).await.0,
                303,
                "{who}"
            );
        }
    }
    // A login afterwards is a new session, and it works.
    let again = log_in(&client, a2).await;
    assert_eq!(page(&client, a1, "/console/", &again).await.0, 200);
    one.stop().await;
    two.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pauses_resumes_and_discards_are_audited_with_session_and_client() {
    let h = StoreHandle::new(Backend::Embedded);
    let gw = Gateway::start(admin_config(&h, "", &sources_toml())).await;
    let api = Admin::new(&gw);
    let client = no_redirects();
    let admin = gw.admin.as_str();

    // Through the API: the actor it names, its address, no session.
    let (st, _) = api.call("POST", "/admin/sources/stripe/pause", None).await;
    assert_eq!(st, 200);
    // Through the console: the console, its session, its address.
    let session = log_in(&client, admin).await;
    let (_, sources) = page(&client, admin, "/console/sources", &session).await;
    let token = form_token(&sources);
    let resume = post_form(
        &client,
        admin,
        "/console/sources/stripe/resume",
        &session,
        &[("csrf", &token)],
    )
    .await;
    assert_eq!(resume.status(), 303);

    let audit = api.get("/admin/audit").await;
    let events = audit.as_array().unwrap();
    assert_eq!(events.len(), 2, "{audit}");
    let (console, by_api) = (&events[0], &events[1]);
    assert_eq!(by_api["action"], "pause");
    assert_eq!(by_api["source"], "stripe");
    assert_eq!(by_api["route"], Value::Null);
    assert_eq!(by_api["actor"], "alice");
    assert_eq!(by_api["client"], "127.0.0.1");
    assert!(by_api.get("session").is_none(), "{by_api}");
    assert_eq!(console["action"], "resume");
    assert_eq!(console["actor"], "console");
    assert_eq!(console["client"], "127.0.0.1");
    let session_id = console["session"].as_str().unwrap().to_string();
    assert_eq!(session_id.len(), 32, "{session_id}");
    assert!(
        !session.contains(&session_id),
        "the id is a hash, not the cookie"
    );
    assert_eq!(api.get("/admin/audit?limit=1").await[0], *console);
    let (st, _) = api.call("GET", "/admin/audit?limit=0", None).await;
    assert_eq!(st, 400);
    // The Sources page lists them.
    let (_, sources) = page(&client, admin, "/console/sources", &session).await;
    assert!(sources.contains("Recent pauses and resumes"));
    assert!(sources.contains(&session_id), "{sources}");

    // A discard from the console names the same session and address.
    let (st, v) = post_stripe(&http(), &gw.ingest, "evt_audited").await;
    assert_eq!(st, 200, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let discard = post_form(
        &client,
        admin,
        &format!("/console/entries/{id}/discard"),
        &session,
        &[("csrf", &token), ("note", "test")],
    )
    .await;
    assert_eq!(discard.status(), 303);
    let entry = api.get(&format!("/admin/entries/{id}")).await;
    let event = &entry["audit"][0];
    assert_eq!(event["action"], "discard", "{entry}");
    assert_eq!(event["actor"], "console");
    assert_eq!(event["session"], session_id.as_str());
    assert_eq!(event["client"], "127.0.0.1");
    gw.stop().await;
}
