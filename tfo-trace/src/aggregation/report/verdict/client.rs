//! The verdict's sentence and evidence for a row of client connections: a destination, or
//! a group of them (`--group-by`).
use super::{
    hosts_line, refusal, AddressShare, DestinationReport, HostShare, Kind, Strength, Support, Verdict,
};
use crate::{
    aggregation::{
        report::{
            connections::{Balance, ConnAcc},
            facts::Facts,
            grouping::GroupKey,
        },
        stall::Cause,
    },
    events::Outcome,
    kernel::tcp_metrics::TcpMetric,
    units,
};

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

/// Address lines a name's evidence lists; the others are summed in one line.
const ADDRESSES_LISTED: usize = 8;

/// One address of a name's row as evidence: `address 198.18.0.3:8080: 5 connections
/// (accepted=2 syn_retransmitted=3), 3.06s lost`. `netns`: the rows span several client
/// namespaces, so the address names its own.
fn address_line(a: &AddressShare, netns: bool) -> String {
    let ns = match a.netns.filter(|_| netns) {
        Some(n) => format!(" (netns {n})"),
        None => String::new(),
    };
    let outcomes: Vec<String> = a.outcomes.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut cost = Vec::new();
    if a.stalled > 0 {
        cost.push(format!("{} lost", units::duration_us(a.lost_us_total)));
    }
    if a.extra_round_trips > 0 {
        cost.push(format!(
            "{} for data not acked, ~{}",
            units::plural(a.extra_round_trips, "extra round trip", "extra round trips"),
            units::duration_us(a.extra_round_trip_us)
        ));
    }
    if cost.is_empty() {
        cost.push("no time lost".into());
    }
    format!(
        "address {}{ns}: {} ({}), {}",
        a.address,
        units::plural(a.connections, "connection", "connections"),
        outcomes.join(" "),
        cost.join(", ")
    )
}

