//! `tfo-trace lab-load` (hidden): a TCP Fast Open connection-rate generator for
//! `cargo xtask bench`. One process holds both ends: a TCP_FASTOPEN listener on
//! loopback served by threads of its own, and client threads looping over
//! socket / sendto(MSG_FASTOPEN) / read to EOF / close. Run it inside a network
//! namespace made for it (`ip netns exec NS ...`, with `net.ipv4.tcp_fastopen=3` there):
//! the listener is on that namespace's loopback, so no packet goes anywhere else.
//!
//! Bounded in count (`--count`) AND time (`--duration`); prints one JSON object with the
//! connections per second and the namespace's own TFO counter deltas (TcpExtTCPFastOpen*),
//! which prove the connections really carried data in their SYN.
//!
//! Closing: the server replies and closes first; the client reads to EOF and closes with
//! SO_LINGER 0 (a RST), unless `--fin`. That leaves no TIME_WAIT socket on either side, so the rate does
//! not drift down as TIME_WAIT sockets pile up over a benchmark (nor overflow
//! `tcp_max_tw_buckets`), and the client's ephemeral ports never run out.
use std::io::{self, Read as _, Write as _};
use std::mem;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::sock::{new_socket, sendto_fastopen, sockaddr, tfo_listener};
use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use crate::kernel::netstat::Netstat;

/// Upper bound for one connection's reads and writes: a stuck peer cannot hang the run.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a blocked accept() wakes up to check the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(100);
const MAX_THREADS: u32 = 64;

/// Arguments of `tfo-trace lab-load`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct LoadArgs {
    /// Loopback address to listen on and connect to (127.0.0.1:PORT or [::1]:PORT).
    #[arg(long, default_value = "127.0.0.1:8099")]
    pub listen: SocketAddr,
    /// Client threads (each one connection at a time); as many server threads accept.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_THREADS as i64))]
    pub threads: u32,
    /// Target connections per second over all threads; 0 = as fast as possible.
    #[arg(long, default_value_t = 0)]
    pub rate: u32,
    /// Stop after this many connections.
    #[arg(long, default_value_t = 10_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: u64,
    /// Stop after this long (e.g. 3s, 500ms).
    #[arg(long, default_value = "3s", value_parser = crate::units::parse_duration)]
    pub duration: Duration,
    /// Bytes the client sends (in the SYN once it has a cookie).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1400))]
    pub payload_bytes: u32,
    /// Bytes the server replies.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub reply_bytes: u32,
    /// TFO queue length of the listener (setsockopt TCP_FASTOPEN).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub tfo_queue: u32,
    /// Plain TCP connections (connect, write, read, close) instead of TFO ones: what
    /// almost every connection on a busy host is.
    #[arg(long)]
    pub plain: bool,
    /// The client closes with a FIN, not a RST: a healthy close at both ends, as
    /// tests/integration/plain_cost.rs makes (`bench --vm` counts the programs such a
    /// connection runs). The server's sockets then wait in TIME_WAIT: for short runs.
    #[arg(long)]
    pub fin: bool,
    /// Listeners on consecutive ports from --listen's, bound to every address (socket churn).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20_000))]
    pub listeners: u32,
    /// Distinct destinations (address, port) the clients cycle through: the listeners'
    /// ports on as many addresses of 10.0.0.0/8 as it takes, which the namespace must route
    /// to itself (`ip route add local 10.0.0.0/8 dev lo`). 1: --listen only.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub destinations: u32,
}

impl LoadArgs {
    /// Where connection number `i` goes.
    fn destination(&self, i: u64) -> SocketAddr {
        if self.destinations <= 1 {
            return SocketAddr::new(self.listen.ip(), self.port(i));
        }
        let d = i % u64::from(self.destinations);
        // Consecutive destinations share an address and differ in port, so the few
        // addresses (and their TFO cookies) are reused across many listeners.
        let host = (d / u64::from(self.listeners)) as u32 + 1;
        let addr = std::net::Ipv4Addr::from((10u32 << 24) | host);
        SocketAddr::new(addr.into(), self.port(d))
    }

    fn port(&self, i: u64) -> u16 {
        self.listen.port() + (i % u64::from(self.listeners)) as u16
    }
}

/// The JSON line `lab-load` prints.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Connections that sent their payload and read the whole reply.
    pub connections: u64,
    pub failed: u64,
    pub seconds: f64,
    pub(crate) connections_per_s: f64,
    pub threads: u32,
    /// `--rate` (0: unthrottled).
    pub(crate) target_rate: u32,
    /// Deltas of this namespace's counters over the run: TFO SYN-data accepted by the
    /// server (Passive) and acknowledged to the client (Active).
    pub(crate) tfo_passive: u64,
    pub tfo_active: u64,
    pub(crate) tfo_active_fail: u64,
    /// The first error a client hit, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) first_error: Option<String>,
    /// CPU time of this process (clients and server, with the kernel work done in their
    /// context: the TCP stack and the tracer's programs) over the run.
    pub(crate) cpu_user_s: f64,
    pub(crate) cpu_sys_s: f64,
}

