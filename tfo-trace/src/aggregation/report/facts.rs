//! What the kernel says besides the events, for `report`'s verdicts: `ip tcp_metrics` per
//! client namespace, listeners and their TFO queue sizes, counter deltas, backup keys,
//! somaxconn. Gathered by `views::report` for a live run; a recording replayed elsewhere
//! has none of it.
use std::{collections::BTreeMap, net::SocketAddr};

use serde::Serialize;

use super::grouping::GroupKey;
use crate::{
    kernel::{netstat::Netstat, tcp_metrics::TcpMetric},
    units,
};

/// A TFO listener as the kernel shows it (see `kernel::listeners::tfo_listeners`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct ListenerFact {
    pub netns: u32,
    pub addr: SocketAddr,
    /// fastopenq.max_qlen (getsockopt TCP_FASTOPEN); 0 = TFO off on this listener.
    pub max_qlen: Option<u32>,
}

/// What the kernel says besides the events. Everything is optional: a recording replayed
/// elsewhere has none of it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Facts {
    /// `ip tcp_metrics` per client namespace (inode); absent namespaces were not read.
    pub tcp_metrics: BTreeMap<u32, Vec<TcpMetric>>,
    pub listeners: Vec<ListenerFact>,
    /// Counter deltas over the window per namespace.
    pub counters: BTreeMap<u32, Netstat>,
    /// A backup TFO key is set, per namespace.
    pub backup_key: BTreeMap<u32, bool>,
    /// net.core.somaxconn per namespace.
    pub somaxconn: BTreeMap<u32, u32>,
    /// net.ipv4.tcp_fastopen_blackhole_timeout_sec per namespace (how long a pause lasts).
    pub blackhole_timeout_s: BTreeMap<u32, u32>,
    /// net.ipv4.tcp_syncookies per namespace (2: every SYN answered with a syncookie).
    pub syncookies: BTreeMap<u32, u32>,
    /// net.ipv4.tcp_fastopen per namespace (bit 0x2: its listeners may do TFO).
    pub tcp_fastopen: BTreeMap<u32, u32>,
    /// Namespace inode -> `ip netns` name, for readable evidence.
    pub netns_names: BTreeMap<u32, String>,
    /// The backend that produced the events (its blind spots are named in findings).
    pub backend: Option<String>,
}

impl Facts {
    /// `netns lab-srv`, or `netns 4026532246` for a namespace with no `ip netns` name
    /// ([`units::netns`]).
    pub(crate) fn ns(&self, netns: u32) -> String {
        format!("netns {}", units::netns(netns, self.netns_names.get(&netns).map(String::as_str)))
    }
}

/// What the kernel shows of the server a destination reaches, where that server's
/// namespace is one this host can read: its listener and the namespace's sysctls and
/// counter deltas over the window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSide {
    pub netns: u32,
    /// The namespace as the report names it (`netns lab-srv`).
    pub ns: String,
    /// The listener the destination reaches (its own address, or a wildcard one).
    pub listener: SocketAddr,
    /// Its TFO queue size (getsockopt TCP_FASTOPEN): 0, TCP_FASTOPEN not set; None, unread.
    pub max_qlen: Option<u32>,
    pub tcp_fastopen: Option<u32>,
    pub syncookies: Option<u32>,
    /// Counter deltas of the namespace: TcpExtListenOverflows, TcpExtListenDrops,
    /// TcpExtSyncookiesSent, TcpExtTCPFastOpenListenOverflow, TcpExtTCPFastOpenCookieReqd.
    pub listen_overflows: u64,
    pub listen_drops: u64,
    pub syncookies_sent: u64,
    pub tfo_queue_overflows: u64,
    pub cookie_requests: u64,
}

impl ServerSide {
    /// Its namespace answered SYNs with syncookies in the window: its listeners skipped TFO
    /// for those SYNs (tcp_conn_request(): no tcp_try_fastopen() when want_cookie).
    pub fn sent_syncookies(&self) -> bool {
        self.syncookies_sent > 0
    }
}

impl Facts {
    /// The server side of `dst`: the one namespace holding a listener on exactly that
    /// address and port, else the one namespace with a wildcard listener on that port. Where
    /// several namespaces do (an address reused in containers, labs), none: it cannot be
    /// told which. Only namespaces this host read; a recording has none.
    pub(crate) fn server_of(&self, dst: SocketAddr) -> Option<ServerSide> {
        let wildcard = |l: &&ListenerFact| {
            l.addr.port() == dst.port() && l.addr.ip().is_unspecified() && (l.addr.is_ipv6() || dst.is_ipv4())
        };
        let exact = self.listeners.iter().filter(|l| l.addr == dst).collect::<Vec<_>>();
        let l = match exact.first() {
            Some(first) => exact.iter().all(|l| l.netns == first.netns).then_some(*first),
            None => {
                let found: Vec<&ListenerFact> = self.listeners.iter().filter(wildcard).collect();
                found.first().filter(|f| found.iter().all(|l| l.netns == f.netns)).copied()
            }
        }?;
        let n = self.counters.get(&l.netns);
        let count = |name| n.map_or(0, |n| n.get(name));
        Some(ServerSide {
            netns: l.netns,
            ns: self.ns(l.netns),
            listener: l.addr,
            max_qlen: l.max_qlen,
            tcp_fastopen: self.tcp_fastopen.get(&l.netns).copied(),
            syncookies: self.syncookies.get(&l.netns).copied(),
            listen_overflows: count("TcpExtListenOverflows"),
            listen_drops: count("TcpExtListenDrops"),
            syncookies_sent: count("TcpExtSyncookiesSent"),
            tfo_queue_overflows: count("TcpExtTCPFastOpenListenOverflow"),
            cookie_requests: count("TcpExtTCPFastOpenCookieReqd"),
        })
    }

    /// The tcp_metrics entry of a row that is one destination in one namespace.
    pub(super) fn metric(&self, key: &GroupKey) -> Option<&TcpMetric> {
        let GroupKey::Destination(d) = key else { return None };
        self.tcp_metrics.get(&d.netns?)?.iter().find(|m| m.dst == d.ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(netns: u32, addr: &str) -> ListenerFact {
        ListenerFact { netns, addr: addr.parse().unwrap(), max_qlen: Some(16) }
    }

    #[test]
    fn the_server_of_a_destination_is_one_namespace_or_none() {
        let dst: SocketAddr = "198.18.0.2:8080".parse().unwrap();
        let mut facts = Facts::default();
        assert_eq!(facts.server_of(dst), None, "a recording: no listeners");
        facts.listeners = vec![listener(7, "0.0.0.0:8080"), listener(8, "198.18.0.2:8080")];
        assert_eq!(facts.server_of(dst).map(|s| s.netns), Some(8), "its own address first");
        facts.listeners = vec![listener(7, "[::]:8080"), listener(7, "0.0.0.0:9090")];
        assert_eq!(facts.server_of(dst).map(|s| s.netns), Some(7), "a dual-stack wildcard");
        facts.listeners = vec![listener(7, "0.0.0.0:8080"), listener(9, "0.0.0.0:8080")];
        assert_eq!(facts.server_of(dst), None, "two namespaces could be it");
        facts.listeners = vec![listener(8, "198.18.0.2:8080"), listener(9, "198.18.0.2:8080")];
        assert_eq!(facts.server_of(dst), None, "an address reused in two namespaces");
        let v6: SocketAddr = "[fd00::2]:8080".parse().unwrap();
        facts.listeners = vec![listener(7, "0.0.0.0:8080")];
        assert_eq!(facts.server_of(v6), None, "an IPv4 wildcard takes no IPv6");
    }
}
