//! `report`'s rows: events in, one at a time, from one host or many ([`ReportBuilder`],
//! in gather.rs); out, the summary, the client-side rows ranked by time lost (the first N
//! shown, the rest summed), the listeners and the namespaces' findings ([`Built`], in
//! built.rs), each row's verdict made only for what is shown. The files stand in that
//! order: summary.rs (the answer's types), gather.rs, built.rs, summarize.rs.
mod built;
mod gather;
mod summarize;
mod summary;

#[cfg(test)]
pub(crate) use self::built::Report;
pub(crate) use self::{
    built::Built,
    gather::ReportBuilder,
    summary::{Rest, Summary},
};

/// Events and reports as the tests of grouping build them (here and in the view that says
/// their verdicts).
#[cfg(test)]
pub(crate) mod fixtures {
    use std::net::IpAddr;

    use super::*;
    use crate::{
        aggregation::report::{
            facts::Facts,
            grouping::{GroupBy, GroupOptions},
        },
        events::{sample_event, Event, Outcome, Role},
    };

    pub(crate) fn cli(outcome: Outcome, dst: &str, port: u16, data: u32, stall_us: u64) -> Event {
        Event {
            daddr: dst.parse::<IpAddr>().unwrap(),
            dport: port,
            syn_data_bytes: data,
            retransmits: u32::from(stall_us > 0),
            stall_us,
            handshake_us: Some(200 + stall_us),
            ..sample_event(Role::Client, outcome)
        }
    }

    pub(crate) fn dropped(dst: &str) -> Event {
        cli(Outcome::SynRetransmitted, dst, 443, 64, 1_000_000)
    }

    pub(crate) fn ok(dst: &str) -> Event {
        cli(Outcome::Accepted, dst, 443, 64, 0)
    }

    pub(crate) fn built(events: &[(u32, Event)], group: GroupBy, fleet: bool, top: Option<usize>) -> Built {
        let mut b = ReportBuilder::new(GroupOptions { by: group, ..Default::default() }, fleet);
        let hosts: Vec<u32> = (0..4).map(|i| b.host(&format!("web-{i}.ams1.example.net"))).collect();
        for (h, e) in events {
            b.add(e, hosts[*h as usize]);
        }
        b.finish(Facts::default(), top)
    }

    pub(crate) fn named(mut e: Event, name: &str) -> Event {
        e.dname = Some(name.into());
        e
    }

    /// api.example at two addresses, one clean and one with dropped and not-acked SYN-data;
    /// www.example at the clean one; an address no name was learnt for; a server event.
    pub(crate) fn named_events() -> Vec<(u32, Event)> {
        let mut events = Vec::new();
        for _ in 0..4 {
            events.push((0, named(ok("198.18.0.3"), "api.example")));
        }
        events.push((0, named(ok("198.18.0.3"), "www.example")));
        events.push((0, named(ok("198.18.0.4"), "api.example")));
        for _ in 0..2 {
            events.push((0, named(dropped("198.18.0.4"), "api.example")));
            events.push((0, named(cli(Outcome::DataNotAcked, "198.18.0.4", 443, 64, 0), "api.example")));
        }
        events.push((0, ok("198.18.0.5")));
        events.push((0, ok("198.18.0.5")));
        // A server event never has a name; one that claims one is grouped as always.
        events.push((0, named(sample_event(Role::Server, Outcome::Accepted), "api.example")));
        events
    }

    /// 40 destinations of 203.0.113.0/24 that drop SYN-data, one there that does not, and
    /// one elsewhere.
    pub(crate) fn prefix_events() -> Vec<(u32, Event)> {
        let mut events = Vec::new();
        for i in 0..40 {
            events.push((0, dropped(&format!("203.0.113.{i}"))));
        }
        events.push((0, ok("203.0.113.200")));
        events.push((0, ok("198.51.100.7")));
        events
    }

    /// curl losing SYN-data to one destination twice, wget reaching another (in a
    /// container).
    pub(crate) fn process_events() -> Vec<(u32, Event)> {
        let mut a = dropped("10.0.0.1");
        a.comm = "curl".into();
        let mut c = ok("10.0.0.2");
        c.comm = "wget".into();
        c.dport = 80;
        c.container_id = Some("3f2a9c1b0d4e5f6a".into());
        vec![(0, a.clone()), (0, a), (0, c)]
    }

