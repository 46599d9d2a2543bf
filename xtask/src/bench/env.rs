//! The machine the bench runs on: its own network namespace, kernel.bpf_stats_enabled, a
//! tracefs mount and a scratch directory (all put back by `Drop for Env`), the tools it
//! needs, and other engineers' VMs waited for.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::util::{self, capture, run, which};

const QEMU_WAIT: Duration = Duration::from_secs(20 * 60);

/// The namespace, sysctl and mounts the bench changes, put back on drop.
pub(super) struct Env {
    pub(super) bin: PathBuf,
    pub(super) ns: String,
    pub(super) scratch: PathBuf,
    pub(super) old_bpf_stats: Option<String>,
    pub(super) mounted_tracefs: bool,
    /// The backend tfo-trace picked (auto) here, for the floor.
    pub(super) backend: String,
    /// `--backend` for tfo-trace's views (None: `auto`; the VM mode asks for fentry).
    pub(super) tfo_backend: Option<String>,
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "delete", &self.ns]).status();
        if let Some(v) = &self.old_bpf_stats {
            let _ = fs::write("/proc/sys/kernel/bpf_stats_enabled", v);
        }
        if self.mounted_tracefs {
            // Best effort: someone may have started using it since.
            let _ = Command::new("umount").arg("/sys/kernel/tracing").stderr(Stdio::null()).status();
        }
        let _ = fs::remove_dir_all(&self.scratch);
    }
}

impl Env {
    /// `bin`: the tfo-trace the bench runs.
    pub(super) fn create(bin: PathBuf) -> Result<Env> {
        let pid = std::process::id();
        sweep_stale_namespaces();
        let scratch = std::env::temp_dir().join(format!("tfobench-{pid}"));
        fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
        let mut env = Env {
            bin,
            ns: format!("tfobench-{pid}"),
            scratch,
            old_bpf_stats: None,
            mounted_tracefs: false,
            backend: "tracepoint".into(),
            tfo_backend: None,
        };
        // bpftrace reads tracepoint formats from tracefs, which is not mounted here at boot.
        if !Path::new("/sys/kernel/tracing/events").exists() {
            run(Command::new("mount").args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"]))?;
            env.mounted_tracefs = true;
        }
        let old =
            fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").context("reading bpf_stats_enabled")?;
        fs::write("/proc/sys/kernel/bpf_stats_enabled", "1").context("sysctl kernel.bpf_stats_enabled=1")?;
        env.old_bpf_stats = Some(old.trim().to_string());
        run(Command::new("ip").args(["netns", "add", &env.ns]))?;
        run(Command::new("ip").args(["-n", &env.ns, "link", "set", "lo", "up"]))?;
        run(Command::new("ip").args(["netns", "exec", &env.ns, "sysctl", "-qw", "net.ipv4.tcp_fastopen=3"]))?;
        Ok(env)
    }

    /// Puts the sysctl back at once (Drop does it again, harmlessly) and says so.
    pub(super) fn restore_now(&mut self) {
        if let Some(v) = self.old_bpf_stats.take() {
            match fs::write("/proc/sys/kernel/bpf_stats_enabled", &v) {
                Ok(()) => println!("bench: kernel.bpf_stats_enabled restored to {v}"),
                Err(e) => eprintln!("bench: warning: restoring kernel.bpf_stats_enabled={v}: {e}"),
            }
        }
    }
}

/// Deletes `tfobench-PID` namespaces whose PID is gone (a bench killed half-way).
pub(super) fn sweep_stale_namespaces() {
    let Ok(list) = capture(Command::new("ip").args(["netns", "list"])) else { return };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(pid) = name.strip_prefix("tfobench-").and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("ip").args(["netns", "delete", name]).status();
        }
    }
}

/// Installs a Debian package when its command is missing.
pub(super) fn ensure_tool(cmd: &str, package: &str) -> Result<()> {
    if which(cmd).is_some() || Path::new("/usr/sbin").join(cmd).exists() {
        return Ok(());
    }
    println!("bench: {cmd} is missing: installing Debian's {package}");
    crate::apt::run(crate::apt::apt_get().args(["install", "-y", "--no-install-recommends", package]))
}

/// Pids of running qemu system emulators. `pgrep -x qemu-system-x86_64` never matches:
/// the kernel keeps 15 characters of a command name ("qemu-system-x86"), so the name is
/// read from /proc/PID/comm by prefix.
pub(super) fn qemu_pids() -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim().starts_with("qemu-system"))
        })
        .collect()
}

/// Waits (up to 20 minutes) until no qemu VM runs: the final numbers need an idle machine.
pub(super) fn wait_for_qemu() -> Result<String> {
    let start = Instant::now();
    let mut said = false;
    loop {
        let pids = qemu_pids();
        if pids.is_empty() {
            let waited = start.elapsed().as_secs();
            return Ok(if waited == 0 {
                "none running".into()
            } else {
                format!("waited {waited} s for qemu to finish")
            });
        }
        if start.elapsed() >= QEMU_WAIT {
            let note = format!("qemu still running after 20 min (pids {pids:?}): measured anyway");
            eprintln!("bench: warning: {note}");
            return Ok(note);
        }
        if !said {
            println!("bench: qemu is running (pids {pids:?}): waiting up to 20 min for it to finish");
            said = true;
        }
        std::thread::sleep(Duration::from_secs(5));
    }
}

/// The tfo-trace the benchmarks run: the release build in CARGO_TARGET_DIR (or target/).
pub(super) fn release_bin() -> PathBuf {
    util::target_dir().join("release/tfo-trace")
}
