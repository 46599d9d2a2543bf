//! A TCP Fast Open lab on one machine: two network namespaces (client, server) joined by
//! a veth pair, per-namespace `net.ipv4.tcp_fastopen`, an optional nftables "middlebox"
//! that drops SYNs carrying data, and TFO peers run as child processes of the `tfo-trace`
//! binary (`lab-server`, `lab-client`) so the tracer sees real pids. `load` (the bench's
//! connection generator) and `soak` come only with the `fixtures` feature.
//!
//! Addresses (N = per-lab number, differs between labs of one process):
//! client 198.18.N.1/24 and fd00:7f0:N::1/64; server 198.18.N.2 and fd00:7f0:N::2, plus
//! 198.18.N.3 and fd00:7f0:N::3 when `server_addrs == 2`. Traffic never leaves the two
//! namespaces: they have no other interface and no default route.
//!
//! Cleanup: `Drop for Lab` kills the processes it started (by pid), deletes the nft table
//! and both namespaces, also after a failure half-way through [`Lab::create`]. Every lab
//! is also in a process-wide registry: a CLI calls [`cleanup_all`] from its Ctrl-C handler
//! (a normal thread or task, e.g. `tokio::signal::ctrl_c()`, not a raw signal handler:
//! it takes a lock and runs `ip`). [`sweep_stale`] removes namespaces left by runs that
//! died (their embedded pid is gone).
mod cmd;
pub mod dns;
#[cfg(feature = "fixtures")]
pub mod load;
#[cfg(feature = "fixtures")]
pub mod soak;
mod sock;
pub mod traffic;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};

use crate::kernel::netstat::Netstat;
pub use cmd::join_cgroup_at_spawn;
pub use traffic::{ClientArgs, ClientMode, ConnResult, ServerArgs};

/// The arguments of one client run; the same struct the `lab-client` subcommand takes.
pub type ClientRunSpec = ClientArgs;

/// Every namespace this module creates is named `<NS_PREFIX>-<pid>-<lab number>-{cli,srv}`.
pub const NS_PREFIX: &str = "tfolab";
/// The nftables table (family inet) that holds the middlebox rules in the server namespace.
pub const NFT_TABLE: &str = "tfolab";
/// Interface names inside the namespaces. The pair is created directly in the two fresh
/// namespaces, so fixed names never clash with the host's or another lab's.
const VETH_CLIENT: &str = "tfo-cli";
const VETH_SERVER: &str = "tfo-srv";
/// How long `start_server` waits for the child's `ready` line.
const SERVER_READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Extra time granted to a client run beyond its own worst case.
const CLIENT_WAIT_SLACK: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    Client,
    Server,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabConfig {
    /// `net.ipv4.tcp_fastopen` in the client namespace (0x1 = client enabled).
    pub client_fastopen: u32,
    /// `net.ipv4.tcp_fastopen` in the server namespace (0x2 = server enabled).
    pub server_fastopen: u32,
    /// 1 or 2 server address pairs (v4 + v6): the demo uses one clean destination and one
    /// behind the middlebox.
    pub server_addrs: usize,
}

impl Default for LabConfig {
    fn default() -> Self {
        LabConfig { client_fastopen: 0x1, server_fastopen: 0x2, server_addrs: 1 }
    }
}

/// A live lab; dropping it tears everything down.
#[derive(Debug)]
pub struct Lab {
    id: u64,
    n: u8,
    client_ns: String,
    server_ns: String,
    cfg: LabConfig,
}

// ---------------------------------------------------------------------------------------
// Process-wide registry of what every lab created, so that cleanup_all() (Ctrl-C) and
// Drop both know exactly which namespaces and pids are ours.

#[derive(Debug, Default)]
struct Owned {
    /// Only namespaces whose `ip netns add` succeeded: never delete someone else's.
    namespaces: Vec<String>,
    /// Pids of children not yet reaped. A child is removed under the lock at the moment it
    /// is reaped, so a pid in here can never have been reused by another process.
    pids: BTreeSet<u32>,
    /// The server namespace got the nft table.
    nft_in: Option<String>,
}

static REGISTRY: Mutex<BTreeMap<u64, Owned>> = Mutex::new(BTreeMap::new());
static NEXT_LAB: AtomicU64 = AtomicU64::new(0);
/// Serializes `ip netns add/del` within the process: concurrent first use of /run/netns
/// (making it a shared mount) is racy in iproute2.
static NETNS_LOCK: Mutex<()> = Mutex::new(());
static SWEEP_ONCE: Once = Once::new();

/// Locks without ever panicking: a poisoned registry is still the best record we have.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Kills every process and deletes every namespace any lab of this process created.
/// For a Ctrl-C handler; labs dropped afterwards find nothing left to do.
pub fn cleanup_all() {
    let all = std::mem::take(&mut *lock(&REGISTRY));
    for (_, owned) in all {
        teardown(owned);
    }
}

