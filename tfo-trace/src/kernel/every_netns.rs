//! Every network namespace on this host, and a way into each: what the kernel's
//! per-namespace counters (`/proc/net/netstat` shows the reader's namespace) are read
//! through, for namespaces no one named as well as for `ip netns` ones.
//!
//! A namespace lives as long as something holds it: a process in it, a bind mount of its
//! nsfs file (`ip netns add` under /run/netns, container runtimes under /run/docker/netns),
//! or a socket made in it that a process elsewhere holds (a listener left in a namespace
//! whose processes are gone). The first two are in /proc ([`every_netns`]); the third is
//! found from the TCP sockets no known namespace lists ([`held_by_sockets`]), through a
//! copy of the socket (pidfd_getfd) and SIOCGSKNS, which gives its namespace.
use std::{
    collections::{BTreeMap, HashSet},
    fs::File,
    io,
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::fs::MetadataExt as _,
    },
    path::PathBuf,
};

use anyhow::{anyhow, Context as _, Result};

use super::{netns, netstat::NetnsReading};

/// SIOCGSKNS (include/uapi/linux/sockios.h): a socket's network namespace as an nsfs fd
/// (4.9+).
const SIOCGSKNS: libc::c_ulong = 0x894C;

/// How to reach a namespace's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Way {
    /// The one tfo-trace runs in.
    Current,
    /// A process in it: its counters are read from /proc/PID/net, without entering.
    Process(u32),
    /// A bind mount of its nsfs file (entered: CAP_SYS_ADMIN).
    Mount(PathBuf),
    /// A socket made in it, held by process `pid` as `fd` (no process or mount left in it;
    /// entered: CAP_SYS_ADMIN).
    Socket { pid: u32, fd: i32 },
    /// A process whose namespace link this user may not read (another user's, without
    /// CAP_SYS_PTRACE), read through /proc/PID/net all the same: the namespace is counted
    /// but has no name. It is known by the inode of its /proc/net/netstat (the kernel
    /// numbers those and namespaces from one pool, so it is never a live namespace's).
    Unnamed(u32),
}

/// A network namespace: its nsfs inode (what events carry as `netns`; for [`Way::Unnamed`],
/// the inode of its /proc/net/netstat) and a way to its counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Netns {
    pub inode: u32,
    pub way: Way,
    /// The inode of its /proc/net/netstat, where known: one per namespace, whoever looks
    /// (what tells an unnamed namespace found again under its name).
    pub netstat_inode: Option<u32>,
}

/// The inode of a process's /proc/PID/net/netstat: which namespace it is in, for anyone
/// who may see the process (no ptrace rights needed, unlike /proc/PID/ns/net).
pub fn netstat_inode(pid: Option<u32>) -> Option<u32> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/net/netstat"),
        None => "/proc/thread-self/net/netstat".to_string(),
    };
    std::fs::metadata(path).ok().map(|m| m.ino() as u32)
}

