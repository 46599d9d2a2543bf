//! The verdict on a listener: its server events, each host's share, and the figures of the
//! kernel's facts about that listening socket (`views/report/verdict/listener.rs` says
//! them).
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::{
    classify::{self, listener_shown_by, Strength},
    evidence::{HostShare, Support, Verdict},
};
use crate::aggregation::{
    counting::OutcomeCounts,
    report::{facts::Facts, key_change::KeyChange},
};

/// Server side, one listening port in one namespace (in a report of several hosts: one
/// port on all of them). Its JSON is the view's, as for [`super::DestinationReport`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ListenerReport {
    pub listener: String,
    pub netns: Option<u32>,
    pub outcomes: BTreeMap<String, u64>,
    pub max_qlen: Option<u32>,
    pub hosts: Vec<HostShare>,
    #[serde(skip)]
    pub verdict: Verdict<ListenerFigures>,
}

/// What a listener's sentence and evidence are said from, beyond the row's own figures.
#[derive(Clone, Debug, PartialEq)]
pub struct ListenerFigures {
    /// Its server events by outcome.
    pub counts: OutcomeCounts,
    /// Its namespace as the report names it, and that namespace's somaxconn and whether a
    /// backup key is set, where read.
    pub ns: String,
    pub somaxconn: Option<u32>,
    pub backup_key: Option<bool>,
    /// The namespace's counter deltas the evidence cites, where read:
    /// TcpExtTCPFastOpenListenOverflow, PassiveFail and PassiveAltKey.
    pub listen_overflow: Option<u64>,
    pub passive_fail: Option<u64>,
    pub passive_alt_key: Option<u64>,
    /// Its TFO children made from a cookie without data.
    pub without_data: u64,
    /// The report has several hosts: the evidence says how many show it.
    pub fleet: bool,
}

/// The verdict on one listener (named by its bound address: [`crate::events::EventRef::listener_name`]):
/// its events (with its children made from a cookie without data), each host's share, and
/// the kernel's facts about that listening socket.
pub(crate) fn listener_row(
    netns: Option<u32>,
    listener: SocketAddr,
    (t, key, without_data): (&OutcomeCounts, &KeyChange, u64),
    hosts: &[(String, &OutcomeCounts)],
    fleet: bool,
    facts: &Facts,
) -> ListenerReport {
    let fact = netns.and_then(|ns| facts.listeners.iter().find(|l| l.netns == ns && l.addr == listener));
    let max_qlen = fact.and_then(|f| f.max_qlen);
    let counters = netns.and_then(|n| facts.counters.get(&n));
    let counter = |key: &str| counters.map(|n| n.get(key));
    let kind = classify::of_listener(t, key);
    let shown = |t: &OutcomeCounts| listener_shown_by(kind, t).0;
    let mut hosts: Vec<HostShare> = hosts
        .iter()
        .map(|(h, t)| HostShare {
            host: h.clone(),
            connections: t.total(),
            showing: shown(t),
            stalled: 0,
            lost_us_total: 0,
        })
        .collect();
    hosts.sort_by(|a, b| {
        b.showing.cmp(&a.showing).then(b.connections.cmp(&a.connections)).then(a.host.cmp(&b.host))
    });
    let (showing, of) = listener_shown_by(kind, t);
    let support = Support {
        connections: showing,
        of_connections: of,
        hosts: hosts.iter().filter(|h| h.showing > 0).count() as u64,
        of_hosts: hosts.len() as u64,
        ..Default::default()
    };
    let figures = ListenerFigures {
        counts: *t,
        ns: netns.map(|n| facts.ns(n)).unwrap_or_else(|| "the listener's namespace".into()),
        somaxconn: netns.and_then(|n| facts.somaxconn.get(&n).copied()),
        backup_key: netns.and_then(|n| facts.backup_key.get(&n).copied()),
        listen_overflow: counter("TcpExtTCPFastOpenListenOverflow"),
        passive_fail: counter("TcpExtTCPFastOpenPassiveFail"),
        passive_alt_key: counter("TcpExtTCPFastOpenPassiveAltKey"),
        without_data,
        fleet,
    };
    ListenerReport {
        listener: listener.to_string(),
        netns,
        outcomes: t.by_name(),
        max_qlen,
        hosts,
        verdict: Verdict { kind, strength: Strength::of(showing, of), support, figures },
    }
}
