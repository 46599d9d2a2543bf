//! The Prometheus metric model of `tfo-trace export`: the kernel's counts (and, for the
//! opt-in per-destination series, events) in, text exposition out. No I/O here (the HTTP
//! server and the textfile writer live in `views::export`), so the names, labels and the
//! series cap are unit-tested on fixed counts.
//!
//! Every series without a `destination` label comes from the kernel's per-CPU `COUNTS`
//! table, so it stays exact when the event stream falls behind (events lost show in
//! `tfo_trace_events_lost_total`, not as missing counts). What can make those counts short
//! is exported beside them ([`Health`]): `tfo_trace_hook_runs_missed_total` (runs the kernel
//! skipped), `tfo_trace_outcomes_uncounted_total` (the namespace table was full), and
//! `tfo_trace_connects_unfollowed_total` (counted, but without process or timing). Labels
//! stay bounded: `role` (2 values), `outcome` (13), and one opt-in label, `destination` or
//! `container`, only when the user asks for it, with a cap ([`Breakdown`]).
//!
//! Outcomes no hook of the running backend sees are counted by the kernel's own
//! per-namespace counters instead ([`super::kernel_counted`]): their series carry
//! `source="kernel_counter"` (and `other` as the opt-in label's value: no destination or
//! container is known), so `tfo_trace_connections_total{role,outcome}` summed over its
//! series means the same on every backend.
mod breakdown;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use prometheus_client::{
    collector::Collector,
    encoding::{prometheus_text, DescriptorEncoder, MetricEncoder},
    metrics::{info::Info, MetricType},
    registry::Registry,
};
use tfo_trace_common::HANDSHAKE_BOUNDS_NS;

pub use self::breakdown::{container_label, server_address, Breakdown, NO_CONTAINER, OTHER};
use self::breakdown::{Capped, Labels};
use super::{
    kernel_counted::{self, KernelCounted},
    refusals::{Refusals, Told},
    stall,
};
use crate::{
    backends::{self, Backend},
    events::{
        counts::{Health, KernelCounts},
        flight::writer::RecorderStats,
        Cause, Event, Outcome, Role,
    },
};

/// `Content-Type` of what [`Metrics::encode`] returns (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The series `tfo-trace export` serves, as `doctor` lists them (a test checks each one
/// against the real exposition).
pub const EXPOSED: &[(&str, &str)] = &[
    (
        "tfo_trace_connections_total",
        "{role,outcome[,destination[,dname]|container]} or {role,outcome,source=\"kernel_counter\"} counter",
    ),
    ("tfo_trace_syn_data_refused_total", "{cause[,destination[,dname]|container]} counter, from events"),
    ("tfo_trace_syn_data_bytes_total", "{role} counter"),
    ("tfo_trace_stall_seconds_total", "[{destination[,dname]|container}] counter"),
    ("tfo_trace_saved_seconds_total", "[{destination[,dname]|container}] counter"),
    ("tfo_trace_handshake_seconds", "{role} histogram, buckets resolving the 1 s SYN timeout"),
    ("tfo_trace_tfo_paused_connections_total", "counter: not_attempted where blackhole detection paused TFO"),
    ("tfo_trace_events_lost_total", "counter"),
    ("tfo_trace_hook_runs_missed_total", "counter"),
    ("tfo_trace_connects_unfollowed_total", "counter"),
    ("tfo_trace_outcomes_uncounted_total", "counter"),
    ("tfo_trace_kernel_counted_namespaces", "{state} gauge, where some outcome is source=\"kernel_counter\""),
    ("tfo_trace_syncookies_sent_total", "{netns} counter, TcpExtSyncookiesSent, namespaces where it moved"),
    ("tfo_trace_listen_overflows_total", "{netns} counter, TcpExtListenOverflows, namespaces where it moved"),
    ("tfo_trace_listen_drops_total", "{netns} counter, TcpExtListenDrops, namespaces where it moved"),
    ("tfo_trace_flight_recorder_events_total", "counter, with --flight-recorder: events written"),
    (
        "tfo_trace_flight_recorder_events_unwritten_total",
        "counter, with --flight-recorder: events not written (disk full, directory unwritable)",
    ),
    ("tfo_trace_flight_recorder_bytes", "gauge, with --flight-recorder: bytes in its segments"),
    (
        "tfo_trace_flight_recorder_oldest_timestamp_seconds",
        "gauge, with --flight-recorder: when its oldest segment started (how far back it reaches)",
    ),
    ("tfo_trace_build_info", "{version,backend,kernel} gauge = 1"),
];

/// What `tfo_trace_build_info` says.
#[derive(Clone, Debug)]
pub struct BuildInfo {
    pub version: String,
    pub backend: Backend,
    /// `uname -r`.
    pub kernel: String,
}

/// Everything the exposition is made of, shared with the registry's collector.
#[derive(Debug)]
struct Model {
    backend: Backend,
    kernel: KernelCounts,
    /// The namespaces' counters of what no hook of the backend sees.
    counted: KernelCounted,
    health: Health,
    breakdown: Option<Capped>,
    /// Refused SYN-data by cause, from events.
    refusals: RefusalSeries,
    /// The highest value each connection series has shown: a count adjusted by a kernel
    /// counter (accepted, less those made on the backup key) may lag for a moment, and a
    /// counter must never go back.
    shown: BTreeMap<(Role, Outcome, bool), u64>,
    /// The highest `tfo_trace_tfo_paused_connections_total` shown (a namespace gone takes
    /// its kernel rows with it; the counter must not go back).
    paused_shown: u64,
    /// `tfo_trace_connections_total` summed over its series, as the last exposition
    /// encoded it: what a scrape of it was told in all (the exporter's closing line).
    connections_encoded: u64,
    /// The flight recorder's figures, with `--flight-recorder`.
    recorder: Option<RecorderStats>,
}

impl Model {
    /// `value`, or the series' highest shown value if that is more; remembered.
    fn never_less(&mut self, role: Role, outcome: Outcome, kernel_counter: bool, value: u64) -> u64 {
        let shown = self.shown.entry((role, outcome, kernel_counter)).or_default();
        *shown = (*shown).max(value);
        *shown
    }
}

pub struct Metrics {
    registry: Registry,
    model: Arc<Mutex<Model>>,
}

