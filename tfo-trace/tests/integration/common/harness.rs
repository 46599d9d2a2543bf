//! The test harness of tfo-trace's integration tests (libtest-mimic, `harness = false`).
//!
//! The integration tests are one executable (`tests/integration/main.rs`: one link, not
//! one per file), of modules, one per file. A module lists its tests once, at its end:
//! `module_tests!(first_test, second_test);`. One body run with several arguments is a
//! table of cases, each its own test named `body_case`: `module_tests!(first_contact_then_tfo
//! { ipv4: false, ipv6: true });` runs `first_contact_then_tfo(false)` as
//! `first_contact_then_tfo_ipv4` and `first_contact_then_tfo(true)` as
//! `first_contact_then_tfo_ipv6`. A test's full name is `MODULE::TEST`
//! (`stalls::stalls_lists_every_connection_that_paid_a_syn_timeout`): libtest's filter
//! selects one test by it, a whole module by `MODULE::`.
//!
//! # One module at a time
//!
//! The modules run one after another, each a libtest run of its own (`--test-threads`
//! tests of it at once), after a `module: NAME` line: as when each was its own executable,
//! no test shares the machine with another module's (the private container engines, the
//! exporters, the BPF objects some tests count). A module no test of which the filter
//! selects is left out. `cargo xtask test` reads the `module:` lines for its time per
//! module (xtask/src/testlines.rs).
//!
//! # What a test can say besides pass and fail (the whole API)
//!
//! - [`skip`]`(reason)`: the test cannot run here. libtest has no such verdict (a test that
//!   returns early passes), so the harness reports it as `ignored (reason)`, counted apart in
//!   libtest's `test result:` line; `cargo xtask test` lists every reason, and each must
//!   be on xtask's one list of skips (xtask/src/skips.rs), on the host as in a VM cell.
//! - [`partial_skip`]`(reason)`: one check of a test that otherwise ran could not run here
//!   (an outcome the backend cannot see: `common::visible`; no netem on this kernel). The
//!   test passes on what it did check, and the harness prints `partial: NAME: REASON` after
//!   it, once per reason; `cargo xtask test` counts and lists those with the skips, and in
//!   each must be on that list too.
//! - [`assert_hook_count`]`(hook, traced, kernel, what)`: a count the tracer reports against
//!   the kernel's, for connections that retransmitted a SYN or SYN-ACK. The kernel has been
//!   seen not to run a tracepoint's programs at all (tfo-trace's and bpftrace's alike, no
//!   recursion miss counted) for a SYN or SYN-ACK retransmission and sometimes the
//!   ESTABLISHED transition after it, about once in a few hundred stalled connections on
//!   6.18 (docs/outcomes.md, "Outcomes and the kernel's counters"). Equal counts pass; the
//!   tracer's count exactly one short of the kernel's is that known signature, and fails
//!   the run with a typed payload ([`HookSkipped`]); any other difference is a plain
//!   failure.
//!
//! # Second runs: opt-in, for the known signature only
//!
//! A test runs a second time only when its first run failed through
//! [`assert_hook_count`]'s signature: no other failure of any test gets one. The harness
//! prints `second run: NAME: CAUSE` before it. The test passes only if the second run
//! passes (a `retried: NAME passed on its second run; its first run failed: CAUSE` line);
//! a skip on the second run after that failure is a failure, so is a second failure of
//! any kind. `cargo xtask test` lists every second run with its cause and fails the run
//! when there are more than its budget (`SECOND_RUN_BUDGET`, 2 per run, host and VM
//! together: xtask/src/testlines.rs) or when the same test needed one twice (in two VM
//! cells, say): a rare kernel behaviour is rare, a frequent one is a bug.
use std::{
    cell::RefCell,
    fmt::Display,
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
    /// The partial skips of the test running on this thread (libtest-mimic runs each test
    /// on one thread), in the order said, without repeats.
    static PARTIAL: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Records that one check of the running test could not run here, with the reason; the
/// test goes on (module doc).
pub fn partial_skip(reason: impl Into<String>) {
    let reason = reason.into();
    eprintln!("not checked: {reason}");
    PARTIAL.with(|p| {
        let mut p = p.borrow_mut();
        if !p.contains(&reason) {
            p.push(reason);
        }
    });
}

/// The kernel hook run a count depends on: the one the kernel has been seen to skip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookRun {
    /// A SYN or SYN-ACK retransmission's tracepoint (`tcp:tcp_retransmit_skb`,
    /// `tcp:tcp_retransmit_synack`).
    Retransmission,
    /// The SYN_SENT -> ESTABLISHED state change after a SYN retransmission, where a
    /// stalled connection's outcome is decided and counted.
    Established,
}

