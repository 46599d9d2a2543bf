//! `tfo-trace doctor`: what this host can trace, and why TFO may not happen here.
//!
//! [`collect`] gathers everything that does not need the probe loader (kernel, BTF, privileges,
//! aya's program-type feature probes, kallsyms hook points, per-namespace TFO sysctls) and
//! derives advice lines. The loader adds the authoritative load+attach results afterwards in
//! [`DoctorReport::backends`] and calls [`DoctorReport::refresh_advice`]. [`render_text`] and
//! [`render_json`] print it. Doctor never fails on missing things: it reports them and advises.

use std::io::{self, Write};

use serde::Serialize;

use std::collections::BTreeSet;

use crate::kernel::{
    host::HostFacts,
    kallsyms::{self, HookPoint, SymbolPresence, TracingFacilities},
    listeners::TfoListener,
    privileges::PrivilegeInfo,
    program_types::ProgramTypeSupport,
    ser_result,
    sysctl::{self, TfoNamespace},
    tcp_metrics::NamespaceTcpMetrics,
    uname::{KernelInfo, BTF_VMLINUX_PATH},
};

/// The whole report. Every field is public so the loader (and tests) can add to it.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub kernel: KernelInfo,
    pub privileges: PrivilegeInfo,
    pub facilities: TracingFacilities,
    /// aya's `is_program_supported` per program type (a load probe, not a real attach).
    pub program_types: Vec<ProgramTypeProbe>,
    /// Authoritative load+attach verdicts per backend, filled in by the probe loader.
    pub backends: Vec<BackendVerdict>,
    #[serde(serialize_with = "ser_result")]
    pub hook_points: Result<Vec<HookPoint>, String>,
    /// The current namespace first, then every named (`ip netns`) one.
    pub namespaces: Vec<TfoNamespace>,
    /// Per-destination TFO state (`ip tcp_metrics`) per namespace; cookies redacted.
    pub tcp_metrics: Vec<NamespaceTcpMetrics>,
    /// Listening TCP sockets per namespace with their TFO queue size.
    pub listeners: Vec<TfoListener>,
    /// The lessons users keep learning the hard way, each checked here with its advice.
    pub checks: Vec<Check>,
    pub advice: Vec<String>,
}

/// One backend as tried by the loader.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BackendVerdict {
    /// e.g. "fentry", "kprobe", "tp_btf", "tracepoint", "sock_ops".
    pub name: String,
    /// Loaded and attached.
    pub loads: bool,
    /// Why not (or how, when it loads).
    pub reason: String,
    /// Which TFO events this backend can see.
    pub sees: Vec<String>,
    /// Outcomes this backend cannot see, each with the reason.
    pub blind: Vec<String>,
}

/// A program type's probe, with a note on what it means here.
#[derive(Debug, Clone, Serialize)]
pub struct ProgramTypeProbe {
    #[serde(flatten)]
    pub support: ProgramTypeSupport,
    pub note: Option<String>,
}

impl DoctorReport {
    /// Recomputes [`DoctorReport::advice`] (call after filling `backends`).
    pub fn refresh_advice(&mut self) {
        self.advice = advice(self);
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
        "tracepoint" if facilities.tracefs.is_none() => {
            Some("attaching needs tracefs for event ids (not mounted now)".into())
        }
        "sock_ops" | "cgroup_skb" if facilities.cgroup2.is_none() => {
            Some("no cgroup v2 mounted to attach to".into())
        }
        _ => None,
    }
}

/// One lesson, checked: `ok` false means the advice applies here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    /// What was found on this host.
    pub detail: String,
    /// One line: what to do (or remember).
    pub advice: String,
}

