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
//! SO_LINGER 0 (a RST). That leaves no TIME_WAIT socket on either side, so the rate does
//! not drift down as TIME_WAIT sockets pile up over a benchmark (nor overflow
//! `tcp_max_tw_buckets`), and the client's ephemeral ports never run out.
use std::io::{self, Read as _, Write as _};
use std::mem;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::sock::{new_socket, sockaddr, tfo_listener};
use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use crate::kernel::netstat::Netstat;

const MSG_FASTOPEN: libc::c_int = 0x2000_0000; // include/uapi/linux/socket.h
const _: () = assert!(MSG_FASTOPEN == libc::MSG_FASTOPEN);
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
    #[arg(long, default_value = "3s", value_parser = crate::duration::parse_duration)]
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
}

/// The JSON line `lab-load` prints.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Connections that sent their payload and read the whole reply.
    pub connections: u64,
    pub failed: u64,
    pub seconds: f64,
    pub connections_per_s: f64,
    pub threads: u32,
    /// `--rate` (0: unthrottled).
    pub target_rate: u32,
    /// Deltas of this namespace's counters over the run: TFO SYN-data accepted by the
    /// server (Passive) and acknowledged to the client (Active).
    pub tfo_passive: u64,
    pub tfo_active: u64,
    pub tfo_active_fail: u64,
    /// The first error a client hit, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
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
    let tfo = crate::kernel::sysctl::read_tcp_fastopen().context("reading net.ipv4.tcp_fastopen")?;
    if !tfo.client_enabled() || !tfo.server_enabled() {
        bail!(
            "net.ipv4.tcp_fastopen is {tfo} in this network namespace; lab-load needs client and server \
             TFO (3): run it in a namespace of its own, e.g. `ip netns add x; ip -n x link set lo up; \
             ip netns exec x sysctl -w net.ipv4.tcp_fastopen=3; ip netns exec x tfo-trace lab-load`"
        );
    }
    let listener = tfo_listener(args.listen, args.tfo_queue, 4096, ACCEPT_POLL)?;
    let before = Netstat::read_current().context("reading /proc/net/netstat")?;
    let stop = Arc::new(AtomicBool::new(false));
    let payload: Arc<[u8]> = vec![b'q'; args.payload_bytes as usize].into();
    let reply: Arc<[u8]> = vec![b'r'; args.reply_bytes as usize].into();

    let servers: Vec<_> = (0..args.threads)
        .map(|_| {
            let l = listener.try_clone().context("duplicating the listener")?;
            let (stop, reply) = (Arc::clone(&stop), Arc::clone(&reply));
            Ok(std::thread::spawn(move || serve(&l, &reply, &stop)))
        })
        .collect::<Result<_>>()?;

    let claimed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + args.duration;
    // Each thread paces itself at rate / threads, so the total is `rate`.
    let interval =
        (args.rate > 0).then(|| Duration::from_secs_f64(f64::from(args.threads) / f64::from(args.rate)));
    let clients: Vec<_> = (0..args.threads)
        .map(|i| {
            let (claimed, payload) = (Arc::clone(&claimed), Arc::clone(&payload));
            let (dst, count) = (args.listen, args.count);
            // Stagger the paced threads so their connections do not start in bursts.
            let first = start
                + interval.map(|d| d.mul_f64(f64::from(i) / f64::from(args.threads))).unwrap_or_default();
            std::thread::spawn(move || client(dst, &payload, &claimed, count, first, interval, deadline))
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
    })
}

#[derive(Default)]
struct ClientTally {
    ok: u64,
    failed: u64,
    first_error: Option<String>,
}

fn client(
    dst: SocketAddr,
    payload: &[u8],
    claimed: &AtomicU64,
    count: u64,
    mut next: Instant,
    interval: Option<Duration>,
    deadline: Instant,
) -> ClientTally {
    let mut t = ClientTally::default();
    let (sa, len) = sockaddr(&dst);
    let mut buf = [0u8; 4096];
    loop {
        let now = Instant::now();
        if now >= deadline || claimed.fetch_add(1, Ordering::Relaxed) >= count {
            break;
        }
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
        match one_connection(&sa, len, payload, &mut buf) {
            Ok(()) => t.ok += 1,
            Err(e) => {
                t.failed += 1;
                t.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
    t
}

/// socket, sendto(MSG_FASTOPEN) (connect + data in the SYN when a cookie is cached),
/// read the reply to EOF, close with a RST (see the module comment).
fn one_connection(
    sa: &libc::sockaddr_storage,
    len: libc::socklen_t,
    payload: &[u8],
    buf: &mut [u8],
) -> Result<()> {
    let mut s = new_socket(libc::c_int::from(sa.ss_family))?;
    s.set_read_timeout(Some(IO_TIMEOUT)).context("setsockopt(SO_RCVTIMEO)")?;
    s.set_write_timeout(Some(IO_TIMEOUT)).context("setsockopt(SO_SNDTIMEO)")?;
    // SAFETY: valid fd, buffer and sockaddr of the given lengths.
    let n = unsafe {
        libc::sendto(
            s.as_raw_fd(),
            payload.as_ptr().cast(),
            payload.len(),
            MSG_FASTOPEN | libc::MSG_NOSIGNAL,
            (sa as *const libc::sockaddr_storage).cast(),
            len,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error()).context("sendto(MSG_FASTOPEN)");
    }
    s.write_all(&payload[n as usize..]).context("write")?;
    loop {
        match s.read(buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("reading the reply"),
        }
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

fn serve(listener: &TcpListener, reply: &[u8], stop: &AtomicBool) {
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        let mut s = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => continue,
            Err(_) => continue, // ECONNABORTED and the like: the listener is still good
        };
        let _ = (|| -> io::Result<()> {
            s.set_read_timeout(Some(IO_TIMEOUT))?;
            s.set_write_timeout(Some(IO_TIMEOUT))?;
            // With TFO the request is already queued on the child socket: one read.
            let _ = s.read(&mut buf)?;
            s.write_all(reply)
        })();
        // Dropping closes: FIN after the reply; the client's RST then frees the socket.
    }
}
