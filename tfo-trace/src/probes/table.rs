//! The probe table: which hook serves which outcome on which backend, in one place.
//! `doctor`, the loader and the docs all read this table.
use std::fmt;

use tfo_trace_common::outcome;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// The richest backend that loads here.
    Auto,
    Fentry,
    Kprobe,
    Tracepoint,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Fentry,
    Kprobe,
    Tracepoint,
}

impl Backend {
    /// Richest first: the order `auto` tries them in.
    pub const ALL: [Backend; 3] = [Backend::Fentry, Backend::Kprobe, Backend::Tracepoint];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Fentry => "fentry",
            Backend::Kprobe => "kprobe",
            Backend::Tracepoint => "tracepoint",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<Backend> for BackendChoice {
    fn from(b: Backend) -> Self {
        match b {
            Backend::Fentry => BackendChoice::Fentry,
            Backend::Kprobe => BackendChoice::Kprobe,
            Backend::Tracepoint => BackendChoice::Tracepoint,
        }
    }
}

impl BackendChoice {
    pub fn candidates(self) -> &'static [Backend] {
        match self {
            BackendChoice::Auto => &Backend::ALL,
            BackendChoice::Fentry => &[Backend::Fentry],
            BackendChoice::Kprobe => &[Backend::Kprobe],
            BackendChoice::Tracepoint => &[Backend::Tracepoint],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    RawTracepoint,
    FEntry,
    FExit,
    KProbe,
    KRetProbe,
}

/// One program of the eBPF object and where it attaches.
#[derive(Clone, Copy, Debug)]
pub struct Hook {
    /// Program name in the eBPF object.
    pub program: &'static str,
    pub kind: HookKind,
    /// Tracepoint or kernel function name.
    pub target: &'static str,
    /// (role, outcome) pairs this hook decides.
    pub sees: &'static [(u8, u8)],
    pub why: &'static str,
}

const CLIENT_FROM_STATE: &[(u8, u8)] = &[
    (tfo_trace_common::role::CLIENT, outcome::COOKIE_REQUESTED),
    (tfo_trace_common::role::CLIENT, outcome::ACCEPTED),
    (tfo_trace_common::role::CLIENT, outcome::DATA_NOT_ACKED),
    (tfo_trace_common::role::CLIENT, outcome::SYN_RETRANSMITTED),
    (tfo_trace_common::role::CLIENT, outcome::CONNECT_FAILED),
    (tfo_trace_common::role::CLIENT, outcome::NOT_ATTEMPTED),
    (tfo_trace_common::role::SERVER, outcome::ACCEPTED),
];

const SERVER_FROM_TRY_FASTOPEN: &[(u8, u8)] = &[
    (tfo_trace_common::role::SERVER, outcome::COOKIE_REQUESTED),
    (tfo_trace_common::role::SERVER, outcome::ACCEPTED),
    (tfo_trace_common::role::SERVER, outcome::ACCEPTED_ALT_KEY),
    (tfo_trace_common::role::SERVER, outcome::COOKIE_INVALID),
    (tfo_trace_common::role::SERVER, outcome::QUEUE_OVERFLOW),
    (tfo_trace_common::role::SERVER, outcome::LISTENER_DISABLED),
];

const TRY_FASTOPEN_WHY: &str = "every SYN at a listener passes tcp_try_fastopen(): the cookie it \
    carried (foc->len at entry), the child it returns and the cookie it sends back (foc at exit) \
    tell every server outcome, with the listener's TFO queue";

/// The hooks every backend loads: the client's TFO functions are inlined, and SYN-ACK
/// retransmits have a tracepoint everywhere.
const CLIENT_STATE_HOOKS: [Hook; 3] = [
    Hook {
        program: "tfo_state",
        kind: HookKind::RawTracepoint,
        target: "inet_sock_set_state",
        sees: CLIENT_FROM_STATE_ONLY,
        why: "SYN_SENT->ESTABLISHED runs after tcp_ack() and just before the inlined \
              tcp_rcv_fastopen_synack(): syn_data, syn_fastopen, total_retrans and the \
              retransmit queue give its verdict",
    },
    Hook {
        program: "tfo_retransmit",
        kind: HookKind::RawTracepoint,
        target: "tcp_retransmit_skb",
        sees: &[],
        why: "counts SYN timeouts and times the stall of each TFO connection",
    },
    Hook {
        program: "tfo_synack_retransmit",
        kind: HookKind::RawTracepoint,
        target: "tcp_retransmit_synack",
        sees: &[(tfo_trace_common::role::SERVER, outcome::SYNACK_RETRANSMITTED)],
        why: "a TFO child is the socket in SYN_RECV whose SYN-ACK is resent (a plain \
              handshake resends from its listener)",
    },
];

const CLIENT_FROM_STATE_ONLY: &[(u8, u8)] = &[
    (tfo_trace_common::role::CLIENT, outcome::COOKIE_REQUESTED),
    (tfo_trace_common::role::CLIENT, outcome::ACCEPTED),
    (tfo_trace_common::role::CLIENT, outcome::DATA_NOT_ACKED),
    (tfo_trace_common::role::CLIENT, outcome::SYN_RETRANSMITTED),
    (tfo_trace_common::role::CLIENT, outcome::CONNECT_FAILED),
    (tfo_trace_common::role::CLIENT, outcome::NOT_ATTEMPTED),
];

const BLACKHOLE_WHY: &str = "tcp_fastopen_active_detect_blackhole() runs on every SYN timeout; \
    the namespace's tfo_active_disable_times moving during the call is active TFO being paused \
    (TcpExtTCPFastOpenBlackhole; tcp_fastopen_active_disable() is inlined into it on some kernels)";
const BLACKHOLE_SEES: &[(u8, u8)] = &[(tfo_trace_common::role::CLIENT, outcome::ACTIVE_DISABLED)];

const COOKIE_CACHED_WHY: &str = "tcp_fastopen_cache_set() is where a SYN-ACK's cookie enters the \
    destination's cache (what `ip tcp_metrics` shows as fo_cookie)";
const COOKIE_CACHED_SEES: &[(u8, u8)] = &[(tfo_trace_common::role::CLIENT, outcome::COOKIE_RECEIVED)];

const FENTRY_HOOKS: &[Hook] = &[
    CLIENT_STATE_HOOKS[0],
    CLIENT_STATE_HOOKS[1],
    CLIENT_STATE_HOOKS[2],
    Hook {
        program: "tfo_try_fastopen_fentry",
        kind: HookKind::FEntry,
        target: "tcp_try_fastopen",
        sees: &[],
        why: "remembers the cookie the SYN carried",
    },
    Hook {
        program: "tfo_try_fastopen_fexit",
        kind: HookKind::FExit,
        target: "tcp_try_fastopen",
        sees: SERVER_FROM_TRY_FASTOPEN,
        why: TRY_FASTOPEN_WHY,
    },
    Hook {
        program: "tfo_blackhole_fentry",
        kind: HookKind::FEntry,
        target: "tcp_fastopen_active_detect_blackhole",
        sees: &[],
        why: "remembers the namespace's active-TFO pause count",
    },
    Hook {
        program: "tfo_cookie_cached_fentry",
        kind: HookKind::FEntry,
        target: "tcp_fastopen_cache_set",
        sees: COOKIE_CACHED_SEES,
        why: COOKIE_CACHED_WHY,
    },
    Hook {
        program: "tfo_blackhole_fexit",
        kind: HookKind::FExit,
        target: "tcp_fastopen_active_detect_blackhole",
        sees: BLACKHOLE_SEES,
        why: BLACKHOLE_WHY,
    },
];

const KPROBE_HOOKS: &[Hook] = &[
    CLIENT_STATE_HOOKS[0],
    CLIENT_STATE_HOOKS[1],
    CLIENT_STATE_HOOKS[2],
    Hook {
        program: "tfo_try_fastopen_kprobe",
        kind: HookKind::KProbe,
        target: "tcp_try_fastopen",
        sees: &[],
        why: "remembers the cookie the SYN carried",
    },
    Hook {
        program: "tfo_try_fastopen_kretprobe",
        kind: HookKind::KRetProbe,
        target: "tcp_try_fastopen",
        sees: SERVER_FROM_TRY_FASTOPEN,
        why: TRY_FASTOPEN_WHY,
    },
    Hook {
        program: "tfo_blackhole_kprobe",
        kind: HookKind::KProbe,
        target: "tcp_fastopen_active_detect_blackhole",
        sees: &[],
        why: "remembers the namespace's active-TFO pause count",
    },
    Hook {
        program: "tfo_cookie_cached_kprobe",
        kind: HookKind::KProbe,
        target: "tcp_fastopen_cache_set",
        sees: COOKIE_CACHED_SEES,
        why: COOKIE_CACHED_WHY,
    },
    Hook {
        program: "tfo_blackhole_kretprobe",
        kind: HookKind::KRetProbe,
        target: "tcp_fastopen_active_detect_blackhole",
        sees: BLACKHOLE_SEES,
        why: BLACKHOLE_WHY,
    },
];

/// Without richer hooks the state-change hook also reports server `accepted`: a TFO
/// child leaving SYN_RECV has syn_fastopen_child (or syn_data_acked) set.
const TRACEPOINT_HOOKS: &[Hook] = &[
    Hook {
        sees: CLIENT_FROM_STATE,
        why: "SYN_SENT->ESTABLISHED runs after tcp_ack() and just before the inlined \
              tcp_rcv_fastopen_synack(): syn_data, syn_fastopen, total_retrans and the \
              retransmit queue give its verdict; a TFO child leaving SYN_RECV has \
              syn_fastopen_child/syn_data_acked set",
        ..CLIENT_STATE_HOOKS[0]
    },
    CLIENT_STATE_HOOKS[1],
    CLIENT_STATE_HOOKS[2],
];

/// Outcomes no hook of a backend can see, with the reason: what `doctor` prints and
/// what a test must not expect.
pub struct Blind {
    pub role: u8,
    pub outcome: u8,
    pub why: &'static str,
}

const TRACEPOINT_BLIND: &[Blind] = &[
    Blind {
        role: tfo_trace_common::role::CLIENT,
        outcome: outcome::COOKIE_RECEIVED,
        why: "the SYN-ACK's cookie goes to the metrics cache without a socket state change \
              (`ip tcp_metrics` shows it)",
    },
    Blind {
        role: tfo_trace_common::role::CLIENT,
        outcome: outcome::ACTIVE_DISABLED,
        why: "pausing active TFO changes no socket state; its effect shows as \
              not_attempted on the next connections",
    },
    Blind {
        role: tfo_trace_common::role::SERVER,
        outcome: outcome::COOKIE_REQUESTED,
        why: "a cookie request makes only a request sock, which no tracepoint reports",
    },
    Blind {
        role: tfo_trace_common::role::SERVER,
        outcome: outcome::COOKIE_INVALID,
        why: "decided inside tcp_try_fastopen(); no socket state changes",
    },
    Blind {
        role: tfo_trace_common::role::SERVER,
        outcome: outcome::ACCEPTED_ALT_KEY,
        why: "the child looks the same for either key: counted as accepted",
    },
    Blind {
        role: tfo_trace_common::role::SERVER,
        outcome: outcome::QUEUE_OVERFLOW,
        why: "tcp_fastopen_queue_check() is inlined and changes no socket state",
    },
    Blind {
        role: tfo_trace_common::role::SERVER,
        outcome: outcome::LISTENER_DISABLED,
        why: "the SYN falls back to a plain handshake with no trace of the cookie",
    },
];

/// Hooks of one backend: what the loader attaches, in order.
pub fn hooks(backend: Backend) -> &'static [Hook] {
    match backend {
        Backend::Tracepoint => TRACEPOINT_HOOKS,
        Backend::Fentry => FENTRY_HOOKS,
        Backend::Kprobe => KPROBE_HOOKS,
    }
}

/// Whether the state-change hook reports server `accepted` (only where nothing richer does).
pub fn server_from_state(backend: Backend) -> bool {
    backend == Backend::Tracepoint
}

pub fn blind_spots(backend: Backend) -> &'static [Blind] {
    match backend {
        Backend::Tracepoint => TRACEPOINT_BLIND,
        Backend::Fentry | Backend::Kprobe => &[],
    }
}

