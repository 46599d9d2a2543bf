//! The wire's account of stalls, against which every stall the tracer reports is checked.
//!
//! tcpdump on the client's veth (`Lab::capture_syns`) shows each SYN a client port sent. A
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
use std::{collections::BTreeMap, fmt::Display};

use tfo_trace::lab::WireSyn;

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

/// The stalls a capture saw: per client port that sent more than one SYN, the gap from its
/// first SYN to its last, in seconds.
#[derive(Debug)]
pub struct WireStalls(BTreeMap<u16, f64>);

impl WireStalls {
    pub fn of(syns: &[WireSyn]) -> WireStalls {
        let mut by_port: BTreeMap<u16, (f64, f64, u32)> = BTreeMap::new();
        for s in syns.iter().filter(|s| !s.syn_ack) {
            let e = by_port.entry(s.sport).or_insert((s.time_s, s.time_s, 0));
            e.0 = e.0.min(s.time_s);
            e.1 = e.1.max(s.time_s);
            e.2 += 1;
        }
        WireStalls(
            by_port.into_iter().filter(|(_, (.., n))| *n > 1).map(|(p, (a, b, _))| (p, b - a)).collect(),
        )
    }

    /// How many stalled connections the wire shows.
    pub fn count(&self) -> u64 {
        self.0.len() as u64
    }

    /// The wire's gap of every stall, summed.
    pub fn total_s(&self) -> f64 {
        self.0.values().sum()
    }

    /// One stall the tracer reported for client port `sport`: at least the initial RTO (less a
    /// jiffy, [`SHORTEST_STALL_S`]), and
    /// within [`tolerance_s`] of that port's gap on the wire.
    pub fn assert_stall(&self, sport: u16, stall_us: u64, what: impl Display) {
        let gap = *self
            .0
            .get(&sport)
            .unwrap_or_else(|| panic!("{what}: no stall of port {sport} on the wire: {self:?}"));
        let stall = stall_us as f64 / 1e6;
        let tolerance = tolerance_s(gap);
        eprintln!("port {sport}: stall {stall:.6} s, on the wire {gap:.6} s");
        assert!(
            stall >= SHORTEST_STALL_S,
            "{what}: stall {stall:.6} s is under the {INITIAL_RTO_S} s initial RTO (less a tick)"
        );
        assert!(
            (stall - gap).abs() <= tolerance,
            "{what}: stall {stall:.6} s vs {gap:.6} s on the wire (port {sport}): more than {:.1} ms apart",
            tolerance * 1e3
        );
    }

    /// A view's time lost over all of them (`lost_s`, printed to within `rounding_s`): the
    /// wire saw `n` stalls, and the sum is at least `n` initial RTOs and within the sum of
    /// their tolerances (plus the rounding) of the wire's total.
    pub fn assert_total(&self, n: u64, lost_s: f64, rounding_s: f64, what: impl Display) {
        assert_eq!(self.count(), n, "{what}: stalls on the wire: {self:?}");
        let (wire, tolerance) = (self.total_s(), self.0.values().map(|g| tolerance_s(*g)).sum::<f64>());
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
