//! Verdicts for `tfo-trace report`: per destination or group of them (client side) and per
//! listener (server side), the counts by outcome, the time TFO cost, which verdict and how
//! strong it is ([`Strength`]: how many connections, destinations and hosts show it), and
//! the figures its evidence rests on. Pure: counts (gathered by [`super::builder`]) and
//! kernel facts ([`super::facts`]) in, rows out. [`classify`] decides the verdict;
//! [`client`], [`listener`] and [`namespace`] gather each row's figures. No sentence is
//! written here: `views/report/verdict` says each kind in words.
//!
//! The facts the kernel gives are used where they exist: `ip tcp_metrics` (fo_syn_drops and
//! the cached cookie per destination), counter deltas per namespace
//! (TcpExtTCPFastOpenListenOverflow, PassiveFail, PassiveAltKey), listener TFO queue sizes
//! (max_qlen) and somaxconn, and whether a backup key is set.
//!
//! What the running backend cannot see cannot become an event verdict: on the tracepoint
//! backend (this project's host, Linux 6.18 without fentry or kprobes) the server outcomes
//! `queue_overflow`, `cookie_invalid`, `accepted_alt_key` and `listener_disabled` never
//! appear, so the verdicts built on them are unit-tested on synthetic events; on that
//! backend the namespace's counters stand in ([`NamespaceFinding`]).
pub(crate) mod classify;
pub(crate) mod client;
pub(crate) mod evidence;
pub(crate) mod listener;
pub(crate) mod namespace;

pub(crate) use self::{
    classify::{Kind, Strength},
    client::{client_report, ClientFigures, ClientRow, DestinationReport},
    evidence::{AddressShare, HostShare, Support, Verdict, NAMES_SHOWN},
    listener::{listener_row, ListenerFigures, ListenerReport},
    namespace::{cached_drops, namespace_findings, CachedDrops, Counted, NamespaceFinding},
};

/// Events as the tests of the verdicts build them.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::net::SocketAddr;

    use crate::events::{Event, Timestamp};

    pub(crate) const NS_CLI: u32 = 4026532177;
    pub(crate) const NS_SRV: u32 = 4026532246;

    /// Built from JSON so fields other work adds to Event (as Options) need no edit here.
    pub(crate) fn ev(role: &str, outcome: &str, dst: &str, data: u32, stall_us: u64, t_ms: u64) -> Event {
        let dst: SocketAddr = dst.parse().unwrap();
        let (saddr, sport, daddr, dport, netns) = if role == "client" {
            ("198.18.0.1".to_string(), 40000, dst.ip().to_string(), dst.port(), NS_CLI)
        } else {
            (dst.ip().to_string(), dst.port(), "198.18.0.1".to_string(), 40000, NS_SRV)
        };
        let mut e: Event = serde_json::from_value(serde_json::json!({
            "ts": "2026-11-30T08:00:00.000000000Z", "role": role, "outcome": outcome, "family": 4,
            "saddr": saddr, "sport": sport, "daddr": daddr, "dport": dport, "netns": netns,
            "pid": 7, "comm": "curl", "syn_data_bytes": data, "cookie_len": null,
            "exp_option": false, "retransmits": u32::from(stall_us > 0),
            "handshake_us": 200 + stall_us, "stall_us": stall_us,
        }))
        .unwrap();
        e.ts = Timestamp::from_unix_ns(u128::from(t_ms) * 1_000_000);
        e
    }

    pub(crate) fn cli(outcome: &str, dst: &str, data: u32, stall_us: u64, t: u64) -> Event {
        ev("client", outcome, dst, data, stall_us, t)
    }

    pub(crate) fn srv(outcome: &str, t: u64) -> Event {
        ev("server", outcome, "198.18.0.2:81", 64, 0, t)
    }
}