/// Whether `backend` reports (role, outcome) at all.
pub fn sees(backend: Backend, role: u8, outcome: u8) -> bool {
    hooks(backend).iter().any(|h| h.sees.contains(&(role, outcome)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tfo_trace_common::role;

    #[test]
    fn tracepoint_sees_every_client_outcome_and_states_its_blind_spots() {
        for o in [
            outcome::COOKIE_REQUESTED,
            outcome::ACCEPTED,
            outcome::DATA_NOT_ACKED,
            outcome::SYN_RETRANSMITTED,
        ] {
            assert!(sees(Backend::Tracepoint, role::CLIENT, o));
        }
        for b in blind_spots(Backend::Tracepoint) {
            assert!(!sees(Backend::Tracepoint, b.role, b.outcome), "{} both seen and blind", b.why);
        }
    }

    #[test]
    fn richer_backends_see_every_outcome_the_tracepoint_backend_sees_and_more() {
        for backend in [Backend::Fentry, Backend::Kprobe] {
            for role in [role::CLIENT, role::SERVER] {
                for o in 1..=13u8 {
                    if sees(Backend::Tracepoint, role, o) {
                        assert!(sees(backend, role, o), "{backend} misses {role}/{o}");
                    }
                }
            }
            for b in blind_spots(Backend::Tracepoint) {
                assert!(sees(backend, b.role, b.outcome), "{backend} should see {}", b.why);
            }
            assert!(blind_spots(backend).is_empty());
        }
    }
}