impl Metrics {
    /// `breakdown`: Some adds its label to the connection and stall counters, for at most
    /// its cap of values (see [`Capped`]); None: no such label.
    pub fn new(build: &BuildInfo, breakdown: Option<Breakdown>) -> Metrics {
        let mut registry = Registry::default();
        let model = Arc::new(Mutex::new(Model {
            backend: build.backend,
            kernel: KernelCounts::default(),
            counted: KernelCounted::default(),
            health: Health::default(),
            breakdown: breakdown.map(Capped::new),
            refusals: RefusalSeries::default(),
            shown: BTreeMap::new(),
            paused_shown: 0,
            connections_encoded: 0,
            recorder: None,
        }));
        registry.register_collector(Box::new(ModelCollector(model.clone())));
        let info: Labels = vec![
            ("version", build.version.clone()),
            ("backend", build.backend.name().to_string()),
            ("kernel", build.kernel.clone()),
        ];
        registry.register(
            "tfo_trace_build",
            "tfo-trace version, kernel backend and kernel release",
            Info::new(info),
        );
        Metrics { registry, model }
    }

    /// The kernel's counts now (they only grow), and its running totals of what can make
    /// them short ([`Health`]).
    pub fn set_kernel(&self, counts: KernelCounts, health: Health) {
        if let Ok(mut m) = self.model.lock() {
            m.kernel = counts;
            m.health = m.health.never_less(health);
        }
    }

    /// What the namespaces' counters counted of the outcomes no hook sees (they only grow).
    pub fn set_kernel_counted(&self, counted: KernelCounted) {
        if let Ok(mut m) = self.model.lock() {
            m.counted = counted;
        }
    }

    /// The flight recorder's figures now (`--flight-recorder`: its series exist from then).
    pub fn set_recorder(&self, stats: RecorderStats) {
        if let Ok(mut m) = self.model.lock() {
            m.recorder = Some(stats);
        }
    }

    /// Counts one event: in the opt-in series, and a refused SYN-data under its cause.
    pub fn observe(&self, e: &Event) {
        if let Ok(mut m) = self.model.lock() {
            let value = m.breakdown.as_mut().and_then(|d| d.observe(e));
            if let Some(told) = Told::of(&e.view()) {
                m.refusals.add(told, value.as_deref());
            }
        }
    }

    /// The Prometheus text exposition (format 0.0.4) of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &self.registry);
        out
    }

    /// The outcomes the last [`Metrics::encode`] said in all: `tfo_trace_connections_total`
    /// summed over its series (those the hooks counted and those of the namespaces'
    /// counters).
    pub fn connections_encoded(&self) -> u64 {
        self.model.lock().map_or(0, |m| m.connections_encoded)
    }
}

#[derive(Debug)]
struct ModelCollector(Arc<Mutex<Model>>);

/// A counter of seconds: `total_ns` as one series, or (with the opt-in label) one series
/// per admitted value of `by_value` and the rest under [`OTHER`], so they sum to the total.
fn encode_seconds(
    mut e: MetricEncoder<'_>,
    total_ns: u64,
    by_value: Option<(&Capped, &BTreeMap<String, u64>)>,
) -> Result<(), std::fmt::Error> {
    match by_value {
        None => e.encode_counter::<Labels, _, f64>(&(total_ns as f64 / 1e9), None),
        Some((d, by_value)) => {
            let mut named = 0;
            for (value, ns) in by_value {
                named += ns;
                e.encode_family(&d.labels_of(value))?
                    .encode_counter::<Labels, _, f64>(&(*ns as f64 / 1e9), None)?;
            }
            let other = total_ns.saturating_sub(named) as f64 / 1e9;
            e.encode_family(&d.labels_of(OTHER))?.encode_counter::<Labels, _, f64>(&other, None)
        }
    }
}

/// `tfo_trace_syn_data_refused_total`'s counts: in all, and per value of the opt-in label
/// (destination, container) that has a series of its own.
#[derive(Debug, Default)]
struct RefusalSeries {
    all: Refusals,
    by_value: BTreeMap<String, Refusals>,
}

impl RefusalSeries {
    fn add(&mut self, told: Told, value: Option<&str>) {
        // By cause only: the series have no label for the cookie's change.
        self.all.add(Outcome::DataNotAcked, told, None);
        if let Some(v) = value {
            self.by_value.entry(v.to_string()).or_default().add(Outcome::DataNotAcked, told, None);
        }
    }
}

/// One series per cause (all four from the start, at 0), and with the opt-in label one per
/// cause of each value with a series of its own, the rest under [`OTHER`].
fn encode_refusals(
    mut e: MetricEncoder<'_>,
    refusals: &RefusalSeries,
    breakdown: Option<&Capped>,
) -> Result<(), std::fmt::Error> {
    let mut series = |extra: Labels, count: &dyn Fn(Cause) -> u64| {
        for cause in Cause::ALL {
            let mut l: Labels = vec![("cause", cause.name().to_string())];
            l.extend_from_slice(&extra);
            e.encode_family(&l)?.encode_counter::<Labels, _, u64>(&count(cause), None)?;
        }
        Ok(())
    };
    match breakdown {
        None => series(Vec::new(), &|c| refusals.all.with_cause(c)),
        Some(d) => {
            for (value, r) in &refusals.by_value {
                series(d.labels_of(value), &|c| r.with_cause(c))?;
            }
            let named = |c| refusals.by_value.values().map(|r| r.with_cause(c)).sum::<u64>();
            series(d.labels_of(OTHER), &|c| refusals.all.with_cause(c).saturating_sub(named(c)))
        }
    }
}

/// The listeners' SYN flood counters, one series per namespace where one moved since the
/// exporter started (by its `ip netns` name, else its inode): the kernel counts them per
/// namespace, so they name no listener. A namespace that goes keeps its count
/// ([`kernel_counted::CounterDeltas`]), so a series never goes back.
fn encode_flood(encoder: &mut DescriptorEncoder, counted: &KernelCounted) -> Result<(), std::fmt::Error> {
    const FAMILIES: [(&str, &str, &str); 3] = [
        (
            "tfo_trace_syncookies_sent",
            "TcpExtSyncookiesSent",
            "SYNs listeners in the namespace answered with a syncookie (TcpExtSyncookiesSent): a SYN \
             flood, or more handshakes in flight than a listener's backlog; such a SYN skips TFO, so \
             SYN-data to it is not accepted",
        ),
        (
            "tfo_trace_listen_overflows",
            "TcpExtListenOverflows",
            "SYNs and handshakes listeners in the namespace dropped because their accept queue was \
             full (TcpExtListenOverflows): the application does not accept() fast enough",
        ),
        (
            "tfo_trace_listen_drops",
            "TcpExtListenDrops",
            "SYNs and handshakes listeners in the namespace dropped, for any reason, overflows \
             included (TcpExtListenDrops)",
        ),
    ];
    for (name, counter, help) in FAMILIES {
        let rows: Vec<_> = counted.flood.iter().filter(|r| r.counter == counter).collect();
        if rows.is_empty() {
            continue;
        }
        let mut e = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for r in rows {
            let netns = crate::units::netns(r.netns, counted.netns_names.get(&r.netns).map(String::as_str));
            e.encode_family(&vec![("netns", netns)])?.encode_counter::<Labels, _, u64>(&r.count, None)?;
        }
    }
    Ok(())
}

