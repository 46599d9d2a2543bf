//! The host facts tfo-trace reads from the running kernel (BTF layout, namespaces,
//! tcp_metrics), checked where they need a kernel feature or root: skipped with the
//! reason otherwise.
use crate::common;

use std::path::Path;
use std::process::Command;

use tfo_trace::kernel::{netns, tcp_metrics};
use tfo_trace::probes::{btf::Btf, layout, Backend};
use tfo_trace_common::Shape;

/// On the machine the tests run on: the layout resolves, and the fields we know from
/// include/net/sock.h and include/linux/tcp.h land where those headers put them.
fn btf_layout_resolves_on_the_running_kernel() {
    let btf = Btf::from_sys_fs().unwrap_or_else(|e| common::skip(format!("no readable kernel BTF: {e:#}")));
    let l = layout::from_btf(&btf).expect("layout");
    // struct sock starts with struct sock_common, which starts with the addresses.
    assert_eq!(l.skc_daddr.off, 0);
    assert_eq!(l.skc_rcv_saddr.off, 4);
    assert_eq!(l.skc_dport.off, 12);
    assert_eq!(l.skc_num.off, 14);
    assert!(l.syn_data.bits == 1 && l.syn_fastopen.bits == 1);
    assert!(l.fastopen_req.off > l.skc_net.off);
    // include/net/tcp.h: struct tcp_skb_cb { __u32 seq; __u32 end_seq; ... }
    assert_eq!((l.tcb_seq.off, l.tcb_end_seq.off), (0, 4));
    for f in [
        l.foc_len,
        l.skb_cb,
        l.fastopenq_qlen,
        l.fastopenq_max_qlen,
        l.net_sysctl_tcp_fastopen,
        l.net_tfo_active_disable_times,
    ] {
        assert_eq!(f.present, 1, "{f:?}");
    }
    assert_eq!(l.fastopenq_max_qlen.off, l.fastopenq_qlen.off + 4, "int qlen; int max_qlen;");
    // Every member the programs read (tfo_trace_common::kernel_structs!, the one table the
    // programs' accessors and this layout are made from) is loaded at the width its
    // accessor reads: a required one always, an optional one where this kernel has it.
    for (spec, f) in l.with_specs() {
        assert!(!spec.required || f.present == 1, "{} is required: {f:?}", spec.name);
        if f.present == 0 {
            eprintln!("{}: absent on this kernel", spec.name);
            continue;
        }
        let width = match spec.shape {
            Shape::Bytes(16) => 8, // an address, in two 8-byte loads
            Shape::Bytes(n) => n,
            Shape::OneBit => 1,
            Shape::Any => continue,
        };
        assert_eq!(u32::from(f.size), width, "{} is read as {:?}: {f:?}", spec.name, spec.shape);
        if spec.shape == Shape::OneBit {
            assert_eq!(f.bits, 1, "{}: {f:?}", spec.name);
        }
    }
}

fn require_root() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::skip("needs root (setns, ip netns add)");
    }
}

/// Joining our own namespace (needs CAP_SYS_ADMIN) lands where we are.
fn with_netns_own_namespace() {
    require_root();
    let here = netns::current_netns_inode().unwrap();
    let there = netns::with_netns(netns::SELF_NETNS, || netns::current_netns_inode().unwrap()).unwrap();
    assert_eq!(here, there);
    assert!(netns::with_netns("/nonexistent/ns", || ()).is_err());
}

/// Deletes the throwaway namespace even when the test fails.
struct TempNetns(String);

impl Drop for TempNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn with_netns_sees_other_namespace_sysctl() {
    require_root();
    let name = format!("tfo-netns-t{}", std::process::id());
    let ok = Command::new("ip").args(["netns", "add", &name]).status();
    assert!(matches!(ok, Ok(s) if s.success()), "ip netns add {name}: {ok:?}");
    let _guard = TempNetns(name.clone());
    let path = Path::new(netns::NAMED_NETNS_DIR).join(&name);
    let st = Command::new("ip")
        .args(["netns", "exec", &name, "sysctl", "-qw", "net.ipv4.tcp_fastopen=1543"])
        .status()
        .unwrap();
    assert!(st.success());
    let (ino, value) = netns::with_netns(&path, || {
        (
            netns::current_netns_inode().unwrap(),
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_fastopen").unwrap(),
        )
    })
    .unwrap();
    assert_eq!(value.trim(), "1543");
    assert_eq!(Some(ino), netns::netns_inode_of(&path).ok());
    assert_ne!(ino, netns::current_netns_inode().unwrap());
    assert_eq!(netns::netns_names().get(&ino), Some(&name));
    // The calling thread still sees its own namespace.
    let here = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_fastopen").unwrap();
    assert_ne!(here.trim(), "1543");
}

