//! What the host's facts mean for tracing TFO and for TFO itself, as typed advice
//! ([`Advice`]), a finding shared by several namespaces given once with all of them. Pure;
//! `views/doctor/advice.rs` says each kind in words.
use crate::kernel::{host::HostFacts, kallsyms::SymbolPresence, netstat::ListenCounters, sysctl};

/// One piece of advice, in the order doctor gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Advice {
    /// The backend `auto` would choose (the first the loader could load and attach).
    AutoChooses {
        backend: String,
    },
    /// What a plain (non-TFO) connection runs with that backend, as the loader says it.
    PlainConnection {
        runs: String,
    },
    /// Why tracing programs cannot be loaded, as the privilege check says it.
    TracingNotAllowed(String),
    /// No /sys/kernel/btf/vmlinux.
    NoBtf,
    /// No kprobes (CONFIG_KPROBES off).
    NoKprobes,
    /// The fentry program type probe failed although privileges suffice, and why.
    FentryRefused {
        why: String,
    },
    NoTracefs,
    NoBpffs,
    /// TFO hook points kallsyms does not have.
    HookPointsAbsent(Vec<String>),
    /// Hook points that exist only as compiler clones: each name with its clones.
    CloneOnly(Vec<(String, Vec<String>)>),
    /// Namespaces whose own counters cannot be read, each with why.
    CountersUnreadable(Vec<(u32, String)>),
    /// Namespaces read without their names, through processes of other users (their pids).
    UnnamedNamespaces(Vec<u32>),
    /// A finding in one or more namespaces (their labels).
    InNamespaces {
        finding: InNamespace,
        namespaces: Vec<String>,
    },
    /// tcp_fastopen_key is readable by root only.
    KeyRootOnly,
    /// The sysctl is per namespace: always said last.
    SysctlPerNamespace,
}

/// What a namespace's sysctls show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InNamespace {
    /// Client bit 0x1 off where no TFO listener serves; `fix` the value with it set.
    ClientOff { fix: u32 },
    /// Server bit 0x2 off; `fix` the value with it set.
    ServerOff { fix: u32 },
    /// tcp_fastopen_blackhole_timeout_sec=0 where the client bit is on.
    BlackholeOff,
    /// tcp_syncookies=2 where the server bit is on.
    Syncookies,
    /// Listeners answered SYNs with syncookies (tcp_syncookies not 2) where the server bit
    /// is on: a SYN flood, or more handshakes in flight than a listener's backlog; the
    /// namespace's counters since it was made.
    SyncookiesSent(ListenCounters),
    /// Server bit on, no key generated yet.
    NoKeyYet,
    /// A bit set that has no effect, as the sysctl's reader says it.
    IneffectiveBit(String),
    /// Bits tfo-trace does not know.
    UnknownBits(u32),
    /// The namespace cannot be entered, and the error.
    CannotEnter(String),
    /// tcp_fastopen cannot be read, and the error.
    CannotRead(String),
}

/// The advice that follows from the host's facts (pure).
pub(crate) fn advice(r: &HostFacts) -> Vec<Advice> {
    let mut a = Vec::new();
    if let Some(p) = &r.privileges.tracing_problem {
        a.push(Advice::TracingNotAllowed(p.clone()));
    }
    if !r.kernel.btf_vmlinux {
        a.push(Advice::NoBtf);
    }
    if !r.facilities.kprobes {
        a.push(Advice::NoKprobes);
    }
    if let Some(t) = r.program_types.iter().find(|p| p.name == "tracing") {
        if t.supported != Some(true) && r.privileges.tracing_problem.is_none() {
            a.push(Advice::FentryRefused { why: t.error.clone().unwrap_or_else(|| "not supported".into()) });
        }
    }
    if r.facilities.tracefs.is_none() {
        a.push(Advice::NoTracefs);
    }
    if r.facilities.bpffs.is_none() {
        a.push(Advice::NoBpffs);
    }
    if let Ok(points) = &r.hook_points {
        let absent: Vec<String> =
            points.iter().filter(|p| p.presence == SymbolPresence::Absent).map(|p| p.name.clone()).collect();
        if !absent.is_empty() {
            a.push(Advice::HookPointsAbsent(absent));
        }
        let clones: Vec<(String, Vec<String>)> = points
            .iter()
            .filter(|p| p.presence == SymbolPresence::CloneOnly)
            .map(|p| (p.name.clone(), p.clones.clone()))
            .collect();
        if !clones.is_empty() {
            a.push(Advice::CloneOnly(clones));
        }
    }
    let reach = &r.counter_reach;
    if !reach.unreadable.is_empty() {
        a.push(Advice::CountersUnreadable(reach.unreadable.clone()));
    }
    if !reach.unnamed_through.is_empty() {
        a.push(Advice::UnnamedNamespaces(reach.unnamed_through.clone()));
    }
    for (finding, namespaces) in in_namespaces(r) {
        a.push(Advice::InNamespaces { finding, namespaces });
    }
    if r.namespaces.iter().any(|n| matches!(&n.key, Err(e) if e.contains("denied"))) {
        a.push(Advice::KeyRootOnly);
    }
    a.push(Advice::SysctlPerNamespace);
    a
}

/// Per-namespace findings, grouped so that one names every namespace it applies to, in
/// the order first met.
fn in_namespaces(r: &HostFacts) -> Vec<(InNamespace, Vec<String>)> {
    let mut groups: Vec<(InNamespace, Vec<String>)> = Vec::new();
    let mut add = |f: InNamespace, label: &str| match groups.iter_mut().find(|(g, _)| *g == f) {
        Some((_, labels)) => labels.push(label.to_string()),
        None => groups.push((f, vec![label.to_string()])),
    };
    for ns in &r.namespaces {
        let label = ns.label();
        // A namespace with TFO listeners serves: its client bit is no finding.
        let serves = r.listeners.iter().any(|l| l.namespace == label && matches!(l.max_qlen, Ok(q) if q > 0));
        match &ns.tcp_fastopen {
            Ok(v) => {
                if !v.client_enabled() && !serves {
                    add(InNamespace::ClientOff { fix: v.0 | sysctl::TFO_CLIENT_ENABLE }, &label);
                }
                if !v.server_enabled() {
                    add(InNamespace::ServerOff { fix: v.0 | sysctl::TFO_SERVER_ENABLE }, &label);
                }
                for w in v.ineffective_bits() {
                    add(InNamespace::IneffectiveBit(w), &label);
                }
                if v.unknown_bits() != 0 {
                    add(InNamespace::UnknownBits(v.unknown_bits()), &label);
                }
            }
            Err(e) if e.contains("setns") => add(InNamespace::CannotEnter(e.clone()), &label),
            Err(e) => add(InNamespace::CannotRead(e.clone()), &label),
        }
        let client = ns.tcp_fastopen.as_ref().is_ok_and(|v| v.client_enabled());
        if matches!(ns.blackhole_timeout_sec, Ok(0)) && client {
            add(InNamespace::BlackholeOff, &label);
        }
        let server = ns.tcp_fastopen.as_ref().is_ok_and(|v| v.server_enabled());
        if matches!(ns.syncookies, Ok(2)) && server {
            add(InNamespace::Syncookies, &label);
        } else if let Some(c) = ns.listen_counters.as_ref().ok().filter(|c| server && c.syncookies_sent > 0) {
            add(InNamespace::SyncookiesSent(*c), &label);
        }
        if let (Ok(v), Ok(k)) = (&ns.tcp_fastopen, &ns.key) {
            if v.server_enabled() && !k.primary {
                add(InNamespace::NoKeyYet, &label);
            }
        }
    }
    groups
}
