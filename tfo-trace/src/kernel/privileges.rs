//! Does this process hold the capabilities that loading and attaching eBPF programs needs?
//!
//! Kernel rules (kernel/bpf/syscall.c, include/linux/capability.h), Linux >= 5.8:
//! - loading any program type we use: `bpf_capable()` = CAP_BPF or CAP_SYS_ADMIN;
//! - tracing types (tracepoint, raw tracepoint, tp_btf/fentry, kprobe) and reading kernel memory:
//!   `perfmon_capable()` = CAP_PERFMON or CAP_SYS_ADMIN;
//! - (networking types and attaching to a cgroup would need `bpf_net_capable()` =
//!   CAP_NET_ADMIN or CAP_SYS_ADMIN; no backend uses them.)
//!
//! Before 5.8 neither CAP_BPF nor CAP_PERFMON exists and CAP_SYS_ADMIN is needed: CAP_SYS_ADMIN
//! alone is therefore always enough. Capabilities only count in the initial user namespace.

use std::io;

pub(crate) const CAP_NET_ADMIN: u32 = 12;
pub(crate) const CAP_SYS_ADMIN: u32 = 21;
pub(crate) const CAP_PERFMON: u32 = 38;
pub(crate) const CAP_BPF: u32 = 39;

/// The capabilities tfo-trace cares about, in the order they are reported.
pub(crate) const RELEVANT_CAPS: [u32; 4] = [CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, CAP_NET_ADMIN];

/// The setcap line that grants exactly `caps`.
fn setcap_hint(caps: &[u32]) -> String {
    let names: Vec<String> = caps.iter().map(|&c| cap_name(c).to_lowercase()).collect();
    format!("run it with sudo, or `sudo setcap {}+ep $(command -v tfo-trace)`", names.join(","))
}

/// Kernel name of a capability we report (`CAP_<n>` for others).
pub(crate) fn cap_name(cap: u32) -> String {
    match cap {
        CAP_NET_ADMIN => "CAP_NET_ADMIN".into(),
        CAP_SYS_ADMIN => "CAP_SYS_ADMIN".into(),
        CAP_PERFMON => "CAP_PERFMON".into(),
        CAP_BPF => "CAP_BPF".into(),
        n => format!("CAP_{n}"),
    }
}

/// A capability bit set, as in the `Cap*` lines of /proc/PID/status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) struct CapSet(pub u64);

impl CapSet {
    pub(crate) fn has(self, cap: u32) -> bool {
        cap < 64 && self.0 & (1u64 << cap) != 0
    }
    /// Which of [`RELEVANT_CAPS`] are held, as (name, held).
    pub(crate) fn relevant(self) -> Vec<(String, bool)> {
        RELEVANT_CAPS.iter().map(|&c| (cap_name(c), self.has(c))).collect()
    }
}

/// Parses the `CapEff:` line of a /proc/PID/status text (16 hex digits).
pub(crate) fn parse_cap_eff(status: &str) -> Result<CapSet, String> {
    parse_cap_line(status, "CapEff")
}

/// Parses any `Cap*:` line (CapPrm, CapBnd, ...) of a /proc/PID/status text.
pub(crate) fn parse_cap_line(status: &str, field: &str) -> Result<CapSet, String> {
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(field).and_then(|r| r.strip_prefix(':')))
        .ok_or_else(|| format!("no {field} line in /proc/self/status"))?;
    let hex = line.trim();
    u64::from_str_radix(hex, 16).map(CapSet).map_err(|e| format!("{field}: cannot parse {hex:?}: {e}"))
}

/// Effective capabilities of this process.
pub(crate) fn effective_caps() -> io::Result<CapSet> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    parse_cap_eff(&status).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Whether a /proc/PID/uid_map text is the initial user namespace's identity map.
pub(crate) fn is_identity_uid_map(uid_map: &str) -> bool {
    let fields: Vec<&str> = uid_map.split_whitespace().collect();
    fields == ["0", "0", "4294967295"]
}

