//! Shared by the kernel tests: the harness (skips reported as skips), skip rules, a
//! handle on a running `tfo-trace trace`, cgroups (`cgroups`) and private container
//! engines (`docker`).
#![allow(dead_code, unused_imports)]

pub mod cgroups;
pub mod docker;
pub mod harness;
pub use harness::skip;

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
use tfo_trace::lab::{Lab, Side};

/// How long a test waits for something that normally takes a second (a tracer attaching,
/// stopping, a line appearing) before calling it hung. Not a performance bound: under TCG
/// on a busy two-core machine the verifier alone has taken over 30 s, so the margin is wide.
pub const HANG_LIMIT: Duration = Duration::from_secs(240);

pub fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tfo-trace"))
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

/// Skips the calling test when the kernel tests cannot run here, with the reason; else
/// marks it a kernel test, which runs once more if it fails (`harness.rs` says why).
#[macro_export]
macro_rules! require_kernel {
    () => {
        if let Some(why) = common::skip_reason() {
            common::skip(why);
        }
        common::harness::uses_kernel();
    };
}

/// The inode that `netns` in events refers to, for one lab namespace.
pub fn netns_inode(lab: &Lab, side: Side) -> u32 {
    let path = format!("/run/netns/{}", lab.netns(side));
    std::fs::metadata(&path).unwrap_or_else(|e| panic!("stat {path}: {e}")).ino() as u32
}

/// A running `tfo-trace trace --json`, collecting its stdout.
pub struct Tracer {
    child: Child,
    stdout: Option<JoinHandle<Vec<String>>>,
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
        let mut child = cmd
            .args(args)
            .args(&backend)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .expect("spawning tfo-trace trace");
        let out = child.stdout.take().unwrap();
        let stdout =
            std::thread::spawn(move || BufReader::new(out).lines().map_while(Result::ok).collect::<Vec<_>>());
        let err = child.stderr.take().unwrap();
        let (tx, stderr_rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut t = Tracer { child, stdout: Some(stdout), stderr_rx, stderr_seen: Vec::new() };
        let deadline = Instant::now() + HANG_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match t.stderr_rx.recv_timeout(left) {
                Ok(line) => {
                    let attached = line.contains("programs attached");
                    t.stderr_seen.push(line);
                    if attached {
                        return t;
                    }
                }
                Err(_) => {
                    let _ = t.child.kill();
                    panic!("tracer did not attach within {HANG_LIMIT:?}; stderr: {:?}", t.stderr_seen);
                }
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (up to `timeout`) for a stderr line containing `needle`; returns it.
    pub fn wait_stderr(&mut self, needle: &str, timeout: Duration) -> String {
        if let Some(l) = self.stderr_seen.iter().find(|l| l.contains(needle)) {
            return l.clone();
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr_rx.recv_timeout(left) {
                Ok(line) => {
                    self.stderr_seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!("no stderr line with {needle:?} within {timeout:?}: {:?}", self.stderr_seen),
            }
        }
    }

    /// Sends `signal` to the tracer (our own child, by pid).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// Ctrl-C (SIGINT), then everything it printed: (events, stderr lines).
    pub fn stop(self) -> (Vec<Value>, Vec<String>) {
        let (lines, stderr) = self.stop_lines();
        let events = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
            .collect();
        (events, stderr)
    }

    /// Ctrl-C (SIGINT), then everything it printed as it printed it: (stdout lines,
    /// stderr lines). The tracer must exit 0.
    pub fn stop_lines(mut self) -> (Vec<String>, Vec<String>) {
        // Let events of connections that just finished reach the ring buffer reader.
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = wait_exit(&mut self.child, "the tracer, after SIGINT");
        let lines = self.stdout.take().unwrap().join().unwrap();
        while let Ok(l) = self.stderr_rx.recv_timeout(Duration::from_millis(200)) {
            self.stderr_seen.push(l);
        }
        assert!(status.success(), "tracer exited with {status}; stderr: {:?}", self.stderr_seen);
        (lines, self.stderr_seen.clone())
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
/// or `--json-summary` (`tfo_trace::views::closing::Closing`: `events`, `events_lost`,
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

/// Whether that backend reports (role, outcome): tests assert only what it can see,
/// and say what they skipped.
pub fn visible(
    stderr: &[String],
    role: tfo_trace::events::Role,
    outcome: tfo_trace::events::Outcome,
) -> bool {
    let backend = backend_of(stderr);
    let seen = tfo_trace::probes::table::sees(backend, role, outcome);
    if !seen {
        eprintln!("not checked: {} {} is not visible to the {backend} backend", role.name(), outcome.name());
    }
    seen
}

/// Events of one role in one namespace with one outcome.
pub fn count(events: &[Value], netns: u32, role: &str, outcome: &str) -> u64 {
    events.iter().filter(|e| e["netns"] == netns && e["role"] == role && e["outcome"] == outcome).count()
        as u64
}

/// Whether a JSON event is the one that ends a connection's story: counting these counts
/// connections, as every view does ([`tfo_trace::events::Outcome::ends_connection`]).
pub fn ends_connection(e: &Value) -> bool {
    serde_json::from_value::<tfo_trace::events::Outcome>(e["outcome"].clone())
        .unwrap_or_else(|err| panic!("no outcome in {e}: {err}"))
        .ends_connection()
}

pub fn of_role<'a>(events: &'a [Value], netns: u32, role: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["netns"] == netns && e["role"] == role).collect()
}

#[allow(unused)]
pub fn read_all(mut r: impl Read) -> String {
    let mut s = String::new();
    let _ = r.read_to_string(&mut s);
    s
}

/// Waits for `child` to exit by itself, at most [`HANG_LIMIT`]; past it, kills it and
/// fails the test naming `what` did not exit.
pub fn wait_exit(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + HANG_LIMIT;
    loop {
        if let Some(s) = child.try_wait().expect("waiting for a child") {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not exit within {HANG_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
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
    s.read_to_end(&mut raw)?;
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
