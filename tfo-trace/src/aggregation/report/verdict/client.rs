//! The verdict on a row of client connections (a destination, or a group of them:
//! `--group-by`), and the figures its sentence and evidence are said from
//! (`views/report/verdict/client.rs` says them).
use super::{
    classify::{Kind, Strength},
    evidence::{AddressShare, HostShare, Support, Verdict},
};
use crate::{
    aggregation::report::{
        connections::ConnAcc,
        facts::{Facts, ServerSide},
        grouping::GroupKey,
    },
    events::Outcome,
    kernel::tcp_metrics::TcpMetric,
};
use serde::Serialize;
use std::{collections::BTreeMap, net::SocketAddr};

/// Client side: one destination in one namespace, or one group of them (`--group-by`).
/// Its JSON is the view's (`views/report/json.rs`), with the verdict said in words last.
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
    /// The DNS names the clients resolved to the row's addresses (`--names`, `Event::dname`),
    /// the most connected-to first: at most [`super::NAMES_SHOWN`], `more_names` counting the
    /// others. Empty where no event of the row carried a name.
    pub names: Vec<String>,
    pub more_names: u64,
    /// `--group-by name`: each address of the name, with its own counts, the most time lost
    /// first (absent in other groupings).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<AddressShare>,
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
    /// Those refusals by what their SYN-ACK said (a new cookie: the destination handed out
    /// another one), and the most in a row.
    pub refusals: crate::aggregation::refusals::RefusalFigures,
    /// Connections that lost time to a SYN timeout (see `aggregation::stall`).
    pub stalled: u64,
    /// Time the stalls lost.
    pub lost_us_total: u64,
    /// Mean over the stalled connections.
    pub lost_us_per_stalled: u64,
    /// Mean over all connections.
    pub lost_us_per_connection: u64,
    /// Refused SYN-data (`data_not_acked`), not stalls: the kernel resent the data at once on
    /// the SYN-ACK, when plain TCP would first send it, so against no TFO they lost nothing;
    /// against a working TFO each forwent a round trip, estimated by its handshake time
    /// (`extra_round_trip_us`: the gain forgone, in none of the `lost_us_*` nor in `net_us`).
    pub extra_round_trips: u64,
    pub extra_round_trip_us: u64,
    /// What the accepted SYN-data saved: the sum of the round trips the kernel measured,
    /// over `saved_measured` of the `accepted` connections (a recording made before events
    /// carried `saved_us` measured none).
    pub saved_us_total: u64,
    pub saved_measured: u64,
    /// Saved less lost: `saved_us_total` less `lost_us_total` (the gain forgone is apart).
    pub net_us: i64,
    /// How many accepted connections repay one stall at the measured round trip (null
    /// without a stall or a measured saving).
    pub break_even_accepted_per_stall: Option<u64>,
    /// Each host's share, the most affected first.
    pub hosts: Vec<HostShare>,
    #[serde(skip)]
    pub verdict: Verdict<ClientFigures>,
}

/// A row of the client side, gathered (by `aggregation::report`) and ready for its verdict.
#[derive(Clone, Debug)]
pub(crate) struct ClientRow {
    pub key: GroupKey,
    pub label: String,
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
    /// The client processes (comm) that made most of its connections, most first, and
    /// whether others did too: the advice names where to turn TFO off.
    pub clients: Vec<String>,
    pub more_clients: bool,
    /// The same for the connections that sent a cookie but no data in the SYN.
    pub no_data_clients: Vec<String>,
    pub more_no_data_clients: bool,
    /// The DNS names seen for its addresses (at most [`super::NAMES_SHOWN`], the most
    /// connected-to first), and how many others.
    pub names: Vec<String>,
    pub more_names: u64,
    /// A DNS name's row: each of its addresses, the worst first (empty otherwise).
    pub addresses: Vec<AddressShare>,
}

/// What a client row's sentence and evidence are said from, beyond the row's own figures.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientFigures {
    /// The row ([`DestinationReport::group`]) is named by the sender whose destinations
    /// it gathers ([`GroupKey::named_by_sender`]).
    pub named_by_sender: bool,
    /// A group of destinations, not one.
    pub many: bool,
    /// The report has several hosts: sentences say how many show it.
    pub fleet: bool,
    /// The row's counts.
    pub acc: ConnAcc,
    /// Its destinations that lost the most time, for a row of several.
    pub worst: Vec<(String, u64)>,
    /// The client processes that made most of its connections, and whether others did
    /// too; the same for those that sent a cookie but no data in the SYN.
    pub clients: Vec<String>,
    pub more_clients: bool,
    pub no_data_clients: Vec<String>,
    pub more_no_data_clients: bool,
    /// The client's namespace as the report names it (None: the row spans namespaces),
    /// and what its `ip tcp_metrics` holds for the destination.
    pub ns: Option<String>,
    pub metric: Option<TcpMetric>,
    /// The server a destination row reaches, where its namespace could be read on this host
    /// ([`Facts::server_of`]): its listener, sysctls and counters tell causes the client's
    /// side cannot.
    pub server: Option<ServerSide>,
}

/// The verdict on a row of client connections, with the figures of its evidence.
pub(crate) fn client_report(row: ClientRow, facts: &Facts) -> DestinationReport {
    let a = &row.acc;
    let hosts_showing = row.hosts.iter().filter(|h| h.showing > 0).count() as u64;
    let of_hosts = row.hosts.len() as u64;
    let (showing, of) = row.kind.shown_by(a);
    let support = Support {
        connections: showing,
        of_connections: of,
        destinations: Some(row.destinations_showing),
        of_destinations: Some(row.destinations),
        hosts: hosts_showing,
        of_hosts,
    };
    let balance = a.balance();
    let (lost, stalled, connections) = (a.lost_us_total(), a.stalled(), a.connections());
    DestinationReport {
        destination: row.label.clone(),
        group: row.label,
        netns: row.key.netns(),
        destinations: row.destinations,
        names: row.names,
        more_names: row.more_names,
        addresses: row.addresses,
        connections,
        outcomes: a.outcomes(),
        syn_data_sent: a.syn_data_sent(),
        accepted: a.count(Outcome::Accepted),
        syn_data_dropped: a.syn_data_dropped(),
        data_not_acked: a.count(Outcome::DataNotAcked),
        refusals: a.refusals.figures(),
        stalled,
        lost_us_total: lost,
        lost_us_per_stalled: lost / stalled.max(1),
        lost_us_per_connection: lost / connections.max(1),
        extra_round_trips: a.extra_round_trips(),
        extra_round_trip_us: a.extra_round_trip_us,
        saved_us_total: balance.saved_us,
        saved_measured: balance.saves,
        net_us: balance.net_us(),
        break_even_accepted_per_stall: balance.break_even_accepted_per_stall(),
        hosts: row.hosts,
        verdict: Verdict {
            kind: row.kind,
            strength: Strength::of(showing, of),
            support,
            figures: ClientFigures {
                many: !matches!(row.key, GroupKey::Destination(_)),
                ns: row.key.netns().map(|n| facts.ns(n)),
                metric: facts.metric(&row.key).cloned(),
                server: match &row.key {
                    GroupKey::Destination(d) => facts.server_of(SocketAddr::new(d.ip, d.port)),
                    _ => None,
                },
                named_by_sender: row.key.named_by_sender(),
                fleet: row.fleet,
                acc: row.acc,
                worst: row.worst,
                clients: row.clients,
                more_clients: row.more_clients,
                no_data_clients: row.no_data_clients,
                more_no_data_clients: row.more_no_data_clients,
            },
        },
    }
}
