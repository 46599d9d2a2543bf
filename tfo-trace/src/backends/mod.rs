//! The probe table: which hook serves which outcome on which backend, in one place.
//! `doctor`, the loader, the tests and the docs all read this table.
use std::fmt;

use tfo_trace_common::{Outcome, Role};

mod blind;
mod plain;
use blind::TRACEPOINT_BLIND;
pub use blind::{Blind, KernelCounter};
pub use plain::{PlainCost, PlainRuns};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// The richest backend that loads here.
    Auto,
    Fentry,
    Kprobe,
    Tracepoint,
    RawTracepoint,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// tp_btf tracepoints + fentry/fexit: typed arguments, direct loads.
    Fentry,
    /// kprobes/kretprobes on the fentry backend's functions (+ a raw tracepoint): where
    /// trampolines are refused but kprobes exist.
    Kprobe,
    /// tp_btf tracepoints only: every client outcome, server `accepted`.
    Tracepoint,
    /// raw tracepoints only: the tracepoint backend for kernels where tp_btf does not load.
    RawTracepoint,
}

impl Backend {
    /// Richest first, cheapest first among equals: the order `auto` tries them in.
    pub const ALL: [Backend; 4] =
        [Backend::Fentry, Backend::Kprobe, Backend::Tracepoint, Backend::RawTracepoint];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Fentry => "fentry",
            Backend::Kprobe => "kprobe",
            Backend::Tracepoint => "tracepoint",
            Backend::RawTracepoint => "raw-tracepoint",
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
            Backend::RawTracepoint => BackendChoice::RawTracepoint,
        }
    }
}

