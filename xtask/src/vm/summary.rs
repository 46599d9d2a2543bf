//! Step 6b, the summary: per cell and test the tally and every problem in one line, the
//! kernel x cell x test module result table and the time table (boot, tests, guest time per
//! kernel). A cell fails on a test that failed, timed out or did not run, on a skip (whole
//! or partial) not on the list of skips (crate::skips), on a warning of /init,
//! and when no test of it passed.
use std::collections::BTreeMap;

use super::cells::Cell;
use super::console::TestRun;
use super::kernels::Refusal;
use super::qemu::Boot;
use crate::skips::{allowed, Place};
use crate::testlines::SecondRun;

/// What the matrix ran, for `cargo xtask test`'s closing tally.
#[derive(Default, Debug)]
pub struct Report {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    /// Cells and tests that failed or did not run, one line each.
    pub problems: Vec<String>,
    /// Tests that reported themselves as unable to run here: `cell test: reason`.
    pub skipped: Vec<String>,
    /// Checks tests reported they could not make here (partial skips): `cell test: reason`.
    pub partial: Vec<String>,
    /// Tests run a second time for the kernel's skipped hook run (crate::testlines).
    pub second_runs: Vec<SecondRun>,
}

/// The skips of one test's run (whole, then partial) that no entry of crate::skips allows.
fn unlisted_skips(cell: &Cell, bin: &str, test: &str, r: &TestRun) -> Vec<String> {
    r.skip_reason
        .iter()
        .map(|reason| format!("skipped: {reason}"))
        .chain(r.partial.iter().map(|reason| format!("partly skipped: {reason}")))
        .filter(|said| {
            let reason = said.split_once(": ").map_or(said.as_str(), |(_, r)| r);
            allowed(Place::Vm { kernel: &cell.kernel, cell: &cell.name }, bin, test, reason).is_none()
        })
        .collect()
}

/// Per cell and test: the tally, and every problem in one line.
pub(super) fn summarize(cells: &[Cell], boots: &[Boot]) -> Report {
    let mut report = Report::default();
    for (cell, boot) in cells.iter().zip(boots) {
        for w in &boot.warnings {
            report.failed += 1;
            report.problems.push(format!("{}: /init warned: {w}", cell.label()));
        }
        if let Some(r) = cell.refused {
            match refusal_verdict(r, boot) {
                Ok(_) => report.passed += 1,
                Err(e) => {
                    report.failed += 1;
                    report.problems.push(format!("{}: {e}", cell.label()));
                }
            }
            continue;
        }
        let mut passed_here = 0;
        for (bin, tests) in &cell.runs {
            for t in tests {
                let what = format!("{} {}::{t}", cell.label(), bin.name);
                let Some(r) = boot.results.get(&(bin.name.clone(), t.clone())) else {
                    report.failed += 1;
                    let why = match (&boot.unloadable, &boot.end) {
                        (Some(e), _) => format!("backend does not load: {e}"),
                        (None, Some(end)) => end.clone(),
                        (None, None) => "no result marker".into(),
                    };
                    report.problems.push(format!("{what}: did not run ({why})"));
                    continue;
                };
                report.passed += r.passed;
                report.failed += r.failed;
                report.ignored += r.ignored;
                passed_here += r.passed;
                // Each skip with why it may be reported there (crate::skips).
                let listed = |reason: &str| {
                    allowed(Place::Vm { kernel: &cell.kernel, cell: &cell.name }, &bin.name, t, reason)
                        .map_or(String::new(), |a| format!(" [listed: {}]", a.why))
                };
                if let Some(reason) = &r.skip_reason {
                    report.skipped.push(format!("{what}: {reason}{}", listed(reason)));
                }
                report
                    .partial
                    .extend(r.partial.iter().map(|reason| format!("{what}: {reason}{}", listed(reason))));
                for unlisted in unlisted_skips(cell, &bin.name, t, r) {
                    report.failed += 1;
                    report
                        .problems
                        .push(format!("{what}: {unlisted} (not on the list of skips, xtask/src/skips.rs)"));
                }
                if let Some(cause) = &r.second_run {
                    report.second_runs.push(SecondRun {
                        place: cell.label(),
                        binary: bin.name.clone(),
                        test: t.clone(),
                        cause: cause.clone(),
                    });
                }
                let ran_nothing = r.exit == 0 && r.passed + r.ignored == 0;
                if r.exit != 0 || ran_nothing {
                    // A test that died before its `test result:` line still counts once.
                    if r.failed == 0 {
                        report.failed += 1;
                    }
                    report.problems.push(format!("{what}: {}", verdict(r)));
                }
            }
        }
        if cell.test_count() > 0 && passed_here == 0 && boot.results.len() == cell.test_count() {
            report.failed += 1;
            report
                .problems
                .push(format!("{}: no test passed: a cell of skips vouches for nothing", cell.label()));
        }
        if let Some(end) = &boot.end {
            if boot.results.len() == cell.test_count() {
                report.problems.push(end.clone());
                report.failed += 1;
            }
        }
    }
    print_result_table(cells, boots);
    report
}

