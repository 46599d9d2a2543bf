//! The skips a run may report, on the host (`cargo xtask test`) and in each VM cell: one
//! table, each entry with why.
//!
//! A test that says it cannot run somewhere, wholly (`ignored (REASON)`) or in part (the
//! harness's `partial: NAME: REASON`), is either a known fact of that machine, kernel or
//! backend, listed here, or a regression: a package set-up should have installed (`ip`,
//! `tcpdump`, `nft`, bpftool, dockerd), a kernel without BTF, a run without root
//! (`require_kernel!`), a module that did not load (netem in a VM), a backend that lost a
//! hook. A skip not on this list fails its VM cell, and on the host fails the test
//! command. Inside a guest the tests have all they need (root, BTF, the lab's modules, the
//! host's `ip`, `tc`, `nft`, `nstat`, `tcpdump` and dnsmasq); on the host, an entry that
//! rests on a fact of the machine (no netem in its kernel, no systemd as init) holds only
//! where xtask finds that fact itself ([`AllowedSkip::host_fact`]), not on the test's word.

/// Where a skip was reported.
#[derive(Clone, Copy, Debug)]
pub enum Place<'a> {
    /// The host run of `cargo xtask test` (its backend is `auto`'s: tracepoint on this
    /// project's host).
    Host,
    /// A VM cell: its kernel label (`5.10`, `5.10-arm64`) and its name (a backend, or
    /// `lab`).
    Vm { kernel: &'a str, cell: &'a str },
}

/// One kind of skip a run may report.
#[derive(Debug)]
pub struct AllowedSkip {
    /// [`HOST`] and VM kernel series (`5.10`, as `--kernel` takes it, any architecture);
    /// empty: the host and every VM kernel.
    pub places: &'static [&'static str],
    /// VM cells (backends, or `lab`); empty: every one. The host run has no cell: where
    /// the backend matters, the reason names it.
    pub cells: &'static [&'static str],
    /// `module::test`, the test's name in the integration executable (a prefix: `module::`
    /// for every test of it); empty: any test.
    pub test: &'static str,
    /// A part of the reason the test gives.
    pub reason: &'static str,
    /// On the host, the fact of the machine the skip rests on, checked here: the entry
    /// allows the skip only where it holds. None: the reason alone.
    pub host_fact: Option<HostFact>,
    /// Why that cannot run there.
    pub why: &'static str,
}

/// A fact of the host machine an entry rests on: what it is, and whether it holds here.
#[derive(Debug)]
pub struct HostFact {
    pub what: &'static str,
    pub holds: fn() -> bool,
}

/// [`AllowedSkip::places`]: the host run.
pub const HOST: &str = "host";

/// The tracepoint backends, blind to the outcomes decided where no socket changes state.
const TRACEPOINT_BACKENDS: &[&str] = &["tracepoint", "raw-tracepoint"];

/// The running kernel's configuration (/proc/config.gz, else /boot/config-RELEASE) says
/// `# CONFIG_NET_SCH_NETEM is not set`: netem is neither built in nor a module.
fn kernel_has_no_netem() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let config = std::process::Command::new("zcat")
        .arg("/proc/config.gz")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .or_else(|| std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok())
        .unwrap_or_default();
    config.lines().any(|l| l.trim() == "# CONFIG_NET_SCH_NETEM is not set")
}

/// pid 1 is not systemd (systemd makes /run/systemd/system at boot: sd_booted(3)).
fn init_is_not_systemd() -> bool {
    !std::path::Path::new("/run/systemd/system").is_dir()
}

