//! `store.min_replicas`: an accept is answered 2xx only once that many replicas hold
//! its write, and `/readyz` answers 503 while a master has fewer replicas online.
//!
//! # How an accept waits
//!
//! The accept script and `WAIT <min_replicas> <ms>` go out as one pipeline on one
//! connection (see `batch`). Redis answers `WAIT` with the number of replicas that
//! acknowledged every write the *connection* (one Redis client) made before it, up
//! to the offset of its last write in the replication stream. Why that is the right
//! answer for every entry of the batch, on a connection other requests share too:
//!
//! * Redis runs one client's commands in the order they came, so the script has run
//!   when `WAIT` reads the connection's last write offset: the offset is at or past
//!   the end of the script's writes. The script always writes (it counts what it
//!   received, or the duplicates), so even a batch of duplicates moves it.
//! * Writes of other calls on the same connection, and of other connections, only
//!   move that offset further. The replication stream is one ordered stream, and a
//!   replica that acknowledged an offset holds everything before it: the batch's
//!   entries, and the writes they rest on (the source registered before its first
//!   accept, the original entry a duplicate answer names, even when another
//!   connection or another gateway wrote it).
//! * A pipeline, not two calls: between two calls the multiplexed connection may be
//!   replaced by a reconnect, and the new Redis client's last write offset is 0, so
//!   its `WAIT` would count every connected replica at once and acknowledge nothing.
//!   On a Redis Cluster a lone `WAIT` goes to every master (the client's routing), on
//!   connections that did not carry the script; the pipeline goes where its first
//!   key's slot lives, the master that ran the script, since every key of a source
//!   shares its slot. `WAIT` counts that master's replicas, which is what a failover
//!   of that master can promote.
//!
//! `WAIT` blocks its connection until it answers, so with `min_replicas` the accepts
//! get connections of their own (`RedisStore::accept_conns`): claims, completions and
//! probes never queue behind a `WAIT` for replicas that are gone.
//!
//! # What it does not guarantee
//!
//! A replica acknowledges a write it has received and applied, not one it has
//! fsynced. `WAIT` makes nothing consistent: a failover that promotes a replica which
//! did not acknowledge (with several replicas, when promotion does not pick the most
//! up-to-date one) still loses the entry. README ("Replicas and failover") says what
//! an operator must arrange.

use std::time::Duration;

use redis::{FromRedisValue, ScriptInvocation, ServerErrorKind};
use tokio::time::Instant;

use super::conn::{Conn, info_reply};
use crate::store::StoreError;

/// The least a `WAIT` is given: `WAIT` with 0 ms would block until the replicas come.
const WAIT_AT_LEAST: Duration = Duration::from_millis(1);

/// How late Redis may answer a `WAIT` past its own timeout: it checks blocked
/// clients' timeouts on its timer, `1000 / hz` ms apart (`hz 10` by default, so
/// `WAIT 1 300` without replicas answers after about 400 ms).
const REDIS_TIMER_LAG: Duration = Duration::from_millis(100);

/// How long the `WAIT` of a batch whose earliest caller gives up at `deadline` may
/// take: what is left until then, less what the answer needs beyond the `WAIT`:
/// Redis's timer lag, then the script's run, the round trip and the 503 or 200 to
/// the sender (a tenth of `store.timeout`, between 20 ms and 250 ms), never more
/// than half of `store.timeout`. Replicas that do not acknowledge in that time make
/// the accept [`StoreError::TooFewReplicas`], answered before the caller's own
/// deadline turns it into a timeout.
pub(super) fn wait_budget(deadline: Instant, timeout: Duration) -> Duration {
    let answer = (timeout / 10).clamp(Duration::from_millis(20), Duration::from_millis(250));
    let margin = (REDIS_TIMER_LAG + answer).min(timeout / 2);
    deadline
        .saturating_duration_since(Instant::now())
        .saturating_sub(margin)
        .max(WAIT_AT_LEAST)
}

/// What an accept's pipeline answered.
pub(super) struct Waited<T> {
    /// The script's answer. `None` when Redis did not know the script (restarted,
    /// flushed) and too few replicas acknowledged: the script was loaded for the
    /// next batch but not run, since its `WAIT` could only have failed too.
    pub answer: Option<T>,
    /// How many replicas acknowledged the connection's writes.
    pub acknowledged: u32,
}

/// Run the accept script `inv` on `conn`, followed in the same pipeline by `WAIT
/// <replicas>` for at most what [`wait_budget`] leaves until `deadline` (see the
/// module docs). A Redis that does not know the script yet runs the `WAIT` all the
/// same, so the script is loaded and sent again only when enough replicas answered
/// that `WAIT`: otherwise the retry would spend a second budget in vain.
pub(super) async fn invoke_and_wait<T: FromRedisValue>(
    inv: &ScriptInvocation<'_>,
    conn: &mut Conn,
    replicas: u32,
    deadline: Instant,
    timeout: Duration,
) -> Result<Waited<T>, redis::RedisError> {
    let (answer, acknowledged) = send(inv, conn, replicas, deadline, timeout).await?;
    let unknown = match answer {
        Ok(answer) => {
            return Ok(Waited {
                answer: Some(answer),
                acknowledged,
            });
        }
        Err(unknown) => unknown,
    };
    inv.load_async(conn).await?;
    if acknowledged < replicas {
        return Ok(Waited {
            answer: None,
            acknowledged,
        });
    }
    match send(inv, conn, replicas, deadline, timeout).await? {
        (Ok(answer), acknowledged) => Ok(Waited {
            answer: Some(answer),
            acknowledged,
        }),
        // Flushed again in between: an error like any other of the script's.
        (Err(_), _) => Err(unknown.into()),
    }
}