impl BackendChoice {
    pub(crate) fn candidates(self) -> &'static [Backend] {
        match self {
            BackendChoice::Auto => &Backend::ALL,
            BackendChoice::Fentry => &[Backend::Fentry],
            BackendChoice::Kprobe => &[Backend::Kprobe],
            BackendChoice::Tracepoint => &[Backend::Tracepoint],
            BackendChoice::RawTracepoint => &[Backend::RawTracepoint],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    /// tp_btf: a tracepoint with BTF-typed arguments.
    BtfTracepoint,
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
    pub sees: &'static [(Role, Outcome)],
    pub why: &'static str,
    /// What it costs a plain (non-TFO) connection: when it runs for one, how many times.
    pub plain_runs: PlainRuns,
}

use Outcome::*;
use Role::{Client, Server};

/// What the state-change hook decides on every backend: the client's TFO functions are
/// inlined, so its outcome is read from the socket at SYN_SENT -> ESTABLISHED / CLOSE.
const CLIENT_FROM_STATE: [(Role, Outcome); 7] = [
    (Client, CookieRequested),
    (Client, CookieSentNoData),
    (Client, Accepted),
    (Client, DataNotAcked),
    (Client, SynRetransmitted),
    (Client, ConnectFailed),
    (Client, NotAttempted),
];

/// The tracepoint backends also report server `accepted` from the state hook.
const CLIENT_AND_CHILD_FROM_STATE: [(Role, Outcome); 8] = {
    let mut all = [(Server, Accepted); 8];
    let mut i = 0;
    while i < CLIENT_FROM_STATE.len() {
        all[i] = CLIENT_FROM_STATE[i];
        i += 1;
    }
    all
};

const SERVER_FROM_TRY_FASTOPEN: &[(Role, Outcome)] = &[
    (Server, CookieRequested),
    (Server, Accepted),
    (Server, AcceptedAltKey),
    (Server, CookieInvalid),
    (Server, QueueOverflow),
    (Server, ListenerDisabled),
    (Server, DataWithoutCookie),
];

const STATE_AND_CHILD_WHY: &str = "SYN_SENT->ESTABLISHED runs after tcp_ack() and just before \
    the inlined tcp_rcv_fastopen_synack(): syn_data, syn_fastopen, total_retrans and the \
    retransmit queue give its verdict; a TFO child leaving SYN_RECV has \
    syn_fastopen_child/syn_data_acked set";
const RETRANSMIT_WHY: &str = "counts SYN timeouts and times the stall of each TFO connection";
const SYNACK_WHY: &str = "a TFO child is the socket in SYN_RECV whose SYN-ACK is resent (a plain \
    handshake resends from its listener)";
const SYNACK_SEES: &[(Role, Outcome)] = &[(Server, SynackRetransmitted)];
const TRY_FASTOPEN_WHY: &str = "every SYN at a listener passes tcp_try_fastopen(): the cookie it \
    carried (foc->len at entry), the child it returns and the cookie it sends back (foc at exit) \
    tell every server outcome, with the listener's TFO queue";
const TRY_FASTOPEN_ENTRY_WHY: &str = "remembers the cookie the SYN carried";
const KEEPS_ARGUMENTS_WHY: &str = "keeps the call's arguments for its return (a kretprobe has none), \
    keyed by the calling thread";

/// The tracepoint backends' three tracepoints, in one flavour: tp_btf (typed) or raw. The
/// state hook also reports server `accepted` (these backends have no tcp_try_fastopen hook).
const fn tracepoint_hooks(btf: bool) -> [Hook; 3] {
    let (kind, names) = if btf {
        (HookKind::BtfTracepoint, ["tfo_state", "tfo_retransmit", "tfo_synack_retransmit"])
    } else {
        (HookKind::RawTracepoint, ["tfo_state_raw", "tfo_retransmit_raw", "tfo_synack_retransmit_raw"])
    };
    [
        Hook {
            program: names[0],
            kind,
            target: "inet_sock_set_state",
            sees: &CLIENT_AND_CHILD_FROM_STATE,
            why: STATE_AND_CHILD_WHY,
            plain_runs: PlainRuns::PerStateChange,
        },
        Hook {
            program: names[1],
            kind,
            target: "tcp_retransmit_skb",
            sees: &[],
            why: RETRANSMIT_WHY,
            plain_runs: PlainRuns::PerRetransmission,
        },
        Hook {
            program: names[2],
            kind,
            target: "tcp_retransmit_synack",
            sees: SYNACK_SEES,
            why: SYNACK_WHY,
            plain_runs: PlainRuns::PerSynackResend,
        },
    ]
}

/// Every client outcome at a SYN-ACK, where tcp_fastopen_cache_set() is the only hook that
/// sees one.
const CLIENT_AT_SYNACK: &[(Role, Outcome)] = &[
    (Client, CookieRequested),
    (Client, CookieSentNoData),
    (Client, Accepted),
    (Client, DataNotAcked),
    (Client, SynRetransmitted),
    (Client, CookieReceived),
];
const SYNACK_CACHE_WHY: &str = "tcp_fastopen_cache_set() runs only for the SYN-ACK of a \
    connection whose SYN asked for TFO, after tcp_ack() and just before the inlined \
    tcp_rcv_fastopen_synack() reads syn_data, syn_fastopen, total_retrans and the retransmit \
    queue; the SYN-ACK's cookie enters the destination's cache there";
const SYN_PREPARED_WHY: &str = "tcp_fastopen_cookie_check() runs only for a SYN that asks for \
    TFO, in the connecting process: the connection is followed from there, or is not_attempted \
    where active TFO is paused (the SYN goes without the option)";
const TIMEOUT_WHY: &str = "tcp_fastopen_active_detect_blackhole() runs on every retransmission \
    timeout (not per connection): it times a followed SYN's timeouts, tells a pause of active \
    TFO by the kernel's own condition (TcpExtTCPFastOpenBlackhole), a client's or a server TFO \
    child's, and a connect given up";
const TIMEOUT_SEES: &[(Role, Outcome)] =
    &[(Client, ActiveDisabled), (Server, ActiveDisabled), (Client, ConnectFailed)];
const ACTIVE_DISABLE_WHY: &str = "tcp_fastopen_active_disable() runs only when active TFO is \
    paused: the pauses an out-of-order FIN or RST makes on a TFO client that got no data \
    (tcp_fastopen_active_disable_ofo_check, tcp_validate_incoming, tcp_rcv_state_process); the \
    timeouts' are told at detect_blackhole's entry";
const ERROR_END_WHY: &str = "runs for a connection that ends by an error (not per healthy \
    connection): a followed connect still in SYN_SENT was refused";
const LISTEN_WHY: &str = "listen() and a listener's close, in the owner's process: who owns \
    each port, for server events (per listener, never per connection)";
const TRY_FASTOPEN_FEXIT_WHY: &str = "every SYN at a listener passes tcp_try_fastopen(): the \
    cookie the SYN carried (its options, re-read from the SYN), the child it returns and the \
    cookie it sends back (foc at exit) tell every server outcome, with the listener's TFO queue";

/// The fentry backend: TFO's own functions only, so that a plain client connection runs
/// none of its programs and a plain server connection one (tcp_try_fastopen's exit);
/// tcp_done_with_error and tcp_reset are alternatives, one attached per kernel
/// ([`alternatives`]).
const FENTRY_HOOKS: [Hook; 10] = [
    Hook {
        program: "tfo_synack_retransmit",
        kind: HookKind::BtfTracepoint,
        target: "tcp_retransmit_synack",
        sees: SYNACK_SEES,
        why: SYNACK_WHY,
        plain_runs: PlainRuns::PerSynackResend,
    },
    Hook {
        program: "tfo_try_fastopen_fexit",
        kind: HookKind::FExit,
        target: "tcp_try_fastopen",
        sees: SERVER_FROM_TRY_FASTOPEN,
        why: TRY_FASTOPEN_FEXIT_WHY,
        plain_runs: PlainRuns::PerListenerSyn,
    },
    Hook {
        program: "tfo_syn_prepared_fexit",
        kind: HookKind::FExit,
        target: "tcp_fastopen_cookie_check",
        sees: &[(Client, NotAttempted)],
        why: SYN_PREPARED_WHY,
        plain_runs: PlainRuns::Never,
    },
    Hook {
        program: "tfo_cookie_cached_fentry",
        kind: HookKind::FEntry,
        target: "tcp_fastopen_cache_set",
        sees: CLIENT_AT_SYNACK,
        why: SYNACK_CACHE_WHY,
        plain_runs: PlainRuns::Never,
    },
    Hook {
        program: "tfo_timeout_fentry",
        kind: HookKind::FEntry,
        target: "tcp_fastopen_active_detect_blackhole",
        sees: TIMEOUT_SEES,
        why: TIMEOUT_WHY,
        plain_runs: PlainRuns::PerRto,
    },
    Hook {
        program: "tfo_active_disable_fentry",
        kind: HookKind::FEntry,
        target: "tcp_fastopen_active_disable",
        sees: &[(Client, ActiveDisabled)],
        why: ACTIVE_DISABLE_WHY,
        plain_runs: PlainRuns::Never,
    },
    Hook {
        program: "tfo_error_end_fentry",
        kind: HookKind::FEntry,
        target: "tcp_done_with_error",
        sees: &[(Client, ConnectFailed)],
        why: ERROR_END_WHY,
        plain_runs: PlainRuns::PerErrorEnd,
    },
    Hook {
        program: "tfo_reset_fentry",
        kind: HookKind::FEntry,
        target: "tcp_reset",
        sees: &[(Client, ConnectFailed)],
        why: ERROR_END_WHY,
        plain_runs: PlainRuns::PerErrorEnd,
    },
    Hook {
        program: "tfo_listen_start_fexit",
        kind: HookKind::FExit,
        target: "inet_csk_listen_start",
        sees: &[],
        why: LISTEN_WHY,
        plain_runs: PlainRuns::PerListenerChange,
    },
    Hook {
        program: "tfo_listen_stop_fentry",
        kind: HookKind::FEntry,
        target: "inet_csk_listen_stop",
        sees: &[],
        why: LISTEN_WHY,
        plain_runs: PlainRuns::PerListenerChange,
    },
];

/// The kprobe backend: the fentry backend's hooks on the same functions ([`FENTRY_HOOKS`]),
/// an fexit made of a kprobe that keeps the arguments and a kretprobe that judges; the one
/// exception, tcp_fastopen_active_detect_blackhole(), changes nothing its exit would read,
/// so its entry alone does. A plain client connection runs none of them, a plain server
/// connection the tcp_try_fastopen pair once each (its entry remembers the SYN's cookie).
const KPROBE_HOOKS: [Hook; 13] = [
    Hook {
        program: "tfo_synack_retransmit_raw",
        kind: HookKind::RawTracepoint,
        target: "tcp_retransmit_synack",
        sees: SYNACK_SEES,
        why: SYNACK_WHY,
        plain_runs: PlainRuns::PerSynackResend,
    },
    Hook {
        program: "tfo_try_fastopen_kprobe",
        kind: HookKind::KProbe,
        target: "tcp_try_fastopen",
        sees: &[],
        why: TRY_FASTOPEN_ENTRY_WHY,
        plain_runs: PlainRuns::PerListenerSyn,
    },
    Hook {
        program: "tfo_try_fastopen_kretprobe",
        kind: HookKind::KRetProbe,
        target: "tcp_try_fastopen",
        sees: SERVER_FROM_TRY_FASTOPEN,
        why: TRY_FASTOPEN_WHY,
        plain_runs: PlainRuns::PerListenerSyn,
    },
    Hook {
        program: "tfo_syn_prepared_kprobe",
        kind: HookKind::KProbe,
        target: "tcp_fastopen_cookie_check",
        sees: &[],
        why: KEEPS_ARGUMENTS_WHY,
        plain_runs: PlainRuns::Never,
    },
    Hook {
        program: "tfo_syn_prepared_kretprobe",
        kind: HookKind::KRetProbe,
        target: "tcp_fastopen_cookie_check",
        sees: &[(Client, NotAttempted)],
        why: SYN_PREPARED_WHY,
        plain_runs: PlainRuns::Never,
    },
    Hook {
        program: "tfo_cookie_cached_kprobe",
        kind: HookKind::KProbe,
        target: "tcp_fastopen_cache_set",
        sees: CLIENT_AT_SYNACK,
        why: SYNACK_CACHE_WHY,
        plain_runs: PlainRuns::Never,
    },
    Hook {
        program: "tfo_timeout_kprobe",
        kind: HookKind::KProbe,
        target: "tcp_fastopen_active_detect_blackhole",
        sees: TIMEOUT_SEES,
        why: TIMEOUT_WHY,
        plain_runs: PlainRuns::PerRto,
    },
    Hook {
        program: "tfo_active_disable_kprobe",
        kind: HookKind::KProbe,
        target: "tcp_fastopen_active_disable",
        sees: &[(Client, ActiveDisabled)],
        why: ACTIVE_DISABLE_WHY,
        plain_runs: PlainRuns::Never,
    },
    Hook {
        program: "tfo_error_end_kprobe",
        kind: HookKind::KProbe,
        target: "tcp_done_with_error",
        sees: &[(Client, ConnectFailed)],
        why: ERROR_END_WHY,
        plain_runs: PlainRuns::PerErrorEnd,
    },
    Hook {
        program: "tfo_reset_kprobe",
        kind: HookKind::KProbe,
        target: "tcp_reset",
        sees: &[(Client, ConnectFailed)],
        why: ERROR_END_WHY,
        plain_runs: PlainRuns::PerErrorEnd,
    },
    Hook {
        program: "tfo_listen_start_kprobe",
        kind: HookKind::KProbe,
        target: "inet_csk_listen_start",
        sees: &[],
        why: KEEPS_ARGUMENTS_WHY,
        plain_runs: PlainRuns::PerListenerChange,
    },
    Hook {
        program: "tfo_listen_start_kretprobe",
        kind: HookKind::KRetProbe,
        target: "inet_csk_listen_start",
        sees: &[],
        why: LISTEN_WHY,
        plain_runs: PlainRuns::PerListenerChange,
    },
    Hook {
        program: "tfo_listen_stop_kprobe",
        kind: HookKind::KProbe,
        target: "inet_csk_listen_stop",
        sees: &[],
        why: LISTEN_WHY,
        plain_runs: PlainRuns::PerListenerChange,
    },
];

/// Hooks of which a kernel gets one: the first whose target its BTF has (the later ones
/// are older kernels' names for the same moment). A group of one is a hook a kernel may
/// lack: tcp_fastopen_active_disable() is a function wherever tcp_input.c calls it, but a
/// kernel built with it inlined everywhere has none to hook (its pauses by out-of-order
/// FIN or RST are then counted, not told).
pub(crate) const ALTERNATIVES: &[&[&str]] =
    &[&["tcp_done_with_error", "tcp_reset"], &["tcp_fastopen_active_disable"]];

/// Whether `hook` is attached on a kernel whose BTF has the functions `has_function` says:
/// a hook outside [`ALTERNATIVES`] always, one inside only where no alternative before it
/// has its target.
pub(crate) fn attached_here(hook: &Hook, has_function: impl Fn(&str) -> bool) -> bool {
    let Some(group) = ALTERNATIVES.iter().find(|g| g.contains(&hook.target)) else { return true };
    group.iter().find(|t| has_function(t)) == Some(&hook.target)
}

// Each backend reads the kernel one way throughout (typed loads, or probe reads), so a
// hook's fields are read the same way as its neighbours'.
const TRACEPOINT_HOOKS: [Hook; 3] = tracepoint_hooks(true);
const RAW_TRACEPOINT_HOOKS: [Hook; 3] = tracepoint_hooks(false);

/// Cgroups as they are made and removed, for the names of containers (every backend; raw
/// tracepoints, so no BTF and no tracefs): a hook that sees no connection, attached after
/// the backend's and allowed to fail (the names then come from walking the hierarchy, up
/// to 2 s late, as `doctor` says).
const CGROUP_HOOKS: [Hook; 2] = [
    Hook {
        program: "tfo_cgroup_mkdir",
        kind: HookKind::RawTracepoint,
        target: "cgroup_mkdir",
        sees: &[],
        why: "a container's cgroup is named from the moment it exists, however briefly it lives",
        plain_runs: PlainRuns::PerCgroupChange,
    },
    Hook {
        program: "tfo_cgroup_rmdir",
        kind: HookKind::RawTracepoint,
        target: "cgroup_rmdir",
        sees: &[],
        why: "a removed cgroup's name is kept until the events that name it are read",
        plain_runs: PlainRuns::PerCgroupChange,
    },
];

/// Hooks of one backend: what the loader attaches, in order.
pub fn hooks(backend: Backend) -> &'static [Hook] {
    match backend {
        Backend::Fentry => &FENTRY_HOOKS,
        Backend::Kprobe => &KPROBE_HOOKS,
        Backend::Tracepoint => &TRACEPOINT_HOOKS,
        Backend::RawTracepoint => &RAW_TRACEPOINT_HOOKS,
    }
}

