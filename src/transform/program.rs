//! A route's jq program, compiled with jaq: checked when the configuration loads
//! (an error names the line and column), compiled again in each transform worker
//! (`worker`), which runs it.
//!
//! The language is jq's, with jaq's standard library minus what would reach outside
//! the one input: no `env` or `$ENV` (the gateway's environment holds secrets), no
//! `input`/`inputs`, no `include`/`import` (no files), and `debug`/`stderr` write
//! nowhere.

use jaq_core::load::{self, Arena, File, Loader};
use jaq_core::{Compiler, Native, data};
use jaq_json::Val;

/// What a compiled program runs on: JSON values, with no data but the look-up table.
pub(super) type Data = data::JustLut<Val>;

/// A compiled program.
pub struct Compiled {
    pub(super) filter: jaq_core::Filter<Data>,
}

/// The global variables a program may read.
const GLOBALS: [&str; 1] = ["$meta"];

/// The longest program accepted.
pub const MAX_LEN: usize = 16 * 1024;
/// The stack jaq's parser and compiler, which recurse, get: enough for any program
/// within [`MAX_LEN`] however it nests (measured on unoptimised builds, whose
/// frames are the largest: 8k nested unary minuses, brackets or `try` need about
/// half of it). Reserved, not used: only what a program needs is ever touched.
pub const STACK: usize = 256 << 20;

/// Why a program does not compile: what is wrong and where (1-based line and
/// column of the program text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem} at line {line}, column {column}")]
pub struct ProgramError {
    pub problem: String,
    pub line: usize,
    pub column: usize,
}

/// Check that `code` compiles, on a thread with a [`STACK`] of its own.
pub fn check(code: &str) -> Result<(), ProgramError> {
    bounded(code)?;
    let code = code.to_string();
    let unchecked = |problem: String| ProgramError {
        problem,
        line: 1,
        column: 1,
    };
    std::thread::Builder::new()
        .name("transform-check".into())
        .stack_size(STACK)
        .spawn(move || compile(&code).map(|_| ()))
        .map_err(|e| unchecked(format!("cannot check the program: {e}")))?
        .join()
        .unwrap_or_else(|_| Err(unchecked("the program could not be checked".into())))
}

/// Compile `code`.
pub fn compile(code: &str) -> Result<Compiled, ProgramError> {
    bounded(code)?;
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let arena = Arena::default();
    let modules = Loader::new(defs)
        .load(&arena, File { code, path: () })
        .map_err(|errs| load_error(code, errs))?;
    let filter = Compiler::default()
        .with_funs(functions())
        .with_global_vars(GLOBALS)
        .compile(modules)
        .map_err(|errs| {
            let first = errs
                .into_iter()
                .flat_map(|(file, undefined)| {
                    undefined.into_iter().map(move |(name, what)| {
                        let what = match what {
                            jaq_core::compile::Undefined::Var => "variable",
                            jaq_core::compile::Undefined::Mod => "module",
                            jaq_core::compile::Undefined::Label => "label",
                            _ => "filter",
                        };
                        let problem = if name == "$ENV" || name == "env" {
                            format!(
                                "{name} is not available: a transform sees its input and $meta only"
                            )
                        } else {
                            format!("undefined {what} {name}")
                        };
                        at(file.code, name, problem)
                    })
                })
                .next();
            first.unwrap_or_else(|| ProgramError {
                problem: "the program does not compile".into(),
                line: 1,
                column: 1,
            })
        })?;
    Ok(Compiled { filter })
}

/// Refuse a program longer than [`MAX_LEN`] before the parser sees it.
fn bounded(code: &str) -> Result<(), ProgramError> {
    if code.len() > MAX_LEN {
        return Err(ProgramError {
            problem: format!("the program is longer than {MAX_LEN} bytes"),
            line: 1,
            column: 1,
        });
    }
    Ok(())
}

/// The native functions: jaq's, with `env` (the gateway's environment holds
/// secrets) removed, `halt` made an error (a worker serves many runs) and `debug` and
/// `stderr` made to write nowhere.
fn functions() -> impl Iterator<Item = jaq_core::native::Fun<Data>> {
    jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs())
        .filter(|(name, _, _)| *name != "env")
        .map(|(name, args, f)| match name {
            "debug_empty" | "stderr_empty" => (name, args, Native::<Data>::new(nothing)),
            "halt" => (name, args, Native::<Data>::new(no_halt)),
            _ => (name, args, f),
        })
}

