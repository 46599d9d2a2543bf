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
//!
//! [`Deltas`] is the kernel's own counters of both lab namespaces from a moment on: what
//! the tests compare the tracer's figures with, and what a wait on the kernel waits on.
use std::{
    fmt::Display,
    time::{Duration, Instant},
};

use tfo_trace::{
    kernel::netstat::Netstat,
    lab::{Lab, Side},
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

/// The kernel's counters of a lab's client and server namespaces from the moment
/// [`Deltas::since`] was called: `nstat` of each, as a delta.
pub struct Deltas<'l> {
    lab: &'l Lab,
    client: Netstat,
    server: Netstat,
}

impl<'l> Deltas<'l> {
    /// Both namespaces' counters now: the deltas count from here.
    pub fn since(lab: &'l Lab) -> Deltas<'l> {
        Deltas { lab, client: Self::read(lab, Side::Client), server: Self::read(lab, Side::Server) }
    }

    fn read(lab: &Lab, side: Side) -> Netstat {
        lab.netstat(side).unwrap_or_else(|e| panic!("the {side:?} namespace's counters: {e:#}"))
    }

    /// How much each counter of `side`'s namespace has moved since.
    pub fn of(&self, side: Side) -> CounterDeltas {
        let before = match side {
            Side::Client => &self.client,
            Side::Server => &self.server,
        };
        CounterDeltas(Netstat::delta(before, &Self::read(self.lab, side)))
    }

    pub fn client(&self) -> CounterDeltas {
        self.of(Side::Client)
    }

    pub fn server(&self) -> CounterDeltas {
        self.of(Side::Server)
    }

    /// (client, server).
    pub fn both(&self) -> (CounterDeltas, CounterDeltas) {
        (self.client(), self.server())
    }

    /// Waits ([`eventually`]) until `counter` has risen by at least `n` in `side`'s
    /// namespace; returns that namespace's deltas then.
    pub fn wait_for(&self, side: Side, counter: &str, n: u64) -> CounterDeltas {
        eventually(format!("{counter} up by {n} in the {side:?} namespace"), || {
            let d = self.of(side);
            if d.get(counter) >= n {
                Ok(d)
            } else {
                Err(d.nonzero().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "))
            }
        })
    }
}

/// How much a namespace's counters moved ([`Deltas`]), or their values: a counter the
/// kernel does not list fails the test, naming it and the counters there are, where the
/// product's `Netstat::get` says 0 (older kernels lack some). A misspelled counter must
/// not pass as "moved by 0" against a tracer that saw nothing.
#[derive(Clone)]
pub struct CounterDeltas(pub Netstat);

impl CounterDeltas {
    /// The counter `name`; fails the test where the kernel does not list it.
    pub fn get(&self, name: &str) -> u64 {
        super::nstat::listed(&self.0 .0, name, "the kernel")
    }

    /// The counters that are not 0.
    pub fn nonzero(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.nonzero()
    }
}

/// The counters that moved: what a failed assertion shows.
impl std::fmt::Debug for CounterDeltas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.nonzero()).finish()
    }
}
