//! What tfo-trace exposes, checked against the kernel and the wire: no payload byte leaves
//! the kernel (only lengths), cookies are never printed, recordings are private (0600), the
//! exporter listens on loopback unless told otherwise, and nothing BPF outlives the tracer
//! (no pin in bpffs, no program, link or map left loaded), after a clean exit or SIGKILL.
//! Needs root; skips with the reason otherwise.
use crate::common;

use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream},
    os::unix::{fs::PermissionsExt, process::CommandExt},
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use common::{netns_inode, TempFile, Tracer};
use tfo_trace::{
    kernel::netns::with_netns,
    lab::{traffic::PAYLOAD_PATTERN, ClientArgs, Lab, LabConfig, Side},
};

const PORT: u16 = 8080;
/// Bytes of payload per connection: all of it fits in the SYN (MSS 1460 on the veth).
const PAYLOAD: usize = 1000;

fn client(lab: &Lab, count: u32) -> ClientArgs {
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), PORT);
    ClientArgs { count, payload_bytes: PAYLOAD, ..ClientArgs::new(dst) }
}

/// The cookie the kernel cached for `dst` in the client namespace, as `ip tcp_metrics`
/// prints it (hex).
fn cached_cookie(lab: &Lab, dst: IpAddr) -> String {
    let metrics = lab.tcp_metrics(Side::Client).unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with(&format!("{dst} ")))
        .unwrap_or_else(|| panic!("no entry for {dst}: {metrics}"));
    let mut words = line.split_whitespace();
    words.find(|w| *w == "fo_cookie");
    let hex = words.next().unwrap_or_else(|| panic!("no cookie cached for {dst}: {line}")).to_string();
    assert!(hex.len() >= 8 && hex.chars().all(|c| c.is_ascii_hexdigit()), "{line}");
    hex
}