impl HookRun {
    fn name(self) -> &'static str {
        match self {
            HookRun::Retransmission => "SYN/SYN-ACK retransmission",
            HookRun::Established => "ESTABLISHED",
        }
    }
}

/// A failure with the known signature of a skipped hook run ([`assert_hook_count`]): the
/// only failure that earns a second run.
pub struct HookSkipped {
    pub hook: HookRun,
    pub message: String,
}

impl HookSkipped {
    fn text(&self) -> String {
        format!("one {} short (the kernel's skipped hook run): {}", self.hook.name(), self.message)
    }
}

/// The tracer's count against the kernel's, for connections that retransmitted a SYN or
/// SYN-ACK: passes when equal, fails with [`HookSkipped`] when the tracer's is exactly one
/// short (the one failure that gets a second run), and plainly otherwise.
pub fn assert_hook_count(hook: HookRun, traced: u64, kernel: u64, what: impl Display) {
    if traced == kernel {
        return;
    }
    let message = format!("{what}: the tracer counted {traced}, the kernel {kernel}");
    if traced + 1 == kernel {
        panic::panic_any(HookSkipped { hook, message });
    }
    panic!("{message}");
}

/// A view's count (top's rows, the exporter's series) of connections that retransmitted a
/// SYN or SYN-ACK, against the kernel's: the events the hook sent for the same runs
/// (`witnessed`: a recording the view wrote, or a tracer beside it, whose programs the
/// kernel runs or skips together with the view's) decide which failure it is. Events one
/// short of the kernel are the kernel's skipped hook run ([`assert_hook_count`], a second
/// run); the view against those events must be exact, or the view is wrong, and no second
/// run hides that.
pub fn assert_view_count(hook: HookRun, view: u64, witnessed: u64, kernel: u64, what: impl Display) {
    assert_hook_count(hook, witnessed, kernel, format!("{what} (the hook's events)"));
    assert_eq!(view, witnessed, "{what}: the view against the events it was made from");
}

/// One test: its name in its module and its body.
pub struct Test {
    name: &'static str,
    body: Box<dyn Fn() + Send + Sync>,
}

impl Test {
    pub fn new(name: &'static str, body: impl Fn() + Send + Sync + 'static) -> Test {
        Test { name, body: Box::new(body) }
    }
}

/// One module's tests (`module_tests!`).
pub struct Module {
    /// `stalls`, the prefix of its tests' names.
    pub name: &'static str,
    pub tests: Vec<Test>,
}

impl Module {
    /// The module whose path `module_path!()` gives (`integration::stalls`): its name is
    /// the path's last part.
    pub fn new(path: &'static str, tests: Vec<Test>) -> Module {
        Module { name: path.rsplit("::").next().unwrap_or(path), tests }
    }

    fn trials(self) -> Vec<Trial> {
        let module = self.name;
        self.tests
            .into_iter()
            .map(|Test { name, body }| {
                let full = format!("{module}::{name}");
                let shown = full.clone();
                Trial::ignorable_test(full, move || run_test(&shown, &*body))
            })
            .collect()
    }
}

/// How one run of a test ended.
enum Run {
    /// Passed, with its partial skips.
    Passed(Vec<String>),
    Skipped(String),
    Failed(String),
    /// Failed with the known signature of a skipped hook run.
    HookSkipped(String),
}

fn run_once(test: &dyn Fn()) -> Run {
    PARTIAL.with(|p| p.borrow_mut().clear());
    let result = panic::catch_unwind(AssertUnwindSafe(test));
    let partial = PARTIAL.with(|p| std::mem::take(&mut *p.borrow_mut()));
    match result {
        Ok(()) => Run::Passed(partial),
        Err(payload) => match payload.downcast::<Skip>() {
            Ok(skip) => Run::Skipped(skip.0),
            Err(payload) => match payload.downcast::<HookSkipped>() {
                Ok(h) => Run::HookSkipped(h.text()),
                Err(payload) => Run::Failed(panic_text(&*payload)),
            },
        },
    }
}

