//! What `tfo-trace doctor` concludes about this host. Pure: host facts in (read by
//! `kernel::host`, and the probe loader's verdict per backend), a [`DoctorReport`] out, which
//! `views::doctor` only renders. The six lessons, typed, are in [`checks`], the advice, typed,
//! in [`advice`] (`views::doctor` says both); both are unit-tested on fixed facts.
pub(crate) mod advice;
pub(crate) mod checks;

use serde::Serialize;

use crate::{
    backends::{self, Backend},
    events::{Outcome, Role},
    kernel::{
        host::HostFacts,
        kallsyms::{HookPoint, TracingFacilities},
        listeners::TfoListener,
        privileges::PrivilegeInfo,
        program_types::ProgramTypeSupport,
        ser_result,
        sysctl::TfoNamespace,
        tcp_metrics::NamespaceTcpMetrics,
        uname::KernelInfo,
    },
    probes::{Loaded, Verified},
};

pub(crate) use advice::Advice;
pub(crate) use checks::Check;

/// The whole report: the facts, what the loader found, and what follows from them.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub kernel: KernelInfo,
    pub privileges: PrivilegeInfo,
    pub(crate) facilities: TracingFacilities,
    /// aya's `is_program_supported` per program type (a load probe, not a real attach).
    pub(crate) program_types: Vec<ProgramTypeProbe>,
    /// Authoritative load+attach verdicts per backend, from the probe loader.
    pub backends: Vec<BackendVerdict>,
    #[serde(serialize_with = "ser_result")]
    pub(crate) hook_points: Result<Vec<HookPoint>, String>,
    /// The current namespace first, then every named (`ip netns`) one.
    pub namespaces: Vec<TfoNamespace>,
    /// Per-destination TFO state (`ip tcp_metrics`) per namespace; cookies redacted.
    pub tcp_metrics: Vec<NamespaceTcpMetrics>,
    /// Listening TCP sockets per namespace with their TFO queue size.
    pub listeners: Vec<TfoListener>,
    /// The lessons users keep learning the hard way, each checked here; its JSON is the
    /// view's (each lesson's name, finding and advice in words).
    #[serde(skip)]
    pub checks: Vec<Check>,
    /// What follows from the rest; its JSON is the view's (one line each, in words).
    #[serde(skip)]
    pub advice: Vec<Advice>,
}

/// A program type's probe, with a note on what it means here.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ProgramTypeProbe {
    #[serde(flatten)]
    pub support: ProgramTypeSupport,
    pub note: Option<String>,
}

/// One backend as tried by the loader.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BackendVerdict {
    /// e.g. "fentry", "kprobe", "tracepoint".
    pub name: String,
    /// Loaded and attached.
    pub loads: bool,
    /// Why not (or how, when it loads).
    pub reason: String,
    /// Which TFO events this backend can see.
    pub sees: Vec<String>,
    /// Outcomes this backend cannot see, each with the reason.
    pub blind: Vec<String>,
    /// Its program the verifier worked hardest on, where the kernel says (5.16+): how
    /// near this kernel came to refusing the backend.
    pub(crate) largest_verified: Option<Verified>,
    /// The hooks a healthy plain (non-TFO) connection runs with this backend, and how
    /// often (`backends::PlainRuns`): what tracing TFO costs every other connection.
    pub plain_connection_runs: Vec<backends::PlainRun>,
    /// The same, as one sentence.
    pub plain_connection: String,
}

/// The report on `facts`, with `loader`'s verdict per backend (`probes::verdicts`).
pub(crate) fn diagnose(facts: HostFacts, loader: Vec<(Backend, Result<Loaded, String>)>) -> DoctorReport {
    let backends = backend_verdicts(loader);
    let checks = checks::checks(&facts.namespaces, &facts.listeners, &facts.key_files);
    let mut advice = advice::advice(&facts);
    if let Some(chosen) = backends.iter().find(|b| b.loads) {
        advice.insert(0, Advice::AutoChooses { backend: chosen.name.clone() });
        advice.insert(1, Advice::PlainConnection { runs: chosen.plain_connection.clone() });
    }
    let program_types = facts
        .program_types
        .into_iter()
        .map(|support| ProgramTypeProbe {
            note: program_type_note(&support.name, &facts.facilities),
            support,
        })
        .collect();
    DoctorReport {
        kernel: facts.kernel,
        privileges: facts.privileges,
        facilities: facts.facilities,
        program_types,
        backends,
        hook_points: facts.hook_points,
        namespaces: facts.namespaces,
        tcp_metrics: facts.tcp_metrics,
        listeners: facts.listeners,
        checks,
        advice,
    }
}

/// What a program type's probe means on this host.
fn program_type_note(name: &str, facilities: &TracingFacilities) -> Option<String> {
    match name {
        "tracing" => Some(
            "aya loads and attaches an fentry on bpf_fentry_test1; tp_btf may still work \
             when this fails, see Backends"
                .to_string(),
        ),
        "kprobe" if !facilities.kprobes => {
            Some("no kprobe PMU on this kernel (CONFIG_KPROBES off): nothing to attach to".into())
        }
        _ => None,
    }
}

