//! The wire's own account of handshakes: tcpdump on a lab veth, its SYN and SYN-ACK lines
//! parsed ([`parse_tcpdump_syn`]).
use std::io::{BufRead as _, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};

use super::{
    cmd,
    namespaces::{Lab, Side},
    registry::Proc,
};

impl Lab {
    /// Starts tcpdump on one side's veth for SYNs and SYN-ACKs (IPv4 and IPv6), and waits
    /// until it listens.
    pub fn capture_syns(&self, side: Side) -> Result<SynCapture> {
        // Every segment with SYN set: SYNs and SYN-ACKs (the filter took SYNs only before,
        // so no SYN-ACK was ever seen, whatever `WireSyn::syn_ack` said).
        let filter = "(ip and tcp[tcpflags] & tcp-syn != 0) or (ip6 and ip6[53] & 0x02 == 0x02)";
        // -S: absolute sequence numbers, so a SYN-ACK's ack names its SYN's (tcpdump makes
        // them relative to the first packet of a 4-tuple, which a reused port shares).
        Ok(SynCapture { tcpdump: self.tcpdump(side, &["-tt", "-S"], filter)? })
    }

    /// Starts tcpdump on one side's veth (`args` before the filter), collecting what it
    /// prints, and waits until it listens.
    pub(super) fn tcpdump(&self, side: Side, args: &[&str], filter: &str) -> Result<Tcpdump> {
        let (ns, dev) = self.veth(side);
        let mut c = cmd::in_netns(ns, "tcpdump");
        // -Z root: stay root rather than switch to a `tcpdump` user a minimal system (the
        // test VMs) may not have.
        // --immediate-mode: hand each packet over at once (no buffering until SIGINT).
        c.args(["-i", dev, "-nn", "-l", "--immediate-mode", "-Z", "root"]).args(args).arg(filter);
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut proc =
            Proc::spawn(self.id, &mut c).context("starting tcpdump (cargo xtask setup installs it)")?;
        let stdout = proc.child.stdout.take().map(|o| cmd::collect(o, 16 << 20));
        let stderr = proc.child.stderr.take().ok_or_else(|| anyhow!("tcpdump: no stderr pipe"))?;
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                let _ = tx.send(l);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut said = Vec::new();
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) if l.contains("listening on") => return Ok(Tcpdump { proc, stdout }),
                Ok(l) => said.push(l),
                Err(_) => bail!("tcpdump did not start listening on {dev}: {}", said.join(" / ")),
            }
        }
    }
}

/// One SYN or SYN-ACK seen on the client's veth: when, which ports, payload length.
#[derive(Debug, Clone, PartialEq)]
pub struct WireSyn {
    pub time_s: f64,
    pub sport: u16,
    pub dport: u16,
    /// Its sequence number: a SYN's is its connection's initial one (a retransmitted SYN
    /// has the same), which tells two connections from one source port apart.
    pub seq: u32,
    /// A SYN-ACK's acknowledgment number: its SYN's sequence number plus one, plus the
    /// SYN's data where it took it.
    pub ack: Option<u32>,
    /// A SYN-ACK (tcpdump's `Flags [S.]`), coming back to the client.
    pub syn_ack: bool,
    pub payload: u32,
    /// The TFO option was the experimental one (kind 254, tcpdump's `exp-tfo`).
    pub exp_tfo: bool,
    /// It carried a TFO option (kind 34, tcpdump's `tfo`, or the experimental one): a cookie,
    /// a cookie request, or (SYN-ACK) the server's cookie.
    pub tfo: bool,
    /// The cookie its TFO option carried, in tcpdump's hex (None: no option, or a cookie
    /// request): tests compare the SYN's with its SYN-ACK's; the product never prints one.
    pub cookie: Option<String>,
}

/// tcpdump on a lab veth, capturing SYNs and SYN-ACKs: the wire's own account of handshakes.
#[derive(Debug)]
pub struct SynCapture {
    tcpdump: Tcpdump,
}

/// A running tcpdump and what it prints.
#[derive(Debug)]
pub(super) struct Tcpdump {
    proc: Proc,
    stdout: Option<JoinHandle<String>>,
}

impl Tcpdump {
    /// Stops it (SIGINT, so it flushes) and returns what it printed.
    pub(super) fn stop(mut self) -> String {
        // SAFETY: kill() on the pid of a child we own and have not reaped.
        unsafe { libc::kill(self.proc.pid() as i32, libc::SIGINT) };
        self.proc.wait_bounded(Duration::from_secs(5));
        cmd::join_text(&mut self.stdout)
    }
}

/// `1764491234.123456 IP 198.18.0.1.40000 > 198.18.0.2.8080: Flags [S], seq 7:107, ...,
/// length 100` (IPv6: `IP6 fd00:7f0::1.40000 > ...`; a SYN-ACK: `Flags [S.], seq 9, ack 8`).
pub(crate) fn parse_tcpdump_syn(line: &str) -> Option<WireSyn> {
    let mut words = line.split_whitespace();
    let time_s = words.next()?.parse().ok()?;
    let _proto = words.next()?;
    let src = words.next()?;
    let sport = src.rsplit('.').next()?.parse().ok()?;
    let _arrow = words.next()?;
    let dst = words.next()?.trim_end_matches(':');
    let dport = dst.rsplit('.').next()?.parse().ok()?;
    // tcpdump may decode the payload after the length ("length 100: HTTP"): digits only.
    let after = line.split("length ").nth(1)?;
    let payload = after.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
    let syn_ack = line.contains("Flags [S.]");
    // `seq 7` or, with data, `seq 7:107`; `ack 8`.
    let number = |name: &str| {
        let after = line.split(&format!(", {name} ")).nth(1)?;
        after.split(|c: char| !c.is_ascii_digit()).next()?.parse::<u32>().ok()
    };
    let (seq, ack) = (number("seq")?, number("ack"));
    let tfo = ["[tfo ", ",tfo ", "exp-tfo"].iter().any(|o| line.contains(o));
    let exp_tfo = line.contains("exp-tfo");
    Some(WireSyn { time_s, sport, dport, seq, ack, syn_ack, payload, exp_tfo, tfo, cookie: tfo_cookie(line) })
}

/// The cookie of a tcpdump line's TFO option (`options [...,tfo  cookie 0011...,...]`,
/// `exp-tfo cookie ...` for the experimental kind); None for a cookie request or no option.
fn tfo_cookie(line: &str) -> Option<String> {
    let options = line.split("options [").nth(1)?.split(']').next()?;
    let tfo = options.split(',').map(str::trim).find(|o| o.starts_with("tfo") || o.starts_with("exp-tfo"))?;
    match tfo.split_whitespace().collect::<Vec<_>>()[1..] {
        ["cookie", hex] => Some(hex.to_string()),
        _ => None,
    }
}

impl SynCapture {
    /// Stops tcpdump (SIGINT, so it flushes) and returns the SYNs it saw.
    pub fn stop(self) -> Vec<WireSyn> {
        self.tcpdump.stop().lines().filter_map(parse_tcpdump_syn).collect()
    }
}