/// A throwaway namespace (`tfo-<tag>-t<pid>`, deleted when the guard drops) with its
/// loopback up: the guard, its path and its inode.
fn netns_with_loopback(tag: &str) -> (TempNetns, std::path::PathBuf, u32) {
    let name = format!("tfo-{tag}-t{}", std::process::id());
    let ok = Command::new("ip").args(["netns", "add", &name]).status();
    assert!(matches!(ok, Ok(s) if s.success()), "ip netns add {name}: {ok:?}");
    let guard = TempNetns(name.clone());
    let up = Command::new("ip").args(["-n", &name, "link", "set", "lo", "up"]).status().unwrap();
    assert!(up.success());
    let path = Path::new(netns::NAMED_NETNS_DIR).join(&name);
    let inode = netns::netns_inode_of(&path).unwrap() as u32;
    (guard, path, inode)
}

/// A SYN with an empty TFO option (a cookie request) from a fresh socket of the calling
/// thread's namespace to `port` on loopback (sendto(MSG_FASTOPEN) with no cookie cached).
fn request_a_cookie(port: u16) {
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes([127, 0, 0, 1]) },
        sin_zero: [0; 8],
    };
    // SAFETY: a socket we own and close; sendto reads one byte and a sockaddr_in of the size given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let sent = libc::sendto(
            fd,
            b"x".as_ptr().cast(),
            1,
            libc::MSG_FASTOPEN,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(sent, 1, "sendto(MSG_FASTOPEN): {}", std::io::Error::last_os_error());
        libc::close(fd);
    }
}

/// A namespace whose mount is gone and where no process runs, held only by a listener
/// another namespace's process keeps, is still found (through the socket), entered and
/// read; and what it counted stays counted after it is gone. The walk that finds it runs
/// off the refreshing thread (issue 55): its count shows at a refresh after the walk ends.
fn a_namespace_only_a_listener_holds_is_still_counted() {
    use tfo_trace::{
        events::{Outcome, Role},
        kernel::every_netns::{self, Way},
        live::namespace_counters::NamespaceCounters,
        probes::Backend,
    };
    require_root();
    let (guard, path, inode) = netns_with_loopback("held");
    // The listener is made in the namespace and held by this process, which runs elsewhere.
    let listener = netns::with_netns(&path, || std::net::TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut counters = NamespaceCounters::start(Backend::Tracepoint, &tfo_trace_common::Filter::none());
    netns::with_netns(&path, || request_a_cookie(port)).unwrap();
    drop(guard); // unmounts it: only the listener holds it now
    assert!(
        !every_netns::every_netns(&Default::default()).iter().any(|n| n.inode == inode),
        "no process, no mount"
    );
    let held = every_netns::held_by_sockets(&every_netns::every_netns(&Default::default()));
    let found = held.iter().find(|n| n.inode == inode).unwrap_or_else(|| panic!("not found: {held:?}"));
    assert_eq!(
        found.way,
        Way::Socket { pid: std::process::id(), fd: std::os::fd::AsRawFd::as_raw_fd(&listener) }
    );
    // Other tests of this binary make namespaces at the same time: only this one's rows.
    let requested_here = |c: &tfo_trace::aggregation::kernel_counted::KernelCounted| -> Vec<(u64, &str)> {
        c.rows
            .iter()
            .filter(|r| r.netns == inode && (r.role, r.outcome) == (Role::Server, Outcome::CookieRequested))
            .map(|r| (r.count, r.counter))
            .collect()
    };
    common::eventually("the namespace held by a socket counted", || {
        let counted = counters.counted();
        match requested_here(&counted)[..] {
            [(1, "TcpExtTCPFastOpenCookieReqd")] => Ok(()),
            _ => Err(format!("{counted:?}")),
        }
    });
    drop(listener); // the namespace goes; its count stays
    let counted = counters.counted();
    assert_eq!(requested_here(&counted), [(1, "TcpExtTCPFastOpenCookieReqd")], "{counted:?}");
}

/// A namespace made after the counters' start counts from its birth: its whole
/// CookieReqd, read from inside it by `nstat` as well, is a server cookie_requested there.
fn a_namespace_born_while_tracing_counts_from_its_birth() {
    use tfo_trace::{
        events::{Outcome, Role},
        kernel::netstat::Netstat,
        live::namespace_counters::NamespaceCounters,
        probes::Backend,
    };
    require_root();
    let mut counters = NamespaceCounters::start(Backend::Tracepoint, &tfo_trace_common::Filter::none());
    let (guard, path, inode) = netns_with_loopback("born");
    let name = guard.0.clone();
    netns::with_netns(&path, || {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        for _ in 0..2 {
            request_a_cookie(listener.local_addr().unwrap().port());
        }
    })
    .unwrap();
    let nstat = common::Nstat::read(&name);
    let reqd = nstat.get("TcpExtTCPFastOpenCookieReqd");
    assert_eq!(reqd, 2, "{nstat:?}");
    let counted = counters.counted();
    let here: u64 = counted
        .rows
        .iter()
        .filter(|r| r.netns == inode && (r.role, r.outcome) == (Role::Server, Outcome::CookieRequested))
        .map(|r| r.count)
        .sum();
    assert_eq!(here, reqd, "{counted:?}");
    assert_eq!(
        counters.deltas().get(&inode).map(|n: &Netstat| n.get("TcpExtTCPFastOpenCookieReqd")),
        Some(2)
    );
}

/// `ip tcp_metrics` of this namespace runs and parses (it may have no entries).
fn tcp_metrics_reads_this_namespace() {
    if Command::new("ip").arg("-V").output().is_err() {
        common::skip("needs iproute2 (`ip`)");
    }
    tcp_metrics::read(None).expect("ip tcp_metrics show");
    assert!(tcp_metrics::read(Some("tfo-trace-no-such-netns")).is_err());
}

/// Refusals a kernel of this project's is known to give: (backend, errno, a part of the
/// kernel release, why). The host's own; in a VM cell the matrix's table of refusals
/// (xtask/src/vm/kernels.rs, `REFUSALS`) passes the kernel's as TFO_EXPECTED_REFUSALS
/// (`fentry:ENOTSUPP,...`).
const HOST_REFUSALS: &[(Backend, &str, &str, &str)] = &[(
    Backend::Fentry,
    "EPERM",
    "-fc-",
    "this project's hosts (Linux 6.18, a Firecracker build) answer BPF_PROG_LOAD of fentry programs with \
     EPERM (docs/kernels.md)",
)];

/// Whether the kernel is known to refuse `backend` with the errno its `reason` names.
fn refusal_expected(backend: Backend, reason: &str) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let host = HOST_REFUSALS
        .iter()
        .any(|(b, errno, part, _)| *b == backend && release.contains(part) && reason.contains(errno));
    let vm = std::env::var("TFO_EXPECTED_REFUSALS").unwrap_or_default();
    let in_vm = vm
        .split(',')
        .filter_map(|r| r.split_once(':'))
        .any(|(b, errno)| b == backend.to_string() && reason.contains(errno));
    host || in_vm
}

