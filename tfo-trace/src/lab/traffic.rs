//! The lab's TFO peers: the bodies of the hidden `tfo-trace lab-server` and
//! `tfo-trace lab-client` subcommands. They run as separate processes inside the lab's
//! namespaces so that the tracer sees real pids, and they use the kernel's TFO for real
//! (`TCP_FASTOPEN` on the listener, `sendto(MSG_FASTOPEN)` or `TCP_FASTOPEN_CONNECT` on the
//! client). Every loop is bounded in count and time.
use std::io::{self, BufRead as _, Read, Write};
use std::mem;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::sock::{
    family_of, new_socket, sendto_fastopen, set_tfo_key, setsockopt_int, sockaddr, tfo_listener,
};
use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

// The kernel ABI values (include/uapi/linux/tcp.h, socket.h); spelled out so a reader can
// check them against the kernel rather than against libc.
const TCP_FASTOPEN: libc::c_int = 23;
const TCP_FASTOPEN_CONNECT: libc::c_int = 30;
const _: () = assert!(TCP_FASTOPEN == libc::TCP_FASTOPEN);
const _: () = assert!(TCP_FASTOPEN_CONNECT == libc::TCP_FASTOPEN_CONNECT);

/// How long the server gives one accepted connection (read, reply, drain) before dropping it.
const SERVER_CONN_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the accept loop wakes up to check its deadline and stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(200);
/// Above this many connections in flight the server handles them inline (no new threads).
const MAX_SERVER_THREADS: usize = 64;

/// Arguments of `tfo-trace lab-server`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ServerArgs {
    /// Address to listen on, e.g. 198.18.0.2:8080, 0.0.0.0:8080 or [::]:8080.
    #[arg(long)]
    pub listen: SocketAddr,
    /// TFO queue length set with setsockopt(TCP_FASTOPEN); 0 leaves TFO off on the listener.
    #[arg(long, default_value_t = 0)]
    pub tfo_queue: u32,
    /// Bytes written back on every connection.
    #[arg(long, default_value_t = 64)]
    pub reply_bytes: usize,
    /// The server exits after this many seconds at most.
    #[arg(long, default_value_t = 300)]
    pub max_seconds: u64,
    /// An IPv6 listener that takes IPv6 only (IPV6_V6ONLY), so that an IPv4 one can share
    /// its port, as `[::]:80` and `0.0.0.0:80` of many servers do. Without it an IPv6
    /// listener is dual-stack (IPV6_V6ONLY 0, whatever net.ipv6.bindv6only says): `[::]:80`
    /// takes IPv4 too, its children holding the clients' addresses IPv4-mapped.
    #[arg(long)]
    pub v6_only: bool,
    /// The listener's own TFO key (setsockopt TCP_FASTOPEN_KEY), 32 hex digits, instead of
    /// the namespace's: two listeners with different keys behind one address make a fleet
    /// that does not share its key.
    #[arg(long, value_name = "HEX", value_parser = parse_tfo_key)]
    pub tfo_key: Option<[u8; 16]>,
    /// Write the reply first, before reading anything: a banner, as SMTP and FTP servers
    /// send, so a client reads before it writes (its TFO SYN carries no data).
    #[arg(long)]
    pub speaks_first: bool,
    /// listen()'s backlog: the accept queue holds one more than this before the kernel
    /// drops SYNs (tcp_conn_request(): sk_acceptq_is_full(), TcpExtListenOverflows).
    #[arg(long, default_value_t = 128)]
    pub backlog: u32,
    /// Accept nothing for this long after `ready`: connections wait in the accept queue, as
    /// they do at a server too busy to accept() (with --backlog, a full accept queue).
    #[arg(long, default_value_t = 0)]
    pub hold_accepts_ms: u64,
    /// Close each connection as soon as the reply is written (HTTP/1.0 style), where the
    /// default shuts down its writing side and reads to the client's end. A TFO child closed
    /// before the client's ACK leaves SYN_RECV for FIN_WAIT1 at once (shutdown() in SYN_RECV
    /// does nothing: tcp_shutdown()).
    #[arg(long)]
    pub close_after_reply: bool,
    /// A cgroup v2 directory the lab starts the server in (tests of container attribution).
    #[arg(skip)]
    pub cgroup: Option<PathBuf>,
}

