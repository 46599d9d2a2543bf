//! The wire's account of stalls, against which every stall the tracer reports is checked.
//!
//! tcpdump on the client's veth (`Lab::capture_syns`) shows each SYN a client sent. One
//! connection is a source port *and* an initial sequence number ([`connections`]): the
//! kernel may give a later connection the source port of one that has closed (it did,
//! 47076 twice in one run of three), and only the sequence number, the same on every
//! SYN a connection resends, tells the two apart. A
//! stalled connection's time lost is, on the wire, the gap from its first SYN (the one with
//! the data, or with an empty TFO option) to the last SYN resent before the SYN-ACK; the
//! tracer times the same connection from its connect() to the resent SYN's send in the
//! stack, microseconds off the capture points on hardware. So a stall must be at least the
//! kernel's 1 s initial RTO less one timer tick, and within [`tolerance_s`] of its gap: max(2 ms, 0.5 %) on
//! hardware, 20 ms in a TCG guest (the VM matrix: `TFO_VM_ACCEL=tcg`, set by the guest's
//! /init), where the emulated stack holds a packet for milliseconds now and then: 0.2-5.4 ms
//! in a 5.10 guest alone on a core, and once 11.0 ms (the first SYN's way from connect() to
//! the veth) with two guests on the two shared cores. A stall measured to the SYN-ACK
//! instead of the resent SYN is off by the round trip (tests add 50 ms of netem delay where
//! the kernel has it, so the two differ), a ns -> µs conversion by 1024 by 2.3 % (and under
//! the initial RTO): both fail.
use std::fmt::Display;

use tfo_trace::{events::Event, lab::WireSyn};

/// The kernel's initial SYN retransmission timeout (TCP_TIMEOUT_INIT).
pub const INITIAL_RTO_S: f64 = 1.0;

/// The shortest stall the initial RTO allows. The retransmit timer counts jiffies: it is due
/// HZ ticks after the tick the SYN was sent in, so it fires up to one tick (10 ms at HZ=100,
/// the coarsest a kernel is built with) before 1 s after the SYN itself. A 6.1 guest
/// (HZ=250) resent a SYN 0.999504 s after the first one on the wire.
pub const SHORTEST_STALL_S: f64 = INITIAL_RTO_S - 0.010;

/// Whether the tests run in a TCG guest (the VM matrix's /init says so).
pub fn in_tcg_guest() -> bool {
    std::env::var("TFO_VM_ACCEL").is_ok_and(|a| a == "tcg")
}

/// How far a stall may be from its gap on the wire (the module's doc).
pub fn tolerance_s(gap_s: f64) -> f64 {
    if in_tcg_guest() {
        0.020
    } else {
        (0.005 * gap_s).max(0.002)
    }
}

/// One connection on the wire: the SYNs a client sent with one source port and one initial
/// sequence number (the first one, then those resent), in the order seen, and the first
/// SYN-ACK that answered them (its ack is that sequence number plus one, plus the SYN's
/// data where the server took it).
#[derive(Debug)]
pub struct WireConnection<'w> {
    pub sport: u16,
    pub isn: u32,
    pub syns: Vec<&'w WireSyn>,
    pub synack: Option<&'w WireSyn>,
}

impl WireConnection<'_> {
    /// The first SYN (the one with the data, or the cookie request).
    pub fn first(&self) -> &WireSyn {
        self.syns[0]
    }

    /// The last SYN sent before the SYN-ACK: the first one again where none was resent.
    pub fn last(&self) -> &WireSyn {
        self.syns.last().expect("a connection has a SYN")
    }
}

/// The client's connections a capture saw, in the order of their first SYNs.
pub fn connections(syns: &[WireSyn]) -> Vec<WireConnection<'_>> {
    let mut conns: Vec<WireConnection<'_>> = Vec::new();
    for s in syns.iter().filter(|s| !s.syn_ack) {
        match conns.iter_mut().find(|c| c.sport == s.sport && c.isn == s.seq) {
            Some(c) => c.syns.push(s),
            None => conns.push(WireConnection { sport: s.sport, isn: s.seq, syns: vec![s], synack: None }),
        }
    }
    for c in &mut conns {
        c.syns.sort_by(|a, b| a.time_s.total_cmp(&b.time_s));
        let data = c.first().payload;
        c.synack = syns.iter().find(|a| {
            a.syn_ack
                && a.dport == c.sport
                && a.ack.is_some_and(|ack| ack.wrapping_sub(c.isn.wrapping_add(1)) <= data)
        });
    }
    conns.sort_by(|a, b| a.first().time_s.total_cmp(&b.first().time_s));
    conns
}

/// The connection of `sport` on the wire whose outcome came at `at_s` (unix seconds, the
/// time a tracer's event carries): of the connections that left that port, the last one
/// whose last SYN went before then. A port is reused only after the connection that held
/// it closed, so the later one's SYNs are all after the earlier one's outcome.
pub fn connection_at<'c, 'w>(
    conns: &'c [WireConnection<'w>],
    sport: u16,
    at_s: f64,
) -> Option<&'c WireConnection<'w>> {
    last_before(conns.iter().filter(|c| c.sport == sport).collect(), at_s, |c| c.last().time_s)
}

