//! Shared by the kernel tests: the harness (skips, partial skips and second runs, cases of
//! one test body: `harness.rs`'s doc is the whole API), skip rules, waiting on facts
//! (`wait`: [`eventually`]), the kernel's counters as `nstat` reads them (`nstat`:
//! [`Deltas`]), the wire's account of stalls (`wire`), a handle on a running `tfo-trace`
//! and its typed events, cgroups (`cgroups`), private container engines (`docker`), a real
//! Prometheus (`prometheus`), the kernel's list of BPF objects, where a failed listing
//! fails the test (`bpftool`), and the kernel's types as the tests read its BTF (`btf`).
#![allow(dead_code, unused_imports)]

pub mod bpftool;
pub mod btf;
pub mod cgroups;
pub mod docker;
#[macro_use]
pub mod harness;
pub mod kube;
pub mod nstat;
pub mod prometheus;
pub mod wait;
pub mod wire;
pub use harness::{assert_hook_count, assert_view_count, partial_skip, skip, HookRun};
pub use nstat::{Deltas, Nstat};
pub use wait::{eventually, HANG_LIMIT};

use std::{
    io::{BufRead, BufReader, Read},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use serde_json::Value;
use tfo_trace::{
    events::{Event, Outcome, Role},
    lab::{Lab, Side},
};

pub fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tfo-trace"))
}

/// `tfo-trace report --format json --from FILE`, which must succeed: its JSON.
pub fn report_json(recording: &Path) -> Value {
    let out = Command::new(exe())
        .args(["report", "--format", "json", "--from"])
        .arg(recording)
        .output()
        .expect("running tfo-trace report");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "report: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("report JSON: {e}: {stdout}"))
}

/// A file in the temporary directory, named after the test process; deleted on drop, also
/// when the test fails.
pub struct TempFile(pub PathBuf);

impl TempFile {
    pub fn new(name: &str) -> TempFile {
        TempFile(std::env::temp_dir().join(format!("tfo-test-{}-{name}.jsonl", std::process::id())))
    }

    pub fn path(&self) -> &str {
        self.0.to_str().expect("temporary paths are UTF-8")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A folder in the temporary directory, named after the test process, made empty; deleted
/// with everything in it on drop, also when the test fails.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("tfo-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What `cargo xtask dist` made: TFO_DIST_DIR (set by `cargo xtask test`), else
/// target/dist.
pub fn dist_dir() -> PathBuf {
    std::env::var_os("TFO_DIST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/dist"))
}

/// A file of [`dist_dir`], or a skip naming how to make it.
pub fn artefact(name: &str) -> PathBuf {
    let p = dist_dir().join(name);
    if !p.exists() {
        skip(format!("no {}: `cargo xtask dist` makes it (`cargo xtask test` runs it first)", p.display()));
    }
    p
}

/// `program` as the shell would find it in PATH.
pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(program)).find(|p| p.is_file())
}

/// Kernel tests need root (namespaces, BPF). Says why when they skip.
pub fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (network namespaces and BPF); run `cargo xtask test` as root".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("needs iproute2 (`ip`); run `cargo xtask setup`".into());
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Some("this kernel has no BTF (/sys/kernel/btf/vmlinux); see docs/kernels.md".into());
    }
    None
}

/// Skips the calling test when the kernel tests cannot run here, with the reason.
#[macro_export]
macro_rules! require_kernel {
    () => {
        if let Some(why) = common::skip_reason() {
            common::skip(why);
        }
    };
}

