//! Every `apt-get` (and `dpkg --add-architecture`) xtask runs, after waiting for the
//! package manager's locks.
//!
//! On a new machine unattended-upgrades (or cloud-init) holds them for minutes, and
//! apt-get fails at once on a held lock (`E: Could not get lock
//! /var/lib/dpkg/lock-frontend. It is held by process N (apt-get)`): the first `apt-get
//! install qemu-system-arm` of a fresh machine's test run failed so (issue 52). apt's own
//! `DPkg::Lock::Timeout` waits for the dpkg locks of `install`, not for the lists lock of
//! `update`, so the wait is here, for every lock apt takes, bounded, saying who holds it
//! (from /proc/locks: apt and dpkg lock with fcntl, whose locks name their process).
use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

/// The locks apt-get and dpkg take (apt-pkg's `pkgSystem::Lock`, `pkgAcquire::GetLock`).
const LOCKS: &[&str] = &[
    "/var/lib/dpkg/lock-frontend",
    "/var/lib/dpkg/lock",
    "/var/lib/apt/lists/lock",
    "/var/cache/apt/archives/lock",
];

/// How long to wait for another apt to finish: a new machine's first unattended upgrade
/// takes minutes (downloads and installs); half an hour is a wide margin over that, and
/// past it something is stuck that a person must look at.
const LOCK_WAIT: Duration = Duration::from_secs(30 * 60);

/// How often a wait says it is still waiting.
const SAY_EVERY: Duration = Duration::from_secs(30);

/// `apt-get ARGS`, non-interactive, waiting for the dpkg lock itself too (for the moment
/// between [`wait_for_locks`] and its own locking).
pub fn apt_get() -> Command {
    let mut cmd = Command::new("apt-get");
    cmd.env("DEBIAN_FRONTEND", "noninteractive")
        .args(["-o", &format!("DPkg::Lock::Timeout={}", LOCK_WAIT.as_secs())]);
    cmd
}

/// Runs `cmd` (an [`apt_get`]) once no other process holds apt's locks; when it fails while
/// another process took a lock in between (the lists lock of `update`, which apt does not
/// wait for), waits again and runs it again, within the same bound.
pub fn run(cmd: &mut Command) -> Result<()> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        wait_for_locks(deadline)?;
        match crate::util::run(cmd) {
            Ok(()) => return Ok(()),
            Err(e) if !others_holding().is_empty() && Instant::now() < deadline => {
                println!("apt: {e:#}; another process took apt's locks meanwhile: waiting again");
            }
            Err(e) => return Err(e),
        }
    }
}

/// Waits until no other process holds any of [`LOCKS`], saying who holds which every
/// [`SAY_EVERY`]; an error past `deadline`.
fn wait_for_locks(deadline: Instant) -> Result<()> {
    let start = Instant::now();
    let mut said: Option<Instant> = None;
    loop {
        let held = others_holding();
        if held.is_empty() {
            if said.is_some() {
                println!("apt: the locks are free after {:.0} s", start.elapsed().as_secs_f64());
            }
            return Ok(());
        }
        let who = held.iter().map(|h| h.to_string()).collect::<Vec<_>>().join("; ");
        if Instant::now() >= deadline {
            bail!(
                "apt's locks are still held after {} s ({who}): let that apt finish, or stop it, and run again",
                LOCK_WAIT.as_secs()
            );
        }
        if said.is_none_or(|t| t.elapsed() >= SAY_EVERY) {
            let left = deadline.saturating_duration_since(Instant::now()).as_secs();
            println!("apt: waiting for another package manager to finish ({who}); up to {left} s more");
            said = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// One lock another process holds.
#[derive(Debug, PartialEq)]
struct Held {
    lock: &'static str,
    pid: i64,
    comm: String,
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} held by pid {} ({})", self.lock, self.pid, self.comm)
    }
}

/// The locks of [`LOCKS`] another process holds now.
fn others_holding() -> Vec<Held> {
    let table = fs::read_to_string("/proc/locks").unwrap_or_default();
    holders(&table, LOCKS).into_iter().filter(|h| h.pid != i64::from(std::process::id())).collect()
}

/// The holders of `locks` (files; one that does not exist is not held) in a /proc/locks
/// `table`, whose lines name a lock's file as `MAJOR:MINOR:INODE` (hex, hex, decimal) and
/// its process (`1: POSIX  ADVISORY  WRITE 1234 fe:00:5431796 0 EOF`).
fn holders(table: &str, locks: &[&'static str]) -> Vec<Held> {
    let mut out = Vec::new();
    for &lock in locks {
        let Ok(meta) = fs::metadata(Path::new(lock)) else { continue };
        let id = format!("{:02x}:{:02x}:{}", libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino());
        for line in table.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            // `ID: CLASS MODE TYPE PID DEV:INODE START END`; a waiting lock has `->` first.
            let words = if words.get(1) == Some(&"->") { &words[1..] } else { &words[..] };
            let [_, _, _, _, pid, file, ..] = words else { continue };
            if *file != id {
                continue;
            }
            let pid: i64 = pid.parse().unwrap_or(-1);
            let comm =
                fs::read_to_string(format!("/proc/{pid}/comm")).map_or("?".into(), |c| c.trim().to_string());
            out.push(Held { lock, pid, comm });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd as _;

    /// A lock this process takes with fcntl, as apt takes its own, is found in the real
    /// /proc/locks with this process's pid; a file nobody locks, and one that does not
    /// exist, are not held.
    #[test]
    fn an_fcntl_lock_is_found_with_its_process() {
        let dir = std::env::temp_dir().join(format!("xtask-apt-lock-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (locked, free) = (dir.join("lock"), dir.join("free"));
        let file = fs::OpenOptions::new().create(true).truncate(false).write(true).open(&locked).unwrap();
        fs::write(&free, "").unwrap();
        // SAFETY: a zeroed flock is a valid argument; F_SETLK on our own open fd.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as i16;
        fl.l_whence = libc::SEEK_SET as i16;
        // SAFETY: fd and flock are valid for the call.
        assert_eq!(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) }, 0);
        let leak =
            |p: &Path| -> &'static str { Box::leak(p.to_string_lossy().into_owned().into_boxed_str()) };
        let table = fs::read_to_string("/proc/locks").unwrap();
        let found = holders(&table, &[leak(&locked), leak(&free), "/nonexistent/lock"]);
        drop(file);
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(found.len(), 1, "{found:?}\n{table}");
        assert_eq!(found[0].pid, i64::from(std::process::id()));
        assert!(found[0].to_string().ends_with(&format!("held by pid {} ({})", found[0].pid, found[0].comm)));
    }
}
