//! doctor's advice in words: one line per [`Advice`] (`diagnosis::advice` decides which),
//! one function per kind.
use crate::{
    diagnosis::advice::{Advice, InNamespace},
    kernel::{netstat::ListenCounters, uname::BTF_VMLINUX_PATH},
};

/// The line that says `a`.
pub(super) fn said(a: &Advice) -> String {
    match a {
        Advice::AutoChooses { backend } => format!("auto would choose the {backend} backend"),
        Advice::PlainConnection { runs } => format!("with it a plain (non-TFO) connection runs: {runs}"),
        Advice::TracingNotAllowed(why) => why.clone(),
        Advice::NoBtf => no_btf(),
        Advice::NoKprobes => {
            "kprobes are not available on this kernel (CONFIG_KPROBES off): the kprobe backend cannot load"
                .into()
        }
        Advice::FentryRefused { why } => fentry_refused(why),
        Advice::NoTracefs => no_tracefs(),
        Advice::NoBpffs => {
            "bpffs is not mounted: only needed to pin maps or programs (`mount -t bpf bpf /sys/fs/bpf`)"
                .into()
        }
        Advice::HookPointsAbsent(names) => hook_points_absent(names),
        Advice::CloneOnly(points) => clone_only(points),
        Advice::CountersUnreadable(each) => counters_unreadable(each),
        Advice::UnnamedNamespaces(pids) => unnamed_namespaces(pids),
        Advice::InNamespaces { finding, namespaces } => in_namespaces(finding, namespaces),
        Advice::KeyRootOnly => "tcp_fastopen_key is readable by root only: key presence not shown".into(),
        Advice::SysctlPerNamespace => per_namespace(),
    }
}

fn no_btf() -> String {
    format!(
        "no {BTF_VMLINUX_PATH} (CONFIG_DEBUG_INFO_BTF off): tp_btf/fentry backends and BTF-derived \
         tcp_sock field offsets are unavailable"
    )
}

fn fentry_refused(why: &str) -> String {
    format!(
        "fentry/fexit probe failed ({why}) although privileges suffice: expect the fentry backend to be \
         refused here; tracepoints (and possibly tp_btf) remain"
    )
}

fn no_tracefs() -> String {
    "tracefs is not mounted: tfo-trace does not need it (it attaches raw tracepoints by name); bpftrace \
     and perf do (`mount -t tracefs tracefs /sys/kernel/tracing`)"
        .into()
}

fn hook_points_absent(names: &[String]) -> String {
    format!(
        "{} not in kallsyms (static, inlined): no probe can attach there; their effect is seen from \
         callers, callees and tcp_sock fields",
        names.join(", ")
    )
}

fn clone_only(points: &[(String, Vec<String>)]) -> String {
    let each: Vec<String> =
        points.iter().map(|(name, clones)| format!("{name} ({})", clones.join(", "))).collect();
    format!("only compiler clones exist of {}: not attachable by the plain name", each.join("; "))
}

fn counters_unreadable(namespaces: &[(u32, String)]) -> String {
    let each: Vec<String> = namespaces.iter().map(|(ns, why)| format!("netns {ns}: {why}")).collect();
    format!(
        "the own counters of {} namespaces cannot be read ({}): the outcomes a backend's hooks cannot see \
         (`kernel_counted`) leave them out, and say so; a namespace with a process in it is read through \
         /proc/PID/net, one that only a mount or a socket holds needs CAP_SYS_ADMIN (root) to be entered",
        namespaces.len(),
        each.join("; ")
    )
}

fn unnamed_namespaces(pids: &[u32]) -> String {
    format!(
        "{} namespaces are read without their names, through processes of other users (pids {}): counted \
         in every total, but `--netns` cannot select them until one of their processes makes a TFO \
         connection or listens (or with CAP_SYS_PTRACE, or as root)",
        pids.len(),
        pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
    )
}