/// The ids of the BPF objects of one kind a process holds, from its fds' fdinfo: `key` is
/// `prog_id` (program and link fds both name one) or `map_id`.
pub fn bpf_ids_of(pid: u32, key: &str) -> std::collections::BTreeSet<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                .filter_map(|i| {
                    i.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().parse().ok())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The inode that `netns` in events refers to, for one lab namespace.
pub fn netns_inode(lab: &Lab, side: Side) -> u32 {
    let path = format!("/run/netns/{}", lab.netns(side));
    std::fs::metadata(&path).unwrap_or_else(|e| panic!("stat {path}: {e}")).ino() as u32
}

/// Why a test that needs netem cannot have it here.
const NO_NETEM: &str = "this kernel has no netem (CONFIG_NET_SCH_NETEM); the VM kernels run it";

/// Delays every packet leaving `side`'s veth by `delay` (netem), or skips the test where
/// the kernel has no netem (this host; the VM kernels load it).
pub fn delay_or_skip(lab: &Lab, side: Side, delay: std::time::Duration) {
    if !delay_where_netem(lab, side, delay, "") {
        skip(NO_NETEM);
    }
}

/// Delays every packet leaving `side`'s veth by `delay` (netem) where the kernel has
/// netem; where it has none, records `check` (what the delay was for) as a partial skip.
/// Whether it delays. With `check` empty, says nothing (the caller skips).
pub fn delay_where_netem(lab: &Lab, side: Side, delay: std::time::Duration, check: &str) -> bool {
    match lab.delay_egress(side, delay) {
        Ok(()) => true,
        Err(e) if tfo_trace::lab::is_no_netem(&e) => {
            if !check.is_empty() {
                partial_skip(format!("{check}: {NO_NETEM}"));
            }
            false
        }
        Err(e) => panic!("{e:#}"),
    }
}

/// The delay netem puts on the server's packets in the tests that stall connections, where
/// the kernel has netem (the VM kernels): each SYN-ACK comes that much after the resent SYN,
/// so a stall measured to the SYN-ACK instead of the resent SYN would be that much longer
/// than the wire's gap (`wire`), and the handshake that much longer than the stall.
pub const STALL_RTT: Duration = Duration::from_millis(50);

/// Delays the server's packets by [`STALL_RTT`] where the kernel has netem (a partial skip
/// where it has none); whether it did.
pub fn delay_stalls(lab: &Lab) -> bool {
    delay_where_netem(lab, Side::Server, STALL_RTT, "each stall told apart from its handshake")
}

/// Spawns `cmd`, retrying while exec says ETXTBSY: an executable just written (a copy of
/// tfo-trace) may still be open for writing in a child another test thread forked in
/// between, until that child's own exec closes it. Bounded: 50 tries, 20 ms apart.
pub fn spawn_retrying(cmd: &mut Command) -> std::io::Result<Child> {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// A running `tfo-trace trace --json`, collecting its stdout.
pub struct Tracer {
    child: Child,
    stdout: Option<JoinHandle<()>>,
    /// Its stdout lines as they come, and those already taken from there.
    stdout_rx: mpsc::Receiver<String>,
    stdout_seen: Vec<String>,
    stderr: Option<JoinHandle<()>>,
    stderr_rx: mpsc::Receiver<String>,
    stderr_seen: Vec<String>,
}

impl Tracer {
    /// Starts `tfo-trace trace --json` and waits until its programs are attached.
    pub fn start(extra: &[&str]) -> Tracer {
        let args: Vec<&str> = ["trace", "--json"].iter().chain(extra).copied().collect();
        Self::start_command(&args)
    }

    /// Starts `tfo-trace <args>` and waits until its programs are attached. With
    /// TFO_TRACE_BACKEND set (the VM matrix runs each backend), `--backend` is added.
    pub fn start_command(args: &[&str]) -> Tracer {
        Self::start_with(Command::new(exe()), args)
    }

    /// As [`Tracer::start_command`], with `configure` applied to the command first.
    pub fn start_command_with(args: &[&str], configure: impl FnOnce(&mut Command)) -> Tracer {
        let mut command = Command::new(exe());
        configure(&mut command);
        Self::start_with(command, args)
    }

    /// [`Tracer::start_command`] through a prefix that execs tfo-trace in the same process
    /// (e.g. `ip netns exec NS <exe>`), so the tracer's pid is the child's.
    pub fn start_with(mut cmd: Command, args: &[&str]) -> Tracer {
        let backend: Vec<String> = match std::env::var("TFO_TRACE_BACKEND") {
            Ok(b) if !b.is_empty() => vec!["--backend".into(), b],
            _ => vec![],
        };
        let mut child =
            spawn_retrying(cmd.args(args).args(&backend).stdout(Stdio::piped()).stderr(Stdio::piped()))
                .expect("spawning tfo-trace");
        let out = child.stdout.take().unwrap();
        let (tx, stdout_rx) = mpsc::channel();
        let stdout = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let err = child.stderr.take().unwrap();
        let (tx, stderr_rx) = mpsc::channel();
        let stderr = std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut t = Tracer {
            child,
            stdout: Some(stdout),
            stdout_rx,
            stdout_seen: Vec::new(),
            stderr: Some(stderr),
            stderr_rx,
            stderr_seen: Vec::new(),
        };
        t.wait_stderr("programs attached");
        t
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a stderr line containing `needle` (within [`HANG_LIMIT`]); returns it.
    pub fn wait_stderr(&mut self, needle: &str) -> String {
        if let Some(l) = self.stderr_seen.iter().find(|l| l.contains(needle)) {
            return l.clone();
        }
        let deadline = Instant::now() + HANG_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr_rx.recv_timeout(left) {
                Ok(line) => {
                    self.stderr_seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => {
                    panic!("no stderr line with {needle:?} within {HANG_LIMIT:?}: {:?}", self.stderr_seen)
                }
            }
        }
    }

    /// Reads the stderr lines printed from now on until `done` says so (within
    /// [`HANG_LIMIT`]); fails naming `what` otherwise.
    pub fn wait_stderr_until(&mut self, what: &str, mut done: impl FnMut(&str) -> bool) {
        let deadline = Instant::now() + HANG_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr_rx.recv_timeout(left) {
                Ok(line) => {
                    let enough = done(&line);
                    self.stderr_seen.push(line);
                    if enough {
                        return;
                    }
                }
                Err(_) => panic!("{what}: not within {HANG_LIMIT:?}; stderr: {:?}", self.stderr_seen),
            }
        }
    }

    /// Waits for a stdout line (within [`HANG_LIMIT`]) for which `done` holds; returns it.
    /// The lines stay in what [`Tracer::stop_lines`] returns.
    pub fn wait_stdout(&mut self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + HANG_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout_rx.recv_timeout(left) {
                Ok(line) => {
                    self.stdout_seen.push(line.clone());
                    if done(&line) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "{what}: no such stdout line within {HANG_LIMIT:?}; stderr: {:?}",
                    self.stderr_seen
                ),
            }
        }
    }

    /// Sends `signal` to the tracer (our own child, by pid).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// Ctrl-C (SIGINT), then the events of `trace --json`, typed: (events, stderr lines).
    pub fn stop(self) -> (Vec<Event>, Vec<String>) {
        let (lines, stderr) = self.stop_lines();
        let events = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not an event: {l:?}: {e}")))
            .collect();
        (events, stderr)
    }

    /// Ctrl-C (SIGINT), then every JSON line it printed (another view's `--json`).
    pub fn stop_json(self) -> (Vec<Value>, Vec<String>) {
        let (lines, stderr) = self.stop_lines();
        let values = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
            .collect();
        (values, stderr)
    }

    /// Ctrl-C (SIGINT), then everything it printed as it printed it: (stdout lines,
    /// stderr lines). The tracer must exit 0.
    ///
    /// No wait before the signal: every outcome a test counts happened before the lab's
    /// client returned (a server's child is established before it answers; a connect fails
    /// before connect() returns), so its event is in the ring buffer, and at a stop the
    /// views read once more what the kernel had written (`Session::on_each_wakeup`).
    pub fn stop_lines(self) -> (Vec<String>, Vec<String>) {
        self.stop_lines_with(libc::SIGINT)
    }

    /// [`Tracer::stop_lines`], stopped by `signal` (SIGTERM, SIGHUP) instead of SIGINT.
    pub fn stop_lines_with(self, signal: i32) -> (Vec<String>, Vec<String>) {
        let (status, lines, stderr) = self.stop_with_status(signal);
        assert!(status.success(), "tracer exited with {status}; stderr: {stderr:?}");
        (lines, stderr)
    }

    /// Stopped by `signal`: how it exited, whatever that was, and (stdout lines, stderr
    /// lines).
    pub fn stop_with_status(mut self, signal: i32) -> (std::process::ExitStatus, Vec<String>, Vec<String>) {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, signal) };
        let status = wait_exit(&mut self.child, &format!("the tracer, after signal {signal}"));
        // Each pump ends with its pipe: every line is in its channel once it is joined (a
        // wait for the stderr lines to come had lost the closing summary when the pump was
        // not scheduled within it, on a loaded machine).
        self.stdout.take().unwrap().join().unwrap();
        let mut lines = std::mem::take(&mut self.stdout_seen);
        lines.extend(self.stdout_rx.try_iter());
        if let Some(pump) = self.stderr.take() {
            pump.join().unwrap();
        }
        self.stderr_seen.extend(self.stderr_rx.try_iter());
        (status, lines, self.stderr_seen.clone())
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if self.stdout.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A tracer's closing summary, as data: the JSON object it says on stderr under `--json`
/// or `--json-summary` (`tfo_trace::live::closing::Closing`: `events`, `events_lost`,
/// `counted`, `unread`, `hook_runs_missed`, `connects_unfollowed`, `outcomes_uncounted`,
/// `unnamed`, `malformed`, `recorded_to`, `stalled` for `stalls`, `kernel_counted`).
pub fn closing(stderr: &[String]) -> Option<Value> {
    stderr
        .iter()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["tfo_trace_closing"] == 1)
}

