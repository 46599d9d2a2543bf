//! Listening TCP sockets, from /proc (as `ss -ltnp` does): which process owns a listener,
//! and each listener's TFO queue size.
//!
//! The kernel side learns owners at listen(); listeners opened before tfo-trace started
//! are found here instead ([`OwnerCache`]). `doctor` and `report` list every listener of
//! the current and the named namespaces with its TFO `max_qlen` ([`tfo_listeners`]), which
//! only getsockopt(TCP_FASTOPEN) on the socket itself shows.
use std::{
    collections::HashMap,
    fs, io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    os::unix::fs::MetadataExt,
    time::{Duration, Instant},
};

use serde::Serialize;

use crate::kernel::{netns, ser_result, sysctl, sysctl::TfoNamespace};

/// TCP_LISTEN in /proc/net/tcp's `st` column.
const ST_LISTEN: &str = "0A";
/// How long an unknown owner stays unknown before /proc is scanned again.
const NEGATIVE_TTL: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    pub pid: u32,
    /// Shared with the events that name it.
    pub comm: std::sync::Arc<str>,
    /// Its cgroup v2 id, where /proc and the v2 mount say.
    pub cgroup_id: Option<u64>,
}

/// Listening sockets in a /proc/net/tcp or tcp6 text: (local address, socket inode).
/// Addresses are printed as 32-bit words in host byte order (`%08X` of the raw word).
pub(crate) fn parse_proc_listeners(text: &str) -> Vec<(SocketAddr, u64)> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.get(3) != Some(&ST_LISTEN) {
                return None;
            }
            let (addr, port) = cols.get(1)?.split_once(':')?;
            let port = u16::from_str_radix(port, 16).ok()?;
            let mut bytes = Vec::with_capacity(16);
            for i in (0..addr.len()).step_by(8) {
                bytes.extend(u32::from_str_radix(addr.get(i..i + 8)?, 16).ok()?.to_ne_bytes());
            }
            let ip: IpAddr = match bytes.len() {
                4 => Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).into(),
                16 => Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?).into(),
                _ => return None,
            };
            Some((SocketAddr::new(ip, port), cols.get(9)?.parse().ok()?))
        })
        .collect()
}

pub(crate) fn pids() -> impl Iterator<Item = u32> {
    fs::read_dir("/proc").into_iter().flatten().filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
}

fn netns_of_pid(pid: u32) -> Option<u32> {
    Some(fs::metadata(format!("/proc/{pid}/ns/net")).ok()?.ino() as u32)
}

fn comm_of(pid: u32) -> Option<String> {
    Some(fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim().to_string())
}

/// The sockets a process holds: (fd, socket inode), from /proc/PID/fd.
pub(crate) fn socket_fds(pid: u32) -> impl Iterator<Item = (i32, u64)> {
    fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten().filter_map(|fd| {
        let num = fd.file_name().to_str()?.parse::<i32>().ok()?;
        let target = fs::read_link(fd.path()).ok()?;
        let inode = target.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok()?;
        Some((num, inode))
    })
}

/// Scans /proc once for the owner of a listener on (netns, port): the one bound to
/// `listener` where it is known (`0.0.0.0:80` and `[::]:80` may have two owners).
pub(crate) fn find_owner(netns: u32, port: u16, listener: Option<SocketAddr>) -> Option<Owner> {
    let in_ns: Vec<u32> = pids().filter(|&p| netns_of_pid(p) == Some(netns)).collect();
    let first = *in_ns.first()?;
    let mut inodes = Vec::new();
    for file in ["tcp", "tcp6"] {
        if let Ok(text) = fs::read_to_string(format!("/proc/{first}/net/{file}")) {
            let ours = |a: &SocketAddr| listener.map_or(a.port() == port, |l| *a == l);
            inodes.extend(parse_proc_listeners(&text).into_iter().filter(|(a, _)| ours(a)).map(|(_, i)| i));
        }
    }
    if inodes.is_empty() {
        return None;
    }
    let pid = in_ns.into_iter().find(|&p| socket_fds(p).any(|(_, i)| inodes.contains(&i)))?;
    Some(Owner { pid, comm: comm_of(pid)?.into(), cgroup_id: super::cgroup::id_of_pid(pid) })
}