fn passed(name: &str, partial: &[String]) -> Result<Completion, Failed> {
    for reason in partial {
        println!("partial: {name}: {reason}");
    }
    Ok(Completion::Completed)
}

/// A test's run, and its second run where the first failed with the known signature (the
/// module's doc).
fn run_test(name: &str, test: &dyn Fn()) -> Result<Completion, Failed> {
    let first = match run_once(test) {
        Run::Passed(partial) => return passed(name, &partial),
        Run::Skipped(reason) => return Ok(Completion::ignored_with(reason)),
        Run::Failed(failure) => return Err(Failed::from(failure)),
        Run::HookSkipped(cause) => cause,
    };
    let cause = first.lines().next().unwrap_or("").chars().take(300).collect::<String>();
    println!("second run: {name}: {cause}");
    match run_once(test) {
        Run::Passed(partial) => {
            println!("retried: {name} passed on its second run; its first run failed: {cause}");
            passed(name, &partial)
        }
        Run::Skipped(reason) => {
            Err(Failed::from(format!("{first}\n(skipped on its second run, after that failure: {reason})")))
        }
        Run::Failed(second) | Run::HookSkipped(second) => {
            Err(Failed::from(format!("{first}\n(failed again on its second run: {second})")))
        }
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}

/// Runs `modules`, one after another (the module's doc), under libtest's command line
/// (filters, `--list`, `--test-threads`, ...).
pub fn run(modules: Vec<Module>) -> ExitCode {
    let args = Arguments::from_args();
    let default_hook = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        if info.payload().is::<Skip>() {
            return; // a skip is not a failure: no "thread panicked" message for it
        }
        if let Some(h) = info.payload().downcast_ref::<HookSkipped>() {
            let at = info.location().map(|l| format!(" at {l}")).unwrap_or_default();
            eprintln!("test failed{at}: {}", h.text());
            return;
        }
        default_hook(info);
    }));
    let modules: Vec<(&str, Vec<Trial>)> = modules.into_iter().map(|m| (m.name, m.trials())).collect();
    let selected: Vec<&(&str, Vec<Trial>)> =
        modules.iter().filter(|(_, trials)| trials.iter().any(|t| !args.is_filtered_out(t))).collect();
    if args.list || selected.is_empty() {
        // One list (or one run that says how many tests the filter left out).
        let all = modules.into_iter().flat_map(|(_, trials)| trials).collect();
        return libtest_mimic::run(&args, all).exit_code();
    }
    let names: Vec<&str> = selected.iter().map(|(name, _)| *name).collect();
    let mut failed = false;
    for (name, trials) in modules.into_iter().filter(|(name, _)| names.contains(name)) {
        println!("module: {name}");
        failed |= libtest_mimic::run(&args, trials).has_failed();
    }
    if failed {
        ExitCode::from(101)
    } else {
        ExitCode::SUCCESS
    }
}

/// The end of a test module: its tests, by function name, and its tables of cases (the
/// module's doc), as `pub(crate) fn tests() -> Module`, which tests/integration/main.rs
/// runs.
#[macro_export]
macro_rules! module_tests {
    ($( $test:ident $({ $($case:ident : $arg:expr),+ $(,)? })? ),+ $(,)?) => {
        pub(crate) fn tests() -> $crate::common::harness::Module {
            let tests: Vec<Vec<$crate::common::harness::Test>> =
                vec![$( $crate::module_tests!(@tests $test $({ $($case : $arg),+ })?) ),+];
            $crate::common::harness::Module::new(module_path!(), tests.into_iter().flatten().collect())
        }
    };
    (@tests $test:ident) => {
        vec![$crate::common::harness::Test::new(stringify!($test), $test)]
    };
    (@tests $test:ident { $($case:ident : $arg:expr),+ }) => {
        vec![$( $crate::common::harness::Test::new(concat!(stringify!($test), "_", stringify!($case)), || $test($arg)) ),+]
    };
}