/// The backend a tracer ran with, from its "attached with the X backend" line.
pub fn backend_of(stderr: &[String]) -> tfo_trace::probes::Backend {
    use tfo_trace::probes::Backend;
    let line = stderr.iter().find(|l| l.contains("programs attached")).expect("attach line");
    Backend::ALL
        .into_iter()
        .find(|b| line.contains(&format!("with the {b} backend")))
        .unwrap_or_else(|| panic!("no backend named in {line:?}"))
}

/// Whether that backend reports (role, outcome), for a check that runs either way (one
/// expectation where it sees it, another where it does not).
pub fn sees(stderr: &[String], role: Role, outcome: Outcome) -> bool {
    tfo_trace::backends::sees(backend_of(stderr), role, outcome)
}

/// Whether that backend reports (role, outcome), to guard the checks that need it: where
/// it does not, records the checks skipped as a partial skip (the harness reports it).
pub fn visible(stderr: &[String], role: Role, outcome: Outcome) -> bool {
    let seen = sees(stderr, role, outcome);
    if !seen {
        let backend = backend_of(stderr);
        partial_skip(format!("{} {} is not visible to the {backend} backend", role.name(), outcome.name()));
    }
    seen
}

/// Events of one role in one namespace with one outcome.
pub fn count(events: &[Event], netns: u32, role: Role, outcome: Outcome) -> u64 {
    events.iter().filter(|e| e.netns == netns && e.role == role && e.outcome == outcome).count() as u64
}

