//! What the integration tests' harness prints besides libtest's own lines
//! (tfo-trace/tests/integration/common/harness.rs), read the same way from the host run
//! and from each VM cell's console, and the rule on second runs.
//!
//! The integration tests are one executable, [`INTEGRATION`], of modules (one per former
//! test binary: `tests/integration/stalls.rs`); a test is named `MODULE::TEST`. The harness
//! runs the modules one after another, each as a libtest run of its own:
//!
//! - `module: NAME`: the libtest run that follows (`running N tests` ... `test result:`)
//!   is module NAME's.
//! - `test NAME ... ignored (REASON)`: a skip.
//! - `partial: NAME: REASON`: a test that passed on the checks it could make, one of which
//!   could not run here (a partial skip).
//! - `second run: NAME: CAUSE`: a test whose first run failed with the known signature of a
//!   kernel hook run the kernel skipped (one SYN/SYN-ACK retransmission or one ESTABLISHED
//!   short), run again; `retried: NAME passed on its second run; ...` when it then passed.
//!
//! A second run is for a rare kernel behaviour (about once in a few hundred stalled
//! connections): a run of the whole suite may need [`SECOND_RUN_BUDGET`] of them, and no
//! test may need one twice (on the host and in a VM cell, or in two cells). More is no
//! longer the kernel's rarity but a bug: [`second_run_problems`] fails the run.

/// The one integration test executable of tfo-trace (`cargo test --test integration`).
pub const INTEGRATION: &str = "integration";

/// `module: NAME`: NAME.
pub fn module_start(line: &str) -> Option<&str> {
    line.strip_prefix("module: ").map(str::trim)
}

/// `stalls::a_test` -> (`stalls`, `a_test`): a test of the integration executable by its
/// module (the former binary) and its name there.
pub fn split_test(name: &str) -> Option<(&str, &str)> {
    name.split_once("::")
}

/// Second runs one `cargo xtask test` (or `cargo xtask vm`) may need before it fails.
pub const SECOND_RUN_BUDGET: usize = 2;

/// `test NAME   ... ignored (REASON)` (libtest-mimic pads the name): (name, reason).
pub fn skipped_test(line: &str) -> Option<(String, String)> {
    let rest = line.strip_prefix("test ")?;
    let (name, verdict) = rest.split_once(" ... ")?;
    let reason = verdict.strip_prefix("ignored (")?.strip_suffix(')')?;
    Some((name.trim().to_string(), reason.to_string()))
}

/// `line` cut to at most `max` characters, marked with `...` where cut.
pub fn shorten(line: &str, max: usize) -> String {
    match line.char_indices().nth(max) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line.to_string(),
    }
}

/// The tests a `cargo test` run said FAILED, each with the first line of its message, from
/// either form of output: libtest's (`test NAME ... FAILED`; `---- NAME stdout ----`, then
/// the panic's `thread '...' panicked at FILE:LINE:COL:` and its message) and the
/// integration harness's libtest-mimic (its `test NAME ... ` line, the test's own output,
/// `FAILED` alone on a line; `---- NAME ----` and the message itself).
#[derive(Default)]
pub struct Failures {
    /// (`binary NAME`, message) in the order they failed.
    failed: Vec<(String, Option<String>)>,
    /// A test whose `test NAME ... ` line came without its verdict.
    running: Option<String>,
    /// In a failure's section: its name, and whether its message is the next line that
    /// is not empty (libtest-mimic's at once, libtest's after the `panicked at` line).
    section: Option<(String, bool)>,
}

impl Failures {
    pub fn line(&mut self, binary: &str, l: &str) {
        if let Some((name, next_is_message)) = &mut self.section {
            if *next_is_message && !l.is_empty() {
                let key = format!("{binary} {name}");
                if let Some((_, said @ None)) = self.failed.iter_mut().find(|(k, _)| *k == key) {
                    *said = Some(shorten(l, 300));
                }
                self.section = None;
            } else if l.contains("panicked at ") {
                *next_is_message = true;
            }
        }
        if let Some(rest) = l.strip_prefix("test ") {
            if let Some((name, verdict)) = rest.split_once(" ... ") {
                let (name, verdict) = (name.trim(), verdict.trim());
                self.running = None;
                if verdict == "FAILED" {
                    self.failed.push((format!("{binary} {name}"), None));
                } else if verdict.is_empty() || !(verdict == "ok" || verdict.starts_with("ignored")) {
                    self.running = Some(name.to_string());
                }
                return;
            }
        }
        if l == "FAILED" {
            if let Some(name) = self.running.take() {
                self.failed.push((format!("{binary} {name}"), None));
            }
        } else if l == "ok" || l.starts_with("ignored") {
            self.running = None;
        } else if let Some(header) = l.strip_prefix("---- ").and_then(|r| r.strip_suffix(" ----")) {
            match header.strip_suffix(" stdout") {
                Some(name) => self.section = Some((name.to_string(), false)),
                None => self.section = Some((header.to_string(), true)),
            }
        }
    }

    /// `binary NAME: FAILED: message` (or without the message, where none was printed).
    pub fn said(&self) -> impl Iterator<Item = String> + '_ {
        self.failed.iter().map(|(name, said)| match said {
            Some(m) => format!("{name}: FAILED: {m}"),
            None => format!("{name}: FAILED"),
        })
    }
}

