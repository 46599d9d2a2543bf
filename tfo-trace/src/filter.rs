//! What to trace, as users say it on the command line (`--pid`, `--comm`, `--cgroup`,
//! `--netns`, `--port`, `--daddr`, `--saddr`, `--role`, `--outcome`), checked and turned
//! into the [`Filter`] the kernel programs decide with. Values of one flag OR together;
//! different flags AND together.
use std::{net::IpAddr, os::unix::fs::MetadataExt as _, path::PathBuf};

use clap::Args;
use tfo_trace_common::{Cidr, Filter, Outcome, Role, FAMILY_V4, FAMILY_V6, FILTER_SLOTS, TASK_COMM_LEN};

use crate::{
    events::{
        replay::{RecordedNetnsNames, Select},
        Event,
    },
    kernel::{cgroup, every_netns::exists as netns_exists, netns},
};

#[derive(Args, Debug, Clone, Default)]
pub struct FilterArgs {
    /// Only connections of this process (the client's, or the listener's owner); repeat for more.
    #[arg(long, value_name = "PID", value_parser = parse_pid, help_heading = "Filters (in the kernel; repeat a flag for OR)")]
    pub pid: Vec<u32>,
    /// Only processes with this name (as in /proc/PID/comm, at most 15 characters), or
    /// whose thread that connected or listened has it (a worker's name, as in
    /// /proc/PID/task/TID/comm).
    #[arg(long, value_name = "NAME", value_parser = parse_comm, help_heading = "Filters (in the kernel; repeat a flag for OR)")]
    pub comm: Vec<String>,
    /// Only processes in this cgroup (v2) or below it: a path under the cgroup v2 root, like
    /// /system.slice/nginx.service, or the full path under its mount.
    #[arg(long, value_name = "PATH", value_parser = parse_cgroup, help_heading = "Filters (in the kernel; repeat a flag for OR)")]
    pub cgroup: Vec<PathBuf>,
    /// Only this network namespace: its inode (`stat -L -c %i /proc/PID/ns/net`) or its
    /// `ip netns` name. Traced live, it must exist when tracing starts (one made later
    /// has another inode).
    /// With --from, a name is the one the events were recorded with (`netns_name`), whatever
    /// /run/netns holds now.
    #[arg(long, value_name = "INODE|NAME", value_parser = parse_netns, help_heading = "Filters (in the kernel; repeat a flag for OR)")]
    pub netns: Vec<NetnsArg>,
    /// Only connections to this server port.
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..), help_heading = "Filters (in the kernel; repeat a flag for OR)")]
    pub port: Vec<u16>,
    /// Only connections to a server address in this prefix (`203.0.113.0/24`, `2001:db8::/32`,
    /// or one address). An IPv4 prefix also selects an IPv6 socket's IPv4-mapped addresses
    /// (a dual-stack listener's IPv4 clients), shown as IPv4.
    #[arg(long, value_name = "CIDR", value_parser = parse_cidr, help_heading = "Filters (in the kernel; repeat a flag for OR)")]
    pub daddr: Vec<ipnet::IpNet>,
    /// Only connections from a client address in this prefix.
    #[arg(long, value_name = "CIDR", value_parser = parse_cidr, help_heading = "Filters (in the kernel; repeat a flag for OR)")]
    pub saddr: Vec<ipnet::IpNet>,
    /// Only this end of the connection.
    #[arg(long, value_enum, help_heading = "Filters (in the kernel; repeat a flag for OR)")]
    pub role: Vec<RoleArg>,
    /// Only this outcome (cookie_requested, cookie_sent_no_data: a cookie but no data in the
    /// SYN, accepted, syn_retransmitted, ...: docs/outcomes.md).
    #[arg(long, value_name = "OUTCOME", value_parser = parse_outcome, help_heading = "Filters (in the kernel; repeat a flag for OR)")]
    pub outcome: Vec<Outcome>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleArg {
    Client,
    Server,
}

impl From<RoleArg> for Role {
    fn from(r: RoleArg) -> Role {
        match r {
            RoleArg::Client => Role::Client,
            RoleArg::Server => Role::Server,
        }
    }
}

