//! What happens to packets between the namespaces: the nftables middlebox in the server
//! namespace (dropping SYN-data, TFO options, SYNs, ACKs), the client's own rules (dropping
//! SYN-ACKs, NAT), a load balancer's spread of one port, netem delay.
use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context as _, Result};

use super::{
    cmd,
    namespaces::{Lab, Side, VETH_CLIENT},
    registry::{lock, NFT_TABLE, REGISTRY},
};

impl Lab {
    /// The middlebox: in the server namespace, drop TCP SYNs (SYN without ACK) that carry
    /// data, optionally only those to `dst`. A SYN with a TFO cookie (8 bytes) and no data
    /// is 72 bytes of IPv4 (total length) and 52 bytes of IPv6 payload, and passes;
    /// anything longer carries data. Can be called again to add more destinations.
    pub fn middlebox_drop_syn_data(&self, dst: Option<IpAddr>) -> Result<()> {
        self.syn_data_rule(dst, None, "drop")
    }

    /// The middlebox dropping one SYN-data in every `k` (the first, then every k-th after
    /// it; an nft `numgen` counter per address family): a path that fails now and then.
    pub fn middlebox_drop_syn_data_one_in(&self, k: u32) -> Result<()> {
        self.syn_data_rule(None, Some(k.max(1)), "drop")
    }

    /// A firewall or IPS that rejects SYNs carrying data with a reset (nft `reject with tcp
    /// reset`), as [`Lab::middlebox_drop_syn_data`] tells them; SYNs without data pass.
    /// [`Lab::middlebox_dropped`] counts the resets sent.
    pub fn middlebox_reset_syn_data(&self) -> Result<()> {
        self.syn_data_rule(None, None, "reject with tcp reset")
    }

    /// A middlebox that strips the TFO option from every SYN on its way in (nft `reset tcp
    /// option fastopen`: the option's bytes become NOPs), data and all left as they were.
    pub fn middlebox_strip_tfo_option(&self) -> Result<()> {
        self.middlebox_rule("tcp flags & (syn | ack) == syn reset tcp option fastopen")
    }