pub const ALLOWED_SKIPS: &[AllowedSkip] = &[
    AllowedSkip {
        places: &[],
        cells: &["tracepoint"],
        test: "",
        reason: "is not visible to the tracepoint backend",
        host_fact: None,
        why: "the tracepoint backends are blind to some outcomes (tfo-trace/src/backends, TRACEPOINT_BLIND); the fentry \
              and kprobe cells check them",
    },
    AllowedSkip {
        places: &[],
        cells: &["raw-tracepoint"],
        test: "",
        reason: "is not visible to the raw-tracepoint backend",
        host_fact: None,
        why: "the tracepoint backends are blind to some outcomes (tfo-trace/src/backends, TRACEPOINT_BLIND); the fentry \
              and kprobe cells check them",
    },
    AllowedSkip {
        places: &[],
        cells: TRACEPOINT_BACKENDS,
        test: "cookie_changes::a_rotation_with_syn_data_in_flight_is_one_rotation",
        reason: "backend tells only the first of the in-flight refusals",
        host_fact: None,
        why: "the tracepoint backends read the client's cookie cache, which holds the new cookie from the first \
              SYN-ACK on; the test checks that first one, and the fentry cell all 16",
    },
    AllowedSkip {
        places: &[HOST],
        cells: &[],
        test: "",
        reason: "netem (CONFIG_NET_SCH_NETEM)",
        host_fact: Some(HostFact { what: "the kernel's config has no CONFIG_NET_SCH_NETEM", holds: kernel_has_no_netem }),
        why: "no netem on this host: this project's host kernel (6.18) is built without CONFIG_NET_SCH_NETEM; \
              every VM kernel loads sch_netem, and the VM cells run the delayed checks",
    },
    AllowedSkip {
        places: &[HOST],
        cells: &[],
        test: "containers::docker_systemd_driver_containers_are_named",
        reason: "dockerd's systemd cgroup driver needs systemd as init",
        host_fact: Some(HostFact { what: "no /run/systemd/system", holds: init_is_not_systemd }),
        why: "docker's systemd cgroup driver asks systemd (pid 1) over D-Bus for each container's scope; this host's \
              init is not systemd; the cgroupfs driver's test runs here",
    },
    AllowedSkip {
        places: &["5.10", "6.1", "6.12"],
        cells: TRACEPOINT_BACKENDS,
        test: "server_speaks_first::",
        reason: "is not visible to the state hook on a kernel without syn_fastopen_child",
        host_fact: None,
        why: "the VM kernels' tcp_sock has no syn_fastopen_child (the host's 6.18 has), and syn_data_acked marks \
              only children made from SYN-data: a TFO child made from a cookie without data leaves SYN_RECV like \
              a plain one; the fentry and kprobe cells check it",
    },
    AllowedSkip {
        places: &["5.10", "6.1", "6.12"],
        cells: &[],
        test: "server_outcomes::syn_flood_is_said_by_export_top_doctor_and_report",
        reason: "hping3 is not installed",
        host_fact: None,
        why: "the guests' userland has no hping3 (it needs tcl and libpcap, not copied in); the host run makes \
              the flood, and `cargo xtask setup` installs hping3 there",
    },
    AllowedSkip {
        places: &["5.10"],
        cells: &["lab"],
        test: "kernel_facts::every_backend_verifies_far_below_the_kernel_s_limit",
        reason: "does not report the instructions it verified",
        host_fact: None,
        why: "bpf_prog_info.verified_insns came in 5.16",
    },
];

/// The entry that allows `reason` from `module::test` at `place`, if any.
pub fn allowed(place: Place<'_>, module: &str, test: &str, reason: &str) -> Option<&'static AllowedSkip> {
    allowed_in(ALLOWED_SKIPS, place, module, test, reason)
}

fn allowed_in(
    list: &'static [AllowedSkip],
    place: Place<'_>,
    module: &str,
    test: &str,
    reason: &str,
) -> Option<&'static AllowedSkip> {
    let name = format!("{module}::{test}");
    list.iter().find(|a| {
        let here = match place {
            Place::Host => {
                (a.places.is_empty() || a.places.contains(&HOST))
                    && a.host_fact.as_ref().is_none_or(|f| (f.holds)())
            }
            Place::Vm { kernel, cell } => {
                let series = kernel.split('-').next().unwrap_or(kernel);
                (a.places.is_empty() || a.places.contains(&series))
                    && (a.cells.is_empty() || a.cells.contains(&cell))
            }
        };
        here && name.starts_with(a.test) && reason.contains(a.reason)
    })
}

#[cfg(test)]
mod tests {
    use super::{allowed, allowed_in, AllowedSkip, HostFact, Place, HOST};

    const fn vm<'a>(kernel: &'a str, cell: &'a str) -> Place<'a> {
        Place::Vm { kernel, cell }
    }