/// Every namespace a process or a mount holds, the current one first, each once, named by
/// its inode where this user may read it. `learned`: processes the kernel named with their
/// namespace (an event's, a listener's owner), which name namespaces whose link this user
/// may not read. Cheap enough to run at every refresh: one stat per process, one read of
/// the mount table.
pub fn every_netns(learned: &BTreeMap<u32, u32>) -> Vec<Netns> {
    let mut out: Vec<Netns> = Vec::new();
    let mut seen: HashSet<u32> = HashSet::new();
    let mut add = |out: &mut Vec<Netns>, inode: u64, way: Way, netstat_inode: Option<u32>| {
        if seen.insert(inode as u32) {
            out.push(Netns { inode: inode as u32, way, netstat_inode });
        }
    };
    if let Ok(i) = netns::netns_inode_of(netns::SELF_NETNS) {
        add(&mut out, i, Way::Current, netstat_inode(None));
    }
    for path in nsfs_mounts() {
        if let Ok(i) = netns::netns_inode_of(&path) {
            add(&mut out, i, Way::Mount(path), None);
        }
    }
    let mut unnamed = Vec::new();
    let mut named_by_process = HashSet::new();
    for pid in super::listeners::pids() {
        match netns::netns_inode_of(format!("/proc/{pid}/ns/net")) {
            // The netstat inode once per namespace, not per process.
            Ok(i) if named_by_process.insert(i) => {
                let n = netstat_inode(Some(pid));
                match out.iter_mut().find(|ns| ns.inode == i as u32) {
                    // Held by a mount too: read through the process, without entering.
                    Some(ns) if matches!(ns.way, Way::Mount(_)) => {
                        (ns.way, ns.netstat_inode) = (Way::Process(pid), n)
                    }
                    Some(_) => {}
                    None => add(&mut out, i, Way::Process(pid), n),
                }
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => unnamed.push(pid),
            Err(_) => {}
        }
    }
    for (&inode, &pid) in learned {
        if let Some(n) = netstat_inode(Some(pid)) {
            match out.iter_mut().find(|ns| ns.inode == inode) {
                // Held by a mount this user may not enter: read through the process.
                Some(ns) if matches!(ns.way, Way::Mount(_)) => {
                    (ns.way, ns.netstat_inode) = (Way::Process(pid), Some(n));
                }
                Some(_) => {}
                None => add(&mut out, inode.into(), Way::Process(pid), Some(n)),
            }
        }
    }
    let mut named: HashSet<u32> = out.iter().filter_map(|ns| ns.netstat_inode).collect();
    for pid in unnamed {
        let Some(n) = netstat_inode(Some(pid)) else { continue };
        if named.insert(n) {
            out.push(Netns { inode: n, way: Way::Unnamed(pid), netstat_inode: Some(n) });
        }
    }
    out
}

/// A way into each namespace of `inodes` that exists now (those held only by sockets
/// too), in no particular order; none for one that does not.
pub fn find(inodes: &[u32]) -> Vec<Netns> {
    let known = every_netns(&BTreeMap::new());
    let mut found: Vec<Netns> =
        known.iter().filter(|n| inodes.contains(&n.inode) && !n.is_unnamed()).cloned().collect();
    if found.len() < inodes.len() {
        found.extend(held_by_sockets(&known).into_iter().filter(|n| inodes.contains(&n.inode)));
    }
    found
}

/// Whether a network namespace with this inode exists now, held by a process, a mount or
/// a socket: None where that cannot be told (a process whose namespace this user may not
/// read and that no readable one shares: [`Way::Unnamed`]; a socket that could not be
/// asked), so that no one can say it does not.
pub fn exists(inode: u32) -> Option<bool> {
    let known = every_netns(&BTreeMap::new());
    if known.iter().any(|n| n.inode == inode && !n.is_unnamed()) {
        return Some(true);
    }
    let (held, sockets_complete) = held_by_sockets_checked(&known);
    if held.iter().any(|n| n.inode == inode) {
        return Some(true);
    }
    (sockets_complete && !known.iter().any(Netns::is_unnamed)).then_some(false)
}

/// Mount points of nsfs files (`ip netns` names, container runtimes), from our mount
/// table; those of other namespace types are weeded out when their inode is read as a
/// network namespace's (a file that is not one fails to enter).
fn nsfs_mounts() -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    text.lines().filter_map(nsfs_mount_point).collect()
}

