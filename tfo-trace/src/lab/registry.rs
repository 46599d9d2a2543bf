//! The process-wide registry of what every lab created, so that `Drop for Lab` knows
//! exactly which namespaces and pids are ours; the child
//! processes registered in it ([`Proc`]); and the sweep of namespaces left by runs that
//! died.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _, Result};

use super::cmd;

/// The nftables table (family inet) that holds the middlebox rules in the server namespace.
pub(crate) const NFT_TABLE: &str = "tfolab";

#[derive(Debug, Default)]
pub(super) struct Owned {
    /// Only namespaces whose `ip netns add` succeeded: never delete someone else's.
    pub(super) namespaces: Vec<String>,
    /// Pids of children not yet reaped. A child is removed under the lock at the moment it
    /// is reaped, so a pid in here can never have been reused by another process.
    pub(super) pids: BTreeSet<u32>,
    /// The server namespace got the nft table.
    pub(super) nft_in: Option<String>,
}

pub(super) static REGISTRY: Mutex<BTreeMap<u64, Owned>> = Mutex::new(BTreeMap::new());
pub(super) static NEXT_LAB: AtomicU64 = AtomicU64::new(0);
/// Serializes `ip netns add/del` within the process: concurrent first use of /run/netns
/// (making it a shared mount) is racy in iproute2.
pub(super) static NETNS_LOCK: Mutex<()> = Mutex::new(());
pub(super) static SWEEP_ONCE: Once = Once::new();

/// Locks without ever panicking: a poisoned registry is still the best record we have.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn teardown(owned: Owned) {
    for &pid in &owned.pids {
        // Unreaped children only (see Owned::pids): the pid is still ours.
        // SAFETY: kill(2) with a pid we own; no memory involved.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    if let Some(ns) = &owned.nft_in {
        // Best effort: deleting the namespace below removes the table anyway.
        let _ = cmd::run(cmd::in_netns(ns, "nft").args(["delete", "table", "inet", NFT_TABLE]));
    }
    for ns in &owned.namespaces {
        if let Err(e) = delete_netns(ns) {
            log::warn!("lab cleanup: {e:#}");
        }
    }
}

pub(super) fn delete_netns(name: &str) -> Result<()> {
    // Its resolv.conf, where the lab gave it a DNS server (dns.rs).
    let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(name));
    let _g = lock(&NETNS_LOCK);
    if !Path::new("/run/netns").join(name).exists() {
        return Ok(());
    }
    cmd::run(Command::new("ip").args(["netns", "delete", name])).map(drop)
}

/// Deletes namespaces named `<prefix>-<pid>-<n>-cli|srv` whose `<pid>` is no longer a
/// live process (left behind by a run that crashed or was killed) and that no process is
/// in any more. Namespaces of live processes, of this process, still in use, or with any
/// other name are never touched. Returns the names deleted. (A dead run's lab servers
/// exit by themselves within a fraction of a second: their stdin pipe closes.)
pub(crate) fn sweep_stale(prefix: &str) -> Result<Vec<String>> {
    let list = cmd::run(Command::new("ip").args(["netns", "list"]))?;
    let me = std::process::id();
    let mut removed = Vec::new();
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(pid) = stale_owner(prefix, name) else {
            continue;
        };
        if pid == me || pid_alive(pid) {
            continue;
        }
        // Still in use (e.g. the owner lives in another pid namespace, so its pid meant
        // nothing here): leave it.
        let inside = cmd::run(Command::new("ip").args(["netns", "pids", name]))?;
        if !inside.trim().is_empty() {
            continue;
        }
        delete_netns(name)?;
        removed.push(name.to_string());
    }
    Ok(removed)
}

/// The owner pid embedded in a lab namespace name, if `name` is exactly one of ours.
pub(super) fn stale_owner(prefix: &str, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?.strip_prefix('-')?;
    let mut parts = rest.split('-');
    let pid = parts.next()?.parse::<u32>().ok()?;
    parts.next()?.parse::<u64>().ok()?;
    let side = parts.next()?;
    (parts.next().is_none() && (side == "cli" || side == "srv")).then_some(pid)
}

pub(super) fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks existence.
    let rc = unsafe { libc::kill(p, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A child process registered with its lab. Dropping it kills (by pid) and reaps it.
#[derive(Debug)]
pub(super) struct Proc {
    pub(super) child: Child,
    pub(super) lab: u64,
}

impl Proc {
    pub(super) fn spawn(lab: u64, c: &mut Command) -> Result<Proc> {
        // Spawn under the lock, so cleanup_all() never misses a just-started child.
        let mut reg = lock(&REGISTRY);
        let owned = reg.get_mut(&lab).ok_or_else(|| anyhow!("lab {lab} is already torn down"))?;
        let child = c.spawn()?;
        owned.pids.insert(child.id());
        Ok(Proc { child, lab })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(super) fn forget(&self, reg: &mut BTreeMap<u64, Owned>) {
        if let Some(o) = reg.get_mut(&self.lab) {
            o.pids.remove(&self.pid());
        }
    }

    /// try_wait, unregistering the pid in the same critical section as the reaping.
    pub(super) fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        let mut reg = lock(&REGISTRY);
        let st = self.child.try_wait().with_context(|| format!("waiting for pid {}", self.pid()))?;
        if st.is_some() {
            self.forget(&mut reg);
        }
        Ok(st)
    }

    /// Polls for exit for at most `timeout`, then kills; describes how it ended.
    pub(super) fn wait_bounded(&mut self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.try_wait() {
                Ok(Some(st)) => return st.to_string(),
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return format!("{e:#}"),
            }
        }
        self.kill();
        "killed after timeout".into()
    }

    /// SIGKILL by pid (std skips it if the child was already reaped), then reap.
    pub(super) fn kill(&mut self) {
        {
            let mut reg = lock(&REGISTRY);
            let _ = self.child.kill();
            self.forget(&mut reg);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_owner_parses_only_our_names() {
        assert_eq!(stale_owner("tfolab", "tfolab-123-0-cli"), Some(123));
        assert_eq!(stale_owner("tfolab", "tfolab-123-17-srv"), Some(123));
        assert_eq!(stale_owner("tfolab", "tfolab-123-0-cli-x"), None);
        assert_eq!(stale_owner("tfolab", "tfolab-123-0-foo"), None);
        assert_eq!(stale_owner("tfolab", "tfolab-x-0-cli"), None);
        assert_eq!(stale_owner("tfolab", "tfolabx-1-0-cli"), None);
        assert_eq!(stale_owner("tfolab", "other-1-0-cli"), None);
    }
}