    fn syn_data_rule(&self, dst: Option<IpAddr>, one_in: Option<u32>, verdict: &str) -> Result<()> {
        self.ensure_nft_table()?;
        let syn = "tcp flags & (syn | ack) == syn";
        // Counted only for the packets the rule's earlier matches let through: SYN-data.
        let every = one_in.map(|k| format!("numgen inc mod {k} == 0 ")).unwrap_or_default();
        let mut rules = Vec::new();
        if !matches!(dst, Some(IpAddr::V6(_))) {
            let d = dst.map(|a| format!("ip daddr {a} ")).unwrap_or_default();
            rules.push(format!("{d}{syn} ip length > 72 {every}counter {verdict}"));
        }
        if !matches!(dst, Some(IpAddr::V4(_))) {
            let d = dst.map(|a| format!("ip6 daddr {a} ")).unwrap_or_default();
            rules.push(format!("{d}{syn} ip6 length > 52 {every}counter {verdict}"));
        }
        for r in rules {
            self.nft(&["add", "rule", "inet", NFT_TABLE, "input", &r])?;
        }
        Ok(())
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

    /// Holds back every packet leaving `side`'s veth for about `hold`, so that what the
    /// other side sends meanwhile (a burst of SYN-data) is all in flight before the first
    /// answer: netem delay where the kernel has it (the test VMs); else a token bucket
    /// (tbf) at 32 kbit/s, its bucket first emptied by filler datagrams to the other side
    /// (this host has no netem): each answer then waits behind them, and the next ~22 ms
    /// behind the one before (a SYN-ACK is 88 bytes on the wire), room for a reader on a
    /// busy machine to look between two. Packets over 200 bytes would be dropped by the
    /// bucket: for handshakes and short replies. Undone by [`Lab::release_answers`].
    pub fn hold_answers(&self, side: Side, hold: Duration) -> Result<HeldBy> {
        match self.delay_egress(side, hold) {
            Ok(()) => return Ok(HeldBy::Netem),
            Err(e) if is_no_netem(&e) => {}
            Err(e) => return Err(e),
        }
        let (ns, dev) = self.veth(side);
        cmd::run(cmd::in_netns(ns, "tc").args([
            "qdisc", "replace", "dev", dev, "root", "tbf", "rate", "32kbit", "burst", "200", "latency", "5s",
        ]))
        .with_context(|| format!("tbf on {dev}"))?;
        // 32 kbit/s: 4 bytes a millisecond; a 100-byte datagram is 142 bytes on the wire.
        const WIRE_BYTES: u128 = 142;
        let datagrams = (hold.as_millis() * 4).div_ceil(WIRE_BYTES).max(1);
        let to =
            std::net::SocketAddr::new(self.host_addr(if side == Side::Server { 1 } else { 2 }, false), 9);
        let path = std::path::PathBuf::from(format!("/run/netns/{ns}"));
        let inode =
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).context("the namespace's file")?);
        let into = crate::kernel::every_netns::Netns {
            inode: inode as u32,
            way: crate::kernel::every_netns::Way::Mount(path),
            netstat_inode: None,
        };
        let sent = crate::kernel::every_netns::run_in_each(&[into], || -> std::io::Result<()> {
            let socket = std::net::UdpSocket::bind(("0.0.0.0", 0))?;
            for _ in 0..datagrams {
                socket.send_to(&[0u8; 100], to)?;
            }
            Ok(())
        });
        match sent.into_iter().next() {
            Some((_, Ok(Ok(())))) => Ok(HeldBy::TokenBucket),
            Some((_, Ok(Err(e)))) => Err(e).context("sending filler datagrams"),
            Some((_, Err(e))) => Err(anyhow::anyhow!("entering {ns}: {e}")),
            None => Err(anyhow::anyhow!("entering {ns}: no answer")),
        }
    }

    /// Undoes [`Lab::hold_answers`] (and [`Lab::delay_egress`]).
    pub fn release_answers(&self, side: Side) -> Result<()> {
        let (ns, dev) = self.veth(side);
        cmd::run(cmd::in_netns(ns, "tc").args(["qdisc", "del", "dev", dev, "root"])).map(drop)
    }

    /// The client's route to the server's addresses with `fastopen_no_cookie 1`: TFO
    /// without a cookie toward them (tcp_fastopen_no_cookie(): the route's
    /// RTAX_FASTOPEN_NO_COOKIE), the namespace's sysctl left as it is.
    pub fn client_route_no_cookie(&self) -> Result<()> {
        for v6 in [false, true] {
            let subnet = match self.host_addr(0, v6) {
                a @ IpAddr::V4(_) => format!("{a}/24"),
                a => format!("{a}/64"),
            };
            cmd::run(cmd::ip_in(&self.client_ns).args([
                "route",
                "replace",
                &subnet,
                "dev",
                VETH_CLIENT,
                "fastopen_no_cookie",
                "1",
            ]))?;
        }
        Ok(())
    }

    /// Drops every segment from the server's `port` arriving at the client but SYN-ACKs:
    /// handshakes end, and the server's data, FIN and ACKs after them are lost (its data
    /// times out at the server).
    pub fn client_drop_server_segments(&self, port: u16) -> Result<()> {
        let nft = |args: &[&str]| cmd::run(cmd::in_netns(&self.client_ns, "nft").args(args));
        add_input_chain(nft)?;
        let rule = format!("tcp sport {port} tcp flags & syn == 0 counter drop");
        nft(&["add", "rule", "inet", NFT_TABLE, "input", &rule]).map(drop)
    }

    /// Undoes [`Lab::client_drop_synack`].
    pub fn client_allow_synack(&self) -> Result<()> {
        cmd::run(cmd::in_netns(&self.client_ns, "nft").args(["delete", "table", "inet", NFT_TABLE]))?;
        Ok(())
    }

    /// A middlebox that drops every SYN carrying a TFO option (kind 34): cookie requests,
    /// cookies and SYN-data alike; the plain SYN the client falls back to passes.
    pub fn middlebox_drop_tfo_option(&self) -> Result<()> {
        self.middlebox_rule("tcp flags & (syn | ack) == syn tcp option fastopen exists counter drop")
    }

    /// A middlebox that drops every SYN (with or without TFO): connections never complete.
    pub fn middlebox_drop_all_syns(&self) -> Result<()> {
        self.middlebox_rule("tcp flags & (syn | ack) == syn counter drop")
    }

    /// The same for the SYNs to one address only: the other destinations stay reachable.
    pub fn middlebox_drop_syns_to(&self, dst: IpAddr) -> Result<()> {
        let family = if dst.is_ipv4() { "ip" } else { "ip6" };
        self.middlebox_rule(&format!("{family} daddr {dst} tcp flags & (syn | ack) == syn counter drop"))
    }

    /// A middlebox that drops every segment with ACK and without SYN arriving at the server
    /// (the client's handshake ACK, its data and its FIN): a TFO child made from SYN-data
    /// stays in SYN_RECV and resends its SYN-ACK (tcp_fastopen_synack_timer) until the rule
    /// goes ([`Lab::middlebox_clear`]) and an ACK gets through.
    pub fn middlebox_drop_acks(&self) -> Result<()> {
        self.middlebox_rule("tcp flags & (syn | ack) == ack counter drop")
    }

    /// One more rule of the middlebox, on what arrives at the server namespace.
    fn middlebox_rule(&self, rule: &str) -> Result<()> {
        self.ensure_nft_table()?;
        self.nft(&["add", "rule", "inet", NFT_TABLE, "input", rule])?;
        Ok(())
    }

    /// Drops every SYN-ACK arriving in the client namespace, so handshakes stay unfinished
    /// (RFC 7413 section 5.1). The table dies with the namespace.
    pub fn client_drop_synack(&self) -> Result<()> {
        let nft = |args: &[&str]| cmd::run(cmd::in_netns(&self.client_ns, "nft").args(args));
        add_input_chain(nft)?;
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

    /// An address of the client's family `v6` a NAT in front of it can give it
    /// ([`Lab::client_snat`]).
    pub fn client_nat_addr(&self, index: u8, v6: bool) -> IpAddr {
        self.host_addr(10 + index, v6)
    }

    /// A NAT in front of the client: its connections of the family of `to` (IPv4, or IPv6:
    /// NAT66) leave with the source address `to[i]` in turn, one per new connection (nft
    /// `snat ip to numgen inc mod N map` in a nat postrouting chain of the client's
    /// namespace, where a NAT router on its way out would do it), so the server sees the
    /// client's address change and the client's kernel does not. Each address goes on the
    /// client's veth, so the answers come back; an IPv6 one deprecated (preferred_lft 0), so
    /// the client's own connections keep their address as their source. Called again, the
    /// new rule replaces the old; the table goes with the namespace.
    pub fn client_snat(&self, to: &[IpAddr]) -> Result<()> {
        let v6 = to.first().is_some_and(IpAddr::is_ipv6);
        if to.iter().any(|a| a.is_ipv6() != v6) {
            anyhow::bail!("client_snat: addresses of one family, not {to:?}");
        }
        for a in to.iter().filter(|a| **a != self.client_addr(v6)) {
            let mut c = cmd::ip_in(&self.client_ns);
            if v6 {
                c.args([
                    "addr",
                    "replace",
                    &format!("{a}/64"),
                    "dev",
                    VETH_CLIENT,
                    "nodad",
                    "preferred_lft",
                    "0",
                ]);
            } else {
                c.args(["addr", "replace", &format!("{a}/24"), "dev", VETH_CLIENT]);
            }
            cmd::run(&mut c)?;
        }
        let nft = |args: &[&str]| cmd::run(cmd::in_netns(&self.client_ns, "nft").args(args));
        nft(&["add", "table", "inet", NFT_TABLE])?;
        let chain = "{ type nat hook postrouting priority 100; policy accept; }";
        nft(&["add", "chain", "inet", NFT_TABLE, "postrouting", chain])?;
        nft(&["flush", "chain", "inet", NFT_TABLE, "postrouting"])?;
        let ip = if v6 { "ip6" } else { "ip" };
        let rule = format!(
            "{ip} saddr {} snat {ip} to numgen inc mod {} map {{ {} }}",
            self.client_addr(v6),
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
        add_input_chain(|args| self.nft(args))
    }

    fn nft(&self, args: &[&str]) -> Result<String> {
        cmd::run(cmd::in_netns(&self.server_ns, "nft").args(args))
    }
}

/// Our table and its input chain (accepting what no rule drops), through `nft`, which runs
/// `nft` in one namespace.
fn add_input_chain(nft: impl Fn(&[&str]) -> Result<String>) -> Result<()> {
    nft(&["add", "table", "inet", NFT_TABLE])?;
    nft(&[
        "add",
        "chain",
        "inet",
        NFT_TABLE,
        "input",
        "{ type filter hook input priority 0; policy accept; }",
    ])?;
    Ok(())
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

/// How [`Lab::hold_answers`] held a side's packets back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldBy {
    Netem,
    /// tbf behind filler datagrams (no netem here).
    TokenBucket,
}

/// Whether an error of [`Lab::delay_egress`] says the kernel has no netem (tc: "Specified
/// qdisc kind is unknown" / "Unknown qdisc").
pub fn is_no_netem(e: &anyhow::Error) -> bool {
    let text = format!("{e:#}");
    text.contains("qdisc kind is unknown") || text.contains("Unknown qdisc")
}