/// The mount point of one /proc/PID/mountinfo line when its file system is nsfs:
/// `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPER_OPTIONS`,
/// with spaces in paths written `\040`.
fn nsfs_mount_point(line: &str) -> Option<PathBuf> {
    let (left, right) = line.split_once(" - ")?;
    if right.split_whitespace().next()? != "nsfs" || !left.split_whitespace().nth(3)?.starts_with("net:") {
        return None;
    }
    let raw = left.split_whitespace().nth(4)?;
    Some(PathBuf::from(raw.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")))
}

/// The namespaces that only sockets hold: TCP sockets held by some process that no
/// namespace in `known` lists in its /proc/net/tcp{,6} (a socket is listed only in the
/// namespace it was made in), each asked for its namespace. Costs a walk of every
/// process's fds: for the start and for a namespace that lost its last process.
pub fn held_by_sockets(known: &[Netns]) -> Vec<Netns> {
    held_by_sockets_checked(known).0
}

/// [`held_by_sockets`], and whether every namespace and socket could be looked at.
fn held_by_sockets_checked(known: &[Netns]) -> (Vec<Netns>, bool) {
    let mut complete = true;
    let listed: HashSet<u64> = run_in_each(known, tcp_socket_inodes_here)
        .into_iter()
        .filter_map(|(inode, r)| {
            // A namespace that went away since it was listed held no socket: the answer
            // stays complete (other programs make and drop namespaces all the time).
            r.map_err(|_| complete &= known.iter().any(|n| n.inode == inode && n.vanished())).ok()
        })
        .flatten()
        .collect();
    let mut found = BTreeMap::new();
    let known_inodes: HashSet<u32> = known.iter().map(|n| n.inode).collect();
    for pid in super::listeners::pids() {
        for (fd, inode) in super::listeners::socket_fds(pid) {
            if listed.contains(&inode) || !is_tcp_fd(pid, fd) {
                continue;
            }
            let ns = match socket_netns(pid, fd) {
                Ok(ns) => ns,
                // The process exited or closed the socket since it was listed.
                Err(e) if is_gone(&e) => continue,
                Err(_) => {
                    complete = false;
                    continue;
                }
            };
            let Ok(meta) = File::from(ns).metadata() else { continue };
            let ns_inode = meta.ino() as u32;
            if !known_inodes.contains(&ns_inode) {
                found.entry(ns_inode).or_insert(Way::Socket { pid, fd });
            }
        }
    }
    let held = found.into_iter().map(|(inode, way)| Netns { inode, way, netstat_inode: None }).collect();
    (held, complete)
}

/// Whether `/proc/PID/fd/FD` is a TCP socket (sockfs names its protocol in an xattr:
/// no copy of the socket needed).
fn is_tcp_fd(pid: u32, fd: i32) -> bool {
    let Ok(path) = std::ffi::CString::new(format!("/proc/{pid}/fd/{fd}")) else { return false };
    let mut buf = [0u8; 32];
    // SAFETY: both strings are NUL-terminated; the kernel writes at most buf.len() bytes.
    let n = unsafe {
        libc::getxattr(path.as_ptr(), c"system.sockprotoname".as_ptr(), buf.as_mut_ptr().cast(), buf.len())
    };
    n > 0 && matches!(&buf[..n as usize], b"TCP\0" | b"TCPv6\0" | b"TCP" | b"TCPv6")
}

/// The socket inodes of every TCP socket of the calling thread's namespace that an fd can
/// hold: from sock_diag, which skips TIME_WAIT sockets unwritten, where /proc/net/tcp
/// formats each (issue 55: the view's refresh waited on it), else from /proc.
fn tcp_socket_inodes_here() -> Vec<u64> {
    if let Ok(held) = super::sock_diag::held_inodes_here() {
        return held;
    }
    let mut out = Vec::new();
    for f in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/thread-self/net/{f}")) else { continue };
        out.extend(text.lines().skip(1).filter_map(|l| l.split_whitespace().nth(9)?.parse::<u64>().ok()));
    }
    out
}

/// Whether an error says the process, fd, file or namespace asked about no longer
/// exists (ENOENT, ESRCH, EBADF), not that this user may not see it.
fn is_gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH | libc::EBADF))
}

/// An nsfs fd of the namespace the socket `fd` of `pid` was made in (pidfd_getfd, 5.6+;
/// ptrace rights over `pid`).
fn socket_netns(pid: u32, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscalls; every fd they return is owned (and closed) by an OwnedFd.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) as i32;
        if pidfd < 0 {
            return Err(io::Error::last_os_error());
        }
        let pidfd = OwnedFd::from_raw_fd(pidfd);
        let dup = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) as i32;
        if dup < 0 {
            return Err(io::Error::last_os_error());
        }
        let sock = OwnedFd::from_raw_fd(dup);
        let ns = libc::ioctl(sock.as_raw_fd(), SIOCGSKNS as _);
        if ns < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(ns))
    }
}

impl Netns {
    /// Whether it is a namespace without a name ([`Way::Unnamed`]).
    pub fn is_unnamed(&self) -> bool {
        matches!(self.way, Way::Unnamed(_))
    }

    /// The process its counters are read through, without entering it.
    pub fn process(&self) -> Option<u32> {
        match self.way {
            Way::Process(pid) | Way::Unnamed(pid) => Some(pid),
            _ => None,
        }
    }

