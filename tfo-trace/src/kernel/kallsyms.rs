//! Which TFO-related kernel functions exist as symbols, and which tracing facilities exist at all.
//!
//! /proc/kallsyms lists every (non-inlined) function; non-root readers see zero addresses but the
//! names are still there, which is all this module uses. A name only found with a compiler
//! suffix (`tcp_foo.isra.0`, `.constprop.0`, `.part.0`, `.cold`, `.llvm.NNN`) is a clone: the
//! code exists but a kprobe/fentry by the plain name cannot attach to it.

use std::{
    collections::HashMap,
    io,
    path::{Path, PathBuf},
};

pub(crate) const KALLSYMS_PATH: &str = "/proc/kallsyms";
/// Present only when the kernel has CONFIG_KPROBES (and kprobe events).
pub(crate) const KPROBE_PMU_PATH: &str = "/sys/bus/event_source/devices/kprobe";

/// The kernel functions where TFO work happens (6.1 .. 6.18), the first eight exported or at least
/// global; the others are static and often inlined.
pub(crate) const TFO_FUNCTIONS: [&str; 12] = [
    "tcp_try_fastopen",
    "tcp_fastopen_cookie_check",
    "tcp_fastopen_defer_connect",
    "tcp_fastopen_cache_set",
    "tcp_fastopen_active_disable",
    "tcp_fastopen_active_detect_blackhole",
    "tcp_connect",
    "tcp_retransmit_skb",
    "tcp_send_syn_data",
    "tcp_rcv_fastopen_synack",
    "tcp_fastopen_queue_check",
    "tcp_rcv_synsent_state_process",
];

/// How a function shows up in /proc/kallsyms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SymbolPresence {
    /// The exact name is a symbol: attachable by name (if not blacklisted / notrace).
    Present,
    /// Only compiler clones (`name.isra.0`, ...) exist: not attachable by the plain name.
    CloneOnly,
    /// No symbol: static and inlined into its callers, or not built.
    Absent,
}

impl SymbolPresence {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SymbolPresence::Present => "present",
            SymbolPresence::CloneOnly => "present as a compiler clone, not attachable by name",
            SymbolPresence::Absent => "absent (static and inlined, or not built)",
        }
    }
}

/// One function looked up in kallsyms.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct HookPoint {
    pub name: String,
    pub presence: SymbolPresence,
    /// kallsyms type letter of the exact symbol (`T` global, `t` local).
    pub symbol_type: Option<char>,
    /// Clone names (`tcp_foo.isra.0`), whether or not the exact name exists too.
    pub clones: Vec<String>,
    /// Listed in tracefs `available_filter_functions` (ftrace can patch it: kprobe/fentry
    /// attach works). None when tracefs is not mounted or not readable.
    pub ftrace_able: Option<bool>,
}

