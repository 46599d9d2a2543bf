//! Everything `tfo-trace doctor` judges about this host, each fact read once by its
//! collector in this folder. Reading never fails: what cannot be read says why in place.
use crate::kernel::{
    every_netns::CounterReach,
    kallsyms::{self, HookPoint, TracingFacilities},
    listeners::{self, TfoListener},
    privileges::PrivilegeInfo,
    program_types::{self, ProgramTypeSupport},
    sysctl::{self, TfoNamespace},
    tcp_metrics::{self, NamespaceTcpMetrics},
    uname::KernelInfo,
};

/// The host as the kernel shows it (the probe loader's verdicts come from `probes`).
#[derive(Debug, Clone)]
pub(crate) struct HostFacts {
    pub kernel: KernelInfo,
    pub privileges: PrivilegeInfo,
    pub facilities: TracingFacilities,
    /// aya's `is_program_supported` per program type (a load probe, not a real attach).
    pub program_types: Vec<ProgramTypeSupport>,
    pub hook_points: Result<Vec<HookPoint>, String>,
    /// The current namespace first, then every named (`ip netns`) one.
    pub namespaces: Vec<TfoNamespace>,
    /// Per-destination TFO state (`ip tcp_metrics`) per namespace; cookies redacted.
    pub tcp_metrics: Vec<NamespaceTcpMetrics>,
    /// Listening TCP sockets per namespace with their TFO queue size.
    pub listeners: Vec<TfoListener>,
    /// sysctl.d files that persist net.ipv4.tcp_fastopen_key.
    pub key_files: Vec<String>,
    /// Which namespaces' own counters this user can read (the outcomes a backend's hooks
    /// cannot see come from there).
    pub counter_reach: CounterReach,
}

impl HostFacts {
    /// Needs no BPF privileges (the program-type probes then report errors); reading other
    /// namespaces needs CAP_SYS_ADMIN, the TFO key and listeners' queues need root.
    pub(crate) fn collect() -> HostFacts {
        let namespaces = sysctl::tfo_namespaces();
        HostFacts {
            kernel: KernelInfo::collect(),
            privileges: PrivilegeInfo::collect(),
            facilities: TracingFacilities::collect(),
            program_types: program_types::probe_all(),
            hook_points: kallsyms::tfo_hook_points().map_err(|e| format!("{}: {e}", kallsyms::KALLSYMS_PATH)),
            tcp_metrics: tcp_metrics::per_namespace(&namespaces),
            listeners: listeners::tfo_listeners(&namespaces),
            key_files: sysctl::persisted_key_files(),
            counter_reach: CounterReach::collect(),
            namespaces,
        }
    }
}