/// 32 hex digits: the 16 bytes of a TFO key.
fn parse_tfo_key(s: &str) -> Result<[u8; 16], String> {
    let bad = || format!("a TFO key is 32 hex digits, not {s:?}");
    if s.len() != 32 || !s.is_ascii() {
        return Err(bad());
    }
    let mut key = [0u8; 16];
    for (i, b) in key.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(key)
}

impl ServerArgs {
    pub fn new(listen: SocketAddr) -> Self {
        ServerArgs {
            listen,
            tfo_queue: 0,
            reply_bytes: 64,
            max_seconds: 300,
            v6_only: false,
            tfo_key: None,
            speaks_first: false,
            backlog: 128,
            hold_accepts_ms: 0,
            close_after_reply: false,
            cgroup: None,
        }
    }

    /// The flags of `tfo-trace lab-server` that reproduce these arguments.
    pub(crate) fn to_cli_args(&self) -> Vec<String> {
        let mut args = vec![
            "--listen".into(),
            self.listen.to_string(),
            "--tfo-queue".into(),
            self.tfo_queue.to_string(),
            "--reply-bytes".into(),
            self.reply_bytes.to_string(),
            "--max-seconds".into(),
            self.max_seconds.to_string(),
        ];
        if self.v6_only {
            args.push("--v6-only".into());
        }
        if let Some(key) = &self.tfo_key {
            args.push("--tfo-key".into());
            args.push(key.iter().map(|b| format!("{b:02x}")).collect());
        }
        if self.speaks_first {
            args.push("--speaks-first".into());
        }
        if self.backlog != 128 {
            args.extend(["--backlog".into(), self.backlog.to_string()]);
        }
        if self.hold_accepts_ms > 0 {
            args.extend(["--hold-accepts-ms".into(), self.hold_accepts_ms.to_string()]);
        }
        if self.close_after_reply {
            args.push("--close-after-reply".into());
        }
        args
    }
}

/// How the client asks the kernel for TFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ClientMode {
    /// `sendto(MSG_FASTOPEN)` on a fresh socket: connect and data in one call.
    MsgFastopen,
    /// `setsockopt(TCP_FASTOPEN_CONNECT)`, `connect()`, then `write()`: the kernel defers
    /// the SYN until the first write when it has a cookie.
    FastopenConnect,
    /// A plain `connect()`, then `write()`: no TFO (the B side of an A/B comparison).
    Plain,
}

impl ClientMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientMode::MsgFastopen => "msg-fastopen",
            ClientMode::FastopenConnect => "fastopen-connect",
            ClientMode::Plain => "plain",
        }
    }
}

