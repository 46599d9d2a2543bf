//! Verdicts for `tfo-trace report`: per destination or group of them (client side) and per
//! listener (server side), the counts by outcome, the time TFO cost, and one plain sentence
//! saying what is wrong and what to do, with the evidence it rests on and how strong that
//! is ([`Strength`]: how many connections, destinations and hosts show it). Pure: counts
//! (gathered by `aggregation::report`) and kernel facts (by `views::report`) in, rows out.
//!
//! The facts the kernel gives are used where they exist: `ip tcp_metrics` (fo_syn_drops and
//! the cached cookie per destination), counter deltas per namespace
//! (TcpExtTCPFastOpenListenOverflow, PassiveFail, PassiveAltKey), listener TFO queue sizes
//! (max_qlen) and somaxconn, and whether a backup key is set.
//!
//! What the running backend cannot see cannot become an event verdict: on the tracepoint
//! backend (this project's host, Linux 6.18 without fentry or kprobes) the server outcomes
//! `queue_overflow`, `cookie_invalid`, `accepted_alt_key` and `listener_disabled` never
//! appear, so the verdicts built on them are unit-tested here on synthetic events; on that
//! backend the namespace's counters stand in ([`NamespaceFinding`]).
use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
};

use serde::Serialize;

use crate::{
    aggregation::{connections::ConnAcc, counting::OutcomeCounts, grouping::GroupKey, stall::Cause},
    events::Outcome,
    kernel::{netstat::Netstat, tcp_metrics::TcpMetric},
    units,
};

/// A TFO listener as the kernel shows it (see `kernel::listeners::tfo_listeners`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ListenerFact {
    pub netns: u32,
    pub addr: SocketAddr,
    /// fastopenq.max_qlen (getsockopt TCP_FASTOPEN); 0 = TFO off on this listener.
    pub max_qlen: Option<u32>,
}

/// What the kernel says besides the events. Everything is optional: a recording replayed
/// elsewhere has none of it.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// `ip tcp_metrics` per client namespace (inode); absent namespaces were not read.
    pub tcp_metrics: BTreeMap<u32, Vec<TcpMetric>>,
    pub listeners: Vec<ListenerFact>,
    /// Counter deltas over the window per namespace.
    pub counters: BTreeMap<u32, Netstat>,
    /// A backup TFO key is set, per namespace.
    pub backup_key: BTreeMap<u32, bool>,
    /// net.core.somaxconn per namespace.
    pub somaxconn: BTreeMap<u32, u32>,
    /// Namespace inode -> `ip netns` name, for readable evidence.
    pub netns_names: BTreeMap<u32, String>,
    /// The backend that produced the events (its blind spots are named in findings).
    pub backend: Option<String>,
}

impl Facts {
    fn ns(&self, netns: u32) -> String {
        match self.netns_names.get(&netns) {
            Some(n) => format!("netns {n}"),
            None => format!("netns {netns}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// TFO works: every SYN-data accepted.
    Healthy,
    /// Nothing wrong, nothing to judge yet (cookie requests only, no traffic).
    Info,
    SynDataDropped,
    CookieRequestDropped,
    ServerStoppedTfo,
    ConnectFailed,
    NotAttempted,
    QueueOverflow,
    CookieInvalid,
    KeyRotated,
    ListenerDisabled,
}

impl Kind {
    /// The JSON name (`syn_data_dropped`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Healthy => "healthy",
            Kind::Info => "info",
            Kind::SynDataDropped => "syn_data_dropped",
            Kind::CookieRequestDropped => "cookie_request_dropped",
            Kind::ServerStoppedTfo => "server_stopped_tfo",
            Kind::ConnectFailed => "connect_failed",
            Kind::NotAttempted => "not_attempted",
            Kind::QueueOverflow => "queue_overflow",
            Kind::CookieInvalid => "cookie_invalid",
            Kind::KeyRotated => "key_rotated",
            Kind::ListenerDisabled => "listener_disabled",
        }
    }

    /// The client-side verdict of a group of connections: the first that applies.
    pub fn of_clients(a: &ConnAcc) -> Kind {
        let c = |o| a.count(o);
        if a.syn_data_dropped() > 0 {
            Kind::SynDataDropped
        } else if c(Outcome::DataNotAcked) > 0 {
            Kind::ServerStoppedTfo
        } else if a.stalls_of(Cause::CookieRequestDropped) > 0 {
            Kind::CookieRequestDropped
        } else if c(Outcome::ConnectFailed) > 0 {
            Kind::ConnectFailed
        } else if c(Outcome::NotAttempted) > 0 && c(Outcome::Accepted) == 0 {
            Kind::NotAttempted
        } else if c(Outcome::Accepted) > 0 {
            Kind::Healthy
        } else {
            Kind::Info
        }
    }

    /// For a client verdict: how many connections show it, of how many that could.
    pub fn shown_by(self, a: &ConnAcc) -> (u64, u64) {
        let c = |o| a.count(o);
        let cookie_dropped = a.stalls_of(Cause::CookieRequestDropped);
        match self {
            Kind::SynDataDropped => (a.syn_data_dropped(), a.syn_data_sent()),
            Kind::ServerStoppedTfo => (c(Outcome::DataNotAcked), a.syn_data_sent()),
            Kind::CookieRequestDropped => {
                (cookie_dropped, c(Outcome::CookieRequested).saturating_add(cookie_dropped))
            }
            Kind::ConnectFailed => (c(Outcome::ConnectFailed), a.connections()),
            Kind::NotAttempted => (c(Outcome::NotAttempted), a.connections()),
            Kind::Healthy => (c(Outcome::Accepted), a.syn_data_sent()),
            _ => (c(Outcome::CookieRequested), a.connections()),
        }
    }

    /// Problems before the rest, for rows that lost the same time.
    pub fn severity(self) -> u8 {
        match self {
            Kind::Healthy | Kind::Info => 0,
            Kind::NotAttempted | Kind::KeyRotated => 1,
            Kind::ConnectFailed => 2,
            Kind::ServerStoppedTfo | Kind::CookieInvalid | Kind::ListenerDisabled => 3,
            Kind::QueueOverflow => 4,
            Kind::CookieRequestDropped => 5,
            Kind::SynDataDropped => 6,
        }
    }
}

/// How much a verdict rests on: [`Strength::of`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strength {
    #[default]
    Weak,
    Moderate,
    Strong,
}