/// A listener and the process that holds it, in any network namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ListenerOwner {
    pub netns: u32,
    /// Its bound address (as `ss -ltn` shows it, but a dual-stack `[::]:P`, `*:P` there).
    pub addr: SocketAddr,
    pub port: u16,
    pub pid: u32,
    pub comm: String,
    /// Its cgroup v2 path below the root (`0::` in /proc/PID/cgroup).
    pub cgroup: Option<String>,
}

/// Every listening TCP socket on this host with its owner: one /proc scan, for the
/// listeners opened before the tracer attached (the kernel side learns the rest at
/// listen()).
pub(crate) fn every_listener_owner() -> Vec<ListenerOwner> {
    let owners = socket_owners();
    let mut seen_ns = std::collections::HashSet::new();
    let mut out = Vec::new();
    for pid in pids() {
        let Some(ns) = netns_of_pid(pid) else { continue };
        if !seen_ns.insert(ns) {
            continue; // /proc/PID/net shows the namespace's sockets: once per namespace
        }
        for file in ["tcp", "tcp6"] {
            let Ok(text) = fs::read_to_string(format!("/proc/{pid}/net/{file}")) else { continue };
            for (addr, inode) in parse_proc_listeners(&text) {
                let Some(&(owner, _)) = owners.get(&inode) else { continue };
                out.push(ListenerOwner {
                    netns: ns,
                    addr,
                    port: addr.port(),
                    pid: owner,
                    comm: comm_of(owner).unwrap_or_default(),
                    cgroup: super::cgroup::path_of_pid(owner),
                });
            }
        }
    }
    out
}

/// The listener a connection arrived at, by its bound address (docs/usage.md, "JSON
/// fields", on how that differs from `ss -ltn`), among `listening` (the namespace's listeners), for the connection's local
/// address. The same address and port first, else the wildcard of the connection's family
/// (`0.0.0.0:P`, `[::]:P`), else for IPv4 a dual-stack `[::]:P` (which takes IPv4 as
/// `::ffff:a.b.c.d`).
pub(crate) fn listener_of(local: SocketAddr, listening: &[SocketAddr]) -> Option<SocketAddr> {
    let on_port = || listening.iter().filter(|l| l.port() == local.port());
    if let Some(exact) = on_port().find(|l| l.ip() == local.ip()) {
        return Some(*exact);
    }
    let wildcard = |l: &&SocketAddr| l.ip().is_unspecified();
    let same_family = on_port().filter(wildcard).find(|l| l.is_ipv4() == local.is_ipv4());
    let dual_stack = || on_port().filter(wildcard).find(|l| local.is_ipv4() && l.is_ipv6());
    same_family.or_else(dual_stack).copied()
}

/// Names listeners as [`listener_of`] does, remembering each: /proc is read once per
/// listener and local address, not once per event.
#[derive(Default)]
pub(crate) struct ListenerNames {
    known: HashMap<(u32, SocketAddr), SocketAddr>,
    unknown: HashMap<(u32, SocketAddr), Instant>,
}

impl ListenerNames {
    /// The listener of namespace `netns` that a connection to `local` arrived at; `pid`, a
    /// process likely in that namespace (the listener's owner), spares a search for one.
    pub(crate) fn lookup(&mut self, netns: u32, pid: u32, local: SocketAddr) -> Option<SocketAddr> {
        let key = (netns, local);
        if let Some(l) = self.known.get(&key) {
            return Some(*l);
        }
        if self.unknown.get(&key).is_some_and(|t| t.elapsed() < NEGATIVE_TTL) {
            return None;
        }
        let in_ns = Some(pid).filter(|&p| p != 0 && netns_of_pid(p) == Some(netns));
        let found = in_ns
            .or_else(|| pids().find(|&p| netns_of_pid(p) == Some(netns)))
            .and_then(|p| listener_of(local, &listening_in(p)));
        match found {
            Some(l) => {
                self.known.insert(key, l);
            }
            None => {
                self.unknown.insert(key, Instant::now());
            }
        }
        found
    }
}

