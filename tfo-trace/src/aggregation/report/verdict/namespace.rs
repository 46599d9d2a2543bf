//! What the kernel's per-namespace facts say apart from the events: counter deltas that no
//! event of the running backend explains ([`namespace_findings`]), and destinations the TFO
//! cache remembers losing SYN-data to with no connection in the window ([`cached_drops`]).
//! The figures only: `views/report/verdict/namespace.rs` says them.
use std::{
    collections::BTreeSet,
    net::{IpAddr, SocketAddr},
};

use serde::Serialize;

use super::{
    classify::{Kind, Strength},
    evidence::{Support, Verdict},
    listener::ListenerReport,
};
use crate::{
    aggregation::{
        blackhole::{PauseSummary, Pauses},
        kernel_counted,
        report::facts::Facts,
    },
    backends::{self, Backend},
    events::{Outcome, Role},
    kernel::{netstat::Netstat, tcp_metrics::TcpMetric},
};

/// From a namespace's counters, for what the backend's events cannot show: counted by
/// the kernel, never attributed to a listener or a process.
#[derive(Clone, Debug, PartialEq)]
pub struct NamespaceFinding {
    pub netns: u32,
    pub verdict: Verdict<NamespaceFigures>,
    /// Where its counts come from: [`crate::aggregation::kernel_counted::SOURCE`], or `events` (a
    /// pause that a hook's `active_disabled` events tell).
    pub source: &'static str,
    /// `active_tfo_paused`: the pauses' figures (which connection tripped each, when it
    /// ends, the connections left without TFO by destination).
    pub pause: Option<crate::aggregation::blackhole::PauseSummary>,
}

/// What a namespace's finding is said from: the namespace as the report names it, the
/// backend whose hooks could not see it, and what was counted.
#[derive(Clone, Debug, PartialEq)]
pub struct NamespaceFigures {
    pub ns: String,
    /// `tracepoint`, or `running` where the report does not know.
    pub backend: String,
    pub counted: Counted,
}

/// What a namespace's counters (or a hook's pauses) counted, one variant per finding.
#[derive(Clone, Debug, PartialEq)]
pub enum Counted {
    /// TcpExtTCPFastOpenListenOverflow beyond the events', and the namespace's TFO listeners
    /// (address, max_qlen) and somaxconn.
    ListenOverflow { overflow: u64, listeners: Vec<(SocketAddr, u32)>, somaxconn: Option<u32> },
    /// TcpExtTCPFastOpenPassiveFail beyond the events', the SYN-data accepted beside it, and
    /// whether the namespace has no backup key.
    PassiveFail { fail: u64, accepted: u64, no_backup: bool },
    /// TcpExtSyncookiesSent and what else the namespace counted of those SYNs, its
    /// tcp_syncookies, and its TFO listeners (address, max_qlen).
    Syncookies {
        sent: u64,
        passive: u64,
        passive_fail: u64,
        recv: u64,
        sysctl: Option<u32>,
        listeners: Vec<(SocketAddr, u32)>,
    },
    /// Blackhole detection's pauses (the same as the finding's `pause`), and
    /// TcpExtTCPFastOpenBlackhole.
    Pause { pause: PauseSummary, counter: u64 },
    /// TcpExtTCPFastOpenCookieReqd where no hook sees cookie requests.
    CookieRequests { asked: u64 },
    /// TcpExtTCPFastOpenPassiveAltKey beyond the events'.
    AltKey { alt: u64 },
}

/// A destination the kernel's TFO cache (`ip tcp_metrics`) remembers losing SYN-data to,
/// with no connection to it in the window: what the cache says, kept apart from the
/// window's connections (its drops are the kernel's memory, not connections seen).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CachedDrops {
    /// `[fd53::3]:*`, `10.1.2.3:*`: the cache is kept per address, for every port.
    pub destination: String,
    pub netns: u32,
    /// SYN-data lost towards it, as the cache counts them (reset when one is acked again).
    pub fo_syn_drops: u32,
    /// Seconds since the last loss, and since the entry was last updated, where shown.
    pub last_drop_s_ago: Option<f64>,
    pub entry_age_s: Option<f64>,
    /// Its namespace as the report names it.
    #[serde(skip)]
    pub ns: String,
}

pub(crate) fn cached_drops(m: &TcpMetric, netns: u32, facts: &Facts) -> CachedDrops {
    let destination = match m.dst {
        IpAddr::V4(a) => format!("{a}:*"),
        IpAddr::V6(a) => format!("[{a}]:*"),
    };
    CachedDrops {
        destination,
        netns,
        fo_syn_drops: m.fo_syn_drops,
        last_drop_s_ago: m.fo_syn_drop_age_s,
        entry_age_s: m.age_s,
        ns: facts.ns(netns),
    }
}

/// The backend whose events the report holds, where it is known (a live report's).
fn backend_of(facts: &Facts) -> Option<Backend> {
    let name = facts.backend.as_deref()?;
    Backend::ALL.into_iter().find(|b| b.name() == name)
}