impl Strength {
    /// `showing` connections show the verdict, of `of` that could: strong from 30 of them
    /// and at least half; moderate from 3 (or a minority of many); weak below 3: one
    /// connection in one is an anecdote, 900 in 1,000 a pattern.
    pub fn of(showing: u64, of: u64) -> Strength {
        if showing >= 30 && showing.saturating_mul(2) >= of {
            Strength::Strong
        } else if showing >= 3 {
            Strength::Moderate
        } else {
            Strength::Weak
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Strength::Weak => "weak",
            Strength::Moderate => "moderate",
            Strength::Strong => "strong",
        }
    }
}

/// What a verdict rests on, in counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Support {
    /// Connections (or, for a namespace's counters, counted events) that show the verdict,
    /// and how many could have.
    pub connections: u64,
    pub of_connections: u64,
    /// Client side: destinations that show it, of the row's destinations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destinations: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub of_destinations: Option<u64>,
    /// Hosts (recordings) that show it, of those that had connections in the row.
    pub hosts: u64,
    pub of_hosts: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub kind: Kind,
    /// One plain sentence: what happens and what to do.
    pub sentence: String,
    /// The facts it rests on, one per line.
    pub evidence: Vec<String>,
    /// weak, moderate or strong ([`Strength::of`] on `support`).
    pub strength: Strength,
    pub support: Support,
}

/// One host's share of a row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HostShare {
    pub host: String,
    /// Its connections in the row (server side: events), and how many of them show the verdict.
    pub connections: u64,
    pub showing: u64,
    pub stalled: u64,
    pub lost_us_total: u64,
}

/// Client side: one destination in one namespace, or one group of them (`--group-by`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DestinationReport {
    /// The row's name: the destination (`198.18.0.2:8080`), or the group's (`198.18.0.0/24`,
    /// `port 443`, `process curl`, `container 3f2a9c1b0d4e`).
    pub destination: String,
    /// The same name, under the name every grouping shares.
    pub group: String,
    /// The client's namespace (grouping by destination on one host; null otherwise).
    pub netns: Option<u32>,
    /// Destinations in the row (1 when grouping by destination).
    pub destinations: u64,
    /// Connections with a TFO outcome (one event each).
    pub connections: u64,
    pub outcomes: BTreeMap<String, u64>,
    /// Connections whose SYN carried data.
    pub syn_data_sent: u64,
    pub accepted: u64,
    /// SYN-data that timed out and was resent as a plain SYN (dropped on the path).
    pub syn_data_dropped: u64,
    /// SYN-data the SYN-ACK did not acknowledge.
    pub data_not_acked: u64,
    /// Connections that lost time to a SYN timeout (see `aggregation::stall`).
    pub stalled: u64,
    /// Time the stalls lost.
    pub lost_us_total: u64,
    /// Mean over the stalled connections.
    pub lost_us_per_stalled: u64,
    /// Mean over all connections.
    pub lost_us_per_connection: u64,
    /// Not stalls: the data not acked went again after the handshake, one extra round trip
    /// per such connection, estimated by its handshake time (in none of the `lost_us_*`).
    pub extra_round_trips: u64,
    pub extra_round_trip_us: u64,
    /// Each host's share, the most affected first.
    pub hosts: Vec<HostShare>,
    pub verdict: Verdict,
}

/// Server side, one listening port in one namespace (in a report of several hosts: one
/// port on all of them).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ListenerReport {
    pub listener: String,
    pub netns: Option<u32>,
    pub outcomes: BTreeMap<String, u64>,
    pub max_qlen: Option<u32>,
    pub hosts: Vec<HostShare>,
    pub verdict: Verdict,
}

/// From a namespace's counters, for what the backend's events cannot show: counted by
/// the kernel, never attributed to a listener or a process.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NamespaceFinding {
    pub netns: u32,
    pub verdict: Verdict,
    /// Where its counts come from: [`super::kernel_counted::SOURCE`].
    pub source: &'static str,
}

/// A row of the client side, gathered (by `aggregation::report`) and ready for its verdict.
#[derive(Clone, Debug)]
pub struct ClientRow {
    pub key: GroupKey,
    pub label: String,
    /// How the sentences name where the connections went ([`GroupKey::subject`]).
    pub subject: String,
    pub acc: ConnAcc,
    /// [`Kind::of_clients`] of `acc`.
    pub kind: Kind,
    /// Destinations in the row, and how many of them show the verdict.
    pub destinations: u64,
    pub destinations_showing: u64,
    /// Each host's share (`showing` by the verdict's kind), most affected first.
    pub hosts: Vec<HostShare>,
    /// The report has several hosts: sentences say how many show it.
    pub fleet: bool,
    /// Its destinations that lost the most time, for a row of several.
    pub worst: Vec<(String, u64)>,
}

impl Facts {
    fn metric(&self, key: &GroupKey) -> Option<&TcpMetric> {
        let GroupKey::Destination(d) = key else { return None };
        self.tcp_metrics.get(&d.netns?)?.iter().find(|m| m.dst == d.ip)
    }
}