/// The listening sockets of the namespace process `pid` is in.
fn listening_in(pid: u32) -> Vec<SocketAddr> {
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|f| fs::read_to_string(format!("/proc/{pid}/net/{f}")).ok())
        .flat_map(|text| parse_proc_listeners(&text).into_iter().map(|(a, _)| a))
        .collect()
}

/// Remembers owners so /proc is scanned once per listener, not once per event.
#[derive(Default)]
pub(crate) struct OwnerCache {
    known: HashMap<(u32, u16, Option<SocketAddr>), Owner>,
    unknown: HashMap<(u32, u16, Option<SocketAddr>), Instant>,
}

impl OwnerCache {
    /// The owner of the listener on `port` of `netns`, bound to `listener` where known.
    pub(crate) fn lookup(&mut self, netns: u32, port: u16, listener: Option<SocketAddr>) -> Option<Owner> {
        let key = (netns, port, listener);
        if let Some(o) = self.known.get(&key) {
            return Some(o.clone());
        }
        if self.unknown.get(&key).is_some_and(|t| t.elapsed() < NEGATIVE_TTL) {
            return None;
        }
        match find_owner(netns, port, listener) {
            Some(o) => {
                self.known.insert(key, o.clone());
                Some(o)
            }
            None => {
                self.unknown.insert(key, Instant::now());
                None
            }
        }
    }
}

/// A listening TCP socket and its TFO queue.
#[derive(Debug, Clone, Serialize)]
pub struct TfoListener {
    pub namespace: String,
    pub netns: Option<u64>,
    pub addr: SocketAddr,
    pub inode: u64,
    /// The process holding it, when found in /proc.
    pub pid: Option<u32>,
    pub comm: Option<String>,
    /// fastopenq.max_qlen, read with getsockopt(TCP_FASTOPEN) on a copy of the owner's socket
    /// (pidfd_getfd): the only place the kernel shows it (not in /proc/net/tcp, not in
    /// `ss -ltnie`, not in inet_diag). 0 = TFO off on this listener.
    #[serde(serialize_with = "ser_result")]
    pub max_qlen: Result<u32, String>,
    /// net.core.somaxconn of its namespace (the kernel clamps max_qlen to it).
    pub somaxconn: Option<u32>,
}

/// The calling thread's listeners and somaxconn (run inside `netns::with_netns`).
fn listeners_here() -> (Vec<(SocketAddr, u64)>, Option<u32>) {
    let mut out = Vec::new();
    for f in ["tcp", "tcp6"] {
        if let Ok(t) = fs::read_to_string(format!("/proc/thread-self/net/{f}")) {
            out.extend(parse_proc_listeners(&t));
        }
    }
    let somaxconn = sysctl::read_sysctl("/proc/sys/net/core/somaxconn").ok().and_then(|v| v.parse().ok());
    (out, somaxconn)
}

/// socket inode -> (pid, fd), from every process's /proc/PID/fd (as `ss -p` does).
fn socket_owners() -> HashMap<u64, (u32, i32)> {
    let mut map = HashMap::new();
    for pid in pids() {
        for (fd, inode) in socket_fds(pid) {
            map.entry(inode).or_insert((pid, fd));
        }
    }
    map
}

/// getsockopt(TCP_FASTOPEN) on a copy of `fd` of process `pid`: the listener's max_qlen.
/// Needs ptrace rights over the owner (root) and Linux 5.6 (pidfd_getfd).
fn listener_max_qlen(pid: u32, fd: i32) -> Result<u32, String> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: plain syscalls; every fd they return is owned (and closed) by an OwnedFd.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) as i32;
        if pidfd < 0 {
            return Err(format!("pidfd_open({pid}): {}", io::Error::last_os_error()));
        }
        let pidfd = OwnedFd::from_raw_fd(pidfd);
        let dup = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) as i32;
        if dup < 0 {
            return Err(format!("pidfd_getfd(pid {pid}, fd {fd}): {}", io::Error::last_os_error()));
        }
        let sock = OwnedFd::from_raw_fd(dup);
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let rc = libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_FASTOPEN,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        );
        if rc != 0 {
            return Err(format!("getsockopt(TCP_FASTOPEN): {}", io::Error::last_os_error()));
        }
        Ok(v.max(0) as u32)
    }
}

