//! Claiming ahead: a route claims its next deliveries while its current ones are
//! being sent.
//!
//! A destination slot frees the moment an HTTP exchange ends. Were the route to
//! claim only then, each slot would idle for a claim's trip through the store (a
//! write: on Redis a round trip and an fsync, on the embedded store a turn of the
//! writer) between two deliveries, and with a backlog most claims would take one or
//! two deliveries, each claim a write. So a route holds up to [`AHEAD`] times its
//! `concurrency` in claimed deliveries waiting for a slot besides the `concurrency`
//! being sent, and claims again once half a `concurrency` of that room is free (at
//! once when no delivery waits): its slots do not idle while it has a backlog, even
//! while a claim is on its way, and a claim takes several deliveries at a time.
//! Waiting deliveries start in claim order (the semaphores are fair). What a route
//! holds in memory is bounded the same way: at most `AHEAD + 1` times its
//! concurrency in claimed entries.
//!
//! A waiting delivery holds its lease. Waiting is short while the destination
//! answers, but a destination that hangs (or one shared with busy routes) can hold
//! every slot for up to the delivery timeout: a delivery waits at most half of what
//! its lease leaves beyond the delivery timeout, counted from when its claim was
//! sent (a claim the store is slow to answer has spent part of the lease), then
//! gives the lease back, to be claimed again. So a send ends with at least that
//! half of the lease left to record it: a delivery is not claimed again, and sent
//! twice, while its first exchange is still being recorded. When that is under [`MIN_WAIT`] (a lease barely longer than the
//! timeout), and on a paced route (a send slot is for now), the route claims nothing
//! ahead: it takes a destination slot first and claims only as many deliveries as it
//! holds slots for, so no claimed delivery ever waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The shortest wait for a slot worth claiming ahead for.
const MIN_WAIT: Duration = Duration::from_secs(1);

/// How many deliveries a route holds claimed and waiting for a slot, in multiples
/// of its concurrency. The waiting ones must outlast a claim's trip through the
/// store: a route sending `r` deliveries a second runs dry unless `r × claim time`
/// wait (a claim is one call at a time). At one multiple (16 waiting, the default
/// concurrency) a Redis store answering claims in 5–7 ms under load capped a
/// route near 3,000 deliveries a second however fast its destination; at four the
/// cap is four times that. In multiples of the concurrency, the longest wait for a
/// slot stays four exchanges with the destination, whatever the concurrency.
const AHEAD: usize = 4;

/// The claimed deliveries of one route: the room to claim more, and how many wait for
/// a destination slot.
pub(super) struct Ahead {
    /// The destination's slots (shared by every route that delivers there).
    slots: Arc<Semaphore>,
    /// Claiming ahead: one permit per delivery the route may hold claimed, being
    /// sent or waiting ([`room_size`]), and how long one may wait.
    room: Option<(Arc<Semaphore>, Duration)>,
    /// How many claimed deliveries wait for a destination slot.
    waiting: Arc<AtomicUsize>,
    /// How much room a claim waits for while deliveries wait for a slot.
    batch: usize,
    /// How many deliveries the route sends at a time.
    concurrency: usize,
    /// How long after its claim a delivery may still be sent.
    max_wait: Duration,
}

/// One claimed delivery counted among the waiting, until dropped.
struct Waiting(Arc<AtomicUsize>);

