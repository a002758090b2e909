//! Writing to stdout and stderr without panicking when the reader has gone (`agentry config |
//! head`, `agentry chat … | head`). `println!` panics on a closed pipe because Rust ignores
//! SIGPIPE; these write instead, and a closed pipe ends the program quietly, as it would a
//! C tool killed by SIGPIPE.

use std::io::{ErrorKind, Write};

/// Write `text` to stdout and flush. A closed stdout ends the process with status 0: nobody
/// reads what comes next.
pub fn stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        gone(e);
    }
}

/// Write `text` to stderr and flush; a closed stderr ends the process like a closed stdout.
pub fn stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    if let Err(e) = err.write_all(text.as_bytes()).and_then(|()| err.flush()) {
        gone(e);
    }
}

fn gone(e: std::io::Error) {
    if e.kind() == ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    // Any other write error (a full disk behind a redirect): nothing useful can be printed.
    std::process::exit(1);
}

/// `println!` that does not panic on a closed stdout.
#[macro_export]
macro_rules! outln {
    () => { $crate::out::stdout("\n") };
    ($($arg:tt)*) => { $crate::out::stdout(&format!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!` that does not panic on a closed stderr.
#[macro_export]
macro_rules! errln {
    () => { $crate::out::stderr("\n") };
    ($($arg:tt)*) => { $crate::out::stderr(&format!("{}\n", format_args!($($arg)*))) };
}
