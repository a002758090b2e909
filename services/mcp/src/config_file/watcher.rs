//! [`McpConfigWatcher`]: keeps the config file loaded and tells the pool what changed.
//!
//! One thread per watcher owns the state. It wakes on
//! - a filesystem event in the file's **directory** (notify; inotify on Linux). Watching the
//!   directory rather than the file survives editors that save by writing a new file and renaming
//!   it over the old one (vim, most IDEs) and Kubernetes' `..data` symlink swap;
//! - a **poll** of the file's size, mtime and inode every few seconds, for filesystems that send
//!   no events (NFS, some container mounts) or when the watch could not be set up;
//!
//! and reloads after the events have been quiet for the debounce time (300 ms), so a save that
//! is several writes is read once, complete. A reload whose text is the same as the last one
//! read does nothing. A bad file (or an empty one, which is usually a file caught mid-write)
//! keeps the last good config and logs every problem; a deleted file keeps it too.

use std::ffi::OsString;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher as _};

use super::{ConfigDiff, FileFormat, LoadError, McpFileConfig, read_config_text};

/// Timing of a [`McpConfigWatcher`].
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Quiet time after the last filesystem event before the file is read.
    pub debounce: Duration,
    /// How often the file's size/mtime/inode are compared even without events.
    pub poll_interval: Duration,
    /// Use filesystem events (notify). Off, the watcher only polls.
    pub use_notify: bool,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self {
            debounce: Duration::from_millis(300),
            poll_interval: Duration::from_secs(3),
            use_notify: true,
        }
    }
}

enum Msg {
    Changed,
    CheckNow,
    Stop,
}

struct Shared {
    current: RwLock<Arc<McpFileConfig>>,
    last_error: Mutex<Option<String>>,
}

impl Shared {
    fn current(&self) -> Arc<McpFileConfig> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn set_current(&self, config: Arc<McpFileConfig>) {
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = config;
    }

    fn set_error(&self, error: Option<String>) {
        *self
            .last_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = error;
    }
}

/// Watches the MCP config file and hot-reloads it. Stops (and joins its thread) on drop; no
/// callback runs after `drop` returns.
pub struct McpConfigWatcher {
    path: PathBuf,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Msg>,
    thread: Option<JoinHandle<()>>,
    fs_watcher: Option<notify::RecommendedWatcher>,
}

impl std::fmt::Debug for McpConfigWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpConfigWatcher")
            .field("path", &self.path)
            .field("servers", &self.current().servers.len())
            .field("uses_fs_events", &self.fs_watcher.is_some())
            .finish()
    }
}

impl McpConfigWatcher {
    /// Load `path` and watch it with the default timing. See [`McpConfigWatcher::start_with`].
    pub fn start(
        path: impl Into<PathBuf>,
        on_change: impl Fn(ConfigDiff) + Send + 'static,
    ) -> Result<Self, LoadError> {
        Self::start_with(path, WatchOptions::default(), on_change)
    }