impl Waiting {
    fn new(count: &Arc<AtomicUsize>) -> Waiting {
        count.fetch_add(1, Ordering::Relaxed);
        Waiting(count.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a claimed delivery holds from the claim on.
enum Hold {
    /// Its destination slot: taken before the claim; and how long after its claim
    /// it may still be sent.
    Slot(OwnedSemaphorePermit, Duration),
    /// Its room among the route's claims; it waits for a slot.
    Room {
        room: OwnedSemaphorePermit,
        slots: Arc<Semaphore>,
        max_wait: Duration,
        waiting: Waiting,
    },
}

/// A claimed delivery's place: what it holds until it is sent.
pub(super) struct Place(Hold);

/// What a delivery holds while it is sent: dropped when the HTTP exchange ends.
pub(super) struct Sending {
    _slot: OwnedSemaphorePermit,
    _room: Option<OwnedSemaphorePermit>,
}

/// Why a claimed delivery was not sent: it gives its lease back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NotSent {
    /// It waited for a slot as long as its lease allows.
    TooLong,
    /// Shutdown, or the entry was discarded, while it waited.
    Stopped,
}

impl Place {
    /// The latest its transform may end, for a claim sent at `leased_at`: a
    /// transform that has not run by then (it waited for a worker) gives the lease
    /// back as a wait for a slot does. With its slot in hand (no claiming ahead), at
    /// least [`MIN_WAIT`]: a lease barely longer than the timeout still lets a
    /// transform run.
    pub(super) fn deadline(&self, leased_at: Instant) -> Instant {
        match &self.0 {
            Hold::Slot(_, max_wait) => leased_at + (*max_wait).max(MIN_WAIT),
            Hold::Room { max_wait, .. } => leased_at + *max_wait,
        }
    }

    /// Wait for the destination slot (no wait when the claim took it first). Gives
    /// up on `shutdown`, when the entry is `discarded`, or when the wait reaches its
    /// limit, counted from `leased_at` (when the claim was sent; the lease runs from
    /// then).
    pub(super) async fn sending(
        self,
        leased_at: Instant,
        shutdown: &CancellationToken,
        discarded: &CancellationToken,
    ) -> Result<Sending, NotSent> {
        match self.0 {
            Hold::Slot(slot, _) => Ok(Sending {
                _slot: slot,
                _room: None,
            }),
            Hold::Room {
                room,
                slots,
                max_wait,
                waiting,
            } => {
                let deadline = leased_at + max_wait;
                if Instant::now() >= deadline {
                    return Err(NotSent::TooLong);
                }
                let got = tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => Err(NotSent::Stopped),
                    _ = discarded.cancelled() => Err(NotSent::Stopped),
                    p = slots.acquire_owned() => p.map_err(|_| NotSent::Stopped),
                    _ = tokio::time::sleep_until(deadline) => Err(NotSent::TooLong),
                };
                drop(waiting);
                got.map(|slot| Sending {
                    _slot: slot,
                    _room: Some(room),
                })
            }
        }
    }
}

/// The room of a route sending `concurrency` at a time: those being sent, and
/// [`AHEAD`] times as many waiting.
fn room_size(concurrency: usize) -> usize {
    concurrency.saturating_mul(AHEAD + 1)
}

impl Ahead {
    /// The claims of a route sending `concurrency` at a time to a destination whose
    /// slots are `slots`, under `lease` with its delivery `timeout`; `paced`: it has
    /// a rate limit (it then claims nothing ahead).
    pub(super) fn new(
        concurrency: usize,
        slots: Arc<Semaphore>,
        lease: Duration,
        timeout: Duration,
        paced: bool,
    ) -> Ahead {
        let concurrency = concurrency.max(1);
        let max_wait = lease.saturating_sub(timeout) / 2;
        let room = (!paced && max_wait >= MIN_WAIT)
            .then(|| (Arc::new(Semaphore::new(room_size(concurrency))), max_wait));
        Ahead {
            slots,
            batch: if room.is_some() {
                concurrency.div_ceil(2)
            } else {
                1
            },
            room,
            waiting: Arc::new(AtomicUsize::new(0)),
            concurrency,
            max_wait,
        }
    }

    /// Deliveries the route holds claimed (being sent or waiting); without claiming
    /// ahead, the destination's slots in use.
    pub(super) fn held(&self) -> usize {
        match &self.room {
            Some((room, _)) => room_size(self.concurrency).saturating_sub(room.available_permits()),
            None => self
                .concurrency
                .saturating_sub(self.slots.available_permits()),
        }
    }

