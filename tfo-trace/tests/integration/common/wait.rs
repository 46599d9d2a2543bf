//! Waiting on facts, never on time.
//!
//! A test that needs something to have happened (a counter of the kernel to have moved, a
//! line to be printed, a file to exist, a process to be gone) waits for exactly that, with
//! [`eventually`]. One rule for every wait: the fact is checked at once, then after 10 ms,
//! the interval doubling up to 250 ms, until [`HANG_LIMIT`] has passed since the wait
//! began; then the test fails, naming what it waited for and the last state it saw. The
//! limit is not a performance bound, only what turns a hang into a failure: machines of
//! this kind differ in speed and are shared (under TCG on a busy two-core machine the
//! verifier alone has taken over 30 s), so a fact that comes at all comes well within it.
use std::{
    fmt::Display,
    time::{Duration, Instant},
};

/// How long a wait lasts before the test calls it hung (see the module's doc).
pub const HANG_LIMIT: Duration = Duration::from_secs(240);

/// The first pause between two checks of a fact, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_millis(250);

/// Checks `fact` until it holds (`Ok`), by the module's rule, and returns what it gave;
/// past [`HANG_LIMIT`], fails the test with `what` and the last `Err` (the state seen).
pub fn eventually<T, E: std::fmt::Debug>(what: impl Display, fact: impl FnMut() -> Result<T, E>) -> T {
    within(HANG_LIMIT, fact)
        .unwrap_or_else(|seen| panic!("{what}: not so within {HANG_LIMIT:?}; last seen: {seen:?}"))
}

/// [`eventually`] with its own limit, and the last state seen instead of a failure: for a
/// wait whose end is itself what a test checks (a server that must close an idle
/// connection within its timeout).
pub fn within<T, E>(limit: Duration, mut fact: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    let start = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        match fact() {
            Ok(v) => return Ok(v),
            Err(seen) if start.elapsed() >= limit => return Err(seen),
            Err(_) => {}
        }
        std::thread::sleep(pause.min(limit.saturating_sub(start.elapsed())));
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}
