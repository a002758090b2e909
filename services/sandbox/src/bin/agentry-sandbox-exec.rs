//! The launcher on its own, for this crate's tests (the server uses `agentry sandbox-exec`, the
//! same code): `agentry-sandbox-exec sandbox-exec --spec JSON -- PROGRAM ARGS…`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1).peekable();
    if args
        .peek()
        .is_some_and(|a| a == agentry_sandbox::LAUNCHER_SUBCOMMAND)
    {
        args.next();
    }
    agentry_sandbox::launcher::main(args.collect())
}
