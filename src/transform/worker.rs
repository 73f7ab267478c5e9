//! The transform worker: a child process (`hookgate transform-worker`) that
//! compiles the routes' programs once and runs them, one job at a time, for the
//! gateway (`pool`).
//!
//! A program is code that can run forever (`def f: f; f`), recurse until the stack
//! is gone (`def f: 1 + f; f`) or allocate without end. No thread can be stopped
//! from outside, and a stack overflow aborts the whole process, so programs run in
//! a process of their own that the gateway kills at the deadline: whatever a
//! program does, the gateway goes on. The worker starts with an empty environment
//! (the gateway's holds secrets), a bounded address space (the gateway says how
//! much: `transform_memory_bytes`) and no core dumps. On Linux it also sets
//! `no_new_privs` and a seccomp filter ([`confine`]) before it reads any input: a
//! program that found a flaw in the interpreter could still not start a program,
//! open a file or a socket, or touch another process. Input nested deeper than
//! [`MAX_DEPTH`] is refused before it is parsed: the depth of a value is what makes
//! `paths` and its like quadratic (a 1 MB body 500,000 levels deep took a worker to
//! 1.9 GB).

use std::io::{self, BufReader};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use jaq_core::{Ctx, Vars, unwrap_valr};
use jaq_json::Val;

use super::program::{self, Compiled, Data};
use super::protocol::{
    Failure, Init, Job, Ready, Reply, read_frame, read_message, write_frame, write_message,
};
use super::shape::{self, ShapeError};

/// The stack programs are compiled and run on: any program configuration accepts
/// compiles on it (`program::STACK`); a run that recurses deeper ends the worker,
/// and fails as `crashed`.
const STACK: usize = program::STACK;
/// The address space a worker may use until the gateway says how much
/// (`Init::memory`).
const ADDRESS_SPACE: u64 = 2 << 30;
/// The deepest input a program runs on: arrays and objects nested at most this
/// many levels (serde_json's own default bound).
pub const MAX_DEPTH: usize = 128;

/// Serve jobs on stdin/stdout until stdin closes. Returns when the gateway is gone.
pub fn main() -> io::Result<()> {
    limit_resources();
    confine()?;
    let runner = std::thread::Builder::new()
        .name("transform".into())
        .stack_size(STACK)
        .spawn(|| {
            serve(
                &mut BufReader::with_capacity(INPUT_BUFFER, io::stdin().lock()),
                io::stdout(),
            )
            .map(drop)
        })?;
    runner
        .join()
        .map_err(|_| io::Error::other("the transform thread panicked"))?
}

/// No core dumps (a program's data is webhook data), and a bounded address space.
fn limit_resources() {
    let set = |resource, limit: u64| {
        let lim = libc::rlimit {
            rlim_cur: limit as libc::rlim_t,
            rlim_max: limit as libc::rlim_t,
        };
        // SAFETY: setrlimit reads the struct it is given and changes only this
        // process's limits.
        unsafe { libc::setrlimit(resource, &lim) }
    };
    set(libc::RLIMIT_CORE, 0);
    // The soft limit only: the gateway's may be larger.
    set_address_space(ADDRESS_SPACE, false);
}

/// Bound the address space to `bytes`; `hard`: for good (it cannot be raised again).
fn set_address_space(bytes: u64, hard: bool) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `lim`, which lives through the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } != 0 {
        lim.rlim_max = libc::RLIM_INFINITY;
    }
    let bytes = (bytes as libc::rlim_t).min(lim.rlim_max);
    lim.rlim_cur = bytes;
    if hard {
        lim.rlim_max = bytes;
    }
    // SAFETY: setrlimit reads the struct it is given and changes only this process's
    // limits. A limit it refuses leaves the one before (at most [`ADDRESS_SPACE`]).
    unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) };
}

