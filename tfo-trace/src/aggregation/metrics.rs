//! The Prometheus metric model of `tfo-trace export`: events in, text exposition out.
//! No I/O here (the HTTP server and the textfile writer live in `views::export`), so the
//! names, labels and the series cap are unit-tested on fixed events.
//!
//! Labels stay bounded: `role` (2 values), `outcome` (10), and `destination` only when the
//! user asks for it with a cap ([`Metrics::new`]'s `top_destinations`).
use std::collections::HashSet;

use prometheus_client::{
    encoding::prometheus_text,
    metrics::{counter::Counter, family::Family, histogram::Histogram, info::Info},
    registry::Registry,
};

use super::stall;
use crate::{
    events::{Event, Outcome, Role},
    probes::{table, Backend},
};

/// `Content-Type` of what [`Metrics::encode`] returns (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Handshake buckets, in seconds: fine below 100 ms for healthy TFO, and edges at 0.9 s and
/// 1.1 s around the kernel's 1 s initial SYN RTO (TCP_TIMEOUT_INIT), so the SYN-data stall
/// mode falls in one bucket of its own; 3 s and 7 s catch the second and third SYN timeout.
pub const HANDSHAKE_BUCKETS: [f64; 15] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.9, 1.1, 1.5, 3.0, 7.0];

/// The `destination` value every destination beyond the top-K cap is counted under.
pub const OTHER_DESTINATION: &str = "other";