/// A process id; 0 is the idle task, which makes no connection (and, as a listener's
/// owner, stands for "not known").
fn parse_pid(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("pid 0 is no process: no connection would match".into()),
        Ok(pid) => Ok(pid),
        Err(_) => Err(format!("`{s}` is not a process id")),
    }
}

fn parse_comm(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() >= TASK_COMM_LEN {
        return Err(format!(
            "`{s}`: a process name is 1 to {} bytes (the kernel keeps no more)",
            TASK_COMM_LEN - 1
        ));
    }
    Ok(s.to_string())
}

fn parse_cgroup(s: &str) -> Result<PathBuf, String> {
    cgroup::resolve(s)
}

/// `--netns` as typed: an inode, or an `ip netns` name. A live run resolves a name in
/// /run/netns as it starts ([`FilterArgs::resolve_live`]); a replay matches it with the
/// `netns_name` its events were recorded with ([`EventFilter`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetnsArg {
    Inode(u32),
    Name(String),
}

fn parse_netns(s: &str) -> Result<NetnsArg, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("no namespace has inode 0: nothing would match".into()),
        Ok(inode) => Ok(NetnsArg::Inode(inode)),
        Err(_) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            Err(format!("`{s}`: a namespace inode is at most {} (32 bits)", u32::MAX))
        }
        // A name is a file of /run/netns: one path component.
        Err(_) if s.is_empty() || s.contains('/') || s == "." || s == ".." => {
            Err(format!("`{s}` is neither a namespace inode nor an `ip netns` name"))
        }
        Err(_) => Ok(NetnsArg::Name(s.to_string())),
    }
}

/// The inode of the namespace `ip netns` names `name` now.
fn named_netns_inode(name: &str) -> Result<u32, String> {
    let path = std::path::Path::new(netns::NAMED_NETNS_DIR).join(name);
    std::fs::metadata(&path).map(|m| m.ino() as u32).map_err(|_| {
        format!(
            "--netns {name}: `{name}` is neither a namespace inode nor an `ip netns` name (no {})",
            path.display()
        )
    })
}

/// An address or a prefix, truncated to its network. An IPv4-mapped one (`::ffff:10.0.0.0/104`)
/// is the IPv4 prefix it is (`10.0.0.0/8`): events show such addresses as IPv4.
fn parse_cidr(s: &str) -> Result<ipnet::IpNet, String> {
    let net = s
        .parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(ipnet::IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| format!("`{s}` is not an address or a prefix like 203.0.113.0/24"))?;
    Ok(match net {
        ipnet::IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.network().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map_or(net, ipnet::IpNet::V4),
            None => net,
        },
        _ => net,
    })
}

fn parse_outcome(s: &str) -> Result<Outcome, String> {
    Outcome::ALL.into_iter().find(|o| o.name() == s).ok_or_else(|| {
        let names: Vec<&str> = Outcome::ALL.iter().map(|o| o.name()).collect();
        format!("`{s}` is not an outcome ({})", names.join(", "))
    })
}

impl FilterArgs {
    /// The first flag given more often than the kernel has room for, as a usage error.
    pub(crate) fn too_many(&self) -> Option<String> {
        let counts = [
            ("--pid", self.pid.len()),
            ("--comm", self.comm.len()),
            ("--cgroup", self.cgroup.len()),
            ("--netns", self.netns.len()),
            ("--port", self.port.len()),
            ("--daddr", self.daddr.len()),
            ("--saddr", self.saddr.len()),
        ];
        counts
            .iter()
            .find(|(_, n)| *n > FILTER_SLOTS)
            .map(|(flag, n)| format!("{flag} given {n} times: at most {FILTER_SLOTS}"))
    }

    /// For a live run: each `--netns` name as the inode /run/netns gives it now; a name it
    /// does not have is a usage error (the message).
    pub(crate) fn resolve_live(&mut self) -> Result<(), String> {
        for n in &mut self.netns {
            if let NetnsArg::Name(name) = n {
                *n = NetnsArg::Inode(named_netns_inode(name)?);
            }
        }
        Ok(())
    }

