//! The terminal's keys and resizes, read on a thread of their own, and the terminal's
//! hang-up.
//!
//! crossterm's event reader does not return once its terminal is gone: a hung-up tty
//! (hung_up_tty_fops in drivers/tty/tty_io.c) polls readable and reads 0 for good, and the
//! reader's loop retries at once, in `poll` as in `read`, whatever the timeout
//! (crossterm-rs/crossterm#793, crossterm 0.29's mio source). Called from the view's loop, that left a `top` whose terminal went away (an
//! ssh session dropped, a tmux pane killed) spinning a core for good, deaf to the SIGHUP
//! and the `--duration` that should have stopped it. Read here, a spin is this thread's
//! until the process exits, and the view's loop goes on seeing its signals and deadline.
//! Where no SIGHUP comes (the view outside the terminal's session: `setsid`, a supervisor
//! that relays none), the view asks the kernel whether the terminal hung up.

use anyhow::{Context, Result};
use crossterm::event::Event;
use tokio::sync::mpsc;

/// Events from the terminal, as crossterm reads them.
pub(crate) struct Keys {
    rx: mpsc::Receiver<Event>,
}

impl Keys {
    pub(crate) fn start() -> Result<Keys> {
        // Some typing ahead; the reader waits while the view is behind.
        let (tx, rx) = mpsc::channel(64);
        std::thread::Builder::new()
            .name("top-keys".into())
            .spawn(move || {
                while let Ok(ev) = crossterm::event::read() {
                    if tx.blocking_send(ev).is_err() {
                        break;
                    }
                }
            })
            .context("starting the keyboard reader")?;
        Ok(Keys { rx })
    }

    /// The next event; `None` once the reader stopped (its terminal gave an error).
    pub(crate) async fn next(&mut self) -> Option<Event> {
        self.rx.recv().await
    }
}

/// The terminal on `fd` hung up: its other end closed (a pty's master: the terminal
/// emulator, sshd, tmux) and the kernel hung it up, whose poll says POLLHUP from then on
/// (hung_up_tty_poll()).
pub(crate) fn hung_up(fd: std::os::fd::RawFd) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd, valid for the call; a zero timeout never blocks.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}
