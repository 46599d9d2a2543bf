//! A client row's verdict in words (a destination, or a group of them: `--group-by`): one
//! function per verdict kind, each its sentence and the evidence that kind adds; the
//! figures are `aggregation::report::verdict::client`'s.
use super::{
    refusal,
    said::{hosts_line, Said},
};
use crate::{
    aggregation::{
        report::{
            connections::{Balance, ConnAcc},
            verdict::{AddressShare, ClientFigures, DestinationReport, Kind},
        },
        stall::Cause,
    },
    events::Outcome,
    kernel::tcp_metrics::TcpMetric,
    units,
};

/// Address lines a name's evidence lists; the others are summed in one line.
const ADDRESSES_LISTED: usize = 8;

/// What every kind's sentence of a client row draws on.
struct Row<'a> {
    f: &'a ClientFigures,
    a: &'a ConnAcc,
    /// Where the connections went (`198.18.0.2:8080`, `the destinations of process curl`).
    subj: String,
    /// `it`, or `them` for a group.
    it: &'a str,
    /// After "N of M connections": ` (2 of 5 destinations)` for a group, `, from 3 of 4
    /// hosts` for a fleet, or empty.
    spread: String,
    /// ` in curl`, or empty ([`in_clients`]).
    in_clients: String,
}

impl Row<'_> {
    fn count(&self, o: Outcome) -> u64 {
        self.a.count(o)
    }
}

/// How the sentences name where a row's connections went: `SYN-data to {subject}`.
fn subject(d: &DestinationReport) -> String {
    match d.verdict.figures.named_by_sender {
        true => format!("the destinations of {}", d.group),
        false => d.group.clone(),
    }
}

/// The client's namespace as the sentences name it.
fn namespace(f: &ClientFigures) -> &str {
    f.ns.as_deref().unwrap_or("the client's namespace")
}

/// The sentence and evidence of a client row's verdict.
pub(crate) fn said(d: &DestinationReport) -> Said {
    let f = &d.verdict.figures;
    let a = &f.acc;
    let support = &d.verdict.support;
    let mut spread = String::new();
    if f.many {
        spread.push_str(&format!(
            " ({} of {})",
            units::count(support.destinations.unwrap_or(0)),
            units::plural(d.destinations, "destination", "destinations")
        ));
    }
    if f.fleet {
        spread.push_str(&format!(
            ", from {} of {} hosts",
            units::count(support.hosts),
            units::count(support.of_hosts)
        ));
    }
    let row = Row {
        f,
        a,
        subj: subject(d),
        it: if f.many { "them" } else { "it" },
        spread,
        in_clients: in_clients(&f.clients, f.more_clients),
    };
    let kind = d.verdict.kind;
    let balance = a.balance();
    let mut evidence = Vec::new();
    let no_data = row.count(Outcome::CookieSentNoData);
    if no_data > 0 {
        evidence.push(no_data_line(no_data, &in_clients(&f.no_data_clients, f.more_no_data_clients)));
    }
    let sentence = match kind {
        Kind::SynDataDropped => syn_data_dropped(&row, &balance, &mut evidence),
        Kind::ServerStoppedTfo
        | Kind::CookieChurn
        | Kind::SynDataNotTaken
        | Kind::SynDataRefused
        | Kind::ClientNoCookieMode
        | Kind::KeyRotatedWithoutBackup => {
            let s = refusal::Subject {
                name: &row.subj,
                many: f.many,
                spread: &row.spread,
                in_clients: &row.in_clients,
                server: f.server.as_ref(),
            };
            refusal::sentence(kind, a, &s, &mut evidence)
        }
        Kind::CookieRequestDropped => cookie_request_dropped(&row, &mut evidence),
        Kind::SynDataReset => syn_data_reset(&row, &mut evidence),
        Kind::ConnectFailed => connect_failed(&row),
        Kind::NotAttempted => not_attempted(&row, &mut evidence),
        Kind::CookieWithoutData => cookie_without_data(&row),
        Kind::NoCookieGiven => super::no_cookie::sentence(&row.subj, &row.spread, a, f, &mut evidence),
        Kind::Healthy => healthy(&row),
        _ => cookie_requests_only(&row),
    };
    // A one-off refusal is no reason to stop using TFO, and churn's sentence gives its own
    // advice (the path is not at fault), as does a refusal by syncookies (a flood at the
    // server): no advice on their balance.
    let flooded = kind == Kind::ServerStoppedTfo && f.server.as_ref().is_some_and(|s| s.sent_syncookies());
    let advice = (!matches!(kind, Kind::KeyRotatedWithoutBackup | Kind::CookieChurn) && !flooded)
        .then_some(row.in_clients.as_str());
    let sentence = match balance_sentence(&row.subj, &balance, advice) {
        Some(b) if kind == Kind::Healthy => format!("{b}: {}", accepted_of_sent(&row)),
        Some(b) => format!("{sentence}; {b}"),
        None => sentence,
    };
    evidence.extend(balance_line(&balance));
    if let Some(m) = &f.metric {
        evidence.push(metrics_line(m, namespace(f)));
    }
    let worst: Vec<String> = f
        .worst
        .iter()
        .filter(|(_, l)| *l > 0)
        .map(|(d, l)| format!("{d} ({})", units::duration_us(*l)))
        .collect();
    if !d.addresses.is_empty() {
        // A name's addresses, each with its own counts (they hold what `most time lost` says).
        evidence.extend(address_lines(&d.addresses));
    } else if f.many && !worst.is_empty() {
        evidence.push(format!("most time lost: {}", worst.join(", ")));
    }
    if f.fleet {
        evidence.push(hosts_line(&d.hosts));
    }
    Said { sentence, evidence }
}