    /// The `--netns` inodes (a live run's names among them, once resolved).
    pub(crate) fn netns_inodes(&self) -> Vec<u32> {
        self.netns
            .iter()
            .filter_map(|n| match n {
                NetnsArg::Inode(i) => Some(*i),
                NetnsArg::Name(_) => None,
            })
            .collect()
    }

    /// The `--netns` names a replay matches with the recorded `netns_name`.
    fn netns_names(&self) -> Vec<String> {
        self.netns
            .iter()
            .filter_map(|n| match n {
                NetnsArg::Name(name) => Some(name.clone()),
                NetnsArg::Inode(_) => None,
            })
            .collect()
    }

    /// The first `--netns` inode no namespace has now, as a usage error: a live run would
    /// trace nothing, silently. (Namespaces come and go: one that goes later ends nothing.)
    /// Where part of /proc could not be looked at, nothing is refused.
    pub(crate) fn netns_gone(&self) -> Option<String> {
        let inodes = self.netns_inodes();
        let gone = inodes.iter().find(|&&inode| netns_exists(inode) == Some(false))?;
        Some(format!(
            "--netns {gone}: no network namespace has inode {gone} now (a traced namespace must \
             exist when tracing starts)"
        ))
    }

    pub fn is_empty(&self) -> bool {
        self.kernel_filter() == Filter::none()
    }

    /// The filter the kernel programs decide with (cgroups go in a map: see `cgroups`);
    /// `--netns` names count once [`FilterArgs::resolve_live`] made them inodes.
    pub(crate) fn kernel_filter(&self) -> Filter {
        let mut f = Filter::none();
        for (slot, pid) in f.pids.iter_mut().zip(&self.pid) {
            *slot = *pid;
        }
        for (slot, comm) in f.comms.iter_mut().zip(&self.comm) {
            slot[..comm.len()].copy_from_slice(comm.as_bytes());
        }
        let netns = self.netns_inodes();
        for (slot, n) in f.netns.iter_mut().zip(&netns) {
            *slot = *n;
        }
        for (slot, p) in f.ports.iter_mut().zip(&self.port) {
            *slot = *p;
        }
        for (slot, n) in f.daddrs.iter_mut().zip(&self.daddr) {
            *slot = cidr(n);
        }
        for (slot, n) in f.saddrs.iter_mut().zip(&self.saddr) {
            *slot = cidr(n);
        }
        let n = |len: usize| len.min(FILTER_SLOTS) as u8;
        f.n_pids = n(self.pid.len());
        f.n_comms = n(self.comm.len());
        f.n_cgroups = n(self.cgroup.len());
        f.n_netns = n(netns.len());
        f.n_ports = n(self.port.len());
        f.n_daddrs = n(self.daddr.len());
        f.n_saddrs = n(self.saddr.len());
        f.roles = self.role.iter().fold(0, |m, r| m | 1 << Role::from(*r) as u8);
        f.outcomes = self.outcome.iter().fold(0, |m, o| m | 1 << *o as u8);
        f
    }

    /// The same selection, on recorded events (`--netns` names as recorded).
    pub(crate) fn event_filter(&self) -> EventFilter {
        EventFilter {
            netns_names: self.netns_names(),
            ..EventFilter::new(self.kernel_filter(), self.cgroups())
        }
    }

    /// The cgroup directories of `--cgroup`, for the kernel's cgroup array.
    pub fn cgroups(&self) -> &[PathBuf] {
        &self.cgroup[..self.cgroup.len().min(FILTER_SLOTS)]
    }
}

/// The filter flags as a replay applies them (`report --from`, `top --from`): the
/// selection the kernel programs make live (tfo-trace-ebpf/src/filter.rs), on recorded
/// events, from the same [`Filter`]. A process filter applies to the process that
/// connected (client) or listens (server), as recorded; the server's port and address are
/// where the connection goes, the client's address where it comes from.
#[derive(Clone, Debug)]
pub struct EventFilter {
    filter: Filter,
    /// `--cgroup`, as events name cgroups: the path below the v2 root.
    cgroups: Vec<String>,
    /// `--netns` names, as events were recorded with them (`netns_name`): besides the
    /// inodes of `filter`.
    netns_names: Vec<String>,
}