/// The cgroup hooks, the same on every backend ([`CGROUP_HOOKS`]).
pub fn cgroup_hooks() -> &'static [Hook] {
    &CGROUP_HOOKS
}

/// Whether the backend's hooks are BTF-typed (direct loads) rather than
/// raw (probe reads, a hash keyed by socket).
pub(crate) fn uses_btf(backend: Backend) -> bool {
    matches!(backend, Backend::Fentry | Backend::Tracepoint)
}

/// Whether the state-change hook reports server `accepted` (only where nothing richer does).
pub fn server_from_state(backend: Backend) -> bool {
    matches!(backend, Backend::Tracepoint | Backend::RawTracepoint)
}

/// Whether a hook of the backend sees what a client's SYN-ACK said about TFO
/// (tcp_fastopen_cache_set): then the programs tell why a SYN-data was refused; elsewhere
/// userspace reads the client's cookie cache for it (events::causes).
pub(crate) fn sees_synack(backend: Backend) -> bool {
    hooks(backend).iter().any(|h| h.target == "tcp_fastopen_cache_set")
}

pub fn blind_spots(backend: Backend) -> &'static [Blind] {
    match backend {
        Backend::Tracepoint | Backend::RawTracepoint => TRACEPOINT_BLIND,
        Backend::Fentry | Backend::Kprobe => &[],
    }
}

