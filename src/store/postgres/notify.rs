//! Wake-ups across gateways: an accept notifies (`pg_notify`, sent at its commit)
//! the routes it stored work for, and every gateway on the database listens on one
//! connection of its own and moves those routes' work signals, so a forwarder
//! claims at once instead of at its next poll. A lost connection is opened again;
//! since notifications sent meanwhile are lost, every route is woken then.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use super::connect::{self, Target};
use crate::store::{Wake, WorkSignals};

/// What separates the source from the route in a notification (neither name can
/// hold it: both are validated names).
const SEPARATOR: char = '\n';

/// The payload that names `route` of `source`.
pub(super) fn payload(source: &str, route: &str) -> String {
    format!("{source}{SEPARATOR}{route}")
}

/// The channel of the deployment in `schema` (a name PostgreSQL keeps whole: at
/// most 63 bytes).
pub(super) fn channel(schema: &str) -> String {
    let mut base = schema.to_string();
    base.truncate(57);
    format!("{base}_work")
}

/// Listen on `channel` until the task is aborted (the store's close), waking the
/// routes each notification names.
pub(super) fn start(
    target: Arc<Target>,
    schema: String,
    channel: String,
    work: Arc<WorkSignals>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut first = true;
        loop {
            match listen(&target, &schema, &channel, &work, first).await {
                Ok(()) => tracing::warn!("postgres store: the notification connection closed"),
                Err(e) => tracing::warn!(error = %e, "postgres store: notifications lost"),
            }
            first = false;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

async fn listen(
    target: &Target,
    schema: &str,
    channel: &str,
    work: &WorkSignals,
    first: bool,
) -> Result<(), crate::store::StoreError> {
    let (client, mut conn) = connect::connect_alone(target, schema).await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if tx.send(n.payload().to_string()).is_err() {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            }
        }
    });
    let listening = client.batch_execute(&format!("LISTEN \"{channel}\"")).await;
    if let Err(e) = listening {
        driver.abort();
        return Err(e.into());
    }
    if !first {
        // Whatever was notified while no connection listened.
        work.wake(&Wake::All);
    }
    while let Some(p) = rx.recv().await {
        if let Some((source, route)) = p.split_once(SEPARATOR) {
            work.wake(&Wake::route(source, route));
        }
    }
    drop(client);
    Ok(())
}
