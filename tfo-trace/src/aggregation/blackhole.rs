//! Blackhole detection's pauses of active TFO, per client namespace: which connection
//! tripped each pause, when it ends, and the connections it left without TFO. Pure: events
//! in ([`Pauses::add`]), one [`PauseSummary`] per namespace out, given what the
//! namespace's counter and sysctl say ([`Pauses::summary`]). `report`, `stalls`' summary
//! and `top` say the same figures.
//!
//! The kernel (net/ipv4/tcp_fastopen.c): a socket that used TFO (a client's SYN-data or
//! cookie request, or a server's TFO child: `syn_data_acked`) pauses active TFO in its
//! namespace on its third timeout in a row (`tcp_fastopen_active_detect_blackhole`:
//! `icsk_retransmits == 2` as it runs, tcp_update_rto_stats() counting each timeout after
//! it; tcp_timer.c 592/618 in 6.12), or when it gives up before it, in any state; and a TFO
//! client that got no data pauses it when the server's FIN or RST arrives out of order
//! (`tcp_fastopen_active_disable_ofo_check` and two sites in tcp_input.c). Each pause needs
//! `tcp_fastopen_blackhole_timeout_sec` above 0 (off by default since 5.14, and in the
//! stable kernels 5.10 and 6.1 alike) and moves TcpExtTCPFastOpenBlackhole and the
//! namespace's `tfo_active_disable_times`. While paused
//! (`tcp_fastopen_active_should_disable`), every connect in the namespace sends a plain
//! SYN: tfo-trace's `not_attempted`. The pause lasts the timeout << min(times - 1, 6) from
//! `tfo_active_disable_stamp`: its length and start are the kernel's, read by the programs
//! into the `not_attempted` and `active_disabled` events (`pause_times`, `pause_age_ms`);
//! where those are missing (an older recording), the n-th pause seen is taken as the n-th.
//!
//! Where a hook sees the pause (fentry, kprobe), its `active_disabled` event names the
//! socket. Elsewhere the tripper is found from the events: the timed-out connection whose
//! life spans the pause's start by the kernel's stamp (the earliest such, a pause each in
//! turn); without a stamp, the last connection whose SYNs timed out in that namespace
//! before a `not_attempted` when no pause was open; one that timed out during an open
//! pause starts a tentative pause, kept only where the counter moved more times than the
//! clear ones explain.
use std::{collections::BTreeMap, net::SocketAddr};

use serde::Serialize;

use crate::events::{Errno, EventRef, Outcome, Role, Timestamp, Trip};

/// Namespaces followed; a new one beyond this is not (a host has a handful).
const MAX_NAMESPACES: usize = 1024;
/// Pauses (and tentative ones) kept per namespace; later ones count in the last.
const MAX_SEGMENTS: usize = 64;
/// Destinations counted one by one per namespace; the others are summed.
const MAX_DESTINATIONS: usize = 256;
/// The kernel's cap on the doubling: `1 << min(times - 1, 6)`.
const MAX_DOUBLINGS: u32 = 6;
/// Timed-out connections kept per namespace for matching pauses to (the latest).
const MAX_SPANS: usize = 256;
/// How far a pause's start by the kernel's stamp may fall outside a connection's life and
/// still be its: the event says the stamp's age in whole ms, the stamp is a jiffy (up to 10
/// ms at HZ 100), and jiffies lag the clock events are stamped with by however late the
/// ticks run, which moves between the stamp and the event: 3 ms apart in a quiet 5.10 TCG
/// guest, over 20 ms in one beside two compilers. A connection that gave up that close
/// before the pause would have tripped its own (tcp_fastopen_active_detect_blackhole()'s
/// `expired`), so a wider window names no other.
const STAMP_SLACK_NS: u128 = 100_000_000;

/// The connection that paused active TFO.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Tripper {
    /// `198.18.0.3:8080`: where a client connected; for a server's TFO child, the client it
    /// served (`role` server).
    pub destination: String,
    #[serde(skip)]
    pub addr: SocketAddr,
    /// Client: a connect; server: a TFO child whose data timed out after its handshake.
    pub role: Role,
    pub pid: u32,
    pub comm: String,
    /// `active_disabled` (a hook saw the pause), `connect_failed` or `syn_retransmitted`.
    pub outcome: Outcome,
    /// What tripped it, where a hook told (`active_disabled`); else timeouts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trip: Option<Trip>,
    pub retransmits: u32,
    pub at: Timestamp,
}

