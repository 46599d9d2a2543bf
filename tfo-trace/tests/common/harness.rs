//! The test harness of tfo-trace's integration tests (libtest-mimic, `harness = false`).
//!
//! libtest has no way for a test to say "cannot run here": a test that returns early is
//! reported as passed. Here a test calls [`skip`] with the reason instead, and the run
//! reports it as `ignored (reason)`, counted apart in libtest's own `test result:` line,
//! which `cargo xtask test` sums into its closing tally with every reason.
//!
//! A test file lists its tests once: `tests_main!(first_test, second_test);`.
use std::{
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

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}

/// Runs `tests` under libtest's command line (filters, `--list`, `--test-threads`, ...).
pub fn run(tests: &[(&'static str, fn())]) -> ExitCode {
    let args = Arguments::from_args();
    // A skip is not a failure: no "thread panicked" message for it.
    let default_hook = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        if !info.payload().is::<Skip>() {
            default_hook(info);
        }
    }));
    let trials = tests
        .iter()
        .map(|&(name, test)| {
            Trial::ignorable_test(name, move || match panic::catch_unwind(AssertUnwindSafe(test)) {
                Ok(()) => Ok(Completion::Completed),
                Err(payload) => match payload.downcast::<Skip>() {
                    Ok(skip) => Ok(Completion::ignored_with(skip.0)),
                    Err(payload) => Err(Failed::from(panic_text(&*payload))),
                },
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

/// `fn main` of a test file: its tests, by function name.
#[macro_export]
macro_rules! tests_main {
    ($($test:ident),+ $(,)?) => {
        fn main() -> std::process::ExitCode {
            common::harness::run(&[$((stringify!($test), $test as fn())),+])
        }
    };
}
