//! The gateway's side of the transform workers: a few child processes (`worker`),
//! each driven by a task of its own, started when first needed, killed at a run's
//! deadline or when the pool is dropped, and started again for the next run.
//!
//! **Batches.** A run costs a worker about 15 µs of CPU (a Stripe event of 1–4 KiB,
//! a three-field program, release build) but a round trip through two processes'
//! scheduling. So a worker's task takes up to [`BATCH`] waiting runs of one route at
//! a time, writes them to its worker in one write and reads their answers as they
//! come: the round trip is paid once per batch, not once per run.
//!
//! **Fair scheduling.** Each route (each program) has a queue of its own. A task
//! that is free takes its next batch from the next route, in turn, that has runs
//! waiting and fewer than its share of the workers busy: at most half of them
//! ([`share`]), so a route whose program is slow (or endless) never holds more than
//! half of the workers, and the other routes keep the rest. A batch never mixes
//! routes: a slow program delays only runs of its own route. A run whose caller went
//! away while it waited (a preview no one waits for) is never started, nor one that
//! was to start by a time that passed while it waited ([`Pool::run_by`]: a delivery
//! that has used the part of its lease it may wait): it answers
//! [`TransformError::Late`], and the delivery gives its lease back unsent.
//!
//! **Deadlines.** A run's `transform_timeout` counts from when its worker starts it
//! (when the answer before it came, or when the batch was written), in the worker's
//! CPU time where the system tells it (Linux): a worker that the machine did not
//! schedule, during a burst, has not used its deadline waiting. A run also ends when
//! twice its timeout and [`WALL_GRACE`] have passed on the clock, whatever the CPU
//! says. At the deadline the worker is killed; the run is tried once more, first, on
//! a fresh worker, and only a second timeout is its answer (`transform: timeout`).
//! The runs of the batch behind it had not started: they go to that new worker too.
//!
//! **Limits.** A worker's address space is bounded (`transform_memory_bytes`,
//! [`DEFAULT_MEMORY`]); a run that needs more ends its worker and fails as
//! `crashed`. Input nested deeper than `worker::MAX_DEPTH` fails as `runtime`
//! before it is parsed. See `worker` for what else a worker may not do.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use super::TransformError;
use super::protocol::{
    Failure, Init, Job, Ready, Reply, read_frame_async, read_message_async, write_frame_async,
};
use super::shape::Shaped;

/// Workers per core, and the most a pool runs.
const WORKERS_PER_CORE: usize = 2;
const MAX_WORKERS: usize = 16;
/// The most runs one write hands a worker.
const BATCH: usize = 32;
/// How long a worker may take to start and compile the programs.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How much longer than twice its timeout a run may take on the clock while its
/// worker had not used its timeout in CPU time.
pub const WALL_GRACE: Duration = Duration::from_secs(1);
/// The address space a worker may use by default (`transform_memory_bytes`).
pub const DEFAULT_MEMORY: u64 = 512 << 20;
/// The least address space a worker can start with: its 256 MiB stack, the
/// executable and the allocator's arenas.
pub const MIN_MEMORY: u64 = 384 << 20;

/// How many workers a pool runs: two per core, at most [`MAX_WORKERS`].
pub fn default_workers() -> usize {
    (std::thread::available_parallelism().map_or(2, |n| n.get()) * WORKERS_PER_CORE)
        .clamp(1, MAX_WORKERS)
}

/// How many of `workers` one route may keep busy at once: half, at least one.
pub fn share(workers: usize) -> usize {
    (workers / 2).max(1)
}

/// What a run gives: a request to send, or nothing (the delivery is skipped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    Send(Shaped),
    Empty,
}

/// One run's request.
#[derive(Debug)]
pub struct Run<'a> {
    /// The program's index in the pool's programs: its route's queue.
    pub program: usize,
    pub envelope: bool,
    /// The most bytes the output may have.
    pub cap: usize,
    pub timeout: Duration,
    /// `$meta` as JSON; empty for `null`.
    pub meta: &'a [u8],
    pub body: &'a [u8],
}

/// A run waiting for a worker, and where its answer goes.
struct Queued {
    job: Job,
    meta: Vec<u8>,
    body: Vec<u8>,
    timeout: Duration,
    /// Whether it already timed out once (on another worker).
    retried: bool,
    /// Not started after this, it is answered [`TransformError::Late`].
    start_by: Option<Instant>,
    answer: oneshot::Sender<Result<Ran, TransformError>>,
}