/// A name that hosts that show a verdict share and the others do not: a domain
/// (`*.ams1.example.net`) or a name prefix (`web-ams-*`). "All in one site" is often the
/// whole diagnosis.
pub fn shared_site(showing: &[&str], others: &[&str]) -> Option<String> {
    if showing.len() < 2 {
        return None;
    }
    // The longest domain every one of them ends with (labels after the host's own).
    let domain = |h: &str| h.split_once('.').map(|(_, d)| d.to_string());
    let mut common: Option<String> = domain(showing[0]);
    for h in &showing[1..] {
        let (Some(c), Some(d)) = (&common, domain(h)) else {
            return None.or_else(|| prefix_site(showing, others));
        };
        let a: Vec<&str> = c.rsplit('.').collect();
        let b: Vec<&str> = d.rsplit('.').collect();
        let n = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        common = (n > 0).then(|| a[..n].iter().rev().copied().collect::<Vec<_>>().join("."));
    }
    if let Some(d) = common.filter(|d| d.contains('.') || !d.is_empty()) {
        if !others.iter().any(|o| o.ends_with(&format!(".{d}"))) {
            return Some(format!("*.{d}"));
        }
    }
    prefix_site(showing, others)
}

fn prefix_site(showing: &[&str], others: &[&str]) -> Option<String> {
    let first = showing[0];
    let mut n = first.len();
    for h in &showing[1..] {
        n = n.min(first.bytes().zip(h.bytes()).take_while(|(a, b)| a == b).count());
    }
    // Cut back to a separator: `web-ams-` of `web-ams-1` and `web-ams-2`, not `web-ams-1`.
    let cut = first[..n].rfind(['-', '.', '_']).map(|i| i + 1)?;
    let p = &first[..cut];
    (cut > 1 && !others.iter().any(|o| o.starts_with(p))).then(|| format!("{p}*"))
}

/// The verdict on a row of client connections, with its evidence.
pub fn client_report(row: ClientRow, facts: &Facts) -> DestinationReport {
    let a = &row.acc;
    let c = |o| a.count(o);
    let subj = &row.subject;
    let many = !matches!(row.key, GroupKey::Destination(_));
    let it = if many { "them" } else { "it" };
    let accepted = c(Outcome::Accepted);
    let not_acked = c(Outcome::DataNotAcked);
    let dropped = a.syn_data_dropped();
    let cookie_dropped = a.stalls_of(Cause::CookieRequestDropped);
    let failed = c(Outcome::ConnectFailed);
    let not_attempted = c(Outcome::NotAttempted);
    let cookie_req = c(Outcome::CookieRequested);
    let sent = a.syn_data_sent();
    let connections = a.connections();
    let drop_lost = a.lost_us_of(Cause::SynDataDropped);
    let cookie_drop_lost = a.lost_us_of(Cause::CookieRequestDropped);
    let each = |total: u64, n: u64| units::duration_us(total / n.max(1));
    let hosts_showing = row.hosts.iter().filter(|h| h.showing > 0).count() as u64;
    let of_hosts = row.hosts.len() as u64;
    // Where it shows, after "N of M connections": destinations of a group, hosts of a fleet.
    let mut spread = String::new();
    if many {
        spread.push_str(&format!(
            " ({} of {})",
            units::count(row.destinations_showing),
            units::plural(row.destinations, "destination", "destinations")
        ));
    }
    if row.fleet {
        spread.push_str(&format!(
            ", from {} of {} hosts",
            units::count(hosts_showing),
            units::count(of_hosts)
        ));
    }

    let metric = facts.metric(&row.key);
    let mut evidence = Vec::new();
    let ns = match row.key.netns() {
        Some(n) => facts.ns(n),
        None => "the client's namespace".to_string(),
    };
    let metrics_line = |m: &TcpMetric| {
        let mut s = format!("ip tcp_metrics in {ns}: cookie {}", m.cookie_redacted());
        if let Some(mss) = m.fo_mss {
            s.push_str(&format!(", fo_mss {mss}"));
        }
        s.push_str(&format!(", fo_syn_drops {}", m.fo_syn_drops));
        if let Some(a) = m.fo_syn_drop_age_s.filter(|_| m.fo_syn_drops > 0) {
            s.push_str(&format!(" (last {} ago)", units::duration_s(a)));
        }
        s
    };

    let sentence = match row.kind {
        Kind::SynDataDropped => {
            evidence.push(format!(
                "{} timed out and went again as a plain SYN after the initial RTO (TcpExtTCPSynRetrans, \
                 TcpExtTCPFastOpenActiveFail), {} lost in total",
                units::plural(dropped, "SYN carrying data", "SYNs carrying data"),
                units::duration_us(drop_lost)
            ));
            if cookie_req > 0 || accepted > 0 || metric.is_some_and(|m| m.cookie_len.is_some()) {
                evidence.push(
                    "SYNs without data get through (the cookie was obtained): something on the path drops \
                     SYNs that carry data"
                        .into(),
                );
            }
            if accepted > 0 {
                evidence.push(format!(
                    "{} accepted: the drops are intermittent or path-dependent",
                    units::plural(accepted, "SYN-data was", "SYN-data were")
                ));
            }
            format!(
                "SYN-data to {subj} was dropped on the path in {} of {} connections{spread}, +{} each: \
                 disable TFO towards {it} or fix the path",
                units::count(dropped),
                units::count(sent),
                each(drop_lost, dropped)
            )
        }
        Kind::ServerStoppedTfo => {
            let accepted_before = match (a.first_accepted_ns, a.first_not_acked_ns) {
                (Some(acc), Some(fail)) => acc < fail,
                _ => false,
            };
            let why = match (accepted_before, many) {
                (true, _) => "cookie accepted earlier",
                (false, false) => "the client sent a cookie it got from that server",
                (false, true) => "the clients sent cookies they got from those servers",
            };
            evidence.push(format!(
                "{} not acknowledged by the SYN-ACK (TcpExtTCPFastOpenActiveFail): the data went again \
                 after the handshake, +{} each",
                units::plural(not_acked, "SYN-data", "SYN-data"),
                each(a.extra_round_trip_us, not_acked)
            ));
            evidence.push(
                "likely: TFO turned off on the server (tcp_fastopen bit 0x2 or TCP_FASTOPEN), its key \
                 changed without keeping the old one as backup, or its TFO queue full"
                    .into(),
            );
            let who = if many {
                format!("servers at {subj} no longer accept")
            } else {
                format!("server {subj} no longer accepts")
            };
            format!(
                "{who} TFO: {} of {} SYN-data not acknowledged{spread} ({why})",
                units::count(not_acked),
                units::count(sent)
            )
        }
        Kind::CookieRequestDropped => {
            evidence.push(format!(
                "{} with an empty TFO option timed out, {} lost",
                units::plural(cookie_dropped, "SYN", "SYNs"),
                units::duration_us(cookie_drop_lost)
            ));
            format!(
                "cookie requests to {subj} were lost in {} of {} connections{spread}, +{} each: something on \
                 the path drops SYNs with the TFO option; disable TFO towards {it}",
                units::count(cookie_dropped),
                units::count(cookie_req.saturating_add(cookie_dropped)),
                each(cookie_drop_lost, cookie_dropped)
            )
        }
        Kind::ConnectFailed => format!(
            "{} to {subj} never completed{spread}: check that {} reachable",
            units::plural(failed, "TFO connection", "TFO connections"),
            if many { "the servers are" } else { "the server is" }
        ),
        Kind::NotAttempted => {
            evidence.push("the SYN carried no TFO option although the application asked for TFO".into());
            format!(
                "TFO to {subj} was not attempted in {} of {} connections{spread}: active TFO is off in {ns} \
                 (sysctl bit 0x1) or paused after a detected blackhole",
                units::count(not_attempted),
                units::count(connections)
            )
        }
        Kind::Healthy => format!(
            "TFO works towards {subj}: {} of {} SYN-data accepted{spread}",
            units::count(accepted),
            units::count(sent)
        ),
        _ => format!(
            "{subj}: {}{spread}, no SYN-data yet (the first connection to a server fetches the cookie)",
            units::plural(cookie_req, "cookie request", "cookie requests")
        ),
    };
    if let Some(m) = metric {
        evidence.push(metrics_line(m));
    }
    let worst: Vec<String> = row
        .worst
        .iter()
        .filter(|(_, l)| *l > 0)
        .map(|(d, l)| format!("{d} ({})", units::duration_us(*l)))
        .collect();
    if many && !worst.is_empty() {
        evidence.push(format!("most time lost: {}", worst.join(", ")));
    }
    if row.fleet {
        evidence.push(hosts_line(&row.hosts));
    }
    let (showing, of) = row.kind.shown_by(a);
    let support = Support {
        connections: showing,
        of_connections: of,
        destinations: Some(row.destinations_showing),
        of_destinations: Some(row.destinations),
        hosts: hosts_showing,
        of_hosts,
    };
    let lost = a.lost_us_total();
    let stalled = a.stalled();
    DestinationReport {
        destination: row.label.clone(),
        group: row.label,
        netns: row.key.netns(),
        destinations: row.destinations,
        connections,
        outcomes: a.outcomes(),
        syn_data_sent: sent,
        accepted,
        syn_data_dropped: dropped,
        data_not_acked: not_acked,
        stalled,
        lost_us_total: lost,
        lost_us_per_stalled: lost / stalled.max(1),
        lost_us_per_connection: lost / connections.max(1),
        extra_round_trips: a.extra_round_trips(),
        extra_round_trip_us: a.extra_round_trip_us,
        hosts: row.hosts,
        verdict: Verdict { kind: row.kind, sentence, evidence, strength: Strength::of(showing, of), support },
    }
}