fn teardown(owned: Owned) {
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

fn delete_netns(name: &str) -> Result<()> {
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
pub fn sweep_stale(prefix: &str) -> Result<Vec<String>> {
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
fn stale_owner(prefix: &str, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?.strip_prefix('-')?;
    let mut parts = rest.split('-');
    let pid = parts.next()?.parse::<u32>().ok()?;
    parts.next()?.parse::<u64>().ok()?;
    let side = parts.next()?;
    (parts.next().is_none() && (side == "cli" || side == "srv")).then_some(pid)
}

fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks existence.
    let rc = unsafe { libc::kill(p, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

// ---------------------------------------------------------------------------------------

impl Lab {
    /// Builds the two namespaces, the veth pair, the addresses and the TFO sysctls.
    /// On error everything created so far is removed again.
    pub fn create(cfg: LabConfig) -> Result<Lab> {
        if !(1..=2).contains(&cfg.server_addrs) {
            bail!("server_addrs must be 1 or 2, not {}", cfg.server_addrs);
        }
        SWEEP_ONCE.call_once(|| match sweep_stale(NS_PREFIX) {
            Ok(v) if !v.is_empty() => log::info!("removed stale lab namespaces: {v:?}"),
            Ok(_) => {}
            Err(e) => log::warn!("sweeping stale lab namespaces: {e:#}"),
        });
        let id = NEXT_LAB.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let lab = Lab {
            id,
            n: (id % 256) as u8,
            client_ns: format!("{NS_PREFIX}-{pid}-{id}-cli"),
            server_ns: format!("{NS_PREFIX}-{pid}-{id}-srv"),
            cfg,
        };
        lock(&REGISTRY).insert(id, Owned::default());
        // From here on an early return drops `lab`, whose Drop undoes what was done.
        lab.setup().with_context(|| format!("creating lab {} / {}", lab.client_ns, lab.server_ns))?;
        Ok(lab)
    }

    fn setup(&self) -> Result<()> {
        for ns in [&self.client_ns, &self.server_ns] {
            let _g = lock(&NETNS_LOCK);
            cmd::run(Command::new("ip").args(["netns", "add", ns]))?;
            if let Some(o) = lock(&REGISTRY).get_mut(&self.id) {
                o.namespaces.push(ns.clone());
            }
        }
        // Create each end directly in its namespace: nothing ever appears in the host's.
        let veth = ["link", "add", VETH_CLIENT, "type", "veth", "peer", "name", VETH_SERVER, "netns"];
        cmd::run(cmd::ip_in(&self.client_ns).args(veth).arg(&self.server_ns))?;

        let client = [self.client_addr(false), self.client_addr(true)].to_vec();
        let server = [self.server_addrs(false), self.server_addrs(true)].concat();
        let ends = [(&self.client_ns, VETH_CLIENT, client), (&self.server_ns, VETH_SERVER, server)];
        for (ns, dev, addrs) in &ends {
            for a in addrs {
                let cidr = format!("{a}/{}", if a.is_ipv4() { 24 } else { 64 });
                let mut c = cmd::ip_in(ns);
                c.args(["addr", "add", &cidr, "dev", dev]);
                if a.is_ipv6() {
                    c.arg("nodad"); // usable at once, no 1-2 s duplicate address detection
                }
                cmd::run(&mut c)?;
            }
            cmd::run(cmd::ip_in(ns).args(["link", "set", "lo", "up"]))?;
            cmd::run(cmd::ip_in(ns).args(["link", "set", dev, "up"]))?;
        }
        for (ns, dev, _) in &ends {
            wait_oper_up(ns, dev)?;
        }
        self.set_sysctl(Side::Client, "net.ipv4.tcp_fastopen", &self.cfg.client_fastopen.to_string())?;
        self.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen", &self.cfg.server_fastopen.to_string())?;
        Ok(())
    }

    pub fn config(&self) -> &LabConfig {
        &self.cfg
    }

    /// The namespace name of `side`.
    pub fn netns(&self, side: Side) -> &str {
        match side {
            Side::Client => &self.client_ns,
            Side::Server => &self.server_ns,
        }
    }

    /// A side's namespace and its end of the veth pair.
    fn veth(&self, side: Side) -> (&str, &'static str) {
        let dev = match side {
            Side::Client => VETH_CLIENT,
            Side::Server => VETH_SERVER,
        };
        (self.netns(side), dev)
    }

    pub fn client_addr(&self, v6: bool) -> IpAddr {
        self.host_addr(1, v6)
    }

    /// Server address `index` (0 or, with `server_addrs == 2`, 1).
    pub fn server_addr(&self, index: usize, v6: bool) -> Result<IpAddr> {
        if index >= self.cfg.server_addrs {
            bail!("server address {index} does not exist (server_addrs = {})", self.cfg.server_addrs);
        }
        Ok(self.host_addr(2 + index as u8, v6))
    }

    /// All server addresses of one family.
    pub fn server_addrs(&self, v6: bool) -> Vec<IpAddr> {
        (0..self.cfg.server_addrs).map(|i| self.host_addr(2 + i as u8, v6)).collect()
    }

    fn host_addr(&self, host: u8, v6: bool) -> IpAddr {
        if v6 {
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0x07f0, u16::from(self.n), 0, 0, 0, 0, u16::from(host)))
        } else {
            IpAddr::V4(Ipv4Addr::new(198, 18, self.n, host))
        }
    }

    /// `sysctl -w key=value` inside `side`'s namespace (e.g. turn server TFO off after
    /// cookies were issued).
    pub fn set_sysctl(&self, side: Side, key: &str, value: &str) -> Result<()> {
        cmd::run(cmd::in_netns(self.netns(side), "sysctl").args(["-w", &format!("{key}={value}")])).map(drop)
    }

    /// `sysctl -n key` inside `side`'s namespace.
    pub fn sysctl(&self, side: Side, key: &str) -> Result<String> {
        Ok(cmd::run(cmd::in_netns(self.netns(side), "sysctl").args(["-n", key]))?.trim().to_string())
    }

    /// The kernel's counters (`/proc/net/netstat` + `/proc/net/snmp`) of `side`'s namespace.
    pub fn netstat(&self, side: Side) -> Result<Netstat> {
        let text =
            cmd::run(cmd::in_netns(self.netns(side), "cat").args(["/proc/net/netstat", "/proc/net/snmp"]))?;
        Netstat::parse(&text).with_context(|| format!("parsing counters of {}", self.netns(side)))
    }

    /// How many TCP sockets of `side`'s namespace are in `state`, as `ss` names states
    /// (`syn-recv`, `established`, ...): the kernel's own list.
    pub fn sockets_in_state(&self, side: Side, state: &str) -> Result<usize> {
        let text = cmd::run(cmd::in_netns(self.netns(side), "ss").args(["-Htn", "state", state]))?;
        Ok(text.lines().filter(|l| !l.trim().is_empty()).count())
    }

    /// `ip tcp_metrics show` in `side`'s namespace: cached cookies (fo_cookie) and
    /// SYN-data losses (fo_syn_drops) per destination.
    pub fn tcp_metrics(&self, side: Side) -> Result<String> {
        cmd::run(cmd::ip_in(self.netns(side)).args(["tcp_metrics", "show"]))
    }

    /// Forgets every cached cookie and loss record in `side`'s namespace.
    pub fn flush_tcp_metrics(&self, side: Side) -> Result<()> {
        cmd::run(cmd::ip_in(self.netns(side)).args(["tcp_metrics", "flush", "all"])).map(drop)
    }

    /// The middlebox: in the server namespace, drop TCP SYNs (SYN without ACK) that carry
    /// data, optionally only those to `dst`. A SYN with a TFO cookie (8 bytes) and no data
    /// is 72 bytes of IPv4 (total length) and 52 bytes of IPv6 payload, and passes;
    /// anything longer carries data. Can be called again to add more destinations.
    pub fn middlebox_drop_syn_data(&self, dst: Option<IpAddr>) -> Result<()> {
        self.drop_syn_data(dst, None)
    }

    /// The middlebox dropping one SYN-data in every `k` (the first, then every k-th after
    /// it; an nft `numgen` counter per address family): a path that fails now and then.
    pub fn middlebox_drop_syn_data_one_in(&self, k: u32) -> Result<()> {
        self.drop_syn_data(None, Some(k.max(1)))
    }

    fn drop_syn_data(&self, dst: Option<IpAddr>, one_in: Option<u32>) -> Result<()> {
        self.ensure_nft_table()?;
        let syn = "tcp flags & (syn | ack) == syn";
        // Counted only for the packets the rule's earlier matches let through: SYN-data.
        let every = one_in.map(|k| format!("numgen inc mod {k} == 0 ")).unwrap_or_default();
        let mut rules = Vec::new();
        if !matches!(dst, Some(IpAddr::V6(_))) {
            let d = dst.map(|a| format!("ip daddr {a} ")).unwrap_or_default();
            rules.push(format!("{d}{syn} ip length > 72 {every}counter drop"));
        }
        if !matches!(dst, Some(IpAddr::V4(_))) {
            let d = dst.map(|a| format!("ip6 daddr {a} ")).unwrap_or_default();
            rules.push(format!("{d}{syn} ip6 length > 52 {every}counter drop"));
        }
        for r in rules {
            self.nft(&["add", "rule", "inet", NFT_TABLE, "input", &r])?;
        }
        Ok(())
    }

    /// Starts tcpdump on one side's veth for SYNs and SYN-ACKs (IPv4 and IPv6), and waits
    /// until it listens.
    pub fn capture_syns(&self, side: Side) -> Result<SynCapture> {
        // Every segment with SYN set: SYNs and SYN-ACKs (the filter took SYNs only before,
        // so no SYN-ACK was ever seen, whatever `WireSyn::syn_ack` said).
        let filter = "(ip and tcp[tcpflags] & tcp-syn != 0) or (ip6 and ip6[53] & 0x02 == 0x02)";
        Ok(SynCapture { tcpdump: self.tcpdump(side, &["-tt"], filter)? })
    }

    /// Starts tcpdump on one side's veth (`args` before the filter), collecting what it
    /// prints, and waits until it listens.
    fn tcpdump(&self, side: Side, args: &[&str], filter: &str) -> Result<Tcpdump> {
        let (ns, dev) = self.veth(side);
        let mut c = cmd::in_netns(ns, "tcpdump");
        // -Z root: stay root rather than switch to a `tcpdump` user a minimal system (the
        // test VMs) may not have.
        // --immediate-mode: hand each packet over at once (no buffering until SIGINT).
        c.args(["-i", dev, "-nn", "-l", "--immediate-mode", "-Z", "root"]).args(args).arg(filter);
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut proc =
            Proc::spawn(self.id, &mut c).context("starting tcpdump (cargo xtask setup installs it)")?;
        let stdout = proc.child.stdout.take().map(|o| cmd::collect(o, 16 << 20));
        let stderr = proc.child.stderr.take().ok_or_else(|| anyhow!("tcpdump: no stderr pipe"))?;
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                let _ = tx.send(l);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut said = Vec::new();
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) if l.contains("listening on") => return Ok(Tcpdump { proc, stdout }),
                Ok(l) => said.push(l),
                Err(_) => bail!("tcpdump did not start listening on {dev}: {}", said.join(" / ")),
            }
        }
    }

    /// Delays every packet leaving one side's veth by `delay` (netem): a path with a real
    /// round trip. Fails where the kernel has no netem (CONFIG_NET_SCH_NETEM off, as on
    /// some hosts; the test VMs load sch_netem): [`is_no_netem`] tells that error apart.
    pub fn delay_egress(&self, side: Side, delay: Duration) -> Result<()> {
        let (ns, dev) = self.veth(side);
        let us = format!("{}us", delay.as_micros());
        cmd::run(
            cmd::in_netns(ns, "tc").args(["qdisc", "replace", "dev", dev, "root", "netem", "delay", &us]),
        )
        .with_context(|| format!("netem delay {us} on {dev}"))?;
        Ok(())
    }

    /// Undoes [`Lab::client_drop_synack`].
    pub fn client_allow_synack(&self) -> Result<()> {
        cmd::run(cmd::in_netns(&self.client_ns, "nft").args(["delete", "table", "inet", NFT_TABLE]))?;
        Ok(())
    }

    /// A middlebox that drops every SYN carrying a TFO option (kind 34): cookie requests,
    /// cookies and SYN-data alike; the plain SYN the client falls back to passes.
    pub fn middlebox_drop_tfo_option(&self) -> Result<()> {
        self.ensure_nft_table()?;
        let rule = "tcp flags & (syn | ack) == syn tcp option fastopen exists counter drop";
        self.nft(&["add", "rule", "inet", NFT_TABLE, "input", rule])?;
        Ok(())
    }

    /// A middlebox that drops every SYN (with or without TFO): connections never complete.
    pub fn middlebox_drop_all_syns(&self) -> Result<()> {
        self.ensure_nft_table()?;
        self.nft(&[
            "add",
            "rule",
            "inet",
            NFT_TABLE,
            "input",
            "tcp flags & (syn | ack) == syn counter drop",
        ])?;
        Ok(())
    }

    /// A middlebox that drops every segment with ACK and without SYN arriving at the server
    /// (the client's handshake ACK, its data and its FIN): a TFO child made from SYN-data
    /// stays in SYN_RECV and resends its SYN-ACK (tcp_fastopen_synack_timer) until the rule
    /// goes ([`Lab::middlebox_clear`]) and an ACK gets through.
    pub fn middlebox_drop_acks(&self) -> Result<()> {
        self.ensure_nft_table()?;
        let rule = "tcp flags & (syn | ack) == ack counter drop";
        self.nft(&["add", "rule", "inet", NFT_TABLE, "input", rule])?;
        Ok(())
    }

    /// Drops every SYN-ACK arriving in the client namespace, so handshakes stay unfinished
    /// (RFC 7413 section 5.1). The table dies with the namespace.
    pub fn client_drop_synack(&self) -> Result<()> {
        let nft = |args: &[&str]| cmd::run(cmd::in_netns(&self.client_ns, "nft").args(args));
        nft(&["add", "table", "inet", NFT_TABLE])?;
        nft(&[
            "add",
            "chain",
            "inet",
            NFT_TABLE,
            "input",
            "{ type filter hook input priority 0; policy accept; }",
        ])?;
        nft(&[
            "add",
            "rule",
            "inet",
            NFT_TABLE,
            "input",
            "tcp flags & (syn | ack) == syn | ack counter drop",
        ])?;
        Ok(())
    }

    /// Listeners behind one address and port: new connections to `port` in the server
    /// namespace go to the ports of `to` in turn (nft `redirect to numgen inc mod N map` in
    /// a nat prerouting chain), as a load balancer spreads them over its servers.
    pub fn server_spread_port(&self, port: u16, to: &[u16]) -> Result<()> {
        self.ensure_nft_table()?;
        let chain = "{ type nat hook prerouting priority -100; policy accept; }";
        self.nft(&["add", "chain", "inet", NFT_TABLE, "prerouting", chain])?;
        let rule =
            format!("tcp dport {port} redirect to numgen inc mod {} map {{ {} }}", to.len(), turns(to));
        self.nft(&["add", "rule", "inet", NFT_TABLE, "prerouting", &rule]).map(drop)
    }

    /// An IPv4 address a NAT in front of the client can give it ([`Lab::client_snat`]).
    pub fn client_nat_addr(&self, index: u8) -> IpAddr {
        self.host_addr(10 + index, false)
    }

    /// A NAT in front of the client: its IPv4 connections leave with the source address
    /// `to[i]` in turn, one per new connection (nft `snat ip to numgen inc mod N map` in a nat
    /// postrouting chain of the client's namespace, where a NAT router on its way out would
    /// do it), so the server sees the client's address change and the client's kernel does
    /// not. Each address goes on the client's veth, so the answers come back. Called again,
    /// the new rule replaces the old; the table goes with the namespace.
    pub fn client_snat(&self, to: &[IpAddr]) -> Result<()> {
        for a in to {
            cmd::run(cmd::ip_in(&self.client_ns).args([
                "addr",
                "replace",
                &format!("{a}/24"),
                "dev",
                VETH_CLIENT,
            ]))?;
        }
        let nft = |args: &[&str]| cmd::run(cmd::in_netns(&self.client_ns, "nft").args(args));
        nft(&["add", "table", "inet", NFT_TABLE])?;
        let chain = "{ type nat hook postrouting priority 100; policy accept; }";
        nft(&["add", "chain", "inet", NFT_TABLE, "postrouting", chain])?;
        nft(&["flush", "chain", "inet", NFT_TABLE, "postrouting"])?;
        let rule = format!(
            "ip saddr {} snat ip to numgen inc mod {} map {{ {} }}",
            self.client_addr(false),
            to.len(),
            turns(to)
        );
        nft(&["add", "rule", "inet", NFT_TABLE, "postrouting", &rule]).map(drop)
    }

    /// Removes the middlebox (the whole nft table), if present.
    pub fn middlebox_clear(&self) -> Result<()> {
        let taken = lock(&REGISTRY).get_mut(&self.id).and_then(|o| o.nft_in.take());
        if taken.is_some() {
            self.nft(&["delete", "table", "inet", NFT_TABLE])?;
        }
        Ok(())
    }

    /// Packets dropped so far by the middlebox rules (sum of their counters).
    pub fn middlebox_dropped(&self) -> Result<u64> {
        if lock(&REGISTRY).get(&self.id).and_then(|o| o.nft_in.as_ref()).is_none() {
            return Ok(0);
        }
        nft_dropped(&self.nft(&["-j", "list", "table", "inet", NFT_TABLE])?)
    }

    /// SYN-ACKs dropped so far by [`Lab::client_drop_synack`]'s rule.
    pub fn client_dropped(&self) -> Result<u64> {
        let list = ["-j", "list", "table", "inet", NFT_TABLE];
        nft_dropped(&cmd::run(cmd::in_netns(&self.client_ns, "nft").args(list))?)
    }

    fn ensure_nft_table(&self) -> Result<()> {
        if lock(&REGISTRY).get(&self.id).and_then(|o| o.nft_in.as_ref()).is_some() {
            return Ok(());
        }
        // Recorded before creation: Drop deletes it even if the chain step fails.
        if let Some(o) = lock(&REGISTRY).get_mut(&self.id) {
            o.nft_in = Some(self.server_ns.clone());
        }
        self.nft(&["add", "table", "inet", NFT_TABLE])?;
        self.nft(&[
            "add",
            "chain",
            "inet",
            NFT_TABLE,
            "input",
            "{ type filter hook input priority 0; policy accept; }",
        ])?;
        Ok(())
    }

    fn nft(&self, args: &[&str]) -> Result<String> {
        cmd::run(cmd::in_netns(&self.server_ns, "nft").args(args))
    }

    /// Starts `exe lab-server` in the server namespace on server address `addr_index`
    /// and waits for it to listen. 64-byte replies, 300 s lifetime at most.
    pub fn start_server(
        &self,
        exe: &Path,
        addr_index: usize,
        port: u16,
        tfo_queue: u32,
        v6: bool,
    ) -> Result<ServerHandle> {
        let listen = SocketAddr::new(self.server_addr(addr_index, v6)?, port);
        self.start_server_with(exe, &ServerArgs { tfo_queue, ..ServerArgs::new(listen) })
    }

    /// Starts `exe lab-server <args>` in the server namespace and waits for `ready`.
    pub fn start_server_with(&self, exe: &Path, args: &ServerArgs) -> Result<ServerHandle> {
        let mut c = cmd::in_netns(&self.server_ns, exe);
        c.arg("lab-server").args(args.to_cli_args());
        cmd::join_cgroup_at_spawn(&mut c, args.cgroup.as_deref())?;
        let line = cmd::display(&c);
        // stdin is a pipe we hold: if this process dies, the server sees EOF and exits.
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut proc = Proc::spawn(self.id, &mut c).with_context(|| format!("starting `{line}`"))?;
        let stdin = proc.child.stdin.take();
        let stderr = proc.child.stderr.take().map(|e| cmd::collect(e, 64 * 1024));
        let stdout = proc.child.stdout.take().ok_or_else(|| anyhow!("`{line}`: no stdout pipe"))?;

        // Lines go through a channel so the wait for `ready` can time out; the thread
        // keeps draining stdout afterwards.
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                let _ = tx.send(l);
            }
        });
        let deadline = Instant::now() + SERVER_READY_TIMEOUT;
        let mut handle = ServerHandle { proc, addr: args.listen, _stdin: stdin, stderr };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l.trim() == "ready" => return Ok(handle),
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    handle.proc.kill();
                    bail!("`{line}` not ready after {SERVER_READY_TIMEOUT:?}: {}", handle.stderr_text());
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = handle.proc.wait_bounded(Duration::from_secs(2));
                    bail!("`{line}` exited before ready ({status}): {}", handle.stderr_text());
                }
            }
        }
    }

    /// Runs `exe lab-client` in the client namespace to completion and parses its output.
    pub fn run_client(&self, exe: &Path, spec: &ClientRunSpec) -> Result<ClientRun> {
        let child = self.spawn_client(exe, spec)?;
        child.wait(spec.worst_case() + CLIENT_WAIT_SLACK)
    }

    /// Starts `exe lab-client` in the client namespace in the background. `spec.dst` must
    /// be one of this lab's server addresses (an IPv4 one may be given IPv4-mapped: the
    /// client then connects from an IPv6 socket, as a dual-stack program does).
    pub fn spawn_client(&self, exe: &Path, spec: &ClientRunSpec) -> Result<ClientChild> {
        let all: Vec<IpAddr> = self.server_addrs(false).into_iter().chain(self.server_addrs(true)).collect();
        if !all.contains(&spec.dst.ip().to_canonical()) {
            bail!("client destination {} is not a server address of this lab ({all:?})", spec.dst);
        }
        let mut c = cmd::in_netns(&self.client_ns, exe);
        c.arg("lab-client").args(spec.to_cli_args());
        cmd::join_cgroup_at_spawn(&mut c, spec.cgroup.as_deref())?;
        let line = cmd::display(&c);
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut proc = Proc::spawn(self.id, &mut c).with_context(|| format!("starting `{line}`"))?;
        let stdout = proc.child.stdout.take().map(|o| cmd::collect(o, 64 << 20));
        let stderr = proc.child.stderr.take().map(|e| cmd::collect(e, 64 * 1024));
        Ok(ClientChild { proc, line, stdout, stderr })
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let owned = lock(&REGISTRY).remove(&self.id);
        if let Some(owned) = owned {
            teardown(owned);
        }
    }
}

