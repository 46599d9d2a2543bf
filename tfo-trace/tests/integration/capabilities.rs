//! Running without root: a copy of the tracer with file capabilities (`setcap
//! cap_bpf,cap_perfmon+ep`), started as the unprivileged user nobody (uid 65534), must see
//! the lab's TFO connections exactly as the kernel counts them; the same copy without
//! those capabilities must stop with one line naming what is missing. And `export` run the
//! way deploy/tfo-trace-exporter.service runs it (ambient CAP_BPF + CAP_PERFMON, bounding
//! set of just those, no_new_privs, as nobody) must serve the kernel's counts, and the unit
//! itself must pass `systemd-analyze verify`.
use crate::common;

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    os::unix::{fs::PermissionsExt as _, process::CommandExt as _},
    path::PathBuf,
    process::{Command, Stdio},
    time::Duration,
};

use common::{netns_inode, spawn_retrying, Deltas, Tracer};
use std::os::unix::fs::MetadataExt as _;
use tfo_trace::events::{Outcome, Role};
use tfo_trace::lab::{traffic::ClientArgs, Lab, LabConfig, Side};

const NOBODY: u32 = 65534;

/// Why file capabilities cannot be tried here, if they cannot.
fn setcap_missing() -> Option<String> {
    match Command::new("setcap").arg("-v").output() {
        Ok(_) => None,
        Err(e) => Some(format!("needs setcap ({e}); `apt-get install libcap2-bin`")),
    }
}

/// A copy of the tracer in a fresh directory that nobody can enter, with `caps` as its
/// file capabilities ("" for none). Removed on drop.
struct Copy {
    dir: PathBuf,
    exe: PathBuf,
}

impl Copy {
    fn new(tag: &str, caps: &str) -> Copy {
        let dir = std::env::temp_dir().join(format!("tfo-trace-caps-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let exe = dir.join("tfo-trace");
        // A copy, not a link: file capabilities are an attribute of the file itself, and
        // setcap refuses a symlink ("Invalid file").
        std::fs::copy(common::exe(), &exe).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        if !caps.is_empty() {
            let out = Command::new("setcap").arg(caps).arg(&exe).output().unwrap();
            assert!(out.status.success(), "setcap {caps}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Copy { dir, exe }
    }

    /// The command, to run as nobody (uid and gid 65534, no supplementary groups).
    fn as_nobody(&self) -> Command {
        let mut c = Command::new(&self.exe);
        c.current_dir(&self.dir).uid(NOBODY).gid(NOBODY).stdin(Stdio::null());
        c
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn nobody_with_cap_bpf_and_cap_perfmon_sees_the_kernels_connections() {
    require_kernel!();
    if let Some(why) = setcap_missing() {
        common::skip(why);
    }
    let copy = Copy::new("granted", "cap_bpf,cap_perfmon+ep");
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, 8080, 16, false).unwrap();
    let before = Deltas::since(&lab);

    let tracer = Tracer::start_with(copy.as_nobody(), &["trace", "--json"]);
    // The tracer really runs as nobody, with no capability beyond the two granted.
    let status = std::fs::read_to_string(format!("/proc/{}/status", tracer.pid())).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
    };
    assert_eq!(field("Uid:").as_deref(), Some("65534"), "{status}");
    assert_eq!(field("CapEff:").as_deref(), Some("000000c000000000"), "CAP_PERFMON (38) + CAP_BPF (39) only");

    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), 8080);
    let n = 4;
    let run = lab.run_client(common::exe(), &ClientArgs { count: n + 1, ..ClientArgs::new(dst) }).unwrap();
    let (events, _) = tracer.stop();
    let (dc, ds) = before.both();
    assert_eq!(run.ok_count(), (n + 1) as usize);

    assert_eq!(dc.get("TcpExtTCPFastOpenActive"), u64::from(n), "client counters: {dc:?}");
    assert_eq!(ds.get("TcpExtTCPFastOpenCookieReqd"), 1, "server counters: {ds:?}");
    // The client's pid is captured in the kernel, so it is right without root too.
    common::assert_traced_exactly(&events, &lab, &before, run.pid);
}

/// Runs the copy as nobody; must fail with exactly one stderr line.
fn refused_line(tag: usize, exe_caps: &str) -> String {
    let copy = Copy::new(&format!("refused-{tag}"), exe_caps);
    let mut cmd = copy.as_nobody();
    cmd.args(["trace", "--duration", "1s"]);
    let out = spawn_retrying(cmd.stdout(Stdio::piped()).stderr(Stdio::piped()))
        .unwrap()
        .wait_with_output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "caps {exe_caps:?}: {stderr}");
    assert!(out.stdout.is_empty(), "caps {exe_caps:?}: nothing on stdout");
    assert_eq!(stderr.lines().count(), 1, "caps {exe_caps:?}: one line: {stderr}");
    stderr.trim_end().to_string()
}

fn nobody_without_them_gets_one_line_naming_what_is_missing() {
    require_kernel!();
    if let Some(why) = setcap_missing() {
        common::skip(why);
    }
    let hint = "run it with sudo, or `sudo setcap cap_bpf,cap_perfmon+ep $(command -v tfo-trace)`";
    let cases =
        [("", "CAP_BPF and CAP_PERFMON"), ("cap_bpf+ep", "CAP_PERFMON"), ("cap_perfmon+ep", "CAP_BPF")];
    for (i, (caps, missing)) in cases.into_iter().enumerate() {
        let line = refused_line(i, caps);
        assert_eq!(
            line,
            format!("tfo-trace: tfo-trace needs {missing} (or root) to load its eBPF programs: {hint}"),
            "with file capabilities {caps:?}"
        );
    }
}

/// The value of one sample line (`name{labels}`, exactly) in a text exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    // The exporter (hyper) answers an HTTP/1.0 request in HTTP/1.0.
    assert!(text.starts_with("HTTP/1.0 200 "), "{text}");
    text
}

