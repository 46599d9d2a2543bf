//! Step 5, boot: the qemu command of a kernel's architecture, one guest per cell, its
//! console streamed and parsed line by line, and the host-side limits sized from the
//! cell's work (a guest that never boots, stays silent, or outlives its tests' limits).
use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::ValueEnum;

use super::arch::Arch;
use super::cells::Cell;
use super::console::{Console, RefusalSeen, TestRun};
use super::kernels::Kernel;

/// From qemu's start to /init running the tests: boot, modules, the backend probe (about
/// 10 s under TCG; `doctor` adds 5 s in the lab cell).
pub(super) const BOOT_LIMIT_S: u64 = 300;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Accel {
    /// Hardware virtualization (/dev/kvm); on this project's machines the guest hangs
    /// before its first line, so it is not the default
    Kvm,
    /// Plain emulation: slower, works everywhere
    Tcg,
}

pub(crate) fn accel(a: Accel) -> &'static str {
    match a {
        Accel::Kvm => "kvm",
        Accel::Tcg => "tcg",
    }
}

/// The board and CPU arguments: the architecture's, less `-cpu max` under KVM (the host's
/// CPU is what a KVM guest gets).
pub(super) fn qemu_machine(arch: &Arch, accel: Accel) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut it = arch.machine.iter();
    while let Some(&a) = it.next() {
        if a == "-cpu" && accel == Accel::Kvm {
            it.next();
            continue;
        }
        out.push(a);
    }
    out
}

/// What a guest gets of the host.
pub(crate) struct Resources {
    pub(crate) accel: Accel,
    pub(crate) memory_mb: u32,
    pub(crate) smp: u32,
}