/// The backends as the loader sees them: which load here, what each one sees and what it
/// cannot see (from the probe table), so `doctor` and the tracer never disagree.
fn backend_verdicts(loader: Vec<(Backend, Result<Loaded, String>)>) -> Vec<BackendVerdict> {
    loader
        .into_iter()
        .map(|(backend, verdict)| {
            let mut sees = Vec::new();
            for role in [Role::Client, Role::Server] {
                for outcome in Outcome::ALL {
                    if backends::sees(backend, role, outcome) {
                        sees.push(format!("{} {}", role.name(), outcome.name()));
                    }
                }
            }
            let blind: Vec<String> = backends::blind_spots(backend)
                .iter()
                .map(|b| {
                    let (role, name) = (b.role.name(), b.outcome.name());
                    let counted = match b.counter {
                        backends::KernelCounter::Exact(c) => format!("counted by the kernel instead: {c}"),
                        backends::KernelCounter::Within { counter, of } => {
                            format!("counted by the kernel instead: {counter} (out of {})", of.name())
                        }
                        backends::KernelCounter::None(why) => format!("not counted: {why}"),
                    };
                    format!("{role} {name} ({}); {counted}", b.why)
                })
                .collect();
            let (loads, reason, largest_verified) = match verdict {
                Ok(loaded) => (true, loaded.how, loaded.largest),
                Err(e) => (false, e, None),
            };
            BackendVerdict {
                name: backend.name().to_string(),
                loads,
                reason,
                sees,
                blind,
                largest_verified,
                plain_connection_runs: backends::plain_connection_runs(backend),
                plain_connection: backends::plain_connection_summary(backend),
            }
        })
        .collect()
}

/// The loader's verdicts as tests use them: fentry refused, the tracepoint backend loaded.
#[cfg(test)]
pub(crate) fn sample_loader() -> Vec<(Backend, Result<Loaded, String>)> {
    vec![
        (Backend::Fentry, Err("loading/attaching ...: EPERM".to_string())),
        (Backend::Tracepoint, Ok(Loaded { how: "socket cast: kfunc bpf_rdonly_cast".into(), largest: None })),
    ]
}

/// A host to judge in tests: the current namespace (client only, blackhole detection off)
/// and a named server namespace.
#[cfg(test)]
pub(crate) fn sample_facts() -> HostFacts {
    use crate::kernel::{
        kallsyms, netns,
        sysctl::{FastopenKeyStatus, TcpFastopen},
    };
    HostFacts {
        kernel: KernelInfo {
            sysname: "Linux".into(),
            release: "6.18.0".into(),
            version: "#1".into(),
            machine: "x86_64".into(),
            btf_vmlinux: true,
            btf_size: Some(1),
        },
        privileges: PrivilegeInfo {
            euid: 0,
            cap_eff: Some("000001ffffffffff".into()),
            capabilities: vec![],
            initial_user_ns: Some(true),
            tracing_problem: None,
            perf_event_paranoid: Some(2),
            unprivileged_bpf_disabled: Some(2),
        },
        facilities: TracingFacilities {
            kprobes: false,
            tracefs: None,
            bpffs: None,
            cgroup2: Some("/sys/fs/cgroup".into()),
            ftrace_functions_problem: Some("tracefs not mounted".into()),
        },
        program_types: vec![],
        hook_points: Ok(kallsyms::scan_kallsyms("0 T tcp_connect\n", &["tcp_connect", "tcp_send_syn_data"])),
        namespaces: vec![
            TfoNamespace {
                name: None,
                path: netns::SELF_NETNS.into(),
                inode: Some(1),
                current: true,
                init: Some(true),
                tcp_fastopen: Ok(TcpFastopen(1)),
                blackhole_timeout_sec: Ok(0),
                key: Ok(FastopenKeyStatus { primary: false, backup: false }),
                syncookies: Ok(1),
                listen_counters: Ok(Default::default()),
            },
            TfoNamespace {
                name: Some("srv".into()),
                path: "/run/netns/srv".into(),
                inode: Some(2),
                current: false,
                init: Some(false),
                tcp_fastopen: Ok(TcpFastopen(0x403)),
                blackhole_timeout_sec: Ok(3600),
                key: Ok(FastopenKeyStatus { primary: true, backup: true }),
                syncookies: Ok(1),
                listen_counters: Ok(Default::default()),
            },
        ],
        tcp_metrics: vec![],
        listeners: vec![],
        key_files: vec![],
        counter_reach: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_s_choice_leads_the_advice() {
        let r = diagnose(sample_facts(), sample_loader());
        assert!(matches!(&r.advice[0], Advice::AutoChooses { backend } if backend == "tracepoint"));
        assert_eq!(r.backends.len(), 2);
        assert!(!r.backends[0].loads && r.backends[0].reason.ends_with("EPERM"));
        assert_eq!(r.backends[1].reason, "socket cast: kfunc bpf_rdonly_cast");
        assert!(r.backends[1].sees.contains(&"client syn_retransmitted".to_string()));
        let overflow = r.backends[1].blind.iter().find(|b| b.starts_with("server queue_overflow ("));
        assert!(
            overflow.is_some_and(
                |b| b.ends_with("counted by the kernel instead: TcpExtTCPFastOpenListenOverflow")
            ),
            "{overflow:?}"
        );
        assert_eq!(r.checks.len(), 6);
    }

    #[test]
    fn program_type_notes_follow_the_facilities() {
        let mut facts = sample_facts();
        facts.program_types = ["raw_tracepoint", "kprobe", "tracing"]
            .iter()
            .map(|n| ProgramTypeSupport {
                name: n.to_string(),
                used_for: "x".into(),
                supported: Some(true),
                error: None,
            })
            .collect();
        let r = diagnose(facts, vec![]);
        let note = |i: usize| r.program_types[i].note.clone().unwrap_or_default();
        assert_eq!(r.program_types[0].note, None, "raw tracepoints need nothing more");
        assert!(note(1).contains("CONFIG_KPROBES off"));
        assert!(note(2).contains("tp_btf may still work"), "the fentry probe is not the whole story");
        // The note sits after the probe's own fields, as before it had a type of its own.
        let j = serde_json::to_string(&r.program_types[1]).unwrap();
        assert!(
            j.starts_with(r#"{"name":"kprobe","used_for":"x","supported":true,"error":null,"note":"#),
            "{j}"
        );
    }
}