/// Whether we appear to run in the initial user namespace (None: cannot tell).
/// Inside a user namespace (rootless containers) capabilities do not let us load BPF programs.
pub(crate) fn in_initial_user_ns() -> Option<bool> {
    std::fs::read_to_string("/proc/self/uid_map").ok().map(|m| is_identity_uid_map(&m))
}

/// `missing`: what this process lacks; `needed`: what the rule asks for (the setcap line).
fn missing_message(missing: &[u32], needed: &[u32], what: &str) -> String {
    let names: Vec<String> = missing.iter().map(|&c| cap_name(c)).collect();
    format!("tfo-trace needs {} (or root) to {what}: {}", names.join(" and "), setcap_hint(needed))
}

/// The rule for tracing programs (tracepoints, raw tracepoints, tp_btf, fentry, kprobes):
/// CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN alone. `initial_user_ns`: see [`in_initial_user_ns`].
/// On failure, returns one actionable line.
pub(crate) fn tracing_rule(caps: CapSet, initial_user_ns: Option<bool>) -> Result<(), String> {
    if initial_user_ns == Some(false) {
        return Err("tfo-trace runs inside a user namespace (a rootless container?), where capabilities \
                    do not allow loading eBPF programs: run it on the host with sudo, or in a privileged container"
            .into());
    }
    if caps.has(CAP_SYS_ADMIN) || (caps.has(CAP_BPF) && caps.has(CAP_PERFMON)) {
        return Ok(());
    }
    let missing: Vec<u32> = [CAP_BPF, CAP_PERFMON].into_iter().filter(|&c| !caps.has(c)).collect();
    Err(missing_message(&missing, &[CAP_BPF, CAP_PERFMON], "load its eBPF programs"))
}

/// Checks this process against [`tracing_rule`]; Err is one line to show the user.
pub(crate) fn check_tracing_privileges() -> Result<(), String> {
    let caps =
        effective_caps().map_err(|e| format!("cannot read capabilities from /proc/self/status: {e}"))?;
    tracing_rule(caps, in_initial_user_ns())
}

/// A capability and whether this process holds it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CapHeld {
    pub name: String,
    pub held: bool,
}

/// This process's privileges as `doctor` shows them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PrivilegeInfo {
    pub euid: u32,
    /// CapEff as hex, None when /proc/self/status could not be read.
    pub cap_eff: Option<String>,
    pub capabilities: Vec<CapHeld>,
    pub initial_user_ns: Option<bool>,
    /// Result of [`tracing_rule`]: None when allowed, else the one-line hint.
    pub tracing_problem: Option<String>,
    pub perf_event_paranoid: Option<i32>,
    pub unprivileged_bpf_disabled: Option<i32>,
}

fn read_i32(path: &str) -> Option<i32> {
    crate::kernel::sysctl::read_sysctl(path).ok()?.parse().ok()
}

