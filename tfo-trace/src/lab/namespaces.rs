//! The lab's two namespaces (client, server), the veth pair between them, their addresses
//! and sysctls, and the teardown when a [`Lab`] is dropped.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use super::{
    cmd,
    registry::{lock, sweep_stale, teardown, Owned, NETNS_LOCK, NEXT_LAB, REGISTRY, SWEEP_ONCE},
};
use crate::kernel::netstat::Netstat;

/// Every namespace this module creates is named `<NS_PREFIX>-<pid>-<lab number>-{cli,srv}`.
pub const NS_PREFIX: &str = "tfolab";
/// Interface names inside the namespaces. The pair is created directly in the two fresh
/// namespaces, so fixed names never clash with the host's or another lab's.
pub(crate) const VETH_CLIENT: &str = "tfo-cli";
const VETH_SERVER: &str = "tfo-srv";

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
    // The lab's other files (peers, middlebox, capture, dns) add to `impl Lab`.
    pub(super) id: u64,
    pub(super) n: u8,
    pub(super) client_ns: String,
    pub(super) server_ns: String,
    pub(super) cfg: LabConfig,
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
    pub(super) fn veth(&self, side: Side) -> (&str, &'static str) {
        let dev = match side {
            Side::Client => VETH_CLIENT,
            Side::Server => VETH_SERVER,
        };
        (self.netns(side), dev)
    }

    pub fn client_addr(&self, v6: bool) -> IpAddr {
        self.host_addr(1, v6)
    }

    /// A second address of the client (a multi-homed host, an IPv6 temporary address), on
    /// its veth beside the first: a socket bound to it (`ClientArgs::bind`) has its own
    /// entry in the client's TFO cookie cache (tcp_metrics keys entries by source and
    /// destination address).
    pub fn add_client_addr(&self, v6: bool) -> Result<IpAddr> {
        let a = self.host_addr(30, v6);
        let cidr = format!("{a}/{}", if v6 { 64 } else { 24 });
        let mut c = cmd::ip_in(&self.client_ns);
        c.args(["addr", "replace", &cidr, "dev", VETH_CLIENT]);
        if v6 {
            c.arg("nodad");
        }
        cmd::run(&mut c)?;
        Ok(a)
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

    pub(super) fn host_addr(&self, host: u8, v6: bool) -> IpAddr {
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

    /// `ip tcp_metrics flush` in `side`'s namespace: its cookies forgotten, the next TFO
    /// connect to each destination asks for one again.
    pub fn flush_tcp_metrics(&self, side: Side) -> Result<()> {
        cmd::run(cmd::ip_in(self.netns(side)).args(["tcp_metrics", "flush"])).map(drop)
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