    /// Hosts 0 and 1 lose SYN-data to 203.0.113.0/24, hosts 2 and 3 do not (they reach it).
    pub(crate) fn fleet_events() -> Vec<(u32, Event)> {
        let mut events = Vec::new();
        for h in 0..4u32 {
            for i in 0..10 {
                let dst = format!("203.0.113.{i}");
                events.push((h, if h < 2 { dropped(&dst) } else { ok(&dst) }));
            }
            events.push((h, cli(Outcome::Accepted, "10.0.0.1", 80, 64, 0)));
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, net::IpAddr};

    use super::{fixtures::*, *};
    use crate::{
        aggregation::report::{
            connections::{ConnAcc, OneConn, Slot},
            facts::Facts,
            grouping::{GroupBy, GroupOptions, DEFAULT_PREFIX_V4},
            verdict::{DestinationReport, Kind, Strength},
        },
        events::Event,
    };

    #[test]
    fn ranked_by_time_lost_with_the_rest_summed() {
        let mut events = Vec::new();
        for i in 0..10 {
            events.push((0, ok(&format!("10.0.0.{i}"))));
        }
        // 10.9.9.9 lost 3 s, 10.8.8.8 lost 1 s (and 4 healthy connections).
        for _ in 0..3 {
            events.push((0, dropped("10.9.9.9")));
        }
        events.push((0, dropped("10.8.8.8")));
        let b = built(&events, GroupBy::Destination, false, Some(3));
        let rows: Vec<DestinationReport> = b.rows().collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].destination, "10.9.9.9:443");
        assert_eq!(rows[0].lost_us_total, 3_000_000);
        assert_eq!(rows[1].destination, "10.8.8.8:443");
        assert_eq!(rows[2].verdict.kind, Kind::Healthy);
        let s = &b.summary;
        assert_eq!((s.connections, s.destinations, s.groups, s.shown), (14, 12, 12, 3));
        assert_eq!((s.stalled, s.lost_us_total), (4, 4_000_000));
        assert_eq!(s.verdicts[&Kind::SynDataDropped], 2);
        assert_eq!(s.verdicts[&Kind::Healthy], 10);
        assert_eq!(s.worst[0].group, "10.9.9.9:443");
        assert_eq!(s.worst[0].strength, Strength::Moderate, "3 of 3");
        assert_eq!(s.worst[1].strength, Strength::Weak, "1 of 1");
        // The rest: every row not shown, their sums equal to the totals minus the shown rows.
        let rest = b.rest.as_ref().unwrap();
        assert_eq!(rest.groups, 9);
        assert_eq!(rest.connections, 14 - 3 - 1 - 1);
        assert_eq!((rest.stalled, rest.lost_us_total), (0, 0));
        assert_eq!(rest.verdicts, BTreeMap::from([(Kind::Healthy, 9)]));
        // --all: every row, no rest; the same order.
        let all = built(&events, GroupBy::Destination, false, None);
        assert!(all.rest.is_none());
        let names: Vec<String> = all.rows().map(|d| d.destination).collect();
        assert_eq!(names.len(), 12);
        assert_eq!(&names[..2], ["10.9.9.9:443", "10.8.8.8:443"]);
    }

    #[test]
    fn a_prefix_is_one_verdict_with_its_evidence() {
        let b = built(&prefix_events(), GroupBy::Prefix, false, None);
        let rows: Vec<DestinationReport> = b.rows().collect();
        assert_eq!(rows.len(), 2, "{rows:#?}");
        let r = &rows[0];
        assert_eq!(r.destination, format!("203.0.113.0/{DEFAULT_PREFIX_V4}"));
        assert_eq!(
            (r.group.as_str(), r.netns, r.destinations, r.connections),
            ("203.0.113.0/24", None, 41, 41)
        );
        assert_eq!(r.verdict.kind, Kind::SynDataDropped);
        assert_eq!(r.verdict.strength, Strength::Strong);
        assert_eq!(
            r.verdict.support,
            crate::aggregation::report::verdict::Support {
                connections: 40,
                of_connections: 41,
                destinations: Some(40),
                of_destinations: Some(41),
                hosts: 1,
                of_hosts: 1
            }
        );
        assert_eq!(b.summary.destinations, 42);
        assert_eq!(b.summary.groups, 2);
    }

    #[test]
    fn by_port_process_and_container() {
        let events = process_events();
        let labels = |g| built(&events, g, false, None).rows().map(|d| d.destination).collect::<Vec<_>>();
        assert_eq!(labels(GroupBy::Port), ["port 443", "port 80"]);
        assert_eq!(labels(GroupBy::Process), ["process curl", "process wget"]);
        assert_eq!(labels(GroupBy::Container), ["no container", "container 3f2a9c1b0d4e"]);
        let b = built(&events, GroupBy::Process, false, None);
        assert_eq!(b.summary.destinations, 2, "destinations counted once each");
    }

    #[test]
    fn hosts_merge_with_a_breakdown_per_verdict() {
        let events = fleet_events();
        // A destination first seen on one host, then on another: split by host from then on.
        let b = built(&events, GroupBy::Prefix, true, None);
        let rows: Vec<DestinationReport> = b.rows().collect();
        let r = &rows[0];
        assert_eq!(r.destination, "203.0.113.0/24");
        assert_eq!(r.verdict.kind, Kind::SynDataDropped);
        assert_eq!((r.verdict.support.hosts, r.verdict.support.of_hosts), (2, 4));
        let shares: Vec<(String, u64, u64)> =
            r.hosts.iter().map(|h| (h.host.clone(), h.connections, h.showing)).collect();
        assert_eq!(
            shares,
            [
                ("web-0.ams1.example.net".to_string(), 10, 10),
                ("web-1.ams1.example.net".to_string(), 10, 10),
                ("web-2.ams1.example.net".to_string(), 10, 0),
                ("web-3.ams1.example.net".to_string(), 10, 0),
            ]
        );
        // The sum over hosts is the row; the summary's per-host totals sum to the whole.
        assert_eq!(r.hosts.iter().map(|h| h.connections).sum::<u64>(), r.connections);
        let s = &b.summary;
        assert_eq!(s.hosts.len(), 4);
        assert_eq!(s.hosts.iter().map(|h| h.connections).sum::<u64>(), s.connections);
        assert_eq!(s.hosts.iter().map(|h| h.lost_us_total).sum::<u64>(), s.lost_us_total);
        assert_eq!(s.hosts[0].lost_us_total, 10_000_000);
        // A fleet's rows name no namespace (an inode names nothing across hosts).
        assert!(rows.iter().all(|d| d.netns.is_none()));
        // Merging is order-free: the same events, hosts read the other way round.
        let mut rev = events.clone();
        rev.reverse();
        let b2 = built(&rev, GroupBy::Prefix, true, None);
        let r2 = b2.rows().next().unwrap();
        assert_eq!(
            (r2.connections, r2.syn_data_dropped, r2.lost_us_total),
            (r.connections, r.syn_data_dropped, r.lost_us_total)
        );
        assert_eq!(r2.verdict.support, r.verdict.support);
    }

    #[test]
    fn a_name_is_one_verdict_across_its_addresses() {
        let events = named_events();
        let b = built(&events, GroupBy::Name, false, None);
        let rows: Vec<DestinationReport> = b.rows().collect();
        let labels: Vec<&str> = rows.iter().map(|r| r.destination.as_str()).collect();
        assert_eq!(labels, ["api.example", "198.18.0.5:443", "www.example"], "{rows:#?}");
        let api = &rows[0];
        assert_eq!(
            (api.destinations, api.netns, api.names.as_slice()),
            (2, None, &["api.example".to_string()][..])
        );
        // The same verdict as per destination, on the sum of its addresses' connections.
        let api_only: Vec<(u32, Event)> =
            events.iter().filter(|(_, e)| e.dname.as_deref() == Some("api.example")).cloned().collect();
        let per_dest: Vec<DestinationReport> =
            built(&api_only, GroupBy::Destination, false, None).rows().collect();
        assert_eq!(per_dest.len(), 2, "{per_dest:#?}");
        let sum = |f: fn(&DestinationReport) -> u64| per_dest.iter().map(f).sum::<u64>();
        assert_eq!(api.connections, sum(|d| d.connections));
        assert_eq!(api.connections, 9);
        assert_eq!(api.accepted, sum(|d| d.accepted));
        assert_eq!(api.syn_data_dropped, sum(|d| d.syn_data_dropped));
        assert_eq!(api.data_not_acked, sum(|d| d.data_not_acked));
        assert_eq!(api.lost_us_total, sum(|d| d.lost_us_total));
        assert_eq!(api.extra_round_trip_us, sum(|d| d.extra_round_trip_us));
        let mut outcomes = BTreeMap::<String, u64>::new();
        for d in &per_dest {
            for (k, v) in &d.outcomes {
                *outcomes.entry(k.clone()).or_default() += v;
            }
        }
        assert_eq!(api.outcomes, outcomes);
        assert_eq!(api.verdict.kind, Kind::SynDataDropped);
        assert_eq!(
            api.verdict.kind,
            Kind::of_clients(&{
                let mut a = ConnAcc::default();
                api_only.iter().for_each(|(_, e)| a.add(&OneConn::of(e, 0, 0)));
                a
            })
        );
        // Both addresses as evidence, each with its own counts, the worst first.
        let addrs: Vec<(&str, u64, u64)> =
            api.addresses.iter().map(|a| (a.address.as_str(), a.connections, a.lost_us_total)).collect();
        assert_eq!(addrs, [("198.18.0.4:443", 5, 2_000_000), ("198.18.0.3:443", 4, 0)]);
        assert_eq!(api.addresses.iter().map(|a| a.connections).sum::<u64>(), api.connections);
        assert_eq!((api.addresses[0].showing, api.addresses[0].of), (2, 5));
        // Without a name: the destination's own row, nothing dropped.
        let unnamed = &rows[1];
        assert_eq!((unnamed.destinations, unnamed.netns, unnamed.connections), (1, Some(1), 2));
        assert!(unnamed.names.is_empty() && unnamed.addresses.is_empty());
        let s = &b.summary;
        assert_eq!((s.groups, s.unnamed_groups, s.destinations, s.connections), (3, Some(1), 3, 12));
        assert_eq!(rows.iter().map(|r| r.connections).sum::<u64>(), s.connections);
        // Server events are grouped by listener, as without names.
        assert_eq!((s.server_events, b.listeners.len()), (1, 1));
        assert_eq!(built(&events, GroupBy::Destination, false, None).summary.unnamed_groups, None);
    }

    #[test]
    fn every_verdict_lists_the_names_of_its_addresses() {
        let mut events = named_events();
        // Five names for one address: the three with the most connections, then a count.
        for (name, n) in
            [("a.example", 1), ("b.example", 3), ("c.example", 2), ("d.example", 1), ("e.example", 2)]
        {
            for _ in 0..n {
                events.push((0, named(ok("198.18.0.9"), name)));
            }
        }
        let b = built(&events, GroupBy::Destination, false, None);
        let rows: Vec<DestinationReport> = b.rows().collect();
        let by = |d: &str| rows.iter().find(|r| r.destination == d).unwrap();
        assert_eq!(by("198.18.0.3:443").names, ["api.example", "www.example"]);
        assert_eq!(by("198.18.0.3:443").more_names, 0);
        assert_eq!(by("198.18.0.4:443").names, ["api.example"]);
        assert_eq!(by("198.18.0.9:443").names, ["b.example", "c.example", "e.example"]);
        assert_eq!(by("198.18.0.9:443").more_names, 2);
        assert!(by("198.18.0.5:443").names.is_empty());
        assert!(rows.iter().all(|r| r.addresses.is_empty()), "address lists are for names only");
        // A group of addresses lists the names of all of them.
        let b = built(&events, GroupBy::Prefix, false, None);
        let net = b.rows().next().unwrap();
        assert_eq!((net.destination.as_str(), net.names.len(), net.more_names), ("198.18.0.0/24", 3, 4));
        assert_eq!(net.names[0], "api.example");
        // A name with a control character is printed escaped.
        let evil = vec![(0, named(ok("198.18.0.3"), "x\u{1b}[2J.example"))];
        let b = built(&evil, GroupBy::Name, false, None);
        assert_eq!(b.rows().next().unwrap().destination, "x\\u{1b}[2J.example");
    }

    #[test]
    fn a_million_destinations_fit_in_little_memory() {
        // Not a benchmark (that is `cargo xtask bench`'s report step): that a destination
        // seen once costs a slot and an index entry, nothing per event.
        let mut b = ReportBuilder::new(GroupOptions::default(), false);
        let h = b.host("h");
        let mut e = ok("10.0.0.0");
        for i in 0..10_000u32 {
            e.daddr = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            b.add(&e, h);
        }
        assert_eq!(b.cells.len(), 10_000);
        assert!(b.cells.values().all(|s| matches!(s, Slot::One(_))));
        let built = b.finish(Facts::default(), Some(crate::aggregation::report::DEFAULT_TOP));
        assert_eq!(built.rows().count(), crate::aggregation::report::DEFAULT_TOP);
        assert_eq!(
            built.rest.as_ref().unwrap().groups,
            10_000 - crate::aggregation::report::DEFAULT_TOP as u64
        );
    }
}