impl Tripper {
    fn of(e: &EventRef<'_>) -> Tripper {
        let addr = SocketAddr::new(e.daddr, e.dport);
        Tripper {
            destination: addr.to_string(),
            addr,
            role: e.role,
            pid: e.pid,
            comm: e.comm.to_string(),
            outcome: e.outcome,
            trip: e.trip,
            retransmits: e.retransmits,
            at: Timestamp::from_unix_ns(e.unix_ns),
        }
    }
}

/// A pause as the kernel keeps it, from an event that read it: the namespace's count of
/// pauses (`tfo_active_disable_times`: this is its n-th) and when it began
/// (`tfo_active_disable_stamp`), where read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct KernelPause {
    nth: u16,
    began_ns: Option<u128>,
}

impl KernelPause {
    fn of(e: &EventRef<'_>) -> Option<KernelPause> {
        let nth = e.pause_times?;
        let began_ns = e.pause_age_ms.map(|ms| e.unix_ns.saturating_sub(u128::from(ms) * 1_000_000));
        Some(KernelPause { nth, began_ns })
    }
}

/// A connection whose SYNs timed out as a tripper's do, and its life.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Span {
    tripper: Tripper,
    began_ns: u128,
    ended_ns: u128,
}

impl Span {
    fn holds(&self, at_ns: u128) -> bool {
        self.began_ns.saturating_sub(STAMP_SLACK_NS) <= at_ns && at_ns <= self.ended_ns + STAMP_SLACK_NS
    }
}

/// Connections left without TFO, by destination (bounded).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct WithoutTfo {
    by_destination: BTreeMap<SocketAddr, u64>,
    /// Those to destinations beyond [`MAX_DESTINATIONS`].
    others: u64,
    total: u64,
}

impl WithoutTfo {
    fn add(&mut self, dst: SocketAddr) {
        self.total += 1;
        self.count(dst, 1);
    }

    fn count(&mut self, dst: SocketAddr, n: u64) {
        let room = self.by_destination.len() < MAX_DESTINATIONS;
        match self.by_destination.get_mut(&dst) {
            Some(m) => *m += n,
            None if room => {
                self.by_destination.insert(dst, n);
            }
            None => self.others += n,
        }
    }

    fn merge(&mut self, o: &WithoutTfo) {
        self.total += o.total;
        self.others += o.others;
        for (&d, &n) in &o.by_destination {
            self.count(d, n);
        }
    }
}

/// A stretch of one namespace's time while TFO was (or may have been) paused.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Segment {
    tripped_by: Option<Tripper>,
    /// A hook saw it (exact), the kernel's count said it, or it opened when no pause was:
    /// a pause for sure. Else tentative: a connection timed out during an open pause (a
    /// pause anew only if the counter says so).
    sure: bool,
    /// The pause as the kernel keeps it, where an event read it.
    kernel: Option<KernelPause>,
    /// The first TFO attempt that began after it: TFO was no longer paused then.
    resumed_ns: Option<u128>,
    without_tfo: WithoutTfo,
}

impl Segment {
    fn new(tripped_by: Option<Tripper>, sure: bool) -> Segment {
        Segment { tripped_by, sure, kernel: None, resumed_ns: None, without_tfo: WithoutTfo::default() }
    }

    /// When it began: by the kernel's stamp, else its tripper's event.
    fn began_ns(&self) -> Option<u128> {
        self.kernel.and_then(|k| k.began_ns).or_else(|| self.tripped_by.as_ref().map(|t| t.at.unix_ns()))
    }
}

#[derive(Clone, Debug, Default)]
struct Namespace {
    /// `active_disabled` events come here: the pauses are those, nothing is guessed.
    hooked: bool,
    /// The last connection whose SYNs timed out while no pause was open.
    candidate: Option<Tripper>,
    /// The latest connections whose SYNs timed out (matched with the kernel's stamps).
    spans: Vec<Span>,
    segments: Vec<Segment>,
}

impl Namespace {
    fn open(&self) -> Option<&Segment> {
        self.segments.last().filter(|s| s.resumed_ns.is_none())
    }