/// How many hosts show it, the first few named, and a site they share if they do.
fn hosts_line(hosts: &[HostShare]) -> String {
    const NAMED: usize = 3;
    let showing: Vec<&HostShare> = hosts.iter().filter(|h| h.showing > 0).collect();
    let mut line = format!(
        "hosts: {} of {} show it",
        units::count(showing.len() as u64),
        units::count(hosts.len() as u64)
    );
    if showing.is_empty() {
        return line;
    }
    let named: Vec<String> = showing
        .iter()
        .take(NAMED)
        .map(|h| format!("{} ({} of {})", h.host, units::count(h.showing), units::count(h.connections)))
        .collect();
    line.push_str(&format!(": {}", named.join(", ")));
    if showing.len() > NAMED {
        line.push_str(&format!(" and {} more", units::count((showing.len() - NAMED) as u64)));
    }
    let names: Vec<&str> = showing.iter().map(|h| h.host.as_str()).collect();
    let others: Vec<&str> = hosts.iter().filter(|h| h.showing == 0).map(|h| h.host.as_str()).collect();
    if let Some(site) = shared_site(&names, &others) {
        line.push_str(&format!("; all of them {site}"));
    }
    line
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
    pub sentence: String,
}

pub fn cached_drops(m: &TcpMetric, netns: u32, facts: &Facts) -> CachedDrops {
    let destination = match m.dst {
        IpAddr::V4(a) => format!("{a}:*"),
        IpAddr::V6(a) => format!("[{a}]:*"),
    };
    let since =
        m.fo_syn_drop_age_s.map(|s| format!(", the last {} ago", units::duration_s(s))).unwrap_or_default();
    CachedDrops {
        sentence: format!(
            "the kernel's TFO cache (ip tcp_metrics in {}) holds {} to {destination} lost on the \
             path{since}; no connection went there in this window: expect a ~1s stall on the next \
             TFO connect there, until one SYN-data gets through",
            facts.ns(netns),
            units::plural(u64::from(m.fo_syn_drops), "SYN-data", "SYN-data"),
        ),
        destination,
        netns,
        fo_syn_drops: m.fo_syn_drops,
        last_drop_s_ago: m.fo_syn_drop_age_s,
        entry_age_s: m.age_s,
    }
}