impl std::fmt::Display for ClientMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Arguments of `tfo-trace lab-client`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ClientArgs {
    /// Server address, e.g. 198.18.0.2:8080 or [fd00:7f0::2]:8080.
    #[arg(long)]
    pub dst: SocketAddr,
    /// Number of connections, one after another.
    #[arg(long, default_value_t = 1)]
    pub count: u32,
    #[arg(long, value_enum, default_value_t = ClientMode::MsgFastopen)]
    pub mode: ClientMode,
    /// Bytes sent on every connection (in the SYN when the kernel has a cookie).
    #[arg(long, default_value_t = 64)]
    pub payload_bytes: usize,
    /// Pause between connections.
    #[arg(long, default_value_t = 0)]
    pub interval_ms: u64,
    /// Upper bound for one connection (connect, send, reply); at least 1.
    #[arg(long, default_value_t = 5000)]
    pub timeout_ms: u64,
    /// A cgroup v2 directory the lab starts the client in (tests of container attribution).
    #[arg(skip)]
    pub cgroup: Option<PathBuf>,
    /// Resolve this name first, as `--resolver` says, and refuse to run unless --dst's
    /// address is among its answers (tests of `--names`).
    #[arg(long, value_name = "NAME")]
    pub resolve: Option<String>,
    #[arg(long, value_enum, default_value_t = super::dns::Resolver::Libc)]
    pub resolver: super::dns::Resolver,
    /// Connect from a thread of this name (prctl(PR_SET_NAME), at most 15 bytes), as a
    /// multi-threaded server's workers do; the process keeps its own name.
    #[arg(long, value_name = "NAME")]
    pub thread_name: Option<String>,
    /// Bind every socket to this local address first (one of the client's addresses): a
    /// multi-homed host's connection from its second address.
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// Instead of `--count` connections one after another, this many at once from
    /// non-blocking sockets (sendto(MSG_FASTOPEN) returns as the SYN leaves, as a browser's
    /// or an event loop's), with `--burst-threads` blocking ones, each from a thread of its
    /// own, all released together: SYN-data in flight together, as a pool opens them.
    #[arg(long, default_value_t = 0)]
    pub burst_nonblocking: u32,
    #[arg(long, default_value_t = 0)]
    pub burst_threads: u32,
}

impl ClientArgs {
    pub fn new(dst: SocketAddr) -> Self {
        ClientArgs {
            dst,
            count: 1,
            mode: ClientMode::MsgFastopen,
            payload_bytes: 64,
            interval_ms: 0,
            timeout_ms: 5000,
            cgroup: None,
            resolve: None,
            resolver: super::dns::Resolver::Libc,
            thread_name: None,
            bind: None,
            burst_nonblocking: 0,
            burst_threads: 0,
        }
    }

    /// The flags of `tfo-trace lab-client` that reproduce these arguments.
    pub(crate) fn to_cli_args(&self) -> Vec<String> {
        vec![
            "--dst".into(),
            self.dst.to_string(),
            "--count".into(),
            self.count.to_string(),
            "--mode".into(),
            self.mode.as_str().into(),
            "--payload-bytes".into(),
            self.payload_bytes.to_string(),
            "--interval-ms".into(),
            self.interval_ms.to_string(),
            "--timeout-ms".into(),
            self.timeout_ms.to_string(),
        ]
        .into_iter()
        .chain(self.resolve.iter().flat_map(|name| {
            ["--resolve".into(), name.clone(), "--resolver".into(), self.resolver.as_str().into()]
        }))
        .chain(self.thread_name.iter().flat_map(|name| ["--thread-name".into(), name.clone()]))
        .chain(self.bind.iter().flat_map(|a| ["--bind".into(), a.to_string()]))
        .chain(
            (self.burst() > 0)
                .then(|| {
                    [
                        "--burst-nonblocking".into(),
                        self.burst_nonblocking.to_string(),
                        "--burst-threads".into(),
                        self.burst_threads.to_string(),
                    ]
                })
                .into_iter()
                .flatten(),
        )
        .collect()
    }

    /// Connections of a burst (`--burst-nonblocking` and `--burst-threads`); 0: none.
    pub fn burst(&self) -> u32 {
        self.burst_nonblocking.saturating_add(self.burst_threads)
    }

    /// The longest the whole run can take if every connection hits its timeout.
    pub fn worst_case(&self) -> Duration {
        if self.burst() > 0 {
            // All at once; the non-blocking ones are finished one after another.
            let n = u64::from(self.burst_nonblocking).max(1);
            return Duration::from_millis(self.timeout_ms.saturating_mul(n));
        }
        let per = self.timeout_ms.saturating_add(self.interval_ms);
        Duration::from_millis(per.saturating_mul(u64::from(self.count)))
    }
}

