//! Everything a command prints goes through here. `println!` panics when stdout is
//! closed (`hookgate providers | head -5`); [`outln!`] writes to the locked stdout
//! with `writeln!` and hands the failed write back as an `io::Error` for the command
//! to return with `?`. `main` answers a closed stdout (`BrokenPipe`) in one place: a
//! quiet exit 0, as the reader stopped reading on purpose.

use std::io::Write as _;

/// `println!` that returns the write's `io::Result` instead of panicking.
macro_rules! outln {
    () => {
        $crate::cli::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::cli::out::line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// One line on stdout.
pub fn line(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)?;
    out.write_all(b"\n")
}