/// Waits until `dev` in `ns` reports operstate UP: before the veth carrier is on, the
/// device still has the noop qdisc and the first SYN would be dropped (a fake
/// retransmission in the counters).
fn wait_oper_up(ns: &str, dev: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let out = cmd::run(cmd::ip_in(ns).args(["-o", "link", "show", "dev", dev]))?;
        if out.contains("state UP") {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("{dev} in {ns} not up after 5 s: {}", out.trim());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ---------------------------------------------------------------------------------------

/// A child process registered with its lab. Dropping it kills (by pid) and reaps it.
#[derive(Debug)]
struct Proc {
    child: Child,
    lab: u64,
}

impl Proc {
    fn spawn(lab: u64, c: &mut Command) -> Result<Proc> {
        // Spawn under the lock, so cleanup_all() never misses a just-started child.
        let mut reg = lock(&REGISTRY);
        let owned = reg.get_mut(&lab).ok_or_else(|| anyhow!("lab {lab} is already torn down"))?;
        let child = c.spawn()?;
        owned.pids.insert(child.id());
        Ok(Proc { child, lab })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn forget(&self, reg: &mut BTreeMap<u64, Owned>) {
        if let Some(o) = reg.get_mut(&self.lab) {
            o.pids.remove(&self.pid());
        }
    }

    /// try_wait, unregistering the pid in the same critical section as the reaping.
    fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        let mut reg = lock(&REGISTRY);
        let st = self.child.try_wait().with_context(|| format!("waiting for pid {}", self.pid()))?;
        if st.is_some() {
            self.forget(&mut reg);
        }
        Ok(st)
    }

    /// Polls for exit for at most `timeout`, then kills; describes how it ended.
    fn wait_bounded(&mut self, timeout: Duration) -> String {
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
    fn kill(&mut self) {
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

/// An nft map's elements taking `to` in turn: `0 : a, 1 : b`.
fn turns<T: std::fmt::Display>(to: &[T]) -> String {
    to.iter().enumerate().map(|(i, t)| format!("{i} : {t}")).collect::<Vec<_>>().join(", ")
}

/// The sum of the rule counters of one table, from `nft -j list table` output.
fn nft_dropped(json: &str) -> Result<u64> {
    let v: serde_json::Value = serde_json::from_str(json).context("parsing `nft -j` output")?;
    let mut total = 0;
    for item in v["nftables"].as_array().into_iter().flatten() {
        for expr in item["rule"]["expr"].as_array().into_iter().flatten() {
            total += expr["counter"]["packets"].as_u64().unwrap_or(0);
        }
    }
    Ok(total)
}

/// Whether an error of [`Lab::delay_egress`] says the kernel has no netem (tc: "Specified
/// qdisc kind is unknown" / "Unknown qdisc").
pub fn is_no_netem(e: &anyhow::Error) -> bool {
    let text = format!("{e:#}");
    text.contains("qdisc kind is unknown") || text.contains("Unknown qdisc")
}

/// One SYN or SYN-ACK seen on the client's veth: when, which ports, payload length.
#[derive(Debug, Clone, PartialEq)]
pub struct WireSyn {
    pub time_s: f64,
    pub sport: u16,
    pub dport: u16,
    /// A SYN-ACK (tcpdump's `Flags [S.]`), coming back to the client.
    pub syn_ack: bool,
    pub payload: u32,
    /// The TFO option was the experimental one (kind 254, tcpdump's `exp-tfo`).
    pub exp_tfo: bool,
    /// It carried a TFO option (kind 34, tcpdump's `tfo`, or the experimental one): a cookie,
    /// a cookie request, or (SYN-ACK) the server's cookie.
    pub tfo: bool,
    /// The cookie its TFO option carried, in tcpdump's hex (None: no option, or a cookie
    /// request): tests compare the SYN's with its SYN-ACK's; the product never prints one.
    pub cookie: Option<String>,
}

/// tcpdump on a lab veth, capturing SYNs and SYN-ACKs: the wire's own account of handshakes.
#[derive(Debug)]
pub struct SynCapture {
    tcpdump: Tcpdump,
}

/// A running tcpdump and what it prints.
#[derive(Debug)]
struct Tcpdump {
    proc: Proc,
    stdout: Option<JoinHandle<String>>,
}

impl Tcpdump {
    /// Stops it (SIGINT, so it flushes) and returns what it printed.
    fn stop(mut self) -> String {
        // SAFETY: kill() on the pid of a child we own and have not reaped.
        unsafe { libc::kill(self.proc.pid() as i32, libc::SIGINT) };
        self.proc.wait_bounded(Duration::from_secs(5));
        join_text(&mut self.stdout)
    }
}

/// `1764491234.123456 IP 198.18.0.1.40000 > 198.18.0.2.8080: Flags [S], ..., length 100`
/// (IPv6: `IP6 fd00:7f0::1.40000 > ...`).
pub fn parse_tcpdump_syn(line: &str) -> Option<WireSyn> {
    let mut words = line.split_whitespace();
    let time_s = words.next()?.parse().ok()?;
    let _proto = words.next()?;
    let src = words.next()?;
    let sport = src.rsplit('.').next()?.parse().ok()?;
    let _arrow = words.next()?;
    let dst = words.next()?.trim_end_matches(':');
    let dport = dst.rsplit('.').next()?.parse().ok()?;
    // tcpdump may decode the payload after the length ("length 100: HTTP"): digits only.
    let after = line.split("length ").nth(1)?;
    let payload = after.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
    let syn_ack = line.contains("Flags [S.]");
    let tfo = ["[tfo ", ",tfo ", "exp-tfo"].iter().any(|o| line.contains(o));
    let exp_tfo = line.contains("exp-tfo");
    Some(WireSyn { time_s, sport, dport, syn_ack, payload, exp_tfo, tfo, cookie: tfo_cookie(line) })
}

/// The cookie of a tcpdump line's TFO option (`options [...,tfo  cookie 0011...,...]`,
/// `exp-tfo cookie ...` for the experimental kind); None for a cookie request or no option.
fn tfo_cookie(line: &str) -> Option<String> {
    let options = line.split("options [").nth(1)?.split(']').next()?;
    let tfo = options.split(',').map(str::trim).find(|o| o.starts_with("tfo") || o.starts_with("exp-tfo"))?;
    match tfo.split_whitespace().collect::<Vec<_>>()[1..] {
        ["cookie", hex] => Some(hex.to_string()),
        _ => None,
    }
}

impl SynCapture {
    /// Stops tcpdump (SIGINT, so it flushes) and returns the SYNs it saw.
    pub fn stop(self) -> Vec<WireSyn> {
        self.tcpdump.stop().lines().filter_map(parse_tcpdump_syn).collect()
    }
}

/// A running `lab-server`; dropping it kills the server (by pid) and waits for it.
#[derive(Debug)]
pub struct ServerHandle {
    proc: Proc,
    addr: SocketAddr,
    /// Held open: the server exits when it closes.
    _stdin: Option<ChildStdin>,
    stderr: Option<JoinHandle<String>>,
}

impl ServerHandle {
    /// The server's pid (ip netns exec execs, so this is the lab-server process itself).
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the server and returns what it wrote to stderr.
    pub fn stop(mut self) -> String {
        self.proc.kill();
        self.stderr_text()
    }

    fn stderr_text(&mut self) -> String {
        // Only called once the process is dead, so the pipe is closed and join returns.
        self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default().trim().to_string()
    }
}

/// The outcome of one `lab-client` run.
#[derive(Debug, Clone)]
pub struct ClientRun {
    /// The pid of the client process (the one whose sockets the tracer sees).
    pub pid: u32,
    pub results: Vec<ConnResult>,
    pub stderr: String,
}

impl ClientRun {
    pub fn ok_count(&self) -> usize {
        self.results.iter().filter(|r| r.ok).count()
    }
}

/// A `lab-client` running in the background; dropping it kills it (by pid).
#[derive(Debug)]
pub struct ClientChild {
    proc: Proc,
    line: String,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

impl ClientChild {
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// True once the client has exited (it is then reaped).
    pub fn has_exited(&mut self) -> Result<bool> {
        Ok(self.proc.try_wait()?.is_some())
    }

    /// Waits at most `timeout` for the client to finish (killing it after that) and
    /// parses its per-connection lines.
    pub fn wait(mut self, timeout: Duration) -> Result<ClientRun> {
        let pid = self.pid();
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(st) = self.proc.try_wait()? {
                break st;
            }
            if Instant::now() >= deadline {
                self.proc.kill();
                let err = join_text(&mut self.stderr);
                bail!("`{}` still running after {timeout:?}, killed: {err}", self.line);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let out = join_text(&mut self.stdout);
        let stderr = join_text(&mut self.stderr);
        if !status.success() {
            bail!("`{}` failed ({status}): {}", self.line, stderr.trim());
        }
        let results = out
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str::<ConnResult>(l).with_context(|| format!("bad client line {l:?}")))
            .collect::<Result<Vec<_>>>()?;
        Ok(ClientRun { pid, results, stderr })
    }

    /// Kills the client (by pid) and reaps it.
    pub fn kill(mut self) {
        self.proc.kill();
    }
}

fn join_text(h: &mut Option<JoinHandle<String>>) -> String {
    h.take().and_then(|h| h.join().ok()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tcpdump_syn_lines() {
        let v4 = "1764491234.123456 IP 198.18.0.1.40000 > 198.18.0.2.8080: Flags [S], seq 1, win 64240, options [mss 1460,tfo cookie 0011223344556677], length 100";
        assert_eq!(
            parse_tcpdump_syn(v4),
            Some(WireSyn {
                time_s: 1764491234.123456,
                sport: 40000,
                dport: 8080,
                syn_ack: false,
                payload: 100,
                exp_tfo: false,
                tfo: true,
                cookie: Some("0011223344556677".into()),
            })
        );
        let v6 = "1764491235.000001 IP6 fd00:7f0::1.41000 > fd00:7f0::2.8080: Flags [S], seq 2, win 64800, length 0";
        assert_eq!(
            parse_tcpdump_syn(v6),
            Some(WireSyn {
                time_s: 1764491235.000001,
                sport: 41000,
                dport: 8080,
                syn_ack: false,
                payload: 0,
                exp_tfo: false,
                tfo: false,
                cookie: None,
            })
        );
        assert_eq!(parse_tcpdump_syn("tcpdump: verbose output suppressed"), None);
        let http =
            "1764491236.5 IP 198.18.0.1.40002 > 198.18.0.2.8080: Flags [S], seq 3:103, length 100: HTTP";
        assert_eq!(parse_tcpdump_syn(http).map(|s| s.payload), Some(100));
        let exp = "1.5 IP 198.19.7.1.46764 > 198.19.7.2.7001: Flags [S], options [mss 1460,exp-tfo cookiereq], length 0";
        assert_eq!(parse_tcpdump_syn(exp).map(|s| (s.exp_tfo, s.tfo, s.cookie)), Some((true, true, None)));
        let synack = "2.5 IP 198.19.7.2.7001 > 198.19.7.1.46764: Flags [S.], seq 9, ack 10, length 0";
        assert_eq!(
            parse_tcpdump_syn(synack).map(|s| (s.syn_ack, s.sport, s.dport)),
            Some((true, 7001, 46764))
        );
        let cookie = "3.5 IP 198.19.7.2.7001 > 198.19.7.1.46764: Flags [S.], seq 9, ack 10, win 65160, options [mss 1460,sackOK,TS val 1 ecr 2,nop,wscale 7,tfo  cookie 8b7e3a1f00c2d4e5,nop,nop], length 0";
        assert_eq!(parse_tcpdump_syn(cookie).and_then(|s| s.cookie).as_deref(), Some("8b7e3a1f00c2d4e5"));
    }

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

    #[test]
    fn cli_args_round_trip_through_clap() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        enum Cli {
            LabServer(ServerArgs),
            LabClient(ClientArgs),
        }
        let s = ServerArgs { tfo_queue: 16, ..ServerArgs::new("[::]:80".parse().unwrap()) };
        let parsed =
            Cli::try_parse_from(["x", "lab-server"].into_iter().map(String::from).chain(s.to_cli_args()))
                .unwrap();
        assert!(matches!(parsed, Cli::LabServer(ref p) if *p == s));
        let c = ClientArgs {
            mode: ClientMode::FastopenConnect,
            count: 5,
            ..ClientArgs::new("198.18.0.2:80".parse().unwrap())
        };
        let parsed =
            Cli::try_parse_from(["x", "lab-client"].into_iter().map(String::from).chain(c.to_cli_args()))
                .unwrap();
        assert!(matches!(parsed, Cli::LabClient(ref p) if *p == c));
    }
}
