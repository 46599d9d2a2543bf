//! The TFO peers a lab runs: `lab-server` in the server namespace, `lab-client` in the
//! client's, each a child process of the `tfo-trace` binary, registered with its lab.
use std::io::{BufRead as _, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::{ChildStdin, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};

use super::{
    cmd,
    namespaces::Lab,
    registry::Proc,
    traffic::{ClientArgs, ConnResult, ServerArgs},
};

/// The arguments of one client run; the same struct the `lab-client` subcommand takes.
pub(crate) type ClientRunSpec = ClientArgs;
/// How long `start_server` waits for the child's `ready` line.
const SERVER_READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Extra time granted to a client run beyond its own worst case.
const CLIENT_WAIT_SLACK: Duration = Duration::from_secs(5);

impl Lab {
    /// Starts `exe lab-server` in the server namespace on server address `addr_index`
    /// and waits for it to listen. 64-byte replies, 300 s lifetime at most.
    pub fn start_server(
        &self,
        exe: &Path,
        addr_index: usize,
        port: u16,
        tfo_queue: u32,
        v6: bool,
    ) -> Result<ServerHandle> {
        let listen = SocketAddr::new(self.server_addr(addr_index, v6)?, port);
        self.start_server_with(exe, &ServerArgs { tfo_queue, ..ServerArgs::new(listen) })
    }

    /// Starts `exe lab-server <args>` in the server namespace and waits for `ready`.
    pub fn start_server_with(&self, exe: &Path, args: &ServerArgs) -> Result<ServerHandle> {
        let mut c = cmd::in_netns(&self.server_ns, exe);
        c.arg("lab-server").args(args.to_cli_args());
        cmd::join_cgroup_at_spawn(&mut c, args.cgroup.as_deref())?;
        let line = cmd::display(&c);
        // stdin is a pipe we hold: if this process dies, the server sees EOF and exits.
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut proc = Proc::spawn(self.id, &mut c).with_context(|| format!("starting `{line}`"))?;
        let stdin = proc.child.stdin.take();
        let stderr = proc.child.stderr.take().map(|e| cmd::collect(e, 64 * 1024));
        let stdout = proc.child.stdout.take().ok_or_else(|| anyhow!("`{line}`: no stdout pipe"))?;

        // Lines go through a channel so the wait for `ready` can time out; the thread
        // keeps draining stdout afterwards.
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                let _ = tx.send(l);
            }
        });
        let deadline = Instant::now() + SERVER_READY_TIMEOUT;
        let mut handle = ServerHandle { proc, addr: args.listen, _stdin: stdin, stderr };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l.trim() == "ready" => return Ok(handle),
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    handle.proc.kill();
                    bail!("`{line}` not ready after {SERVER_READY_TIMEOUT:?}: {}", handle.stderr_text());
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = handle.proc.wait_bounded(Duration::from_secs(2));
                    bail!("`{line}` exited before ready ({status}): {}", handle.stderr_text());
                }
            }
        }
    }

    /// Runs `exe lab-client` in the client namespace to completion and parses its output.
    pub fn run_client(&self, exe: &Path, spec: &ClientRunSpec) -> Result<ClientRun> {
        let child = self.spawn_client(exe, spec)?;
        child.wait(spec.worst_case() + CLIENT_WAIT_SLACK)
    }

    /// Starts `exe lab-client` in the client namespace in the background. `spec.dst` must
    /// be one of this lab's server addresses (an IPv4 one may be given IPv4-mapped: the
    /// client then connects from an IPv6 socket, as a dual-stack program does).
    pub fn spawn_client(&self, exe: &Path, spec: &ClientRunSpec) -> Result<ClientChild> {
        let all: Vec<IpAddr> = self.server_addrs(false).into_iter().chain(self.server_addrs(true)).collect();
        if !all.contains(&spec.dst.ip().to_canonical()) {
            bail!("client destination {} is not a server address of this lab ({all:?})", spec.dst);
        }
        let mut c = cmd::in_netns(&self.client_ns, exe);
        c.arg("lab-client").args(spec.to_cli_args());
        cmd::join_cgroup_at_spawn(&mut c, spec.cgroup.as_deref())?;
        let line = cmd::display(&c);
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut proc = Proc::spawn(self.id, &mut c).with_context(|| format!("starting `{line}`"))?;
        let stdout = proc.child.stdout.take().map(|o| cmd::collect(o, 64 << 20));
        let stderr = proc.child.stderr.take().map(|e| cmd::collect(e, 64 * 1024));
        Ok(ClientChild { proc, line, stdout, stderr })
    }
}

/// A running `lab-server`; dropping it kills the server (by pid) and waits for it.
#[derive(Debug)]
pub struct ServerHandle {
    proc: Proc,
    addr: SocketAddr,
    /// Held open: the server exits when it closes.
    _stdin: Option<ChildStdin>,
    stderr: Option<JoinHandle<String>>,
}

impl ServerHandle {
    /// The server's pid (ip netns exec execs, so this is the lab-server process itself).
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the server and returns what it wrote to stderr.
    pub fn stop(mut self) -> String {
        self.proc.kill();
        self.stderr_text()
    }

    fn stderr_text(&mut self) -> String {
        // Only called once the process is dead, so the pipe is closed and join returns.
        self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default().trim().to_string()
    }
}

/// The outcome of one `lab-client` run.
#[derive(Debug, Clone)]
pub struct ClientRun {
    /// The pid of the client process (the one whose sockets the tracer sees).
    pub pid: u32,
    pub results: Vec<ConnResult>,
    pub stderr: String,
}

impl ClientRun {
    pub fn ok_count(&self) -> usize {
        self.results.iter().filter(|r| r.ok).count()
    }
}

/// A `lab-client` running in the background; dropping it kills it (by pid).
#[derive(Debug)]
pub struct ClientChild {
    proc: Proc,
    line: String,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

impl ClientChild {
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// True once the client has exited (it is then reaped).
    pub fn has_exited(&mut self) -> Result<bool> {
        Ok(self.proc.try_wait()?.is_some())
    }

    /// Waits at most `timeout` for the client to finish (killing it after that) and
    /// parses its per-connection lines.
    pub fn wait(mut self, timeout: Duration) -> Result<ClientRun> {
        let pid = self.pid();
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(st) = self.proc.try_wait()? {
                break st;
            }
            if Instant::now() >= deadline {
                self.proc.kill();
                let err = cmd::join_text(&mut self.stderr);
                bail!("`{}` still running after {timeout:?}, killed: {err}", self.line);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let out = cmd::join_text(&mut self.stdout);
        let stderr = cmd::join_text(&mut self.stderr);
        if !status.success() {
            bail!("`{}` failed ({status}): {}", self.line, stderr.trim());
        }
        let results = out
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str::<ConnResult>(l).with_context(|| format!("bad client line {l:?}")))
            .collect::<Result<Vec<_>>>()?;
        Ok(ClientRun { pid, results, stderr })
    }

    /// Kills the client (by pid) and reaps it.
    pub fn kill(mut self) {
        self.proc.kill();
    }
}
