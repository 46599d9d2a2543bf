//! What tracing TFO costs every other connection (issue 41, item 2): N plain (non-TFO)
//! connections, loss-free and closed by FIN at both ends, through a lab while the tracer
//! runs; the kernel's own run counts of the tracer's programs (bpf_stats `run_cnt`, read
//! by program id from the tracer's fds, not asked of tfo-trace) must be what the probe
//! table documents per plain connection (`backends::PlainRuns`), no more and no fewer; a
//! program documented as never running for one must not run, and the programs that did
//! run must be the ones `doctor` (and `-v`) says a plain connection runs. The namespaces'
//! counters (nstat) say the connections were what they should be: N opens at each end, no
//! retransmission, no TFO counter moved.
//!
//! The hooks are host-wide: any other TCP activity on the host in the window (another
//! engineer's tests, the host's own traffic) runs them too. The window is measured in
//! every network namespace of the host but the lab's (opens, segments, retransmissions);
//! a window where anything else moved is tried again, and after the last attempt the test
//! skips with the figures. In a VM cell nothing else runs.
use crate::common;

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    net::SocketAddr,
    os::{fd::AsRawFd, unix::fs::MetadataExt},
    path::PathBuf,
};

use aya_obj::generated::{bpf_attr, bpf_btf_info, bpf_cmd, bpf_func_info, bpf_prog_info};
use common::{eventually, netns_inode, Nstat, Tracer};
use serde_json::Value;
use tfo_trace::{
    backends::{self, Backend},
    kernel::netns::with_netns,
    lab::{
        traffic::{ClientArgs, ClientMode},
        Lab, LabConfig, ServerArgs, Side,
    },
};

const PORT: u16 = 8090;
/// Plain connections per window.
const N: u32 = 200;
/// Windows tried before the test gives up on a quiet host.
const ATTEMPTS: usize = 5;
/// Every TFO counter of /proc/net/netstat (6.18's list): none moves for a plain connection.
const TFO_COUNTERS: [&str; 8] = [
    "TcpExtTCPFastOpenActive",
    "TcpExtTCPFastOpenActiveFail",
    "TcpExtTCPFastOpenPassive",
    "TcpExtTCPFastOpenPassiveFail",
    "TcpExtTCPFastOpenListenOverflow",
    "TcpExtTCPFastOpenCookieReqd",
    "TcpExtTCPFastOpenBlackhole",
    "TcpExtTCPFastOpenPassiveAltKey",
];
const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// `kernel.bpf_stats_enabled=1` while it lives; the value it found, when dropped (also
/// when the test fails).
struct BpfStats(String);

impl BpfStats {
    fn enable() -> BpfStats {
        let old = fs::read_to_string(SYSCTL).unwrap_or_else(|e| common::skip(format!("{SYSCTL}: {e}")));
        fs::write(SYSCTL, "1").unwrap_or_else(|e| panic!("enabling {SYSCTL}: {e}"));
        BpfStats(old.trim().to_string())
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let Err(e) = fs::write(SYSCTL, &self.0) {
            eprintln!("restoring {SYSCTL} to {}: {e}", self.0);
        }
    }
}

/// One bpf(2) command on `attr`.
fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> std::io::Result<i64> {
    // SAFETY: attr is a valid, fully initialised bpf_attr of the size passed; the kernel
    // writes only through the pointers the command's fields hold, which callers point at
    // live buffers of the sizes they state.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn zeroed<T>() -> T {
    // SAFETY: only used for the kernel's plain-data uapi structs, for which all zeros is
    // valid (and what the kernel requires of unused fields).
    unsafe { std::mem::zeroed() }
}

/// An fd the kernel hands out for an object id, closed when dropped.
fn fd_by_id(cmd: bpf_cmd, id: u32) -> std::fs::File {
    let mut attr: bpf_attr = zeroed();
    attr.__bindgen_anon_6.__bindgen_anon_1.prog_id = id; // one union: prog_id, btf_id alike
    let fd = bpf(cmd, &mut attr).unwrap_or_else(|e| panic!("{cmd:?} {id}: {e}"));
    // SAFETY: the kernel just returned this fd to us and nothing else owns it.
    unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) }
}