impl PrivilegeInfo {
    pub fn collect() -> PrivilegeInfo {
        let caps = effective_caps().ok();
        let userns = in_initial_user_ns();
        let c = caps.unwrap_or(CapSet(0));
        PrivilegeInfo {
            // SAFETY: geteuid cannot fail.
            euid: unsafe { libc::geteuid() },
            cap_eff: caps.map(|c| format!("{:016x}", c.0)),
            capabilities: c.relevant().into_iter().map(|(name, held)| CapHeld { name, held }).collect(),
            initial_user_ns: userns,
            tracing_problem: match caps {
                Some(c) => tracing_rule(c, userns).err(),
                None => check_tracing_privileges().err(),
            },
            perf_event_paranoid: read_i32("/proc/sys/kernel/perf_event_paranoid"),
            unprivileged_bpf_disabled: read_i32("/proc/sys/kernel/unprivileged_bpf_disabled"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT_STATUS: &str = "Name:\tcat\nUmask:\t0022\nState:\tR (running)\n\
        CapInh:\t0000000000000000\nCapPrm:\t000001fffeffffff\nCapEff:\t000001fffeffffff\n\
        CapBnd:\t000001fffeffffff\nCapAmb:\t0000000000000000\nNoNewPrivs:\t0\n";
    const USER_STATUS: &str = "Name:\tcat\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
        CapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\n";

    fn caps(list: &[u32]) -> CapSet {
        CapSet(list.iter().fold(0, |a, &c| a | (1u64 << c)))
    }

    #[test]
    fn parse_cap_eff_lines() {
        let root = parse_cap_eff(ROOT_STATUS).unwrap();
        assert_eq!(root, CapSet(0x1fffeffffff));
        for c in RELEVANT_CAPS {
            assert!(root.has(c), "{}", cap_name(c));
        }
        assert!(!root.has(24)); // CAP_SYS_RESOURCE is missing from that mask
        assert_eq!(parse_cap_eff(USER_STATUS).unwrap(), CapSet(0));
        assert_eq!(parse_cap_line(USER_STATUS, "CapBnd").unwrap(), CapSet(0x1ffffffffff));
        assert!(parse_cap_eff("Name:\tx\n").is_err());
        assert!(parse_cap_eff("CapEff:\tzz\n").is_err());
        // CapEffX must not match CapEff
        assert!(parse_cap_eff("CapEffX:\t1\n").is_err());
        assert!(!CapSet(u64::MAX).has(64));
    }

    #[test]
    fn tracing_rule_fixed_inputs() {
        assert!(tracing_rule(caps(&[CAP_BPF, CAP_PERFMON]), Some(true)).is_ok());
        assert!(tracing_rule(caps(&[CAP_SYS_ADMIN]), Some(true)).is_ok());
        assert!(tracing_rule(caps(&[CAP_SYS_ADMIN]), None).is_ok());
        assert!(tracing_rule(CapSet(0x1fffeffffff), Some(true)).is_ok());

        let e = tracing_rule(CapSet(0), Some(true)).unwrap_err();
        assert!(e.starts_with("tfo-trace needs CAP_BPF and CAP_PERFMON (or root) to load its eBPF programs: run it with sudo, or `sudo setcap cap_bpf,cap_perfmon+ep $(command -v tfo-trace)`"), "{e}");
        assert!(!e.contains('\n'));
        let e = tracing_rule(caps(&[CAP_BPF, CAP_NET_ADMIN]), Some(true)).unwrap_err();
        assert!(e.starts_with("tfo-trace needs CAP_PERFMON (or root)"), "{e}");
        let e = tracing_rule(caps(&[CAP_PERFMON]), Some(true)).unwrap_err();
        assert!(e.starts_with("tfo-trace needs CAP_BPF (or root)"), "{e}");

        // Capabilities inside a user namespace do not count.
        let e = tracing_rule(CapSet(u64::MAX >> 23), Some(false)).unwrap_err();
        assert!(e.contains("user namespace"), "{e}");
    }

    #[test]
    fn uid_map() {
        assert!(is_identity_uid_map("         0          0 4294967295\n"));
        assert!(!is_identity_uid_map("         0       1000          1\n"));
        assert!(!is_identity_uid_map(""));
    }

    /// Whether the kernel lets this process load a tracing program: the smallest
    /// BPF_PROG_TYPE_TRACEPOINT one (`r0 = 0; exit`). bpf_prog_load() (kernel/bpf/syscall.c,
    /// 6.12) refuses it with EPERM without bpf_capable() (CAP_BPF or CAP_SYS_ADMIN) or,
    /// a perfmon program type, without perfmon_capable() (CAP_PERFMON or CAP_SYS_ADMIN),
    /// and in a user namespace other than the initial one. None where bpf(2) is missing.
    fn kernel_loads_a_tracing_program() -> Option<bool> {
        #[repr(C)]
        struct ProgLoad {
            prog_type: u32,
            insn_cnt: u32,
            insns: u64,
            license: u64,
            log_level: u32,
            log_size: u32,
            log_buf: u64,
            kern_version: u32,
            prog_flags: u32,
        }
        const BPF_PROG_LOAD: libc::c_long = 5;
        const BPF_PROG_TYPE_TRACEPOINT: u32 = 5;
        // mov64 r0, 0 (BPF_ALU64 | BPF_MOV | BPF_K); exit (BPF_JMP | BPF_EXIT).
        let insns: [u8; 16] = [0xb7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
        let license = b"GPL\0";
        let attr = ProgLoad {
            prog_type: BPF_PROG_TYPE_TRACEPOINT,
            insn_cnt: 2,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: 0,
            log_size: 0,
            log_buf: 0,
            kern_version: 0,
            prog_flags: 0,
        };
        // SAFETY: attr is a prefix of union bpf_attr's BPF_PROG_LOAD member of the size
        // passed (the kernel zero-fills the rest), its pointers at live buffers.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_LOAD,
                &attr as *const ProgLoad,
                std::mem::size_of::<ProgLoad>(),
            )
        };
        if fd >= 0 {
            // SAFETY: the kernel just returned this fd to us.
            unsafe { libc::close(fd as i32) };
            return Some(true);
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EPERM) => Some(false),
            Some(libc::ENOSYS) => None,
            e => panic!("BPF_PROG_LOAD of two instructions: errno {e:?}"),
        }
    }

    /// What says whether this process may trace, against the kernel's own answer: a
    /// tracing program loaded or refused. As root, again in children whose capabilities
    /// are cut to each set that decides it (setpriv's bounding set: root's effective set
    /// after exec), so that every branch of the rule meets the kernel.
    #[test]
    #[allow(clippy::print_stderr)] // what was compared, in the test's output (and the children's)
    fn this_process() {
        const CHILD: &str = "TFO_PRIVILEGES_TEST_CHILD";
        let Some(kernel) = kernel_loads_a_tracing_program() else {
            eprintln!("this_process: no bpf(2) here: nothing to compare with");
            return;
        };
        let verdict = check_tracing_privileges();
        let caps = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let cap_eff = caps.lines().find(|l| l.starts_with("CapEff:")).unwrap_or("CapEff: ?").to_string();
        eprintln!("this_process: {cap_eff}; the kernel loads a tracing program: {kernel}; tfo-trace says {verdict:?}");
        assert_eq!(verdict.is_ok(), kernel, "{cap_eff}: tfo-trace says {verdict:?}, the kernel {kernel}");
        // SAFETY: geteuid has no preconditions.
        if std::env::var_os(CHILD).is_some() || unsafe { libc::geteuid() } != 0 {
            return;
        }
        let Some(setpriv) =
            ["/usr/bin/setpriv", "/bin/setpriv"].into_iter().find(|p| std::path::Path::new(p).exists())
        else {
            eprintln!(
                "this_process: no setpriv (util-linux): the children with fewer capabilities are not run"
            );
            return;
        };
        let me = std::env::current_exe().unwrap();
        for set in ["+bpf,+perfmon", "+sys_admin", "+bpf", "+perfmon", "+bpf,+net_admin", "-all"] {
            let bounding = if set == "-all" { set.to_string() } else { format!("-all,{set}") };
            let out = std::process::Command::new(setpriv)
                .args([&format!("--bounding-set={bounding}"), "--inh-caps=-all", "--"])
                .arg(&me)
                .args([
                    "--exact",
                    "kernel::privileges::tests::this_process",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let said =
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "capabilities {set}: {said}");
            assert!(
                said.contains("this_process: CapEff") && said.contains("1 passed"),
                "capabilities {set}: {said}"
            );
        }
    }
}