/// One line of `lab-client` output: the fate of one connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnResult {
    /// Connection number, from 0.
    pub i: u32,
    /// Payload sent and the reply read to its end within the timeout.
    pub ok: bool,
    /// Local port (0 if the socket never got one).
    pub sport: u16,
    /// From socket() to close().
    pub elapsed_us: u64,
    /// From socket() to the reply's first byte: what the application waited for its answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_us: Option<u64>,
    /// Reply bytes received.
    #[serde(default)]
    pub rx_bytes: u64,
    /// What went wrong, when `ok` is false.
    pub error: Option<String>,
}

/// `tfo-trace lab-server`: a TFO listener answering every connection with `reply_bytes`.
///
/// Prints `ready` once listening. Stops after `max_seconds`, on SIGTERM (default action),
/// or when stdin is a pipe and its writer closes it (so the server dies with the lab that
/// started it even if that process is killed).
pub fn run_server(args: &ServerArgs) -> Result<()> {
    if args.max_seconds == 0 {
        bail!("--max-seconds must be at least 1");
    }
    let listener =
        tfo_listener(args.listen, args.tfo_queue, backlog_of(args.backlog), ACCEPT_POLL, args.v6_only)?;
    if let Some(key) = &args.tfo_key {
        set_tfo_key(&listener, key).context("setsockopt(TCP_FASTOPEN_KEY)")?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    watch_stdin_pipe(Arc::clone(&stop));

    let mut out = io::stdout().lock();
    writeln!(out, "ready").and_then(|()| out.flush()).context("writing `ready` to stdout")?;
    drop(out);

    let deadline = Instant::now() + Duration::from_secs(args.max_seconds);
    let hold_until = Instant::now() + Duration::from_millis(args.hold_accepts_ms);
    while Instant::now() < hold_until.min(deadline) && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(ACCEPT_POLL.min(hold_until.saturating_duration_since(Instant::now())));
    }
    let reply: Arc<[u8]> = pattern(args.reply_bytes).into();
    let (speaks_first, close) = (args.speaks_first, args.close_after_reply);
    let in_flight = Arc::new(AtomicUsize::new(0));
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        let stream = match listener.accept() {
            Ok((s, _peer)) => s,
            // SO_RCVTIMEO on the listener makes accept() return EAGAIN every ACCEPT_POLL.
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => continue,
            Err(e) => {
                // ECONNABORTED and the like: transient, the listener is still good.
                log::warn!("lab-server: accept: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if in_flight.load(Ordering::Relaxed) >= MAX_SERVER_THREADS {
            serve_one(stream, &reply, speaks_first, close);
            continue;
        }
        in_flight.fetch_add(1, Ordering::Relaxed);
        let (reply, in_flight) = (Arc::clone(&reply), Arc::clone(&in_flight));
        std::thread::spawn(move || {
            serve_one(stream, &reply, speaks_first, close);
            in_flight.fetch_sub(1, Ordering::Relaxed);
        });
    }
    Ok(())
}

/// listen()'s int: a backlog past i32::MAX is the kernel's cap anyway (somaxconn).
fn backlog_of(backlog: u32) -> i32 {
    i32::try_from(backlog).unwrap_or(i32::MAX)
}

/// Reads what the client sent (at least one byte or EOF; nothing when it `speaks_first`),
/// replies, then closes gracefully: shutdown(WR) and drain to EOF, so unread client data
/// never turns the close into a RST; or, with `close`, closes at once (the request read).
fn serve_one(mut s: TcpStream, reply: &[u8], speaks_first: bool, close: bool) {
    let deadline = Instant::now() + SERVER_CONN_TIMEOUT;
    let mut buf = vec![0u8; 64 * 1024];
    let result = (|| -> io::Result<()> {
        if !speaks_first {
            read_some(&mut s, &mut buf, deadline)?;
        }
        s.set_write_timeout(Some(remaining(deadline)?))?;
        s.write_all(reply)?;
        if close {
            return Ok(()); // dropped: close()
        }
        s.shutdown(Shutdown::Write)?;
        while read_some(&mut s, &mut buf, deadline)? > 0 {}
        Ok(())
    })();
    if let Err(e) = result {
        let peer = s.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        log::warn!("lab-server: connection from {peer}: {e}");
    }
}

/// `tfo-trace lab-client`: `count` TFO connections to `dst`, one JSON line each on stdout.
///
/// Failed connections are reported in their JSON line and do not fail the run; an error
/// is returned only for bad arguments or a broken stdout.
pub fn run_client(args: &ClientArgs) -> Result<()> {
    if args.timeout_ms == 0 {
        bail!("--timeout-ms must be at least 1 (0 would mean no timeout)");
    }
    if args.mode == ClientMode::FastopenConnect && args.payload_bytes == 0 {
        // With a cookie the kernel defers the SYN to the first write: no write, no SYN.
        bail!("--mode fastopen-connect needs --payload-bytes of at least 1");
    }
    if let Some(name) = &args.resolve {
        let found = super::dns::resolve(name, args.resolver, args.dst.is_ipv6())?;
        if !found.contains(&args.dst.ip()) {
            bail!("{name} resolved to {found:?}, not to {}", args.dst.ip());
        }
    }
    match &args.thread_name {
        None => connections(args),
        Some(name) => {
            let name = std::ffi::CString::new(name.as_str()).context("--thread-name: no NUL byte")?;
            if name.as_bytes().len() >= 16 {
                bail!("--thread-name: at most 15 bytes (the kernel's TASK_COMM_LEN)");
            }
            let worker = std::thread::scope(|s| {
                s.spawn(|| {
                    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes,
                    // and renames the calling thread only.
                    if unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) } != 0 {
                        return Err(io::Error::last_os_error()).context("prctl(PR_SET_NAME)");
                    }
                    connections(args)
                })
                .join()
            });
            worker.unwrap_or_else(|p| std::panic::resume_unwind(p))
        }
    }
}