fn info_by_fd<T>(fd: &std::fs::File, info: &mut T) {
    let mut attr: bpf_attr = zeroed();
    attr.info.bpf_fd = fd.as_raw_fd() as u32;
    attr.info.info_len = std::mem::size_of::<T>() as u32;
    attr.info.info = info as *mut T as u64;
    bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr).unwrap_or_else(|e| panic!("BPF_OBJ_GET_INFO_BY_FD: {e}"));
}

/// A loaded program as the kernel describes it.
#[derive(Clone, Debug)]
struct Prog {
    /// Its full name: its main function's in its BTF (the kernel's `name` keeps 15 bytes,
    /// which leave tfo_try_fastopen_fentry and _fexit alike).
    name: String,
    run_cnt: u64,
}

/// The program `id`: run count, and its name from its BTF's func_info (as bpftool does).
fn prog(id: u32) -> Prog {
    let fd = fd_by_id(bpf_cmd::BPF_PROG_GET_FD_BY_ID, id);
    let mut func: [bpf_func_info; 1] = zeroed();
    let mut info: bpf_prog_info = zeroed();
    info.nr_func_info = 1;
    info.func_info_rec_size = std::mem::size_of::<bpf_func_info>() as u32;
    info.func_info = func.as_mut_ptr() as u64;
    info_by_fd(&fd, &mut info);
    let short: String = info.name.iter().take_while(|c| **c != 0).map(|c| *c as u8 as char).collect();
    let name = if info.btf_id != 0 && info.nr_func_info > 0 {
        btf_name(info.btf_id, func[0].type_id).unwrap_or(short)
    } else {
        short
    };
    Prog { name, run_cnt: info.run_cnt }
}

/// The name of type `type_id` in the kernel's BTF object `btf_id`.
fn btf_name(btf_id: u32, type_id: u32) -> Option<String> {
    let fd = fd_by_id(bpf_cmd::BPF_BTF_GET_FD_BY_ID, btf_id);
    let mut info: bpf_btf_info = zeroed();
    info_by_fd(&fd, &mut info);
    let mut raw = vec![0u8; info.btf_size as usize];
    let mut info: bpf_btf_info = zeroed();
    info.btf = raw.as_mut_ptr() as u64;
    info.btf_size = raw.len() as u32;
    info_by_fd(&fd, &mut info);
    name_of_type(&raw, type_id)
}

/// Walks raw BTF (kernel's own byte order) to type `want` and reads its name.
fn name_of_type(b: &[u8], want: u32) -> Option<String> {
    let u32_at = |o: usize| Some(u32::from_ne_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let hdr_len = u32_at(4)? as usize;
    let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
    let str_off = u32_at(16)? as usize;
    let (mut at, end) = (hdr_len + type_off, hdr_len + type_off + type_len);
    let mut id = 1;
    while at < end {
        let (name_off, info) = (u32_at(at)? as usize, u32_at(at + 4)?);
        if id == want {
            let s = b.get(hdr_len + str_off + name_off..)?;
            return Some(String::from_utf8_lossy(&s[..s.iter().position(|c| *c == 0)?]).into_owned());
        }
        let vlen = (info & 0xffff) as usize;
        // What follows each kind's 12-byte header (include/uapi/linux/btf.h).
        at += 12
            + match (info >> 24) & 0x1f {
                1 | 14 | 17 => 4,             // INT, VAR, DECL_TAG
                3 => 12,                      // ARRAY
                4 | 5 | 15 | 19 => 12 * vlen, // STRUCT, UNION, DATASEC, ENUM64
                6 | 13 => 8 * vlen,           // ENUM, FUNC_PROTO
                _ => 0,
            };
        id += 1;
    }
    None
}

/// Every program of the tracer, by full name, with its run count now.
fn run_counts(pid: u32) -> BTreeMap<String, u64> {
    common::bpf_ids_of(pid, "prog_id")
        .into_iter()
        .map(|id| prog(id as u32))
        .map(|p| (p.name, p.run_cnt))
        .collect()
}

/// TCP activity of one network namespace: what any connection, segment or retransmission
/// there moves.
const ACTIVITY: [&str; 5] = ["ActiveOpens", "PassiveOpens", "InSegs", "OutSegs", "RetransSegs"];

/// [`ACTIVITY`] of every network namespace of the host (by inode) but `skip`'s: those of
/// every process (/proc/*/ns/net) and every named one (/run/netns), each read from
/// /proc/thread-self/net/snmp by a thread that entered it.
fn host_activity(skip: &[u64]) -> BTreeMap<u64, [u64; 5]> {
    let mut paths: BTreeMap<u64, PathBuf> = BTreeMap::new();
    let procs = fs::read_dir("/proc").into_iter().flatten().flatten().map(|e| e.path().join("ns/net"));
    let named = fs::read_dir("/run/netns").into_iter().flatten().flatten().map(|e| e.path());
    for path in procs.chain(named) {
        if let Ok(m) = fs::metadata(&path) {
            if !skip.contains(&m.ino()) {
                paths.entry(m.ino()).or_insert(path);
            }
        }
    }
    // A namespace gone meanwhile is skipped: what it did is reported by `elsewhere`.
    let snmp =
        |path: &PathBuf| with_netns(path, || fs::read_to_string("/proc/thread-self/net/snmp")).ok()?.ok();
    paths.iter().filter_map(|(ino, path)| Some((*ino, tcp_counters(&snmp(path)?)))).collect()
}

/// [`ACTIVITY`] from /proc/net/snmp's two `Tcp:` lines (names, then values).
fn tcp_counters(snmp: &str) -> [u64; 5] {
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next().unwrap_or(""), tcp.next().unwrap_or(""));
    let value: BTreeMap<&str, u64> = names
        .split_whitespace()
        .zip(values.split_whitespace())
        .filter_map(|(n, v)| Some((n, v.parse().ok()?)))
        .collect();
    ACTIVITY.map(|n| value.get(n).copied().unwrap_or(0))
}

