//! Listening TCP sockets: which process owns a listener, and each listener's TFO queue size.
//!
//! The kernel side learns owners at listen(); listeners opened before tfo-trace started
//! are found here instead ([`every_listener_owner`], at the start), and the reader names
//! each server event's listener, and its owner where the kernel had none, through
//! [`super::listener_directory`], which reads a namespace's listeners with
//! [`listening_in`] and their owners with [`owners_in`]. `doctor` and `report` list every
//! listener of the current and the named namespaces with its TFO `max_qlen`
//! ([`tfo_listeners`]), which only getsockopt(TCP_FASTOPEN) on the socket itself shows.
use std::{
    collections::{HashMap, HashSet},
    fs, io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    os::unix::fs::MetadataExt,
};

use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::kernel::{
    netns, ser_result,
    sock_diag::{self, Listening},
    sysctl,
    sysctl::TfoNamespace,
};

/// TCP_LISTEN in /proc/net/tcp's `st` column.
const ST_LISTEN: &str = "0A";

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

/// A process in namespace `netns`: `hint` where it is in it (an event's process, most
/// often), else the first /proc finds.
pub(crate) fn process_in(netns: u32, hint: u32) -> Option<u32> {
    if hint != 0 && netns_of_pid(hint) == Some(netns) {
        return Some(hint);
    }
    pids().find(|&p| netns_of_pid(p) == Some(netns))
}

/// The listening sockets of namespace `netns`, which process `pid` is in: through
/// sock_diag from inside it (the calling thread's own namespace as it is; another one
/// entered on a thread of its own, which takes CAP_SYS_ADMIN), else from
/// /proc/PID/net/tcp and tcp6, which any user may read but which list every socket of the
/// namespace (issue 55: ~75 ms with 10,000 TIME_WAIT sockets; the caller runs off the
/// reader's thread for that reason).
pub(crate) fn listening_in(netns: u32, pid: u32) -> Result<Vec<Listening>> {
    let here = netns::current_netns_inode().ok().map(|i| i as u32);
    if here == Some(netns) {
        return sock_diag::listening_here();
    }
    let entered =
        netns::with_netns(format!("/proc/{pid}/ns/net"), sock_diag::listening_here).and_then(|found| found);
    match entered {
        Ok(found) => Ok(found),
        Err(e) => {
            log::debug!(
                "netns {netns}: sock_diag from inside it: {e:#}; reading /proc/{pid}/net/tcp instead"
            );
            proc_listening(&format!("/proc/{pid}/net"))
        }
    }
}

/// The listeners /proc/PID/net (or /proc/thread-self/net) lists, `dir` being that folder:
/// no accept queue figures there.
fn proc_listening(dir: &str) -> Result<Vec<Listening>> {
    let mut out = Vec::new();
    for file in ["tcp", "tcp6"] {
        let text =
            fs::read_to_string(format!("{dir}/{file}")).with_context(|| format!("reading {dir}/{file}"))?;
        out.extend(parse_proc_listeners(&text).into_iter().map(|(addr, inode)| Listening {
            addr,
            inode,
            accept_queue: 0,
            backlog: 0,
        }));
    }
    Ok(out)
}

/// The owners of the sockets `inodes` among the processes of namespace `netns`: one walk
/// of their fds for all of them (as `ss -p` does).
pub(crate) fn owners_in(netns: u32, inodes: &HashSet<u64>) -> Vec<(u64, Owner)> {
    let mut out = Vec::new();
    let mut left = inodes.clone();
    for pid in pids().filter(|&p| netns_of_pid(p) == Some(netns)) {
        let held: Vec<u64> = socket_fds(pid).map(|(_, i)| i).filter(|i| left.contains(i)).collect();
        if held.is_empty() {
            continue;
        }
        let Some(comm) = comm_of(pid) else { continue };
        let owner = Owner { pid, comm: comm.into(), cgroup_id: super::cgroup::id_of_pid(pid) };
        for inode in held {
            left.remove(&inode);
            out.push((inode, owner.clone()));
        }
        if left.is_empty() {
            break;
        }
    }
    out
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

/// Every listening TCP socket on this host with its owner: one read of each namespace's
/// listeners ([`listening_in`]) and one walk of every process's fds, for the listeners
/// opened before the tracer attached (the kernel side learns the rest at listen()).
pub(crate) fn every_listener_owner() -> Vec<ListenerOwner> {
    let owners = socket_owners();
    let mut seen_ns = HashSet::new();
    let mut out = Vec::new();
    for pid in pids() {
        let Some(ns) = netns_of_pid(pid) else { continue };
        if !seen_ns.insert(ns) {
            continue; // one read per namespace
        }
        let Ok(listening) = listening_in(ns, pid) else { continue };
        for Listening { addr, inode, .. } in listening {
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
    let found = sock_diag::listening_here().or_else(|e| {
        log::debug!("sock_diag: {e:#}; reading /proc/thread-self/net/tcp instead");
        proc_listening("/proc/thread-self/net")
    });
    let out = found.unwrap_or_default().into_iter().map(|l| (l.addr, l.inode)).collect();
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
        let addr = l.local_addr().unwrap();
        let netns = netns_of_pid(std::process::id()).unwrap();
        let pid = process_in(netns, std::process::id()).unwrap();
        let listening = listening_in(netns, pid).unwrap();
        let ours = listening.iter().find(|s| s.addr == addr).expect("our own listener");
        let owners = owners_in(netns, &HashSet::from([ours.inode]));
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].1.pid, std::process::id());
    }
}
