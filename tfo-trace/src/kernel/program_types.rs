//! Which BPF program types this kernel loads, from aya's feature probes (a load, not an
//! attach; for `tracing` aya also attaches an fentry on bpf_fentry_test1).
use serde::Serialize;

/// One program type and whether the kernel takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ProgramTypeSupport {
    /// Short name as in bpftool (raw_tracepoint, tracing, kprobe).
    pub name: String,
    /// Backends that use it.
    pub used_for: String,
    /// Some(true/false) from the probe, None when the probe itself failed (see `error`).
    pub supported: Option<bool>,
    pub error: Option<String>,
}

/// An error and its sources on one line, each source once.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        let t = x.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = x.source();
    }
    s
}

/// Probes every program type a tfo-trace backend uses.
pub(crate) fn probe_all() -> Vec<ProgramTypeSupport> {
    use aya::programs::ProgramType as P;
    let list: [(P, &str, &str); 3] = [
        (P::Tracing, "tracing", "tp_btf (tracepoint and fentry backends), fentry/fexit (fentry backend)"),
        (P::RawTracePoint, "raw_tracepoint", "raw-tracepoint and kprobe backends"),
        (P::KProbe, "kprobe", "kprobe/kretprobe (kprobe backend)"),
    ];
    list.into_iter()
        .map(|(pt, name, used_for)| {
            let (supported, error) = match aya::sys::is_program_supported(pt) {
                Ok(b) => (Some(b), None),
                Err(e) => (None, Some(error_chain(&e))),
            };
            ProgramTypeSupport { name: name.into(), used_for: used_for.into(), supported, error }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);
    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn error_chain_names_each_source_once() {
        let e = E(
            "`bpf_prog_load` failed: Operation not permitted",
            Some(Box::new(E("Operation not permitted", None))),
        );
        assert_eq!(error_chain(&e), "`bpf_prog_load` failed: Operation not permitted");
        let e = E("loading", Some(Box::new(E("EPERM", None))));
        assert_eq!(error_chain(&e), "loading: EPERM");
    }
}