    fn push(&mut self, s: Segment) {
        if self.segments.len() < MAX_SEGMENTS {
            self.segments.push(s);
        } else if let Some(last) = self.segments.last_mut() {
            last.without_tfo.merge(&s.without_tfo);
        }
    }
}

/// Pauses of active TFO per client namespace, from the events.
#[derive(Clone, Debug, Default)]
pub struct Pauses {
    namespaces: BTreeMap<u32, Namespace>,
}

/// Whether the connection's SYNs timed out as those that trip blackhole detection do: a
/// third timeout (three SYNs resent before its SYN-ACK), or giving up
/// (tcp_write_err(): ETIMEDOUT, or an ICMP error it held). A reset (ECONNREFUSED) ends a
/// connect without it.
fn timed_out(e: &EventRef<'_>) -> bool {
    match e.outcome {
        Outcome::ConnectFailed => e.error != Some(Errno::RESET),
        Outcome::SynRetransmitted => e.retransmits >= 3,
        _ => false,
    }
}

impl Pauses {
    /// Counts one event (server events and most client ones change nothing).
    pub fn add(&mut self, e: &EventRef<'_>) {
        // A server's only: a TFO child's timeouts pausing the namespace's active TFO.
        if e.role != Role::Client && e.outcome != Outcome::ActiveDisabled {
            return;
        }
        let relevant = matches!(e.outcome, Outcome::ActiveDisabled | Outcome::NotAttempted) || timed_out(e);
        let room = self.namespaces.len() < MAX_NAMESPACES;
        if !(self.namespaces.contains_key(&e.netns) || relevant && room) {
            return;
        }
        let ns = self.namespaces.entry(e.netns).or_default();
        let at = e.unix_ns;
        // When the connection began: its SYN, where the handshake time is known.
        let began = at.saturating_sub(u128::from(e.handshake_us.unwrap_or(0)) * 1000);
        match e.outcome {
            Outcome::ActiveDisabled => {
                ns.hooked = true;
                ns.candidate = None;
                let mut s = Segment::new(Some(Tripper::of(e)), true);
                s.kernel = KernelPause::of(e).map(|k| KernelPause { began_ns: Some(at), ..k });
                ns.push(s);
            }
            Outcome::NotAttempted => {
                let kernel = KernelPause::of(e);
                // A pause the kernel counted since the open one (a hook's event lost or
                // filtered out, or none seen): one of its own.
                let later = ns.open().is_some_and(
                    |s| matches!((s.kernel, kernel), (Some(open), Some(now)) if now.nth > open.nth),
                );
                if ns.open().is_none() || later {
                    // With the kernel's stamp, its tripper is matched by time (summary).
                    let tripped_by =
                        if kernel.is_some_and(|k| k.began_ns.is_some()) { None } else { ns.candidate.take() };
                    let sure = !ns.hooked || later;
                    ns.push(Segment::new(tripped_by, sure));
                }
                if let Some(s) = ns.segments.last_mut() {
                    if s.kernel.is_none() {
                        s.kernel = kernel;
                    }
                    s.without_tfo.add(SocketAddr::new(e.daddr, e.dport));
                }
            }
            _ if !e.outcome.ends_connection() => {}
            _ => {
                // A TFO attempt: SYN-data, a cookie request, or a failure that carried data
                // (a plain SYN timing out during a pause carries none).
                let attempted = e.outcome != Outcome::ConnectFailed || e.syn_data_bytes > 0;
                if let Some(open) = ns.segments.last_mut().filter(|s| s.resumed_ns.is_none()) {
                    if attempted && open.began_ns().is_none_or(|b| began > b) {
                        open.resumed_ns = Some(at);
                    }
                }
                if ns.hooked || !timed_out(e) {
                    if attempted && ns.candidate.as_ref().is_some_and(|c| began > c.at.unix_ns()) {
                        ns.candidate = None; // TFO went on after it: it paused nothing
                    }
                    return;
                }
                if ns.spans.len() >= MAX_SPANS {
                    ns.spans.remove(0);
                }
                ns.spans.push(Span { tripper: Tripper::of(e), began_ns: began, ended_ns: at });
                match ns.open() {
                    // The kernel's count tells a pause anew at the next `not_attempted`.
                    Some(open) if open.kernel.is_some() => {}
                    // Timed out during a pause: a second pause only if the counter says so.
                    Some(_) => ns.push(Segment::new(Some(Tripper::of(e)), false)),
                    None => ns.candidate = Some(Tripper::of(e)),
                }
            }
        }
    }