/// A finding of a namespace counter's delta `n`: what it counted is all it rests on.
fn finding(netns: u32, kind: Kind, n: u64, figures: NamespaceFigures) -> NamespaceFinding {
    let support = Support { connections: n, of_connections: n, hosts: 1, of_hosts: 1, ..Default::default() };
    NamespaceFinding {
        netns,
        source: kernel_counted::SOURCE,
        verdict: Verdict { kind, strength: Strength::of(n, n), support, figures },
        pause: None,
    }
}

/// Counter deltas the events do not explain, because the backend cannot see them, and
/// what blackhole detection's pauses did to each client namespace ([`Pauses`]).
pub(crate) fn namespace_findings(
    listeners: &[ListenerReport],
    facts: &Facts,
    pauses: &Pauses,
) -> Vec<NamespaceFinding> {
    let backend = facts.backend.as_deref().unwrap_or("running");
    // Outcomes only a namespace counter sees on this backend, said from the counter.
    let blind = |role, outcome| backend_of(facts).is_some_and(|b| !backends::sees(b, role, outcome));
    let mut out = Vec::new();
    let none = Netstat::default();
    let mut namespaces: BTreeSet<u32> = facts.counters.keys().copied().collect();
    namespaces.extend(pauses.namespaces());
    for netns in namespaces {
        let n = facts.counters.get(&netns).unwrap_or(&none);
        let figures =
            |counted| NamespaceFigures { ns: facts.ns(netns), backend: backend.to_string(), counted };
        let seen = |o: Outcome| -> u64 {
            listeners
                .iter()
                .filter(|l| l.netns == Some(netns))
                .map(|l| l.outcomes.get(o.name()).copied().unwrap_or(0))
                .sum()
        };
        let tfo_listeners: Vec<(SocketAddr, u32)> = facts
            .listeners
            .iter()
            .filter(|l| l.netns == netns && l.max_qlen.unwrap_or(0) > 0)
            .map(|l| (l.addr, l.max_qlen.unwrap_or(0)))
            .collect();
        let overflow = n.get("TcpExtTCPFastOpenListenOverflow");
        if overflow > seen(Outcome::QueueOverflow) {
            let somaxconn = facts.somaxconn.get(&netns).copied();
            let counted = Counted::ListenOverflow { overflow, listeners: tfo_listeners.clone(), somaxconn };
            out.push(finding(netns, Kind::QueueOverflow, overflow, figures(counted)));
        }
        let fail = n.get("TcpExtTCPFastOpenPassiveFail");
        if fail > seen(Outcome::CookieInvalid) {
            // With SYN-data accepted beside them and no backup key, a key changed without a
            // backup: each client's old cookie is refused once, then its new one works.
            let accepted = seen(Outcome::Accepted);
            let no_backup = facts.backup_key.get(&netns) == Some(&false);
            let kind = if accepted >= fail && no_backup {
                Kind::KeyRotatedWithoutBackup
            } else {
                Kind::CookieInvalid
            };
            out.push(finding(netns, kind, fail, figures(Counted::PassiveFail { fail, accepted, no_backup })));
        }
        let sent = n.get("TcpExtSyncookiesSent");
        if sent > 0 {
            // The kernel skips TFO for a SYN answered with a syncookie (tcp_conn_request():
            // no tcp_try_fastopen() when it wants a cookie): no hook of any backend sees it.
            let counted = Counted::Syncookies {
                sent,
                passive: n.get("TcpExtTCPFastOpenPassive"),
                passive_fail: n.get("TcpExtTCPFastOpenPassiveFail"),
                recv: n.get("TcpExtSyncookiesRecv"),
                sysctl: facts.syncookies.get(&netns).copied(),
                listeners: tfo_listeners,
            };
            out.push(finding(netns, Kind::Syncookies, sent, figures(counted)));
        }
        let paused = n.get("TcpExtTCPFastOpenBlackhole");
        let counted_pauses = blind(Role::Client, Outcome::ActiveDisabled).then_some(paused);
        let timeout = facts.blackhole_timeout_s.get(&netns).copied();
        if let Some(p) = pauses.summary(netns, counted_pauses, timeout) {
            let from_events = p.from_events;
            let mut f = finding(
                netns,
                Kind::ActiveTfoPaused,
                p.pauses.max(1),
                figures(Counted::Pause { pause: p.clone(), counter: paused }),
            );
            (f.netns, f.pause) = (p.netns, Some(p));
            if from_events {
                f.source = "events";
            }
            out.push(f);
        }
        let asked = n.get("TcpExtTCPFastOpenCookieReqd");
        if asked > 0 && blind(Role::Server, Outcome::CookieRequested) {
            out.push(finding(netns, Kind::Info, asked, figures(Counted::CookieRequests { asked })));
        }
        let alt = n.get("TcpExtTCPFastOpenPassiveAltKey");
        if alt > seen(Outcome::AcceptedAltKey) {
            out.push(finding(netns, Kind::KeyRotated, alt, figures(Counted::AltKey { alt })));
        }
    }
    out
}
