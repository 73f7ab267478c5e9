//! The transform worker: a child process (`hookgate transform-worker`) that
//! compiles the routes' programs once and runs them, one job at a time, for the
//! gateway (`pool`).
//!
//! A program is code that can run forever (`def f: f; f`), recurse until the stack
//! is gone (`def f: 1 + f; f`) or allocate without end. No thread can be stopped
//! from outside, and a stack overflow aborts the whole process, so programs run in
//! a process of their own that the gateway kills at the deadline: whatever a
//! program does, the gateway goes on. The worker starts with an empty environment
//! (the gateway's holds secrets), a bounded address space and no core dumps.

use std::io::{self, BufReader, BufWriter};

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
/// The address space a worker may use.
const ADDRESS_SPACE: u64 = 2 << 30;

/// Serve jobs on stdin/stdout until stdin closes. Returns when the gateway is gone.
pub fn main() -> io::Result<()> {
    limit_resources();
    let runner = std::thread::Builder::new()
        .name("transform".into())
        .stack_size(STACK)
        .spawn(|| {
            serve(
                &mut BufReader::new(io::stdin().lock()),
                &mut BufWriter::new(io::stdout().lock()),
            )
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
    set(libc::RLIMIT_AS, ADDRESS_SPACE);
}

/// The worker's loop: read [`Init`], compile, then answer jobs.
pub fn serve(input: &mut impl io::Read, output: &mut impl io::Write) -> io::Result<()> {
    let Some(init) = read_message::<Init>(input)? else {
        return Ok(());
    };
    let mut compiled = Vec::with_capacity(init.programs.len());
    for (i, code) in init.programs.iter().enumerate() {
        match program::compile(code) {
            Ok(c) => compiled.push(c),
            Err(e) => {
                write_message(output, &Ready::Failed(format!("program {i}: {e}")))?;
                output.flush()?;
                return Ok(());
            }
        }
    }
    write_message(output, &Ready::Ready)?;
    output.flush()?;
    while let Some(job) = read_message::<Job>(input)? {
        let (Some(meta), Some(body)) = (read_frame(input)?, read_frame(input)?) else {
            return Ok(());
        };
        let (reply, out) = match compiled.get(job.program) {
            Some(c) => run(c, &meta, &body, &job),
            None => failed(Failure::Runtime, "no such program".into()),
        };
        write_message(output, &reply)?;
        if let Some(out) = out {
            write_frame(output, &out)?;
        }
        output.flush()?;
    }
    Ok(())
}

fn failed(failure: Failure, message: String) -> (Reply, Option<Vec<u8>>) {
    (Reply::Failed { failure, message }, None)
}

/// Run one job: the program over the body, with `$meta` (JSON; empty: `null`), to
/// its end (a program that gives outputs forever runs until the gateway's deadline).
pub fn run(c: &Compiled, meta: &[u8], body: &[u8], job: &Job) -> (Reply, Option<Vec<u8>>) {
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
            },
        )
        .unwrap();
        for (p, env) in [(0, false), (1, true), (7, false)] {
            write_message(&mut input, &job(p, env)).unwrap();
            write_frame(&mut input, META).unwrap();
            write_frame(&mut input, br#"{"a":"hi"}"#).unwrap();
        }
        let mut output = Vec::new();
        serve(&mut input.as_slice(), &mut output).unwrap();
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
