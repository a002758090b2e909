//! The keyboard: a thread that reads one line when asked. On a terminal it is `rustyline`
//! (line editing, history kept in `~/.agentry_history`, multi-line input with a trailing `\`);
//! otherwise plain lines from stdin. The chat loop asks for a line only when it wants one
//! (idle, or a pending approval), so nothing is typed over a streaming answer.

use std::borrow::Cow;
use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustyline::completion::Completer;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Editor, ExternalPrinter, Helper};
use tokio::sync::mpsc;

/// What the keyboard produced.
#[derive(Debug)]
pub enum Input {
    Line(String),
    /// Ctrl-C at the prompt.
    Interrupted,
    /// Ctrl-D, or the end of piped input.
    Eof,
}

/// Lines ending in `\` continue on the next line. Also draws the prompt: while a prompt is
/// withdrawn ([`Keyboard::withdraw`]) it shows the text that replaced it.
struct MultiLine {
    retitle: Arc<Mutex<Option<String>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `text` in exactly `width` columns: rustyline places the cursor by the prompt it was given, so
/// a replacement takes the same room.
fn fit(text: &str, width: usize) -> String {
    let mut s: String = text.chars().take(width).collect();
    let n = s.chars().count();
    s.extend(std::iter::repeat_n(' ', width - n));
    s
}

impl Validator for MultiLine {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        Ok(if ctx.input().ends_with('\\') {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}
impl Completer for MultiLine {
    type Candidate = String;
}
impl Hinter for MultiLine {
    type Hint = String;
}
impl Highlighter for MultiLine {
    fn highlight_prompt<'b, 's: 'b, 'p: 'b>(
        &'s self,
        prompt: &'p str,
        default: bool,
    ) -> Cow<'b, str> {
        let _ = default;
        match lock(&self.retitle).as_deref() {
            Some(text) => Cow::Owned(fit(text, prompt.chars().count())),
            None => Cow::Borrowed(prompt),
        }
    }
}
impl Helper for MultiLine {}

/// A typed multi-line entry as the message it stands for: `a\⏎b` is `a⏎b`.
pub fn join_continued(line: &str) -> String {
    line.replace("\\\n", "\n")
}

pub type Printer = Box<dyn ExternalPrinter + Send>;

pub struct Keyboard {
    asks: std::sync::mpsc::Sender<String>,
    lines: mpsc::UnboundedReceiver<Input>,
    /// A line was asked for and has not arrived yet.
    pub waiting: bool,
    /// What the prompt being edited shows instead of the one it was asked with, once withdrawn.
    retitle: Arc<Mutex<Option<String>>>,
}

fn history_file() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".agentry_history"))
}

impl Keyboard {
    /// Start the reader thread. On a terminal, also returns a printer that writes above the
    /// prompt while a line is being edited.
    pub fn spawn() -> (Keyboard, Option<Printer>) {
        let (ask_tx, ask_rx) = std::sync::mpsc::channel::<String>();
        let (line_tx, line_rx) = mpsc::unbounded_channel();
        let (printer_tx, printer_rx) = std::sync::mpsc::channel::<Option<Printer>>();
        let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
        let retitle = Arc::new(Mutex::new(None));
        let shown = retitle.clone();
        std::thread::spawn(move || {
            if tty && let Ok(mut ed) = Editor::<MultiLine, DefaultHistory>::new() {
                ed.set_helper(Some(MultiLine {
                    retitle: shown.clone(),
                }));
                let history = history_file();
                if let Some(h) = &history {
                    let _ = ed.load_history(h);
                }
                let printer = ed
                    .create_external_printer()
                    .ok()
                    .map(|p| Box::new(p) as Printer);
                let _ = printer_tx.send(printer);
                while let Ok(prompt) = ask_rx.recv() {
                    let got = match ed.readline(&prompt) {
                        Ok(line) => {
                            if !line.trim().is_empty() {
                                let _ = ed.add_history_entry(line.as_str());
                                if let Some(h) = &history {
                                    let _ = ed.save_history(h);
                                }
                            }
                            Input::Line(join_continued(&line))
                        }
                        Err(rustyline::error::ReadlineError::Interrupted) => Input::Interrupted,
                        Err(_) => Input::Eof,
                    };
                    if line_tx.send(got).is_err() {
                        break;
                    }
                }
                return;
            }
            let _ = printer_tx.send(None);
            let stdin = std::io::stdin();
            let mut lines = stdin.lock().lines();
            while ask_rx.recv().is_ok() {
                let got = match lines.next() {
                    Some(Ok(line)) => Input::Line(line),
                    _ => Input::Eof,
                };
                if line_tx.send(got).is_err() {
                    break;
                }
            }
        });
        let printer = printer_rx.recv().ok().flatten();
        (
            Keyboard {
                asks: ask_tx,
                lines: line_rx,
                waiting: false,
                retitle,
            },
            printer,
        )
    }

    /// Ask for a line with `prompt`, unless one is already being read.
    pub fn ask(&mut self, prompt: &str) {
        if self.waiting {
            return;
        }
        *lock(&self.retitle) = None;
        if self.asks.send(prompt.to_string()).is_ok() {
            self.waiting = true;
        }
    }

    /// The prompt being edited no longer asks what it asked (an approval decided elsewhere):
    /// on a terminal it shows `text` from its next redraw (print something to redraw it). The
    /// line it returns is the caller's to discard.
    pub fn withdraw(&self, text: &str) {
        if self.waiting {
            *lock(&self.retitle) = Some(text.to_string());
        }
    }

    pub async fn next(&mut self) -> Input {
        let got = self.lines.recv().await.unwrap_or(Input::Eof);
        self.waiting = false;
        got
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn continued_lines_join_with_newlines() {
        assert_eq!(super::join_continued("a\\\nb\\\nc"), "a\nb\nc");
        assert_eq!(super::join_continued("a\\b"), "a\\b");
    }
}