/// Pure scan of kallsyms text for `names`. Result in the order of `names`.
pub(crate) fn scan_kallsyms(text: &str, names: &[&str]) -> Vec<HookPoint> {
    let mut found: HashMap<&str, HookPoint> = names
        .iter()
        .map(|&n| {
            (
                n,
                HookPoint {
                    name: n.to_string(),
                    presence: SymbolPresence::Absent,
                    symbol_type: None,
                    clones: Vec::new(),
                    ftrace_able: None,
                },
            )
        })
        .collect();
    for line in text.lines() {
        // "ffffffff8209ac40 T tcp_try_fastopen" or "... t foo\t[module]"
        let mut it = line.split_whitespace();
        let (Some(_addr), Some(ty), Some(sym)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let (base, is_clone) = match sym.split_once('.') {
            Some((base, _suffix)) => (base, true),
            None => (sym, false),
        };
        if let Some(hp) = found.get_mut(base) {
            if is_clone {
                if !hp.clones.iter().any(|c| c == sym) {
                    hp.clones.push(sym.to_string());
                }
                if hp.presence == SymbolPresence::Absent {
                    hp.presence = SymbolPresence::CloneOnly;
                }
            } else {
                hp.presence = SymbolPresence::Present;
                hp.symbol_type = ty.chars().next();
            }
        }
    }
    names.iter().map(|n| found.remove(n).unwrap()).collect()
}

/// Marks which hook points ftrace can patch, from the text of tracefs `available_filter_functions`
/// (lines `name` or `name [module]`).
pub(crate) fn mark_ftrace_able(points: &mut [HookPoint], available_filter_functions: &str) {
    let listed: std::collections::HashSet<&str> =
        available_filter_functions.lines().filter_map(|l| l.split_whitespace().next()).collect();
    for p in points {
        p.ftrace_able = Some(listed.contains(p.name.as_str()));
    }
}

/// Text of tracefs `available_filter_functions`. Err says why not: tracefs not mounted, or the
/// read refused (on the 6.18 host even root gets EPERM here, as for fentry).
pub(crate) fn available_filter_functions() -> Result<String, String> {
    let tracefs = tracefs_mount().ok_or_else(|| "tracefs not mounted".to_string())?;
    let path = tracefs.join("available_filter_functions");
    std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Looks up [`TFO_FUNCTIONS`] in /proc/kallsyms, and in tracefs `available_filter_functions`
/// when that is readable (else `ftrace_able` stays None).
pub(crate) fn tfo_hook_points() -> io::Result<Vec<HookPoint>> {
    let text = std::fs::read_to_string(KALLSYMS_PATH)?;
    let mut points = scan_kallsyms(&text, &TFO_FUNCTIONS);
    if let Ok(aff) = available_filter_functions() {
        mark_ftrace_able(&mut points, &aff);
    }
    Ok(points)
}

/// Whether the kernel has kprobes at all (the `kprobe` perf PMU exists).
pub(crate) fn kprobes_available() -> bool {
    Path::new(KPROBE_PMU_PATH).exists()
}

/// Mount points of file systems of type `fstype` in a /proc/mounts text (octal escapes decoded).
pub(crate) fn mounts_of_type(mounts: &str, fstype: &str) -> Vec<PathBuf> {
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_dev, dir, ty) = (f.next()?, f.next()?, f.next()?);
            (ty == fstype).then(|| PathBuf::from(unescape_mount(dir)))
        })
        .collect()
}

fn unescape_mount(s: &str) -> String {
    // /proc/mounts writes space, tab, newline and backslash as \040 \011 \012 \134.
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where a file system of `fstype` is mounted, its canonical place first (None: not mounted).
pub(crate) fn first_mount_of_type(fstype: &str) -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let all = mounts_of_type(&mounts, fstype);
    // Prefer the canonical places.
    let preferred = match fstype {
        "tracefs" => ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"].as_slice(),
        "bpf" => ["/sys/fs/bpf"].as_slice(),
        "cgroup2" => ["/sys/fs/cgroup"].as_slice(),
        _ => [].as_slice(),
    };
    preferred.iter().map(PathBuf::from).find(|p| all.contains(p)).or_else(|| all.into_iter().next())
}

/// Where tracefs is mounted (None: not mounted).
pub(crate) fn tracefs_mount() -> Option<PathBuf> {
    first_mount_of_type("tracefs")
}

/// Where bpffs is mounted (None: not mounted).
pub(crate) fn bpffs_mount() -> Option<PathBuf> {
    first_mount_of_type("bpf")
}

/// The tracing facilities this kernel and host have, as `doctor` shows them.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct TracingFacilities {
    /// The kprobe PMU exists (CONFIG_KPROBES).
    pub kprobes: bool,
    pub tracefs: Option<String>,
    pub bpffs: Option<String>,
    pub cgroup2: Option<String>,
    /// None when tracefs `available_filter_functions` was read (hook points then carry
    /// `ftrace_able`); else why not.
    pub ftrace_functions_problem: Option<String>,
}