impl EventFilter {
    /// `filter` and the cgroup directories of `--cgroup` (as [`FilterArgs::cgroups`]).
    pub fn new(filter: Filter, cgroup_dirs: &[PathBuf]) -> EventFilter {
        let root = cgroup::v2_mount();
        let cgroups = cgroup_dirs
            .iter()
            .map(|d| {
                let below = root.as_deref().and_then(|r| d.strip_prefix(r).ok()).unwrap_or(d);
                format!("/{}", below.to_string_lossy().trim_matches('/'))
            })
            .collect();
        EventFilter { filter, cgroups, netns_names: Vec::new() }
    }

    /// Whether no flag narrows anything.
    #[cfg(test)]
    pub(crate) fn selects_all(&self) -> bool {
        self.filter == Filter::none() && self.netns_names.is_empty()
    }

    /// The first `--netns` name no event of a replay was recorded with (`recorded`: the
    /// names they were), as a usage error naming those they were: a name from today's
    /// /run/netns, or mistyped, would select nothing.
    pub(crate) fn netns_name_unrecorded(&self, recorded: &RecordedNetnsNames) -> Option<String> {
        let missing = self.netns_names.iter().find(|n| !recorded.contains(n))?;
        if recorded.is_full() {
            return None; // too many names to say this one is not among them
        }
        let names = recorded.names();
        let has = if names.is_empty() {
            "it names no namespace".to_string()
        } else {
            format!("the names it has: {}", names.join(", "))
        };
        Some(format!("--netns {missing}: no event of the recording is in a namespace of that name ({has})"))
    }

    /// `--pid`, `--comm`, `--cgroup`: whether the process (its name, its thread's where
    /// another, its cgroup path below the v2 root, where known) is one of those asked for.
    /// Also what the loader tells the kernel about listeners opened before it attached.
    pub(crate) fn process_selected(
        &self,
        pid: u32,
        comm: &str,
        thread: Option<&str>,
        cgroup: Option<&str>,
    ) -> bool {
        let f = &self.filter;
        let pid_listed = f.n_pids == 0 || f.pids[..f.n_pids as usize].contains(&pid);
        let comm_listed = f.n_comms == 0
            || f.comms[..f.n_comms as usize].iter().any(|c| {
                let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
                &c[..end] == comm.as_bytes() || thread.is_some_and(|t| &c[..end] == t.as_bytes())
            });
        let in_cgroup = self.cgroups.is_empty()
            || cgroup.is_some_and(|path| {
                self.cgroups.iter().any(|c| {
                    c == "/"
                        || path == c
                        || path.strip_prefix(c.as_str()).is_some_and(|rest| rest.starts_with('/'))
                })
            });
        pid_listed && comm_listed && in_cgroup
    }

    /// [`Self::selects`] as a replay takes it.
    pub(crate) fn into_select(self) -> Select {
        Box::new(move |e| self.selects(e))
    }

    /// Whether the kernel would have let `e` through.
    pub(crate) fn selects(&self, e: &Event) -> bool {
        let f = &self.filter;
        let (server, server_port, client) = match e.role {
            Role::Client => (e.daddr, e.dport, e.saddr),
            Role::Server => (e.saddr, e.sport, e.daddr),
        };
        let port_listed = f.n_ports == 0 || f.ports[..f.n_ports as usize].contains(&server_port);
        let in_prefixes =
            |n: u8, list: &[Cidr], ip: IpAddr| n == 0 || list[..n as usize].iter().any(|c| in_prefix(c, ip));
        let by_name = |name: &Option<std::sync::Arc<str>>| {
            name.as_deref().is_some_and(|n| self.netns_names.iter().any(|m| m == n))
        };
        let netns_listed = (f.n_netns == 0 && self.netns_names.is_empty())
            || f.netns[..f.n_netns as usize].contains(&e.netns)
            || by_name(&e.netns_name);
        self.process_selected(e.pid, &e.comm, e.thread.as_deref(), e.cgroup.as_deref())
            && netns_listed
            && port_listed
            && in_prefixes(f.n_daddrs, &f.daddrs, server)
            && in_prefixes(f.n_saddrs, &f.saddrs, client)
            && (f.roles == 0 || f.roles & (1 << e.role as u8) != 0)
            && (f.outcomes == 0 || f.outcomes & (1 << e.outcome as u8) != 0)
    }
}