/// `args.count` connections, one result line each, from the calling thread (or one burst
/// of them, [`burst`]).
fn connections(args: &ClientArgs) -> Result<()> {
    let payload = pattern(args.payload_bytes);
    let timeout = Duration::from_millis(args.timeout_ms);
    let mut out = io::stdout().lock();
    let mut write = |r: &ConnResult| -> Result<()> {
        let line = serde_json::to_string(r).context("encoding a result line")?;
        writeln!(out, "{line}").and_then(|()| out.flush()).context("writing to stdout")
    };
    if args.burst() > 0 {
        if args.mode != ClientMode::MsgFastopen {
            bail!("a burst is of sendto(MSG_FASTOPEN) connections (--mode msg-fastopen)");
        }
        return burst(args, &payload, timeout).iter().try_for_each(write);
    }
    for i in 0..args.count {
        if i > 0 && args.interval_ms > 0 {
            std::thread::sleep(Duration::from_millis(args.interval_ms));
        }
        write(&one_connection(i, args.dst, args.mode, &payload, timeout, args.bind))?;
    }
    Ok(())
}

/// `--burst-nonblocking` non-blocking and `--burst-threads` blocking connections, released
/// together (a barrier): every non-blocking SYN leaves from this thread, one sendto after
/// the other, each returning as its SYN is sent, while each thread's blocking sendto waits
/// for its SYN-ACK. Then the non-blocking ones are finished in turn (wait for the
/// handshake, send what the SYN did not carry, read the reply). Their results first, in
/// order, then the threads'.
fn burst(args: &ClientArgs, payload: &[u8], timeout: Duration) -> Vec<ConnResult> {
    let barrier = std::sync::Barrier::new(args.burst_threads as usize + 1);
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..args.burst_threads)
            .map(|t| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let i = args.burst_nonblocking + t;
                    one_connection(i, args.dst, ClientMode::MsgFastopen, payload, timeout, args.bind)
                })
            })
            .collect();
        barrier.wait();
        let started: Vec<_> = (0..args.burst_nonblocking)
            .map(|i| NonBlocking::start(i, args.dst, payload, timeout, args.bind))
            .collect();
        let mut results: Vec<ConnResult> = started.into_iter().map(|c| c.finish(payload)).collect();
        results
            .extend(threads.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))));
        results
    })
}