impl TracingFacilities {
    pub(crate) fn collect() -> TracingFacilities {
        let s = |p: Option<PathBuf>| p.map(|p| p.display().to_string());
        TracingFacilities {
            kprobes: kprobes_available(),
            tracefs: s(tracefs_mount()),
            bpffs: s(bpffs_mount()),
            cgroup2: s(first_mount_of_type("cgroup2")),
            ftrace_functions_problem: available_filter_functions().err(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
0000000000000000 T tcp_try_fastopen
0000000000000000 t __pfx_tcp_fastopen_add_skb.part.0
0000000000000000 t tcp_fastopen_add_skb.part.0
0000000000000000 T tcp_fastopen_add_skb
0000000000000000 t tcp_rcv_synsent_state_process.isra.0
0000000000000000 t tcp_rcv_synsent_state_process.constprop.0
0000000000000000 T tcp_connect_init_extra
0000000000000000 t tcp_connect\t[some_module]
0000000000000000 T tcp_retransmit_skb
0000000000000000 T tcp_retransmit_skb
garbage
";

    #[test]
    fn scan_exact_clone_absent() {
        let names = [
            "tcp_try_fastopen",
            "tcp_fastopen_add_skb",
            "tcp_rcv_synsent_state_process",
            "tcp_connect",
            "tcp_send_syn_data",
            "tcp_retransmit_skb",
        ];
        let r = scan_kallsyms(SAMPLE, &names);
        assert_eq!(r.len(), names.len());
        assert_eq!(r[0].presence, SymbolPresence::Present);
        assert_eq!(r[0].symbol_type, Some('T'));
        // exact + clone: present, clone listed; __pfx_ padding symbol ignored
        assert_eq!(r[1].presence, SymbolPresence::Present);
        assert_eq!(r[1].clones, vec!["tcp_fastopen_add_skb.part.0"]);
        assert_eq!(r[2].presence, SymbolPresence::CloneOnly);
        assert_eq!(r[2].clones.len(), 2);
        assert_eq!(r[2].symbol_type, None);
        // prefix match must not count: tcp_connect_init_extra is not tcp_connect
        assert_eq!(r[3].presence, SymbolPresence::Present);
        assert_eq!(r[3].symbol_type, Some('t'));
        assert_eq!(r[4].presence, SymbolPresence::Absent);
        assert!(r[4].clones.is_empty());
        assert_eq!(r[5].presence, SymbolPresence::Present);
        let r = scan_kallsyms("0 T tcp_connect_init\n", &["tcp_connect"]);
        assert_eq!(r[0].presence, SymbolPresence::Absent);
    }

    #[test]
    fn ftrace_marks() {
        let mut r = scan_kallsyms(SAMPLE, &["tcp_try_fastopen", "tcp_connect"]);
        mark_ftrace_able(&mut r, "tcp_try_fastopen\nfoo [bar]\n");
        assert_eq!(r[0].ftrace_able, Some(true));
        assert_eq!(r[1].ftrace_able, Some(false));
    }

    #[test]
    fn mounts_parse() {
        let m = "proc /proc proc rw 0 0\n\
                 tracefs /sys/kernel/tracing tracefs rw,nosuid 0 0\n\
                 bpf /sys/fs/bpf bpf rw 0 0\n\
                 tracefs /tmp/with\\040space tracefs rw 0 0\n\
                 cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(
            mounts_of_type(m, "tracefs"),
            vec![PathBuf::from("/sys/kernel/tracing"), PathBuf::from("/tmp/with space")]
        );
        assert_eq!(mounts_of_type(m, "bpf"), vec![PathBuf::from("/sys/fs/bpf")]);
        assert_eq!(mounts_of_type(m, "cgroup2"), vec![PathBuf::from("/sys/fs/cgroup/unified")]);
        assert!(mounts_of_type(m, "debugfs").is_empty());
    }

    #[test]
    fn this_kernel() {
        // tcp_connect exists as a global function on every kernel tfo-trace supports.
        let points = tfo_hook_points().unwrap();
        assert_eq!(points.len(), TFO_FUNCTIONS.len());
        let c = points.iter().find(|p| p.name == "tcp_connect").unwrap();
        assert_eq!(c.presence, SymbolPresence::Present);
        let _ = kprobes_available();
    }
}
