//! `--names` against the real kernel and a real DNS server: dnsmasq serves a zone for each
//! lab's server addresses from its server namespace, the lab clients resolve through libc
//! (getaddrinfo) or with a query of their own over UDP or TCP, then connect. Every client
//! event must carry the name its namespace's resolver gave for its address (the name asked
//! for, through a CNAME), only while the answer's TTL lasts, and the outcomes under each
//! name must be the kernel's own counts (nstat) for the connections made to it.
use crate::common;

use std::{net::SocketAddr, time::Duration};

use common::{netns_inode, Deltas, TempFile, Tracer};
use serde_json::Value;
use tfo_trace::{
    events::{Event, Outcome, Role},
    lab::{
        dns::{Resolver, Seen, Zone},
        ClientArgs, Lab, LabConfig, Side,
    },
    names::GRACE,
};

const PORT: u16 = 8080;

macro_rules! require_dnsmasq {
    () => {
        require_kernel!();
        if let Some(why) = tfo_trace::lab::dns::cannot_serve() {
            common::skip(format!("{why}; cargo xtask setup installs dnsmasq-base"));
        }
    };
}

fn zone(entries: &[(&str, std::net::IpAddr)], ttl: u32, cnames: &[(&str, &str)]) -> Zone {
    Zone {
        addresses: entries.iter().map(|(n, a)| (n.to_string(), *a, ttl)).collect(),
        cnames: cnames.iter().map(|(a, t)| (a.to_string(), t.to_string())).collect(),
    }
}

fn connect(lab: &Lab, dst: SocketAddr, count: u32, resolve: Option<(&str, Resolver)>) -> u32 {
    let spec = ClientArgs {
        count,
        resolve: resolve.map(|(n, _)| n.to_string()),
        resolver: resolve.map_or(Resolver::Libc, |(_, r)| r),
        ..ClientArgs::new(dst)
    };
    let run = lab.run_client(common::exe(), &spec).unwrap_or_else(|e| panic!("{dst} {resolve:?}: {e:#}"));
    assert_eq!(run.ok_count(), count as usize, "{run:?}");
    run.pid
}

/// The client events of process `pid`, as (destination, name, outcome).
fn of_pid(events: &[Event], pid: u32) -> Vec<(SocketAddr, Option<String>, Outcome)> {
    events
        .iter()
        .filter(|e| e.role == Role::Client && e.pid == pid)
        .map(|e| (SocketAddr::new(e.daddr, e.dport), e.dname.as_deref().map(str::to_string), e.outcome))
        .collect()
}

fn names_of(events: &[(SocketAddr, Option<String>, Outcome)]) -> Vec<Option<&str>> {
    events.iter().map(|(_, n, _)| n.as_deref()).collect()
}

