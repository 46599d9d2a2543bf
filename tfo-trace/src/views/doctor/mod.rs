//! `tfo-trace doctor`: what this host can trace, and why TFO may not happen here.
//!
//! The facts come from their collectors (`kernel::host`, and the probe loader's verdict per
//! backend), the conclusions from `diagnosis`; this file only renders the
//! [`DoctorReport`]: aligned text, or JSON, the lessons said in `checks.rs`, the advice in
//! `advice.rs`. Doctor never fails on missing things: it reports them and advises.
mod advice;
mod checks;

use std::io::{self, Write};

use serde::Serialize;

use crate::{
    diagnosis::{self, DoctorReport},
    kernel::{
        host::HostFacts,
        kallsyms::{self, SymbolPresence},
        privileges,
        sysctl::TfoNamespace,
        uname::BTF_VMLINUX_PATH,
    },
    probes,
};

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
    let mut sections = vec![kernel(r), privileges(r), facilities(r), program_types(r)];
    sections.extend(backends(r));
    sections.push(hook_points(r));
    sections.extend(r.namespaces.iter().map(namespace));
    sections.extend([tcp_metrics(r), listeners(r), checks(r), export(), advice(r)]);
    for s in &sections {
        s.write(w)?;
    }
    Ok(())
}

/// Writes the report as pretty JSON followed by a newline.
pub fn render_json(r: &DoctorReport, w: &mut impl Write) -> io::Result<()> {
    /// The report with its lessons and its advice in words, last.
    #[derive(Serialize)]
    struct Json<'a> {
        #[serde(flatten)]
        report: &'a DoctorReport,
        checks: Vec<checks::Said>,
        advice: Vec<String>,
    }
    let json = Json {
        report: r,
        checks: r.checks.iter().map(checks::said).collect(),
        advice: r.advice.iter().map(advice::said).collect(),
    };
    serde_json::to_writer_pretty(&mut *w, &json)?;
    writeln!(w)
}

/// The running kernel, and whether it has BTF.
fn kernel(r: &DoctorReport) -> Section {
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
    s
}

/// Who runs doctor, and what that allows.
fn privileges(r: &DoctorReport) -> Section {
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
    s.kv("perf_event_paranoid", opt_i32(p.perf_event_paranoid));
    s.kv("unprivileged_bpf_disabled", opt_i32(p.unprivileged_bpf_disabled));
    s
}

/// kprobes, the file systems tracers use, the ftrace function list.
fn facilities(r: &DoctorReport) -> Section {
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
    s
}

/// aya's probe of each program type.
fn program_types(r: &DoctorReport) -> Section {
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
    s
}

/// Each backend as the loader tried it (none when the loader did not run).
fn backends(r: &DoctorReport) -> Option<Section> {
    if r.backends.is_empty() {
        return None;
    }
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
        if let Some(v) = &b.largest_verified {
            s.line(format!(
                "verifier: {} instructions walked for its largest program, {}, of the {} \
                 the kernel allows one",
                v.instructions,
                v.program,
                probes::VERIFIER_INSN_LIMIT
            ));
        }
        if !b.sees.is_empty() {
            s.line(format!("sees: {}", b.sees.join(", ")));
        }
        s.line(format!("a plain connection runs: {}", b.plain_connection));
        for blind in &b.blind {
            s.line(format!("not visible: {blind}"));
        }
    }
    Some(s)
}

/// The kernel functions TFO goes through, as kallsyms has them.
fn hook_points(r: &DoctorReport) -> Section {
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
    s
}

/// One network namespace's TFO sysctls.
fn namespace(ns: &TfoNamespace) -> Section {
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
    s
}

/// What each namespace's TFO cache holds per destination.
fn tcp_metrics(r: &DoctorReport) -> Section {
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
                        l.push_str(&format!(" (last {} ago)", crate::units::duration_s(a)));
                    }
                    if let Some(a) = m.age_s {
                        l.push_str(&format!(", updated {} ago", crate::units::duration_s(a)));
                    }
                    s.line(l);
                }
            }
            Err(e) => s.kv(&ns.namespace, format!("unreadable: {e}")),
        }
    }
    s
}

/// Listening sockets and their TFO queues.
fn listeners(r: &DoctorReport) -> Section {
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
    s
}

/// The lessons, each checked.
fn checks(r: &DoctorReport) -> Section {
    let mut s = Section::new("Checks");
    for c in r.checks.iter().map(checks::said) {
        s.item(format!("[{}] {}: {}", if c.ok { "ok" } else { "!!" }, c.name, c.detail));
        s.line(c.advice);
    }
    s
}