/// The transform workers of a gateway.
pub struct Pool {
    /// What every worker's task needs to start its worker.
    spawn: Arc<Spawn>,
    workers: usize,
    shared: Arc<Shared>,
    started: OnceLock<()>,
}

/// The routes' queues, shared by the callers and the worker tasks.
struct Shared {
    sched: Mutex<Sched>,
    /// Told when a run may be taken: one came, or a route's busy workers went down.
    wake: Notify,
}

struct Sched {
    /// One queue per program (route), in the order the programs were given.
    queues: Vec<VecDeque<Queued>>,
    /// How many workers serve each route now.
    busy: Vec<usize>,
    /// The most workers one route may keep busy.
    share: usize,
    /// The route looked at first for the next batch: routes take turns.
    next: usize,
    closed: bool,
}

impl Sched {
    /// The next batch: up to [`BATCH`] runs of the next route, in turn, that has
    /// runs waiting and fewer than its share of the workers busy; runs no one waits
    /// for any more are dropped on the way.
    fn take(&mut self) -> Option<(usize, VecDeque<Queued>)> {
        let n = self.queues.len();
        for i in 0..n {
            let p = (self.next + i) % n;
            if self.busy[p] >= self.share {
                continue;
            }
            let queue = &mut self.queues[p];
            let mut batch = VecDeque::new();
            let now = Instant::now();
            while batch.len() < BATCH {
                match queue.pop_front() {
                    Some(q) if q.answer.is_closed() => {}
                    Some(q) if q.is_late(now) => {
                        let _ = q.answer.send(Err(TransformError::Late));
                    }
                    Some(q) => batch.push_back(q),
                    None => break,
                }
            }
            if batch.is_empty() {
                continue;
            }
            self.busy[p] += 1;
            self.next = (p + 1) % n;
            return Some((p, batch));
        }
        None
    }

    /// Whether a free worker would find a batch.
    fn has_work(&self) -> bool {
        self.queues
            .iter()
            .zip(&self.busy)
            .any(|(q, busy)| *busy < self.share && !q.is_empty())
    }
}

