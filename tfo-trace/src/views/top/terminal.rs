//! Owning the terminal while `top` draws: raw mode and the alternate screen on entry, and
//! the terminal given back on every way out (drop, error, panic). While the UI runs,
//! anything written to stderr (log lines, kernel-side logs, a panic message) goes to an
//! in-memory file instead of over the UI, and is printed once the terminal is restored.
use std::{
    io::{self, Read as _, Seek as _, Stdout, Write as _},
    os::fd::{FromRawFd as _, RawFd},
    sync::{Mutex, Once},
};

use anyhow::{Context as _, Result};
use crossterm::{
    cursor::{Hide, Show},
    execute,
    terminal::{disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen},
};
use ratatui::{backend::CrosstermBackend, Terminal};

/// While we own the terminal: Some (holding the stderr capture, if one could be made).
/// `restore` takes it, so it acts once.
static ACTIVE: Mutex<Option<Option<StderrCapture>>> = Mutex::new(None);
static PANIC_HOOK: Once = Once::new();

/// fd 2 pointed at a memfd; the real stderr kept aside.
struct StderrCapture {
    saved: RawFd,
    memfd: RawFd,
}

impl StderrCapture {
    fn start() -> Option<StderrCapture> {
        // SAFETY: memfd_create with a valid NUL-terminated name and no flags.
        let memfd = unsafe { libc::memfd_create(c"tfo-trace-stderr".as_ptr(), libc::MFD_CLOEXEC) };
        if memfd < 0 {
            return None;
        }
        // SAFETY: dup/dup2 on fds we own (2 is open for the life of the process).
        let saved = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) };
        // SAFETY: as above.
        if saved < 0 || unsafe { libc::dup2(memfd, 2) } < 0 {
            // SAFETY: closing fds this function opened.
            unsafe {
                libc::close(memfd);
                if saved >= 0 {
                    libc::close(saved);
                }
            }
            return None;
        }
        Some(StderrCapture { saved, memfd })
    }

    /// Points fd 2 back at the real stderr and prints what was written meanwhile.
    fn finish(self) {
        let _ = io::stderr().flush();
        // SAFETY: `saved` is our duplicate of the original fd 2; dup2 makes 2 that again.
        unsafe {
            libc::dup2(self.saved, 2);
            libc::close(self.saved);
        }
        // SAFETY: the memfd is ours alone and closed exactly once, by this File.
        let mut f = unsafe { std::fs::File::from_raw_fd(self.memfd) };
        let mut buffered = Vec::new();
        if f.rewind().is_ok() && f.read_to_end(&mut buffered).is_ok() && !buffered.is_empty() {
            let _ = io::stderr().write_all(&buffered);
        }
    }
}

/// Gives the terminal back: leaves raw mode and the alternate screen, shows the cursor,
/// then prints the stderr lines held back. Safe to call more than once, from a panic too.
pub(crate) fn restore() {
    let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(capture) = active.take() else { return };
    let _ = disable_raw_mode();
    let _ = execute!(io::stdout(), LeaveAlternateScreen, Show);
    if let Some(capture) = capture {
        capture.finish();
    }
}

/// The terminal while the UI runs; dropping it restores the terminal.
pub(crate) struct TerminalGuard {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl TerminalGuard {
    pub(crate) fn enter() -> Result<TerminalGuard> {
        PANIC_HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        {
            let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
            // No memfd: logs would draw over the UI, but the UI still works.
            *active = Some(StderrCapture::start());
        }
        let entered = (|| -> Result<Terminal<CrosstermBackend<Stdout>>> {
            enable_raw_mode().context("switching the terminal to raw mode")?;
            execute!(io::stdout(), EnterAlternateScreen, Hide).context("entering the alternate screen")?;
            Terminal::new(CrosstermBackend::new(io::stdout())).context("opening the terminal")
        })();
        match entered {
            Ok(terminal) => Ok(TerminalGuard { terminal }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}