/// Every listening TCP socket of `namespaces` (those that can be entered), with its owner
/// and TFO queue size.
pub(crate) fn tfo_listeners(namespaces: &[TfoNamespace]) -> Vec<TfoListener> {
    let owners = socket_owners();
    let mut out = Vec::new();
    for ns in namespaces {
        let found = if ns.current {
            Ok(listeners_here())
        } else if ns.inode.is_some() {
            netns::with_netns(&ns.path, listeners_here).map_err(|e| format!("{e:#}"))
        } else {
            continue;
        };
        let Ok((socks, somaxconn)) = found else { continue };
        for (addr, inode) in socks {
            let owner = owners.get(&inode).copied();
            let max_qlen = match owner {
                Some((pid, fd)) => listener_max_qlen(pid, fd),
                None => Err("no process found holding it".into()),
            };
            out.push(TfoListener {
                namespace: ns.label(),
                netns: ns.inode,
                addr,
                inode,
                pid: owner.map(|o| o.0),
                comm: owner.and_then(|(pid, _)| comm_of(pid)),
                max_qlen,
                somaxconn,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_NET_TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 23456 1 0000000000000000 20 4 30 10 -1
   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 34567 1 0000000000000000 100 0 0 10 0";

    #[test]
    fn parses_proc_net_tcp() {
        assert_eq!(
            parse_proc_listeners(PROC_NET_TCP),
            vec![("0.0.0.0:8080".parse().unwrap(), 12345), ("0.0.0.0:80".parse().unwrap(), 34567)]
        );
    }

    #[test]
    fn parses_proc_net_tcp6_and_host_byte_order() {
        // 127.0.0.1:8080 as this (little-endian) host prints it, and [::1]:443.
        let text = "header\n   0: 0100007F:1F90 00000000:0000 0A 0 0 0 0 0 111 1\n   \
                    1: 00000000000000000000000001000000:01BB 00000000000000000000000000000000:0000 0A 0 0 0 0 0 222 1\n";
        let l = parse_proc_listeners(text);
        if cfg!(target_endian = "little") {
            assert_eq!(
                l,
                vec![("127.0.0.1:8080".parse().unwrap(), 111), ("[::1]:443".parse().unwrap(), 222)]
            );
        }
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn a_connection_is_given_the_listener_ss_names() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let both = [a("0.0.0.0:8082"), a("[::]:8082"), a("127.0.0.1:9000"), a("0.0.0.0:9000")];
        assert_eq!(listener_of(a("10.253.0.2:8082"), &both), Some(a("0.0.0.0:8082")));
        assert_eq!(listener_of(a("[fd53::2]:8082"), &both), Some(a("[::]:8082")), "not the IPv4 one");
        assert_eq!(listener_of(a("127.0.0.1:9000"), &both), Some(a("127.0.0.1:9000")), "bound to it");
        assert_eq!(listener_of(a("10.0.0.1:9000"), &both), Some(a("0.0.0.0:9000")));
        assert_eq!(listener_of(a("[fd53::2]:9000"), &both), None, "no IPv6 listener on 9000");
        // A dual-stack [::] alone takes IPv4 too, as it is or mapped.
        let dual = [a("[::]:80")];
        assert_eq!(listener_of(a("10.0.0.1:80"), &dual), Some(a("[::]:80")));
        assert_eq!(listener_of(a("[::ffff:10.0.0.1]:80"), &dual), Some(a("[::]:80")));
        assert_eq!(listener_of(a("10.0.0.1:81"), &dual), None);
    }

    #[test]
    fn finds_the_owner_of_a_listener_of_ours() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let netns = netns_of_pid(std::process::id()).unwrap();
        let owner = find_owner(netns, port, None).expect("our own listener");
        assert_eq!(owner.pid, std::process::id());
    }
}