/// Label pairs of one series; a Vec so that `destination` exists only when asked for.
type Labels = Vec<(&'static str, String)>;

/// The series `tfo-trace export` serves, as `doctor` lists them (a test checks each one
/// against the real exposition).
pub const EXPOSED: &[(&str, &str)] = &[
    ("tfo_trace_connections_total", "{role,outcome[,destination]} counter"),
    ("tfo_trace_syn_data_bytes_total", "{role} counter"),
    ("tfo_trace_stall_seconds_total", "[{destination}] counter"),
    ("tfo_trace_handshake_seconds", "{role} histogram, buckets resolving the 1 s SYN timeout"),
    ("tfo_trace_events_lost_total", "counter"),
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

/// Which destinations get a series of their own: the first `cap` distinct ones seen keep
/// theirs for the exporter's lifetime; every later one is counted under
/// [`OTHER_DESTINATION`]. A destination is never moved between series, so every counter
/// only goes up (what `rate()` needs), and the series count stays at most `cap + 1` per
/// (role, outcome).
#[derive(Debug, Default)]
struct DestinationCap {
    cap: usize,
    admitted: HashSet<String>,
}

impl DestinationCap {
    fn label(&mut self, destination: String) -> String {
        if self.admitted.contains(&destination) {
            return destination;
        }
        if self.admitted.len() < self.cap {
            self.admitted.insert(destination.clone());
            return destination;
        }
        OTHER_DESTINATION.to_string()
    }
}

pub struct Metrics {
    registry: Registry,
    connections: Family<Labels, Counter>,
    syn_data_bytes: Family<Labels, Counter>,
    stall_seconds: Family<Labels, Counter<f64>>,
    handshake: Family<Labels, Histogram, fn() -> Histogram>,
    events_lost: Counter,
    events_lost_seen: u64,
    destinations: Option<DestinationCap>,
}

fn handshake_histogram() -> Histogram {
    Histogram::new(HANDSHAKE_BUCKETS)
}

/// The server a connection went to: for a client event its destination, for a server
/// event the listener's own address (what the client connected to). Never the client's
/// ephemeral port, which would make the label unbounded.
pub fn server_address(e: &Event) -> String {
    match e.role {
        Role::Client => e.destination(),
        Role::Server => e.source(),
    }
}

impl Metrics {
    /// `top_destinations`: Some(K) adds a `destination` label to the connection and stall
    /// counters, for at most K destinations (see [`DestinationCap`]); None: no such label.
    pub fn new(build: &BuildInfo, top_destinations: Option<usize>) -> Metrics {
        let mut registry = Registry::default();
        let connections = Family::<Labels, Counter>::default();
        registry.register(
            "tfo_trace_connections",
            "TFO connection outcomes seen by tfo-trace, by role and outcome (see tfo-trace doctor for \
             what this backend can see)",
            connections.clone(),
        );
        let syn_data_bytes = Family::<Labels, Counter>::default();
        registry.register(
            "tfo_trace_syn_data_bytes",
            "Payload bytes carried in TFO SYNs (client: sent, server: accepted), by role",
            syn_data_bytes.clone(),
        );
        let stall_seconds = Family::<Labels, Counter<f64>>::default();
        registry.register(
            "tfo_trace_stall_seconds",
            "Time connections lost to SYN timeouts (last SYN retransmission minus first SYN)",
            stall_seconds.clone(),
        );
        let handshake = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(
            handshake_histogram as fn() -> Histogram,
        );
        registry.register(
            "tfo_trace_handshake_seconds",
            "SYN sent (client) or child socket created (server) to the TFO outcome, by role",
            handshake.clone(),
        );
        let events_lost = Counter::default();
        registry.register(
            "tfo_trace_events_lost",
            "Events the kernel could not hand to tfo-trace because its ring buffer was full",
            events_lost.clone(),
        );
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

        let destinations = top_destinations.map(|cap| DestinationCap { cap, admitted: HashSet::new() });
        let m = Metrics {
            registry,
            connections,
            syn_data_bytes,
            stall_seconds,
            handshake,
            events_lost,
            events_lost_seen: 0,
            destinations,
        };
        m.zero_series(build.backend);
        m
    }

    /// Creates every series this backend can ever report, at 0, so that `increase()` sees
    /// the first event and a dashboard can tell "none happened" from "not exported".
    /// Outcomes the backend cannot see stay absent rather than a misleading 0.
    fn zero_series(&self, backend: Backend) {
        let dst = self.destinations.as_ref().map(|_| OTHER_DESTINATION.to_string());
        for role in [Role::Client, Role::Server] {
            let seen: Vec<Outcome> = Outcome::ALL
                .into_iter()
                .filter(|o| table::sees(backend, role.to_wire(), o.to_wire()))
                .collect();
            for &o in &seen {
                let _ = self.connections.get_or_create(&labels(role, Some(o), dst.clone()));
            }
            if !seen.is_empty() {
                let _ = self.syn_data_bytes.get_or_create(&labels(role, None, None));
                let _ = self.handshake.get_or_create(&labels(role, None, None));
            }
        }
        let _ = self.stall_seconds.get_or_create(&destination_only(dst));
    }

    /// Counts one event.
    pub fn observe(&mut self, e: &Event) {
        let dst = self.destinations.as_mut().map(|d| d.label(server_address(e)));
        self.connections.get_or_create(&labels(e.role, Some(e.outcome), dst.clone())).inc();
        if e.syn_data_bytes > 0 {
            self.syn_data_bytes
                .get_or_create(&labels(e.role, None, None))
                .inc_by(u64::from(e.syn_data_bytes));
        }
        if let Some(s) = stall::of(e).filter(|s| s.lost_us > 0) {
            self.stall_seconds.get_or_create(&destination_only(dst)).inc_by(s.lost_us as f64 / 1e6);
        }
        if let Some(us) = e.handshake_us {
            self.handshake.get_or_create(&labels(e.role, None, None)).observe(us as f64 / 1e6);
        }
    }

    /// The kernel's running total of lost events (it only grows); the counter follows it.
    pub fn set_events_lost(&mut self, total: u64) {
        if total > self.events_lost_seen {
            self.events_lost.inc_by(total - self.events_lost_seen);
            self.events_lost_seen = total;
        }
    }

    /// The Prometheus text exposition (format 0.0.4) of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

fn labels(role: Role, outcome: Option<Outcome>, destination: Option<String>) -> Labels {
    let mut l: Labels = vec![("role", role.name().to_string())];
    if let Some(o) = outcome {
        l.push(("outcome", o.name().to_string()));
    }
    if let Some(d) = destination {
        l.push(("destination", d));
    }
    l
}

fn destination_only(destination: Option<String>) -> Labels {
    destination.map(|d| vec![("destination", d)]).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::sample_event;
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

    /// The value of the sample line that starts with `series` (name and labels, exactly).
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn names_labels_and_values() {
        let mut m = Metrics::new(&build(), None);
        let zero = m.encode();
        assert_eq!(
            sample(&zero, r#"tfo_trace_connections_total{role="client",outcome="accepted"}"#),
            Some(0.0)
        );
        // The tracepoint backend cannot see server cookie requests: no series for them.
        assert!(!zero.contains(r#"role="server",outcome="cookie_requested""#), "{zero}");
        assert_eq!(
            sample(&zero, r#"tfo_trace_build_info{version="0.1.0",backend="tracepoint",kernel="6.18.0"}"#),
            Some(1.0)
        );

        m.observe(&ev(Role::Client, Outcome::CookieRequested, 2, 0, 100, 0));
        m.observe(&ev(Role::Client, Outcome::Accepted, 2, 64, 120, 0));
        m.observe(&ev(Role::Server, Outcome::Accepted, 2, 64, 10, 0));
        m.observe(&ev(Role::Client, Outcome::SynRetransmitted, 3, 64, 1_020_000, 1_010_000));
        m.observe(&ev(Role::Client, Outcome::SynRetransmitted, 3, 64, 1_030_000, 1_020_000));
        m.set_events_lost(3);
        m.set_events_lost(3);
        m.set_events_lost(5);
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
    }

    #[test]
    fn doctor_lists_what_export_serves() {
        let mut m = Metrics::new(&build(), None);
        m.observe(&ev(Role::Client, Outcome::Accepted, 2, 64, 120, 0));
        let t = m.encode();
        for (name, _) in EXPOSED {
            assert!(t.lines().any(|l| l.starts_with(name)), "{name} not in the exposition:\n{t}");
        }
    }

    #[test]
    fn destinations_are_capped_and_never_move() {
        let mut m = Metrics::new(&build(), Some(2));
        for dst in [2, 3, 2, 4, 5, 3] {
            m.observe(&ev(Role::Client, Outcome::Accepted, dst, 10, 100, 0));
        }
        // The server side is labelled with its listener address, never the client's port.
        m.observe(&ev(Role::Server, Outcome::Accepted, 2, 10, 100, 0));
        m.observe(&ev(Role::Client, Outcome::SynRetransmitted, 9, 10, 1_000_000, 1_000_000));
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
        assert_eq!(conns("client", "other"), Some(2.0), "{t}");
        assert_eq!(conns("server", "198.18.0.2:8080"), Some(1.0));
        assert_eq!(sample(&t, r#"tfo_trace_stall_seconds_total{destination="other"}"#), Some(1.0));
        assert!(!t.contains("198.18.0.4") && !t.contains("198.18.0.9") && !t.contains(":40000"), "{t}");
        let series = t.lines().filter(|l| l.starts_with("tfo_trace_connections_total{")).count();
        // Every outcome the backend sees has an "other" series per role, plus one series
        // per admitted destination (2 on the client, 1 on the server).
        let seen = |role: Role| {
            Outcome::ALL
                .iter()
                .filter(|o| {
                    crate::probes::table::sees(
                        crate::probes::Backend::Tracepoint,
                        role.to_wire(),
                        o.to_wire(),
                    )
                })
                .count()
        };
        assert_eq!(series, seen(Role::Client) + 2 + seen(Role::Server) + 1, "{t}");
    }

    #[test]
    fn stall_seconds_count_stalls_only() {
        let mut m = Metrics::new(&build(), None);
        m.observe(&ev(Role::Client, Outcome::SynRetransmitted, 3, 64, 1_030_000, 1_020_000));
        // Not stalls: the extra round trip of data not acked, and a second event of the
        // stalled connection (blackhole detection) that carries its stall_us again.
        m.observe(&ev(Role::Client, Outcome::DataNotAcked, 2, 64, 900, 0));
        m.observe(&ev(Role::Client, Outcome::ActiveDisabled, 3, 64, 1_000_000, 1_020_000));
        assert_eq!(sample(&m.encode(), "tfo_trace_stall_seconds_total"), Some(1.02));
    }

    #[test]
    fn lost_counter_follows_the_kernel_total() {
        let mut m = Metrics::new(&build(), None);
        m.set_events_lost(7);
        m.set_events_lost(2); // never goes back
        assert_eq!(sample(&m.encode(), "tfo_trace_events_lost_total"), Some(7.0));
    }
}
