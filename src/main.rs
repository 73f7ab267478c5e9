//! The `hookgate` binary: parses the command line, runs it, renders errors.
//!
//! Exit codes: 0 success, 1 runtime failure, 2 invalid usage or configuration,
//! told apart by type (`cli::InvalidConfiguration`, `config::ConfigError` in the
//! chain), never by an error's text. A closed stdout (e.g. piping into `head`) is
//! not an error.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = hookgate::cli::Cli::parse();
    // A transform worker runs programs on one thread of its own: no runtime.
    if matches!(cli.command, hookgate::cli::Command::TransformWorker) {
        return match hookgate::transform::worker::main() {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(1),
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(hookgate::cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            if err
                .chain()
                .filter_map(|e| e.downcast_ref::<std::io::Error>())
                .any(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {err:#}");
            let is_config = err
                .downcast_ref::<hookgate::cli::InvalidConfiguration>()
                .is_some()
                || err.chain().any(|e| e.is::<hookgate::config::ConfigError>());
            ExitCode::from(if is_config { 2 } else { 1 })
        }
    }
}
