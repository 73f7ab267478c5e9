//! The gateway's side of the transform workers: a few child processes (`worker`),
//! each running one job at a time, started when first needed, killed at a job's
//! deadline or when the pool is dropped, and started again for the next job.
//!
//! A job's deadline counts from when a worker takes it, not from when it queued:
//! a route's slow program makes the others wait for a worker, never fail.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncWriteExt as _, BufReader, BufWriter};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Semaphore;

use super::TransformError;
use super::protocol::{
    Failure, Init, Job, Ready, Reply, read_frame_async, read_message_async, write_frame_async,
};
use super::shape::Shaped;

/// Workers per core, and the most a pool runs. A run costs a worker about 15 µs
/// of CPU (a Stripe event of 1–4 KiB, a three-field program, release build) but a
/// round trip through two processes' scheduling, so more than one run is in
/// flight per core.
const WORKERS_PER_CORE: usize = 2;
const MAX_WORKERS: usize = 16;
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

/// The transform workers of a gateway.
pub struct Pool {
    /// The executable started as `<exe> transform-worker`.
    exe: PathBuf,
    programs: Arc<Vec<String>>,
    idle: Mutex<Vec<Worker>>,
    /// One per worker: a job holds one while it runs.
    slots: Semaphore,
}

struct Worker {
    /// Killed when dropped.
    _child: Child,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Pool {
    /// A pool for `programs`, whose workers are `exe transform-worker`; nothing is
    /// started yet.
    pub fn new(exe: PathBuf, programs: Vec<String>) -> Pool {
        let workers = (std::thread::available_parallelism().map_or(2, |n| n.get())
            * WORKERS_PER_CORE)
            .clamp(1, MAX_WORKERS);
        Pool {
            exe,
            programs: Arc::new(programs),
            idle: Mutex::new(Vec::new()),
            slots: Semaphore::new(workers),
        }
    }

    /// Run one program on one body.
    pub async fn run(&self, run: Run<'_>) -> Result<Ran, TransformError> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| TransformError::Unavailable("the pool is closed".into()))?;
        let idle = self.idle.lock().ok().and_then(|mut i| i.pop());
        let mut worker = match idle {
            Some(w) => w,
            None => self.start().await?,
        };
        let job = Job {
            program: run.program,
            envelope: run.envelope,
            cap: run.cap,
        };
        match tokio::time::timeout(run.timeout, worker.exchange(&job, run.meta, run.body)).await {
            Ok(Ok(ran)) => {
                if let Ok(mut idle) = self.idle.lock() {
                    idle.push(worker);
                }
                ran
            }
            // The worker died during the run (its stack or memory ran out); dropping
            // it reaps it.
            Ok(Err(_)) => Err(TransformError::Crashed),
            // Still running: dropping the worker kills it.
            Err(_) => Err(TransformError::Timeout(run.timeout)),
        }
    }

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
            stdin: BufWriter::new(stdin),
            stdout: BufReader::new(stdout),
        };
        let init = Init {
            programs: self.programs.as_ref().clone(),
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

impl Worker {
    /// Send one job and read its answer.
    async fn exchange(
        &mut self,
        job: &Job,
        meta: &[u8],
        body: &[u8],
    ) -> std::io::Result<Result<Ran, TransformError>> {
        let bytes = serde_json::to_vec(job).map_err(std::io::Error::other)?;
        write_frame_async(&mut self.stdin, &bytes).await?;
        write_frame_async(&mut self.stdin, meta).await?;
        write_frame_async(&mut self.stdin, body).await?;
        self.stdin.flush().await?;
        Ok(match read_message_async::<Reply>(&mut self.stdout).await? {
            Reply::Sent {
                content_type,
                headers,
            } => {
                let body = read_frame_async(&mut self.stdout).await?;
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
}