/// qemu booting `k` with `initrd`, its console on stdout (piped), no network card, no
/// reboot; `append` goes on the kernel command line after the console and panic settings.
pub(super) fn qemu_command(k: &Kernel, initrd: &Path, res: &Resources, append: &str) -> Command {
    let mut cmd = Command::new(k.arch.qemu);
    cmd.args(["-accel", accel(res.accel), "-m", &res.memory_mb.to_string(), "-smp", &res.smp.to_string()])
        .args(qemu_machine(k.arch, res.accel))
        .args(["-nographic", "-no-reboot", "-nic", "none", "-serial", "mon:stdio"])
        .arg("-kernel")
        .arg(&k.vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", &format!("console={} panic=-1 quiet {append}", k.arch.console)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// What one boot of one cell gave.
#[derive(Default)]
pub(super) struct Boot {
    /// Host seconds from qemu's start to the `TFO-VM-BOOT` marker.
    pub(super) boot_s: Option<f64>,
    pub(super) total_s: f64,
    /// (module, test) -> its run.
    pub(super) results: BTreeMap<(String, String), TestRun>,
    /// The backend did not load in this kernel: the tracer's reason.
    pub(super) unloadable: Option<String>,
    /// Why the run ended early, when it did (hung, panic, no DONE marker).
    pub(super) end: Option<String>,
    /// What a refused backend's cell showed.
    pub(super) refusal: RefusalSeen,
    /// /init's `TFO-VM-WARN` lines.
    pub(super) warnings: Vec<String>,
}

/// `test_limit_s`: one test's limit inside the guest, which the host's limits are sized from.
pub(super) fn boot(
    k: &Kernel,
    cell: &Cell,
    initrd: &Path,
    res: &Resources,
    test_limit_s: u64,
) -> Result<Boot> {
    let log_path = initrd.with_file_name(format!("console-{}.log", cell.name));
    let mut log = fs::File::create(&log_path)?;
    // tfo_accel: the tests' tolerances for a TCG guest's timing (TFO_VM_ACCEL in /init).
    let mut cmd =
        qemu_command(k, initrd, res, &format!("tfo_cell={} tfo_accel={}", cell.name, accel(res.accel)));
    let start = Instant::now();
    let (mut child, rx) = spawn_with_console(&mut cmd, k)?;
    let pid = child.id();
    // Limits sized from the cell's own work: a boot, then each test under its own limit
    // (enforced in the guest). The host steps in only when the guest itself is stuck: no
    // line for longer than one test may take, or more time than all its tests may take.
    let silence_limit = Duration::from_secs(test_limit_s + 120);
    let boot_limit = Duration::from_secs(BOOT_LIMIT_S);
    let whole_limit =
        Duration::from_secs(BOOT_LIMIT_S + 60 + (cell.test_count() as u64 + 1) * (test_limit_s + 5));
    let prefix = format!("[{}]", cell.label());
    let mut parser = Console::default();
    let mut boot_s = None;
    let mut end = None;
    let mut done_at: Option<Instant> = None;
    let mut last_line = Instant::now();
    let mut on_line = |line: String, parser: &mut Console| {
        use std::io::Write;
        let _ = writeln!(log, "{line}");
        println!("{prefix} {line}");
        parser.line(&line);
        // Here, not in the loop: a guest that boots, prints and powers off at once has all
        // its lines read after qemu exited.
        if parser.booted && boot_s.is_none() {
            boot_s = Some(start.elapsed().as_secs_f64());
        }
    };
    loop {
        if parser.done && done_at.is_none() {
            done_at = Some(Instant::now());
        }
        let hung = if !parser.booted && start.elapsed() > boot_limit {
            Some(format!("did not boot within {} s", boot_limit.as_secs()))
        } else if last_line.elapsed() > silence_limit {
            Some(format!(
                "silent for {} s{}",
                silence_limit.as_secs(),
                parser.current.as_ref().map_or(String::new(), |(b, t)| format!(" during {b} {t}"))
            ))
        } else if start.elapsed() > whole_limit {
            Some(format!("still running after {} s, the sum of its tests' limits", whole_limit.as_secs()))
        } else {
            None
        };
        if let Some(why) = hung {
            end = Some(format!("hung guest ({}): {why}; killed qemu (pid {pid})", cell.label()));
            let _ = child.kill();
            break;
        }
        // `poweroff -f` follows the DONE marker at once; a guest that lingers is stopped.
        if done_at.is_some_and(|d| d.elapsed() > Duration::from_secs(30)) {
            let _ = child.kill();
            break;
        }
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(line) => {
                last_line = Instant::now();
                on_line(line, &mut parser)
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // Both pipes closed: qemu is gone.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if let Ok(Some(_)) = child.try_wait() {
            // Whatever is still buffered in the pipes.
            while let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
                on_line(line, &mut parser);
            }
            break;
        }
    }
    let _ = child.kill();
    let status = child.wait().context("waiting for qemu")?;
    if end.is_none() && !parser.done {
        end = Some(match parser.panic.take() {
            Some(p) => format!("kernel: {p}"),
            None => format!("qemu exited ({status}) before the tests finished; see {}", log_path.display()),
        });
    }
    Ok(Boot {
        boot_s,
        total_s: start.elapsed().as_secs_f64(),
        results: parser.results,
        unloadable: parser.unloadable,
        end,
        refusal: parser.refusal,
        warnings: parser.warnings,
    })
}

/// Starts qemu (its command printed first) with its console, stdout and stderr, read line
/// by line into one channel, which disconnects when qemu has closed both.
pub(super) fn spawn_with_console(cmd: &mut Command, k: &Kernel) -> Result<(Child, mpsc::Receiver<String>)> {
    println!("+ {}", crate::util::display(cmd));
    let mut child = cmd.spawn().with_context(|| format!("starting {}", k.arch.qemu))?;
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take().context("qemu stdout")?;
    let tx2 = tx.clone();
    std::thread::spawn(move || read_lines(stdout, tx));
    let stderr = child.stderr.take().context("qemu stderr")?;
    std::thread::spawn(move || read_lines(stderr, tx2));
    Ok((child, rx))
}

fn read_lines(r: impl Read, tx: mpsc::Sender<String>) {
    let mut r = BufReader::new(r);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match r.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let line = strip_escapes(&String::from_utf8_lossy(&buf));
                if tx.send(line).is_err() {
                    return;
                }
            }
        }
    }
}

/// The line without its end, control characters and terminal escapes (the firmware clears
/// the screen with `ESC c`, `ESC [ ? 7 l`, `ESC [ 2 J` before the kernel's first line).
pub(super) fn strip_escapes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: parameters and intermediates up to a final byte in @..~; any other
            // escape (such as `ESC c`) is two characters.
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else if !c.is_control() || c == '\t' {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::arch::{ARM64, X86_64};

    #[test]
    fn kvm_guests_get_the_host_cpu() {
        assert_eq!(qemu_machine(&X86_64, Accel::Tcg), ["-cpu", "max"]);
        assert!(qemu_machine(&X86_64, Accel::Kvm).is_empty());
        assert_eq!(qemu_machine(&ARM64, Accel::Kvm), ["-machine", "virt"]);
    }
    #[test]
    fn escapes_are_stripped() {
        assert_eq!(
            strip_escapes("\x1bc\x1b[?7l\x1b[2JTFO-VM-BOOT 6.1 uptime=3.78\r\n"),
            "TFO-VM-BOOT 6.1 uptime=3.78"
        );
    }
}