    /// An nsfs fd of this namespace, checked to be the one its inode names (a pid or a
    /// mount may name another namespace by now).
    fn open(&self) -> Result<OwnedFd> {
        let fd: OwnedFd = match &self.way {
            Way::Current => File::open(netns::SELF_NETNS).context("opening /proc/self/ns/net")?.into(),
            Way::Process(pid) | Way::Unnamed(pid) => File::open(format!("/proc/{pid}/ns/net"))
                .with_context(|| format!("opening /proc/{pid}/ns/net"))?
                .into(),
            Way::Mount(path) => {
                File::open(path).with_context(|| format!("opening {}", path.display()))?.into()
            }
            Way::Socket { pid, fd } => {
                socket_netns(*pid, *fd).with_context(|| format!("the namespace of fd {fd} of pid {pid}"))?
            }
        };
        let fd = File::from(fd);
        let inode = fd.metadata().context("stat of an nsfs fd")?.ino() as u32;
        if inode != self.inode {
            // The namespace this way led to is gone (a pid or a mount point reused).
            let gone = io::Error::from_raw_os_error(libc::ENOENT);
            return Err(anyhow!(gone)
                .context(format!("{:?} now leads to netns {inode}, not {}", self.way, self.inode)));
        }
        Ok(fd.into())
    }

    /// Whether the way into it no longer leads there (its process exited, its mount or
    /// socket went away), as opposed to a refusal: such a namespace is not there now.
    fn vanished(&self) -> bool {
        self.open().is_err_and(|e| e.chain().any(|c| c.downcast_ref::<io::Error>().is_some_and(is_gone)))
    }
}

/// Each namespace's TFO counters: through /proc/PID/net where a process in it is known
/// (no entering, so no CAP_SYS_ADMIN and no setns: what a tracer with only CAP_BPF and
/// CAP_PERFMON, or a systemd unit that forbids namespace changes, can do), else from
/// inside it ([`run_in_each`]: the namespaces only a mount or a socket holds).
pub fn read_counters(list: &[Netns]) -> Vec<(u32, Result<NetnsReading, String>)> {
    let (through_proc, entered): (Vec<&Netns>, Vec<&Netns>) =
        list.iter().partition(|ns| ns.process().is_some() || ns.way == Way::Current);
    let flat = |r: Result<NetnsReading>| r.map_err(|e| format!("{e:#}"));
    let mut out: Vec<(u32, Result<NetnsReading, String>)> = through_proc
        .into_iter()
        .map(|ns| match ns.process() {
            Some(pid) => (ns.inode, flat(NetnsReading::through(pid, ns.netstat_inode))),
            None => (ns.inode, flat(NetnsReading::here())),
        })
        .collect();
    let entered: Vec<Netns> = entered.into_iter().cloned().collect();
    let no_process = |e: String| format!("no process in it to read it through, and entering it failed: {e}");
    out.extend(
        run_in_each(&entered, NetnsReading::here)
            .into_iter()
            .map(|(i, r)| (i, r.and_then(flat).map_err(no_process))),
    );
    out
}

/// How far this user's view of the namespaces' own counters reaches: `doctor`'s finding.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CounterReach {
    /// Namespaces read by name.
    pub named: usize,
    /// Namespaces read without a name: through these processes (another user's, whose
    /// namespace link this user may not read).
    pub unnamed_through: Vec<u32>,
    /// Namespaces that could not be read, and why.
    pub unreadable: Vec<(u32, String)>,
}

impl CounterReach {
    /// Every namespace, read once now.
    pub fn collect() -> CounterReach {
        let found = every_netns(&BTreeMap::new());
        let mut read: BTreeMap<u32, Result<NetnsReading, String>> =
            read_counters(&found).into_iter().collect();
        let mut reach = CounterReach::default();
        for ns in &found {
            let Some(read) = read.remove(&ns.inode) else { continue };
            match (read, ns.way.clone()) {
                (Err(why), _) => reach.unreadable.push((ns.inode, why)),
                (Ok(_), Way::Unnamed(pid)) => reach.unnamed_through.push(pid),
                (Ok(_), _) => reach.named += 1,
            }
        }
        reach
    }
}