/// Whether `ip` is in the prefix `c` (of its own family only, as the kernel compares).
fn in_prefix(c: &Cidr, ip: IpAddr) -> bool {
    let (family, bytes, max) = match ip {
        IpAddr::V4(a) => (FAMILY_V4, a.octets().to_vec(), 32),
        IpAddr::V6(a) => (FAMILY_V6, a.octets().to_vec(), 128),
    };
    if c.family != family {
        return false;
    }
    let bits = usize::from(c.bits).min(max);
    let whole = bits / 8;
    let mask = (0xffu16 << (8 - bits % 8)) as u8;
    bytes[..whole] == c.addr[..whole] && (bits % 8 == 0 || bytes[whole] & mask == c.addr[whole] & mask)
}

/// A prefix as the kernel compares it: the address as events hold it (IPv4 in the first
/// four bytes), its family, the prefix length.
fn cidr(n: &ipnet::IpNet) -> Cidr {
    let mut c = Cidr { bits: n.prefix_len(), ..Cidr::default() };
    match n.network() {
        IpAddr::V4(a) => {
            c.family = FAMILY_V4;
            c.addr[..4].copy_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            c.family = FAMILY_V6;
            c.addr = a.octets();
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_become_the_kernel_filter() {
        let args = FilterArgs {
            pid: vec![10, 20],
            comm: vec!["curl".into()],
            port: vec![443],
            daddr: vec![parse_cidr("203.0.113.7/24").unwrap()],
            saddr: vec![parse_cidr("2001:db8::1").unwrap()],
            role: vec![RoleArg::Client],
            outcome: vec![Outcome::SynRetransmitted, Outcome::DataNotAcked],
            ..FilterArgs::default()
        };
        let f = args.kernel_filter();
        assert_eq!((f.n_pids, f.pids[..2].to_vec()), (2, vec![10, 20]));
        assert_eq!(&f.comms[0][..5], b"curl\0");
        assert_eq!((f.n_ports, f.ports[0]), (1, 443));
        // Masked to its prefix: the network, as the kernel compares it.
        assert_eq!(
            (f.daddrs[0].family, f.daddrs[0].bits, &f.daddrs[0].addr[..4]),
            (4, 24, &[203, 0, 113, 0][..])
        );
        assert_eq!((f.saddrs[0].family, f.saddrs[0].bits), (6, 128));
        assert_eq!(f.roles, 1 << 1);
        assert_eq!(f.outcomes, (1 << 4) | (1 << 3));
        assert!(FilterArgs::default().is_empty());
        assert!(!args.is_empty());
    }

    #[test]
    fn recorded_events_are_selected_as_the_kernel_selects() {
        use crate::events::sample_event;
        let client = Event {
            saddr: "198.18.0.1".parse().unwrap(),
            daddr: "203.0.113.7".parse().unwrap(),
            dport: 443,
            pid: 10,
            comm: "curl".into(),
            cgroup: Some("/system.slice/a.service/sub".into()),
            ..sample_event(Role::Client, Outcome::Accepted)
        };
        let server =
            Event { saddr: client.daddr, sport: 443, daddr: client.saddr, dport: 40000, ..client.clone() };
        let server = Event { role: Role::Server, ..server };
        let sel = |args: FilterArgs, e: &Event| EventFilter::new(args.kernel_filter(), &[]).selects(e);
        let none = FilterArgs::default();
        assert!(none.event_filter().selects_all() && sel(none, &client));
        let net = |s: &str| vec![parse_cidr(s).unwrap()];
        for e in [&client, &server] {
            // The server's address and port, the client's address, whichever end reports.
            assert!(sel(FilterArgs { daddr: net("203.0.113.0/24"), ..Default::default() }, e));
            assert!(sel(FilterArgs { saddr: net("198.18.0.1"), port: vec![443], ..Default::default() }, e));
            assert!(!sel(FilterArgs { daddr: net("198.18.0.0/15"), ..Default::default() }, e));
            assert!(!sel(FilterArgs { daddr: net("2001:db8::/32"), ..Default::default() }, e), "family");
            assert!(!sel(FilterArgs { port: vec![80], ..Default::default() }, e));
            assert!(sel(FilterArgs { pid: vec![9, 10], comm: vec!["curl".into()], ..Default::default() }, e));
            assert!(!sel(FilterArgs { comm: vec!["cur".into()], ..Default::default() }, e));
            assert!(!sel(FilterArgs { outcome: vec![Outcome::DataNotAcked], ..Default::default() }, e));
        }
        assert!(!sel(FilterArgs { role: vec![RoleArg::Server], ..Default::default() }, &client));
        assert!(
            sel(FilterArgs { daddr: net("203.0.113.6/31"), ..Default::default() }, &client),
            "/31 by bits"
        );
        assert!(!sel(FilterArgs { daddr: net("203.0.113.8/30"), ..Default::default() }, &client));
        let cg = |path: &str| EventFilter {
            filter: Filter { n_cgroups: 1, ..Filter::none() },
            cgroups: vec![path.into()],
            netns_names: Vec::new(),
        };
        assert!(cg("/system.slice/a.service").selects(&client), "a cgroup and below it");
        assert!(!cg("/system.slice/a.serv").selects(&client), "a whole path component");
        assert!(!cg("/system.slice").selects(&Event { cgroup: None, ..client.clone() }));
        // --netns in a replay: the recorded name, or the inode; either of them (OR).
        let named = Event { netns: 7, netns_name: Some("lab-srv".into()), ..server.clone() };
        let ns = |given: &[&str]| FilterArgs {
            netns: given.iter().map(|g| parse_netns(g).unwrap()).collect(),
            ..Default::default()
        };
        assert!(ns(&["lab-srv"]).event_filter().selects(&named));
        assert!(!ns(&["lab-cli"]).event_filter().selects(&named));
        assert!(ns(&["lab-cli", "7"]).event_filter().selects(&named));
        assert!(!ns(&["lab-srv"]).event_filter().selects(&client), "a name selects only what has it");
        let mut recorded = RecordedNetnsNames::default();
        recorded.add(named.netns_name.as_ref());
        assert_eq!(ns(&["lab-srv", "7"]).event_filter().netns_name_unrecorded(&recorded), None);
        let msg = ns(&["lab-cli"]).event_filter().netns_name_unrecorded(&recorded).unwrap();
        assert!(msg.starts_with("--netns lab-cli:") && msg.ends_with("(the names it has: lab-srv)"), "{msg}");
    }

    #[test]
    fn bad_values_say_why() {
        assert!(parse_comm("a-name-far-too-long").unwrap_err().contains("15"));
        assert!(parse_cidr("10.0.0.0/33").is_err());
        // IPv4-mapped: the IPv4 prefix it is, as events show such addresses.
        assert_eq!(parse_cidr("::ffff:10.77.0.0/120"), Ok("10.77.0.0/24".parse().unwrap()));
        assert_eq!(parse_cidr("::ffff:10.77.0.2"), Ok("10.77.0.2/32".parse().unwrap()));
        assert_eq!(parse_cidr("::ffff:0:0/95"), Ok("::fffe:0:0/95".parse().unwrap()), "wider: IPv6");
        assert!(parse_cidr("example.com").is_err());
        assert!(parse_outcome("accept").unwrap_err().contains("accepted"));
        let mut args = FilterArgs {
            netns: vec![parse_netns("no-such-namespace-here").unwrap()],
            ..FilterArgs::default()
        };
        assert!(args.resolve_live().unwrap_err().contains("no /run/netns/no-such-namespace-here"));
        assert!(parse_netns("../etc").is_err() && parse_netns("..").is_err());
        assert_eq!(parse_netns("4026531840"), Ok(NetnsArg::Inode(4026531840)));
        assert!(parse_netns("0").is_err());
        assert!(parse_netns("4294967296").unwrap_err().contains("at most 4294967295"));
        assert!(parse_pid("0").is_err() && parse_pid("x").is_err());
        assert_eq!(parse_pid("1"), Ok(1));
        assert!(parse_comm("").is_err());
        let many = FilterArgs { port: (1..=9).collect(), ..FilterArgs::default() };
        assert_eq!(many.too_many().as_deref(), Some("--port given 9 times: at most 8"));
    }
}