/// One pipeline of the script and its `WAIT`: the script's answer, or the error
/// `NOSCRIPT` when Redis does not know it (any other error of either command is the
/// `Err`), and the `WAIT`'s count.
async fn send<T: FromRedisValue>(
    inv: &ScriptInvocation<'_>,
    conn: &mut Conn,
    replicas: u32,
    deadline: Instant,
    timeout: Duration,
) -> Result<(Result<T, redis::ServerError>, u32), redis::RedisError> {
    let ms = u64::try_from(wait_budget(deadline, timeout).as_millis()).unwrap_or(u64::MAX);
    let mut pipe = redis::pipe();
    // Each reply on its own: a `NOSCRIPT` must not hide the `WAIT`'s count.
    pipe.ignore_errors()
        .invoke_script(inv)
        .cmd("WAIT")
        .arg(replicas)
        .arg(ms);
    let (answer, waited): (redis::Value, redis::Value) = pipe.query_async(conn).await?;
    let acknowledged = match waited {
        redis::Value::ServerError(e) => return Err(e.into()),
        other => u32::from_redis_value(other)?,
    };
    let answer = match answer {
        redis::Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript) => Err(e),
        redis::Value::ServerError(e) => return Err(e.into()),
        other => Ok(T::from_redis_value(other)?),
    };
    Ok((answer, acknowledged))
}

/// The fewest replicas online (`state=online` in `INFO replication`) of the one
/// Redis, or of any master of a cluster, with that master's `host:port` (`None` for
/// a single Redis). A replica still in its first full sync is not online: it cannot
/// acknowledge a write yet.
pub(super) async fn fewest_online(
    conn: &Conn,
    timeout: Duration,
) -> Result<(Option<String>, u32), StoreError> {
    let reply = info_reply(conn, "replication", timeout).await?;
    Ok(per_node(&reply)
        .into_iter()
        .map(|(node, text)| (node, online(&text)))
        .min_by_key(|(_, n)| *n)
        .unwrap_or((None, 0)))
}

/// The text of each node in an `INFO` reply: a cluster answers a map of node
/// address to text, a single Redis one text.
fn per_node(reply: &redis::Value) -> Vec<(Option<String>, String)> {
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    };
    match reply {
        redis::Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(node, v)| Some((text(node), text(v)?)))
            .collect(),
        other => text(other).map(|t| (None, t)).into_iter().collect(),
    }
}

/// How many replicas `INFO replication` lists online: lines `slave<n>:…,state=online,…`.
fn online(text: &str) -> u32 {
    let n = text
        .lines()
        .filter_map(|l| l.strip_prefix("slave"))
        .filter_map(|rest| rest.split_once(':'))
        .filter(|(index, fields)| {
            index.chars().all(|c| c.is_ascii_digit())
                && !index.is_empty()
                && fields.split(',').any(|f| f.trim() == "state=online")
        })
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_replicas_online_count() {
        let text = "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n\
                    slave0:ip=10.0.0.2,port=6379,state=online,offset=1201,lag=0\r\n\
                    slave1:ip=10.0.0.3,port=6379,state=wait_bgsave,offset=0,lag=0\r\n\
                    slave2:ip=10.0.0.4,port=6379,state=online,offset=1201,lag=1\r\n\
                    master_failover_state:no-failover\r\nslave_read_only:1\r\n";
        assert_eq!(online(text), 2);
        assert_eq!(
            online("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"),
            0
        );
    }

    #[test]
    fn a_cluster_answers_per_node() {
        let node = |addr: &str, text: &str| {
            (
                redis::Value::SimpleString(addr.into()),
                redis::Value::VerbatimString {
                    format: redis::VerbatimFormat::Text,
                    text: text.into(),
                },
            )
        };
        let reply = redis::Value::Map(vec![
            node(
                "10.0.0.1:7000",
                "slave0:ip=a,port=1,state=online,offset=1,lag=0\r\n",
            ),
            node("10.0.0.2:7000", "connected_slaves:0\r\n"),
        ]);
        let nodes = per_node(&reply);
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[1].0.as_deref(), Some("10.0.0.2:7000"));
    }

    #[test]
    fn a_wait_is_never_unbounded_and_leaves_time_for_the_answer() {
        let timeout = Duration::from_secs(1);
        let budget = wait_budget(Instant::now() + timeout, timeout);
        assert!(budget <= Duration::from_millis(800), "{budget:?}");
        assert!(budget >= Duration::from_millis(700), "{budget:?}");
        let short = Duration::from_millis(100);
        let budget = wait_budget(Instant::now() + short, short);
        assert!(budget <= Duration::from_millis(50), "{budget:?}");
        assert!(budget >= Duration::from_millis(40), "{budget:?}");
        assert_eq!(wait_budget(Instant::now(), timeout), WAIT_AT_LEAST);
    }
}