/// One name with two addresses, one behind a middlebox that drops SYN-data; a CNAME; IPv6;
/// libc, UDP and TCP lookups; a second lab with its own resolver and a TTL that runs out.
fn every_connection_is_named_by_its_namespace_s_resolver() {
    require_dnsmasq!();
    let lab = Lab::create(LabConfig { server_addrs: 2, ..LabConfig::default() }).unwrap();
    let other = Lab::create(LabConfig::default()).unwrap();
    let [clean, dropped] = [0, 1].map(|i| SocketAddr::new(lab.server_addr(i, false).unwrap(), PORT));
    let clean6 = SocketAddr::new(lab.server_addr(0, true).unwrap(), PORT);
    let far = SocketAddr::new(other.server_addr(0, false).unwrap(), PORT);
    let _dns = lab
        .start_dns(&zone(
            &[("api.lab.test", clean.ip()), ("api.lab.test", dropped.ip()), ("v6.lab.test", clean6.ip())],
            300,
            &[("www.lab.test", "api.lab.test")],
        ))
        .unwrap();
    let short_ttl = 1;
    let _other_dns = other.start_dns(&zone(&[("far.lab.test", far.ip())], short_ttl, &[])).unwrap();
    let _servers: Vec<_> = [(&lab, 0, false), (&lab, 1, false), (&lab, 0, true), (&other, 0, false)]
        .into_iter()
        .map(|(l, i, v6)| l.start_server(common::exe(), i, PORT, 16, v6).unwrap())
        .collect();
    // Cookies first, unnamed and untraced: every traced connection below carries data.
    for dst in [clean, dropped, clean6] {
        connect(&lab, dst, 1, None);
    }
    connect(&other, far, 1, None);
    lab.middlebox_drop_syn_data(Some(dropped.ip())).unwrap();

    let record = TempFile::new("names");
    let tracer = Tracer::start(&["--names", "--record", record.path()]);
    let before = Deltas::since(&lab);
    let libc = connect(&lab, clean, 2, Some(("api.lab.test", Resolver::Libc)));
    let udp = connect(&lab, dropped, 2, Some(("api.lab.test", Resolver::Udp)));
    let tcp = connect(&lab, clean, 1, Some(("www.lab.test", Resolver::Tcp)));
    let six = connect(&lab, clean6, 1, Some(("v6.lab.test", Resolver::Libc)));
    let counted = before.client();
    let far_named = connect(&other, far, 1, Some(("far.lab.test", Resolver::Udp)));
    // Past the TTL and the grace, unresolved: the name is gone. Resolved again: back.
    std::thread::sleep(Duration::from_secs(u64::from(short_ttl)) + GRACE + Duration::from_secs(1));
    let far_expired = connect(&other, far, 1, None);
    let far_again = connect(&other, far, 1, Some(("far.lab.test", Resolver::Libc)));
    let (events, stderr) = tracer.stop();
    let closing = common::closing(&stderr).unwrap_or_else(|| panic!("no closing summary: {stderr:?}"));
    assert!(closing["names"]["learnt"].as_u64().is_some_and(|n| n >= 7), "{closing}");
    assert_eq!(closing["names"]["dropped"], 0, "{closing}");

    let api = Some("api.lab.test");
    let libc = of_pid(&events, libc);
    assert_eq!(names_of(&libc), [api, api], "getaddrinfo: {libc:?}");
    let udp = of_pid(&events, udp);
    assert_eq!(names_of(&udp), [api, api], "the address behind the middlebox, same name: {udp:?}");
    assert!(udp.iter().all(|(d, _, o)| *d == dropped && *o == Outcome::SynRetransmitted), "{udp:?}");
    assert_eq!(names_of(&of_pid(&events, tcp)), [Some("www.lab.test")], "over TCP, through a CNAME");
    assert_eq!(names_of(&of_pid(&events, six)), [Some("v6.lab.test")], "AAAA");
    assert_eq!(
        names_of(&of_pid(&events, far_named)),
        [Some("far.lab.test")],
        "the other namespace's resolver"
    );
    assert_eq!(names_of(&of_pid(&events, far_expired)), [None], "its TTL ran out");
    assert_eq!(names_of(&of_pid(&events, far_again)), [Some("far.lab.test")], "resolved again");

    // The kernel's counts for the connections to api.lab.test: 3 with data acknowledged
    // (libc's 2 and tcp's 1), 2 whose SYN-data the middlebox dropped.
    let lab_ns = netns_inode(&lab, Side::Client);
    let under = |name: &str, outcome: Outcome| {
        events
            .iter()
            .filter(|e| e.netns == lab_ns && e.dname.as_deref() == Some(name) && e.outcome == outcome)
            .count() as u64
    };
    let api_accepted = under("api.lab.test", Outcome::Accepted) + under("www.lab.test", Outcome::Accepted);
    assert_eq!(
        api_accepted + under("v6.lab.test", Outcome::Accepted),
        counted.get("TcpExtTCPFastOpenActive"),
        "{counted:?}"
    );
    assert_eq!(under("api.lab.test", Outcome::SynRetransmitted), counted.get("TcpExtTCPFastOpenActiveFail"));
    assert_eq!(counted.get("TcpExtTCPSynRetrans"), 2, "{counted:?}");

    // The recording carries the names: a replay elsewhere has them.
    let text = std::fs::read_to_string(&record.0).unwrap();
    let recorded: Vec<Value> = text.lines().skip(1).map(|l| serde_json::from_str(l).unwrap()).collect();
    let named = recorded.iter().filter(|e| e["dname"] == "api.lab.test").count();
    assert_eq!(named, 4, "libc's and udp's connections, recorded with their name");

    // `report --group-by name` on the recording: one verdict for api.lab.test across its two
    // addresses, its counts the sums of theirs, which are the kernel's.
    let report = stdout_json(&["report", "--format", "json", "--from", record.path(), "--group-by", "name"]);
    let rows = report["destinations"].as_array().unwrap();
    let api =
        rows.iter().find(|r| r["destination"] == "api.lab.test").unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(api["destinations"], 2, "{api:#}");
    assert_eq!(api["connections"], 4, "{api:#}");
    assert_eq!(api["outcomes"], serde_json::json!({"accepted": 2, "syn_retransmitted": 2}), "{api:#}");
    assert_eq!(api["verdict"]["kind"], "syn_data_dropped", "{api:#}");
    let addresses = api["addresses"].as_array().unwrap();
    let summed: u64 = addresses.iter().map(|a| a["connections"].as_u64().unwrap()).sum();
    assert_eq!(summed, 4, "{addresses:?}");
    let at = |d: SocketAddr| addresses.iter().find(|a| a["address"] == d.to_string()).unwrap().clone();
    assert_eq!(at(dropped)["outcomes"]["syn_retransmitted"], counted.get("TcpExtTCPSynRetrans"));
    assert_eq!(at(clean)["outcomes"]["accepted"], 2);
    // By destination, each address lists the names it went by.
    let by_dest = stdout_json(&["report", "--format", "json", "--from", record.path()]);
    let row =
        by_dest["destinations"].as_array().unwrap().iter().find(|r| r["destination"] == clean.to_string());
    let names = &row.unwrap_or_else(|| panic!("{by_dest:#}"))["names"];
    assert!(
        names
            .as_array()
            .is_some_and(|n| n.contains(&"api.lab.test".into()) && n.contains(&"www.lab.test".into())),
        "{names}"
    );

    // `top --from` the recording: the NAME of each destination row.
    let top = stdout_json(&["top", "--from", record.path(), "--json"]);
    let dests = top["destinations"].as_array().unwrap_or_else(|| panic!("{top:#}"));
    let name_of =
        |d: SocketAddr| dests.iter().find(|r| r["destination"] == d.to_string()).map(|r| r["dname"].clone());
    assert_eq!(name_of(dropped), Some("api.lab.test".into()), "{top:#}");
    assert_eq!(name_of(clean6), Some("v6.lab.test".into()), "{top:#}");
}