/// A refused backend's cell: what it showed when the tracer refused the backend with the
/// expected errno, `auto` used another and named this one with its reason, and `doctor`
/// said `refused`; else what differs.
pub(super) fn refusal_verdict(r: &Refusal, boot: &Boot) -> Result<String, String> {
    let expected = format!("expected: {} refused with {} ({})", r.backend, r.errno, r.why);
    let Some(why) = &boot.unloadable else {
        return Err(match &boot.end {
            Some(end) => format!("{end} ({expected})"),
            None => format!("the {} backend loads on this kernel now: run its tests ({expected})", r.backend),
        });
    };
    if !why.contains(r.errno) {
        return Err(format!("refused, but not with {}: {why}", r.errno));
    }
    let auto = match &boot.refusal.auto {
        Some((0, said)) if said.contains(&format!("{}: ", r.backend)) => said,
        Some((rc, said)) => {
            return Err(format!(
                "--backend auto did not say why it passed over {} (exit {rc}): {said}",
                r.backend
            ))
        }
        None => return Err("no word from --backend auto".into()),
    };
    match &boot.refusal.doctor {
        Some(d) if d.contains("refused") => Ok(format!("{why}; auto: {auto}; doctor: {d}")),
        d => Err(format!("doctor does not say the backend is refused: {d:?}")),
    }
}

/// `pass`, `FAIL(101)`, `timeout (300 s)` ...
pub(super) fn verdict(r: &TestRun) -> String {
    match r.exit {
        0 if r.passed + r.ignored == 0 => "ran no test".into(),
        0 if r.passed == 0 => "skipped".into(),
        0 => "pass".into(),
        // busybox timeout: 124 past the limit, 143 when it had to SIGTERM.
        124 | 143 => format!("timeout ({} s)", r.seconds),
        rc => format!("FAIL({rc})"),
    }
}