/// The verdict on one listener (named as `ss -ltn` names it: [`crate::events::EventRef::listener_name`]):
/// its events, each host's share, and the kernel's facts about that listening socket.
pub fn listener_row(
    netns: Option<u32>,
    listener: SocketAddr,
    t: &OutcomeCounts,
    hosts: &[(String, &OutcomeCounts)],
    fleet: bool,
    facts: &Facts,
) -> ListenerReport {
    let fact = netns.and_then(|ns| facts.listeners.iter().find(|l| l.netns == ns && l.addr == listener));
    let mut r = listener_report(listener.to_string(), netns, t, fact.and_then(|f| f.max_qlen), facts);
    let shown = |t: &OutcomeCounts| listener_shown_by(r.verdict.kind, t).0;
    r.hosts = hosts
        .iter()
        .map(|(h, t)| HostShare {
            host: h.clone(),
            connections: t.total(),
            showing: shown(t),
            stalled: 0,
            lost_us_total: 0,
        })
        .collect();
    r.hosts.sort_by(|a, b| {
        b.showing.cmp(&a.showing).then(b.connections.cmp(&a.connections)).then(a.host.cmp(&b.host))
    });
    r.verdict.support.hosts = r.hosts.iter().filter(|h| h.showing > 0).count() as u64;
    r.verdict.support.of_hosts = r.hosts.len() as u64;
    if fleet {
        r.verdict.evidence.push(hosts_line(&r.hosts));
    }
    r
}

/// For a listener verdict: the events that show it, of the SYN-data (or cookie requests)
/// it got.
fn listener_shown_by(kind: Kind, t: &OutcomeCounts) -> (u64, u64) {
    let c = |o| t[o];
    let alt = c(Outcome::AcceptedAltKey);
    let accepted = c(Outcome::Accepted) + alt;
    let syn_data =
        accepted + c(Outcome::CookieInvalid) + c(Outcome::QueueOverflow) + c(Outcome::ListenerDisabled);
    match kind {
        Kind::QueueOverflow => (c(Outcome::QueueOverflow), syn_data),
        Kind::CookieInvalid => (c(Outcome::CookieInvalid), syn_data),
        Kind::KeyRotated => (alt, syn_data),
        Kind::ListenerDisabled => (c(Outcome::ListenerDisabled), syn_data),
        Kind::Healthy => (accepted, syn_data),
        _ => (c(Outcome::CookieRequested), c(Outcome::CookieRequested)),
    }
}

fn listener_report(
    listener: String,
    netns: Option<u32>,
    t: &OutcomeCounts,
    max_qlen: Option<u32>,
    facts: &Facts,
) -> ListenerReport {
    let c = |o| t[o];
    let overflow = c(Outcome::QueueOverflow);
    let invalid = c(Outcome::CookieInvalid);
    let alt = c(Outcome::AcceptedAltKey);
    let disabled = c(Outcome::ListenerDisabled);
    let accepted = c(Outcome::Accepted) + alt;
    let cookie_req = c(Outcome::CookieRequested);
    let syn_data = accepted + invalid + overflow + disabled;
    let counters = netns.and_then(|n| facts.counters.get(&n));
    let somaxconn = netns.and_then(|n| facts.somaxconn.get(&n).copied());
    let backup = netns.and_then(|n| facts.backup_key.get(&n).copied());
    let ns = netns.map(|n| facts.ns(n)).unwrap_or_else(|| "the listener's namespace".into());
    let mut evidence = Vec::new();
    let counter = |key: &str| counters.map(|n| n.get(key));

    let (kind, sentence) = if overflow > 0 {
        if let Some(n) = counter("TcpExtTCPFastOpenListenOverflow") {
            evidence.push(format!("TcpExtTCPFastOpenListenOverflow +{n} in {ns}"));
        }
        evidence.push(
            "each overflowed SYN-data fell back to a plain handshake: the data waits one round trip".into(),
        );
        (Kind::QueueOverflow, overflow_sentence(&listener, overflow, max_qlen, somaxconn))
    } else if invalid > 0 {
        if let Some(n) = counter("TcpExtTCPFastOpenPassiveFail") {
            evidence.push(format!("TcpExtTCPFastOpenPassiveFail +{n} in {ns}"));
        }
        let key = match backup {
            Some(false) => " and no backup key is set",
            _ => "",
        };
        (
            Kind::CookieInvalid,
            format!(
                "listener {listener}: {invalid} of {syn_data} SYN-data carried a cookie it no longer accepts \
                 (key rotated{key}): when rotating, keep the old key as backup (`sysctl -w \
                 net.ipv4.tcp_fastopen_key=NEW,OLD`)"
            ),
        )
    } else if alt > 0 {
        if let Some(n) = counter("TcpExtTCPFastOpenPassiveAltKey") {
            evidence.push(format!("TcpExtTCPFastOpenPassiveAltKey +{n} in {ns}"));
        }
        (
            Kind::KeyRotated,
            format!(
                "listener {listener}: the TFO key was rotated: {alt} of {syn_data} SYN-data carried a cookie of \
                 the backup key and were accepted; those clients get a new cookie on the next cookie request"
            ),
        )
    } else if disabled > 0 {
        (
            Kind::ListenerDisabled,
            format!(
                "listener {listener}: {disabled} SYN-data arrived but TFO is off on it: set TCP_FASTOPEN on \
                 the listener, or set bit 0x400 before it calls listen() (read only there)"
            ),
        )
    } else if accepted > 0 {
        (
            Kind::Healthy,
            format!(
                "listener {listener}: {} accepted",
                units::plural(accepted, "TFO connection", "TFO connections")
            ),
        )
    } else {
        (
            Kind::Info,
            format!(
                "listener {listener}: {} answered",
                units::plural(cookie_req, "cookie request", "cookie requests")
            ),
        )
    };
    if let Some(q) = max_qlen {
        evidence.push(format!("TFO queue max_qlen {q}"));
    }
    let (showing, of) = listener_shown_by(kind, t);
    let support =
        Support { connections: showing, of_connections: of, hosts: 1, of_hosts: 1, ..Default::default() };
    ListenerReport {
        listener,
        netns,
        outcomes: t.by_name(),
        max_qlen,
        hosts: Vec::new(),
        verdict: Verdict { kind, sentence, evidence, strength: Strength::of(showing, of), support },
    }
}

