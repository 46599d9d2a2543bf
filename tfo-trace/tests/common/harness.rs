//! The test harness of tfo-trace's integration tests (libtest-mimic, `harness = false`).
//!
//! libtest has no way for a test to say "cannot run here": a test that returns early is
//! reported as passed. Here a test calls [`skip`] with the reason instead, and the run
//! reports it as `ignored (reason)`, counted apart in libtest's own `test result:` line,
//! which `cargo xtask test` sums into its closing tally with every reason.
//!
//! A kernel test (one that passed `require_kernel!`) that fails runs once more, and passes
//! only if that second run passes. The kernel has been seen not to run a tracepoint's
//! programs at all (tfo-trace's and bpftrace's alike, no recursion miss counted) for a SYN
//! or SYN-ACK retransmission and what followed it, about once in a few hundred stalled
//! connections on 6.18 (docs/outcomes.md, "Outcomes and the kernel's counters"); a test comparing
//! exact counts with the kernel's then fails with no fault of the tracer. A test passed on
//! its second run is never quiet about it: a `retried:` line names it with its first
//! failure, and `cargo xtask test` lists those lines in its summary.
//!
//! A test file lists its tests once: `tests_main!(first_test, second_test);`. One body run
//! with several arguments is a table of cases, each its own test named `body_case`:
//! `tests_main!(first_contact_then_tfo { ipv4: false, ipv6: true });` runs
//! `first_contact_then_tfo(false)` as `first_contact_then_tfo_ipv4` and
//! `first_contact_then_tfo(true)` as `first_contact_then_tfo_ipv6`.
use std::{
    cell::Cell,
    panic::{self, AssertUnwindSafe},
    process::ExitCode,
};

use libtest_mimic::{Arguments, Completion, Failed, Trial};

/// The payload of a skip: unwinds out of the test like a failed assertion would, but is
/// reported as ignored with its reason.
struct Skip(String);

/// Ends the calling test as skipped (ignored), with the reason in the run's tally.
pub fn skip(reason: impl Into<String>) -> ! {
    panic::panic_any(Skip(reason.into()))
}

thread_local! {
    /// Set by `require_kernel!` on the thread running the test (libtest-mimic runs each
    /// test on one thread): whether the test used the kernel, and may run a second time.
    static USES_KERNEL: Cell<bool> = const { Cell::new(false) };
}

/// Marks the running test as a kernel test (`require_kernel!` calls it once it may run).
pub fn uses_kernel() {
    USES_KERNEL.with(|k| k.set(true));
}

/// One test: its name and its body.
pub struct Test {
    name: &'static str,
    body: Box<dyn Fn() + Send + Sync>,
}

impl Test {
    pub fn new(name: &'static str, body: impl Fn() + Send + Sync + 'static) -> Test {
        Test { name, body: Box::new(body) }
    }
}

/// One run of `test`: Ok, or the reason it was skipped (`Err(Ok(reason))`) or failed.
fn run_once(test: &dyn Fn()) -> Result<(), Result<String, String>> {
    match panic::catch_unwind(AssertUnwindSafe(test)) {
        Ok(()) => Ok(()),
        Err(payload) => match payload.downcast::<Skip>() {
            Ok(skip) => Err(Ok(skip.0)),
            Err(payload) => Err(Err(panic_text(&*payload))),
        },
    }
}

/// A failed kernel test's second run (see the module's doc).
fn run_with_retry(name: &str, test: &dyn Fn()) -> Result<Completion, Failed> {
    USES_KERNEL.with(|k| k.set(false));
    let first = match run_once(test) {
        Ok(()) => return Ok(Completion::Completed),
        Err(Ok(reason)) => return Ok(Completion::ignored_with(reason)),
        Err(Err(failure)) => failure,
    };
    if !USES_KERNEL.with(|k| k.get()) {
        return Err(Failed::from(first));
    }
    let first_line = first.lines().next().unwrap_or("").chars().take(300).collect::<String>();
    match run_once(test) {
        Ok(()) => {
            println!("retried: {name} passed on its second run; its first run failed: {first_line}");
            Ok(Completion::Completed)
        }
        Err(Ok(reason)) => Ok(Completion::ignored_with(reason)),
        Err(Err(second)) => Err(Failed::from(format!("{first}\n(failed again on its second run: {second})"))),
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}

/// Runs `tests` under libtest's command line (filters, `--list`, `--test-threads`, ...).
pub fn run(tests: Vec<Test>) -> ExitCode {
    let args = Arguments::from_args();
    // A skip is not a failure: no "thread panicked" message for it.
    let default_hook = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        if !info.payload().is::<Skip>() {
            default_hook(info);
        }
    }));
    let trials = tests
        .into_iter()
        .map(|Test { name, body }| Trial::ignorable_test(name, move || run_with_retry(name, &*body)))
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

/// `fn main` of a test file: its tests, by function name, and its tables of cases (the
/// module's doc).
#[macro_export]
macro_rules! tests_main {
    ($( $test:ident $({ $($case:ident : $arg:expr),+ $(,)? })? ),+ $(,)?) => {
        fn main() -> std::process::ExitCode {
            let tests: Vec<Vec<common::harness::Test>> =
                vec![$( $crate::tests_main!(@tests $test $({ $($case : $arg),+ })?) ),+];
            common::harness::run(tests.into_iter().flatten().collect())
        }
    };
    (@tests $test:ident) => {
        vec![common::harness::Test::new(stringify!($test), $test)]
    };
    (@tests $test:ident { $($case:ident : $arg:expr),+ }) => {
        vec![$( common::harness::Test::new(concat!(stringify!($test), "_", stringify!($case)), || $test($arg)) ),+]
    };
}