pub(super) fn print_result_table(cells: &[Cell], boots: &[Boot]) {
    println!();
    println!(
        "{:<10} {:<14} {:<18} {:<16} {:>6} {:>6} {:>7} {:>6}  PROBLEMS",
        "KERNEL", "CELL", "MODULE", "RESULT", "PASSED", "FAILED", "IGNORED", "TIME"
    );
    for (cell, boot) in cells.iter().zip(boots) {
        if let Some(r) = cell.refused {
            let (result, said) = match refusal_verdict(r, boot) {
                Ok(said) => ("refused (expected)", said),
                Err(e) => ("FAIL", e),
            };
            println!(
                "{:<10} {:<14} {:<18} {:<16} {:>6} {:>6} {:>7} {:>6}  {said}",
                cell.kernel, cell.name, "-", result, "", "", "", ""
            );
            continue;
        }
        for (bin, tests) in &cell.runs {
            let runs: Vec<(&String, Option<&TestRun>)> =
                tests.iter().map(|t| (t, boot.results.get(&(bin.name.clone(), t.clone())))).collect();
            let ran: Vec<&TestRun> = runs.iter().filter_map(|(_, r)| *r).collect();
            let bad: Vec<String> = runs
                .iter()
                .filter_map(|(t, r)| match r {
                    None => Some(format!("{t}: not run")),
                    Some(r) if r.exit != 0 || r.passed + r.ignored == 0 => {
                        Some(format!("{t}: {}", verdict(r)))
                    }
                    Some(r) => {
                        let unlisted = unlisted_skips(cell, &bin.name, t, r);
                        (!unlisted.is_empty()).then(|| format!("{t}: {}", unlisted.join("; ")))
                    }
                })
                .collect();
            let result = if ran.is_empty() {
                "not run".to_string()
            } else if bad.is_empty() {
                "pass".to_string()
            } else {
                format!("FAIL ({} of {})", bad.len(), tests.len())
            };
            println!(
                "{:<10} {:<14} {:<18} {:<16} {:>6} {:>6} {:>7} {:>5}s  {}",
                cell.kernel,
                cell.name,
                bin.name,
                result,
                ran.iter().map(|r| r.passed).sum::<u64>(),
                ran.iter().map(|r| r.failed).sum::<u64>(),
                ran.iter().map(|r| r.ignored).sum::<u64>(),
                ran.iter().map(|r| r.seconds).sum::<u64>(),
                if ran.is_empty() {
                    boot.unloadable.clone().or(boot.end.clone()).unwrap_or_default()
                } else {
                    bad.join(", ")
                }
            );
        }
    }
    println!();
}