/// The five lessons, checked against this host (pure).
pub fn checks(namespaces: &[TfoNamespace], listeners: &[TfoListener], key_files: &[String]) -> Vec<Check> {
    let mut out = Vec::new();

    // 1. The sysctl is per network namespace.
    let values: Vec<String> = namespaces
        .iter()
        .filter_map(|n| n.tcp_fastopen.as_ref().ok().map(|v| format!("{:#x} in {}", v.0, n.label())))
        .collect();
    let distinct: BTreeSet<u32> =
        namespaces.iter().filter_map(|n| n.tcp_fastopen.as_ref().ok().map(|v| v.0)).collect();
    out.push(Check {
        name: "sysctl per namespace".into(),
        ok: distinct.len() <= 1,
        detail: format!("net.ipv4.tcp_fastopen is {}", if values.is_empty() { "unreadable".into() } else { values.join(", ") }),
        advice: "tcp_fastopen (and its key) is per network namespace, containers do not inherit the host's: \
                 set it where the client or listener runs (`ip netns exec NAME sysctl -w net.ipv4.tcp_fastopen=3`)"
            .into(),
    });

    // 2. 0x400 is read only at listen().
    let missed: Vec<String> = listeners
        .iter()
        .filter(|l| {
            matches!(l.max_qlen, Ok(0))
                && namespaces.iter().any(|n| {
                    n.inode == l.netns
                        && n.tcp_fastopen
                            .as_ref()
                            .is_ok_and(|v| v.server_all_listeners() && v.server_enabled())
                })
        })
        .map(|l| format!("{} in {}", l.addr, l.namespace))
        .collect();
    out.push(Check {
        name: "0x400 read only at listen()".into(),
        ok: missed.is_empty(),
        detail: if missed.is_empty() {
            "no listener missed bit 0x400".into()
        } else {
            format!("TFO off (max_qlen 0) although 0x400 is set: {}", missed.join(", "))
        },
        advice:
            "bit 0x400 (TFO on every listener) is applied at listen() only: restart listeners that started \
                 before it was set"
                .into(),
    });

    // 3. fastopen= above somaxconn is clamped.
    let clamped: Vec<String> = listeners
        .iter()
        .filter_map(|l| match (&l.max_qlen, l.somaxconn) {
            (Ok(q), Some(s)) if *q > 0 && *q >= s => {
                Some(format!("{} in {} (max_qlen {q} = somaxconn)", l.addr, l.namespace))
            }
            _ => None,
        })
        .collect();
    out.push(Check {
        name: "fastopen= clamped to somaxconn".into(),
        ok: clamped.is_empty(),
        detail: if clamped.is_empty() {
            let n = listeners.iter().filter(|l| matches!(l.max_qlen, Ok(q) if q > 0)).count();
            format!("{n} TFO listener(s), none at the somaxconn limit")
        } else {
            format!("probably clamped: {}", clamped.join(", "))
        },
        advice: "the kernel silently caps a listener's TFO queue (fastopen=, TCP_FASTOPEN) at net.core.somaxconn: \
                 raise somaxconn first"
            .into(),
    });

    // 4. A key not persisted is regenerated at reboot.
    let servers: Vec<String> = namespaces
        .iter()
        .filter(|n| {
            n.tcp_fastopen.as_ref().is_ok_and(|v| v.server_enabled()) || matches!(&n.key, Ok(k) if k.primary)
        })
        .map(|n| n.label())
        .collect();
    let init_persisted = !key_files.is_empty();
    let unpersisted: Vec<String> = namespaces
        .iter()
        .filter(|n| servers.contains(&n.label()) && !(n.init == Some(true) && init_persisted))
        .map(|n| n.label())
        .collect();
    out.push(Check {
        name: "key persisted".into(),
        ok: unpersisted.is_empty(),
        detail: match (unpersisted.is_empty(), init_persisted) {
            (true, true) => format!("set at boot by {}", key_files.join(", ")),
            (true, false) => "no TFO server namespace".into(),
            (false, _) => format!("TFO server key not persisted in {}", unpersisted.join(", ")),
        },
        advice: "a key not persisted is regenerated at reboot (and is random per namespace): every cookie issued \
                 before is refused once; persist net.ipv4.tcp_fastopen_key in /etc/sysctl.d/, the same on every \
                 server behind one address"
            .into(),
    });

    // 5. Blackhole detection is off by default since 5.14.
    let off: Vec<String> =
        namespaces.iter().filter(|n| matches!(n.blackhole_timeout_sec, Ok(0))).map(|n| n.label()).collect();
    out.push(Check {
        name: "blackhole detection".into(),
        ok: off.is_empty(),
        detail: if off.is_empty() { "on in every namespace".into() } else { format!("off in {}", off.join(", ")) },
        advice: "off by default since 5.14 (tcp_fastopen_blackhole_timeout_sec=0): behind a middlebox that drops \
                 SYN-data every TFO connect pays ~1 s; set it (e.g. 3600) on clients, or use `tfo-trace report`"
            .into(),
    });
    out
}

