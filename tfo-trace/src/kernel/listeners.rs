//! Who owns a listening TCP port in a network namespace, from /proc (as `ss -ltnp` does).
//! The kernel side learns owners at listen(); listeners opened before tfo-trace started
//! are found here instead.
use std::{
    collections::HashMap,
    fs,
    os::unix::fs::MetadataExt,
    time::{Duration, Instant},
};

/// TCP_LISTEN in /proc/net/tcp's `st` column.
const ST_LISTEN: &str = "0A";
/// How long an unknown owner stays unknown before /proc is scanned again.
const NEGATIVE_TTL: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    pub comm: String,
}

/// Socket inodes of listeners on `port` in a /proc/net/tcp{,6} text.
pub fn listening_inodes(proc_net_tcp: &str, port: u16) -> Vec<u64> {
    proc_net_tcp
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let local = cols.get(1)?;
            let local_port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            (local_port == port && cols.get(3) == Some(&ST_LISTEN)).then(|| cols.get(9)?.parse().ok())?
        })
        .collect()
}

fn pids() -> impl Iterator<Item = u32> {
    fs::read_dir("/proc").into_iter().flatten().filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
}

fn netns_of_pid(pid: u32) -> Option<u32> {
    Some(fs::metadata(format!("/proc/{pid}/ns/net")).ok()?.ino() as u32)
}

fn owns_socket(pid: u32, inodes: &[u64]) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| {
        fs::read_link(fd.path()).ok().and_then(|target| {
            let t = target.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok()?;
            Some(inodes.contains(&t))
        }) == Some(true)
    })
}

/// Scans /proc once for the owner of a listener on (netns, port).
pub fn find_owner(netns: u32, port: u16) -> Option<Owner> {
    let in_ns: Vec<u32> = pids().filter(|&p| netns_of_pid(p) == Some(netns)).collect();
    let first = *in_ns.first()?;
    let mut inodes = Vec::new();
    for file in ["tcp", "tcp6"] {
        if let Ok(text) = fs::read_to_string(format!("/proc/{first}/net/{file}")) {
            inodes.extend(listening_inodes(&text, port));
        }
    }
    if inodes.is_empty() {
        return None;
    }
    let pid = in_ns.into_iter().find(|&p| owns_socket(p, &inodes))?;
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim().to_string();
    Some(Owner { pid, comm })
}

/// Remembers owners so /proc is scanned once per listener, not once per event.
#[derive(Default)]
pub struct OwnerCache {
    known: HashMap<(u32, u16), Owner>,
    unknown: HashMap<(u32, u16), Instant>,
}

impl OwnerCache {
    pub fn lookup(&mut self, netns: u32, port: u16) -> Option<Owner> {
        let key = (netns, port);
        if let Some(o) = self.known.get(&key) {
            return Some(o.clone());
        }
        if self.unknown.get(&key).is_some_and(|t| t.elapsed() < NEGATIVE_TTL) {
            return None;
        }
        match find_owner(netns, port) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_net_tcp() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 23456 1 0000000000000000 20 4 30 10 -1
   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 34567 1 0000000000000000 100 0 0 10 0";
        assert_eq!(listening_inodes(text, 8080), vec![12345]);
        assert_eq!(listening_inodes(text, 80), vec![34567]);
        assert!(listening_inodes(text, 443).is_empty());
    }

    #[test]
    fn finds_the_owner_of_a_listener_of_ours() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let netns = netns_of_pid(std::process::id()).unwrap();
        let owner = find_owner(netns, port).expect("our own listener");
        assert_eq!(owner.pid, std::process::id());
    }
}