/// A non-blocking sendto(MSG_FASTOPEN) connection, its SYN sent: tcp_sendmsg_fastopen()
/// returns at once (EINPROGRESS, or the bytes the SYN carried) and frees the socket's TFO
/// request before its SYN-ACK comes.
struct NonBlocking {
    i: u32,
    start: Instant,
    deadline: Instant,
    sport: u16,
    socket: Result<(TcpStream, usize)>,
}

impl NonBlocking {
    fn start(
        i: u32,
        dst: SocketAddr,
        payload: &[u8],
        timeout: Duration,
        bind: Option<IpAddr>,
    ) -> NonBlocking {
        let start = Instant::now();
        let mut sport = 0;
        let socket = (|| -> Result<(TcpStream, usize)> {
            let s = new_socket(family_of(&dst))?;
            bind_to(&s, bind)?;
            s.set_nonblocking(true).context("O_NONBLOCK")?;
            let (sa, len) = sockaddr(&dst);
            let sent = match sendto_fastopen(&s, payload, &sa, len) {
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => 0,
                Err(e) => return Err(e).context("sendto(MSG_FASTOPEN|O_NONBLOCK)"),
            };
            sport = local_port(&s);
            Ok((s, sent))
        })();
        NonBlocking { i, start, deadline: start + timeout, sport, socket }
    }

    /// Waits for the handshake, sends the rest, reads the reply: blocking from here on.
    fn finish(self, payload: &[u8]) -> ConnResult {
        let NonBlocking { i, start, deadline, sport, socket } = self;
        let mut rx = (0u64, None);
        let result = socket.and_then(|(s, sent)| {
            s.set_nonblocking(false).context("O_NONBLOCK off")?;
            exchange(s, &payload[sent..], payload.is_empty(), start, deadline, &mut rx)
        });
        ConnResult::of(i, sport, start, rx, result)
    }
}

/// Binds `s` to `addr` (any port) where given.
fn bind_to(s: &TcpStream, addr: Option<IpAddr>) -> Result<()> {
    let Some(addr) = addr else { return Ok(()) };
    let (sa, len) = sockaddr(&SocketAddr::new(addr, 0));
    // SAFETY: valid fd and sockaddr of the given length.
    if unsafe { libc::bind(s.as_raw_fd(), (&sa as *const libc::sockaddr_storage).cast(), len) } != 0 {
        return Err(io::Error::last_os_error()).with_context(|| format!("bind {addr}"));
    }
    Ok(())
}

/// The rest of a connection once connecting is under way: writes `rest` (what the SYN did
/// not carry; shuts the write side where the payload is empty), then reads the reply to
/// its end; `rx` counts its bytes and the time to its first.
fn exchange(
    mut s: TcpStream,
    rest: &[u8],
    empty: bool,
    start: Instant,
    deadline: Instant,
    rx: &mut (u64, Option<u64>),
) -> Result<()> {
    s.set_write_timeout(Some(remaining(deadline)?)).context("setsockopt(SO_SNDTIMEO)")?;
    s.write_all(rest).context("write")?;
    if empty {
        // Nothing to send: say so, or the server waits for a first byte until timeout.
        s.shutdown(Shutdown::Write).context("shutdown(SHUT_WR)")?;
    }
    let mut buf = [0u8; 16 * 1024];
    loop {
        match read_some(&mut s, &mut buf, deadline).context("reading the reply")? {
            0 => return Ok(()),
            n => {
                rx.1.get_or_insert_with(|| micros_since(start));
                rx.0 += n as u64;
            }
        }
    }
}