/// `no_new_privs`, and a seccomp filter that refuses (`EPERM`) what a program never
/// needs: starting programs or processes (a `clone` that is not a thread's),
/// opening files, sockets, signalling or tracing other processes, mounts, changes
/// of identity, kernel keyrings, BPF, perf, io_uring. Everything else a Rust
/// program's allocator, threads, pipes and clocks use stays allowed: a refusal is
/// an error for the interpreter, never a killed worker. Where the system has no
/// seccomp (not Linux, or a kernel without it) the worker runs without it.
#[cfg(target_os = "linux")]
// A system call's number is a `c_long`, an `i64` only on 64-bit targets.
#[allow(clippy::useless_conversion)]
fn confine() -> io::Result<()> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes no pointers and only restricts
    // this process and its children.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let Ok(arch) = TargetArch::try_from(std::env::consts::ARCH) else {
        return Ok(());
    };
    let refused: &[libc::c_long] = &[
        libc::SYS_execve,
        libc::SYS_execveat,
        libc::SYS_fork,
        libc::SYS_vfork,
        libc::SYS_openat,
        libc::SYS_openat2,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_socket,
        libc::SYS_socketpair,
        libc::SYS_connect,
        libc::SYS_bind,
        libc::SYS_listen,
        libc::SYS_accept4,
        libc::SYS_sendto,
        libc::SYS_sendmsg,
        libc::SYS_recvfrom,
        libc::SYS_recvmsg,
        libc::SYS_kill,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_open,
        libc::SYS_pidfd_getfd,
        libc::SYS_pidfd_send_signal,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_setuid,
        libc::SYS_setgid,
        libc::SYS_setreuid,
        libc::SYS_setregid,
        libc::SYS_setresuid,
        libc::SYS_setresgid,
        libc::SYS_setgroups,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_io_uring_setup,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_kexec_load,
        libc::SYS_reboot,
    ];
    let mut rules: std::collections::BTreeMap<i64, Vec<SeccompRule>> = refused
        .iter()
        .map(|&nr| (i64::from(nr), Vec::new()))
        .collect();
    #[cfg(target_arch = "x86_64")]
    for nr in [libc::SYS_open, libc::SYS_creat, libc::SYS_accept] {
        rules.insert(i64::from(nr), Vec::new());
    }
    // A clone without CLONE_THREAD starts a process.
    let not_a_thread = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
        0,
    )
    .and_then(|c| SeccompRule::new(vec![c]))
    .map_err(io::Error::other)?;
    rules.insert(i64::from(libc::SYS_clone), vec![not_a_thread]);
    // `clone3` takes its flags in memory, out of a filter's sight: it answers
    // "not implemented", and the C library falls back to `clone`, checked above.
    let clone3 = std::collections::BTreeMap::from([(i64::from(libc::SYS_clone3), Vec::new())]);
    for (rules, errno) in [(rules, libc::EPERM), (clone3, libc::ENOSYS)] {
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .map_err(io::Error::other)?;
        let program: seccompiler::BpfProgram = filter.try_into().map_err(io::Error::other)?;
        match seccompiler::apply_filter(&program) {
            Ok(()) => {}
            // A kernel built without seccomp: no_new_privs is set; go on without it.
            Err(seccompiler::Error::Seccomp(e)) if e.raw_os_error() == Some(libc::EINVAL) => {
                return Ok(());
            }
            Err(e) => return Err(io::Error::other(e)),
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn confine() -> io::Result<()> {
    Ok(())
}

/// How much of the gateway's input the worker reads at once: a batch of runs
/// (`pool::BATCH`) of a few KiB each.
const INPUT_BUFFER: usize = 256 * 1024;
/// The longest a finished run's answer waits behind the runs after it.
const HOLD: Duration = Duration::from_millis(1);

/// The worker's loop: read [`Init`], compile, then answer jobs. Answers are written
/// when no further job waits in the input (one write for a batch's answers), or
/// [`HOLD`] after they were ready, whichever comes first: a run that never ends
/// does not hold the answers of the runs before it until the gateway kills the
/// worker. Gives `output` back at the end of input.
pub fn serve<R: io::Read, W: io::Write + Send>(
    input: &mut BufReader<R>,
    output: W,
) -> io::Result<W> {
    let outbox = Outbox::new(output);
    std::thread::scope(|scope| {
        let watchdog = scope.spawn(|| outbox.watch());
        let served = answer_jobs(input, &outbox);
        let closed = outbox.close();
        let watched = watchdog
            .join()
            .map_err(|_| io::Error::other("the answer thread panicked"))
            .and_then(|r| r);
        served.and(closed).and(watched)
    })?;
    outbox.into_output()
}

fn answer_jobs<R: io::Read, W: io::Write>(
    input: &mut BufReader<R>,
    outbox: &Outbox<W>,
) -> io::Result<()> {
    let Some(init) = read_message::<Init>(input)? else {
        return Ok(());
    };
    if init.memory > 0 {
        set_address_space(init.memory, true);
    }
    let mut compiled = Vec::with_capacity(init.programs.len());
    for (i, code) in init.programs.iter().enumerate() {
        match program::compile(code) {
            Ok(c) => compiled.push(c),
            Err(e) => {
                let mut bytes = Vec::new();
                write_message(&mut bytes, &Ready::Failed(format!("program {i}: {e}")))?;
                return outbox.push(&bytes, true);
            }
        }
    }
    let mut bytes = Vec::new();
    write_message(&mut bytes, &Ready::Ready)?;
    outbox.push(&bytes, true)?;
    while let Some(job) = read_message::<Job>(input)? {
        let (Some(meta), Some(body)) = (read_frame(input)?, read_frame(input)?) else {
            return Ok(());
        };
        let (reply, out) = match compiled.get(job.program) {
            Some(c) => run(c, &meta, &body, &job),
            None => failed(Failure::Runtime, "no such program".into()),
        };
        bytes.clear();
        write_message(&mut bytes, &reply)?;
        if let Some(out) = out {
            write_frame(&mut bytes, &out)?;
        }
        outbox.push(&bytes, input.buffer().is_empty())?;
    }
    Ok(())
}

/// The answers not written yet, shared by the runner and the thread that writes
/// them when they have waited [`HOLD`].
struct Outbox<W> {
    pending: Mutex<Pending<W>>,
    woken: Condvar,
}

struct Pending<W> {
    output: W,
    bytes: Vec<u8>,
    /// When the oldest answer not written was ready.
    since: Option<Instant>,
    closed: bool,
    failed: Option<io::Error>,
}

impl<W: io::Write> Pending<W> {
    fn write_out(&mut self) -> io::Result<()> {
        self.since = None;
        let result = self
            .output
            .write_all(&self.bytes)
            .and_then(|()| self.output.flush());
        self.bytes.clear();
        result
    }
}

impl<W: io::Write> Outbox<W> {
    fn new(output: W) -> Outbox<W> {
        Outbox {
            pending: Mutex::new(Pending {
                output,
                bytes: Vec::new(),
                since: None,
                closed: false,
                failed: None,
            }),
            woken: Condvar::new(),
        }
    }

    fn lock(&self) -> io::Result<MutexGuard<'_, Pending<W>>> {
        self.pending
            .lock()
            .map_err(|_| io::Error::other("the answers' lock is poisoned"))
    }

    /// Add an answer; write every answer waiting now if `now`.
    fn push(&self, answer: &[u8], now: bool) -> io::Result<()> {
        let mut p = self.lock()?;
        if let Some(e) = p.failed.take() {
            return Err(e);
        }
        p.bytes.extend_from_slice(answer);
        if now {
            p.write_out()
        } else {
            if p.since.is_none() {
                p.since = Some(Instant::now());
                self.woken.notify_one();
            }
            Ok(())
        }
    }

    /// Write what is left, and let the watching thread end.
    fn close(&self) -> io::Result<()> {
        let mut p = self.lock()?;
        p.closed = true;
        self.woken.notify_one();
        if p.bytes.is_empty() {
            Ok(())
        } else {
            p.write_out()
        }
    }

    /// Write answers that have waited [`HOLD`], until closed.
    fn watch(&self) -> io::Result<()> {
        let mut p = self.lock()?;
        loop {
            if p.closed {
                return Ok(());
            }
            let wait = match p.since {
                None => None,
                Some(since) => match HOLD.checked_sub(since.elapsed()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => {
                        if let Err(e) = p.write_out() {
                            p.failed = Some(e);
                        }
                        continue;
                    }
                },
            };
            let poisoned = || io::Error::other("the answers' lock is poisoned");
            p = match wait {
                None => self.woken.wait(p).map_err(|_| poisoned())?,
                Some(left) => self.woken.wait_timeout(p, left).map_err(|_| poisoned())?.0,
            };
        }
    }

    fn into_output(self) -> io::Result<W> {
        self.pending
            .into_inner()
            .map(|p| p.output)
            .map_err(|_| io::Error::other("the answers' lock is poisoned"))
    }
}

fn failed(failure: Failure, message: String) -> (Reply, Option<Vec<u8>>) {
    (Reply::Failed { failure, message }, None)
}

/// Run one job: the program over the body, with `$meta` (JSON; empty: `null`), to
/// its end (a program that gives outputs forever runs until the gateway's deadline).
pub fn run(c: &Compiled, meta: &[u8], body: &[u8], job: &Job) -> (Reply, Option<Vec<u8>>) {
    if deeper_than(body, MAX_DEPTH) {
        return failed(
            Failure::Runtime,
            format!("the stored body is nested deeper than {MAX_DEPTH} levels"),
        );
    }
    let input = match jaq_json::read::parse_single(body) {
        Ok(v) => v,
        Err(_) => return failed(Failure::NotJson, "the stored body is not JSON".into()),
    };
    let meta = match meta {
        [] => Val::Null,
        m => jaq_json::read::parse_single(m).unwrap_or(Val::Null),
    };
    let ctx = Ctx::<Data>::new(&c.filter.lut, Vars::new([meta]));
    let mut outputs = c.filter.id.run((ctx, input)).map(unwrap_valr);
    let first = match outputs.next() {
        None => return (Reply::Empty, None),
        Some(Err(e)) => return failed(Failure::Runtime, message(&e.to_string())),
        Some(Ok(v)) => v,
    };
    let mut more = 0usize;
    for o in outputs {
        match o {
            Ok(_) => more += 1,
            Err(e) => return failed(Failure::Runtime, message(&e.to_string())),
        }
    }
    if more > 0 {
        return failed(
            Failure::Runtime,
            format!("the program gave {} outputs; a route sends one", more + 1),
        );
    }
    match shape::shape(&first, job.envelope, job.cap) {
        Ok(s) => (
            Reply::Sent {
                content_type: s.content_type,
                headers: s.headers,
            },
            Some(s.body),
        ),
        Err(ShapeError::TooLarge { cap }) => failed(
            Failure::TooLarge,
            format!("the output is larger than {cap} bytes"),
        ),
        Err(ShapeError::Bad(m)) => failed(Failure::BadOutput, m),
    }
}

/// Whether the JSON text `body` nests arrays and objects more than `max` levels
/// deep (brackets inside strings do not count). Text that is not JSON is left to
/// the parser.
fn deeper_than(body: &[u8], max: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// An error's text, bounded (it may quote the input).
fn message(text: &str) -> String {
    let mut s: String = text.chars().take(200).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transform::protocol::{read_frame, read_message};

    const META: &[u8] = br#"{"source":"s","route":"r"}"#;

    fn job(program: usize, envelope: bool) -> Job {
        Job {
            program,
            envelope,
            cap: 1000,
        }
    }

    fn run_on(code: &str, body: &str, envelope: bool) -> (Reply, Option<Vec<u8>>) {
        run(
            &program::compile(code).unwrap(),
            META,
            body.as_bytes(),
            &job(0, envelope),
        )
    }

    #[test]
    fn a_run_gives_the_shaped_output() {
        let (r, body) = run_on(r#"{id: .a, src: $meta.source}"#, r#"{"a":7}"#, false);
        assert!(matches!(r, Reply::Sent { .. }), "{r:?}");
        assert_eq!(body.unwrap(), br#"{"id":7,"src":"s"}"#);
        assert!(matches!(run_on("empty", "{}", false).0, Reply::Empty));
    }

    #[test]
    fn input_deeper_than_the_bound_is_refused_before_it_is_parsed() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(!deeper_than(nested(MAX_DEPTH).as_bytes(), MAX_DEPTH));
        assert!(deeper_than(nested(MAX_DEPTH + 1).as_bytes(), MAX_DEPTH));
        // Brackets in strings are text, an escaped quote does not end a string.
        let quoted = format!(r#"{{"a":"\"{}"}}"#, "[".repeat(1000));
        assert!(!deeper_than(quoted.as_bytes(), MAX_DEPTH));
        match run_on("[paths] | length", &nested(500_000), false).0 {
            Reply::Failed {
                failure: Failure::Runtime,
                message,
            } => assert!(message.contains("nested deeper than 128"), "{message}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            run_on("[paths] | length", &nested(MAX_DEPTH), false).0,
            Reply::Sent { .. }
        ));
    }

    #[test]
    fn failures_have_their_kind() {
        let kind = |code: &str, body: &str| match run_on(code, body, false).0 {
            Reply::Failed { failure, .. } => Some(failure),
            _ => None,
        };
        assert_eq!(kind(r#"error("x")"#, "{}"), Some(Failure::Runtime));
        assert_eq!(kind("1, 2", "{}"), Some(Failure::Runtime));
        assert_eq!(kind(".", "not json"), Some(Failure::NotJson));
        assert_eq!(kind(r#"[range(1000)]"#, "{}"), Some(Failure::TooLarge));
    }

    #[test]
    fn the_loop_answers_jobs_until_input_ends() {
        let mut input = Vec::new();
        write_message(
            &mut input,
            &Init {
                programs: vec![
                    ".a".into(),
                    "{body: .a, content_type: \"text/plain\"}".into(),
                ],
                memory: 0,
            },
        )
        .unwrap();
        for (p, env) in [(0, false), (1, true), (7, false)] {
            write_message(&mut input, &job(p, env)).unwrap();
            write_frame(&mut input, META).unwrap();
            write_frame(&mut input, br#"{"a":"hi"}"#).unwrap();
        }
        let output = serve(&mut BufReader::new(input.as_slice()), Vec::new()).unwrap();
        let mut out = output.as_slice();
        assert!(matches!(
            read_message::<Ready>(&mut out).unwrap(),
            Some(Ready::Ready)
        ));
        assert!(matches!(
            read_message::<Reply>(&mut out).unwrap(),
            Some(Reply::Sent { .. })
        ));
        assert_eq!(read_frame(&mut out).unwrap().unwrap(), b"\"hi\"");
        match read_message::<Reply>(&mut out).unwrap() {
            Some(Reply::Sent { content_type, .. }) => assert_eq!(content_type, "text/plain"),
            other => panic!("{other:?}"),
        }
        assert_eq!(read_frame(&mut out).unwrap().unwrap(), b"hi");
        assert!(matches!(
            read_message::<Reply>(&mut out).unwrap(),
            Some(Reply::Failed {
                failure: Failure::Runtime,
                ..
            })
        ));
        assert!(read_message::<Reply>(&mut out).unwrap().is_none());
    }
}