/// A kernel-counted series' labels: no opt-in label (a namespace's counter knows no
/// destination or container), the source.
fn counted_labels(role: Role, outcome: Outcome) -> Labels {
    let mut l = labels(role, Some(outcome), &[]);
    l.push(("source", kernel_counted::SOURCE.to_string()));
    l
}

/// The kernel's `not_attempted` count in the namespaces where a pause was counted (by a
/// hook's `active_disabled`, or the namespace's own counter): exact, from `COUNTS`.
fn paused_connections(kernel: &KernelCounts, counted: &KernelCounted) -> u64 {
    let paused = |ns: u32| {
        kernel
            .iter()
            .any(|(n, r, o, c)| n == ns && r == Role::Client && o == Outcome::ActiveDisabled && c.events > 0)
            || counted
                .rows
                .iter()
                .any(|r| r.netns == ns && r.role == Role::Client && r.outcome == Outcome::ActiveDisabled)
    };
    kernel
        .iter()
        .filter(|(n, r, o, _)| *r == Role::Client && *o == Outcome::NotAttempted && paused(*n))
        .map(|(_, _, _, c)| c.events)
        .sum()
}

/// `extra`: the opt-in label and its value.
fn labels(role: Role, outcome: Option<Outcome>, extra: &[(&'static str, String)]) -> Labels {
    let mut l: Labels = vec![("role", role.name().to_string())];
    if let Some(o) = outcome {
        l.push(("outcome", o.name().to_string()));
    }
    l.extend_from_slice(extra);
    l
}

impl Collector for ModelCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(mut m) = self.0.lock() else { return Ok(()) };
        // Every series this backend can ever report exists, at 0 until it happens, so that
        // `increase()` sees the first event and a dashboard can tell "none happened" from
        // "not exported". Outcomes the backend cannot see stay absent rather than a
        // misleading 0.
        let seen: Vec<(Role, Outcome)> = Role::ALL
            .into_iter()
            .flat_map(|r| Outcome::ALL.into_iter().map(move |o| (r, o)))
            .filter(|&(r, o)| backends::sees(m.backend, r, o) || m.kernel.total(r, o).events > 0)
            .collect();
        let roles: Vec<Role> = Role::ALL.into_iter().filter(|r| seen.iter().any(|(sr, _)| sr == r)).collect();

        let mut e = encoder.encode_descriptor(
            "tfo_trace_connections",
            "TFO connection outcomes counted by the kernel, by role and outcome (see tfo-trace doctor \
             for what this backend can see)",
            None,
            MetricType::Counter,
        )?;
        let mut encoded = 0u64;
        for &(role, outcome) in &seen {
            // What the hooks report as this outcome, less what a kernel counter says was
            // another one (accepted on the backup key, on the tracepoint backends).
            let hooked = m.kernel.total(role, outcome).events;
            let total = hooked.saturating_sub(m.counted.moved_from(None, role, outcome));
            let total = m.never_less(role, outcome, false, total);
            match &m.breakdown {
                None => {
                    encoded += total;
                    e.encode_family(&labels(role, Some(outcome), &[]))?
                        .encode_counter::<Labels, _, u64>(&total, None)?
                }
                Some(d) => {
                    let mut named = 0;
                    for ((r, o, value), n) in &d.connections {
                        if (*r, *o) == (role, outcome) {
                            named += n;
                            e.encode_family(&labels(role, Some(outcome), &d.labels_of(value)))?
                                .encode_counter::<Labels, _, u64>(n, None)?;
                        }
                    }
                    let other = total.saturating_sub(named);
                    encoded += named + other;
                    e.encode_family(&labels(role, Some(outcome), &d.labels_of(OTHER)))?
                        .encode_counter::<Labels, _, u64>(&other, None)?;
                }
            }
        }
        if m.counted.unavailable.is_none() {
            for (role, outcome, _) in KernelCounted::series(m.backend) {
                let total = m.counted.total(role, outcome);
                let total = m.never_less(role, outcome, true, total);
                encoded += total;
                e.encode_family(&counted_labels(role, outcome))?
                    .encode_counter::<Labels, _, u64>(&total, None)?;
            }
        }
        m.connections_encoded = encoded;

        if m.counted.unavailable.is_none() && KernelCounted::series(m.backend).next().is_some() {
            // The namespaces behind the kernel_counter series: an unreadable one is missing
            // from them, and says so here rather than as a silent 0.
            let mut e = encoder.encode_descriptor(
                "tfo_trace_kernel_counted_namespaces",
                "Network namespaces whose own counters back the source=\"kernel_counter\" series: \
                 read (by name, or unnamed: read through a process whose namespace this user may not \
                 name) or unreadable (left out of those series; see tfo-trace doctor)",
                None,
                MetricType::Gauge,
            )?;
            let unreadable = m.counted.unreadable.len();
            let unnamed = m.counted.unnamed.len();
            let read = m.counted.namespaces.saturating_sub(unnamed);
            for (state, n) in [("read", read), ("unnamed", unnamed), ("unreadable", unreadable)] {
                e.encode_family(&vec![("state", state.to_string())])?.encode_gauge(&(n as i64))?;
            }
        }

        if m.counted.unavailable.is_none() {
            encode_flood(&mut encoder, &m.counted)?;
        }

        if backends::sees(m.backend, Role::Client, Outcome::DataNotAcked) {
            let e = encoder.encode_descriptor(
                "tfo_trace_syn_data_refused",
                "Client SYN-data the server did not take (data_not_acked), by what its SYN-ACK said: \
                 new_cookie (a key change, a fleet without a shared key, NAT), no_tfo_option (the \
                 server does not do TFO, or the option was stripped), same_cookie, no_cookie_sent (the \
                 client sent its data without a cookie: no-cookie mode), unknown; from \
                 events, so short by tfo_trace_events_lost_total",
                None,
                MetricType::Counter,
            )?;
            encode_refusals(e, &m.refusals, m.breakdown.as_ref())?;
        }

        let mut e = encoder.encode_descriptor(
            "tfo_trace_syn_data_bytes",
            "Payload bytes carried in TFO SYNs (client: sent, server: accepted), by role",
            None,
            MetricType::Counter,
        )?;
        for &role in &roles {
            let bytes = m.kernel.role_total(role).syn_data_bytes;
            e.encode_family(&labels(role, None, &[]))?.encode_counter::<Labels, _, u64>(&bytes, None)?;
        }

        let e = encoder.encode_descriptor(
            "tfo_trace_stall_seconds",
            "Time connections lost to SYN timeouts (last SYN retransmission minus first SYN)",
            None,
            MetricType::Counter,
        )?;
        // Stalls as aggregation::stall says: client connections' own outcomes only.
        let stall_ns: u64 = m
            .kernel
            .iter()
            .filter(|(_, r, o, _)| stall::row_counts(*r, *o))
            .map(|(_, _, _, c)| c.stall_ns)
            .sum();
        encode_seconds(e, stall_ns, m.breakdown.as_ref().map(|d| (d, &d.stall_ns)))?;

        let e = encoder.encode_descriptor(
            "tfo_trace_saved_seconds",
            "Round trips accepted TFO connections saved, as the kernel sampled each client's SYN -> \
             SYN-ACK (beside tfo_trace_stall_seconds_total: saved less stalled is what TFO gained)",
            None,
            MetricType::Counter,
        )?;
        let saved_ns = m.kernel.total(Role::Client, Outcome::Accepted).saved_ns;
        encode_seconds(e, saved_ns, m.breakdown.as_ref().map(|d| (d, &d.saved_ns)))?;

        let mut e = encoder.encode_descriptor(
            "tfo_trace_handshake_seconds",
            "SYN sent (client) or child socket created (server) to the TFO outcome, by role",
            None,
            MetricType::Histogram,
        )?;
        for &role in &roles {
            let t = m.kernel.role_total(role);
            let buckets: Vec<(f64, u64)> = HANDSHAKE_BOUNDS_NS
                .iter()
                .map(|ns| *ns as f64 / 1e9)
                .chain([f64::INFINITY])
                .zip(t.handshake_buckets)
                .collect();
            e.encode_family(&labels(role, None, &[]))?.encode_histogram::<Labels>(
                t.handshake_ns as f64 / 1e9,
                t.handshakes,
                &buckets,
                None,
            )?;
        }

        let paused = paused_connections(&m.kernel, &m.counted).max(m.paused_shown);
        m.paused_shown = paused;
        encoder
            .encode_descriptor(
                "tfo_trace_tfo_paused_connections",
                "Client connections that went without TFO (not_attempted) in namespaces where \
                 blackhole detection paused active TFO (active_disabled, TcpExtTCPFastOpenBlackhole): \
                 what one lost path cost every other connection; `tfo-trace report` names the path",
                None,
                MetricType::Counter,
            )?
            .encode_counter::<Labels, _, u64>(&paused, None)?;

        let h = m.health;
        for (name, help, total) in [
            (
                "tfo_trace_events_lost",
                "Events the kernel could not hand to tfo-trace because its ring buffer was full \
                 (the counts above include them)",
                h.events_lost,
            ),
            (
                "tfo_trace_hook_runs_missed",
                "Program runs the kernel skipped (a hook hit again while the same program was \
                 running on that CPU): outcomes those runs would have decided are missing from \
                 the other series",
                h.hook_runs_missed,
            ),
            (
                "tfo_trace_connects_unfollowed",
                "TFO connects the kernel could not follow (map entry refused): still counted, but \
                 without process or timing",
                h.connects_unfollowed,
            ),
            (
                "tfo_trace_outcomes_uncounted",
                "Outcomes not counted because the kernel's table of namespaces was full: the \
                 connection series undercount by this much",
                h.outcomes_uncounted,
            ),
        ] {
            encoder
                .encode_descriptor(name, help, None, MetricType::Counter)?
                .encode_counter::<Labels, _, u64>(&total, None)?;
        }
        if let Some(r) = m.recorder {
            encode_recorder(&mut encoder, &r)?;
        }
        Ok(())
    }
}