/// `+1.02s each`: `total` over `n`.
fn each(total: u64, n: u64) -> String {
    units::duration_us(total / n.max(1))
}

/// `3 of 4 SYN-data accepted`, with the row's spread.
fn accepted_of_sent(r: &Row<'_>) -> String {
    format!(
        "{} of {} SYN-data accepted{}",
        units::count(r.count(Outcome::Accepted)),
        units::count(r.a.syn_data_sent()),
        r.spread
    )
}

fn syn_data_dropped(r: &Row<'_>, balance: &Balance, evidence: &mut Vec<String>) -> String {
    let (subj, it, spread, a) = (&r.subj, r.it, &r.spread, r.a);
    let dropped = a.syn_data_dropped();
    let accepted = r.count(Outcome::Accepted);
    let lost = a.lost_us_of(Cause::SynDataDropped);
    evidence.push(format!(
        "{} timed out and went again as a plain SYN after the initial RTO (TcpExtTCPSynRetrans, \
         TcpExtTCPFastOpenActiveFail), {} lost in total",
        units::plural(dropped, "SYN carrying data", "SYNs carrying data"),
        units::duration_us(lost)
    ));
    // tcp_conn_request(): a full accept queue drops any SYN (TcpExtListenOverflows, and
    // tcp_listendrop()'s TcpExtListenDrops) before TFO is tried: the server, not the path.
    if let Some(srv) = &r.f.server {
        evidence.push(format!(
            "the server's namespace ({}, listener {}) counted TcpExtListenOverflows +{} and TcpExtListenDrops \
             +{} in the window{}",
            srv.ns,
            srv.listener,
            srv.listen_overflows,
            srv.listen_drops,
            if srv.listen_overflows > 0 {
                ": its accept queue was full, and a full accept queue drops a SYN before TFO is tried, with \
                 data or without"
            } else {
                ": not its accept queue"
            }
        ));
        if srv.listen_overflows > 0 {
            return format!(
                "SYN-data to {subj} timed out in {} of {} connections{spread}, +{} each: the server dropped the \
                 SYNs, its accept queue full (TcpExtListenOverflows +{} in {}), not the path: its team looks at \
                 why the application does not accept() fast enough (its listen backlog, net.core.somaxconn, \
                 load); TFO is not the cause",
                units::count(dropped),
                units::count(a.syn_data_sent()),
                each(lost, dropped),
                srv.listen_overflows,
                srv.ns
            );
        }
    }
    if r.count(Outcome::CookieRequested) > 0
        || accepted > 0
        || r.f.metric.as_ref().is_some_and(|m| m.cookie_len.is_some())
    {
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
    // Where the accepted SYN-data saved more than the drops lost, TFO still pays: the path
    // is what to fix, not TFO. Where it costs more, the balance's own sentence gives the
    // advice; with no saving measured, this one does.
    let advice = if balance.saves > 0 && balance.net_us() > 0 {
        format!(": fix the path (TFO still pays toward {it})")
    } else if balance.saves > 0 {
        String::new()
    } else {
        format!(": disable TFO towards {it}{} or fix the path", r.in_clients)
    };
    format!(
        "SYN-data to {subj} was dropped on the path in {} of {} connections{spread}, +{} each{advice}",
        units::count(dropped),
        units::count(a.syn_data_sent()),
        each(lost, dropped)
    )
}

fn cookie_request_dropped(r: &Row<'_>, evidence: &mut Vec<String>) -> String {
    let dropped = r.a.stalls_of(Cause::CookieRequestDropped);
    let lost = r.a.lost_us_of(Cause::CookieRequestDropped);
    evidence.push(format!(
        "{} with an empty TFO option timed out, {} lost",
        units::plural(dropped, "SYN", "SYNs"),
        units::duration_us(lost)
    ));
    format!(
        "cookie requests to {} were lost in {} of {} connections{}, +{} each: something on the path drops \
         SYNs with the TFO option; disable TFO towards {}{}",
        r.subj,
        units::count(dropped),
        units::count(r.count(Outcome::CookieRequested).saturating_add(dropped)),
        r.spread,
        each(lost, dropped),
        r.it,
        r.in_clients
    )
}

fn connect_failed(r: &Row<'_>) -> String {
    format!(
        "{} to {} never completed{}: check that {} reachable",
        units::plural(r.count(Outcome::ConnectFailed), "TFO connection", "TFO connections"),
        r.subj,
        r.spread,
        if r.f.many { "the servers are" } else { "the server is" }
    )
}

/// SYN-data answered by a reset where SYNs without data get answered: TFO connects there
/// fail outright (ECONNREFUSED), with nothing in the kernel to fall back.
fn syn_data_reset(r: &Row<'_>, evidence: &mut Vec<String>) -> String {
    let (subj, it, spread, a) = (&r.subj, r.it, &r.spread, r.a);
    let reset = a.syn_data_reset;
    evidence.push(format!(
        "{} answered by a reset at once (connect_failed, ECONNREFUSED, no SYN timeout before it): \
         tcp_rcv_synsent_state_process() -> tcp_reset() ends the connect, and nothing the kernel \
         keeps stops the next one sending SYN-data again (only SYN timeouts mark the cookie cache)",
        units::plural(reset, "SYN carrying data was", "SYNs carrying data were")
    ));
    evidence.push(format!(
        "{} without data answered (cookie_requested, cookie_sent_no_data, not_attempted): SYNs \
         without a payload get through",
        units::plural(a.answered_without_data(), "SYN", "SYNs")
    ));
    format!(
        "SYN-data to {subj} is answered by a reset while its SYNs without data are not: {} of {} TFO \
         connects failed outright (ECONNREFUSED){spread}: a firewall or IPS on the path (or the \
         server's own) rejects SYNs that carry data: its owner lets them through, or the clients stop using TFO \
         toward {it}{}",
        units::count(reset),
        units::count(a.syn_data_sent()),
        r.in_clients
    )
}

fn not_attempted(r: &Row<'_>, evidence: &mut Vec<String>) -> String {
    evidence.push("the SYN carried no TFO option although the application asked for TFO".into());
    format!(
        "TFO to {} was not attempted in {} of {} connections{}: active TFO is off in {} (sysctl bit 0x1) \
         or paused after a detected blackhole",
        r.subj,
        units::count(r.count(Outcome::NotAttempted)),
        units::count(r.a.connections()),
        r.spread,
        namespace(r.f)
    )
}

/// A cookie without data in the SYN: never advice to turn TFO off (against no TFO it is the
/// same handshake); what it gains depends on who writes first, which the client's events do
/// not show (issue 51, item 2).
fn cookie_without_data(r: &Row<'_>) -> String {
    let in_no_data = in_clients(&r.f.no_data_clients, r.f.more_no_data_clients);
    format!(
        "{} of {} connections to {}{in_no_data} sent a cookie but no data in the SYN{}: no loss against no \
         TFO (the same handshake); a round trip saved where the server writes first (a banner: SMTP, FTP, \
         a database), as a SYN with a valid cookie lets the server's side write before the handshake \
         ends; nothing gained where the client writes first: it gains by putting its request in the SYN",
        units::count(r.count(Outcome::CookieSentNoData)),
        units::count(r.a.connections()),
        r.subj,
        r.spread,
    )
}

fn healthy(r: &Row<'_>) -> String {
    format!("TFO works towards {}: {}", r.subj, accepted_of_sent(r))
}

/// Nothing to judge yet: cookie requests only.
fn cookie_requests_only(r: &Row<'_>) -> String {
    format!(
        "{}: {}{}, no SYN-data yet (the first connection to a server fetches the cookie)",
        r.subj,
        units::plural(r.count(Outcome::CookieRequested), "cookie request", "cookie requests"),
        r.spread
    )
}

/// `ip tcp_metrics in netns cli: cookie present (8 bytes), fo_mss 1460, fo_syn_drops 12
/// (last 3s ago)`.
fn metrics_line(m: &TcpMetric, ns: &str) -> String {
    let mut s = format!("ip tcp_metrics in {ns}: cookie {}", m.cookie_redacted());
    if let Some(mss) = m.fo_mss {
        s.push_str(&format!(", fo_mss {mss}"));
    }
    s.push_str(&format!(", fo_syn_drops {}", m.fo_syn_drops));
    if let Some(a) = m.fo_syn_drop_age_s.filter(|_| m.fo_syn_drops > 0) {
        s.push_str(&format!(" (last {} ago)", units::duration_s(a)));
    }
    s
}

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
            "{} refused, ~{} gain forgone",
            units::plural(a.extra_round_trips, "SYN-data", "SYN-data"),
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
        "{}{in_clients} carried a cached cookie and no data: the server's kernel makes each connection \
         at once (a TFO child, allowed to send in SYN_RECV: tcp_try_fastopen) and counts a \
         TcpExtTCPFastOpenPassive; the client's counts neither TcpExtTCPFastOpenActive nor ActiveFail",
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
    use super::said;
    use crate::{
        aggregation::report::{
            of_events as report,
            verdict::{fixtures::*, Kind},
            Facts,
        },
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
            said(d).sentence,
            "SYN-data to 198.18.0.3:8080 was dropped on the path in 12 of 12 connections, +1.02s each: \
             disable TFO towards it in curl or fix the path"
        );
        assert_eq!((d.syn_data_dropped, d.syn_data_sent, d.connections, d.stalled), (12, 12, 13, 12));
        assert_eq!(d.lost_us_total, 12 * 1_020_000);
        assert_eq!(d.lost_us_per_stalled, 1_020_000);
        let ev = said(d).evidence.join("\n");
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
            said(&d).sentence.ends_with("disable TFO towards it in curl and wget or fix the path"),
            "{}",
            said(&d).sentence
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
            said(&d).sentence.contains(
                "TFO toward 198.18.0.3:8080 costs more than it saves: -820ms net over 101 connections \
                 (one stall per 100 accepted at this round trip of 2ms; it breaks even at one per 510): \
                 stop using it toward 198.18.0.3:8080 in curl or fix the path"
            ),
            "{}",
            said(&d).sentence
        );
        let ev = said(&d).evidence.join("\n");
        assert!(
            ev.contains(
                "saved 200ms (100 of 100 accepted measured, 2ms each), lost 1.02s (1 stall): net -820ms"
            ),
            "{ev}"
        );

        let d = run(1_000);
        assert_eq!(d.net_us, 980_000);
        assert!(
            said(&d).sentence.ends_with(
                "fix the path (TFO still pays toward it); TFO toward 198.18.0.3:8080 pays: +980ms net over 1,001 \
                 connections"
            ),
            "{}",
            said(&d).sentence
        );
        // With no stall at all: the balance is the verdict.
        let fine: Vec<Event> =
            (0..10).map(|i| Event { saved_us: Some(2_000), ..cli("accepted", dst, 64, 0, 10 + i) }).collect();
        let d = report(&fine, &Facts::default()).destinations[0].clone();
        assert_eq!(
            said(&d).sentence,
            "TFO toward 198.18.0.3:8080 pays: +20ms net over 10 connections: 10 of 10 SYN-data accepted"
        );
        // Without measured savings (an old recording) the balance is unknown, not a loss.
        let mut old: Vec<Event> = (0..100).map(|i| cli("accepted", dst, 64, 0, 10 + i)).collect();
        old.push(cli("syn_retransmitted", dst, 64, 1_020_000, 5));
        let d = report(&old, &Facts::default()).destinations[0].clone();
        assert_eq!((d.saved_measured, d.break_even_accepted_per_stall), (0, None));
        assert!(!said(&d).sentence.contains("net"), "{}", said(&d).sentence);
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
            said(d).sentence.starts_with(
                "server 198.18.0.2:8080 no longer accepts TFO: 4 of 5 SYN-data not acknowledged (cookie \
                 accepted earlier), its SYN-ACKs without a TFO option: the server's team"
            ),
            "{}",
            said(d).sentence
        );
        assert_eq!((d.data_not_acked, d.refusals.no_tfo_option, d.refusals.longest_run), (4, 4, 4));
        // Not stalls: one extra round trip each, estimated by the handshake time.
        assert_eq!((d.stalled, d.lost_us_total), (0, 0));
        assert_eq!((d.extra_round_trips, d.extra_round_trip_us), (4, 800));
        assert!(
            said(d).evidence[0].ends_with(
                "no time lost against no TFO, +1 RTT against a working TFO (gain forgone, ~200us each)"
            ),
            "{:?}",
            said(d).evidence
        );
        assert_eq!(said(d).evidence[1], "what the SYN-ACKs said: no_tfo_option=4");
        assert!(said(d).evidence.iter().any(|e| e.contains("syncookie mode")), "{:?}", d.verdict);
    }

    /// Issue 55, item 3: the destination is a listener of this host whose namespace answered
    /// SYNs with syncookies: the verdict names the flood, not a server that stopped TFO.
    #[test]
    fn no_tfo_option_from_a_listener_sending_syncookies_names_the_flood() {
        let dst = "198.18.0.2:8080";
        let mut events = vec![cli("accepted", dst, 64, 0, 0)];
        events.extend((0..4).map(|i| refused(dst, Cause::NoTfoOption, 10 + i)));
        let mut facts = Facts::default();
        facts.listeners.push(crate::aggregation::report::ListenerFact {
            netns: NS_SRV,
            addr: "0.0.0.0:8080".parse().unwrap(),
            max_qlen: Some(16),
        });
        facts.syncookies.insert(NS_SRV, 1);
        let counters = "TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 40 0 0\n";
        facts.counters.insert(NS_SRV, crate::kernel::netstat::Netstat::parse(counters).unwrap());
        let d = report(&events, &facts).destinations[0].clone();
        assert_eq!(d.verdict.kind, Kind::ServerStoppedTfo);
        let s = said(&d).sentence;
        assert!(
            s.starts_with(
                "server 198.18.0.2:8080 answered with syncookies (TcpExtSyncookiesSent +40 in netns"
            ),
            "{s}"
        );
        assert!(s.contains("keep net.ipv4.tcp_syncookies=1"), "{s}");
        for wrong in ["no longer accepts", "turns TFO back on", "stop using it"] {
            assert!(!s.contains(wrong), "{wrong:?} in {s}");
        }
    }

    #[test]
    fn an_untold_cause_says_why_it_could_not_be_told() {
        let dst = "198.18.0.2:8080";
        // A recording made before causes: no cause field at all.
        let old: Vec<Event> = (0..4).map(|i| cli("data_not_acked", dst, 64, 0, i)).collect();
        let d = report(&old, &Facts::default()).destinations[0].clone();
        assert_eq!(d.verdict.kind, Kind::SynDataRefused);
        assert_eq!(
            said(&d).sentence,
            "server 198.18.0.2:8080 refused 4 of 4 SYN-data; why could not be told: the recording was made \
             before tfo-trace kept causes"
        );
        let unknown: Vec<Event> = (0..4).map(|i| refused(dst, Cause::Unknown, i)).collect();
        let d = report(&unknown, &Facts::default()).destinations[0].clone();
        assert_eq!((d.verdict.kind, d.refusals.unknown), (Kind::SynDataRefused, 4));
        assert!(said(&d).sentence.contains("needs CAP_SYS_ADMIN"), "{}", said(&d).sentence);
    }

    #[test]
    fn the_same_cookie_is_a_server_that_took_the_cookie_not_the_data() {
        let dst = "198.18.0.2:8080";
        let events: Vec<Event> = (0..3).map(|i| refused(dst, Cause::SameCookie, i)).collect();
        let d = report(&events, &Facts::default()).destinations[0].clone();
        assert_eq!(d.verdict.kind, Kind::SynDataNotTaken);
        assert!(
            said(&d).sentence.starts_with(
                "server 198.18.0.2:8080 accepted the cookie but not the data in 3 of 3 SYN-data"
            ),
            "{}",
            said(&d).sentence
        );
        // Issue 51, item 4: not a full accept queue (that drops the SYN before TFO).
        let ev = said(&d).evidence.join("\n");
        assert!(
            ev.contains("tcp_fastopen_create_child failed") && ev.contains("Not a full accept queue"),
            "{ev}"
        );
        assert!(!said(&d).sentence.contains("accept queue"), "{}", said(&d).sentence);
    }

    /// Issue 38: a new cookie once, then accepted again (a key rotated without a backup,
    /// or the client's address changed once behind NAT): said as a one-off, and no "stop
    /// using" advice. Issue 51: a refusal loses no time against plain TCP (its data goes
    /// with the handshake's ACK), so it does not turn the balance negative either.
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
                said(&d).sentence.starts_with(
                    "server 198.18.0.2:8080 refused 1 of 3 SYN-data once, then accepted again: its TFO key was \
                     likely rotated without a backup key, or the client's address as the server sees it \
                     changed (NAT): a one-off, not a fault; when rotating, keep the old key as backup \
                     (`net.ipv4.tcp_fastopen_key=NEW,OLD`, or TCP_FASTOPEN_KEY with two keys)"
                ),
                "{}",
                said(&d).sentence
            );
            // Issue 51, item 3: the refusal forwent a round trip, it lost none against no
            // TFO: the balance is what was saved (20us), not negative.
            assert!(
                said(&d).sentence.contains("TFO toward 198.18.0.2:8080 pays: +20us net"),
                "{}",
                said(&d).sentence
            );
            assert_eq!((d.net_us, d.extra_round_trip_us), (20, 200), "{d:?}");
            assert!(
                !said(&d).sentence.contains("stop using") && !said(&d).sentence.contains("stop TFO"),
                "{}",
                said(&d).sentence
            );
        }
        // One new cookie, nothing since: a one-off so far, said as such.
        let d = report(&[saved(1), refused(dst, Cause::NewCookie, 10)], &Facts::default()).destinations[0]
            .clone();
        assert_eq!(d.verdict.kind, Kind::KeyRotatedWithoutBackup);
        assert!(
            said(&d).sentence.contains("1 of 2 SYN-data with a new cookie, none accepted since the last"),
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
        // Refusals cost nothing against no TFO: no advice to stop using it for them.
        assert!(!said(&d).sentence.contains("stop using"), "{}", said(&d).sentence);
        assert!(said(&d).sentence.contains("pays: +20us net"), "{}", said(&d).sentence);
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
            said(&d).sentence,
            "the servers behind 198.18.0.2:8080 do not share a TFO key (anycast, a load balancer), or the \
             client's address changes per connection (a NAT pool): 8 of 10 SYN-data refused, a new cookie 8 \
             times: every SYN-data is refused and its data resent on the SYN-ACK, +1 RTT against a working \
             TFO (200us each, a gain forgone, no loss against no TFO): share the key across them (or pin the \
             client's source address); turning TFO off toward 198.18.0.2:8080 in curl would win nothing back"
        );
        let ev = said(&d).evidence.join("\n");
        assert!(ev.contains("the cookie changed 8 times (a new one on 8 of 8 refusals); the longest run of refusals in a row: 6; 2 accepted"), "{ev}");
        assert!(!said(&d).sentence.contains("fix the path"), "{}", said(&d).sentence);
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
            said(by("198.18.0.2:80")).sentence,
            "TFO works towards 198.18.0.2:80: 1 of 1 SYN-data accepted"
        );
        assert_eq!(by("198.18.0.4:80").verdict.kind, Kind::Info);
        assert_eq!(by("198.18.0.5:80").verdict.kind, Kind::CookieRequestDropped);
        assert!(said(by("198.18.0.5:80")).sentence.contains("+1.01s each"));
        assert_eq!(by("198.18.0.6:80").verdict.kind, Kind::NotAttempted);
        assert_eq!(r.destinations[0].destination, "198.18.0.5:80", "most time lost first");
        assert!(r.listeners.is_empty() && r.namespaces.is_empty());
    }

    /// Issue 38, item 5: a cookie sent with no data; the verdict and the
    /// evidence name the processes that did it, not those that sent data.
    #[test]
    fn a_cookie_without_data_is_said_of_the_process_that_sent_it() {
        let smtp =
            |t| Event { comm: "postfix".into(), ..cli("cookie_sent_no_data", "198.18.0.7:25", 0, 0, t) };
        let mut events = vec![cli("cookie_requested", "198.18.0.7:25", 0, 0, 0)];
        events.extend((1..4).map(smtp));
        let r = report(&events, &Facts::default());
        let d = &r.destinations[0];
        assert_eq!(d.verdict.kind, Kind::CookieWithoutData);
        assert_eq!((d.verdict.support.connections, d.verdict.support.of_connections), (3, 4));
        // Issue 51, item 2: a server that speaks first gains a round trip from such a SYN,
        // and none loses one: never advice to turn TFO off.
        assert!(
            said(d).sentence.starts_with(
                "3 of 4 connections to 198.18.0.7:25 in postfix sent a cookie but no data in the SYN: no loss \
                 against no TFO (the same handshake); a round trip saved where the server writes first"
            ),
            "{}",
            said(d).sentence
        );
        assert!(!said(d).sentence.contains("TFO off"), "{}", said(d).sentence);
        // Beside connections that send data and are accepted: healthy, with the evidence.
        events.push(cli("accepted", "198.18.0.7:25", 64, 0, 5));
        let d = report(&events, &Facts::default()).destinations[0].clone();
        assert_eq!(d.verdict.kind, Kind::Healthy);
        let ev = said(&d).evidence.join("\n");
        assert!(ev.contains("3 SYNs in postfix carried a cached cookie and no data"), "{ev}");
    }

    /// The words of `aggregation::report::builder`'s grouping tests: a row of a prefix, a
    /// process, a fleet and a DNS name, each said.
    mod grouped {
        use super::said;
        use crate::aggregation::report::{
            builder::fixtures::*, grouping::GroupBy, verdict::DestinationReport,
        };

        #[test]
        fn a_prefix_is_one_verdict_with_its_evidence() {
            let b = built(&prefix_events(), GroupBy::Prefix, false, None);
            let rows: Vec<DestinationReport> = b.rows().collect();
            let r = &rows[0];
            assert!(
                said(r).sentence.starts_with(
                    "SYN-data to 203.0.113.0/24 was dropped on the path in 40 of 41 connections (40 of 41 destinations)"
                ),
                "{}",
                said(r).sentence
            );
            assert!(
                said(r).sentence.ends_with("disable TFO towards them in c or fix the path"),
                "{}",
                said(r).sentence
            );
            assert!(
                said(r).evidence.iter().any(|e| e.starts_with("most time lost: 203.0.113.0:443 (1s)")),
                "{:?}",
                said(r).evidence
            );
        }

        #[test]
        fn by_process() {
            let b = built(&process_events(), GroupBy::Process, false, None);
            let curl = b.rows().next().unwrap();
            assert!(
                said(&curl).sentence.starts_with("SYN-data to the destinations of process curl"),
                "{}",
                said(&curl).sentence
            );
        }

        #[test]
        fn hosts_merge_with_a_breakdown_per_verdict() {
            let b = built(&fleet_events(), GroupBy::Prefix, true, None);
            let r = b.rows().next().unwrap();
            assert!(
                said(&r)
                    .sentence
                    .contains("in 20 of 40 connections (10 of 10 destinations), from 2 of 4 hosts"),
                "{}",
                said(&r).sentence
            );
            let evidence = said(&r).evidence;
            let hosts_line = evidence.last().unwrap();
            assert!(
                hosts_line.starts_with("hosts: 2 of 4 show it: web-0.ams1.example.net (10 of 10)"),
                "{hosts_line}"
            );
        }

        #[test]
        fn a_name_is_one_verdict_across_its_addresses() {
            let b = built(&named_events(), GroupBy::Name, false, None);
            let rows: Vec<DestinationReport> = b.rows().collect();
            let api = &rows[0];
            assert!(
                said(api).sentence.starts_with(
                    "SYN-data to api.example was dropped on the path in 2 of 9 connections (1 of 2 destinations)"
                ),
                "{}",
                said(api).sentence
            );
            let ev = said(api).evidence.join("\n");
            assert!(
                ev.contains(
                    "address 198.18.0.4:443: 5 connections (accepted=1 data_not_acked=2 syn_retransmitted=2), 2s \
                     lost, 2 SYN-data refused, ~400us gain forgone"
                ),
                "{ev}"
            );
            assert!(
                ev.contains("\naddress 198.18.0.3:443: 4 connections (accepted=4), no time lost"),
                "{ev}"
            );
            assert!(!ev.contains("most time lost"), "the address lines say it: {ev}");
            let unnamed = &rows[1];
            assert_eq!(said(unnamed).sentence, "TFO works towards 198.18.0.5:443: 2 of 2 SYN-data accepted");
        }
    }
}