    /// Load `path` now and watch it. A missing file is an empty config (it is loaded when it
    /// appears); a file that can't be read or is invalid fails the start with every problem,
    /// since there is no earlier config to keep. `on_change` is not called for this first load
    /// (read [`McpConfigWatcher::current`]); afterwards it gets every non-empty change, on the
    /// watcher's thread, after [`McpConfigWatcher::current`] already returns the new config. It
    /// should hand the diff on (send a message) rather than block.
    pub fn start_with(
        path: impl Into<PathBuf>,
        options: WatchOptions,
        on_change: impl Fn(ConfigDiff) + Send + 'static,
    ) -> Result<Self, LoadError> {
        let path: PathBuf = path.into();
        // Absolute, so the parent directory can be watched and a later chdir changes nothing.
        let path = std::path::absolute(&path).unwrap_or(path);
        let format = FileFormat::from_path(&path);
        // Taken before the read: a change made while reading shows up at the next poll.
        let initial_fingerprint = fingerprint(&path);
        let (initial, seen) = match read_config_text(&path) {
            Err(LoadError::Missing { .. }) => {
                tracing::info!(
                    file = %path.display(),
                    "no MCP config file: starting without file-configured MCP servers; the file \
                     is loaded when it is created"
                );
                (McpFileConfig::default(), Seen::Missing)
            }
            Err(e) => return Err(e),
            Ok(text) => match McpFileConfig::parse(&text, format) {
                Ok(loaded) => {
                    for w in &loaded.warnings {
                        tracing::warn!(file = %path.display(), "MCP config: {w}");
                    }
                    tracing::info!(
                        file = %path.display(),
                        servers = loaded.config.servers.len(),
                        "MCP config file loaded"
                    );
                    (loaded.config, Seen::Text(text))
                }
                Err(mut e) => {
                    e.file = Some(path.clone());
                    return Err(LoadError::Invalid(e));
                }
            },
        };
        let shared = Arc::new(Shared {
            current: RwLock::new(Arc::new(initial)),
            last_error: Mutex::new(None),
        });
        let (tx, rx) = mpsc::channel();
        let fs_watcher = if options.use_notify {
            match watch_directory(&path, tx.clone()) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(
                        file = %path.display(),
                        "cannot watch the MCP config file's directory for changes ({e}); \
                         checking it every {:?} instead",
                        options.poll_interval
                    );
                    None
                }
            }
        } else {
            None
        };
        let mut state = State {
            fingerprint: initial_fingerprint,
            path: path.clone(),
            format,
            shared: shared.clone(),
            on_change: Box::new(on_change),
            seen,
        };
        let thread = std::thread::Builder::new()
            .name("mcp-config-watch".into())
            .spawn(move || state.run(rx, options))
            .map_err(|e| LoadError::Read {
                path: path.clone(),
                message: format!("could not start the watcher thread: {e}"),
            })?;
        Ok(Self {
            path,
            shared,
            tx,
            thread: Some(thread),
            fs_watcher,
        })
    }

    /// The last good config.
    pub fn current(&self) -> Arc<McpFileConfig> {
        self.shared.current()
    }

    /// Why the file on disk is not the config in use (invalid, empty, deleted, unreadable), or
    /// `None` when it is.
    pub fn last_error(&self) -> Option<String> {
        self.shared
            .last_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The watched file (absolute).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether filesystem events are used (otherwise only polling).
    pub fn uses_fs_events(&self) -> bool {
        self.fs_watcher.is_some()
    }

    /// Read the file now instead of waiting for an event or the next poll (e.g. on SIGHUP).
    pub fn check_now(&self) {
        let _ = self.tx.send(Msg::CheckNow);
    }
}

