//! Step 6b, the summary: per cell and test the tally and every problem in one line, the
//! kernel x cell x binary result table and the time table (boot, tests, guest time per
//! kernel).
use std::collections::BTreeMap;

use super::cells::Cell;
use super::console::TestRun;
use super::kernels::Refusal;
use super::qemu::Boot;
use super::Report;

/// Per cell and test: the tally, and every problem in one line.
pub(super) fn summarize(cells: &[Cell], boots: &[Boot]) -> Report {
    let mut report = Report::default();
    for (cell, boot) in cells.iter().zip(boots) {
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
                if let Some(reason) = &r.skip_reason {
                    report.skipped.push(format!("{what}: {reason}"));
                }
                if let Some(retried) = &r.retried {
                    report.retried.push(format!("{}: {retried}", cell.label()));
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
        "KERNEL", "CELL", "BINARY", "RESULT", "PASSED", "FAILED", "IGNORED", "TIME"
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
                    Some(_) => None,
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
    use crate::vm::binaries::TestBin;
    use crate::vm::console::Console;

    #[test]
    fn a_test_passed_on_its_second_run_is_listed() {
        let mut c = Console::default();
        for l in [
            "TFO-VM-TEST stalls a",
            "retried: a passed on its second run; its first run failed: 2 != 3",
            "test a ... ok",
            "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 9 filtered out; finished in 9s",
            "TFO-VM-END stalls a 0 9",
        ] {
            c.line(l);
        }
        let bin = TestBin { name: "stalls".into(), path: "/x/stalls".into() };
        let cell = Cell {
            kernel: "6.1".into(),
            name: "tracepoint".into(),
            runs: vec![(bin, vec!["a".into()])],
            refused: None,
        };
        let boot = Boot { results: c.results, ..Boot::default() };
        let r = summarize(&[cell], &[boot]);
        assert_eq!((r.passed, r.failed), (1, 0));
        assert_eq!(r.retried.len(), 1, "{:?}", r.retried);
        assert!(
            r.retried[0].contains("a passed on its second run; its first run failed: 2 != 3"),
            "{:?}",
            r.retried
        );
    }
    #[test]
    fn a_test_that_runs_nothing_or_times_out_is_a_problem() {
        let bin = TestBin { name: "stalls".into(), path: "/x/stalls".into() };
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