    /// Namespaces with something to say (a pause, or connections left without TFO).
    pub fn namespaces(&self) -> impl Iterator<Item = u32> + '_ {
        self.namespaces.iter().filter(|(_, ns)| !ns.segments.is_empty()).map(|(&n, _)| n)
    }

    /// What the pauses of `netns` come to. `counted`: TcpExtTCPFastOpenBlackhole's change
    /// over the same time, where read (it decides how many pauses there were where no hook
    /// sees them); `timeout_s`: the namespace's tcp_fastopen_blackhole_timeout_sec now.
    pub fn summary(&self, netns: u32, counted: Option<u64>, timeout_s: Option<u32>) -> Option<PauseSummary> {
        let ns = self.namespaces.get(&netns);
        let segments = ns.map(|n| n.segments.as_slice()).unwrap_or_default();
        let hooked = ns.is_some_and(|n| n.hooked);
        let sure = segments.iter().filter(|s| s.sure).count() as u64;
        // Which segments are pauses: the sure ones; where the counter moved more often, the
        // latest tentative ones too; where it moved less, the earliest sure ones lose their
        // tripper (that pause began before the window, on a connection not seen).
        let mut is_pause: Vec<bool> = segments.iter().map(|s| s.sure).collect();
        let mut blamed: Vec<bool> = segments.iter().map(|s| s.tripped_by.is_some()).collect();
        let mut named: Vec<Option<Tripper>> = vec![None; segments.len()];
        if let Some(k) = counted.filter(|_| !hooked) {
            let mut more = k.saturating_sub(sure);
            for (i, s) in segments.iter().enumerate().rev() {
                if more == 0 {
                    break;
                }
                if !s.sure {
                    is_pause[i] = true;
                    more -= 1;
                }
            }
            let mut fewer = sure.saturating_sub(k);
            for (i, s) in segments.iter().enumerate() {
                if fewer == 0 {
                    break;
                }
                if s.sure && s.tripped_by.is_some() {
                    blamed[i] = false;
                    fewer -= 1;
                }
            }
        }
        // Where no hook names a pause, the kernel's stamp does: the timed-out connection
        // whose life spans it, the earliest first (each connection trips one pause).
        if !hooked {
            let spans = ns.map(|n| n.spans.as_slice()).unwrap_or_default();
            let mut taken = vec![false; spans.len()];
            for (i, s) in segments.iter().enumerate() {
                let Some(at) = s.kernel.and_then(|k| k.began_ns) else { continue };
                let found = (0..spans.len())
                    .filter(|&j| !taken[j] && spans[j].holds(at))
                    .min_by_key(|&j| spans[j].began_ns);
                if let Some(j) = found {
                    taken[j] = true;
                    blamed[i] = true;
                    named[i] = Some(spans[j].tripper.clone());
                }
            }
        }
        // Tentative segments that are no pause belong to the one before them.
        let mut pauses: Vec<Segment> = Vec::new();
        for (i, s) in segments.iter().enumerate() {
            let mut s = s.clone();
            if let Some(t) = named[i].take() {
                s.tripped_by = Some(t);
            }
            if !blamed[i] {
                s.tripped_by = None;
            }
            match pauses.last_mut() {
                Some(last) if !is_pause[i] => {
                    last.without_tfo.merge(&s.without_tfo);
                    last.resumed_ns = s.resumed_ns;
                }
                _ => pauses.push(s),
            }
        }
        let tripped = pauses.iter().filter(|p| p.tripped_by.is_some()).count() as u64;
        let count = if hooked { tripped } else { counted.unwrap_or(tripped).max(tripped) };
        let mut without = WithoutTfo::default();
        pauses.iter().for_each(|p| without.merge(&p.without_tfo));
        if count == 0 && (without.total == 0 || timeout_s.unwrap_or(0) == 0) {
            return None; // not_attempted with detection off is something else (TFO off)
        }
        // A pause lasts the timeout << (n - 1), up to << 6, n the kernel's count of it;
        // where no event read that, the n-th pause seen is taken as the n-th.
        let mut seen = 0u32;
        let each = pauses
            .iter()
            .map(|p| {
                let began = p.began_ns();
                // 0 now: detection was turned off since, the length it had is unknown.
                let length_s = began.and(timeout_s.filter(|&t| t > 0)).map(|t| {
                    seen += 1;
                    let nth = p.kernel.map_or(seen, |k| u32::from(k.nth).max(1));
                    u64::from(t) << (nth - 1).min(MAX_DOUBLINGS)
                });
                let until = began.zip(length_s).map(|(b, l)| b + u128::from(l) * 1_000_000_000);
                PauseFigures {
                    tripped_by: p.tripped_by.clone(),
                    nth: p.kernel.map(|k| k.nth),
                    began: began.map(Timestamp::from_unix_ns),
                    length_s,
                    until: until.map(Timestamp::from_unix_ns),
                    resumed: p.resumed_ns.map(Timestamp::from_unix_ns),
                    without_tfo: p.without_tfo.total,
                }
            })
            .collect();
        let mut by_destination: Vec<DestinationCount> = without
            .by_destination
            .iter()
            .map(|(a, &n)| DestinationCount { destination: a.to_string(), addr: *a, connections: n })
            .collect();
        by_destination.sort_by(|a, b| b.connections.cmp(&a.connections).then(a.addr.cmp(&b.addr)));
        Some(PauseSummary {
            netns,
            pauses: count,
            from_events: hooked,
            timeout_s,
            each,
            without_tfo: without.total,
            without_tfo_by_destination: by_destination,
            without_tfo_elsewhere: without.others,
        })
    }
}