/// Two names for one address, and a CNAME to one of them: each connection is named by the
/// last answer for its address before it, in the order the kernel saw the answers arrive
/// and the SYNs leave (tcpdump on the client's veth), also when that answer repeats a name
/// the address already had (issue 42). The zone's TTL (300 s) outlasts the test: every
/// answer is still valid at every connection.
fn a_repeated_answer_makes_its_name_the_current_one(v6: bool) {
    require_dnsmasq!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, v6).unwrap(), PORT);
    let _dns = lab
        .start_dns(&zone(
            &[("good.lab.test", dst.ip()), ("other.lab.test", dst.ip())],
            300,
            &[("alias.lab.test", "good.lab.test")],
        ))
        .unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 16, v6).unwrap();
    connect(&lab, dst, 1, None); // the cookie, unnamed and untraced

    let capture = lab.capture_lookups(PORT).unwrap();
    let tracer = Tracer::start(&["--names"]);
    // The two cases: good, other, good again (a query of the client's own); good,
    // its alias, good again (getaddrinfo). Each lookup, then one connection.
    let steps = [
        ("good.lab.test", Resolver::Udp),
        ("other.lab.test", Resolver::Udp),
        ("good.lab.test", Resolver::Udp),
        ("good.lab.test", Resolver::Libc),
        ("alias.lab.test", Resolver::Libc),
        ("good.lab.test", Resolver::Libc),
    ];
    let pids: Vec<u32> = steps.iter().map(|&(name, how)| connect(&lab, dst, 1, Some((name, how)))).collect();
    let (events, _) = tracer.stop();
    let wire = capture.stop();

    for (&pid, (asked, how)) in pids.iter().zip(steps) {
        let mine: Vec<&Event> = events.iter().filter(|e| e.role == Role::Client && e.pid == pid).collect();
        assert!(!mine.is_empty(), "no client event of {asked} ({how:?}, pid {pid}): {events:?}");
        for e in mine {
            // Its SYN: the last one from its port before the event (the kernel may give a
            // later connection the same source port; the first SYN of the port would then
            // be another connection's).
            let syn_at = wire
                .iter()
                .filter_map(|s| match s {
                    Seen::Syn { at_ns, sport } if *sport == e.sport && *at_ns <= e.ts.unix_ns() => {
                        Some(*at_ns)
                    }
                    _ => None,
                })
                .max()
                .unwrap_or_else(|| {
                    panic!("no SYN from port {} before its event on the wire: {wire:?}", e.sport)
                });
            // The wire's account: the last answer that gave dst's address before the SYN.
            let (answered_at, answered) = wire
                .iter()
                .filter_map(|s| match s {
                    Seen::Answer { at_ns, asked, addrs } if *at_ns < syn_at && addrs.contains(&dst.ip()) => {
                        Some((*at_ns, asked.as_str()))
                    }
                    _ => None,
                })
                .max_by_key(|(at, _)| *at)
                .unwrap_or_else(|| panic!("no answer for {dst} before the SYN at {syn_at}: {wire:?}"));
            assert_eq!(answered, asked, "the lab: the lookup before this connection was its own: {wire:?}");
            assert_eq!(
                e.dname.as_deref(),
                Some(answered),
                "{asked} ({how:?}) then a connection: answer at {answered_at} ns, SYN at {syn_at} ns, event at {} ns; wire: {wire:?}",
                e.ts.unix_ns()
            );
        }
    }
}

/// `tfo-trace ARGS` exits 0; its stdout's last JSON document.
fn stdout_json(args: &[&str]) -> Value {
    let out = std::process::Command::new(common::exe()).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().rev().find(|l| l.starts_with('{'));
    match last {
        Some(l) if text.lines().count() > 1 && serde_json::from_str::<Value>(l).is_ok() => {
            serde_json::from_str(l).unwrap()
        }
        _ => serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}")),
    }
}

module_tests!(
    every_connection_is_named_by_its_namespace_s_resolver,
    a_repeated_answer_makes_its_name_the_current_one { v4: false, v6: true },
);