fn exporter_with_ambient_capabilities_as_in_the_systemd_unit() {
    require_kernel!();
    // No file capabilities here: the capabilities come from the parent, as systemd's
    // AmbientCapabilities= gives them, and no_new_privs is set as NoNewPrivileges= does.
    let copy = Copy::new("ambient", "");
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, 8080, 16, false).unwrap();
    let (cli_ns, srv_ns) = (netns_inode(&lab, Side::Client), netns_inode(&lab, Side::Server));
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let Some(cmd) = as_the_unit(&copy) else {
        common::skip("needs setpriv (util-linux) to hand over ambient capabilities")
    };
    let (listen_arg, cli, srv) = (listen.to_string(), cli_ns.to_string(), srv_ns.to_string());
    let exporter = Tracer::start_with(
        cmd,
        &["export", "--web.listen-address", &listen_arg, "--netns", &cli, "--netns", &srv],
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", exporter.pid())).unwrap();
    assert!(status.contains("CapEff:\t000000c000000000") && status.contains("NoNewPrivs:\t1"), "{status}");

    let series = |role: &str, outcome: &str| {
        format!(r#"tfo_trace_connections_total{{role="{role}",outcome="{outcome}"}}"#)
    };
    let before = scrape(listen);
    let counters = Deltas::since(&lab);
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), 8080);
    let run = lab.run_client(common::exe(), &ClientArgs { count: 4, ..ClientArgs::new(dst) }).unwrap();
    assert_eq!(run.ok_count(), 4);
    // Each scrape reads the kernel's counts then (views/export.rs, `refresh`): no wait.
    let after = scrape(listen);
    let (dc, ds) = counters.both();
    let delta = |s: String| sample(&after, &s).unwrap() - sample(&before, &s).unwrap();
    assert_eq!(dc.get("TcpExtTCPFastOpenActive"), 3, "client counters: {dc:?}");
    assert_eq!(delta(series("client", "accepted")), dc.get("TcpExtTCPFastOpenActive") as f64, "{after}");
    assert_eq!(delta(series("client", "cookie_requested")), ds.get("TcpExtTCPFastOpenCookieReqd") as f64);
    assert_eq!(delta(series("server", "accepted")), ds.get("TcpExtTCPFastOpenPassive") as f64);
    exporter.stop_lines();
}

