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

/// Why a program does not compile: what is wrong and where (1-based line and
/// column of the program text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem} at line {line}, column {column}")]
pub struct ProgramError {
    pub problem: String,
    pub line: usize,
    pub column: usize,
}

/// Check that `code` compiles.
pub fn check(code: &str) -> Result<(), ProgramError> {
    compile(code).map(|_| ())
}

/// The deepest nesting of brackets a program may have: jaq's parser is recursive,
/// and a program nested deeper than any written by hand would exhaust its stack.
const MAX_NESTING: usize = 256;
/// The longest program accepted.
const MAX_LEN: usize = 64 * 1024;

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

/// Refuse a program longer than [`MAX_LEN`] or nested deeper than [`MAX_NESTING`]
/// (brackets outside string literals), before the parser sees it.
fn bounded(code: &str) -> Result<(), ProgramError> {
    if code.len() > MAX_LEN {
        return Err(ProgramError {
            problem: format!("the program is longer than {MAX_LEN} bytes"),
            line: 1,
            column: 1,
        });
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, c) in code.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(at(
                        code,
                        &code[i..],
                        format!("brackets nested deeper than {MAX_NESTING}"),
                    ));
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
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
    fn a_program_too_deep_or_too_long_is_refused_before_parsing() {
        let deep = format!("{}1{}", "(".repeat(1_000), ")".repeat(1_000));
        let e = check(&deep).unwrap_err();
        assert!(e.problem.contains("nested deeper"), "{e}");
        assert_eq!((e.line, e.column), (1, 257));
        let fine = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        assert!(check(&fine).is_ok());
        // Brackets inside strings do not count.
        assert!(check(&format!("\"{}\"", "(".repeat(1000))).is_ok());
        assert!(check(&" ".repeat(70_000)).is_err());
    }
}