fn nothing<'a>(_: jaq_core::Cv<'a, Data>) -> jaq_core::ValXs<'a, <Data as jaq_core::DataT>::V<'a>> {
    Box::new(core::iter::empty())
}

fn no_halt<'a>(_: jaq_core::Cv<'a, Data>) -> jaq_core::ValXs<'a, <Data as jaq_core::DataT>::V<'a>> {
    jaq_core::box_iter::box_once(Err(jaq_core::Exn::from(jaq_core::Error::str(
        "halt is not available in a transform",
    ))))
}

/// A loader's errors as the first one, with its position.
fn load_error(code: &str, errs: load::Errors<&str, ()>) -> ProgramError {
    for (file, e) in errs {
        match e {
            load::Error::Lex(v) => {
                if let Some((expected, found)) = v.into_iter().next() {
                    return at(file.code, found, format!("expected {}", expected.as_str()));
                }
            }
            load::Error::Parse(v) => {
                if let Some((expected, found)) = v.into_iter().next() {
                    return at(file.code, found, format!("expected {}", expected.as_str()));
                }
            }
            load::Error::Io(v) => {
                if let Some((path, _)) = v.into_iter().next() {
                    return at(
                        file.code,
                        path,
                        "include and import are not available: a transform is one program"
                            .to_string(),
                    );
                }
            }
        }
    }
    let _ = code;
    ProgramError {
        problem: "the program does not parse".into(),
        line: 1,
        column: 1,
    }
}

/// `problem` at `part`, a slice of `whole` (or at its start when it is not one).
fn at(whole: &str, part: &str, problem: String) -> ProgramError {
    let start = part.as_ptr() as usize;
    let base = whole.as_ptr() as usize;
    let offset = if start >= base && start <= base + whole.len() {
        start - base
    } else {
        0
    };
    let before = whole.get(..offset).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    ProgramError {
        problem,
        line,
        column,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_compiles() {
        assert!(check(r#"{order: .data.object.id, kind: .type, src: $meta.source}"#).is_ok());
        assert!(check("map(select(.a)) | length").is_ok());
        assert!(check("@uri \"a=\\(.a)\"").is_ok());
    }

    #[test]
    fn a_syntax_error_names_its_line_and_column() {
        let e = check("{a: .a,\n  b: .b").unwrap_err();
        assert_eq!((e.line, e.column), (2, 8), "{e}");
        let e = check(".a | foo(1)").unwrap_err();
        assert_eq!(e.problem, "undefined filter foo");
        assert_eq!((e.line, e.column), (1, 6));
        let e = check(".a |").unwrap_err();
        assert_eq!(e.line, 1, "{e}");
    }

    #[test]
    fn what_reaches_outside_the_input_is_not_there() {
        assert!(check("env").unwrap_err().problem.contains("not available"));
        assert!(check("$ENV").unwrap_err().problem.contains("not available"));
        assert!(check("input").is_err());
        assert!(check("inputs").is_err());
        assert!(
            check("include \"x\"; .")
                .unwrap_err()
                .problem
                .contains("include")
        );
        assert!(check("import \"x\" as x; .").is_err());
        assert!(check("$other").is_err());
        // Still there, writing nowhere.
        assert!(check(". | debug | stderr").is_ok());
    }

    #[test]
    fn any_nesting_within_the_length_compiles_and_a_longer_program_is_refused() {
        for (open, close) in [("(", ")"), ("-(", ")"), ("[-", "]"), ("try (", ")")] {
            let n = MAX_LEN / (open.len() + close.len()) - 1;
            let deep = format!("{}1{}", open.repeat(n), close.repeat(n));
            assert!(check(&deep).is_ok(), "{open}…{close} × {n}");
        }
        assert!(check(&format!("{}1", "-".repeat(MAX_LEN - 1))).is_ok());
        let e = check(&" ".repeat(MAX_LEN + 1)).unwrap_err();
        assert!(e.problem.contains("longer than"), "{e}");
    }
}