/// A name's addresses as evidence, the worst first: the first [`ADDRESSES_LISTED`], then
/// the others summed.
fn address_lines(addresses: &[AddressShare]) -> Vec<String> {
    let netns: std::collections::BTreeSet<Option<u32>> = addresses.iter().map(|a| a.netns).collect();
    let mut out: Vec<String> =
        addresses.iter().take(ADDRESSES_LISTED).map(|a| address_line(a, netns.len() > 1)).collect();
    let rest = addresses.get(ADDRESSES_LISTED..).unwrap_or_default();
    if !rest.is_empty() {
        let conns: u64 = rest.iter().fold(0u64, |n, a| n.saturating_add(a.connections));
        let lost: u64 = rest.iter().fold(0u64, |n, a| n.saturating_add(a.lost_us_total));
        out.push(format!(
            "and {} more {}: {}, {}",
            units::count(rest.len() as u64),
            if rest.len() == 1 { "address" } else { "addresses" },
            units::plural(conns, "connection", "connections"),
            if lost > 0 { format!("{} lost", units::duration_us(lost)) } else { "no time lost".into() }
        ));
    }
    out
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
    let no_data = c(Outcome::CookieSentNoData);
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

    let balance = a.balance();
    let pays = balance.saves > 0 && balance.net_us() > 0;
    let in_cl = in_clients(&row.clients, row.more_clients);
    let in_no_data = in_clients(&row.no_data_clients, row.more_no_data_clients);
    if no_data > 0 {
        evidence.push(no_data_line(no_data, &in_no_data));
    }
    let sentence_tail =
        format!("{} of {} SYN-data accepted{spread}", units::count(accepted), units::count(sent));
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
            // Where the accepted SYN-data saved more than the drops lost, TFO still pays:
            // the path is what to fix, not TFO. Where it costs more, the balance's own
            // sentence gives the advice; with no saving measured, this one does.
            let advice = if pays {
                format!(": fix the path (TFO still pays toward {it})")
            } else if balance.saves > 0 {
                String::new()
            } else {
                format!(": disable TFO towards {it}{in_cl} or fix the path")
            };
            format!(
                "SYN-data to {subj} was dropped on the path in {} of {} connections{spread}, +{} each\
                 {advice}",
                units::count(dropped),
                units::count(sent),
                each(drop_lost, dropped)
            )
        }
        Kind::ServerStoppedTfo
        | Kind::CookieChurn
        | Kind::SynDataNotTaken
        | Kind::SynDataRefused
        | Kind::KeyRotatedWithoutBackup => {
            let s = refusal::Subject { name: subj, many, spread: &spread, in_clients: &in_cl };
            refusal::sentence(row.kind, a, &s, &mut evidence)
        }
        Kind::CookieRequestDropped => {
            evidence.push(format!(
                "{} with an empty TFO option timed out, {} lost",
                units::plural(cookie_dropped, "SYN", "SYNs"),
                units::duration_us(cookie_drop_lost)
            ));
            format!(
                "cookie requests to {subj} were lost in {} of {} connections{spread}, +{} each: something on \
                 the path drops SYNs with the TFO option; disable TFO towards {it}{in_cl}",
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
        Kind::TfoGainsNothing => format!(
            "TFO toward {subj} gains nothing{in_no_data}: {} of {} connections sent a cookie but no data in \
             the SYN{spread} (the server speaks first, or the client reads before it writes): turn TFO off \
             toward {it}{in_no_data}, or write the request before reading",
            units::count(no_data),
            units::count(connections)
        ),
        Kind::Healthy => format!("TFO works towards {subj}: {sentence_tail}"),
        _ => format!(
            "{subj}: {}{spread}, no SYN-data yet (the first connection to a server fetches the cookie)",
            units::plural(cookie_req, "cookie request", "cookie requests")
        ),
    };
    // A one-off refusal is no reason to stop using TFO, and churn's sentence gives its own
    // advice (the path is not at fault): no advice on their balance.
    let advice =
        (!matches!(row.kind, Kind::KeyRotatedWithoutBackup | Kind::CookieChurn)).then_some(in_cl.as_str());
    let sentence = match balance_sentence(subj, &balance, advice) {
        Some(b) if row.kind == Kind::Healthy => format!("{b}: {sentence_tail}"),
        Some(b) => format!("{sentence}; {b}"),
        None => sentence,
    };
    evidence.extend(balance_line(&balance));
    if let Some(m) = metric {
        evidence.push(metrics_line(m));
    }
    let worst: Vec<String> = row
        .worst
        .iter()
        .filter(|(_, l)| *l > 0)
        .map(|(d, l)| format!("{d} ({})", units::duration_us(*l)))
        .collect();
    if !row.addresses.is_empty() {
        // A name's addresses, each with its own counts (they hold what `most time lost` says).
        evidence.extend(address_lines(&row.addresses));
    } else if many && !worst.is_empty() {
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
        names: row.names,
        more_names: row.more_names,
        addresses: row.addresses,
        connections,
        outcomes: a.outcomes(),
        syn_data_sent: sent,
        accepted,
        syn_data_dropped: dropped,
        data_not_acked: not_acked,
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
        verdict: Verdict { kind: row.kind, sentence, evidence, strength: Strength::of(showing, of), support },
    }
}

/// Whether TFO pays toward `subj`, from what it saved and lost: `TFO toward X pays: +35ms
/// net over 12 connections`, or `TFO toward X costs more than it saves: -3.04s net (one
/// stall per 4 accepted at this round trip of 2.1ms; it breaks even at one per 486): stop
/// using it toward X in curl or fix the path`. None where nothing was measured on either
/// side. `advice`: where the clients are named ([`in_clients`]), None to give no advice.
fn balance_sentence(subj: &str, b: &Balance, advice: Option<&str>) -> Option<String> {
    // Nothing accepted says it all already; accepted SYN-data whose savings nobody
    // measured (a recording made before events carried them) leaves the balance unknown,
    // not a loss.
    if b.saves == 0 {
        return None;
    }
    let net = units::net_us(b.net_us());
    let over = units::plural(b.connections, "connection", "connections");
    if b.net_us() > 0 {
        return Some(format!("TFO toward {subj} pays: {net} net over {over}"));
    }
    let mut s = format!("TFO toward {subj} costs more than it saves: {net} net over {over}");
    if let (Some(seen), Some(rt), Some(even)) =
        (b.accepted_per_stall(), b.saved_per_accepted_us(), b.break_even_accepted_per_stall())
    {
        s.push_str(&format!(
            " (one stall per {} accepted at this round trip of {}; it breaks even at one per {})",
            units::count(seen),
            units::duration_us(rt),
            units::count(even)
        ));
    }
    if let Some(in_clients) = advice {
        s.push_str(&format!(": stop using it toward {subj}{in_clients} or fix the path"));
    }
    Some(s)
}