/// Connections to one destination.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DestinationCount {
    pub destination: String,
    #[serde(skip)]
    pub addr: SocketAddr,
    pub connections: u64,
}

/// One pause.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PauseFigures {
    /// The connection that tripped it, where seen (null: before the window, or unseen).
    pub tripped_by: Option<Tripper>,
    /// Its number in the namespace's count of pauses (`tfo_active_disable_times`), where an
    /// event read it.
    pub nth: Option<u16>,
    /// When it began: the kernel's stamp (`tfo_active_disable_stamp`) where an event read
    /// it, else its tripper's event.
    pub began: Option<Timestamp>,
    /// How long it lasts: the sysctl's timeout, doubled for each pause before it (by the
    /// kernel's count where read, else by the pauses seen here), up to 64x.
    pub length_s: Option<u64>,
    /// When it ends: its start plus `length_s`.
    pub until: Option<Timestamp>,
    /// When a TFO attempt that began after it was seen: TFO was no longer paused.
    pub resumed: Option<Timestamp>,
    /// `not_attempted` connections during it.
    pub without_tfo: u64,
}

/// What blackhole detection did to one client namespace over the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PauseSummary {
    pub netns: u32,
    /// Pauses: the counter's change where no hook sees them, the `active_disabled` events
    /// where one does.
    pub pauses: u64,
    /// The pauses are the hooks' `active_disabled` events (else found from the counter).
    pub from_events: bool,
    /// `tcp_fastopen_blackhole_timeout_sec` of the namespace now, where read.
    pub timeout_s: Option<u32>,
    /// Each pause placed, the oldest first.
    pub each: Vec<PauseFigures>,
    /// Connections that went without TFO (`not_attempted`) in them, in all and by
    /// destination (the most first; those beyond the cap in `without_tfo_elsewhere`).
    pub without_tfo: u64,
    pub without_tfo_by_destination: Vec<DestinationCount>,
    pub without_tfo_elsewhere: u64,
}

impl PauseSummary {
    /// The destinations whose lost SYNs tripped a pause, each once, in order.
    pub fn tripping_destinations(&self) -> Vec<&Tripper> {
        let mut out: Vec<&Tripper> = Vec::new();
        for t in self.each.iter().filter_map(|p| p.tripped_by.as_ref()) {
            if !out.iter().any(|o| o.addr == t.addr) {
                out.push(t);
            }
        }
        out
    }