/// A finding with every namespace it applies to.
fn in_namespaces(finding: &InNamespace, labels: &[String]) -> String {
    let ns = if labels.len() == 1 {
        format!("namespace {}", labels[0])
    } else {
        format!("namespaces {}", labels.join(", "))
    };
    match finding {
        InNamespace::ClientOff { fix } => format!(
            "client bit 0x1 is off in {ns}: this host will not send SYN-data from there \
             (`sysctl -w net.ipv4.tcp_fastopen={fix}`)"
        ),
        InNamespace::ServerOff { fix } => format!(
            "server bit 0x2 is off in {ns}: listeners there will not accept TFO \
             (`sysctl -w net.ipv4.tcp_fastopen={fix}` and TCP_FASTOPEN on the listener)"
        ),
        InNamespace::BlackholeOff => blackhole_off(&ns),
        InNamespace::Syncookies => format!(
            "tcp_syncookies=2 in {ns}: its listeners answer every SYN with a syncookie and skip TFO \
             (no SYN-data accepted, no TFO counter moves, TcpExtSyncookiesSent does): keep 1 there"
        ),
        InNamespace::SyncookiesSent(c) => syncookies_sent(&ns, c),
        InNamespace::NoKeyYet => {
            format!("no TFO key yet in {ns}: the kernel generates one when the first TFO listener starts")
        }
        InNamespace::IneffectiveBit(what) => format!("{ns}: {what}"),
        InNamespace::UnknownBits(bits) => {
            format!("{ns}: tcp_fastopen has bits tfo-trace does not know: {bits:#x}")
        }
        InNamespace::CannotEnter(e) => {
            format!("{ns}: cannot enter it ({e}): reading another namespace needs CAP_SYS_ADMIN")
        }
        InNamespace::CannotRead(e) => format!("{ns}: cannot read tcp_fastopen: {e}"),
    }
}

/// A flood's syncookies, with the fix. tcp_conn_request() (net/ipv4/tcp_input.c, 6.12)
/// answers a SYN with a syncookie when the listener's SYN queue holds more than its backlog
/// (:7268, inet_csk_reqsk_queue_is_full(): sk_max_ack_backlog, listen()'s backlog capped by
/// somaxconn), and calls no tcp_try_fastopen() for it (:7371-7373); tcp_max_syn_backlog is
/// read only with syncookies off (:7324-7329).
fn syncookies_sent(ns: &str, c: &ListenCounters) -> String {
    format!(
        "listeners in {ns} answered {} SYNs with syncookies (TcpExtSyncookiesSent, since the namespace \
         was made; TcpExtListenOverflows {}, TcpExtListenDrops {}): a SYN flood, or more handshakes in \
         flight than a listener's listen() backlog; a SYN answered with a syncookie skips TFO (its \
         SYN-data is not accepted, no TFO counter moves). Keep net.ipv4.tcp_syncookies=1 there (without \
         it those SYNs are dropped); find the flood (`tfo-trace top` shows the counters as they move), or \
         raise the listener's backlog (and net.core.somaxconn, which caps it); \
         net.ipv4.tcp_max_syn_backlog does not decide when syncookies start",
        c.syncookies_sent, c.listen_overflows, c.listen_drops
    )
}

fn blackhole_off(ns: &str) -> String {
    format!(
        "blackhole detection is off in {ns} (tcp_fastopen_blackhole_timeout_sec=0, the default since \
         5.14 and in the stable kernels that took the change): TFO goes on toward a destination that \
         answers no SYN at all; on, one such connect (its third SYN timeout) pauses active TFO for the \
         whole namespace (a path dropping only SYN-data, or only SYNs with a TFO option, costs each \
         connect ~1 s either way and trips nothing: see `tfo-trace stalls`)"
    )
}

fn per_namespace() -> String {
    "sysctl tcp_fastopen is per network namespace: set it where the client or listener runs \
     (`ip netns exec NAME sysctl -w net.ipv4.tcp_fastopen=3`)"
        .into()
}

#[cfg(test)]
mod tests {
    use super::said;
    use crate::{
        diagnosis::{advice::advice as advised, sample_facts},
        kernel::{host::HostFacts, sysctl::TcpFastopen},
    };

    /// Each line of advice on `r`, as doctor says it.
    fn advice(r: &HostFacts) -> Vec<String> {
        advised(r).iter().map(said).collect()
    }

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

    /// The loader's choice leads the advice, said as `diagnosis`' test of it sets it up.
    #[test]
    fn the_loader_s_choice_leads_the_advice() {
        use crate::{
            backends::Backend,
            diagnosis::{diagnose, sample_loader},
        };
        let r = diagnose(sample_facts(), sample_loader());
        let advice: Vec<String> = r.advice.iter().map(said).collect();
        assert_eq!(advice[0], "auto would choose the tracepoint backend");
        assert!(
            advice[1].starts_with("with it a plain (non-TFO) connection runs: tfo_state ("),
            "{}",
            advice[1]
        );
        let none_loads = diagnose(sample_facts(), vec![(Backend::Kprobe, Err("no kprobes".into()))]);
        assert!(!none_loads.advice.iter().map(said).any(|a| a.starts_with("auto would choose")));
    }
}