/// The connections whose SYN carried a cookie and no data, as evidence: what the kernel
/// counts of them on each end.
fn no_data_line(n: u64, in_clients: &str) -> String {
    format!(
        "{}{in_clients} carried a cached cookie and no data: nothing for the server to hand on a \
         round trip early; the client's kernel counts neither TcpExtTCPFastOpenActive nor ActiveFail \
         for them, the server's a TcpExtTCPFastOpenPassive each",
        units::plural(n, "SYN", "SYNs")
    )
}

/// ` in curl`, ` in curl and wget`, ` in curl, wget and others`; empty when no name is known.
fn in_clients(names: &[String], more: bool) -> String {
    let names: Vec<&str> = names.iter().map(String::as_str).filter(|n| !n.is_empty()).collect();
    let list = match (names.as_slice(), more) {
        ([], _) => return String::new(),
        ([one], false) => one.to_string(),
        (many, false) => format!("{} and {}", many[..many.len() - 1].join(", "), many[many.len() - 1]),
        (many, true) => format!("{} and others", many.join(", ")),
    };
    format!(" in {list}")
}

/// The balance as evidence: what was saved, over how many, and what was lost.
fn balance_line(b: &Balance) -> Option<String> {
    if b.saves == 0 {
        return None;
    }
    let mut s = format!(
        "saved {} ({} of {} accepted measured",
        units::duration_us(b.saved_us),
        units::count(b.saves),
        units::count(b.accepted)
    );
    if let Some(rt) = b.saved_per_accepted_us() {
        s.push_str(&format!(", {} each", units::duration_us(rt)));
    }
    s.push_str(&format!(
        "), lost {} ({}): net {}",
        units::duration_us(b.lost_us),
        units::plural(b.stalled, "stall", "stalls"),
        units::net_us(b.net_us())
    ));
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::super::{fixtures::*, Kind};
    use crate::{
        aggregation::report::{of_events as report, Facts},
        events::{Cause, Event},
    };

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
             disable TFO towards it in curl or fix the path"
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
    fn the_advice_names_the_client_processes() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<String>>();
        assert_eq!(super::in_clients(&names(&[]), true), "");
        assert_eq!(super::in_clients(&names(&["curl"]), false), " in curl");
        assert_eq!(super::in_clients(&names(&["curl", "wget"]), false), " in curl and wget");
        assert_eq!(super::in_clients(&names(&["curl", "wget", "nginx"]), false), " in curl, wget and nginx");
        assert_eq!(
            super::in_clients(&names(&["curl", "wget", "nginx"]), true),
            " in curl, wget, nginx and others"
        );
        // From events: the process with the most connections first.
        let dst = "198.18.0.3:8080";
        let mut events: Vec<Event> = (0..3)
            .map(|i| Event { comm: "wget".into(), ..cli("syn_retransmitted", dst, 64, 1_020_000, 10 + i) })
            .collect();
        events.extend((0..5).map(|i| cli("syn_retransmitted", dst, 64, 1_020_000, 20 + i)));
        let d = report(&events, &Facts::default()).destinations[0].clone();
        assert!(
            d.verdict.sentence.ends_with("disable TFO towards it in curl and wget or fix the path"),
            "{}",
            d.verdict.sentence
        );
    }

    /// Issue 30: the verdict weighs what accepted SYN-data saved (each its measured round
    /// trip) against what stalls lost, and states the break-even from that round trip.
    #[test]
    fn the_balance_decides_whether_tfo_pays() {
        let dst = "198.18.0.3:8080";
        let run = |accepted: u64| {
            let mut events: Vec<Event> = (0..accepted)
                .map(|i| Event { saved_us: Some(2_000), ..cli("accepted", dst, 64, 0, 10 + i) })
                .collect();
            events.push(cli("syn_retransmitted", dst, 64, 1_020_000, 5));
            report(&events, &Facts::default()).destinations[0].clone()
        };
        // 1.02 s lost against 2 ms saved each: it breaks even at one stall per 510 accepted.
        let d = run(100);
        assert_eq!((d.saved_us_total, d.saved_measured, d.net_us), (200_000, 100, -820_000));
        assert_eq!(d.break_even_accepted_per_stall, Some(510));
        assert!(
            d.verdict.sentence.contains(
                "TFO toward 198.18.0.3:8080 costs more than it saves: -820ms net over 101 connections \
                 (one stall per 100 accepted at this round trip of 2ms; it breaks even at one per 510): \
                 stop using it toward 198.18.0.3:8080 in curl or fix the path"
            ),
            "{}",
            d.verdict.sentence
        );
        let ev = d.verdict.evidence.join("\n");
        assert!(
            ev.contains(
                "saved 200ms (100 of 100 accepted measured, 2ms each), lost 1.02s (1 stall): net -820ms"
            ),
            "{ev}"
        );

        let d = run(1_000);
        assert_eq!(d.net_us, 980_000);
        assert!(
            d.verdict.sentence.ends_with(
                "fix the path (TFO still pays toward it); TFO toward 198.18.0.3:8080 pays: +980ms net over 1,001 \
                 connections"
            ),
            "{}",
            d.verdict.sentence
        );
        // With no stall at all: the balance is the verdict.
        let fine: Vec<Event> =
            (0..10).map(|i| Event { saved_us: Some(2_000), ..cli("accepted", dst, 64, 0, 10 + i) }).collect();
        let d = report(&fine, &Facts::default()).destinations[0].clone();
        assert_eq!(
            d.verdict.sentence,
            "TFO toward 198.18.0.3:8080 pays: +20ms net over 10 connections: 10 of 10 SYN-data accepted"
        );
        // Without measured savings (an old recording) the balance is unknown, not a loss.
        let mut old: Vec<Event> = (0..100).map(|i| cli("accepted", dst, 64, 0, 10 + i)).collect();
        old.push(cli("syn_retransmitted", dst, 64, 1_020_000, 5));
        let d = report(&old, &Facts::default()).destinations[0].clone();
        assert_eq!((d.saved_measured, d.break_even_accepted_per_stall), (0, None));
        assert!(!d.verdict.sentence.contains("net"), "{}", d.verdict.sentence);
    }

    #[test]
    fn a_names_addresses_name_their_namespace_and_sum_the_rest() {
        use super::{address_lines, AddressShare};
        let share = |i: u64, netns: u32| AddressShare {
            address: format!("198.18.0.{i}:443"),
            netns: Some(netns),
            connections: 2,
            outcomes: [("accepted".to_string(), 2)].into(),
            showing: 2,
            of: 2,
            stalled: 1,
            lost_us_total: i * 1_000,
            extra_round_trips: 0,
            extra_round_trip_us: 0,
        };
        let one_ns: Vec<AddressShare> = (1..=3).map(|i| share(i, 7)).collect();
        assert_eq!(address_lines(&one_ns)[0], "address 198.18.0.1:443: 2 connections (accepted=2), 1ms lost");
        let lines = address_lines(&[share(1, 7), share(2, 8)]);
        assert_eq!(lines[1], "address 198.18.0.2:443 (netns 8): 2 connections (accepted=2), 2ms lost");
        let many: Vec<AddressShare> = (1..=11).map(|i| share(i, 7)).collect();
        let lines = address_lines(&many);
        assert_eq!(lines.len(), super::ADDRESSES_LISTED + 1);
        assert_eq!(lines[super::ADDRESSES_LISTED], "and 3 more addresses: 6 connections, 30ms lost");
    }

    /// A refused SYN-data whose SYN-ACK said `cause`.
    fn refused(dst: &str, cause: Cause, t: u64) -> Event {
        Event { cause: Some(cause), ..cli("data_not_acked", dst, 64, 0, t) }
    }

    #[test]
    fn no_tfo_option_is_a_server_that_stopped_tfo() {
        let dst = "198.18.0.2:8080";
        let mut events = vec![cli("accepted", dst, 64, 0, 0)];
        events.extend((0..4).map(|i| refused(dst, Cause::NoTfoOption, 10 + i)));
        let r = report(&events, &Facts::default());
        let d = &r.destinations[0];
        assert_eq!(d.verdict.kind, Kind::ServerStoppedTfo);
        // 1 accepted + 4 not acked = 5 sent.
        assert!(
            d.verdict.sentence.starts_with(
                "server 198.18.0.2:8080 no longer accepts TFO: 4 of 5 SYN-data not acknowledged (cookie \
                 accepted earlier), its SYN-ACKs without a TFO option: the server's team"
            ),
            "{}",
            d.verdict.sentence
        );
        assert_eq!((d.data_not_acked, d.refusals.no_tfo_option, d.refusals.longest_run), (4, 4, 4));
        // Not stalls: one extra round trip each, estimated by the handshake time.
        assert_eq!((d.stalled, d.lost_us_total), (0, 0));
        assert_eq!((d.extra_round_trips, d.extra_round_trip_us), (4, 800));
        assert!(d.verdict.evidence[0].ends_with("after the handshake, +200us each"), "{:?}", d.verdict);
        assert_eq!(d.verdict.evidence[1], "what the SYN-ACKs said: no_tfo_option=4");
        assert!(d.verdict.evidence.iter().any(|e| e.contains("syncookie mode")), "{:?}", d.verdict);
    }

    #[test]
    fn an_untold_cause_says_why_it_could_not_be_told() {
        let dst = "198.18.0.2:8080";
        // A recording made before causes: no cause field at all.
        let old: Vec<Event> = (0..4).map(|i| cli("data_not_acked", dst, 64, 0, i)).collect();
        let d = report(&old, &Facts::default()).destinations[0].clone();
        assert_eq!(d.verdict.kind, Kind::SynDataRefused);
        assert_eq!(
            d.verdict.sentence,
            "server 198.18.0.2:8080 refused 4 of 4 SYN-data; why could not be told: the recording was made \
             before tfo-trace kept causes"
        );
        let unknown: Vec<Event> = (0..4).map(|i| refused(dst, Cause::Unknown, i)).collect();
        let d = report(&unknown, &Facts::default()).destinations[0].clone();
        assert_eq!((d.verdict.kind, d.refusals.unknown), (Kind::SynDataRefused, 4));
        assert!(d.verdict.sentence.contains("needs CAP_SYS_ADMIN"), "{}", d.verdict.sentence);
    }

    #[test]
    fn the_same_cookie_is_a_server_that_took_the_cookie_not_the_data() {
        let dst = "198.18.0.2:8080";
        let events: Vec<Event> = (0..3).map(|i| refused(dst, Cause::SameCookie, i)).collect();
        let d = report(&events, &Facts::default()).destinations[0].clone();
        assert_eq!(d.verdict.kind, Kind::SynDataNotTaken);
        assert!(
            d.verdict.sentence.starts_with(
                "server 198.18.0.2:8080 accepted the cookie but not the data in 3 of 3 SYN-data"
            ),
            "{}",
            d.verdict.sentence
        );
        assert!(d.verdict.evidence.join("\n").contains("TcpExtListenOverflows"), "{:?}", d.verdict);
    }

    /// Issue 38: a new cookie once, then accepted again (a key rotated without a backup,
    /// or the client's address changed once behind NAT): said as a one-off, and its balance
    /// gives no "stop using" advice even where it costs.
    #[test]
    fn a_new_cookie_once_then_accepted_is_a_one_off_not_a_reason_to_stop() {
        let dst = "198.18.0.2:8080";
        let saved = |ts| Event { saved_us: Some(10), ..cli("accepted", dst, 64, 0, ts) };
        for cause in [Some(Cause::NewCookie), None] {
            let first = Event { cause, ..cli("data_not_acked", dst, 64, 0, 10) };
            let events = vec![saved(1), first, saved(11)];
            let d = report(&events, &Facts::default()).destinations[0].clone();
            assert_eq!(d.verdict.kind, Kind::KeyRotatedWithoutBackup, "{cause:?}: {:?}", d.verdict);
            assert!(
                d.verdict.sentence.starts_with(
                    "server 198.18.0.2:8080 refused 1 of 3 SYN-data once, then accepted again: its TFO key was \
                     likely rotated without a backup key, or the client's address as the server sees it \
                     changed (NAT): a one-off, not a fault; when rotating, keep the old key as backup \
                     (`net.ipv4.tcp_fastopen_key=NEW,OLD`, or TCP_FASTOPEN_KEY with two keys)"
                ),
                "{}",
                d.verdict.sentence
            );
            assert!(d.verdict.sentence.contains("costs more than it saves"), "{}", d.verdict.sentence);
            assert!(
                !d.verdict.sentence.contains("stop using") && !d.verdict.sentence.contains("stop TFO"),
                "{}",
                d.verdict.sentence
            );
        }
        // One new cookie, nothing since: a one-off so far, said as such.
        let d = report(&[saved(1), refused(dst, Cause::NewCookie, 10)], &Facts::default()).destinations[0]
            .clone();
        assert_eq!(d.verdict.kind, Kind::KeyRotatedWithoutBackup);
        assert!(
            d.verdict.sentence.contains("1 of 2 SYN-data with a new cookie, none accepted since the last"),
            "{d:?}"
        );
        // Two rotations, each refusal alone between acceptances, the last not followed by
        // one yet: still one-offs, no churn.
        let twice = vec![
            saved(1),
            refused(dst, Cause::NewCookie, 10),
            saved(11),
            saved(12),
            refused(dst, Cause::NewCookie, 13),
        ];
        let d = report(&twice, &Facts::default()).destinations[0].clone();
        assert_eq!((d.verdict.kind, d.refusals.longest_run), (Kind::KeyRotatedWithoutBackup, 1));
        // A cause not told, refused again after the last acceptance: it goes on, no one-off.
        let going_on = vec![
            saved(1),
            cli("data_not_acked", dst, 64, 0, 10),
            saved(11),
            cli("data_not_acked", dst, 64, 0, 12),
        ];
        let d = report(&going_on, &Facts::default()).destinations[0].clone();
        assert_eq!(d.verdict.kind, Kind::SynDataRefused);
        assert!(d.verdict.sentence.contains("stop using"), "{}", d.verdict.sentence);
    }

    /// Issue 38: new cookies that go on (a fleet without a shared key, a NAT pool): churn,
    /// with its figures, and advice to share the key, never to fix the path.
    #[test]
    fn new_cookies_that_go_on_are_churn() {
        let dst = "198.18.0.2:8080";
        let mut events = vec![cli("accepted", dst, 64, 0, 1)];
        events.extend((0..6).map(|i| refused(dst, Cause::NewCookie, 10 + i)));
        events.push(cli("accepted", dst, 64, 0, 20));
        events.extend((0..2).map(|i| refused(dst, Cause::NewCookie, 30 + i)));
        let d = report(&events, &Facts::default()).destinations[0].clone();
        assert_eq!(d.verdict.kind, Kind::CookieChurn, "{:?}", d.verdict);
        assert_eq!((d.refusals.new_cookie, d.refusals.longest_run, d.data_not_acked), (8, 6, 8));
        assert_eq!(
            d.verdict.sentence,
            "the servers behind 198.18.0.2:8080 do not share a TFO key (anycast, a load balancer), or the \
             client's address changes per connection (a NAT pool): 8 of 10 SYN-data refused, a new cookie 8 \
             times: every SYN-data is refused and resent (+1 RTT each, 200us): share the key across them (or \
             pin the client's source address), or stop TFO toward 198.18.0.2:8080 in curl"
        );
        let ev = d.verdict.evidence.join("\n");
        assert!(ev.contains("the cookie changed 8 times (a new one on 8 of 8 refusals); the longest run of refusals in a row: 6; 2 accepted"), "{ev}");
        assert!(!d.verdict.sentence.contains("fix the path"), "{}", d.verdict.sentence);
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

    /// Issue 38, item 5: a cookie sent with no data gains nothing; the verdict and the
    /// evidence name the processes that did it, not those that sent data.
    #[test]
    fn a_cookie_without_data_gains_nothing_in_the_process_that_sent_it() {
        let smtp =
            |t| Event { comm: "postfix".into(), ..cli("cookie_sent_no_data", "198.18.0.7:25", 0, 0, t) };
        let mut events = vec![cli("cookie_requested", "198.18.0.7:25", 0, 0, 0)];
        events.extend((1..4).map(smtp));
        let r = report(&events, &Facts::default());
        let d = &r.destinations[0];
        assert_eq!(d.verdict.kind, Kind::TfoGainsNothing);
        assert_eq!((d.verdict.support.connections, d.verdict.support.of_connections), (3, 4));
        assert_eq!(
            d.verdict.sentence,
            "TFO toward 198.18.0.7:25 gains nothing in postfix: 3 of 4 connections sent a cookie but no data \
             in the SYN (the server speaks first, or the client reads before it writes): turn TFO off toward \
             it in postfix, or write the request before reading"
        );
        // Beside connections that send data and are accepted: healthy, with the evidence.
        events.push(cli("accepted", "198.18.0.7:25", 64, 0, 5));
        let d = report(&events, &Facts::default()).destinations[0].clone();
        assert_eq!(d.verdict.kind, Kind::Healthy);
        let ev = d.verdict.evidence.join("\n");
        assert!(ev.contains("3 SYNs in postfix carried a cached cookie and no data"), "{ev}");
    }
}