/// Runs `f` inside each namespace of `list`, on one thread that enters them in turn
/// (setns, CAP_SYS_ADMIN); the calling thread stays where it is. Inside `f`, read
/// /proc/thread-self/net, not /proc/self/net (the thread-group leader's).
pub fn run_in_each<T: Send>(list: &[Netns], f: impl Fn() -> T + Sync) -> Vec<(u32, Result<T, String>)> {
    let work = || -> Vec<(u32, Result<T, String>)> {
        // The thread starts in tfo-trace's own namespace: reading it needs no setns (and
        // no CAP_SYS_ADMIN) until the thread has moved.
        let mut moved = false;
        list.iter()
            .map(|ns| {
                if ns.way == Way::Current && !moved {
                    return (ns.inode, Ok(f()));
                }
                moved = true;
                let entered = ns.open().and_then(|fd| {
                    // SAFETY: setns on an nsfs fd we own, for this thread only.
                    if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                        return Err(anyhow!(io::Error::last_os_error()).context("setns(CLONE_NEWNET)"));
                    }
                    Ok(())
                });
                (ns.inode, entered.map(|()| f()).map_err(|e| format!("{e:#}")))
            })
            .collect()
    };
    std::thread::scope(|s| match std::thread::Builder::new().name("tfo-netns".into()).spawn_scoped(s, work) {
        Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
        Err(e) => list.iter().map(|ns| (ns.inode, Err(format!("spawning a thread: {e}")))).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nsfs_mount_points_from_mountinfo() {
        let line = "593 29 0:4 net:[4026532246] /run/netns/tfo\\040lab rw shared:302 - nsfs nsfs rw";
        assert_eq!(nsfs_mount_point(line), Some(PathBuf::from("/run/netns/tfo lab")));
        let uts = "594 29 0:4 uts:[4026532247] /run/uts/x rw - nsfs nsfs rw";
        assert_eq!(nsfs_mount_point(uts), None);
        let proc = "23 29 0:22 / /proc rw,nosuid shared:12 - proc proc rw";
        assert_eq!(nsfs_mount_point(proc), None);
    }

    #[test]
    fn the_current_namespace_comes_first_and_can_be_entered() {
        let all = every_netns(&BTreeMap::new());
        let me = netns::current_netns_inode().unwrap() as u32;
        assert_eq!(all.first().map(|n| (n.inode, &n.way)), Some((me, &Way::Current)));
        assert_eq!(all[0].netstat_inode, netstat_inode(None));
        let mut inodes: Vec<u32> = all.iter().map(|n| n.inode).collect();
        inodes.sort();
        inodes.dedup();
        assert_eq!(inodes.len(), all.len(), "each namespace once");
        let read = run_in_each(&all[..1], || netns::current_netns_inode().map(|i| i as u32).ok());
        assert_eq!(read, vec![(me, Ok(Some(me)))]);
    }

    #[test]
    fn our_namespace_exists_and_inode_1_does_not() {
        let me = netns::current_netns_inode().unwrap() as u32;
        assert_eq!(exists(me), Some(true));
        // Inode 1 is the root of a file system, never an nsfs file; unprivileged, the
        // search may not be complete enough to say so.
        assert_ne!(exists(1), Some(true));
    }

    #[test]
    fn a_way_that_leads_elsewhere_is_refused() {
        let wrong = Netns { inode: 1, way: Way::Mount("/proc/self/ns/net".into()), netstat_inode: None };
        let read = run_in_each(&[wrong], || ());
        assert!(read[0].1.as_ref().is_err_and(|e| e.contains("not 1")), "{read:?}");
    }

    /// A namespace whose holder went away while it was being looked at is not there (the
    /// answer stays complete); one this user may not enter is not known to be gone.
    #[test]
    fn a_way_whose_holder_went_away_has_vanished() {
        let me = netns::current_netns_inode().unwrap() as u32;
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let exited = child.id();
        child.wait().unwrap();
        let ways = [
            Way::Process(exited),
            Way::Mount("/run/netns/tfo-trace-no-such-namespace".into()),
            Way::Socket { pid: std::process::id(), fd: 1_000_000 },
            // Our own namespace's file, but a different namespace's inode: pid reused.
            Way::Mount("/proc/self/ns/net".into()),
        ];
        for way in ways {
            let inode = if matches!(way, Way::Mount(ref p) if p.starts_with("/proc")) { me ^ 1 } else { me };
            assert!(Netns { inode, way: way.clone(), netstat_inode: None }.vanished(), "{way:?}");
        }
        assert!(!Netns { inode: me, way: Way::Current, netstat_inode: None }.vanished());
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            // pid 1's namespace file refuses a user who is not root: not gone.
            assert!(!Netns { inode: me, way: Way::Process(1), netstat_inode: None }.vanished());
        }
    }
}