/// What moved elsewhere on the host between two readings: namespaces that went away (what
/// they did is unknown) and those whose activity moved (a new one counts from 0).
fn elsewhere(before: &BTreeMap<u64, [u64; 5]>, after: &BTreeMap<u64, [u64; 5]>) -> Vec<String> {
    let mut moved = Vec::new();
    for ino in before.keys().filter(|i| !after.contains_key(i)) {
        moved.push(format!("netns {ino} went away"));
    }
    for (ino, now) in after {
        let was = before.get(ino).copied().unwrap_or_default();
        let delta: Vec<String> = ACTIVITY
            .iter()
            .zip(now.iter().zip(was))
            .filter(|(_, (n, w))| *n != w)
            .map(|(name, (n, w))| format!("{name} +{}", n.saturating_sub(w)))
            .collect();
        if !delta.is_empty() {
            moved.push(format!("netns {ino}: {}", delta.join(", ")));
        }
    }
    moved
}

/// The programs `doctor --json` says a plain connection runs with `backend`, and its
/// sentence.
fn doctor_says(backend: Backend) -> (BTreeSet<String>, String) {
    let out = std::process::Command::new(common::exe()).args(["doctor", "--json"]).output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    let b = report["backends"]
        .as_array()
        .and_then(|bs| bs.iter().find(|b| b["name"] == backend.name()))
        .unwrap_or_else(|| panic!("doctor says nothing of the {backend} backend: {report:#}"));
    let programs = b["plain_connection_runs"]
        .as_array()
        .expect("plain_connection_runs")
        .iter()
        .map(|r| r["program"].as_str().unwrap().to_string())
        .collect();
    (programs, b["plain_connection"].as_str().unwrap().to_string())
}

/// Sockets of the lab still on their way: a window ends when every connection has made
/// its last state change (TIME_WAIT is no socket state change).
fn settled(lab: &Lab) -> Result<(), String> {
    let busy = [
        "syn-sent",
        "syn-recv",
        "established",
        "fin-wait-1",
        "fin-wait-2",
        "close-wait",
        "last-ack",
        "closing",
    ];
    for side in [Side::Client, Side::Server] {
        for state in busy {
            let n = lab.sockets_in_state(side, state).map_err(|e| e.to_string())?;
            if n > 0 {
                return Err(format!("{side:?}: {n} {state}"));
            }
        }
    }
    Ok(())
}