    #[test]
    fn only_listed_skips_are_allowed() {
        let blind = "server cookie_invalid is not visible to the tracepoint backend";
        assert!(allowed(vm("5.10", "tracepoint"), "report", "x", blind).is_some());
        assert!(allowed(vm("6.12-arm64", "tracepoint"), "server_outcomes", "y", blind).is_some());
        assert!(allowed(Place::Host, "server_outcomes", "y", blind).is_some(), "the host runs tracepoint");
        assert!(allowed(vm("5.10", "fentry"), "report", "x", blind).is_none(), "fentry sees every outcome");
        let figure =
            "this kernel does not report the instructions it verified (bpf_prog_info.verified_insns, 5.16+)";
        let t = "every_backend_verifies_far_below_the_kernel_s_limit";
        assert!(allowed(vm("5.10-arm64", "lab"), "kernel_facts", t, figure).is_some());
        assert!(allowed(vm("6.1", "lab"), "kernel_facts", t, figure).is_none(), "6.1 reports it");
        assert!(allowed(Place::Host, "kernel_facts", t, figure).is_none(), "the host's 6.18 reports it");
        let netem =
            "each stall told apart from its handshake: this kernel has no netem (CONFIG_NET_SCH_NETEM); the VM \
             kernels run it";
        assert!(
            allowed(vm("5.10", "tracepoint"), "stalls", "a", netem).is_none(),
            "the VM kernels load sch_netem"
        );
        let speaks = "server_speaks_first::server_speaks_first_sends_the_cookie_without_data_ipv4";
        let (m, t) = speaks.split_once("::").unwrap();
        let child = "a TFO child made without data is not visible to the state hook on a kernel without \
                     syn_fastopen_child (syn_data_acked stays 0)";
        assert!(allowed(vm("5.10", "tracepoint"), m, t, child).is_some());
        assert!(allowed(Place::Host, m, t, child).is_none(), "the host's 6.18 has syn_fastopen_child");
    }

    /// What set-up installs, or root and BTF, is never a reason to skip on the host: the
    /// reasons `require_kernel!` and the package checks give.
    #[test]
    fn what_set_up_should_provide_is_never_allowed_on_the_host() {
        for reason in [
            "needs root (network namespaces and BPF); run `cargo xtask test` as root",
            "needs iproute2 (`ip`); run `cargo xtask setup`",
            "this kernel has no BTF (/sys/kernel/btf/vmlinux); see docs/kernels.md",
            "needs bpftool (`apt-get install bpftool`) to list the kernel's programs",
            "needs dockerd (Debian's docker.io; `cargo xtask setup` installs it)",
            "needs tmux: not installed",
        ] {
            assert!(allowed(Place::Host, "stalls", "a", reason).is_none(), "{reason}");
            assert!(allowed(vm("6.12", "fentry"), "stalls", "a", reason).is_none(), "{reason}");
        }
        // The docker entry is for its one test, not for any test that says so.
        let systemd = "dockerd's systemd cgroup driver needs systemd as init (here pid 1 is process_api)";
        assert!(allowed(Place::Host, "containers", "another_test", systemd).is_none());
    }

    /// A host entry that rests on a fact of the machine allows nothing where the fact does
    /// not hold: the test's word is not enough.
    #[test]
    fn a_host_fact_that_does_not_hold_allows_nothing() {
        static LIST: &[AllowedSkip] = &[
            AllowedSkip {
                places: &[HOST],
                cells: &[],
                test: "",
                reason: "no widget",
                host_fact: Some(HostFact { what: "holds", holds: || true }),
                why: "",
            },
            AllowedSkip {
                places: &[HOST],
                cells: &[],
                test: "",
                reason: "no gadget",
                host_fact: Some(HostFact { what: "does not hold", holds: || false }),
                why: "",
            },
        ];
        assert!(allowed_in(LIST, Place::Host, "m", "t", "here: no widget").is_some());
        assert!(allowed_in(LIST, Place::Host, "m", "t", "here: no gadget").is_none());
        assert!(allowed_in(LIST, vm("6.12", "fentry"), "m", "t", "no widget").is_none(), "host only");
    }

    /// Where this project's host is (no netem in its 6.18, no systemd as init), its
    /// legitimate skips are allowed with their facts checked.
    #[test]
    fn this_hosts_facts_allow_its_skips() {
        let netem = "this kernel has no netem (CONFIG_NET_SCH_NETEM); the VM kernels run it";
        let no_netem = super::kernel_has_no_netem();
        assert_eq!(allowed(Place::Host, "report", "x", netem).is_some(), no_netem);
        let systemd = "dockerd's systemd cgroup driver needs systemd as init (here pid 1 is process_api)";
        let t = "docker_systemd_driver_containers_are_named";
        assert_eq!(allowed(Place::Host, "containers", t, systemd).is_some(), super::init_is_not_systemd());
    }
}