impl Drop for McpConfigWatcher {
    fn drop(&mut self) {
        // Stop the event source first, then the thread.
        self.fs_watcher.take();
        let _ = self.tx.send(Msg::Stop);
        if let Some(thread) = self.thread.take() {
            // Dropped from inside the callback: the thread ends by itself after it returns.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

fn watch_directory(
    path: &Path,
    tx: mpsc::Sender<Msg>,
) -> Result<notify::RecommendedWatcher, notify::Error> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let file_name: Option<OsString> = path.file_name().map(Into::into);
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let relevant = match &res {
            // A queue overflow or a watch error: the file may have changed unseen.
            Err(_) => true,
            Ok(event) => {
                let reads_only = matches!(
                    event.kind,
                    EventKind::Access(kind) if kind != AccessKind::Close(AccessMode::Write)
                );
                !reads_only
                    && (event.need_rescan()
                        || event.paths.is_empty()
                        || event.paths.iter().any(|p| {
                            let name = p.file_name();
                            name == file_name.as_deref()
                                // Kubernetes ConfigMaps swap a `..data` symlink.
                                || name.is_some_and(|n| n.to_string_lossy().starts_with(".."))
                        }))
            }
        };
        if relevant {
            let _ = tx.send(Msg::Changed);
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

/// What the file looked like at the last read.
#[derive(PartialEq, Eq)]
enum Seen {
    Missing,
    Unreadable(String),
    Text(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    len: u64,
    modified: Option<SystemTime>,
    #[cfg(unix)]
    inode: (u64, u64),
}

fn fingerprint(path: &Path) -> Option<Fingerprint> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Fingerprint {
        len: meta.len(),
        modified: meta.modified().ok(),
        #[cfg(unix)]
        inode: {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        },
    })
}

struct State {
    path: PathBuf,
    format: FileFormat,
    shared: Arc<Shared>,
    on_change: Box<dyn Fn(ConfigDiff) + Send>,
    seen: Seen,
    fingerprint: Option<Fingerprint>,
}

impl State {
    fn run(&mut self, rx: mpsc::Receiver<Msg>, options: WatchOptions) {
        let debounce = options.debounce;
        let max_wait = debounce * 10;
        let poll = options.poll_interval.max(Duration::from_millis(50));
        // (first, last) event of the burst being debounced.
        let mut pending: Option<(Instant, Instant)> = None;
        let mut next_poll = Instant::now() + poll;
        loop {
            let deadline = match pending {
                Some((first, last)) => (last + debounce).min(first + max_wait).min(next_poll),
                None => next_poll,
            };
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Msg::Changed) => {
                    let now = Instant::now();
                    pending = Some(pending.map_or((now, now), |(first, _)| (first, now)));
                }
                Ok(Msg::CheckNow) => {
                    pending = None;
                    self.check();
                }
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
            let now = Instant::now();
            if let Some((first, last)) = pending
                && (now >= last + debounce || now >= first + max_wait)
            {
                pending = None;
                self.check();
            }
            if now >= next_poll {
                next_poll = now + poll;
                // Polling only notices; the read waits for the debounce like an event would.
                if pending.is_none() && fingerprint(&self.path) != self.fingerprint {
                    pending = Some((now, now));
                }
            }
        }
    }

    fn keep_old(&mut self, why: String) {
        let kept = self.shared.current().servers.len();
        tracing::warn!(
            file = %self.path.display(),
            "{why}; keeping the last good MCP config ({kept} servers)"
        );
        self.shared.set_error(Some(why));
    }

    fn check(&mut self) {
        self.fingerprint = fingerprint(&self.path);
        let text = match read_config_text(&self.path) {
            Err(LoadError::Missing { .. }) => {
                if self.seen != Seen::Missing {
                    self.seen = Seen::Missing;
                    self.keep_old(format!(
                        "MCP config file {} was deleted",
                        self.path.display()
                    ));
                }
                return;
            }
            Err(e) => {
                let message = e.to_string();
                if self.seen != Seen::Unreadable(message.clone()) {
                    self.seen = Seen::Unreadable(message.clone());
                    self.keep_old(message);
                }
                return;
            }
            Ok(text) => text,
        };
        if matches!(&self.seen, Seen::Text(old) if *old == text) {
            return;
        }
        self.seen = Seen::Text(text.clone());
        if text.trim().is_empty() {
            self.keep_old(format!(
                "MCP config file {} is empty (perhaps caught while being written; to remove \
                 every server write `servers: []`)",
                self.path.display()
            ));
            return;
        }
        let loaded = match McpFileConfig::parse(&text, self.format) {
            Ok(loaded) => loaded,
            Err(mut e) => {
                e.file = Some(self.path.clone());
                self.keep_old(e.to_string());
                return;
            }
        };
        for w in &loaded.warnings {
            tracing::warn!(file = %self.path.display(), "MCP config: {w}");
        }
        self.shared.set_error(None);
        let new = Arc::new(loaded.config);
        let diff = ConfigDiff::between(&self.shared.current(), new.clone());
        self.shared.set_current(new);
        if diff.is_empty() {
            tracing::info!(file = %self.path.display(), "MCP config file reloaded; no server changed");
            return;
        }
        tracing::info!(
            file = %self.path.display(),
            "MCP config file reloaded: {}",
            diff.summary()
        );
        let on_change = &self.on_change;
        if std::panic::catch_unwind(AssertUnwindSafe(|| on_change(diff))).is_err() {
            tracing::error!(
                file = %self.path.display(),
                "the MCP config change handler panicked; the watcher goes on"
            );
        }
    }
}
