//! Advice lines: what the host's facts mean for tracing TFO and for TFO itself, one line
//! each, a finding shared by several namespaces said once. Pure.
use crate::kernel::{host::HostFacts, kallsyms::SymbolPresence, sysctl, uname::BTF_VMLINUX_PATH};

/// Advice lines derived from the host's facts (pure).
pub fn advice(r: &HostFacts) -> Vec<String> {
    let mut a = Vec::new();

    if let Some(p) = &r.privileges.tracing_problem {
        a.push(p.clone());
    }
    if !r.kernel.btf_vmlinux {
        a.push(format!(
            "no {BTF_VMLINUX_PATH} (CONFIG_DEBUG_INFO_BTF off): tp_btf/fentry backends and BTF-derived \
             tcp_sock field offsets are unavailable"
        ));
    }
    if !r.facilities.kprobes {
        a.push(
            "kprobes are not available on this kernel (CONFIG_KPROBES off): the kprobe backend cannot load"
                .into(),
        );
    }
    if let Some(t) = r.program_types.iter().find(|p| p.name == "tracing") {
        if t.supported != Some(true) && r.privileges.tracing_problem.is_none() {
            let why = t.error.clone().unwrap_or_else(|| "not supported".into());
            a.push(format!(
                "fentry/fexit probe failed ({why}) although privileges suffice: expect the fentry \
                 backend to be refused here; tracepoints (and possibly tp_btf) remain"
            ));
        }
    }
    if r.facilities.tracefs.is_none() {
        a.push(
            "tracefs is not mounted: tfo-trace does not need it (it attaches raw tracepoints \
             by name); bpftrace and perf do (`mount -t tracefs tracefs /sys/kernel/tracing`)"
                .into(),
        );
    }
    if r.facilities.bpffs.is_none() {
        a.push(
            "bpffs is not mounted: only needed to pin maps or programs (`mount -t bpf bpf /sys/fs/bpf`)"
                .into(),
        );
    }
    if let Ok(points) = &r.hook_points {
        let absent: Vec<&str> =
            points.iter().filter(|p| p.presence == SymbolPresence::Absent).map(|p| p.name.as_str()).collect();
        if !absent.is_empty() {
            a.push(format!(
                "{} not in kallsyms (static, inlined): no probe can attach there; their effect is seen \
                 from callers, callees and tcp_sock fields",
                absent.join(", ")
            ));
        }
        let clones: Vec<String> = points
            .iter()
            .filter(|p| p.presence == SymbolPresence::CloneOnly)
            .map(|p| format!("{} ({})", p.name, p.clones.join(", ")))
            .collect();
        if !clones.is_empty() {
            a.push(format!(
                "only compiler clones exist of {}: not attachable by the plain name",
                clones.join("; ")
            ));
        }
    }

    let reach = &r.counter_reach;
    if !reach.unreadable.is_empty() {
        let each: Vec<String> =
            reach.unreadable.iter().map(|(ns, why)| format!("netns {ns}: {why}")).collect();
        a.push(format!(
            "the own counters of {} namespaces cannot be read ({}): the outcomes a backend's hooks \
             cannot see (`kernel_counted`) leave them out, and say so; a namespace with a process in it \
             is read through /proc/PID/net, one that only a mount or a socket holds needs CAP_SYS_ADMIN \
             (root) to be entered",
            reach.unreadable.len(),
            each.join("; ")
        ));
    }
    if !reach.unnamed_through.is_empty() {
        a.push(format!(
            "{} namespaces are read without their names, through processes of other users (pids {}): \
             counted in every total, but `--netns` cannot select them until one of their processes makes \
             a TFO connection or listens (or with CAP_SYS_PTRACE, or as root)",
            reach.unnamed_through.len(),
            reach.unnamed_through.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
        ));
    }

    // Per-namespace findings, grouped so that one line names every namespace it applies to.
    #[derive(PartialEq)]
    enum Finding {
        ClientOff(u32),
        ServerOff(u32),
        BlackholeOff,
        Syncookies,
        NoKeyYet,
        Other(String),
    }
    let mut groups: Vec<(Finding, Vec<String>)> = Vec::new();
    let mut add = |f: Finding, label: &str| match groups.iter_mut().find(|(g, _)| *g == f) {
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
                    add(Finding::ClientOff(v.0 | sysctl::TFO_CLIENT_ENABLE), &label);
                }
                if !v.server_enabled() {
                    add(Finding::ServerOff(v.0 | sysctl::TFO_SERVER_ENABLE), &label);
                }
                for w in v.ineffective_bits() {
                    add(Finding::Other(w), &label);
                }
                if v.unknown_bits() != 0 {
                    add(
                        Finding::Other(format!(
                            "tcp_fastopen has bits tfo-trace does not know: {:#x}",
                            v.unknown_bits()
                        )),
                        &label,
                    );
                }
            }
            Err(e) if e.contains("setns") => add(
                Finding::Other(format!(
                    "cannot enter it ({e}): reading another namespace needs CAP_SYS_ADMIN"
                )),
                &label,
            ),
            Err(e) => add(Finding::Other(format!("cannot read tcp_fastopen: {e}")), &label),
        }
        let client = ns.tcp_fastopen.as_ref().is_ok_and(|v| v.client_enabled());
        if matches!(ns.blackhole_timeout_sec, Ok(0)) && client {
            add(Finding::BlackholeOff, &label);
        }
        if matches!(ns.syncookies, Ok(2)) && ns.tcp_fastopen.as_ref().is_ok_and(|v| v.server_enabled()) {
            add(Finding::Syncookies, &label);
        }
        if let (Ok(v), Ok(k)) = (&ns.tcp_fastopen, &ns.key) {
            if v.server_enabled() && !k.primary {
                add(Finding::NoKeyYet, &label);
            }
        }
    }
    for (f, labels) in groups {
        let ns = if labels.len() == 1 {
            format!("namespace {}", labels[0])
        } else {
            format!("namespaces {}", labels.join(", "))
        };
        a.push(match f {
            Finding::ClientOff(fix) => format!(
                "client bit 0x1 is off in {ns}: this host will not send SYN-data from there \
                 (`sysctl -w net.ipv4.tcp_fastopen={fix}`)"
            ),
            Finding::ServerOff(fix) => format!(
                "server bit 0x2 is off in {ns}: listeners there will not accept TFO \
                 (`sysctl -w net.ipv4.tcp_fastopen={fix}` and TCP_FASTOPEN on the listener)"
            ),
            Finding::BlackholeOff => format!(
                "blackhole detection is off in {ns} (tcp_fastopen_blackhole_timeout_sec=0, the default \
                 since 5.14): a path that drops every SYN with a TFO option makes each TFO connect there \
                 time out, with nothing to pause TFO; on, it pauses active TFO after one such connect (it \
                 does not catch a path dropping only SYN-data: each connect still pays ~1 s, see \
                 `tfo-trace stalls`)"
            ),
            Finding::Syncookies => format!(
                "tcp_syncookies=2 in {ns}: its listeners answer every SYN with a syncookie and skip TFO \
                 (no SYN-data accepted, no TFO counter moves, TcpExtSyncookiesSent does): keep 1 there"
            ),
            Finding::NoKeyYet => {
                format!("no TFO key yet in {ns}: the kernel generates one when the first TFO listener starts")
            }
            Finding::Other(msg) => format!("{ns}: {msg}"),
        });
    }
    if r.namespaces.iter().any(|n| matches!(&n.key, Err(e) if e.contains("denied"))) {
        a.push("tcp_fastopen_key is readable by root only: key presence not shown".into());
    }
    a.push(
        "sysctl tcp_fastopen is per network namespace: set it where the client or listener runs \
         (`ip netns exec NAME sysctl -w net.ipv4.tcp_fastopen=3`)"
            .into(),
    );
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{diagnosis::sample_facts, kernel::sysctl::TcpFastopen};

    #[test]
    fn advice_from_fixed_facts() {
        let mut r = sample_facts();
        let all = advice(&r).join("\n");
        assert!(all.contains("server bit 0x2 is off in namespace current"), "{all}");
        assert!(!all.contains("server bit 0x2 is off in namespace srv"), "{all}");
        assert!(!all.contains("client bit 0x1 is off"), "{all}");
        assert!(all.contains("kprobes are not available on this kernel (CONFIG_KPROBES off)"), "{all}");
        assert!(all.contains("blackhole detection is off in namespace current"), "{all}");
        assert!(!all.contains("blackhole detection is off in namespace srv"), "{all}");
        assert!(all.contains("tcp_send_syn_data not in kallsyms"), "{all}");
        assert!(all.contains("per network namespace"), "{all}");
        assert!(advice(&r).iter().all(|l| !l.contains('\n')));

        r.namespaces[1].tcp_fastopen = Ok(TcpFastopen(0x600));
        let all = advice(&r).join("\n");
        assert!(all.contains("client bit 0x1 is off in namespace srv"), "{all}");
        assert!(all.contains("namespace srv: 0x200 (server without cookie) has no effect"), "{all}");
    }

    #[test]
    fn namespaces_whose_counters_cannot_be_read_are_said() {
        let mut r = sample_facts();
        assert!(!advice(&r)
            .iter()
            .any(|l| l.contains("cannot be read") || l.contains("without their names")));
        r.counter_reach.unreadable = vec![(4026532246, "setns: Operation not permitted".into())];
        r.counter_reach.unnamed_through = vec![4242];
        let all = advice(&r).join("\n");
        assert!(
            all.contains("the own counters of 1 namespaces cannot be read (netns 4026532246: setns"),
            "{all}"
        );
        assert!(
            all.contains(
                "1 namespaces are read without their names, through processes of other users (pids 4242)"
            ),
            "{all}"
        );
    }

    #[test]
    fn one_line_names_every_namespace_it_applies_to() {
        let mut r = sample_facts();
        r.namespaces[1].blackhole_timeout_sec = Ok(0);
        let a = advice(&r);
        let lines: Vec<&String> = a.iter().filter(|l| l.starts_with("blackhole detection is off")).collect();
        assert_eq!(lines.len(), 1, "{a:?}");
        assert!(lines[0].starts_with("blackhole detection is off in namespaces current, srv "), "{a:?}");
        r.namespaces[0].key = Err("permission denied".into());
        assert!(advice(&r).iter().any(|l| l.contains("readable by root only")));
    }
}