/// The command line of the systemd unit's exporter: uid 65534, ambient CAP_BPF and
/// CAP_PERFMON only, no_new_privs (deploy/tfo-trace-exporter.service); None where setpriv
/// is missing.
fn as_the_unit(copy: &Copy) -> Option<Command> {
    Command::new("setpriv").arg("--version").output().ok()?;
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all,+bpf,+perfmon",
        "--ambient-caps=+bpf,+perfmon",
        "--bounding-set=-all,+bpf,+perfmon",
        "--no-new-privs",
    ])
    .arg(&copy.exe)
    .current_dir(&copy.dir)
    .stdin(Stdio::null());
    Some(cmd)
}

/// Issue 37: with the unit's privileges, the counters of a namespace whose processes are
/// another user's (root's lab server) could not be read, and its kernel-counted outcomes
/// stayed 0. They are read through /proc/PID/net now, without entering the namespace:
/// the server's invalid cookies, which no tracepoint hook sees, equal its PassiveFail. A
/// namespace nothing but a mount holds cannot be read without CAP_SYS_ADMIN: it is said
/// (the closing summary's `unreadable`, `tfo_trace_kernel_counted_namespaces{state="unreadable"}`),
/// never counted as 0.
fn kernel_counted_outcomes_with_the_units_privileges() {
    require_kernel!();
    let copy = Copy::new("unit", "");
    let Some(cmd) = as_the_unit(&copy) else {
        common::skip("needs setpriv (util-linux) to hand over ambient capabilities")
    };
    let lab = Lab::create(LabConfig::default()).unwrap();
    lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen_key", "00000000-00000000-00000000-0000000a").unwrap();
    let server = lab.start_server(common::exe(), 0, 8080, 16, false).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), 8080);
    let args = |count| ClientArgs { count, payload_bytes: 100, ..ClientArgs::new(dst) };
    assert_eq!(lab.run_client(common::exe(), &args(1)).unwrap().ok_count(), 1, "cookie cached");
    // Nothing but a mount holds it: no process to read it through.
    let empty = format!("tfo-caps-empty-{}", std::process::id());
    let made = Command::new("ip").args(["netns", "add", &empty]).status().unwrap();
    assert!(made.success());
    let _empty = scopeguard(|| {
        let _ = Command::new("ip").args(["netns", "delete", &empty]).status();
    });
    let empty_inode = std::fs::metadata(format!("/run/netns/{empty}")).unwrap().ino() as u32;

    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let exporter = Tracer::start_with(cmd, &["export", "--web.listen-address", &listen, "--json-summary"]);
    let before = Deltas::since(&lab);
    // Two keys, one after the other, without a backup: each time the cached cookie fails.
    for key in ["00000000-00000000-00000000-0000000b", "00000000-00000000-00000000-0000000c"] {
        lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen_key", key).unwrap();
        assert_eq!(lab.run_client(common::exe(), &args(1)).unwrap().ok_count(), 1);
    }
    let ds = before.server();
    assert_eq!(ds.get("TcpExtTCPFastOpenPassiveFail"), 2, "server counters: {ds:?}");
    let text = scrape(listen.parse().unwrap());
    let (_, stderr) = exporter.stop_lines();
    let backend = common::backend_of(&stderr);
    if tfo_trace::backends::sees(backend, Role::Server, Outcome::CookieInvalid) {
        common::skip(format!("the {backend} backend sees invalid cookies itself: no kernel counter is read"));
    }
    let closing = common::closing(&stderr).expect("a closing summary");
    let counted = &closing["kernel_counted"];
    // Read through the server's process: its key is the inode of its /proc/PID/net/netstat.
    let key = std::fs::metadata(format!("/proc/{}/net/netstat", server.pid())).unwrap().ino();
    let row = counted["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["netns"] == key && r["outcome"] == "cookie_invalid")
        .unwrap_or_else(|| panic!("no cookie_invalid row for the server's namespace {key}: {counted}"));
    assert_eq!(row["count"], ds.get("TcpExtTCPFastOpenPassiveFail"), "{counted}");
    assert!(counted["unnamed"].get(key.to_string()).is_some(), "read without its name: {counted}");
    assert!(
        counted["unreadable"].get(empty_inode.to_string()).is_some(),
        "the namespace only a mount holds is said unreadable: {counted}"
    );
    // Export's kernel-counted series hold every namespace read, and say what they miss.
    let series =
        r#"tfo_trace_connections_total{role="server",outcome="cookie_invalid",source="kernel_counter"}"#;
    assert!(sample(&text, series).unwrap() >= ds.get("TcpExtTCPFastOpenPassiveFail") as f64, "{text}");
    assert!(
        sample(&text, r#"tfo_trace_kernel_counted_namespaces{state="unreadable"}"#).unwrap() >= 1.0,
        "{text}"
    );
}

/// The unit's binary path, as its header installs it.
const UNIT_EXE: &str = "/usr/local/bin/tfo-trace";

/// `systemd-analyze verify` of deploy/tfo-trace-exporter.service, installed as its header
/// says (the binary and `tfo-trace man`) into a directory of this test rather than /usr:
/// the unit's ExecStart pointed there and MANPATH set, nothing else changed. verify exits 0
/// on an unknown key or a bad value ("ignoring"), so any output at all fails too.
fn systemd_unit_passes_systemd_analyze_verify() {
    let Some(analyze) = common::which("systemd-analyze") else {
        common::skip("needs systemd-analyze (Debian's systemd)")
    };
    let root = common::TempDir::new("unit-verify");
    let exe = root.0.join(UNIT_EXE.trim_start_matches('/'));
    let man1 = root.0.join("usr/local/share/man/man1");
    std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
    std::fs::create_dir_all(&man1).unwrap();
    std::os::unix::fs::symlink(common::exe(), &exe).unwrap();
    let man = Command::new(&exe).arg("man").output().unwrap();
    assert!(man.status.success(), "tfo-trace man: {}", String::from_utf8_lossy(&man.stderr));
    std::fs::write(man1.join("tfo-trace.1"), man.stdout).unwrap();
    let shipped =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/tfo-trace-exporter.service");
    let text = std::fs::read_to_string(&shipped).unwrap();
    assert!(text.contains(&format!("ExecStart={UNIT_EXE} ")), "the unit runs {UNIT_EXE}");
    let unit = root.0.join("tfo-trace-exporter.service");
    std::fs::write(&unit, text.replace(UNIT_EXE, &exe.to_string_lossy())).unwrap();
    let out = Command::new(analyze)
        .arg("verify")
        .arg(&unit)
        .env("MANPATH", root.0.join("usr/local/share/man"))
        .output()
        .expect("systemd-analyze");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");
}

/// Runs `f` when dropped.
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f()
            }
        }
    }
    Guard(Some(f))
}

module_tests!(
    systemd_unit_passes_systemd_analyze_verify,
    nobody_with_cap_bpf_and_cap_perfmon_sees_the_kernels_connections,
    nobody_without_them_gets_one_line_naming_what_is_missing,
    exporter_with_ambient_capabilities_as_in_the_systemd_unit,
    kernel_counted_outcomes_with_the_units_privileges,
);