/// Neither any 12 bytes of the payload pattern (every 12-byte window holds a letter or
/// punctuation, so no number in the output can match by chance) nor the cookie, as hex
/// either case or raw bytes, occurs in `output`.
fn assert_nothing_secret(what: &str, output: &[u8], cookie_hex: &str) {
    let pattern: Vec<u8> = PAYLOAD_PATTERN.iter().copied().cycle().take(2 * PAYLOAD_PATTERN.len()).collect();
    let contains = |needle: &[u8]| output.windows(needle.len()).any(|w| w == needle);
    for window in pattern.windows(12) {
        assert!(!contains(window), "{what}: payload bytes {:?} leaked", String::from_utf8_lossy(window));
        let hex: String = window.iter().map(|b| format!("{b:02x}")).collect();
        assert!(!contains(hex.as_bytes()), "{what}: payload leaked as hex {hex}");
    }
    let raw: Vec<u8> = (0..cookie_hex.len() / 2)
        .map(|i| u8::from_str_radix(&cookie_hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    for needle in [cookie_hex.to_lowercase().into_bytes(), cookie_hex.to_uppercase().into_bytes(), raw] {
        assert!(!contains(&needle), "{what}: the cookie {cookie_hex} was printed");
    }
}

fn no_payload_byte_leaves_the_kernel() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    // First contact fetches the cookie, so the traced connections carry data in the SYN.
    assert_eq!(lab.run_client(common::exe(), &client(&lab, 1)).unwrap().ok_count(), 1);
    let (json_rec, text_rec) = (TempFile::new("payload-json"), TempFile::new("payload-text"));
    let capture = lab.capture_syns(Side::Client).unwrap();
    let json = Tracer::start_command(&["trace", "--json", "--record", json_rec.path()]);
    let text = Tracer::start_command(&["trace", "--record", text_rec.path()]);
    let n = 3;
    let run = lab.run_client(common::exe(), &client(&lab, n)).unwrap();
    let (json_out, json_err) = json.stop_lines();
    let (text_out, text_err) = text.stop_lines();
    let wire = capture.stop();
    assert_eq!(run.ok_count(), n as usize, "{run:?}");

    // The wire: each traced SYN carried the payload.
    let syn_data =
        wire.iter().filter(|s| !s.syn_ack && s.dport == PORT && s.payload == PAYLOAD as u32).count();
    assert_eq!(syn_data, n as usize, "SYNs with {PAYLOAD} bytes of data on the wire: {wire:?}");
    // Its length is reported...
    let netns = netns_inode(&lab, Side::Client);
    let events: Vec<serde_json::Value> = json_out.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    let lengths = events
        .iter()
        .filter(|e| e["netns"] == netns && e["role"] == "client" && e["syn_data_bytes"] == PAYLOAD)
        .count();
    assert_eq!(lengths, n as usize, "events with syn_data_bytes {PAYLOAD}: {events:?}");
    // ...its bytes never, nor the cookie those SYNs carried.
    let cookie = cached_cookie(&lab, lab.server_addr(0, false).unwrap());
    for (what, out) in [
        ("trace --json stdout", json_out.join("\n").into_bytes()),
        ("trace --json stderr", json_err.join("\n").into_bytes()),
        ("trace stdout", text_out.join("\n").into_bytes()),
        ("trace stderr", text_err.join("\n").into_bytes()),
        ("recording of trace --json", std::fs::read(&json_rec.0).unwrap()),
        ("recording of trace", std::fs::read(&text_rec.0).unwrap()),
    ] {
        assert_nothing_secret(what, &out, &cookie);
    }
}

/// `doctor` and a live `report` read `ip tcp_metrics` of the lab's namespace, where the
/// kernel holds a real cookie: they say it is there and how long, never what it is.
fn cookies_are_never_printed() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, PORT, 16, false).unwrap();
    assert_eq!(lab.run_client(common::exe(), &client(&lab, 1)).unwrap().ok_count(), 1);
    let dst = lab.server_addr(0, false).unwrap();
    let cookie = cached_cookie(&lab, dst);
    let present = format!("cookie present ({} bytes)", cookie.len() / 2);

    for args in [&["doctor"][..], &["doctor", "--json"]] {
        let out = Command::new(common::exe()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&lab.netns(Side::Client).to_string()), "{args:?} looked in the lab namespace");
        if args.len() == 1 {
            assert!(text.contains(&format!("{dst}: {present}")), "{args:?}: {text}");
        }
        assert_nothing_secret(&format!("{args:?}"), &[out.stdout, out.stderr].concat(), &cookie);
    }
    for format in ["text", "json", "markdown"] {
        let report = Tracer::start_command(&["report", "--format", format]);
        assert_eq!(lab.run_client(common::exe(), &client(&lab, 1)).unwrap().ok_count(), 1);
        let (out, err) = report.stop_lines();
        let out = out.join("\n");
        if format != "json" {
            assert!(out.contains(&present), "report --format {format} shows the cookie's state: {out}");
        }
        assert_nothing_secret(
            &format!("report --format {format}"),
            &[out, err.join("\n")].concat().into_bytes(),
            &cookie,
        );
    }
    assert_eq!(cached_cookie(&lab, dst), cookie, "the same cookie all along");
}

/// Every command that records, through the real binary, with umask 0 and over an existing
/// world-readable file (replaced with `--force`): the recording ends up 0600.
fn recordings_are_private() {
    require_kernel!();
    for args in [
        &["trace", "--duration", "1s"][..],
        &["stalls", "--duration", "1s"],
        &["top", "--batch", "-n", "1", "-d", "0.2"],
    ] {
        for existing in [false, true] {
            let file = TempFile::new(&format!("private-{}-{existing}", args[0]));
            if existing {
                std::fs::write(&file.0, "old contents\n").unwrap();
                std::fs::set_permissions(&file.0, std::fs::Permissions::from_mode(0o666)).unwrap();
            }
            let mut cmd = Command::new(common::exe());
            cmd.args(args).arg("--record").arg(&file.0);
            if existing {
                cmd.arg("--force"); // replacing a file is asked for, never done by default
            }
            // SAFETY: umask is async-signal-safe and only touches the child.
            unsafe {
                cmd.pre_exec(|| {
                    libc::umask(0);
                    Ok(())
                })
            };
            let out = cmd.output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
            let mode = std::fs::metadata(&file.0).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{args:?} (file existed: {existing})");
            let text = std::fs::read_to_string(&file.0).unwrap();
            assert!(text.starts_with("{\"tfo_trace_recording\":1"), "{args:?}: rewritten: {text:?}");
        }
    }
}