/// (user, system) CPU seconds of this process so far.
fn cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage fills a zeroed struct it is given.
    let mut u: libc::rusage = unsafe { mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(u.ru_utime), s(u.ru_stime))
}

/// Thousands of listeners need more than the usual 1024 fds: the soft limit goes up to what
/// is needed, within the hard limit.
fn raise_nofile_limit(wanted: u64) {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < wanted {
            r.rlim_cur = wanted.min(r.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

pub fn run(args: &LoadArgs) -> Result<()> {
    let report = generate(args)?;
    let mut out = io::stdout().lock();
    serde_json::to_writer(&mut out, &report).context("encoding the report")?;
    writeln!(out).and_then(|()| out.flush()).context("writing to stdout")?;
    Ok(())
}

/// Runs the load and returns what it did.
pub fn generate(args: &LoadArgs) -> Result<LoadReport> {
    if !args.listen.ip().is_loopback() {
        bail!("--listen {}: lab-load only uses loopback addresses", args.listen);
    }
    if u32::from(args.listen.port()) + args.listeners > 65536 {
        bail!("--listeners {} from port {}: past port 65535", args.listeners, args.listen.port());
    }
    if args.destinations > 1 && !args.listen.is_ipv4() {
        bail!("--destinations > 1 spreads over 10.0.0.0/8: --listen must be 127.0.0.1:PORT");
    }
    let tfo = crate::kernel::sysctl::read_tcp_fastopen().context("reading net.ipv4.tcp_fastopen")?;
    if !tfo.client_enabled() || !tfo.server_enabled() {
        bail!(
            "net.ipv4.tcp_fastopen is {tfo} in this network namespace; lab-load needs client and server \
             TFO (3): run it in a namespace of its own, e.g. `ip netns add x; ip -n x link set lo up; \
             ip netns exec x sysctl -w net.ipv4.tcp_fastopen=3; ip netns exec x tfo-trace lab-load`"
        );
    }
    raise_nofile_limit(u64::from(args.listeners) + 1024);
    // Many listeners (or destinations beyond loopback) need them bound to every address.
    let bind_ip: std::net::IpAddr = if args.destinations > 1 || args.listeners > 1 {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        args.listen.ip()
    };
    let listeners: Arc<[TcpListener]> = (0..args.listeners)
        .map(|k| {
            let addr = SocketAddr::new(bind_ip, args.listen.port() + k as u16);
            let l = tfo_listener(addr, args.tfo_queue, 4096, ACCEPT_POLL, false)?;
            l.set_nonblocking(true).context("O_NONBLOCK on a listener")?;
            Ok(l)
        })
        .collect::<Result<Vec<_>>>()?
        .into();
    if args.destinations > 1 {
        let probe = args.destination(u64::from(args.destinations) - 1);
        std::net::TcpStream::connect_timeout(&probe, IO_TIMEOUT).with_context(|| {
            format!("{probe} does not reach a listener: add `ip route add local 10.0.0.0/8 dev lo` to the namespace")
        })?;
    }
    let before = Netstat::read_current().context("reading /proc/net/netstat")?;
    let stop = Arc::new(AtomicBool::new(false));
    let payload: Arc<[u8]> = vec![b'q'; args.payload_bytes as usize].into();
    let reply: Arc<[u8]> = vec![b'r'; args.reply_bytes as usize].into();

    let servers: Vec<_> = (0..args.threads)
        .map(|_| {
            let (listeners, stop, reply) = (Arc::clone(&listeners), Arc::clone(&stop), Arc::clone(&reply));
            std::thread::spawn(move || serve(&listeners, &reply, &stop))
        })
        .collect();

    let claimed = Arc::new(AtomicU64::new(0));
    let cpu_before = cpu_seconds();
    let start = Instant::now();
    let deadline = start + args.duration;
    // Each thread paces itself at rate / threads, so the total is `rate`.
    let interval =
        (args.rate > 0).then(|| Duration::from_secs_f64(f64::from(args.threads) / f64::from(args.rate)));
    let clients: Vec<_> = (0..args.threads)
        .map(|i| {
            let (claimed, payload) = (Arc::clone(&claimed), Arc::clone(&payload));
            let (args, count, plain) = (args.clone(), args.count, args.plain);
            // Stagger the paced threads so their connections do not start in bursts.
            let first = start
                + interval.map(|d| d.mul_f64(f64::from(i) / f64::from(args.threads))).unwrap_or_default();
            std::thread::spawn(move || {
                client(&args, plain, &payload, &claimed, count, first, interval, deadline)
            })
        })
        .collect();

    let (mut ok, mut failed, mut first_error) = (0u64, 0u64, None);
    for c in clients {
        let r = c.join().map_err(|_| anyhow::anyhow!("a client thread panicked"))?;
        ok += r.ok;
        failed += r.failed;
        first_error = first_error.or(r.first_error);
    }
    let seconds = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for s in servers {
        let _ = s.join();
    }
    let cpu_after = cpu_seconds();
    let after = Netstat::read_current().context("reading /proc/net/netstat")?;
    let d = Netstat::delta(&before, &after);
    Ok(LoadReport {
        connections: ok,
        failed,
        seconds,
        connections_per_s: ok as f64 / seconds.max(1e-9),
        threads: args.threads,
        target_rate: args.rate,
        tfo_passive: d.get("TcpExtTCPFastOpenPassive"),
        tfo_active: d.get("TcpExtTCPFastOpenActive"),
        tfo_active_fail: d.get("TcpExtTCPFastOpenActiveFail"),
        first_error,
        cpu_user_s: cpu_after.0 - cpu_before.0,
        cpu_sys_s: cpu_after.1 - cpu_before.1,
    })
}

#[derive(Default)]
struct ClientTally {
    ok: u64,
    failed: u64,
    first_error: Option<String>,
}

#[allow(clippy::too_many_arguments)] // one thread's whole job, spelled out
fn client(
    args: &LoadArgs,
    plain: bool,
    payload: &[u8],
    claimed: &AtomicU64,
    count: u64,
    mut next: Instant,
    interval: Option<Duration>,
    deadline: Instant,
) -> ClientTally {
    let mut t = ClientTally::default();
    let mut buf = [0u8; 4096];
    loop {
        let now = Instant::now();
        let i = claimed.fetch_add(1, Ordering::Relaxed);
        if now >= deadline || i >= count {
            break;
        }
        let (sa, len) = sockaddr(&args.destination(i));
        if let Some(step) = interval {
            if next > now {
                std::thread::sleep(next - now);
            }
            // Behind schedule (a slow connection): catch up by at most 10 ms worth, not
            // with an unbounded burst.
            next = (next + step).max(Instant::now() - Duration::from_millis(10));
            if Instant::now() >= deadline {
                break;
            }
        }
        match one_connection(&sa, len, plain, args.fin, payload, &mut buf) {
            Ok(()) => t.ok += 1,
            Err(e) => {
                t.failed += 1;
                t.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
    t
}

/// socket, sendto(MSG_FASTOPEN) (connect + data in the SYN when a cookie is cached) or,
/// `plain`, connect() then write(), read the reply to EOF, close with a RST (see the
/// module comment) or, `fin`, with a FIN.
fn one_connection(
    sa: &libc::sockaddr_storage,
    len: libc::socklen_t,
    plain: bool,
    fin: bool,
    payload: &[u8],
    buf: &mut [u8],
) -> Result<()> {
    let mut s = new_socket(libc::c_int::from(sa.ss_family))?;
    s.set_read_timeout(Some(IO_TIMEOUT)).context("setsockopt(SO_RCVTIMEO)")?;
    s.set_write_timeout(Some(IO_TIMEOUT)).context("setsockopt(SO_SNDTIMEO)")?;
    let sent = if plain {
        // SAFETY: valid fd and sockaddr of the given length.
        if unsafe { libc::connect(s.as_raw_fd(), (sa as *const libc::sockaddr_storage).cast(), len) } != 0 {
            return Err(io::Error::last_os_error()).context("connect");
        }
        0
    } else {
        sendto_fastopen(&s, payload, sa, len).context("sendto(MSG_FASTOPEN)")?
    };
    s.write_all(&payload[sent..]).context("write")?;
    loop {
        match s.read(buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("reading the reply"),
        }
    }
    if fin {
        return Ok(());
    }
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: the option value is a `struct linger` of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error()).context("setsockopt(SO_LINGER)");
    }
    Ok(())
}

/// Serves every listener from one thread: an epoll set of them all (EPOLLEXCLUSIVE, so a
/// connection wakes one of the server threads), accept until EAGAIN, answer each.
fn serve(listeners: &[TcpListener], reply: &[u8], stop: &AtomicBool) {
    // SAFETY: epoll_create1 has no preconditions; the fd is closed below.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return;
    }
    for (i, l) in listeners.iter().enumerate() {
        let mut ev =
            libc::epoll_event { events: (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32, u64: i as u64 };
        // SAFETY: valid epoll fd, listener fd and event.
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, l.as_raw_fd(), &mut ev) };
    }
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        let timeout_ms = ACCEPT_POLL.as_millis() as libc::c_int;
        // SAFETY: valid epoll fd and a buffer of 64 events.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as libc::c_int, timeout_ms) };
        for ev in events.iter().take(n.max(0) as usize) {
            let Some(l) = listeners.get(ev.u64 as usize) else { continue };
            // Bounded: a listener's queue holds at most its backlog.
            for _ in 0..4096 {
                let Ok((s, _)) = l.accept() else { break }; // EAGAIN: drained
                answer(s, reply, &mut buf);
            }
        }
    }
    // SAFETY: our own epoll fd.
    unsafe { libc::close(ep) };
}

/// With TFO the request is already queued on the child socket: one read, the reply, and
/// dropping closes (FIN after the reply; the client's RST then frees the socket).
fn answer(mut s: std::net::TcpStream, reply: &[u8], buf: &mut [u8]) {
    let _ = (|| -> io::Result<()> {
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(IO_TIMEOUT))?;
        s.set_write_timeout(Some(IO_TIMEOUT))?;
        let _ = s.read(buf)?;
        s.write_all(reply)
    })();
}