/// `partial: NAME: REASON`: (name, reason).
pub fn partial_test(line: &str) -> Option<(String, String)> {
    let (name, reason) = line.strip_prefix("partial: ")?.split_once(": ")?;
    Some((name.to_string(), reason.to_string()))
}

/// `second run: NAME: CAUSE`: (name, cause).
pub fn second_run_test(line: &str) -> Option<(String, String)> {
    let (name, cause) = line.strip_prefix("second run: ")?.split_once(": ")?;
    Some((name.to_string(), cause.to_string()))
}

/// One second run, where it happened.
#[derive(Clone, Debug, PartialEq)]
pub struct SecondRun {
    /// `host`, or the VM cell (`5.10 tracepoint`).
    pub place: String,
    /// The integration test module (the former test binary: `stalls`).
    pub binary: String,
    pub test: String,
    /// The first run's failure.
    pub cause: String,
}

impl std::fmt::Display for SecondRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}::{}: {}", self.place, self.binary, self.test, self.cause)
    }
}

/// What fails a run in its second runs: more than [`SECOND_RUN_BUDGET`], or one test
/// that needed two.
pub fn second_run_problems(runs: &[SecondRun]) -> Vec<String> {
    let mut problems = Vec::new();
    if runs.len() > SECOND_RUN_BUDGET {
        problems.push(format!(
            "{} second runs, more than the {SECOND_RUN_BUDGET} a run may need for the kernel's skipped hook \
             runs: no longer the kernel's rarity",
            runs.len()
        ));
    }
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for r in runs {
        let key = (r.binary.as_str(), r.test.as_str());
        if seen.contains(&key) {
            let places: Vec<&str> = runs
                .iter()
                .filter(|o| (o.binary.as_str(), o.test.as_str()) == key)
                .map(|o| o.place.as_str())
                .collect();
            let problem =
                format!("{}::{} needed a second run twice ({})", r.binary, r.test, places.join(", "));
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        } else {
            seen.push(key);
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_failure_of_the_integration_harness_is_named_with_its_message() {
        // libtest-mimic, as the 5.10 arm64 kprobe cell printed it: the test's own output
        // after its `test NAME ... `, then FAILED alone, then its section.
        let mut f = super::Failures::default();
        for l in [
            "test kernel_scenarios::saves_ipv4 ... port 1: saved 5768 µs",
            "ok",
            "test kernel_scenarios::saves_ipv6 ... port 49926: saved 4661 µs, SYN -> SYN-ACK on the wire 1941 µs",
            "port 49936: saved 1550 µs",
            "thread 'main' (787) panicked at tfo-trace/tests/integration/kernel_scenarios.rs:217:9:",
            "the median saving is 953 µs above the median 930 µs on the wire",
            "FAILED",
            "",
            "failures:",
            "",
            "---- kernel_scenarios::saves_ipv6 ----",
            "the median saving is 953 µs above the median 930 µs on the wire",
            "test kernel_scenarios::other                          ... ignored (no netem)",
        ] {
            f.line("tests/integration/main.rs", l);
        }
        assert_eq!(
            f.said().collect::<Vec<_>>(),
            ["tests/integration/main.rs kernel_scenarios::saves_ipv6: FAILED: the median saving is 953 µs \
              above the median 930 µs on the wire"]
        );
    }

    use super::*;

    #[test]
    fn harness_lines_are_read() {
        assert_eq!(
            skipped_test("test tfo_ipv4      ... ignored (needs tmux: not installed)"),
            Some(("tfo_ipv4".into(), "needs tmux: not installed".into()))
        );
        assert_eq!(
            partial_test(
                "partial: key_rotation: server cookie_invalid is not visible to the tracepoint backend"
            ),
            Some((
                "key_rotation".into(),
                "server cookie_invalid is not visible to the tracepoint backend".into()
            ))
        );
        assert_eq!(
            second_run_test(
                "second run: stalls_a: one ESTABLISHED short (...): x: the tracer counted 1, the kernel 2"
            ),
            Some((
                "stalls_a".into(),
                "one ESTABLISHED short (...): x: the tracer counted 1, the kernel 2".into()
            ))
        );
        assert_eq!(partial_test("test a ... ok"), None);
        assert_eq!(module_start("module: stalls"), Some("stalls"));
        assert_eq!(split_test("stalls::stalls_a"), Some(("stalls", "stalls_a")));
        assert_eq!(split_test("aggregation_tests_a"), None);
        assert_eq!(second_run_test("retried: a passed on its second run"), None);
    }

    fn run(place: &str, binary: &str, test: &str) -> SecondRun {
        SecondRun { place: place.into(), binary: binary.into(), test: test.into(), cause: "one short".into() }
    }

    #[test]
    fn second_runs_past_the_budget_or_twice_for_one_test_fail_the_run() {
        assert!(second_run_problems(&[]).is_empty());
        let two = [run("host", "stalls", "a"), run("5.10 fentry", "top", "b")];
        assert!(second_run_problems(&two).is_empty(), "the budget is {SECOND_RUN_BUDGET}");
        let three = [two[0].clone(), two[1].clone(), run("6.1 fentry", "report", "c")];
        let p = second_run_problems(&three);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("3 second runs, more than the 2"), "{p:?}");
        let twice = [run("host", "stalls", "a"), run("5.10 tracepoint", "stalls", "a")];
        let p = second_run_problems(&twice);
        assert_eq!(p, ["stalls::a needed a second run twice (host, 5.10 tracepoint)"]);
    }
}