impl Queued {
    /// Whether it was to start before `now` and has not (a retry is part of a run
    /// that started).
    fn is_late(&self, now: Instant) -> bool {
        !self.retried && self.start_by.is_some_and(|by| now >= by)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Sched> {
        // The lock guards plain data that no step leaves half-changed: a poisoned
        // lock's data is still sound.
        self.sched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The next batch for a free worker, waiting until there is one; `None` once
    /// the pool is dropped.
    async fn next_batch(&self) -> Option<(usize, VecDeque<Queued>)> {
        loop {
            let woken = self.wake.notified();
            let mut woken = std::pin::pin!(woken);
            woken.as_mut().enable();
            {
                let mut sched = self.lock();
                if sched.closed {
                    return None;
                }
                if let Some(batch) = sched.take() {
                    // Another free worker may find a batch too.
                    if sched.has_work() {
                        self.wake.notify_one();
                    }
                    return Some(batch);
                }
            }
            woken.await;
        }
    }

    /// A worker is done with a batch of `program`'s.
    fn done(&self, program: usize) {
        let mut sched = self.lock();
        if let Some(busy) = sched.busy.get_mut(program) {
            *busy = busy.saturating_sub(1);
        }
        if sched.has_work() {
            self.wake.notify_one();
        }
    }
}

/// How a worker is started.
struct Spawn {
    /// The executable started as `<exe> transform-worker`.
    exe: PathBuf,
    programs: Vec<String>,
    /// The address space a worker may use.
    memory: u64,
}

struct Worker {
    /// Killed when dropped.
    _child: Child,
    /// The worker's CPU time, where the system tells it.
    cpu: Option<CpuClock>,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Pool {
    /// A pool for `programs` (one per route), whose workers are `exe
    /// transform-worker` with the default address space; nothing is started yet.
    pub fn new(exe: PathBuf, programs: Vec<String>) -> Pool {
        Pool::with(exe, programs, default_workers(), DEFAULT_MEMORY)
    }

    /// A pool of `workers` workers, each with an address space of `memory` bytes.
    pub fn with(exe: PathBuf, programs: Vec<String>, workers: usize, memory: u64) -> Pool {
        let workers = workers.max(1);
        let n = programs.len();
        Pool {
            spawn: Arc::new(Spawn {
                exe,
                programs,
                memory,
            }),
            workers,
            shared: Arc::new(Shared {
                sched: Mutex::new(Sched {
                    queues: (0..n).map(|_| VecDeque::new()).collect(),
                    busy: vec![0; n],
                    share: share(workers),
                    next: 0,
                    closed: false,
                }),
                wake: Notify::new(),
            }),
            started: OnceLock::new(),
        }
    }

    /// How many workers the pool runs.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// How many workers serve runs of `program` now (at most [`share`] of them).
    pub fn busy(&self, program: usize) -> usize {
        self.shared.lock().busy.get(program).copied().unwrap_or(0)
    }

    /// Run one program on one body. A caller that stops waiting (drops the future)
    /// before a worker took the run has it never started.
    pub async fn run(&self, run: Run<'_>) -> Result<Ran, TransformError> {
        self.run_by(run, None).await
    }

    /// [`Pool::run`], but a run no worker started by `start_by` is not started:
    /// it answers [`TransformError::Late`]. (A run started in time runs to its end.)
    pub async fn run_by(
        &self,
        run: Run<'_>,
        start_by: Option<Instant>,
    ) -> Result<Ran, TransformError> {
        self.started.get_or_init(|| {
            for _ in 0..self.workers {
                tokio::spawn(drive(self.spawn.clone(), self.shared.clone()));
            }
        });
        let (answer, answered) = oneshot::channel();
        let queued = Queued {
            job: Job {
                program: run.program,
                envelope: run.envelope,
                cap: run.cap,
            },
            meta: run.meta.to_vec(),
            body: run.body.to_vec(),
            timeout: run.timeout,
            retried: false,
            start_by,
            answer,
        };
        {
            let mut sched = self.shared.lock();
            if sched.closed {
                return Err(TransformError::Unavailable("the pool is closed".into()));
            }
            match sched.queues.get_mut(run.program) {
                Some(queue) => queue.push_back(queued),
                None => return Err(TransformError::Runtime("no such program".into())),
            }
        }
        self.shared.wake.notify_one();
        answered
            .await
            .unwrap_or_else(|_| Err(TransformError::Unavailable("the pool is closed".into())))
    }
}

impl Drop for Pool {
    /// The worker tasks end (each killing its worker) once their batch is done; the
    /// runs still queued are answered "closed".
    fn drop(&mut self) {
        let mut sched = self.shared.lock();
        sched.closed = true;
        for q in &mut sched.queues {
            q.clear();
        }
        drop(sched);
        self.shared.wake.notify_waiters();
    }
}

/// One worker's task: take the next batch (see [`Sched::take`]), hand it to the
/// worker, answer each run; until the pool is dropped.
async fn drive(spawn: Arc<Spawn>, shared: Arc<Shared>) {
    let mut worker: Option<Worker> = None;
    while let Some((program, mut batch)) = shared.next_batch().await {
        while !batch.is_empty() {
            // Runs whose caller went away, or that are too late to start, are not
            // run.
            let now = Instant::now();
            let (late, wanted): (VecDeque<_>, VecDeque<_>) = batch
                .drain(..)
                .filter(|q| !q.answer.is_closed())
                .partition(|q| q.is_late(now));
            batch = wanted;
            for q in late {
                let _ = q.answer.send(Err(TransformError::Late));
            }
            if batch.is_empty() {
                break;
            }
            let w = match worker.as_mut() {
                Some(w) => w,
                None => match spawn.start().await {
                    Ok(w) => worker.insert(w),
                    Err(e) => {
                        for q in batch.drain(..) {
                            let _ = q.answer.send(Err(e.clone()));
                        }
                        break;
                    }
                },
            };
            if !w.serve(&mut batch).await {
                // Killed or dead: the runs left had not started (or are tried
                // again); a new worker takes them.
                worker = None;
            }
        }
        shared.done(program);
    }
}

impl Worker {
    /// Hand the runs of `batch` to the worker and answer each, in order, writing
    /// while reading (neither pipe may fill while the other waits). Answers whether
    /// the worker is still fit: false when a run passed its deadline (the worker is
    /// to be killed; a first timeout puts the run back at the head of `batch`) or
    /// the worker died; the runs left in `batch` had not started.
    async fn serve(&mut self, batch: &mut VecDeque<Queued>) -> bool {
        let mut bytes = Vec::new();
        for q in batch.iter() {
            if encode(&mut bytes, q).is_err() {
                return false;
            }
        }
        let Worker {
            stdin, stdout, cpu, ..
        } = self;
        let cpu = *cpu;
        let write = async {
            stdin.write_all(&bytes).await?;
            stdin.flush().await
        };
        let mut write = std::pin::pin!(write);
        let mut written = false;
        while let Some(mut q) = batch.pop_front() {
            let deadline = Deadline::start(cpu, q.timeout);
            let mut check = deadline.first_check();
            let answer = answer(stdout);
            let mut answer = std::pin::pin!(answer);
            let got = loop {
                tokio::select! {
                    w = &mut write, if !written => {
                        written = true;
                        // A worker that stopped reading is dead: the answer awaited
                        // says so (end of its output).
                        let _ = w;
                    }
                    a = &mut answer => break Some(a),
                    () = tokio::time::sleep_until(check) => match deadline.next_check() {
                        Some(next) => check = next,
                        None => break None,
                    },
                }
            };
            match got {
                Some(Ok(ran)) => {
                    let _ = q.answer.send(ran);
                }
                // It died during this run (its stack or memory ran out).
                Some(Err(_)) => {
                    let _ = q.answer.send(Err(TransformError::Crashed));
                    return false;
                }
                // Still running at its deadline: the worker is killed, and the run
                // tried once more on a new one.
                None if !q.retried => {
                    q.retried = true;
                    batch.push_front(q);
                    return false;
                }
                None => {
                    let _ = q.answer.send(Err(TransformError::Timeout(q.timeout)));
                    return false;
                }
            }
        }
        true
    }
}

/// When a run passes its deadline: `timeout` of its worker's CPU time (when known),
/// or twice that and [`WALL_GRACE`] on the clock.
struct Deadline {
    cpu: Option<(CpuClock, Duration)>,
    timeout: Duration,
    started: Instant,
    last: Instant,
}

impl Deadline {
    fn start(cpu: Option<CpuClock>, timeout: Duration) -> Deadline {
        let started = Instant::now();
        Deadline {
            cpu: cpu.and_then(|c| Some((c, c.used()?))),
            timeout,
            started,
            last: started + timeout * 2 + WALL_GRACE,
        }
    }

    /// When to look first: after `timeout` on the clock (CPU time never runs
    /// faster than the clock for one running thread).
    fn first_check(&self) -> Instant {
        (self.started + self.timeout).min(self.last)
    }

    /// When to look again; `None`: the deadline has passed.
    fn next_check(&self) -> Option<Instant> {
        let now = Instant::now();
        if now >= self.last {
            return None;
        }
        let (clock, at_start) = self.cpu?;
        let used = clock.used()?.saturating_sub(at_start);
        let left = self.timeout.checked_sub(used).filter(|l| !l.is_zero())?;
        Some((now + left.max(Duration::from_millis(1))).min(self.last))
    }
}

/// A worker process's CPU clock.
#[derive(Debug, Clone, Copy)]
struct CpuClock(libc::clockid_t);

impl CpuClock {
    /// The CPU clock of process `pid`, where the system has one.
    #[cfg(target_os = "linux")]
    fn of(pid: u32) -> Option<CpuClock> {
        let pid = libc::pid_t::try_from(pid).ok()?;
        let mut clock: libc::clockid_t = 0;
        // SAFETY: writes the clock id into `clock`, which lives through the call.
        let rc = unsafe { libc::clock_getcpuclockid(pid, &mut clock) };
        (rc == 0).then_some(CpuClock(clock))
    }

    #[cfg(not(target_os = "linux"))]
    fn of(_pid: u32) -> Option<CpuClock> {
        None
    }

    /// The CPU time the process used so far; `None` once it is gone.
    fn used(self) -> Option<Duration> {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes into `ts`, which lives through the call.
        let rc = unsafe { libc::clock_gettime(self.0, &mut ts) };
        if rc != 0 {
            return None;
        }
        Some(Duration::new(
            u64::try_from(ts.tv_sec).ok()?,
            u32::try_from(ts.tv_nsec).ok()?,
        ))
    }
}

/// A run's frames: the job, `$meta`, the body.
fn encode(out: &mut Vec<u8>, q: &Queued) -> std::io::Result<()> {
    super::protocol::write_message(out, &q.job)?;
    super::protocol::write_frame(out, &q.meta)?;
    super::protocol::write_frame(out, &q.body)
}

impl Spawn {
    /// Start a worker and wait until it has compiled the programs.
    async fn start(&self) -> Result<Worker, TransformError> {
        let unavailable = |e: std::io::Error| TransformError::Unavailable(e.to_string());
        let mut child = Command::new(&self.exe)
            .arg("transform-worker")
            .env_clear()
            // One malloc arena (glibc reserves 64 MiB of address space per arena a
            // thread opens): the worker runs programs on one thread, and its
            // address space is what `memory` bounds.
            .env("MALLOC_ARENA_MAX", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(unavailable)?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(TransformError::Unavailable(
                "the worker has no pipes".into(),
            ));
        };
        let cpu = child.id().and_then(CpuClock::of);
        let mut worker = Worker {
            _child: child,
            cpu,
            stdin,
            stdout: BufReader::with_capacity(256 * 1024, stdout),
        };
        let init = Init {
            programs: self.programs.clone(),
            memory: self.memory,
        };
        let ready = tokio::time::timeout(START_TIMEOUT, async {
            let bytes = serde_json::to_vec(&init).map_err(std::io::Error::other)?;
            write_frame_async(&mut worker.stdin, &bytes).await?;
            worker.stdin.flush().await?;
            read_message_async::<Ready>(&mut worker.stdout).await
        })
        .await;
        match ready {
            Ok(Ok(Ready::Ready)) => Ok(worker),
            Ok(Ok(Ready::Failed(why))) => Err(TransformError::Unavailable(why)),
            Ok(Err(e)) => Err(unavailable(e)),
            Err(_) => Err(TransformError::Unavailable(
                "the worker did not start in time".into(),
            )),
        }
    }
}

/// Read the answer of the next run handed to a worker.
async fn answer(
    stdout: &mut BufReader<ChildStdout>,
) -> std::io::Result<Result<Ran, TransformError>> {
    Ok(match read_message_async::<Reply>(stdout).await? {
        Reply::Sent {
            content_type,
            headers,
        } => {
            let body = read_frame_async(stdout).await?;
            Ok(Ran::Send(Shaped {
                body,
                content_type,
                headers,
            }))
        }
        Reply::Empty => Ok(Ran::Empty),
        Reply::Failed { failure, message } => Err(match failure {
            Failure::Runtime => TransformError::Runtime(message),
            Failure::NotJson => TransformError::NotJson,
            Failure::TooLarge => TransformError::TooLarge(message),
            Failure::BadOutput => TransformError::BadOutput(message),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(programs: usize, workers: usize) -> Sched {
        Sched {
            queues: (0..programs).map(|_| VecDeque::new()).collect(),
            busy: vec![0; programs],
            share: share(workers),
            next: 0,
            closed: false,
        }
    }

    /// Queue `n` runs of `program`; the receivers keep them wanted.
    fn queue(
        s: &mut Sched,
        program: usize,
        n: usize,
    ) -> Vec<oneshot::Receiver<Result<Ran, TransformError>>> {
        (0..n)
            .map(|_| {
                let (answer, answered) = oneshot::channel();
                s.queues[program].push_back(Queued {
                    job: Job {
                        program,
                        envelope: false,
                        cap: 1,
                    },
                    meta: Vec::new(),
                    body: Vec::new(),
                    timeout: Duration::from_millis(50),
                    retried: false,
                    start_by: None,
                    answer,
                });
                answered
            })
            .collect()
    }

    #[test]
    fn a_route_holds_at_most_half_the_workers_and_routes_take_turns() {
        let mut s = sched(3, 4);
        let _slow = queue(&mut s, 0, 100);
        let _other = queue(&mut s, 1, 40);
        let mut taken = Vec::new();
        while let Some((p, batch)) = s.take() {
            assert!(
                batch.iter().all(|q| q.job.program == p),
                "a batch mixes routes"
            );
            assert!(batch.len() <= BATCH);
            taken.push(p);
        }
        // Four workers: two for each route, in turns; the rest of route 0's runs
        // wait for one of its two to be done.
        assert_eq!(taken, [0, 1, 0, 1]);
        assert_eq!(s.busy, [2, 2, 0]);
        assert!(!s.has_work());
        s.busy[0] -= 1;
        assert!(s.has_work());
        assert_eq!(s.take().map(|(p, b)| (p, b.len())), Some((0, BATCH)));
        // A route alone still gets at most its share.
        let mut alone = sched(1, 16);
        let _runs = queue(&mut alone, 0, 1000);
        let mut n = 0;
        while alone.take().is_some() {
            n += 1;
        }
        assert_eq!(n, 8);
        assert_eq!(share(1), 1);
    }

    #[test]
    fn runs_no_one_waits_for_are_never_taken() {
        let mut s = sched(2, 4);
        let gone = queue(&mut s, 0, 5);
        drop(gone);
        let _kept = queue(&mut s, 1, 1);
        let (p, batch) = s.take().expect("a batch");
        assert_eq!((p, batch.len()), (1, 1));
        assert!(s.queues[0].is_empty());
        assert!(s.take().is_none());
    }
}