/// Listening TCP sockets of `pid`, read from its own namespace's /proc/PID/net/tcp{,6}.
fn listening(pid: u32) -> BTreeSet<SocketAddr> {
    let fd_dir = format!("/proc/{pid}/fd");
    let inodes: BTreeSet<String> = std::fs::read_dir(&fd_dir)
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| Some(l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.to_string()))
        .collect();
    let mut out = BTreeSet::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap();
        for l in text.lines().skip(1) {
            let f: Vec<&str> = l.split_whitespace().collect();
            // sl local_address rem_address st ... inode: 0A is TCP_LISTEN.
            if f.len() > 9 && f[3] == "0A" && inodes.contains(f[9]) {
                out.insert(parse_proc_addr(f[1]));
            }
        }
    }
    out
}

/// `0100007F:24FB` (IPv4, host byte order words) or 32 hex digits for IPv6.
fn parse_proc_addr(s: &str) -> SocketAddr {
    let (ip, port) = s.split_once(':').unwrap();
    let port = u16::from_str_radix(port, 16).unwrap();
    let words: Vec<u32> =
        (0..ip.len() / 8).map(|i| u32::from_str_radix(&ip[8 * i..8 * i + 8], 16).unwrap()).collect();
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let ip: IpAddr = match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).unwrap().into(),
        _ => <[u8; 16]>::try_from(bytes).unwrap().into(),
    };
    SocketAddr::new(ip, port)
}

/// The exporter runs in a lab namespace (its default port cannot clash with anything on the
/// host there): by default its only listening socket is 127.0.0.1 on the default port,
/// which the namespace's own non-loopback address does not reach; an explicit address is
/// honoured.
fn the_exporter_listens_on_loopback_unless_told_otherwise() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let ns = lab.netns(Side::Client).to_string();
    let default: SocketAddr = tfo_trace::cli::DEFAULT_EXPORT_LISTEN.parse().unwrap();
    assert_eq!(default.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    let in_ns = || {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &ns]).arg(common::exe());
        c
    };
    let outside = SocketAddr::new(lab.client_addr(false), default.port());

    let exporter = Tracer::start_with(in_ns(), &["export"]);
    assert_eq!(listening(exporter.pid()), BTreeSet::from([default]), "the exporter's listening sockets");
    let reach = |to: SocketAddr| {
        with_netns(format!("/run/netns/{ns}"), move || {
            TcpStream::connect_timeout(&to, Duration::from_secs(5)).is_ok()
        })
        .unwrap()
    };
    assert!(reach(default), "loopback reaches the exporter");
    assert!(!reach(outside), "{outside} must not reach the exporter");
    exporter.stop_lines();

    let any = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, default.port()));
    let exporter = Tracer::start_with(in_ns(), &["export", "--web.listen-address", &any.to_string()]);
    assert_eq!(listening(exporter.pid()), BTreeSet::from([any]), "as told");
    assert!(reach(outside), "bound to every address when told so");
    exporter.stop_lines();
}

/// bpffs mounted at /sys/fs/bpf for the test's length, if it was not already (then the
/// mount is removed again).
struct Bpffs {
    mounted_here: bool,
}

impl Bpffs {
    const DIR: &str = "/sys/fs/bpf";