    /// Wait for room to claim up to `limit` deliveries: at least one delivery's, and
    /// while deliveries wait for a destination slot, half the concurrency's (or
    /// `limit`); then take all the room there is, up to `limit`. Without claiming
    /// ahead, the room is destination slots. `None` on shutdown.
    pub(super) async fn room(
        &self,
        limit: usize,
        shutdown: &CancellationToken,
    ) -> Option<Vec<Place>> {
        let (sem, max_wait) = match &self.room {
            Some((room, max_wait)) => (room.clone(), Some(*max_wait)),
            None => (self.slots.clone(), None),
        };
        let limit = limit.max(1);
        let mut got = Vec::with_capacity(limit);
        loop {
            let permit = tokio::select! {
                _ = shutdown.cancelled() => return None,
                p = sem.clone().acquire_owned() => p.ok()?,
            };
            got.push(permit);
            while got.len() < limit {
                match sem.clone().try_acquire_owned() {
                    Ok(p) => got.push(p),
                    Err(_) => break,
                }
            }
            let enough = got.len() >= limit.min(self.batch);
            if enough || self.waiting.load(Ordering::Relaxed) == 0 {
                break;
            }
        }
        Some(
            got.into_iter()
                .map(|permit| match max_wait {
                    None => Place(Hold::Slot(permit, self.max_wait)),
                    Some(max_wait) => Place(Hold::Room {
                        room: permit,
                        slots: self.slots.clone(),
                        max_wait,
                        waiting: Waiting::new(&self.waiting),
                    }),
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(60);
    const TIMEOUT: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_claim_waits_for_half_the_room_while_deliveries_wait() {
        let slots = Arc::new(Semaphore::new(4));
        let ahead = Ahead::new(4, slots.clone(), LEASE, TIMEOUT, false);
        let (shutdown, discarded) = (CancellationToken::new(), CancellationToken::new());
        // Nothing held: room for the concurrency and four times as many waiting, up
        // to the limit.
        let mut places = ahead.room(64, &shutdown).await.expect("room");
        assert_eq!(places.len(), 20);
        assert_eq!(ahead.held(), 20);
        // Four get a slot; four wait for one.
        let mut sending = Vec::new();
        for _ in 0..4 {
            let place = places.remove(0);
            sending.push(
                place
                    .sending(Instant::now(), &shutdown, &discarded)
                    .await
                    .expect("a slot"),
            );
        }
        assert_eq!(slots.available_permits(), 0);
        // One ends: with sixteen waiting, one delivery's room is not enough to claim.
        drop(sending.remove(0));
        // (Paused time: the timeout fires once nothing else can run.)
        let wait = tokio::time::timeout(Duration::from_secs(1), ahead.room(64, &shutdown));
        assert!(
            wait.await.is_err(),
            "claimed room for one while sixteen wait"
        );
        assert_eq!(ahead.held(), 19, "a claim that gave up keeps no room");
        // A second ends: two deliveries' room is half the concurrency.
        drop(sending.remove(0));
        let two = ahead.room(64, &shutdown).await.expect("room");
        assert_eq!(two.len(), 2);
        // Nothing waits any more (unused places count for nothing): one's room is
        // enough.
        drop(places);
        drop(two);
        let one = ahead.room(1, &shutdown).await.expect("room");
        assert_eq!(one.len(), 1);
        shutdown.cancel();
        drop((sending, one));
    }

    #[tokio::test(start_paused = true)]
    async fn a_delivery_waits_for_its_slot_at_most_half_of_what_its_lease_leaves() {
        let slots = Arc::new(Semaphore::new(1));
        let ahead = Ahead::new(1, slots.clone(), LEASE, TIMEOUT, false);
        let (shutdown, discarded) = (CancellationToken::new(), CancellationToken::new());
        let mut places = ahead.room(2, &shutdown).await.expect("room");
        let busy = places
            .remove(0)
            .sending(Instant::now(), &shutdown, &discarded)
            .await;
        assert!(busy.is_ok());
        let start = Instant::now();
        let waited = places
            .remove(0)
            .sending(Instant::now(), &shutdown, &discarded)
            .await;
        assert_eq!(waited.err(), Some(NotSent::TooLong));
        assert_eq!(start.elapsed(), Duration::from_secs(25));
        // The wait counts from the claim: one the store answered after 20 s waits
        // 5 s more; past 25 s, none, even with a slot free.
        let place = ahead.room(1, &shutdown).await.expect("room").remove(0);
        let leased_at = Instant::now();
        tokio::time::advance(Duration::from_secs(20)).await;
        let start = Instant::now();
        let waited = place.sending(leased_at, &shutdown, &discarded).await;
        assert_eq!(waited.err(), Some(NotSent::TooLong));
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        drop(busy);
        let place = ahead.room(1, &shutdown).await.expect("room").remove(0);
        let leased_at = Instant::now();
        tokio::time::advance(Duration::from_secs(25)).await;
        assert_eq!(slots.available_permits(), 1);
        assert_eq!(
            place.sending(leased_at, &shutdown, &discarded).await.err(),
            Some(NotSent::TooLong)
        );
        // A discard ends the wait at once.
        let place = ahead.room(1, &shutdown).await.expect("room").remove(0);
        discarded.cancel();
        assert_eq!(
            place
                .sending(Instant::now(), &shutdown, &discarded)
                .await
                .err(),
            Some(NotSent::Stopped)
        );
    }

    #[tokio::test]
    async fn a_paced_route_or_a_short_lease_claims_only_for_slots_in_hand() {
        for (lease, paced) in [(LEASE, true), (Duration::from_secs(11), false)] {
            let slots = Arc::new(Semaphore::new(3));
            let ahead = Ahead::new(3, slots.clone(), lease, TIMEOUT, paced);
            let (shutdown, discarded) = (CancellationToken::new(), CancellationToken::new());
            let places = ahead.room(64, &shutdown).await.expect("room");
            assert_eq!(places.len(), 3, "lease {lease:?}, paced {paced}");
            assert_eq!(slots.available_permits(), 0, "the slots are taken at once");
            assert_eq!(ahead.held(), 3);
            for place in places {
                assert!(
                    place
                        .sending(Instant::now(), &shutdown, &discarded)
                        .await
                        .is_ok()
                );
            }
            assert_eq!(slots.available_permits(), 3);
        }
    }
}