/// The outcomes `backend` cannot see that a kernel counter counts instead, with it.
pub fn kernel_counted(backend: Backend) -> impl Iterator<Item = &'static Blind> {
    blind_spots(backend).iter().filter(|b| b.counter.name().is_some())
}

/// The blind spots of `backend` that `--role`/`--outcome` ask for: what the filter selects
/// and the backend will never show (none when no `--outcome` is given).
pub(crate) fn blind_selected(backend: Backend, filter: &tfo_trace_common::Filter) -> Vec<&'static Blind> {
    let role_selected = |r: Role| filter.roles == 0 || filter.roles & (1 << r as u8) != 0;
    blind_spots(backend)
        .iter()
        .filter(|b| filter.outcomes & (1 << b.outcome as u8) != 0 && role_selected(b.role))
        .collect()
}

/// Whether `backend` reports (role, outcome) at all.
pub fn sees(backend: Backend, role: Role, outcome: Outcome) -> bool {
    hooks(backend).iter().any(|h| h.sees.contains(&(role, outcome)))
}

/// Every program name the table attaches, on any backend.
#[cfg(test)]
pub(crate) fn all_programs() -> impl Iterator<Item = &'static str> {
    Backend::ALL.iter().flat_map(|b| hooks(*b)).chain(cgroup_hooks()).map(|h| h.program)
}