    fn ensure() -> Bpffs {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        if mounts.lines().any(|l| {
            l.split_whitespace().nth(1) == Some(Self::DIR) && l.split_whitespace().nth(2) == Some("bpf")
        }) {
            return Bpffs { mounted_here: false };
        }
        let out = Command::new("mount").args(["-t", "bpf", "bpf", Self::DIR]).output().unwrap();
        assert!(out.status.success(), "mount -t bpf: {}", String::from_utf8_lossy(&out.stderr));
        Bpffs { mounted_here: true }
    }

    /// Every path under the mount.
    fn contents() -> BTreeSet<PathBuf> {
        fn walk(dir: &Path, out: &mut BTreeSet<PathBuf>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                out.insert(e.path());
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&e.path(), out);
                }
            }
        }
        let mut out = BTreeSet::new();
        walk(Path::new(Self::DIR), &mut out);
        out
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        if self.mounted_here {
            let _ = Command::new("umount").arg(Self::DIR).status();
        }
    }
}

/// BPF objects by kind ("prog", "link", "map") and id.
type BpfIds = BTreeSet<(&'static str, u64)>;

/// The BPF objects a process holds, from its /proc/PID/fdinfo (`prog_id:`, `link_id:`,
/// `map_id:` lines).
fn held_by(pid: &str) -> BpfIds {
    let mut ids = BpfIds::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else { continue };
        for l in text.lines() {
            for kind in ["prog", "link", "map"] {
                if let Some(id) = l.strip_prefix(&format!("{kind}_id:")).and_then(|v| v.trim().parse().ok()) {
                    ids.insert((kind, id));
                }
            }
        }
    }
    ids
}

/// Every BPF object the kernel has loaded: `bpftool {prog,link,map} show`. Err when
/// bpftool could not list them (common::bpftool).
fn loaded() -> Result<BpfIds, String> {
    let mut ids = BpfIds::new();
    for kind in ["prog", "link", "map"] {
        ids.extend(common::bpftool::ids(kind)?.into_iter().map(|id| (kind, id)));
    }
    Ok(ids)
}

/// Starts a tracer, ends it with `end`, and checks that the kernel let go of every BPF
/// object it held and that bpffs holds what it held before.
fn leaves_nothing_behind(how: &str, end: fn(Tracer)) {
    let before = Bpffs::contents();
    let tracer = Tracer::start(&[]);
    let held = held_by(&tracer.pid().to_string());
    assert!(held.iter().any(|(k, _)| *k == "prog") && held.iter().any(|(k, _)| *k == "map"), "{held:?}");
    let seen = common::eventually("the kernel's list of BPF objects", loaded);
    assert!(held.is_subset(&seen), "the kernel's list shows the tracer's objects: {held:?} vs {seen:?}");
    end(tracer);
    // The kernel frees programs and maps after the last reference goes (RCU, work queues):
    // wait for it.
    common::eventually(format!("{how}: the tracer's BPF objects unloaded after it exited"), || {
        let left: BpfIds = loaded()?.intersection(&held).copied().collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    });
    assert_eq!(Bpffs::contents(), before, "{how}: bpffs changed");
}

fn nothing_bpf_is_left_behind() {
    require_kernel!();
    // Without bpftool only what processes hold (/proc/*/fdinfo) could be listed, and once
    // the tracer is gone nothing holds its objects: that check would pass whatever is left.
    common::bpftool::require("to list every BPF object the kernel has loaded");
    let _bpffs = Bpffs::ensure();
    leaves_nothing_behind("Ctrl-C", |t| drop(t.stop_lines()));
    leaves_nothing_behind("SIGKILL", |t| {
        t.signal(libc::SIGKILL);
        drop(t); // reaps it
    });
}

module_tests!(
    no_payload_byte_leaves_the_kernel,
    cookies_are_never_printed,
    recordings_are_private,
    the_exporter_listens_on_loopback_unless_told_otherwise,
    nothing_bpf_is_left_behind,
);