fn render_tfo_state(r: &DoctorReport, sections: &mut Vec<Section>) {
    let mut s = Section::new("TFO state per destination (ip tcp_metrics; cookies redacted)");
    for ns in &r.tcp_metrics {
        match &ns.entries {
            Ok(v) if v.is_empty() => s.kv(&ns.namespace, "no TFO state cached"),
            Ok(v) => {
                s.kv(&ns.namespace, format!("{} destination(s)", v.len()));
                for m in v {
                    let mut l = format!("{}: cookie {}", m.dst, m.cookie_redacted());
                    if let Some(mss) = m.fo_mss {
                        l.push_str(&format!(", fo_mss {mss}"));
                    }
                    l.push_str(&format!(", fo_syn_drops {}", m.fo_syn_drops));
                    if let Some(a) = m.fo_syn_drop_age_s.filter(|_| m.fo_syn_drops > 0) {
                        l.push_str(&format!(" (last {a:.0} s ago)"));
                    }
                    if let Some(a) = m.age_s {
                        l.push_str(&format!(", updated {a:.0} s ago"));
                    }
                    s.line(l);
                }
            }
            Err(e) => s.kv(&ns.namespace, format!("unreadable: {e}")),
        }
    }
    sections.push(s);

    let mut s = Section::new("Listeners (TFO queue max_qlen via getsockopt(TCP_FASTOPEN))");
    if r.listeners.is_empty() {
        s.item("no listening TCP sockets found");
    }
    for l in &r.listeners {
        let owner = match (&l.pid, &l.comm) {
            (Some(p), Some(c)) => format!("{c}[{p}]"),
            (Some(p), None) => format!("pid {p}"),
            _ => "owner unknown".into(),
        };
        let q = match &l.max_qlen {
            Ok(0) => "TFO off (max_qlen 0)".to_string(),
            Ok(q) => format!("TFO on, max_qlen {q}"),
            Err(e) => format!("max_qlen unknown ({e})"),
        };
        let smc = l.somaxconn.map(|s| format!(", somaxconn {s}")).unwrap_or_default();
        s.kv(format!("{} {}", l.namespace, l.addr), format!("{q}{smc}, {owner}"));
    }
    sections.push(s);

    let mut s = Section::new("Checks");
    for c in &r.checks {
        s.item(format!("[{}] {}: {}", if c.ok { "ok" } else { "!!" }, c.name, c.detail));
        s.line(c.advice.clone());
    }
    sections.push(s);
}

/// Gathers the report from the host's facts (see `kernel::host`).
pub fn collect() -> DoctorReport {
    let facts = HostFacts::collect();
    let checks = checks(&facts.namespaces, &facts.listeners, &facts.key_files);
    let program_types = facts
        .program_types
        .into_iter()
        .map(|support| ProgramTypeProbe { note: program_type_note(&support.name, &facts.facilities), support })
        .collect();
    let mut report = DoctorReport {
        kernel: facts.kernel,
        privileges: facts.privileges,
        facilities: facts.facilities,
        program_types,
        backends: Vec::new(),
        hook_points: facts.hook_points,
        namespaces: facts.namespaces,
        tcp_metrics: facts.tcp_metrics,
        listeners: facts.listeners,
        checks,
        advice: Vec::new(),
    };
    report.refresh_advice();
    report
}