fn one_connection(
    i: u32,
    dst: SocketAddr,
    mode: ClientMode,
    payload: &[u8],
    timeout: Duration,
    bind: Option<IpAddr>,
) -> ConnResult {
    let start = Instant::now();
    let deadline = start + timeout;
    let mut sport = 0;
    let mut rx = (0u64, None);
    let result = (|| -> Result<()> {
        let s = new_socket(family_of(&dst))?;
        bind_to(&s, bind)?;
        // Bounds connect (blocking connect and sendto(MSG_FASTOPEN) honour SO_SNDTIMEO).
        s.set_write_timeout(Some(remaining(deadline)?)).context("setsockopt(SO_SNDTIMEO)")?;
        let sent = match mode {
            ClientMode::MsgFastopen => {
                let (sa, len) = sockaddr(&dst);
                // The error (errno) is taken before local_port() makes another syscall.
                let sent = sendto_fastopen(&s, payload, &sa, len);
                sport = local_port(&s);
                sent.context("sendto(MSG_FASTOPEN)")?
            }
            ClientMode::FastopenConnect | ClientMode::Plain => {
                if mode == ClientMode::FastopenConnect {
                    setsockopt_int(&s, libc::IPPROTO_TCP, TCP_FASTOPEN_CONNECT, 1)
                        .context("setsockopt(TCP_FASTOPEN_CONNECT)")?;
                }
                let (sa, len) = sockaddr(&dst);
                // SAFETY: valid fd and sockaddr of the given length.
                let rc = unsafe {
                    libc::connect(s.as_raw_fd(), (&sa as *const libc::sockaddr_storage).cast(), len)
                };
                let err = (rc != 0).then(io::Error::last_os_error);
                sport = local_port(&s);
                if let Some(e) = err {
                    return Err(e).context("connect");
                }
                0
            }
        };
        exchange(s, &payload[sent..], payload.is_empty(), start, deadline, &mut rx)
    })();
    ConnResult::of(i, sport, start, rx, result)
}

impl ConnResult {
    /// Connection `i` from port `sport`, started at `start`, that received `rx` (its bytes
    /// and the time to the first) and ended with `result`.
    fn of(i: u32, sport: u16, start: Instant, rx: (u64, Option<u64>), result: Result<()>) -> ConnResult {
        ConnResult {
            i,
            ok: result.is_ok(),
            sport,
            elapsed_us: micros_since(start),
            first_byte_us: rx.1,
            rx_bytes: rx.0,
            error: result.err().map(|e| format!("{e:#}")),
        }
    }
}

fn micros_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

fn local_port(s: &TcpStream) -> u16 {
    s.local_addr().map(|a| a.port()).unwrap_or(0)
}

/// Time left before `deadline`, as an error once it has passed (a zero socket timeout
/// would mean "wait forever").
fn remaining(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_millis(1) {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "connection timeout reached"));
    }
    Ok(left)
}

/// One read bounded by `deadline`; 0 means EOF.
fn read_some(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
    loop {
        s.set_read_timeout(Some(remaining(deadline)?))?;
        match s.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "timed out waiting for data"))
            }
            r => return r,
        }
    }
}

/// What every payload and reply is made of, repeated: printable, so captures are readable,
/// and recognizable, so a test can tell that none of it left the kernel.
pub const PAYLOAD_PATTERN: &[u8] = b"tfo-lab:0123456789abcdef\n";

fn pattern(len: usize) -> Vec<u8> {
    PAYLOAD_PATTERN.iter().copied().cycle().take(len).collect()
}

/// Stops the server when stdin is a pipe whose writer (the lab) closes it. A terminal or
/// /dev/null on stdin is ignored, so running the server by hand works.
fn watch_stdin_pipe(stop: Arc<AtomicBool>) {
    // SAFETY: fstat on fd 0 with a zeroed out-buffer.
    let is_pipe = unsafe {
        let mut st: libc::stat = mem::zeroed();
        libc::fstat(0, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFIFO
    };
    if !is_pipe {
        return;
    }
    std::thread::spawn(move || {
        let mut stdin = io::stdin().lock();
        let mut line = String::new();
        // Any input is ignored; EOF or an error means the parent is gone.
        while matches!(stdin.read_line(&mut line), Ok(n) if n > 0) {
            line.clear();
        }
        stop.store(true, Ordering::Relaxed);
    });
}