/// The metrics `export` serves.
fn export() -> Section {
    let mut s = Section::new(format!(
        "Prometheus export (`tfo-trace export`, default {})",
        crate::cli::DEFAULT_EXPORT_LISTEN
    ));
    for (name, what) in crate::aggregation::metrics::EXPOSED {
        s.kv(*name, *what);
    }
    s
}

/// What follows from all of the above.
fn advice(r: &DoctorReport) -> Section {
    let mut s = Section::new("Advice");
    for a in &r.advice {
        s.item(format!("- {}", advice::said(a)));
    }
    s
}

/// `tfo-trace doctor`: always exits 0; what is missing becomes advice. The loader tries
/// every backend for real only when the privileges allow it.
pub fn run(json: bool) -> anyhow::Result<()> {
    let can_load = privileges::check_tracing_privileges().is_ok();
    let report = diagnosis::diagnose(HostFacts::collect(), probes::verdicts(can_load));
    let mut out = io::stdout().lock();
    crate::live::output::stdout_written(if json {
        render_json(&report, &mut out)
    } else {
        render_text(&report, &mut out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{diagnosis::sample_facts, kernel::sysctl::TcpFastopen};

    #[test]
    fn render_fixed_report_text_and_json() {
        let loader = vec![(probes::Backend::Fentry, Err("BPF_PROG_LOAD: EPERM".to_string()))];
        let mut r = diagnosis::diagnose(sample_facts(), loader);
        r.backends[0].sees.clear();
        r.backends[0].blind.clear();
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
        assert!(text.contains("\nChecks\n  [!!] sysctl per namespace: net.ipv4.tcp_fastopen is 0x1 in current, 0x403 in srv\n"), "{text}");
        assert!(!text.contains('\x1b'));

        let mut out = Vec::new();
        render_json(&r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let j: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(j["namespaces"][1]["tcp_fastopen"]["value"], 0x403);
        assert_eq!(j["namespaces"][1]["key"]["backup"], true);
        assert_eq!(j["backends"][0]["name"], "fentry");
        assert_eq!(j["hook_points"][1]["presence"], "absent");
        // Each lesson in the view's words.
        assert_eq!(j["checks"][0]["name"], "sysctl per namespace");
        assert_eq!(j["checks"][0]["ok"], false);
        assert_eq!(j["checks"][0]["detail"], "net.ipv4.tcp_fastopen is 0x1 in current, 0x403 in srv");
        assert!(j["checks"][5]["advice"].as_str().is_some_and(|a| a.starts_with("with tcp_syncookies=2")));
        // Top-level keys in the order printed (pretty JSON indents them by two spaces).
        let keys: Vec<&str> =
            text.lines().filter_map(|l| l.strip_prefix("  \"")?.split('"').next()).collect();
        assert_eq!(
            keys,
            [
                "kernel",
                "privileges",
                "facilities",
                "program_types",
                "backends",
                "hook_points",
                "namespaces",
                "tcp_metrics",
                "listeners",
                "checks",
                "advice"
            ],
            "the JSON contract's order"
        );
        r.namespaces[0].key = Err("permission denied".into());
        r.namespaces[1].tcp_fastopen = Ok(TcpFastopen(0x3));
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["namespaces"][0]["key"]["error"], "permission denied");
    }

    #[test]
    fn doctor_on_this_machine() {
        let r = diagnosis::diagnose(HostFacts::collect(), probes::verdicts(false));
        let mut out = Vec::new();
        render_text(&r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        #[allow(clippy::print_stdout)] // the test's own output, shown when it fails
        {
            println!("{text}");
        }
        assert!(text.starts_with("Kernel\n"));
        assert!(text.contains("\nPrivileges\n"));
        assert!(text.contains("\nTFO hook points (/proc/kallsyms)\n"));
        assert!(text.contains("\nAdvice\n"));
        assert!(!r.kernel.release.is_empty());
        assert_eq!(r.program_types.len(), 3, "tracing, raw_tracepoint, kprobe: what the backends use");
        assert!(r.backends.iter().all(|b| !b.loads), "nothing loaded without trying");

        let cur = &r.namespaces[0];
        assert!(cur.current);
        let direct = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_fastopen").unwrap();
        assert_eq!(cur.tcp_fastopen.as_ref().unwrap().0, direct.trim().parse::<u32>().unwrap());
        assert!(text.contains("net.ipv4.tcp_fastopen:"));
        // Every named namespace is either the current one or listed.
        for n in crate::kernel::netns::named_netns() {
            assert!(r.namespaces.iter().any(|x| x.inode == n.inode || x.name.as_deref() == Some(&n.name)));
        }
        let mut out = Vec::new();
        render_json(&r, &mut out).unwrap();
        let _: serde_json::Value = serde_json::from_slice(&out).unwrap();
    }
}