    /// Connections left without TFO towards destinations that tripped no pause: how many,
    /// and to how many destinations.
    pub fn to_others(&self) -> (u64, u64) {
        let trippers = self.tripping_destinations();
        let others: Vec<&DestinationCount> = self
            .without_tfo_by_destination
            .iter()
            .filter(|d| !trippers.iter().any(|t| t.addr == d.addr))
            .collect();
        let n = others.iter().map(|d| d.connections).sum::<u64>() + self.without_tfo_elsewhere;
        (n, others.len() as u64 + u64::from(self.without_tfo_elsewhere > 0))
    }

    /// The last pause, the one whose end matters now.
    pub fn last(&self) -> Option<&PauseFigures> {
        self.each.last()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{sample_event, Event};

    const NS: u32 = 4026532177;

    fn at(outcome: Outcome, host: u8, t_s: u64, retransmits: u32, data: u32) -> Event {
        Event {
            ts: Timestamp::from_unix_ns(u128::from(t_s) * 1_000_000_000),
            daddr: format!("198.18.0.{host}").parse().unwrap(),
            dport: 8080,
            netns: NS,
            pid: 7,
            comm: "curl".into(),
            retransmits,
            syn_data_bytes: data,
            handshake_us: Some(100),
            ..sample_event(Role::Client, outcome)
        }
    }

    fn pauses(events: &[Event]) -> Pauses {
        let mut p = Pauses::default();
        events.iter().for_each(|e| p.add(&e.view()));
        p
    }

    /// The lab's case on a backend without the hook: a cookie request to .3 gives up after
    /// its SYNs were lost, the counter moved once, then 4 connects to .2 go without TFO.
    #[test]
    fn the_connection_that_timed_out_before_the_plain_syns_tripped_it() {
        let mut events = vec![at(Outcome::Accepted, 2, 1, 0, 64), at(Outcome::ConnectFailed, 3, 10, 1, 0)];
        events.extend((11..15).map(|t| at(Outcome::NotAttempted, 2, t, 0, 0)));
        let s = pauses(&events).summary(NS, Some(1), Some(60)).unwrap();
        assert_eq!((s.pauses, s.from_events, s.without_tfo), (1, false, 4));
        let p = s.last().unwrap();
        let t = p.tripped_by.as_ref().unwrap();
        assert_eq!((t.destination.as_str(), t.outcome), ("198.18.0.3:8080", Outcome::ConnectFailed));
        assert_eq!(p.length_s, Some(60));
        assert_eq!(p.until.as_ref().unwrap().unix_ns(), 70 * 1_000_000_000);
        assert_eq!(s.to_others(), (4, 1));
        assert_eq!(s.without_tfo_by_destination[0].destination, "198.18.0.2:8080");
        // TFO tried again (the timeout set to 0): the pause is over.
        events.push(at(Outcome::Accepted, 2, 20, 0, 64));
        let s = pauses(&events).summary(NS, Some(1), Some(0)).unwrap();
        assert_eq!(s.last().unwrap().resumed.as_ref().unwrap().unix_ns(), 20 * 1_000_000_000);
        // No counter move: that failure paused nothing, and plain SYNs with detection off
        // are no pause.
        assert!(pauses(&events).summary(NS, Some(0), Some(0)).is_none());
        let s = pauses(&events).summary(NS, Some(0), Some(60)).unwrap();
        assert!(s.last().unwrap().tripped_by.is_none(), "began before the window: {s:?}");
    }

    #[test]
    fn a_hook_names_each_pause_and_each_doubles() {
        let mut events =
            vec![at(Outcome::ActiveDisabled, 3, 10, 2, 0), at(Outcome::ConnectFailed, 3, 11, 2, 0)];
        events.push(at(Outcome::NotAttempted, 2, 12, 0, 0));
        events.push(at(Outcome::NotAttempted, 3, 13, 0, 0));
        events.push(at(Outcome::CookieRequested, 3, 100, 0, 0));
        events.push(at(Outcome::ActiveDisabled, 3, 103, 2, 0));
        events.push(at(Outcome::NotAttempted, 4, 104, 0, 0));
        let s = pauses(&events).summary(NS, None, Some(60)).unwrap();
        assert_eq!((s.pauses, s.from_events, s.without_tfo), (2, true, 3));
        assert_eq!(s.each[0].length_s, Some(60));
        assert_eq!(s.each[1].length_s, Some(120), "doubled");
        assert!(s.each[0].resumed.is_some() && s.each[1].resumed.is_none());
        assert_eq!(s.tripping_destinations().len(), 1);
        assert_eq!(s.to_others(), (2, 2), "to .2 and .4; the one to .3 itself apart");
    }

    /// The kernel trips on a connect's third timeout (`icsk_retransmits == 2` as
    /// tcp_fastopen_active_detect_blackhole() runs): a SYN-ACK after two resent SYNs paused
    /// nothing, after three it did; a reset ends a connect without a timeout.
    #[test]
    fn only_a_third_timeout_or_giving_up_trips_it() {
        let tripped = |e: Event| {
            let mut events = vec![e];
            events.extend((11..13).map(|t| at(Outcome::NotAttempted, 2, t, 0, 0)));
            let s = pauses(&events).summary(NS, Some(1), Some(60)).unwrap();
            s.last().unwrap().tripped_by.as_ref().map(|t| t.outcome)
        };
        assert_eq!(tripped(at(Outcome::SynRetransmitted, 3, 10, 2, 64)), None);
        assert_eq!(tripped(at(Outcome::SynRetransmitted, 3, 10, 3, 64)), Some(Outcome::SynRetransmitted));
        assert_eq!(tripped(at(Outcome::ConnectFailed, 3, 10, 1, 64)), Some(Outcome::ConnectFailed));
        let reset = Event { error: Some(Errno::RESET), ..at(Outcome::ConnectFailed, 3, 10, 0, 64) };
        assert_eq!(tripped(reset), None);
    }

    /// Where no hook sees the pause, the kernel's stamp (read by the `not_attempted` events)
    /// names its connection, even one whose event comes after TFO stopped being attempted
    /// (a connect that trips at its third timeout and gives up later), and the kernel's
    /// count gives the pause's length, here the namespace's third pause: 4x the timeout.
    #[test]
    fn the_kernels_stamp_names_the_tripper_and_its_count_the_length() {
        let paused = |t: u64| Event {
            pause_times: Some(3),
            // The pause began at 13 s.
            pause_age_ms: Some(u32::try_from((t - 13) * 1000).unwrap()),
            ..at(Outcome::NotAttempted, 2, t, 0, 0)
        };
        let gave_up = Event { handshake_us: Some(10_000_000), ..at(Outcome::ConnectFailed, 3, 20, 6, 64) };
        let other = Event { handshake_us: Some(1_000_000), ..at(Outcome::ConnectFailed, 4, 12, 1, 64) };
        let events = vec![other, paused(14), paused(15), gave_up, paused(21)];
        let s = pauses(&events).summary(NS, Some(1), Some(60)).unwrap();
        assert_eq!((s.pauses, s.each.len(), s.without_tfo), (1, 1, 3), "{s:?}");
        let p = &s.each[0];
        assert_eq!(p.tripped_by.as_ref().map(|t| t.destination.as_str()), Some("198.18.0.3:8080"), "{p:?}");
        assert_eq!((p.nth, p.length_s), (Some(3), Some(240)));
        assert_eq!(p.began.as_ref().unwrap().unix_ns(), 13 * 1_000_000_000);
        assert_eq!(p.until.as_ref().unwrap().unix_ns(), (13 + 240) * 1_000_000_000);
    }

    #[test]
    fn a_second_timeout_during_a_pause_is_a_pause_only_where_the_counter_says_so() {
        let events = vec![
            at(Outcome::ConnectFailed, 3, 10, 1, 0),
            at(Outcome::NotAttempted, 2, 11, 0, 0),
            // A plain SYN to .3 failing during the pause, then one with data (in flight).
            at(Outcome::ConnectFailed, 3, 12, 1, 0),
            at(Outcome::NotAttempted, 2, 13, 0, 0),
        ];
        let one = pauses(&events).summary(NS, Some(1), Some(60)).unwrap();
        assert_eq!((one.pauses, one.each.len(), one.without_tfo), (1, 1, 2));
        let two = pauses(&events).summary(NS, Some(2), Some(60)).unwrap();
        assert_eq!((two.pauses, two.each.len()), (2, 2));
        assert_eq!(two.each[1].length_s, Some(120));
        assert_eq!((two.each[0].without_tfo, two.each[1].without_tfo), (1, 1));
    }
}