fn overflow_sentence(listener: &str, n: u64, max_qlen: Option<u32>, somaxconn: Option<u32>) -> String {
    let q = max_qlen.map(|q| format!("max_qlen {q}")).unwrap_or_else(|| "max_qlen unknown".into());
    let advice = match (max_qlen, somaxconn) {
        (Some(q), Some(s)) if q >= s => {
            format!("max_qlen is already at somaxconn ({s}): raise net.core.somaxconn first, then fastopen=")
        }
        _ => "raise fastopen= but keep it below somaxconn".into(),
    };
    format!("{listener}: {} ({q}); {advice}", units::plural(n, "TFO queue overflow", "TFO queue overflows"))
        .replacen(listener, &format!("listener {listener}"), 1)
}

/// A verdict on a namespace counter's delta `n`: what it counted is all it rests on.
fn counted(kind: Kind, sentence: String, evidence: Vec<String>, n: u64) -> Verdict {
    let support = Support { connections: n, of_connections: n, hosts: 1, of_hosts: 1, ..Default::default() };
    Verdict { kind, sentence, evidence, strength: Strength::of(n, n), support }
}

/// Counter deltas the events do not explain, because the backend cannot see them.
pub fn namespace_findings(listeners: &[ListenerReport], facts: &Facts) -> Vec<NamespaceFinding> {
    let backend = facts.backend.as_deref().unwrap_or("running");
    let mut out = Vec::new();
    for (&netns, n) in &facts.counters {
        let ns = facts.ns(netns);
        let seen = |o: Outcome| -> u64 {
            listeners
                .iter()
                .filter(|l| l.netns == Some(netns))
                .map(|l| l.outcomes.get(o.name()).copied().unwrap_or(0))
                .sum()
        };
        let tfo_listeners: Vec<&ListenerFact> =
            facts.listeners.iter().filter(|l| l.netns == netns && l.max_qlen.unwrap_or(0) > 0).collect();
        let list = tfo_listeners
            .iter()
            .map(|l| format!("{} max_qlen {}", l.addr, l.max_qlen.unwrap_or(0)))
            .collect::<Vec<_>>()
            .join(", ");
        let overflow = n.get("TcpExtTCPFastOpenListenOverflow");
        if overflow > seen(Outcome::QueueOverflow) {
            let (max, sentence) = match tfo_listeners.as_slice() {
                [one] => (
                    one.max_qlen,
                    overflow_sentence(
                        &one.addr.to_string(),
                        overflow,
                        one.max_qlen,
                        facts.somaxconn.get(&netns).copied(),
                    ),
                ),
                _ => (
                    None,
                    format!(
                        "{ns}: {} on its listeners; raise fastopen= but keep it below somaxconn",
                        units::plural(overflow, "TFO queue overflow", "TFO queue overflows")
                    ),
                ),
            };
            let _ = max;
            let mut evidence = vec![format!(
                "TcpExtTCPFastOpenListenOverflow +{overflow} in {ns}; the {backend} backend cannot see which listener"
            )];
            if !list.is_empty() {
                evidence.push(format!("TFO listeners there: {list}"));
            }
            out.push(NamespaceFinding {
                netns,
                source: super::kernel_counted::SOURCE,
                verdict: counted(Kind::QueueOverflow, sentence, evidence, overflow),
            });
        }
        let fail = n.get("TcpExtTCPFastOpenPassiveFail");
        if fail > seen(Outcome::CookieInvalid) {
            let key = match facts.backup_key.get(&netns) {
                Some(false) => " and no backup key is set",
                _ => "",
            };
            out.push(NamespaceFinding {
                netns,
                source: super::kernel_counted::SOURCE,
                verdict: counted(
                    Kind::CookieInvalid,
                    format!(
                        "{ns}: {} SYN-data refused by its listeners (invalid cookie or child creation failed{key}): \
                         when rotating the key, keep the old one as backup (`tcp_fastopen_key=NEW,OLD`)",
                        fail
                    ),
                    vec![format!(
                        "TcpExtTCPFastOpenPassiveFail +{fail} in {ns}; the {backend} backend cannot see which listener"
                    )],
                    fail,
                ),
            });
        }
        let alt = n.get("TcpExtTCPFastOpenPassiveAltKey");
        if alt > seen(Outcome::AcceptedAltKey) {
            out.push(NamespaceFinding {
                netns,
                source: super::kernel_counted::SOURCE,
                verdict: counted(
                    Kind::KeyRotated,
                    format!(
                        "{ns}: the TFO key was rotated: {alt} SYN-data carried a cookie of the backup key and were accepted"
                    ),
                    vec![format!("TcpExtTCPFastOpenPassiveAltKey +{alt} in {ns}")],
                    alt,
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        aggregation::report::of_events as report,
        events::{Event, Timestamp},
    };

    const NS_CLI: u32 = 4026532177;
    const NS_SRV: u32 = 4026532246;

    /// Built from JSON so fields other work adds to Event (as Options) need no edit here.
    fn ev(role: &str, outcome: &str, dst: &str, data: u32, stall_us: u64, t_ms: u64) -> Event {
        let dst: SocketAddr = dst.parse().unwrap();
        let (saddr, sport, daddr, dport, netns) = if role == "client" {
            ("198.18.0.1".to_string(), 40000, dst.ip().to_string(), dst.port(), NS_CLI)
        } else {
            (dst.ip().to_string(), dst.port(), "198.18.0.1".to_string(), 40000, NS_SRV)
        };
        let mut e: Event = serde_json::from_value(serde_json::json!({
            "ts": "2026-11-30T08:00:00.000000000Z", "role": role, "outcome": outcome, "family": 4,
            "saddr": saddr, "sport": sport, "daddr": daddr, "dport": dport, "netns": netns,
            "pid": 7, "comm": "curl", "syn_data_bytes": data, "cookie_len": null,
            "exp_option": false, "retransmits": u32::from(stall_us > 0),
            "handshake_us": 200 + stall_us, "stall_us": stall_us,
        }))
        .unwrap();
        e.ts = Timestamp::from_unix_ns(u128::from(t_ms) * 1_000_000);
        e
    }

    fn cli(outcome: &str, dst: &str, data: u32, stall_us: u64, t: u64) -> Event {
        ev("client", outcome, dst, data, stall_us, t)
    }

    #[test]
    fn syn_data_dropped_on_the_path() {
        let mut events = vec![cli("cookie_requested", "198.18.0.3:8080", 0, 0, 0)];
        for i in 0..12 {
            events.push(cli("syn_retransmitted", "198.18.0.3:8080", 64, 1_020_000, 10 + i));
        }
        let mut facts = Facts::default();
        facts.tcp_metrics.insert(
            NS_CLI,
            crate::kernel::tcp_metrics::parse(
                "198.18.0.3 age 1.000sec fo_mss 1460 fo_syn_drops 12/0.003usec ago fo_cookie 0011223344556677 source 198.18.0.1\n",
            )
            .unwrap(),
        );
        let r = report(&events, &facts);
        let d = &r.destinations[0];
        assert_eq!(d.verdict.kind, Kind::SynDataDropped);
        assert_eq!(
            d.verdict.sentence,
            "SYN-data to 198.18.0.3:8080 was dropped on the path in 12 of 12 connections, +1.02s each: \
             disable TFO towards it or fix the path"
        );
        assert_eq!((d.syn_data_dropped, d.syn_data_sent, d.connections, d.stalled), (12, 12, 13, 12));
        assert_eq!(d.lost_us_total, 12 * 1_020_000);
        assert_eq!(d.lost_us_per_stalled, 1_020_000);
        let ev = d.verdict.evidence.join("\n");
        assert!(ev.contains("fo_syn_drops 12 (last 3s ago)"), "{ev}");
        assert!(ev.contains("cookie present (8 bytes)"), "{ev}");
        assert!(!ev.contains("0011223344556677"));
        assert!(ev.contains("SYNs without data get through"), "{ev}");
    }

    #[test]
    fn server_no_longer_accepts_tfo() {
        let mut events = vec![cli("accepted", "198.18.0.2:8080", 64, 0, 0)];
        for i in 0..4 {
            events.push(cli("data_not_acked", "198.18.0.2:8080", 64, 0, 10 + i));
        }
        let r = report(&events, &Facts::default());
        let d = &r.destinations[0];
        assert_eq!(d.verdict.kind, Kind::ServerStoppedTfo);
        // 1 accepted + 4 not acked = 5 sent.
        assert_eq!(
            d.verdict.sentence,
            "server 198.18.0.2:8080 no longer accepts TFO: 4 of 5 SYN-data not acknowledged (cookie accepted earlier)"
        );
        assert_eq!(d.data_not_acked, 4);
        // Not stalls: one extra round trip each, estimated by the handshake time.
        assert_eq!((d.stalled, d.lost_us_total), (0, 0));
        assert_eq!((d.extra_round_trips, d.extra_round_trip_us), (4, 800));
        assert!(d.verdict.evidence[0].ends_with("after the handshake, +200us each"), "{:?}", d.verdict);

        let only_fail: Vec<Event> =
            (0..4).map(|i| cli("data_not_acked", "198.18.0.2:8080", 64, 0, i)).collect();
        let d = &report(&only_fail, &Facts::default()).destinations[0];
        assert_eq!(
            d.verdict.sentence,
            "server 198.18.0.2:8080 no longer accepts TFO: 4 of 4 SYN-data not acknowledged (the client sent a \
             cookie it got from that server)"
        );
    }

    #[test]
    fn healthy_info_cookie_drop_and_not_attempted() {
        let events = vec![
            cli("cookie_requested", "198.18.0.2:80", 0, 0, 0),
            cli("accepted", "198.18.0.2:80", 64, 0, 1),
            cli("cookie_requested", "198.18.0.4:80", 0, 0, 2),
            cli("syn_retransmitted", "198.18.0.5:80", 0, 1_010_000, 3),
            cli("not_attempted", "198.18.0.6:80", 0, 0, 4),
        ];
        let r = report(&events, &Facts::default());
        let by = |d: &str| r.destinations.iter().find(|x| x.destination == d).unwrap();
        assert_eq!(
            by("198.18.0.2:80").verdict.sentence,
            "TFO works towards 198.18.0.2:80: 1 of 1 SYN-data accepted"
        );
        assert_eq!(by("198.18.0.4:80").verdict.kind, Kind::Info);
        assert_eq!(by("198.18.0.5:80").verdict.kind, Kind::CookieRequestDropped);
        assert!(by("198.18.0.5:80").verdict.sentence.contains("+1.01s each"));
        assert_eq!(by("198.18.0.6:80").verdict.kind, Kind::NotAttempted);
        assert_eq!(r.destinations[0].destination, "198.18.0.5:80", "most time lost first");
        assert!(r.listeners.is_empty() && r.namespaces.is_empty());
    }

    #[test]
    fn remembered_drops_without_events() {
        let mut facts = Facts::default();
        facts.tcp_metrics.insert(
            NS_CLI,
            crate::kernel::tcp_metrics::parse(
                "10.1.2.3 age 9.000sec fo_syn_drops 3/0.060usec ago source 10.1.2.1\n",
            )
            .unwrap(),
        );
        let r = report(&[], &facts);
        assert!(r.destinations.is_empty(), "no connection in the window: no row of them");
        assert_eq!(r.kernel_cache.len(), 1);
        let c = &r.kernel_cache[0];
        assert_eq!(
            (c.destination.as_str(), c.fo_syn_drops, c.last_drop_s_ago),
            ("10.1.2.3:*", 3, Some(60.0))
        );
        assert!(
            c.sentence.contains("holds 3 SYN-data to 10.1.2.3:* lost on the path, the last 60s ago"),
            "{c:?}"
        );
    }

    fn srv(outcome: &str, t: u64) -> Event {
        ev("server", outcome, "198.18.0.2:81", 64, 0, t)
    }

    #[test]
    fn queue_overflow_uses_max_qlen_and_somaxconn() {
        let mut events: Vec<Event> = (0..37).map(|i| srv("queue_overflow", i)).collect();
        events.push(srv("accepted", 100));
        // The listening socket, as the live reader names it from /proc.
        events.iter_mut().for_each(|e| e.listener = Some("0.0.0.0:81".parse().unwrap()));
        let mut facts = Facts::default();
        facts.listeners.push(ListenerFact {
            netns: NS_SRV,
            addr: "0.0.0.0:81".parse().unwrap(),
            max_qlen: Some(16),
        });
        facts.somaxconn.insert(NS_SRV, 4096);
        let r = report(&events, &facts);
        let l = &r.listeners[0];
        assert_eq!(l.verdict.kind, Kind::QueueOverflow);
        assert_eq!(
            l.verdict.sentence,
            "listener 0.0.0.0:81: 37 TFO queue overflows (max_qlen 16); raise fastopen= but keep it below somaxconn"
        );
        assert_eq!(l.outcomes["queue_overflow"], 37);
        facts.somaxconn.insert(NS_SRV, 16);
        let r = report(&events, &facts);
        assert!(
            r.listeners[0].verdict.sentence.contains("already at somaxconn (16)"),
            "{:?}",
            r.listeners[0]
        );
        // Another listener on the port (IPv6 only): its own row, never the IPv4 one's queue.
        let mut v6 = srv("accepted", 200);
        (v6.family, v6.saddr, v6.listener) =
            (6, "fd00:7f0::2".parse().unwrap(), Some("[::]:81".parse().unwrap()));
        let both: Vec<Event> = events.iter().cloned().chain([v6]).collect();
        let r = report(&both, &facts);
        let names: Vec<(&str, Option<u32>)> =
            r.listeners.iter().map(|l| (l.listener.as_str(), l.max_qlen)).collect();
        assert_eq!(names, [("0.0.0.0:81", Some(16)), ("[::]:81", None)]);
        // No listener named (a recording made before events named it): the address the
        // SYNs arrived on, max_qlen unknown.
        events.iter_mut().for_each(|e| e.listener = None);
        let r = report(&events, &Facts::default());
        assert_eq!(
            r.listeners[0].verdict.sentence,
            "listener 198.18.0.2:81: 37 TFO queue overflows (max_qlen unknown); raise fastopen= but keep it below somaxconn"
        );
    }

    #[test]
    fn key_rotation_invalid_cookie_and_disabled_listener() {
        let events = vec![srv("accepted", 0), srv("accepted_alt_key", 1), srv("accepted_alt_key", 2)];
        let mut facts = Facts::default();
        let r = report(&events, &facts);
        assert_eq!(r.listeners[0].verdict.kind, Kind::KeyRotated);
        assert!(r.listeners[0]
            .verdict
            .sentence
            .contains("2 of 3 SYN-data carried a cookie of the backup key"));

        let events = vec![srv("accepted", 0), srv("cookie_invalid", 1)];
        facts.backup_key.insert(NS_SRV, false);
        let r = report(&events, &facts);
        assert_eq!(r.listeners[0].verdict.kind, Kind::CookieInvalid);
        assert!(
            r.listeners[0].verdict.sentence.contains("1 of 2 SYN-data"),
            "{}",
            r.listeners[0].verdict.sentence
        );
        assert!(r.listeners[0].verdict.sentence.contains("no backup key is set"));

        let r = report(&[srv("listener_disabled", 0)], &Facts::default());
        assert_eq!(r.listeners[0].verdict.kind, Kind::ListenerDisabled);
        let r = report(&[srv("accepted", 0), srv("accepted", 1)], &Facts::default());
        assert_eq!(r.listeners[0].verdict.sentence, "listener 198.18.0.2:81: 2 TFO connections accepted");
    }

    #[test]
    fn counters_stand_in_for_what_the_backend_cannot_see() {
        let mut facts = Facts { backend: Some("tracepoint".into()), ..Default::default() };
        facts.netns_names.insert(NS_SRV, "srv".into());
        facts.counters.insert(
            NS_SRV,
            Netstat::parse(
                "TcpExt: TCPFastOpenListenOverflow TCPFastOpenPassiveFail TCPFastOpenPassiveAltKey\nTcpExt: 5 0 2\n",
            )
            .unwrap(),
        );
        facts.listeners.push(ListenerFact {
            netns: NS_SRV,
            addr: "0.0.0.0:81".parse().unwrap(),
            max_qlen: Some(4),
        });
        let r = report(&[srv("accepted", 0)], &facts);
        assert_eq!(r.namespaces.len(), 2, "{:?}", r.namespaces);
        assert_eq!(
            r.namespaces[0].verdict.sentence,
            "listener 0.0.0.0:81: 5 TFO queue overflows (max_qlen 4); raise fastopen= but keep it below somaxconn"
        );
        assert!(
            r.namespaces[0].verdict.evidence[0].contains("in netns srv; the tracepoint backend cannot see")
        );
        assert_eq!(r.namespaces[1].verdict.kind, Kind::KeyRotated);
        // When the events already show them, the counters add no second finding.
        let events: Vec<Event> = (0..5)
            .map(|i| srv("queue_overflow", i))
            .chain((0..2).map(|i| srv("accepted_alt_key", i)))
            .collect();
        assert!(report(&events, &facts).namespaces.is_empty());
    }
}