/// The flight recorder's series (`--flight-recorder`).
fn encode_recorder(encoder: &mut DescriptorEncoder, r: &RecorderStats) -> Result<(), std::fmt::Error> {
    for (name, help, total) in [
        (
            "tfo_trace_flight_recorder_events",
            "Events the flight recorder wrote to its directory (--flight-recorder)",
            r.written,
        ),
        (
            "tfo_trace_flight_recorder_events_unwritten",
            "Events the flight recorder could not write (the disk full, the directory unwritable): \
             missing from its recording, still in every other series",
            r.unwritten,
        ),
    ] {
        encoder
            .encode_descriptor(name, help, None, MetricType::Counter)?
            .encode_counter::<Labels, _, u64>(&total, None)?;
    }
    encoder
        .encode_descriptor(
            "tfo_trace_flight_recorder_bytes",
            "Bytes in the flight recorder's segments (at most --flight-recorder-size)",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(r.bytes as i64))?;
    if let Some(oldest) = r.oldest_s {
        encoder
            .encode_descriptor(
                "tfo_trace_flight_recorder_oldest_timestamp_seconds",
                "When the flight recorder's oldest segment started, in seconds since the epoch: how far \
                 back `tfo-trace report --from` its directory reaches",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&oldest)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::sample_event;

    /// The kernel's counts of `events`, as its `count()` makes them.
    fn counted(events: &[Event]) -> KernelCounts {
        let mut k = KernelCounts::default();
        for e in events {
            k.add_event(e);
        }
        k
    }
    use std::net::{IpAddr, Ipv4Addr};

    fn build() -> BuildInfo {
        BuildInfo { version: "0.1.0".into(), backend: Backend::Tracepoint, kernel: "6.18.0".into() }
    }

    fn ev(role: Role, outcome: Outcome, dst: u8, data: u32, handshake_us: u64, stall_us: u64) -> Event {
        let e = sample_event(role, outcome);
        let server = IpAddr::V4(Ipv4Addr::new(198, 18, 0, dst));
        let (saddr, daddr) = match role {
            Role::Client => (e.saddr, server),
            Role::Server => (server, e.daddr),
        };
        Event {
            saddr,
            daddr,
            syn_data_bytes: data,
            retransmits: u32::from(stall_us > 0),
            handshake_us: Some(handshake_us),
            stall_us,
            ..e
        }
    }

    /// The `tfo_trace_connections_total` series in `t` (a tracepoint exporter's, under a
    /// breakdown), and how many there should be: every outcome the backend sees has an
    /// "other" series per role, every outcome the namespaces' counters count one under
    /// "other" with its source, and the `admitted` values one per outcome they had.
    fn breakdown_series(t: &str, admitted: usize) -> (usize, usize) {
        let series = t.lines().filter(|l| l.starts_with("tfo_trace_connections_total{")).count();
        let backend = crate::probes::Backend::Tracepoint;
        let seen = |role: Role| Outcome::ALL.iter().filter(|o| backends::sees(backend, role, **o)).count();
        let counted = KernelCounted::series(backend).count();
        (series, seen(Role::Client) + seen(Role::Server) + counted + admitted)
    }

    /// The value of the sample line that starts with `series` (name and labels, exactly).
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn names_labels_and_values() {
        let m = Metrics::new(&build(), None);
        let zero = m.encode();
        assert_eq!(
            sample(&zero, r#"tfo_trace_connections_total{role="client",outcome="accepted"}"#),
            Some(0.0)
        );
        // The tracepoint backend cannot see server cookie requests: the namespaces' counters
        // count them, in a series that says so (none from the hooks).
        assert!(!zero.contains(r#"role="server",outcome="cookie_requested"}"#), "{zero}");
        let requested = r#"tfo_trace_connections_total{role="server",outcome="cookie_requested",source="kernel_counter"}"#;
        assert_eq!(sample(&zero, requested), Some(0.0), "{zero}");
        // Nor queue overflows: 3 in one namespace, 2 in another, counted by the kernel.
        let row = |netns, count| crate::aggregation::kernel_counted::CountedRow {
            netns,
            role: Role::Server,
            outcome: Outcome::QueueOverflow,
            count,
            counter: "TcpExtTCPFastOpenListenOverflow",
            within: None,
        };
        m.set_kernel_counted(KernelCounted {
            outcomes: vec![(Role::Server, Outcome::QueueOverflow)],
            rows: vec![row(7, 3), row(8, 2)],
            ..KernelCounted::default()
        });
        let overflow =
            r#"tfo_trace_connections_total{role="server",outcome="queue_overflow",source="kernel_counter"}"#;
        assert_eq!(sample(&m.encode(), overflow), Some(5.0));
        // A count never goes back (a namespace's counters may be unreadable for a moment).
        m.set_kernel_counted(KernelCounted::default());
        assert_eq!(sample(&m.encode(), overflow), Some(5.0));
        assert_eq!(
            sample(&zero, r#"tfo_trace_build_info{version="0.1.0",backend="tracepoint",kernel="6.18.0"}"#),
            Some(1.0)
        );

        let events = [
            ev(Role::Client, Outcome::CookieRequested, 2, 0, 100, 0),
            ev(Role::Client, Outcome::Accepted, 2, 64, 120, 0),
            ev(Role::Server, Outcome::Accepted, 2, 64, 10, 0),
            ev(Role::Client, Outcome::SynRetransmitted, 3, 64, 1_020_000, 1_010_000),
            ev(Role::Client, Outcome::SynRetransmitted, 3, 64, 1_030_000, 1_020_000),
        ];
        m.set_kernel(counted(&events), lost(3));
        m.set_kernel(counted(&events), lost(5));
        let t = m.encode();
        assert_eq!(sample(&t, r#"tfo_trace_connections_total{role="client",outcome="accepted"}"#), Some(1.0));
        assert_eq!(
            sample(&t, r#"tfo_trace_connections_total{role="client",outcome="syn_retransmitted"}"#),
            Some(2.0)
        );
        assert_eq!(sample(&t, r#"tfo_trace_connections_total{role="server",outcome="accepted"}"#), Some(1.0));
        assert_eq!(sample(&t, r#"tfo_trace_syn_data_bytes_total{role="client"}"#), Some(192.0));
        assert_eq!(sample(&t, r#"tfo_trace_syn_data_bytes_total{role="server"}"#), Some(64.0));
        assert!((sample(&t, "tfo_trace_stall_seconds_total").unwrap() - 2.03).abs() < 1e-9, "{t}");
        assert_eq!(sample(&t, "tfo_trace_events_lost_total"), Some(5.0));
        // The two stalls land between the 0.9 s and 1.1 s edges, the rest below 1 ms.
        let client = |le: &str| {
            sample(&t, &format!(r#"tfo_trace_handshake_seconds_bucket{{role="client",le="{le}"}}"#))
                .unwrap_or_else(|| panic!("no bucket {le} in\n{t}"))
        };
        assert_eq!(client("0.0005"), 2.0);
        assert_eq!(client("0.9"), 2.0);
        assert_eq!(client("1.1"), 4.0);
        assert_eq!(client("+Inf"), 4.0);
        assert_eq!(sample(&t, r#"tfo_trace_handshake_seconds_count{role="client"}"#), Some(4.0));
        assert!(!t.contains("destination"), "no destination label unless asked: {t}");
        assert!(t.contains("# TYPE tfo_trace_connections_total counter"), "{t}");
        assert!(t.contains("# TYPE tfo_trace_handshake_seconds histogram"), "{t}");
        assert!(!t.contains("# EOF"), "Prometheus text format, not OpenMetrics: {t}");
        // What the exposition told in all (the exporter's closing line says it): the five
        // outcomes the hooks counted and the five overflows of the namespaces' counters.
        assert_eq!(m.connections_encoded(), 10);
        assert_eq!(connections_in(&t), 10, "{t}");
    }

    /// `tfo_trace_connections_total` summed over every series of an exposition.
    fn connections_in(t: &str) -> u64 {
        t.lines()
            .filter(|l| l.starts_with("tfo_trace_connections_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Refused SYN-data by cause: every cause from the start, and with `--top-destinations`
    /// per destination that has a series, the rest under "other".
    #[test]
    fn refusals_by_cause() {
        let refused = |dst, cause| Event {
            cause: Some(cause),
            ..ev(Role::Client, Outcome::DataNotAcked, dst, 64, 90, 0)
        };
        let events = [
            refused(3, Cause::NewCookie),
            refused(3, Cause::NewCookie),
            refused(4, Cause::NoTfoOption),
            ev(Role::Client, Outcome::Accepted, 3, 64, 90, 0),
        ];
        let series =
            |t: &str, labels: &str| sample(t, &format!("tfo_trace_syn_data_refused_total{{{labels}}}"));

        let m = Metrics::new(&build(), None);
        assert_eq!(series(&m.encode(), r#"cause="same_cookie""#), Some(0.0), "exists at 0");
        events.iter().for_each(|e| m.observe(e));
        let t = m.encode();
        assert_eq!(series(&t, r#"cause="new_cookie""#), Some(2.0), "{t}");
        assert_eq!(series(&t, r#"cause="no_tfo_option""#), Some(1.0), "{t}");
        assert_eq!(series(&t, r#"cause="unknown""#), Some(0.0), "{t}");

        let m = Metrics::new(&build(), Some(Breakdown::Destinations(1)));
        events.iter().for_each(|e| m.observe(e));
        let t = m.encode();
        let first = r#"cause="new_cookie",destination="198.18.0.3:8080""#;
        assert_eq!(series(&t, first), Some(2.0), "{t}");
        // 198.18.0.4 was admitted too, at its first failure (the refusal).
        let second = r#"cause="no_tfo_option",destination="198.18.0.4:8080""#;
        assert_eq!(series(&t, second), Some(1.0), "{t}");
        assert_eq!(series(&t, r#"cause="no_tfo_option",destination="other""#), Some(0.0), "{t}");
    }

    /// Connections left without TFO count where a pause was counted, by a hook or by the
    /// namespace's counter; a namespace with no pause (TFO off there) does not.
    #[test]
    fn connections_left_without_tfo_by_a_pause() {
        let at = |ns: u32, outcome| Event { netns: ns, ..ev(Role::Client, outcome, 2, 0, 100, 0) };
        let mut events = vec![at(1, Outcome::ActiveDisabled), at(3, Outcome::NotAttempted)];
        events.extend((0..4).map(|_| at(1, Outcome::NotAttempted)));
        events.extend((0..2).map(|_| at(2, Outcome::NotAttempted)));
        let m = Metrics::new(&build(), None);
        m.set_kernel(counted(&events), Health::default());
        let paused = |m: &Metrics| sample(&m.encode(), "tfo_trace_tfo_paused_connections_total");
        assert_eq!(paused(&m), Some(4.0), "netns 1 only");
        let row = crate::aggregation::kernel_counted::CountedRow {
            netns: 2,
            role: Role::Client,
            outcome: Outcome::ActiveDisabled,
            count: 1,
            counter: "TcpExtTCPFastOpenBlackhole",
            within: None,
        };
        m.set_kernel_counted(KernelCounted { rows: vec![row], ..KernelCounted::default() });
        assert_eq!(paused(&m), Some(6.0), "and netns 2, by its counter");
        m.set_kernel(counted(&events[..1]), Health::default());
        assert_eq!(paused(&m), Some(6.0), "never back");
    }

    #[test]
    fn doctor_lists_what_export_serves() {
        let m = Metrics::new(&build(), None);
        m.set_kernel(counted(&[ev(Role::Client, Outcome::Accepted, 2, 64, 120, 0)]), Health::default());
        // The flood's series exist where a namespace's counter moved.
        let flood = crate::aggregation::kernel_counted::FLOOD_COUNTERS
            .map(|counter| crate::aggregation::kernel_counted::FloodRow { netns: 7, counter, count: 1 });
        m.set_kernel_counted(KernelCounted { flood: flood.to_vec(), ..KernelCounted::default() });
        m.set_recorder(RecorderStats { written: 3, oldest_s: Some(1_764_731_520), ..Default::default() });
        let t = m.encode();
        for (name, _) in EXPOSED {
            assert!(t.lines().any(|l| l.starts_with(name)), "{name} not in the exposition:\n{t}");
        }
    }

    #[test]
    fn syn_flood_counters_per_namespace_by_name() {
        use crate::aggregation::kernel_counted::FloodRow;
        let m = Metrics::new(&build(), None);
        assert!(!m.encode().contains("tfo_trace_syncookies_sent"), "no series before one moved");
        let flood = vec![
            FloodRow { netns: 7, counter: "TcpExtSyncookiesSent", count: 40 },
            FloodRow { netns: 9, counter: "TcpExtListenDrops", count: 2 },
        ];
        let names = [(7, "lab-srv".to_string())].into_iter().collect();
        m.set_kernel_counted(KernelCounted { flood, netns_names: names, ..KernelCounted::default() });
        let t = m.encode();
        assert!(t.contains("tfo_trace_syncookies_sent_total{netns=\"lab-srv\"} 40"), "{t}");
        assert!(t.contains("tfo_trace_listen_drops_total{netns=\"9\"} 2"), "{t}");
        assert!(!t.contains("tfo_trace_listen_overflows"), "{t}");
    }

    #[test]
    fn destinations_are_capped_never_move_and_sum_to_the_kernels_total() {
        let m = Metrics::new(&build(), Some(Breakdown::Destinations(2)));
        let mut events = Vec::new();
        for dst in [2, 3, 2, 4, 5, 3] {
            events.push(ev(Role::Client, Outcome::Accepted, dst, 10, 100, 0));
        }
        // The server side is labelled with its listener address, never the client's port.
        events.push(ev(Role::Server, Outcome::Accepted, 2, 10, 100, 0));
        events.push(ev(Role::Client, Outcome::SynRetransmitted, 9, 10, 1_000_000, 1_000_000));
        // The kernel counted one more accepted connection whose event was lost.
        let mut kernel = counted(&events);
        kernel.add_event(&ev(Role::Client, Outcome::Accepted, 2, 10, 100, 0));
        for e in &events {
            m.observe(e);
        }
        m.set_kernel(kernel, lost(1));
        let t = m.encode();
        let conns = |role: &str, dst: &str| {
            sample(
                &t,
                &format!(
                    r#"tfo_trace_connections_total{{role="{role}",outcome="accepted",destination="{dst}"}}"#
                ),
            )
        };
        assert_eq!(conns("client", "198.18.0.2:8080"), Some(2.0));
        assert_eq!(conns("client", "198.18.0.3:8080"), Some(2.0));
        assert_eq!(conns("client", "other"), Some(3.0), "two beyond the cap, one lost: {t}");
        assert_eq!(conns("server", "198.18.0.2:8080"), Some(1.0));
        // Beyond the first two, a destination that fails still gets its series.
        let stalls =
            |dst: &str| sample(&t, &format!(r#"tfo_trace_stall_seconds_total{{destination="{dst}"}}"#));
        assert_eq!((stalls("198.18.0.9:8080"), stalls("other")), (Some(1.0), Some(0.0)), "{t}");
        assert!(!t.contains("198.18.0.4") && !t.contains(":40000"), "{t}");
        // One series per admitted destination and outcome (3 on the client, 1 on the server).
        let (series, expected) = breakdown_series(&t, 3 + 1);
        assert_eq!(series, expected, "{t}");
        // A namespace's counter knows no destination: no `destination="other"` there.
        let overflow = r#"{role="server",outcome="queue_overflow",source="kernel_counter"}"#;
        assert!(t.contains(overflow), "{t}");
        // Summed over the labels, what the kernel counted: 7 accepted, 1 stall.
        assert_eq!((m.connections_encoded(), connections_in(&t)), (9, 9), "{t}");
    }

    /// Issue 37: with K=2, listeners (`[::]:8080`) and a quiet destination came first and
    /// took both places; the destination that stalled went to `other`. Each role has its own
    /// places now, and a failing destination gets one of K more at its first failure.
    #[test]
    fn a_destination_that_fails_late_gets_a_series() {
        let m = Metrics::new(&build(), Some(Breakdown::Destinations(2)));
        let listener = |port| Event {
            listener: Some(format!("[::]:{port}").parse().unwrap()),
            ..ev(Role::Server, Outcome::Accepted, 2, 10, 100, 0)
        };
        let mut events = vec![listener(8080), listener(8081), listener(8082)];
        for dst in [2, 3, 4] {
            events.push(ev(Role::Client, Outcome::Accepted, dst, 10, 100, 0));
        }
        for dst in [5, 6, 7] {
            events.push(ev(Role::Client, Outcome::SynRetransmitted, dst, 10, 1_000_000, 1_000_000));
        }
        // Admitted at its stall, .4 counts from there; its quiet start stays in "other".
        events.push(ev(Role::Client, Outcome::SynRetransmitted, 4, 10, 1_000_000, 1_000_000));
        for e in &events {
            m.observe(e);
        }
        m.set_kernel(counted(&events), Health::default());
        let t = m.encode();
        let conns = |role: &str, outcome: &str, dst: &str| {
            sample(
                &t,
                &format!(
                    r#"tfo_trace_connections_total{{role="{role}",outcome="{outcome}",destination="{dst}"}}"#
                ),
            )
        };
        assert_eq!(conns("server", "accepted", "[::]:8080"), Some(1.0), "{t}");
        assert_eq!(conns("server", "accepted", "other"), Some(1.0), "the third listener: {t}");
        assert_eq!(conns("client", "accepted", "198.18.0.2:8080"), Some(1.0), "{t}");
        assert_eq!(conns("client", "accepted", "other"), Some(1.0), "the quiet .4: {t}");
        assert_eq!(conns("client", "syn_retransmitted", "198.18.0.5:8080"), Some(1.0), "{t}");
        assert_eq!(conns("client", "syn_retransmitted", "198.18.0.6:8080"), Some(1.0), "{t}");
        assert_eq!(conns("client", "syn_retransmitted", "other"), Some(2.0), "K more, then other: {t}");
        assert!(!t.contains("198.18.0.7"), "{t}");
    }

    /// `--names`: a destination's series says its `dname`, the name of the event that
    /// admitted it: a later name (changed, or learnt late) neither relabels it nor adds a
    /// series; no name, no label; beyond the cap, "other" as before.
    #[test]
    fn destinations_keep_the_name_they_were_admitted_with() {
        let m = Metrics::new(&build(), Some(Breakdown::Destinations(3)));
        let named = |dst, name: Option<&str>| Event {
            dname: name.map(Into::into),
            ..ev(Role::Client, Outcome::Accepted, dst, 10, 100, 0)
        };
        // A name as the capture writes an odd byte (`\DDD`), and a quote from a recording.
        let odd = "odd\\032\"name.example";
        let v6 = |outcome, stall_us| Event {
            daddr: "fd00:7f0::2".parse().unwrap(),
            dname: Some(odd.into()),
            ..ev(Role::Client, outcome, 0, 10, 1_000_000, stall_us)
        };
        let events = [
            Event { saved_us: Some(20_000), ..named(2, Some("api.example")) },
            named(2, Some("new.example")),
            named(3, None),
            named(3, Some("late.example")),
            v6(Outcome::SynRetransmitted, 1_000_000),
            named(4, Some("beyond.example")),
            // A server event: its listener, 198.18.0.2:8080 too, whose series take the labels
            // that value was admitted with (one value, one set of labels).
            ev(Role::Server, Outcome::Accepted, 2, 10, 100, 0),
        ];
        for e in &events {
            m.observe(e);
        }
        m.set_kernel(counted(&events), Health::default());
        let t = m.encode();
        let accepted = |labels: &str| {
            sample(
                &t,
                &format!(r#"tfo_trace_connections_total{{role="client",outcome="accepted",{labels}}}"#),
            )
        };
        assert_eq!(accepted(r#"destination="198.18.0.2:8080",dname="api.example""#), Some(2.0), "{t}");
        assert_eq!(accepted(r#"destination="198.18.0.3:8080""#), Some(2.0), "{t}");
        assert_eq!(accepted(r#"destination="other""#), Some(1.0), "{t}");
        let v6_series = r#"destination="[fd00:7f0::2]:8080",dname="odd\\032\"name.example""#;
        let retransmitted = format!(
            r#"tfo_trace_connections_total{{role="client",outcome="syn_retransmitted",{v6_series}}}"#
        );
        assert_eq!(sample(&t, &retransmitted), Some(1.0), "escaped as Prometheus wants: {t}");
        assert_eq!(sample(&t, &format!("tfo_trace_stall_seconds_total{{{v6_series}}}")), Some(1.0), "{t}");
        assert_eq!(
            sample(&t, r#"tfo_trace_saved_seconds_total{destination="198.18.0.2:8080",dname="api.example"}"#),
            Some(0.02),
            "{t}"
        );
        let server = r#"tfo_trace_connections_total{role="server",outcome="accepted",destination="198.18.0.2:8080",dname="api.example"}"#;
        assert_eq!(sample(&t, server), Some(1.0), "{t}");
        for absent in ["new.example", "late.example", "beyond.example", r#"dname="""#] {
            assert!(!t.contains(absent), "{absent}: {t}");
        }
        // Within the cap: no series beyond one per admitted destination and outcome it had
        // (on the client .2 and .3 accepted, the IPv6 one syn_retransmitted; the listener),
        // as without names.
        let (series, expected) = breakdown_series(&t, 3 + 1);
        assert_eq!(series, expected, "{t}");
    }

    #[test]
    fn containers_are_capped_and_sum_to_the_kernels_total() {
        let m = Metrics::new(&build(), Some(Breakdown::Containers(1)));
        let in_docker = |id: &str| Event {
            container_id: Some(id.into()),
            container_runtime: Some("docker".into()),
            cgroup: Some(format!("/system.slice/docker-{id}.scope").into()),
            ..ev(Role::Client, Outcome::Accepted, 2, 10, 100, 0)
        };
        let events = [
            in_docker("4f1e6d9a0c2b3a4d5e6f"),
            in_docker("4f1e6d9a0c2b3a4d5e6f"),
            in_docker("99aa00bb11cc22dd33ee"),
            ev(Role::Client, Outcome::Accepted, 2, 10, 100, 0),
        ];
        assert_eq!(container_label(&events[3]), NO_CONTAINER);
        for e in &events {
            m.observe(e);
        }
        m.set_kernel(counted(&events), Health::default());
        let t = m.encode();
        let conns = |c: &str| {
            sample(
                &t,
                &format!(
                    r#"tfo_trace_connections_total{{role="client",outcome="accepted",container="{c}"}}"#
                ),
            )
        };
        assert_eq!(conns("4f1e6d9a0c2b"), Some(2.0), "docker's 12-character id: {t}");
        assert_eq!(conns("other"), Some(2.0), "beyond the cap, and the root cgroup's: {t}");
        assert!(!t.contains("99aa00bb11cc") && !t.contains("destination="), "{t}");

        // Kubernetes: the container's name in its pod, the pod and its namespace apart.
        let m = Metrics::new(&build(), Some(Breakdown::Containers(2)));
        let in_pod = |pod: &str| Event {
            container_name: Some("app".into()),
            pod: Some(pod.into()),
            pod_namespace: Some("shop".into()),
            container: Some(format!("shop/{pod}/app").into()),
            ..in_docker("4f1e6d9a0c2b3a4d5e6f")
        };
        let events = [in_pod("web-0"), in_pod("web-1"), in_pod("web-1")];
        for e in &events {
            m.observe(e);
        }
        m.set_kernel(counted(&events), Health::default());
        let t = m.encode();
        let series = |pod: &str| {
            sample(
                &t,
                &format!(
                    r#"tfo_trace_connections_total{{role="client",outcome="accepted",container="app",pod="{pod}",namespace="shop"}}"#
                ),
            )
        };
        assert_eq!((series("web-0"), series("web-1")), (Some(1.0), Some(2.0)), "{t}");
    }

    #[test]
    fn stall_seconds_count_stalls_only() {
        let m = Metrics::new(&build(), None);
        m.set_kernel(
            counted(&[
                ev(Role::Client, Outcome::SynRetransmitted, 3, 64, 1_030_000, 1_020_000),
                // Not stalls: the extra round trip of data not acked, and a second event of
                // the stalled connection (blackhole detection) that carries its stall_us again.
                ev(Role::Client, Outcome::DataNotAcked, 2, 64, 900, 0),
                ev(Role::Client, Outcome::ActiveDisabled, 3, 64, 1_000_000, 1_020_000),
            ]),
            Health::default(),
        );
        assert_eq!(sample(&m.encode(), "tfo_trace_stall_seconds_total"), Some(1.02));
    }

    /// Issue 30: what accepted client connections saved, beside what stalls lost, with the
    /// same labels; a server child's saving and an unknown one add nothing.
    #[test]
    fn saved_seconds_sum_the_clients_accepted_savings() {
        let saved = |dst, us| Event { saved_us: us, ..ev(Role::Client, Outcome::Accepted, dst, 64, 900, 0) };
        let events = [
            saved(2, Some(20_000)),
            saved(2, Some(30_000)),
            saved(3, None),
            Event { saved_us: Some(40_000), ..ev(Role::Server, Outcome::Accepted, 2, 64, 900, 0) },
            ev(Role::Client, Outcome::SynRetransmitted, 3, 64, 1_030_000, 1_020_000),
        ];
        let m = Metrics::new(&build(), None);
        m.set_kernel(counted(&events), Health::default());
        let t = m.encode();
        assert_eq!(sample(&t, "tfo_trace_saved_seconds_total"), Some(0.05), "{t}");
        assert_eq!(sample(&t, "tfo_trace_stall_seconds_total"), Some(1.02), "{t}");

        let m = Metrics::new(&build(), Some(Breakdown::Destinations(1)));
        m.set_kernel(counted(&events), Health::default());
        for e in &events {
            m.observe(e);
        }
        let t = m.encode();
        let of = |name: &str, dst: &str| sample(&t, &format!(r#"{name}{{destination="{dst}"}}"#));
        assert_eq!(of("tfo_trace_saved_seconds_total", "198.18.0.2:8080"), Some(0.05), "{t}");
        assert_eq!(of("tfo_trace_saved_seconds_total", "other"), Some(0.0), "{t}");
        // .3 came second, quiet: "other"; its stall admits it, and its time is its own.
        assert_eq!(of("tfo_trace_stall_seconds_total", "198.18.0.3:8080"), Some(1.02), "{t}");
        assert_eq!(of("tfo_trace_stall_seconds_total", "other"), Some(0.0), "{t}");
    }

    #[test]
    fn lost_counter_follows_the_kernel_total() {
        let m = Metrics::new(&build(), None);
        m.set_kernel(KernelCounts::default(), lost(7));
        m.set_kernel(KernelCounts::default(), lost(2)); // never goes back
        assert_eq!(sample(&m.encode(), "tfo_trace_events_lost_total"), Some(7.0));
    }

    #[test]
    fn health_counters_are_exported_from_zero_and_never_go_back() {
        let m = Metrics::new(&build(), None);
        let t = m.encode();
        for name in [
            "tfo_trace_hook_runs_missed_total",
            "tfo_trace_connects_unfollowed_total",
            "tfo_trace_outcomes_uncounted_total",
        ] {
            assert_eq!(sample(&t, name), Some(0.0), "{name} exists before it happens:\n{t}");
            assert!(t.contains(&format!("# TYPE {name} counter")), "{t}");
        }
        let health =
            Health { events_lost: 1, hook_runs_missed: 3, connects_unfollowed: 4, outcomes_uncounted: 5 };
        m.set_kernel(KernelCounts::default(), health);
        // A later read that is lower in one total (say, a map read that failed) keeps it.
        m.set_kernel(KernelCounts::default(), Health { connects_unfollowed: 6, ..Health::default() });
        let t = m.encode();
        let lines: Vec<&str> = t.lines().collect();
        for line in [
            "tfo_trace_events_lost_total 1",
            "tfo_trace_hook_runs_missed_total 3",
            "tfo_trace_connects_unfollowed_total 6",
            "tfo_trace_outcomes_uncounted_total 5",
        ] {
            assert!(lines.contains(&line), "no {line:?} in\n{t}");
        }
    }

    /// Health with only `events_lost` set.
    fn lost(events_lost: u64) -> Health {
        Health { events_lost, ..Health::default() }
    }
}