/// One hook a plain connection runs, and how often ([`PlainRuns`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PlainRun {
    pub program: &'static str,
    pub target: &'static str,
    /// Runs per plain connection, at each end.
    pub runs: PlainCost,
    pub when: &'static str,
}

/// The hooks of `backend` that a healthy plain connection runs (the cgroup hooks never
/// run for one): what `doctor` and `-v` list, and what the run-count test holds the
/// kernel's bpf_stats to.
pub fn plain_connection_runs(backend: Backend) -> Vec<PlainRun> {
    hooks(backend)
        .iter()
        .filter(|h| h.plain_runs.per_connection().total() > 0)
        .map(|h| PlainRun {
            program: h.program,
            target: h.target,
            runs: h.plain_runs.per_connection(),
            when: h.plain_runs.when(),
        })
        .collect()
}

/// [`plain_connection_runs`] as one sentence, e.g. "tfo_state (inet_sock_set_state) 10
/// times (each state change of its two sockets: 5 client, 5 server); ...; nothing else
/// unless it retransmits".
pub(crate) fn plain_connection_summary(backend: Backend) -> String {
    fn times(n: u32) -> String {
        match n {
            1 => "once".into(),
            2 => "twice".into(),
            n => format!("{n} times"),
        }
    }
    // Twins on one function (entry and exit) are said together.
    let mut groups: Vec<(Vec<&str>, PlainRun)> = Vec::new();
    for run in plain_connection_runs(backend) {
        match groups.last_mut() {
            Some((programs, last)) if last.target == run.target && last.runs == run.runs => {
                programs.push(run.program)
            }
            _ => groups.push((vec![run.program], run)),
        }
    }
    let mut parts: Vec<String> = groups
        .iter()
        .map(|(programs, run)| {
            let each = if programs.len() > 1 { " each" } else { "" };
            let sides = match (run.runs.client, run.runs.server) {
                (0, _) | (_, 0) => String::new(),
                (c, s) => format!(": {c} client, {s} server"),
            };
            format!(
                "{} ({}) {}{each} ({}{sides})",
                programs.join(" and "),
                run.target,
                times(run.runs.total()),
                run.when
            )
        })
        .collect();
    let mut unless: Vec<&str> = Vec::new();
    for u in hooks(backend).iter().filter_map(|h| h.plain_runs.unless()) {
        if !unless.contains(&u) {
            unless.push(u);
        }
    }
    let tail = match unless.split_last() {
        None => "nothing else".to_string(),
        Some((last, [])) => format!("nothing else unless {last}"),
        Some((last, rest)) => format!("nothing else unless {} or {last}", rest.join(", ")),
    };
    parts.push(tail);
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_asked_for_and_never_shown() {
        let mut f = tfo_trace_common::Filter::none();
        assert!(blind_selected(Backend::Tracepoint, &f).is_empty(), "no --outcome: nothing asked for");
        f.outcomes = 1 << CookieReceived as u8 | 1 << Accepted as u8;
        let blind = blind_selected(Backend::Tracepoint, &f);
        assert_eq!(blind.iter().map(|b| (b.role, b.outcome)).collect::<Vec<_>>(), [(Client, CookieReceived)]);
        assert!(blind_selected(Backend::Fentry, &f).is_empty());
        f.outcomes = 1 << CookieRequested as u8;
        assert_eq!(blind_selected(Backend::Tracepoint, &f).len(), 1, "the server's");
        f.roles = 1 << Client as u8;
        assert!(blind_selected(Backend::Tracepoint, &f).is_empty(), "the client's is seen");
    }

    #[test]
    fn tracepoint_backends_see_every_client_outcome_and_state_their_blind_spots() {
        for backend in [Backend::Tracepoint, Backend::RawTracepoint] {
            for o in [CookieRequested, Accepted, DataNotAcked, SynRetransmitted, ConnectFailed, NotAttempted]
            {
                assert!(sees(backend, Client, o));
            }
            assert!(sees(backend, Server, Accepted));
            for b in blind_spots(backend) {
                assert!(!sees(backend, b.role, b.outcome), "{} both seen and blind", b.why);
            }
            // Every (role, outcome) is either seen or a stated blind spot.
            for role in Role::ALL {
                for o in Outcome::ALL {
                    let blind = blind_spots(backend).iter().any(|b| b.role == role && b.outcome == o);
                    let server_only = matches!(
                        o,
                        CookieInvalid
                            | AcceptedAltKey
                            | QueueOverflow
                            | ListenerDisabled
                            | SynackRetransmitted
                            | DataWithoutCookie
                    );
                    let client_only = matches!(
                        o,
                        DataNotAcked
                            | SynRetransmitted
                            | ConnectFailed
                            | NotAttempted
                            | CookieReceived
                            | CookieSentNoData
                    );
                    let possible = match role {
                        Client => !server_only,
                        Server => !client_only,
                    };
                    if possible {
                        assert!(
                            sees(backend, role, o) || blind,
                            "{backend}: {role:?} {o:?} neither seen nor blind"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn richer_backends_see_every_outcome_the_tracepoint_backend_sees_and_more() {
        for backend in [Backend::Fentry, Backend::Kprobe] {
            for role in Role::ALL {
                for o in Outcome::ALL {
                    if sees(Backend::Tracepoint, role, o) {
                        assert!(sees(backend, role, o), "{backend} misses {role:?}/{o:?}");
                    }
                }
            }
            for b in blind_spots(Backend::Tracepoint) {
                assert!(sees(backend, b.role, b.outcome), "{backend} should see {}", b.why);
            }
            assert!(blind_spots(backend).is_empty());
        }
    }

    #[test]
    fn every_blind_spot_says_which_counter_counts_it_or_why_none_does() {
        for backend in Backend::ALL {
            for b in blind_spots(backend) {
                match b.counter {
                    KernelCounter::Exact(c) | KernelCounter::Within { counter: c, .. } => {
                        assert!(c.starts_with("TcpExtTCPFastOpen"), "{c}")
                    }
                    KernelCounter::None(why) => assert!(!why.is_empty()),
                }
                if let KernelCounter::Within { of, .. } = b.counter {
                    assert!(sees(backend, b.role, of), "{backend} reports {of:?} for {:?}", b.outcome);
                }
            }
        }
        let counted: Vec<_> =
            kernel_counted(Backend::Tracepoint).map(|b| (b.role, b.outcome, b.counter.name())).collect();
        assert_eq!(
            counted,
            [
                (Client, ActiveDisabled, Some("TcpExtTCPFastOpenBlackhole")),
                (Server, CookieRequested, Some("TcpExtTCPFastOpenCookieReqd")),
                (Server, CookieInvalid, Some("TcpExtTCPFastOpenPassiveFail")),
                (Server, AcceptedAltKey, Some("TcpExtTCPFastOpenPassiveAltKey")),
                (Server, QueueOverflow, Some("TcpExtTCPFastOpenListenOverflow")),
            ]
        );
        assert_eq!(kernel_counted(Backend::Fentry).count(), 0);
    }

    #[test]
    fn twins_attach_to_the_same_functions() {
        let targets = |b| hooks(b).iter().map(|h| h.target).collect::<Vec<_>>();
        assert_eq!(targets(Backend::Tracepoint), targets(Backend::RawTracepoint));
        // The kprobe backend hooks the fentry backend's functions: the same outcomes.
        let functions = |b| {
            let mut t = hooks(b).iter().map(|h| h.target).collect::<Vec<_>>();
            t.dedup(); // a kprobe and its kretprobe
            t
        };
        assert_eq!(functions(Backend::Fentry), functions(Backend::Kprobe));
        for role in Role::ALL {
            for o in Outcome::ALL {
                assert_eq!(sees(Backend::Fentry, role, o), sees(Backend::Kprobe, role, o), "{role:?}/{o:?}");
            }
        }
    }

    #[test]
    fn one_error_end_hook_per_kernel() {
        for (backend, attached) in [(Backend::Fentry, 9), (Backend::Kprobe, 12)] {
            let error_ends = |has: &dyn Fn(&str) -> bool| {
                hooks(backend)
                    .iter()
                    .filter(|h| attached_here(h, has))
                    .filter(|h| h.sees == [(Client, ConnectFailed)])
                    .map(|h| h.target)
                    .collect::<Vec<_>>()
            };
            assert_eq!(error_ends(&|_| true), ["tcp_done_with_error"], "{backend} 6.1+");
            assert_eq!(error_ends(&|f| f != "tcp_done_with_error"), ["tcp_reset"], "{backend} 5.10");
            let everything = |_: &str| true;
            assert_eq!(hooks(backend).iter().filter(|h| attached_here(h, everything)).count(), attached);
        }
    }

    #[test]
    fn the_function_backends_run_nothing_at_a_state_change() {
        for backend in [Backend::Fentry, Backend::Kprobe] {
            for h in hooks(backend) {
                assert!(!["inet_sock_set_state", "tcp_retransmit_skb"].contains(&h.target), "{}", h.program);
            }
        }
    }

    #[test]
    fn a_plain_connection_is_said_to_run_what_the_table_says() {
        // fentry follows only TFO sockets: a plain connection runs one program, at the listener.
        let s = plain_connection_summary(Backend::Fentry);
        assert!(
            s.starts_with("tfo_try_fastopen_fexit (tcp_try_fastopen) once (the SYN at the listener)"),
            "{s}"
        );
        assert!(s.ends_with("it ends by an error or a listener opens or closes"), "{s}");
        // kprobe likewise, with tcp_try_fastopen's entry and return each once (a kretprobe
        // has no arguments: the entry remembers the SYN's cookie).
        let s = plain_connection_summary(Backend::Kprobe);
        assert!(
            s.starts_with(
                "tfo_try_fastopen_kprobe and tfo_try_fastopen_kretprobe (tcp_try_fastopen) once each \
                 (the SYN at the listener); nothing else unless"
            ),
            "{s}"
        );
        assert!(s.ends_with("it ends by an error or a listener opens or closes"), "{s}");
        let runs = |b| plain_connection_runs(b).iter().map(|r| r.runs.client).sum::<u32>();
        assert_eq!((runs(Backend::Fentry), runs(Backend::Kprobe)), (0, 0), "no client runs");
        let runs = plain_connection_runs(Backend::Tracepoint);
        assert_eq!(runs.iter().map(|r| r.program).collect::<Vec<_>>(), ["tfo_state"]);
        for backend in Backend::ALL {
            for hook in hooks(backend) {
                if hook.target == "tcp_fastopen_cache_set" {
                    assert_eq!(hook.plain_runs, PlainRuns::Never, "{}", hook.program);
                }
            }
        }
        assert!(cgroup_hooks().iter().all(|h| h.plain_runs.per_connection().total() == 0));
    }
}