/// The connection of a tracer's event on the wire ([`connection_at`] at its port and time);
/// fails the test where the wire has none.
pub fn connection_of<'c, 'w>(conns: &'c [WireConnection<'w>], e: &Event) -> &'c WireConnection<'w> {
    connection_at(conns, e.sport, at_s(e)).unwrap_or_else(|| {
        panic!("no connection of port {} on the wire: {e:?}; the wire: {conns:?}", e.sport)
    })
}

/// Of one port's connections (in the order of their SYNs), the one whose outcome came at
/// `at_s`: the only one, or the last whose last SYN (`last_syn_s`) went before then.
fn last_before<T>(of_port: Vec<&T>, at_s: f64, last_syn_s: impl Fn(&T) -> f64) -> Option<&T> {
    // The two clocks (tcpdump's capture time, the event's) read apart.
    const SLACK_S: f64 = 0.005;
    match of_port[..] {
        [] => None,
        [only] => Some(only),
        _ => of_port.into_iter().filter(|c| last_syn_s(c) <= at_s + SLACK_S).last(),
    }
}

/// The unix time of an event, in seconds.
pub fn at_s(e: &Event) -> f64 {
    e.ts.unix_ns() as f64 / 1e9
}

/// One stalled connection: its port, its initial sequence number and its gap on the wire
/// (first SYN to last SYN), and when its last SYN went.
#[derive(Debug)]
struct Stall {
    sport: u16,
    isn: u32,
    gap_s: f64,
    last_s: f64,
}

/// The stalls a capture saw: every connection ([`connections`]) that sent more than one
/// SYN, with the gap from its first SYN to its last, in seconds.
#[derive(Debug)]
pub struct WireStalls(Vec<Stall>);

impl WireStalls {
    pub fn of(syns: &[WireSyn]) -> WireStalls {
        let stalls = connections(syns)
            .iter()
            .filter(|c| c.syns.len() > 1)
            .map(|c| Stall {
                sport: c.sport,
                isn: c.isn,
                gap_s: c.last().time_s - c.first().time_s,
                last_s: c.last().time_s,
            })
            .collect();
        WireStalls(stalls)
    }

    /// How many stalled connections the wire shows.
    pub fn count(&self) -> u64 {
        self.0.len() as u64
    }

    /// The wire's gap of every stall, summed.
    pub fn total_s(&self) -> f64 {
        self.0.iter().map(|s| s.gap_s).sum()
    }

    /// The stall of client port `sport` whose outcome came at `at_s`: where the port left
    /// more than one stalled connection, the last one whose resent SYN went before then
    /// ([`connection_at`]'s rule).
    fn of_port_at(&self, sport: u16, at_s: f64) -> Option<&Stall> {
        last_before(self.0.iter().filter(|s| s.sport == sport).collect(), at_s, |s| s.last_s)
    }

    /// The stall a tracer reported in event `e` (its port, its time, its `stall_us`): at
    /// least the initial RTO (less a jiffy, [`SHORTEST_STALL_S`]), and within
    /// [`tolerance_s`] of that connection's gap on the wire.
    pub fn assert_stall(&self, e: &Event, what: impl Display) {
        self.assert_stall_at(e.sport, at_s(e), e.stall_us, what)
    }

    /// [`WireStalls::assert_stall`] for a stall given by its parts: the client port, the
    /// unix time of its outcome and the stall.
    pub fn assert_stall_at(&self, sport: u16, at_s: f64, stall_us: u64, what: impl Display) {
        let wire = self.of_port_at(sport, at_s).unwrap_or_else(|| {
            panic!("{what}: no stall of port {sport} on the wire before {at_s:.6}: {self:?}")
        });
        let (gap, isn) = (wire.gap_s, wire.isn);
        let stall = stall_us as f64 / 1e6;
        let tolerance = tolerance_s(gap);
        eprintln!("port {sport} (isn {isn}): stall {stall:.6} s, on the wire {gap:.6} s");
        assert!(
            stall >= SHORTEST_STALL_S,
            "{what}: stall {stall:.6} s is under the {INITIAL_RTO_S} s initial RTO (less a tick)"
        );
        assert!(
            (stall - gap).abs() <= tolerance,
            "{what}: stall {stall:.6} s vs {gap:.6} s on the wire (port {sport}, isn {isn}): more than {:.1} ms apart",
            tolerance * 1e3
        );
    }

    /// A view's time lost over all of them (`lost_s`, printed to within `rounding_s`): the
    /// wire saw `n` stalls, and the sum is at least `n` initial RTOs and within the sum of
    /// their tolerances (plus the rounding) of the wire's total.
    pub fn assert_total(&self, n: u64, lost_s: f64, rounding_s: f64, what: impl Display) {
        assert_eq!(self.count(), n, "{what}: stalls on the wire: {self:?}");
        let (wire, tolerance) = (self.total_s(), self.0.iter().map(|s| tolerance_s(s.gap_s)).sum::<f64>());
        let label = what.to_string();
        let label = label.lines().next().unwrap_or_default();
        eprintln!("{label}: {lost_s:.6} s lost over {n} stalls, {wire:.6} s on the wire");
        assert!(
            lost_s + rounding_s >= n as f64 * SHORTEST_STALL_S,
            "{what}: {lost_s:.6} s over {n} stalls is under {n} initial RTOs"
        );
        assert!(
            (lost_s - wire).abs() <= tolerance + rounding_s,
            "{what}: {lost_s:.6} s lost vs {wire:.6} s on the wire over {n} stalls: more than {:.1} ms apart",
            (tolerance + rounding_s) * 1e3
        );
    }
}
