//! The gateway's side of the transform workers: a few child processes (`worker`),
//! each driven by a task of its own that takes runs from the pool's one queue,
//! started when first needed, killed at a run's deadline or when the pool is
//! dropped, and started again for the next run.
//!
//! A run costs a worker about 15 µs of CPU (a Stripe event of 1–4 KiB, a
//! three-field program, release build) but a round trip through two processes'
//! scheduling. So a worker's task takes every run waiting in the queue (up to
//! [`BATCH`]), writes them to its worker in one write and reads their answers as
//! they come: the round trip is paid once per batch, not once per run.
//!
//! A run's deadline counts from when its worker starts it (when the answer before
//! it came), not from when it queued: a route's slow program makes the others wait,
//! never fail. A worker killed at a run's deadline takes with it the runs of the
//! batch behind that one, which had not started: they go to a new worker.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Mutex, mpsc, oneshot};

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

/// What a run gives: a request to send, or nothing (the delivery is skipped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    Send(Shaped),
    Empty,
}

/// One run's request.
#[derive(Debug)]
pub struct Run<'a> {
    /// The program's index in the pool's programs.
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
    answer: oneshot::Sender<Result<Ran, TransformError>>,
}

/// The transform workers of a gateway.
pub struct Pool {
    /// What every worker's task needs to start its worker.
    spawn: Arc<Spawn>,
    workers: usize,
    queue: mpsc::UnboundedSender<Queued>,
    /// Taken by the worker tasks when the first run comes.
    taken: Arc<Mutex<mpsc::UnboundedReceiver<Queued>>>,
    started: OnceLock<()>,
}

/// How a worker is started.
struct Spawn {
    /// The executable started as `<exe> transform-worker`.
    exe: PathBuf,
    programs: Vec<String>,
}

struct Worker {
    /// Killed when dropped.
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Pool {
    /// A pool for `programs`, whose workers are `exe transform-worker`; nothing is
    /// started yet.
    pub fn new(exe: PathBuf, programs: Vec<String>) -> Pool {
        let workers = (std::thread::available_parallelism().map_or(2, |n| n.get())
            * WORKERS_PER_CORE)
            .clamp(1, MAX_WORKERS);
        let (queue, taken) = mpsc::unbounded_channel();
        Pool {
            spawn: Arc::new(Spawn { exe, programs }),
            workers,
            queue,
            taken: Arc::new(Mutex::new(taken)),
            started: OnceLock::new(),
        }
    }

    /// Run one program on one body.
    pub async fn run(&self, run: Run<'_>) -> Result<Ran, TransformError> {
        self.started.get_or_init(|| {
            for _ in 0..self.workers {
                tokio::spawn(drive(self.spawn.clone(), self.taken.clone()));
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
            answer,
        };
        self.queue
            .send(queued)
            .map_err(|_| TransformError::Unavailable("the pool is closed".into()))?;
        answered
            .await
            .unwrap_or_else(|_| Err(TransformError::Unavailable("the pool is closed".into())))
    }
}

/// One worker's task: take the runs waiting in the queue (at most [`BATCH`]), hand
/// them to the worker, answer each; until the pool is dropped.
async fn drive(spawn: Arc<Spawn>, taken: Arc<Mutex<mpsc::UnboundedReceiver<Queued>>>) {
    let mut worker: Option<Worker> = None;
    loop {
        let mut batch = VecDeque::new();
        {
            let mut queue = taken.lock().await;
            match queue.recv().await {
                Some(q) => batch.push_back(q),
                // The pool is gone: the worker goes with this task.
                None => return,
            }
            while batch.len() < BATCH {
                match queue.try_recv() {
                    Ok(q) => batch.push_back(q),
                    Err(_) => break,
                }
            }
        }
        while !batch.is_empty() {
            // Runs whose caller went away are not run.
            batch.retain(|q| !q.answer.is_closed());
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
                // Killed or dead: the runs left had not started; a new worker
                // takes them.
                worker = None;
            }
        }
    }
}

impl Worker {
    /// Hand the runs of `batch` to the worker and answer each, in order, writing
    /// while reading (neither pipe may fill while the other waits). Answers whether
    /// the worker is still fit: false when a run passed its deadline (the worker is
    /// to be killed) or the worker died; the runs left in `batch` had not started.
    async fn serve(&mut self, batch: &mut VecDeque<Queued>) -> bool {
        let mut bytes = Vec::new();
        for q in batch.iter() {
            if encode(&mut bytes, q).is_err() {
                return false;
            }
        }
        let Worker { stdin, stdout, .. } = self;
        let write = async {
            stdin.write_all(&bytes).await?;
            stdin.flush().await
        };
        let mut write = std::pin::pin!(write);
        let mut written = false;
        while let Some(q) = batch.pop_front() {
            let answer = tokio::time::timeout(q.timeout, answer(stdout));
            let mut answer = std::pin::pin!(answer);
            let got = loop {
                tokio::select! {
                    w = &mut write, if !written => {
                        written = true;
                        // A worker that stopped reading is dead: the answer awaited
                        // says so (end of its output).
                        let _ = w;
                    }
                    a = &mut answer => break a,
                }
            };
            match got {
                Ok(Ok(ran)) => {
                    let _ = q.answer.send(ran);
                }
                // It died during this run (its stack or memory ran out).
                Ok(Err(_)) => {
                    let _ = q.answer.send(Err(TransformError::Crashed));
                    return false;
                }
                // Still running: the worker is killed.
                Err(_) => {
                    let _ = q.answer.send(Err(TransformError::Timeout(q.timeout)));
                    return false;
                }
            }
        }
        true
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
        let mut worker = Worker {
            _child: child,
            stdin,
            stdout: BufReader::with_capacity(256 * 1024, stdout),
        };
        let init = Init {
            programs: self.programs.clone(),
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