/// Every backend loads here, or its absence or refusal is a known fact of this kernel (a
/// backend the kernel lacks the means for: `probes::unavailable`; a refusal on the lists
/// above): any other refusal (the verifier's, most often) is the regression this test is
/// for. And each that loads is far from the kernel's verifier limit: its largest program
/// walks under a quarter of the instructions a program may take. Before 6.3 the verifier
/// prunes paths poorly, and a probe-read program once took 937,376 of 5.10's 1,000,000 (a
/// handler a little larger would not load there at all): the kernels that report the
/// figure (5.16+: 6.1's VM cell, 6.12's, the host) see such growth first.
fn every_backend_verifies_far_below_the_kernel_s_limit() {
    require_root();
    let reports_figure = kernel_at_least(5, 16);
    let mut loaded_any = false;
    for (backend, verdict) in tfo_trace::probes::verdicts(true) {
        let loaded = match verdict {
            Ok(loaded) => loaded,
            Err(reason) => {
                let absent = tfo_trace::probes::unavailable(backend);
                eprintln!("{backend}: not loaded: {reason}");
                assert!(
                    absent.is_some() || refusal_expected(backend, &reason),
                    "the {backend} backend was refused, which this kernel is not known to do: {reason}"
                );
                continue;
            }
        };
        loaded_any = true;
        let Some(largest) = loaded.largest else {
            assert!(!reports_figure, "{backend}: no verified instruction count from a 5.16+ kernel");
            continue;
        };
        eprintln!("{backend}: {} instructions verified for {}", largest.instructions, largest.program);
        assert!(
            largest.instructions < tfo_trace::probes::VERIFIER_INSN_LIMIT / 4,
            "{backend}: {} walks {} of the verifier's {} instructions",
            largest.program,
            largest.instructions,
            tfo_trace::probes::VERIFIER_INSN_LIMIT
        );
    }
    assert!(loaded_any, "no backend loads here");
    if !reports_figure {
        common::partial_skip(
            "this kernel does not report the instructions it verified (bpf_prog_info.verified_insns, 5.16+)",
        );
    }
}

/// Whether the running kernel is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.trim().split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}

module_tests!(
    btf_layout_resolves_on_the_running_kernel,
    every_backend_verifies_far_below_the_kernel_s_limit,
    a_namespace_only_a_listener_holds_is_still_counted,
    a_namespace_born_while_tracing_counts_from_its_birth,
    with_netns_own_namespace,
    with_netns_sees_other_namespace_sysctl,
    tcp_metrics_reads_this_namespace,
);