/// Advice lines derived from a report (pure).
pub fn advice(r: &DoctorReport) -> Vec<String> {
    let mut a = Vec::new();

    if let Some(p) = &r.privileges.tracing_problem {
        a.push(p.clone());
    } else if let Some(p) = &r.privileges.sockops_problem {
        a.push(format!("{p} (only the sock_ops backend needs this)"));
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
    if let Some(t) = r.program_types.iter().map(|p| &p.support).find(|p| p.name == "tracing") {
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

    // Per-namespace findings, grouped so that one line names every namespace it applies to.
    #[derive(PartialEq)]
    enum Finding {
        ClientOff(u32),
        ServerOff(u32),
        BlackholeOff,
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
        match &ns.tcp_fastopen {
            Ok(v) => {
                if !v.client_enabled() {
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
        if let Ok(0) = &ns.blackhole_timeout_sec {
            add(Finding::BlackholeOff, &label);
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
                 since 5.14): if a middlebox drops SYN-data, every TFO connect pays a SYN retransmit \
                 (~1 s) instead of the kernel pausing active TFO"
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

// ---------------------------------------------------------------- text rendering

enum Row {
    Kv(String, String),
    /// A continuation line under the previous key (indented 4).
    Line(String),
    /// A line at key level (indented 2).
    Item(String),
}

struct Section {
    title: String,
    rows: Vec<Row>,
}

impl Section {
    fn new(title: impl Into<String>) -> Self {
        Section { title: title.into(), rows: Vec::new() }
    }
    fn kv(&mut self, k: impl Into<String>, v: impl Into<String>) {
        self.rows.push(Row::Kv(k.into(), v.into()));
    }
    fn line(&mut self, l: impl Into<String>) {
        self.rows.push(Row::Line(l.into()));
    }
    fn item(&mut self, l: impl Into<String>) {
        self.rows.push(Row::Item(l.into()));
    }
    fn write(&self, w: &mut impl Write) -> io::Result<()> {
        writeln!(w, "{}", self.title)?;
        let width = self
            .rows
            .iter()
            .filter_map(|r| match r {
                Row::Kv(k, _) => Some(k.chars().count() + 1),
                Row::Line(_) | Row::Item(_) => None,
            })
            .max()
            .unwrap_or(0);
        for r in &self.rows {
            match r {
                Row::Kv(k, v) => writeln!(w, "  {:<width$} {}", format!("{k}:"), v)?,
                Row::Line(l) => writeln!(w, "    {l}")?,
                Row::Item(l) => writeln!(w, "  {l}")?,
            }
        }
        writeln!(w)
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn opt_i32(v: Option<i32>) -> String {
    v.map_or_else(|| "unreadable".into(), |v| v.to_string())
}

/// Writes the report as aligned `key: value` lines under section headers. No colors.
pub fn render_text(r: &DoctorReport, w: &mut impl Write) -> io::Result<()> {
    let mut sections = Vec::new();

    let mut s = Section::new("Kernel");
    s.kv("release", &r.kernel.release);
    s.kv("version", &r.kernel.version);
    s.kv("machine", &r.kernel.machine);
    s.kv(
        "BTF",
        match r.kernel.btf_size {
            Some(n) if r.kernel.btf_vmlinux => format!("yes ({BTF_VMLINUX_PATH}, {n} bytes)"),
            _ => format!("no ({BTF_VMLINUX_PATH} missing)"),
        },
    );
    sections.push(s);

    let p = &r.privileges;
    let mut s = Section::new("Privileges");
    s.kv("euid", p.euid.to_string());
    s.kv("CapEff", p.cap_eff.clone().unwrap_or_else(|| "unreadable".into()));
    for c in &p.capabilities {
        s.kv(&c.name, yes_no(c.held));
    }
    s.kv("initial user namespace", p.initial_user_ns.map_or("unknown", yes_no));
    s.kv(
        "tracing programs",
        p.tracing_problem.as_deref().map_or("allowed".to_string(), |_| "NOT allowed (see advice)".into()),
    );
    s.kv(
        "sock_ops programs",
        p.sockops_problem.as_deref().map_or("allowed".to_string(), |_| "NOT allowed (see advice)".into()),
    );
    s.kv("perf_event_paranoid", opt_i32(p.perf_event_paranoid));
    s.kv("unprivileged_bpf_disabled", opt_i32(p.unprivileged_bpf_disabled));
    sections.push(s);

    let f = &r.facilities;
    let mut s = Section::new("Tracing facilities");
    s.kv(
        "kprobes",
        if f.kprobes {
            format!("yes ({})", kallsyms::KPROBE_PMU_PATH)
        } else {
            format!("no ({} missing: CONFIG_KPROBES off)", kallsyms::KPROBE_PMU_PATH)
        },
    );
    s.kv("tracefs", f.tracefs.clone().unwrap_or_else(|| "not mounted".into()));
    s.kv("bpffs", f.bpffs.clone().unwrap_or_else(|| "not mounted".into()));
    s.kv("cgroup v2", f.cgroup2.clone().unwrap_or_else(|| "not mounted".into()));
    s.kv(
        "ftrace function list",
        match &f.ftrace_functions_problem {
            None => "readable".to_string(),
            Some(p) => format!("unavailable ({p})"),
        },
    );
    sections.push(s);

    let mut s = Section::new("Program types (aya feature probe: load only, except tracing)");
    for t in &r.program_types {
        let p = &t.support;
        let mut v = match (p.supported, &p.error) {
            (Some(b), _) => yes_no(b).to_string(),
            (None, Some(e)) => format!("error: {e}"),
            (None, None) => "unknown".into(),
        };
        v.push_str(&format!("  [{}]", p.used_for));
        s.kv(&p.name, v);
        if let Some(n) = &t.note {
            s.line(format!("note: {n}"));
        }
    }
    sections.push(s);

    if !r.backends.is_empty() {
        let mut s = Section::new("Backends (load + attach, from the loader)");
        for b in &r.backends {
            let v = if b.loads {
                if b.reason.is_empty() {
                    "loads".to_string()
                } else {
                    format!("loads ({})", b.reason)
                }
            } else {
                format!("refused: {}", b.reason)
            };
            s.kv(&b.name, v);
            if !b.sees.is_empty() {
                s.line(format!("sees: {}", b.sees.join(", ")));
            }
            for blind in &b.blind {
                s.line(format!("not visible: {blind}"));
            }
        }
        sections.push(s);
    }

    let mut s = Section::new(format!("TFO hook points ({})", kallsyms::KALLSYMS_PATH));
    match &r.hook_points {
        Ok(points) => {
            for hp in points {
                let mut v = match hp.presence {
                    SymbolPresence::Present => match hp.symbol_type {
                        Some(t) => format!("present ({t})"),
                        None => "present".into(),
                    },
                    other => other.as_str().to_string(),
                };
                if !hp.clones.is_empty() {
                    v.push_str(&format!(", clones: {}", hp.clones.join(" ")));
                }
                match hp.ftrace_able {
                    Some(true) => v.push_str(", ftrace-able"),
                    Some(false) if hp.presence != SymbolPresence::Absent => v.push_str(", NOT ftrace-able"),
                    _ => {}
                }
                s.kv(&hp.name, v);
            }
            if let Some(p) = &r.facilities.ftrace_functions_problem {
                s.line(format!("(ftrace-ability not checked: {p})"));
            }
        }
        Err(e) => s.kv("error", e),
    }
    sections.push(s);

    for ns in &r.namespaces {
        let mut attrs = Vec::new();
        if ns.current {
            attrs.push("current".to_string());
        }
        if ns.init == Some(true) {
            attrs.push("init".to_string());
        }
        if let Some(i) = ns.inode {
            attrs.push(format!("inode {i}"));
        }
        attrs.push(ns.path.clone());
        let title = match &ns.name {
            Some(n) => format!("Network namespace {n} ({})", attrs.join(", ")),
            None => format!("Network namespace ({})", attrs.join(", ")),
        };
        let mut s = Section::new(title);
        match &ns.tcp_fastopen {
            Ok(v) => {
                s.kv("net.ipv4.tcp_fastopen", v.to_string());
                for l in v.describe() {
                    s.line(l);
                }
            }
            Err(e) => s.kv("net.ipv4.tcp_fastopen", format!("error: {e}")),
        }
        s.kv(
            "net.ipv4.tcp_fastopen_blackhole_timeout_sec",
            match &ns.blackhole_timeout_sec {
                Ok(0) => "0 (blackhole detection off)".to_string(),
                Ok(n) => format!("{n} (active TFO paused {n} s after a detected blackhole)"),
                Err(e) => format!("error: {e}"),
            },
        );
        s.kv(
            "net.ipv4.tcp_fastopen_key",
            match &ns.key {
                Ok(k) => format!(
                    "primary: {}, backup: {}",
                    if k.primary { "set" } else { "none (generated at the first TFO listen)" },
                    if k.backup { "set" } else { "none" }
                ),
                Err(e) => format!("unreadable: {e}"),
            },
        );
        sections.push(s);
    }

    render_tfo_state(r, &mut sections);

    let mut s = Section::new(format!(
        "Prometheus export (`tfo-trace export`, default {})",
        crate::cli::DEFAULT_EXPORT_LISTEN
    ));
    for (name, what) in crate::aggregation::metrics::EXPOSED {
        s.kv(*name, *what);
    }
    sections.push(s);

    let mut s = Section::new("Advice");
    for a in &r.advice {
        s.item(format!("- {a}"));
    }
    sections.push(s);

    for s in &sections {
        s.write(w)?;
    }
    Ok(())
}

/// Writes the report as pretty JSON followed by a newline.
pub fn render_json(r: &DoctorReport, w: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *w, r)?;
    writeln!(w)
}

/// The backends as the loader sees them: which load here, what each one sees and
/// what it cannot see (from the probe table), so `doctor` and the tracer never disagree.
fn backend_verdicts(can_load: bool) -> Vec<BackendVerdict> {
    use crate::{
        events::{Outcome, Role},
        probes::{self, table},
    };
    probes::verdicts(can_load)
        .into_iter()
        .map(|(backend, verdict)| {
            let mut sees = Vec::new();
            for role in [Role::Client, Role::Server] {
                for outcome in Outcome::ALL {
                    if table::sees(backend, role.to_wire(), outcome.to_wire()) {
                        sees.push(format!("{} {}", role.name(), outcome.name()));
                    }
                }
            }
            let blind: Vec<String> = table::blind_spots(backend)
                .iter()
                .map(|b| {
                    let role = Role::from_wire(b.role).map(Role::name).unwrap_or("?");
                    let name = Outcome::from_wire(b.outcome).map(Outcome::name).unwrap_or("?");
                    format!("{role} {name} ({})", b.why)
                })
                .collect();
            let (loads, reason) = match verdict {
                Ok(()) => (true, String::from("loads and attaches here")),
                Err(e) => (false, e),
            };
            BackendVerdict { name: backend.name().to_string(), loads, reason, sees, blind }
        })
        .collect()
}

/// `tfo-trace doctor`: always exits 0; what is missing becomes advice.
pub fn run(json: bool) -> anyhow::Result<()> {
    let mut report = collect();
    let can_load = crate::kernel::privileges::check_tracing_privileges().is_ok();
    report.backends = backend_verdicts(can_load);
    if let Some(chosen) = report.backends.iter().find(|b| b.loads) {
        let line = format!("auto would choose the {} backend", chosen.name);
        report.refresh_advice();
        report.advice.insert(0, line);
    } else {
        report.refresh_advice();
    }
    let mut out = io::stdout().lock();
    if json {
        render_json(&report, &mut out)?
    } else {
        render_text(&report, &mut out)?
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{
        netns,
        sysctl::{FastopenKeyStatus, TcpFastopen},
    };

    fn sample_report() -> DoctorReport {
        DoctorReport {
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
                sockops_problem: None,
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
            backends: vec![],
            hook_points: Ok(kallsyms::scan_kallsyms(
                "0 T tcp_connect\n",
                &["tcp_connect", "tcp_send_syn_data"],
            )),
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
                },
            ],
            tcp_metrics: vec![],
            listeners: vec![],
            checks: vec![],
            advice: vec![],
        }
    }

    #[test]
    fn advice_from_fixed_report() {
        let mut r = sample_report();
        r.refresh_advice();
        let all = r.advice.join("\n");
        assert!(all.contains("server bit 0x2 is off in namespace current"), "{all}");
        assert!(!all.contains("server bit 0x2 is off in namespace srv"), "{all}");
        assert!(!all.contains("client bit 0x1 is off"), "{all}");
        assert!(all.contains("kprobes are not available on this kernel (CONFIG_KPROBES off)"), "{all}");
        assert!(all.contains("blackhole detection is off in namespace current"), "{all}");
        assert!(!all.contains("blackhole detection is off in namespace srv"), "{all}");
        assert!(all.contains("tcp_send_syn_data not in kallsyms"), "{all}");
        assert!(all.contains("per network namespace"), "{all}");
        assert!(r.advice.iter().all(|l| !l.contains('\n')));

        r.namespaces[1].tcp_fastopen = Ok(TcpFastopen(0x600));
        r.refresh_advice();
        let all = r.advice.join("\n");
        assert!(all.contains("client bit 0x1 is off in namespace srv"), "{all}");
        assert!(all.contains("namespace srv: 0x200 (server without cookie) has no effect"), "{all}");
    }

    #[test]
    fn render_fixed_report_text_and_json() {
        let mut r = sample_report();
        r.backends.push(BackendVerdict {
            name: "fentry".into(),
            loads: false,
            reason: "BPF_PROG_LOAD: EPERM".into(),
            sees: vec![],
            blind: vec![],
        });
        r.refresh_advice();
        let mut out = Vec::new();
        render_text(&r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("Kernel\n  release: "), "{text}");
        assert!(
            text.contains(
                "\nBackends (load + attach, from the loader)\n  fentry: refused: BPF_PROG_LOAD: EPERM\n"
            ),
            "{text}"
        );
        assert!(text.contains("Network namespace srv (inode 2, /run/netns/srv)"), "{text}");
        assert!(text.contains("    0x400 server set   TFO_SERVER_WO_SOCKOPT1"), "{text}");
        assert!(text.contains("primary: set, backup: set"), "{text}");
        assert!(!text.contains('\x1b'));

        let mut out = Vec::new();
        render_json(&r, &mut out).unwrap();
        let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(j["namespaces"][1]["tcp_fastopen"]["value"], 0x403);
        assert_eq!(j["namespaces"][1]["key"]["backup"], true);
        assert_eq!(j["backends"][0]["name"], "fentry");
        assert_eq!(j["hook_points"][1]["presence"], "absent");
        r.namespaces[0].key = Err("permission denied".into());
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["namespaces"][0]["key"]["error"], "permission denied");
    }

    #[test]
    fn collect_on_this_machine() {
        let r = collect();
        let mut out = Vec::new();
        render_text(&r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        println!("{text}");
        assert!(text.starts_with("Kernel\n"));
        assert!(text.contains("\nPrivileges\n"));
        assert!(text.contains("\nTFO hook points (/proc/kallsyms)\n"));
        assert!(text.contains("\nAdvice\n"));
        assert!(!r.kernel.release.is_empty());
        assert_eq!(r.program_types.len(), 6);
        assert!(r.backends.is_empty());

        let cur = &r.namespaces[0];
        assert!(cur.current);
        let direct = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_fastopen").unwrap();
        assert_eq!(cur.tcp_fastopen.as_ref().unwrap().0, direct.trim().parse::<u32>().unwrap());
        assert!(text.contains("net.ipv4.tcp_fastopen:"));
        // Every named namespace is either the current one or listed.
        for n in netns::named_netns() {
            assert!(r.namespaces.iter().any(|x| x.inode == n.inode || x.name.as_deref() == Some(&n.name)));
        }
        let mut out = Vec::new();
        render_json(&r, &mut out).unwrap();
        let _: serde_json::Value = serde_json::from_slice(&out).unwrap();
    }
}