fn plain_connections_run_what_the_table_documents() {
    require_kernel!();
    let _stats = BpfStats::enable();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let listen = SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT);
    // No TFO on the listener (tfo_queue 0), plain connect() + write() clients.
    let _server = lab.start_server_with(common::exe(), &ServerArgs::new(listen)).unwrap();
    let clients = ClientArgs { count: N, mode: ClientMode::Plain, ..ClientArgs::new(listen) };
    let lab_ns = [u64::from(netns_inode(&lab, Side::Client)), u64::from(netns_inode(&lab, Side::Server))];

    let mut tracer = Tracer::start_command(&["-v", "trace", "--json"]);
    let attached = tracer.wait_stderr("programs attached");
    let backend = common::backend_of(&[attached]);
    let said = tracer.wait_stderr("a plain connection runs:");
    let (doctor_set, doctor_sentence) = doctor_says(backend);
    assert!(said.ends_with(&doctor_sentence), "-v said {said:?}, doctor {doctor_sentence:?}");

    // What the table documents for each program the tracer may hold.
    let documented: BTreeMap<&str, backends::PlainRuns> = backends::hooks(backend)
        .iter()
        .chain(backends::cgroup_hooks())
        .map(|h| (h.program, h.plain_runs))
        .collect();
    let cgroup: BTreeSet<&str> = backends::cgroup_hooks().iter().map(|h| h.program).collect();
    let n = u64::from(N);
    let mut noise = Vec::new();
    for attempt in 1..=ATTEMPTS {
        let host_before = host_activity(&lab_ns);
        let (cli_before, srv_before) =
            (Nstat::read(lab.netns(Side::Client)), Nstat::read(lab.netns(Side::Server)));
        let runs_before = run_counts(tracer.pid());
        let run = lab.run_client(common::exe(), &clients).unwrap();
        assert_eq!(run.ok_count(), N as usize, "{run:?}");
        eventually("every lab connection closed", || settled(&lab));
        let runs_after = run_counts(tracer.pid());
        let cli = Nstat::read(lab.netns(Side::Client)).since(&cli_before);
        let srv = Nstat::read(lab.netns(Side::Server)).since(&srv_before);
        let host_after = host_activity(&lab_ns);

        // The connections were N plain, loss-free ones, by the kernel's own counters.
        assert_eq!(
            (cli.get("TcpActiveOpens"), srv.get("TcpPassiveOpens")),
            (n, n),
            "client {cli:?} server {srv:?}"
        );
        for counters in [&cli, &srv] {
            for name in TFO_COUNTERS {
                assert_eq!(counters.get(name), 0, "{name} moved: not plain connections ({counters:?})");
            }
        }
        let mut others = elsewhere(&host_before, &host_after);
        let retrans = cli.get("TcpRetransSegs") + srv.get("TcpRetransSegs");
        if retrans > 0 {
            others.push(format!("the lab itself retransmitted {retrans} segments: not a loss-free window"));
        }
        let delta =
            |p: &str| runs_after.get(p).copied().unwrap_or(0) - runs_before.get(p).copied().unwrap_or(0);
        for p in runs_after.keys().filter(|p| cgroup.contains(p.as_str()) && delta(p) > 0) {
            others.push(format!("{p} ran {} times: a cgroup was made or removed", delta(p)));
        }
        if !others.is_empty() {
            eprintln!("window {attempt}: other activity on the host: {}", others.join("; "));
            noise = others;
            continue;
        }

        let mut moved = BTreeSet::new();
        for (program, after) in &runs_after {
            let ran = delta(program);
            let per = ran as f64 / n as f64;
            let runs = documented.get(program.as_str()).unwrap_or_else(|| {
                panic!("the tracer holds {program}, which the probe table does not document ({backend})")
            });
            let allowed = u64::from(runs.per_connection().total());
            eprintln!(
                "{backend}: {program}: {ran} runs for {N} plain connections ({per:.2} each; \
                 documented {allowed}: {runs:?}); run_cnt {after}"
            );
            assert!(
                *runs != backends::PlainRuns::Never || ran == 0,
                "{program} is documented as never running for a plain connection and ran {ran} times"
            );
            // Exactly: the window is quiet (nothing else on the host moved, checked above),
            // so fewer runs than documented is a hook that missed connections, or a table
            // that documents more than a plain connection costs.
            assert_eq!(
                ran,
                allowed * n,
                "{program} ran {per:.2} times per plain connection, documented {allowed} ({runs:?})"
            );
            if ran > 0 {
                moved.insert(program.clone());
            }
        }
        assert_eq!(moved, doctor_set, "programs that ran vs what doctor says a plain connection runs");
        return; // the tracer stops and bpf_stats is restored as they drop
    }
    common::skip(format!(
        "other TCP activity on the host in each of {ATTEMPTS} windows of {N} connections (last: {})",
        noise.join("; ")
    ));
}

module_tests!(plain_connections_run_what_the_table_documents);
