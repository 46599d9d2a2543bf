//! Step 6a, the console: the markers /init prints (`TFO-VM-BOOT`, `-BACKEND`, `-TEST`,
//! `-END`, `-DONE`, `-WARN`; `-AUTO` and `-DOCTOR-SAYS` in a refused backend's cell) and
//! libtest's `test result:` and `ignored (reason)` lines and the harness's `partial:`,
//! `second run:` and `retried:` lines (crate::testlines), read into one result per test.
use std::collections::BTreeMap;

use crate::testlines::{partial_test, second_run_test, skipped_test};

/// One test's run inside the guest.
#[derive(Clone, Debug, Default)]
pub(super) struct TestRun {
    pub(super) exit: i32,
    pub(super) seconds: u64,
    pub(super) passed: u64,
    pub(super) failed: u64,
    pub(super) ignored: u64,
    /// Why the test said it cannot run here.
    pub(super) skip_reason: Option<String>,
    /// Checks it said it could not make here (partial skips).
    pub(super) partial: Vec<String>,
    /// The harness's `second run:` line: why its first run failed.
    pub(super) second_run: Option<String>,
}

/// What a refused backend's cell printed about the refusal (guest.rs, `refused`).
#[derive(Clone, Debug, Default)]
pub(super) struct RefusalSeen {
    /// `tfo-trace trace --backend auto`: its exit code and the line that says which backend
    /// it used and why it passed over the others.
    pub(super) auto: Option<(i32, String)>,
    /// `doctor`'s line for the backend.
    pub(super) doctor: Option<String>,
}

/// Reads the serial console of one cell, line by line.
#[derive(Default)]
pub(super) struct Console {
    /// The test running now: (module, test).
    pub(super) current: Option<(String, String)>,
    pub(super) cur: TestRun,
    pub(super) results: BTreeMap<(String, String), TestRun>,
    pub(super) panic: Option<String>,
    /// `TFO-VM-BOOT` seen: /init runs.
    pub(super) booted: bool,
    /// `TFO-VM-DONE` seen: every test ran.
    pub(super) done: bool,
    /// The backend failed to load: the tracer's error line.
    pub(super) unloadable: Option<String>,
    pub(super) refusal: RefusalSeen,
    /// What /init warned about (`TFO-VM-WARN`: a module that did not load, an unknown
    /// cell): each fails the cell, since the tests would skip or run without it.
    pub(super) warnings: Vec<String>,
}

impl Console {
    pub(super) fn line(&mut self, line: &str) {
        // A marker may share its line with what was printed before it without a newline.
        let l = match line.find("TFO-VM-") {
            Some(i) => &line[i..],
            None => line.trim_start(),
        };
        if l.starts_with("TFO-VM-BOOT") {
            self.booted = true;
        } else if let Some(warning) = l.strip_prefix("TFO-VM-WARN") {
            self.warnings.push(warning.trim().to_string());
        } else if l.starts_with("TFO-VM-DONE") {
            self.done = true;
        } else if let Some(rest) = l.strip_prefix("TFO-VM-BACKEND ") {
            // `TFO-VM-BACKEND fentry 1 tfo-trace: error: the fentry backend cannot load here: ...`
            let mut w = rest.splitn(3, ' ');
            if let (Some(_), Some(rc)) = (w.next(), w.next()) {
                if rc != "0" {
                    let why = w.next().unwrap_or("").trim();
                    let why = why.strip_prefix("tfo-trace: error: ").unwrap_or(why);
                    let why = if why.is_empty() { format!("tfo-trace exited {rc}") } else { why.to_string() };
                    self.unloadable = Some(why);
                }
            }
        } else if let Some(rest) = l.strip_prefix("TFO-VM-AUTO ") {
            // `TFO-VM-AUTO 0 tfo-trace: using the kprobe backend (fentry: ...)`
            let (rc, said) = rest.split_once(' ').unwrap_or((rest, ""));
            self.refusal.auto = Some((rc.trim().parse().unwrap_or(-1), said.trim().to_string()));
        } else if let Some(rest) = l.strip_prefix("TFO-VM-DOCTOR-SAYS") {
            self.refusal.doctor = Some(rest.trim().to_string());
        } else if let Some(rest) = l.strip_prefix("TFO-VM-TEST ") {
            let mut w = rest.split_whitespace();
            if let (Some(bin), Some(test)) = (w.next(), w.next()) {
                self.current = Some((bin.to_string(), test.to_string()));
                self.cur = TestRun::default();
            }
        } else if let Some(rest) = l.strip_prefix("TFO-VM-END ") {
            let w: Vec<&str> = rest.split_whitespace().collect();
            if let [bin, test, rc, secs, ..] = w[..] {
                let mut r = std::mem::take(&mut self.cur);
                r.exit = rc.parse().unwrap_or(-1);
                r.seconds = secs.parse().unwrap_or(0);
                self.results.insert((bin.to_string(), test.to_string()), r);
                self.current = None;
            }
        } else if let Some(rest) = l.strip_prefix("test result: ") {
            for part in rest.split(';') {
                let mut words = part.split_whitespace().rev();
                let (Some(what), Some(n)) = (words.next(), words.next()) else { continue };
                let Ok(n) = n.parse::<u64>() else { continue };
                match what {
                    "passed" => self.cur.passed += n,
                    "failed" => self.cur.failed += n,
                    "ignored" => self.cur.ignored += n,
                    _ => {}
                }
            }
        } else if let Some((_, reason)) = skipped_test(l) {
            self.cur.skip_reason = Some(reason);
        } else if let Some((_, reason)) = partial_test(l) {
            self.cur.partial.push(reason);
        } else if let Some((_, cause)) = second_run_test(l) {
            self.cur.second_run = Some(cause);
        } else if l.contains("Kernel panic") && self.panic.is_none() {
            self.panic = Some(l.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::summary::verdict;

    #[test]
    fn console_results_skips_and_counts() {
        let mut c = Console::default();
        for l in [
            "TFO-VM-BACKEND fentry 1 tfo-trace: error: the fentry backend cannot load here: EACCES",
            "TFO-VM-TEST stalls stalls_lists_every_connection",
            "running 1 test",
            "test stalls_lists_every_connection ... FAILED",
            "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 9.1s",
            "TFO-VM-END stalls stalls_lists_every_connection 101 12",
            "TFO-VM-TEST lab tfo_ipv4",
            "test tfo_ipv4      ... ignored (not root; lab tests create network namespaces)",
            "test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 9 filtered out; finished in 0s",
            "TFO-VM-END lab tfo_ipv4 0 1",
            "TFO-VM-TEST lab hangs",
        ] {
            c.line(l);
        }
        let r = &c.results[&("stalls".into(), "stalls_lists_every_connection".into())];
        assert_eq!((r.exit, r.failed, r.seconds), (101, 1, 12));
        let r = &c.results[&("lab".into(), "tfo_ipv4".into())];
        assert_eq!((r.exit, r.passed, r.ignored), (0, 0, 1));
        assert_eq!(r.skip_reason.as_deref(), Some("not root; lab tests create network namespaces"));
        assert_eq!(verdict(r), "skipped");
        assert_eq!(c.unloadable.as_deref(), Some("the fentry backend cannot load here: EACCES"));
        assert_eq!(c.current, Some(("lab".into(), "hangs".into())), "the test a hung guest was running");
    }
}