/// Where the VM time went: per cell, boot and tests; then the whole.
pub(super) fn print_time_table(cells: &[Cell], boots: &[Boot], prepared_s: f64, total_s: f64, jobs: usize) {
    println!(
        "{:<10} {:<14} {:>6} {:>7} {:>7} {:>7}  SLOWEST TEST",
        "KERNEL", "CELL", "TESTS", "BOOT", "TESTS_S", "WHOLE"
    );
    let mut guest_s = 0.0;
    for (cell, boot) in cells.iter().zip(boots) {
        let tests_s: u64 = boot.results.values().map(|r| r.seconds).sum();
        let slowest = boot.results.iter().max_by_key(|(_, r)| r.seconds);
        guest_s += boot.total_s;
        println!(
            "{:<10} {:<14} {:>6} {:>6.1}s {:>6}s {:>6.1}s  {}",
            cell.kernel,
            cell.name,
            cell.test_count(),
            boot.boot_s.unwrap_or(0.0),
            tests_s,
            boot.total_s,
            slowest.map_or(String::new(), |((b, t), r)| format!("{b}::{t} {} s", r.seconds))
        );
    }
    // Per kernel: what one more kernel costs the test command.
    let mut per_kernel: BTreeMap<&str, (usize, f64)> = BTreeMap::new();
    for (cell, boot) in cells.iter().zip(boots) {
        let k = per_kernel.entry(cell.kernel.as_str()).or_default();
        k.0 += 1;
        k.1 += boot.total_s;
    }
    for (kernel, (n, s)) in &per_kernel {
        println!("vm: time: kernel {kernel}: {n} cell(s), {s:.1} s of guest time");
    }
    println!(
        "vm: time: {prepared_s:.1} s preparing (packages, kernels, test build, initramfs), \
         {guest_s:.1} s of guest time in {:.1} s with {jobs} guest(s) at once",
        total_s - prepared_s
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::binaries::TestModule;
    use crate::vm::console::Console;

    /// One cell of `tests` in `binary`, and the boot its console `lines` make.
    fn cell_and_boot(kernel: &str, name: &str, binary: &str, tests: &[&str], lines: &[&str]) -> (Cell, Boot) {
        let mut c = Console::default();
        for l in lines {
            c.line(l);
        }
        let bin = TestModule { name: binary.into(), path: format!("/x/{binary}").into() };
        let cell = Cell {
            kernel: kernel.into(),
            name: name.into(),
            runs: vec![(bin, tests.iter().map(|t| t.to_string()).collect())],
            refused: None,
        };
        (cell, Boot { results: c.results, warnings: c.warnings, ..Boot::default() })
    }

    #[test]
    fn a_second_run_is_listed_with_its_cause() {
        let (cell, boot) = cell_and_boot(
            "6.1",
            "tracepoint",
            "stalls",
            &["a"],
            &[
                "TFO-VM-TEST stalls a",
                "second run: a: one ESTABLISHED short (the kernel's skipped hook run): the tracer counted 2, the kernel 3",
                "retried: a passed on its second run; its first run failed: one ESTABLISHED short",
                "test a ... ok",
                "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 9 filtered out; finished in 9s",
                "TFO-VM-END stalls a 0 9",
            ],
        );
        let r = summarize(&[cell], &[boot]);
        assert_eq!((r.passed, r.failed), (1, 0), "{:?}", r.problems);
        assert_eq!(r.second_runs.len(), 1, "{:?}", r.second_runs);
        assert_eq!(
            (r.second_runs[0].place.as_str(), r.second_runs[0].test.as_str()),
            ("6.1 tracepoint", "a")
        );
        assert!(
            r.second_runs[0].cause.ends_with("the tracer counted 2, the kernel 3"),
            "{:?}",
            r.second_runs
        );
    }

    /// The console of one test that passed, optionally with a partial skip, or skipped.
    fn one_test(binary: &str, name: &str, partial: Option<&str>, skipped: Option<&str>) -> Vec<String> {
        let mut l = vec![format!("TFO-VM-TEST {binary} {name}")];
        l.extend(partial.map(|p| format!("partial: {name}: {p}")));
        match skipped {
            Some(why) => {
                l.push(format!("test {name} ... ignored ({why})"));
                l.push("test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out".into());
            }
            None => {
                l.push("test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out".into())
            }
        }
        l.push(format!("TFO-VM-END {binary} {name} 0 3"));
        l
    }

    #[test]
    fn skips_fail_a_cell_unless_listed_and_a_cell_must_pass_something() {
        let blind = "server cookie_invalid is not visible to the tracepoint backend";
        let netem =
            "each stall told apart from its handshake: this kernel has no netem (CONFIG_NET_SCH_NETEM)";
        let lines =
            [one_test("report", "a", Some(blind), None), one_test("report", "b", None, None)].concat();
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        // Listed: blind outcomes on the tracepoint backend.
        let (cell, boot) = cell_and_boot("5.10", "tracepoint", "report", &["a", "b"], &lines);
        let r = summarize(&[cell], &[boot]);
        assert_eq!((r.passed, r.failed), (2, 0), "{:?}", r.problems);
        assert!(
            r.partial.len() == 1
                && r.partial[0].starts_with(&format!("5.10 tracepoint report::a: {blind} [listed"))
        );
        // The same partial skip where the backend sees every outcome: a regression.
        let (cell, boot) = cell_and_boot("5.10", "fentry", "report", &["a", "b"], &lines);
        let r = summarize(&[cell], &[boot]);
        assert_eq!(r.failed, 1, "{:?}", r.problems);
        assert!(
            r.problems[0].contains("report::a: partly skipped: server cookie_invalid"),
            "{:?}",
            r.problems
        );
        // A whole skip for want of netem, which the VM kernels load: a regression.
        let lines =
            [one_test("report", "a", None, Some(netem)), one_test("report", "b", None, None)].concat();
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let (cell, boot) = cell_and_boot("6.12", "fentry", "report", &["a", "b"], &lines);
        let r = summarize(&[cell], &[boot]);
        assert_eq!((r.passed, r.failed, r.ignored), (1, 1, 1), "{:?}", r.problems);
        assert!(r.problems[0].contains("report::a: skipped: each stall told apart"), "{:?}", r.problems);
        // Every test skipped, each skip listed: still no cell.
        let figure = "this kernel does not report the instructions it verified";
        let t = "every_backend_verifies_far_below_the_kernel_s_limit";
        let lines = one_test("kernel_facts", t, None, Some(figure));
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let (cell, boot) = cell_and_boot("5.10", "lab", "kernel_facts", &[t], &lines);
        let r = summarize(&[cell], &[boot]);
        assert_eq!((r.passed, r.failed, r.ignored), (0, 1, 1), "{:?}", r.problems);
        assert!(
            r.problems[0].ends_with("no test passed: a cell of skips vouches for nothing"),
            "{:?}",
            r.problems
        );
    }

    #[test]
    fn a_warning_of_init_fails_the_cell() {
        let mut lines = vec!["TFO-VM-WARN insmod sch_netem.ko failed"];
        let test = one_test("report", "b", None, None);
        lines.extend(test.iter().map(String::as_str));
        let (cell, boot) = cell_and_boot("5.10", "tracepoint", "report", &["b"], &lines);
        let r = summarize(&[cell], &[boot]);
        assert_eq!((r.passed, r.failed), (1, 1));
        assert_eq!(r.problems, ["5.10 tracepoint: /init warned: insmod sch_netem.ko failed"]);
    }

    #[test]
    fn a_test_that_runs_nothing_or_times_out_is_a_problem() {
        let bin = TestModule { name: "stalls".into(), path: "/x/stalls".into() };
        let cell = Cell {
            kernel: "6.1".into(),
            name: "tracepoint".into(),
            runs: vec![(bin, vec!["a".into(), "b".into(), "c".into()])],
            refused: None,
        };
        let mut boot = Boot::default();
        boot.results
            .insert(("stalls".into(), "a".into()), TestRun { exit: 0, passed: 1, ..TestRun::default() });
        boot.results
            .insert(("stalls".into(), "b".into()), TestRun { exit: 124, seconds: 300, ..TestRun::default() });
        let r = summarize(&[cell], &[boot]);
        assert_eq!((r.passed, r.failed), (1, 2));
        assert!(r.problems.iter().any(|p| p.contains("stalls::b: timeout (300 s)")), "{:?}", r.problems);
        assert!(r.problems.iter().any(|p| p.contains("stalls::c: did not run")), "{:?}", r.problems);
    }

    #[test]
    fn a_refused_backend_passes_only_when_refused_as_expected_and_said_so() {
        let refusal = crate::vm::kernels::REFUSALS.iter().find(|r| r.backend == "fentry").unwrap();
        let cell = Cell {
            kernel: "5.10-arm64".into(),
            name: "fentry".into(),
            runs: Vec::new(),
            refused: Some(refusal),
        };
        let mut c = Console::default();
        for l in [
            "TFO-VM-BOOT 5.10.0-32-cloud-arm64 cell=fentry uptime=6.1",
            "TFO-VM-BACKEND fentry 1 tfo-trace: error: the fentry backend cannot load here: loading/attaching \
             tfo_try_fastopen_fentry (FEntry tcp_try_fastopen): ENOTSUPP (Unknown error 524)",
            "TFO-VM-AUTO 0 tfo-trace: using the kprobe backend (fentry: loading/attaching ...: ENOTSUPP)",
            "TFO-VM-DOCTOR-SAYS   fentry:         refused: loading/attaching ...: ENOTSUPP",
            "TFO-VM-DONE",
        ] {
            c.line(l);
        }
        let boot = Boot { unloadable: c.unloadable.clone(), refusal: c.refusal.clone(), ..Boot::default() };
        let r = summarize(std::slice::from_ref(&cell), &[boot]);
        assert_eq!((r.passed, r.failed), (1, 0), "{:?}", r.problems);
        // The kernel loads it now: its tests belong in the matrix.
        let loads = Boot { refusal: c.refusal.clone(), ..Boot::default() };
        let r = summarize(std::slice::from_ref(&cell), &[loads]);
        assert_eq!((r.passed, r.failed), (0, 1));
        assert!(r.problems[0].contains("loads on this kernel now"), "{:?}", r.problems);
        // Another errno, or `auto` silent about it: not the refusal the table knows.
        let other = Boot { unloadable: Some("EPERM".into()), refusal: c.refusal.clone(), ..Boot::default() };
        assert!(refusal_verdict(refusal, &other).unwrap_err().contains("not with ENOTSUPP"));
        let mut silent = Boot { unloadable: c.unloadable.clone(), refusal: c.refusal, ..Boot::default() };
        silent.refusal.auto = Some((0, "tfo-trace: 9 programs attached".into()));
        assert!(refusal_verdict(refusal, &silent).unwrap_err().contains("did not say why"));
    }
}