/// Events of one role in one namespace with one outcome.
pub fn with_outcome(events: &[Event], netns: u32, role: Role, outcome: Outcome) -> Vec<&Event> {
    events.iter().filter(|e| e.netns == netns && e.role == role && e.outcome == outcome).collect()
}

/// Events of one role in one namespace.
pub fn of_role(events: &[Event], netns: u32, role: Role) -> Vec<&Event> {
    events.iter().filter(|e| e.netns == netns && e.role == role).collect()
}

/// What a plain lab run (a cookie request, then TFO connections) must give, against the
/// kernel's counters of the lab's namespaces: client accepted = TcpExtTCPFastOpenActive,
/// client cookie requests = the server's TcpExtTCPFastOpenCookieReqd, server accepted =
/// TcpExtTCPFastOpenPassive; every client event names the client's process (`pid`).
pub fn assert_traced_exactly(events: &[Event], lab: &Lab, counters: &Deltas<'_>, pid: u32) {
    let (cli_ns, srv_ns) = (netns_inode(lab, Side::Client), netns_inode(lab, Side::Server));
    let (dc, ds) = counters.both();
    let client = |outcome| count(events, cli_ns, Role::Client, outcome);
    assert_eq!(client(Outcome::Accepted), dc.get("TcpExtTCPFastOpenActive"), "client counters: {dc:?}");
    assert_eq!(client(Outcome::CookieRequested), ds.get("TcpExtTCPFastOpenCookieReqd"), "{ds:?}");
    let passive = ds.get("TcpExtTCPFastOpenPassive");
    assert_eq!(count(events, srv_ns, Role::Server, Outcome::Accepted), passive, "{ds:?}");
    for e in events.iter().filter(|e| e.netns == cli_ns) {
        assert_eq!(e.pid, pid, "{e:?}");
    }
}

/// Each event's outcome, of one role in one namespace: what a failed assertion shows.
pub fn outcomes(events: &[Event], netns: u32, role: Role) -> Vec<Outcome> {
    of_role(events, netns, role).iter().map(|e| e.outcome).collect()
}

#[allow(unused)]
pub fn read_all(mut r: impl Read) -> String {
    let mut s = String::new();
    let _ = r.read_to_string(&mut s);
    s
}

/// Waits for `child` to exit by itself ([`eventually`]'s rule); past it, kills it and
/// fails the test naming `what` did not exit.
pub fn wait_exit(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let exited = wait::within(HANG_LIMIT, || child.try_wait().expect("waiting for a child").ok_or(()));
    exited.unwrap_or_else(|()| {
        let _ = child.kill();
        panic!("{what} did not exit within {HANG_LIMIT:?}");
    })
}

/// A TCP port free on loopback now (the kernel's choice).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// HTTP/1.0 GET (so no chunked answer): (status, body).
pub fn http_get(addr: std::net::SocketAddr, target: &str) -> std::io::Result<(u16, String)> {
    use std::io::Write as _;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = Vec::new();
    match s.read_to_end(&mut raw) {
        // A server that answers and closes with part of the request unread (plain HTTP to
        // a TLS port) resets after its answer: what came before the reset is the answer.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => {
            other?;
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, body.to_string()))
}

/// The sum of every sample of `metric` whose labels contain all of `labels` (`k="v"`).
pub fn metric_sum(exposition: &str, metric: &str, labels: &[&str]) -> f64 {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (name, rest) = series.split_once('{').unwrap_or((series, ""));
            (name == metric && labels.iter().all(|w| rest.contains(w))).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}
