//! What the kernel says besides the events, for `report`'s verdicts: `ip tcp_metrics` per
//! client namespace, listeners and their TFO queue sizes, counter deltas, backup keys,
//! somaxconn. Gathered by `views::report` for a live run; a recording replayed elsewhere
//! has none of it.
use std::{collections::BTreeMap, net::SocketAddr};

use serde::Serialize;

use super::grouping::GroupKey;
use crate::kernel::{netstat::Netstat, tcp_metrics::TcpMetric};

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
    /// Namespace inode -> `ip netns` name, for readable evidence.
    pub netns_names: BTreeMap<u32, String>,
    /// The backend that produced the events (its blind spots are named in findings).
    pub backend: Option<String>,
}

impl Facts {
    /// `netns lab-srv`, or `netns 4026532246` for a namespace with no `ip netns` name.
    pub(crate) fn ns(&self, netns: u32) -> String {
        match self.netns_names.get(&netns) {
            Some(n) => format!("netns {n}"),
            None => format!("netns {netns}"),
        }
    }
}

impl Facts {
    /// The tcp_metrics entry of a row that is one destination in one namespace.
    pub(super) fn metric(&self, key: &GroupKey) -> Option<&TcpMetric> {
        let GroupKey::Destination(d) = key else { return None };
        self.tcp_metrics.get(&d.netns?)?.iter().find(|m| m.dst == d.ip)
    }
}
