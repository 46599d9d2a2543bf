//! DNS in the lab, for `--names`: dnsmasq (Debian's dnsmasq-base) serving a zone for the
//! lab's server addresses from the server namespace, the client namespace's resolv.conf
//! pointing at it (`ip netns exec` mounts /etc/netns/NS/resolv.conf over /etc/resolv.conf),
//! and the lab client's ways to resolve a name: through libc (getaddrinfo) or with a query
//! of its own over UDP or TCP to the nameserver resolv.conf names.
use std::{
    io::{Read as _, Write as _},
    net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs as _, UdpSocket},
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context as _, Result};

use super::{
    capture::Tcpdump,
    cmd,
    namespaces::{Lab, Side},
    registry::Proc,
};

/// Where dnsmasq is; the tests skip without it.
pub(crate) const DNSMASQ: &str = "/usr/sbin/dnsmasq";
/// How long the server may take to answer its first query.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const QUERY_TIMEOUT: Duration = Duration::from_secs(3);

/// What the lab's DNS server answers.
#[derive(Clone, Debug, Default)]
pub struct Zone {
    /// `(name, address, ttl)`: a name may have several addresses (A and AAAA).
    pub addresses: Vec<(String, IpAddr, u32)>,
    /// `(alias, target)`: a CNAME; the target must be one of the names above.
    pub cnames: Vec<(String, String)>,
}

/// A running dnsmasq; dropping it stops it (by pid) and removes its files.
pub struct DnsServer {
    proc: Proc,
    dir: PathBuf,
    resolv_dir: PathBuf,
    pub addr: IpAddr,
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.proc.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(&self.resolv_dir);
    }
}

impl Lab {
    /// Starts dnsmasq on the server's first IPv4 address, port 53, answering `zone` and
    /// nothing else (no upstream, no /etc/hosts), and points the client namespace's
    /// resolv.conf at it. Waits until it answers.
    pub fn start_dns(&self, zone: &Zone) -> Result<DnsServer> {
        if let Some(why) = cannot_serve() {
            bail!("{why}");
        }
        let addr = self.server_addr(0, false)?;
        let dir = std::env::temp_dir().join(format!("{}-dns", self.server_ns));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut args = vec![
            "--keep-in-foreground".to_string(),
            "--conf-file=/dev/null".into(),
            "--no-resolv".into(),
            "--no-hosts".into(),
            // Every name is the zone's own: a type it lacks (AAAA of an IPv4-only name) is
            // answered "no such record", not REFUSED for want of an upstream, which musl's
            // getaddrinfo (the static build's) takes for a failure of the whole lookup.
            "--local=/#/".into(),
            "--no-dhcp-interface=".into(),
            "--bind-interfaces".into(),
            format!("--listen-address={addr}"),
            "--port=53".into(),
            "--pid-file".into(),
            "--user=root".into(),
            "--group=root".into(),
            "--log-facility=-".into(),
        ];
        // One hosts file per TTL: dnsmasq gives a hosts file's names --local-ttl.
        let mut ttls: Vec<u32> = zone.addresses.iter().map(|(_, _, t)| *t).collect();
        ttls.sort_unstable();
        ttls.dedup();
        if let [ttl] = ttls[..] {
            args.push(format!("--local-ttl={ttl}"));
        } else if ttls.len() > 1 {
            bail!("the lab's zone takes one TTL for all its addresses, not {ttls:?}");
        }
        let hosts: String = zone.addresses.iter().map(|(name, a, _)| format!("{a} {name}\n")).collect();
        let hosts_file = dir.join("hosts");
        std::fs::write(&hosts_file, hosts).context("writing the lab's hosts file")?;
        args.push(format!("--addn-hosts={}", hosts_file.display()));
        args.extend(zone.cnames.iter().map(|(alias, target)| format!("--cname={alias},{target}")));

        let resolv_dir = PathBuf::from("/etc/netns").join(&self.client_ns);
        std::fs::create_dir_all(&resolv_dir).with_context(|| format!("creating {}", resolv_dir.display()))?;
        std::fs::write(resolv_dir.join("resolv.conf"), format!("nameserver {addr}\noptions attempts:1\n"))
            .context("writing the client namespace's resolv.conf")?;

        let mut c = cmd::in_netns(&self.server_ns, DNSMASQ);
        c.args(&args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let line = cmd::display(&c);
        let mut proc = Proc::spawn(self.id, &mut c).with_context(|| format!("starting `{line}`"))?;
        let stderr = proc.child.stderr.take().map(|e| cmd::collect(e, 64 * 1024));
        let server = DnsServer { proc, dir, resolv_dir, addr };
        // Ready once it answers a name of the zone (from the server namespace itself).
        let deadline = Instant::now() + READY_TIMEOUT;
        let probe =
            zone.addresses.first().map(|(n, _, _)| n.clone()).unwrap_or_else(|| "ready.lab.test".into());
        loop {
            if raw_query_from(&self.server_ns, &probe, addr) {
                return Ok(server);
            }
            if Instant::now() >= deadline {
                drop(server);
                let why = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
                bail!("`{line}` did not answer within {READY_TIMEOUT:?}: {}", why.trim());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Lab {
    /// Starts tcpdump on the client's veth for the DNS answers the client namespace
    /// receives and the SYNs it sends to `port`, each with the kernel's time (ns): the
    /// order in which lookups and connections really happened.
    pub fn capture_lookups(&self, port: u16) -> Result<LookupCapture> {
        // ip6[53]: the TCP flags of a segment with no extension header.
        let syn = "((ip and tcp[tcpflags] & tcp-syn != 0) or (ip6 and ip6[53] & 0x02 == 0x02))";
        let filter = format!("src port 53 or (dst port {port} and {syn})");
        // -vv: a DNS answer's question (the name asked for) as well as its records.
        let args = ["-tt", "--time-stamp-precision=nano", "-vv"];
        Ok(LookupCapture { tcpdump: self.tcpdump(Side::Client, &args, &filter)? })
    }
}

/// tcpdump on the client's veth: DNS answers and SYNs ([`Lab::capture_lookups`]).
#[derive(Debug)]
pub struct LookupCapture {
    tcpdump: Tcpdump,
}

impl LookupCapture {
    /// Stops tcpdump and returns what it saw, in the order it saw it.
    pub fn stop(self) -> Vec<Seen> {
        parse_lookups(&self.tcpdump.stop())
    }
}

/// A packet on the client's veth, at the kernel's time for it (ns since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// A DNS answer: the name asked for (lower case, no final dot) and the A and AAAA
    /// addresses it gave, through any CNAME.
    Answer { at_ns: u128, asked: String, addrs: Vec<IpAddr> },
    /// A SYN the client sent, from port `sport`.
    Syn { at_ns: u128, sport: u16 },
}

/// What `tcpdump -tt --time-stamp-precision=nano -vv` printed: one packet per line, with
/// its continuation lines (indented) joined to it.
pub(crate) fn parse_lookups(text: &str) -> Vec<Seen> {
    let mut packets: Vec<String> = Vec::new();
    for line in text.lines() {
        match packets.last_mut() {
            Some(p) if line.starts_with(char::is_whitespace) => p.push_str(line),
            _ => packets.push(line.to_string()),
        }
    }
    packets.iter().filter_map(|p| parse_packet(p)).collect()
}

/// `1796427808.702525542 IP (...) 198.18.0.2.53 > 198.18.0.1.48210: [...] 4660* q: A?
/// alias.lab.test. 2/0/0 alias.lab.test. CNAME good.lab.test., good.lab.test. A 10.9.0.1 (75)`,
/// or `... 198.18.0.1.40000 > 198.18.0.2.8080: Flags [S], ...`.
fn parse_packet(line: &str) -> Option<Seen> {
    let (secs, nanos) = line.split_whitespace().next()?.split_once('.')?;
    // Nine digits with --time-stamp-precision=nano; fewer where the capture gave less.
    let nanos = format!("{:0<9}", nanos.get(..9).unwrap_or(nanos));
    let at_ns = secs.parse::<u128>().ok()? * 1_000_000_000 + nanos.parse::<u128>().ok()?;
    if let Some((_, question)) = line.split_once(" q: ") {
        let mut words = question.split_whitespace();
        let _type = words.next()?;
        let asked = words.next()?.trim_end_matches('.').to_ascii_lowercase();
        let words: Vec<&str> = words.map(|w| w.trim_end_matches(',')).collect();
        let addrs = words
            .windows(2)
            .filter(|w| w[0] == "A" || w[0] == "AAAA")
            .filter_map(|w| w[1].parse().ok())
            .collect();
        return Some(Seen::Answer { at_ns, asked, addrs });
    }
    if !line.contains("Flags [S],") {
        return None;
    }
    let (from, _) = line.split_once(" > ")?;
    let sport = from.split_whitespace().last()?.rsplit('.').next()?.parse().ok()?;
    Some(Seen::Syn { at_ns, sport })
}

/// Why this host cannot give a lab a DNS server, if it cannot (the tests skip with it).
pub fn cannot_serve() -> Option<String> {
    if !std::path::Path::new(DNSMASQ).exists() {
        return Some(format!("{DNSMASQ} not found (apt-get install dnsmasq-base)"));
    }
    if !std::path::Path::new("/etc/resolv.conf").exists() {
        return Some("no /etc/resolv.conf for `ip netns exec` to mount a lab's over".into());
    }
    None
}

/// Whether dnsmasq in `ns` answers a query for `name` over UDP: asked from a thread that
/// enters the namespace, so no other program is needed.
fn raw_query_from(ns: &str, name: &str, server: IpAddr) -> bool {
    let path = PathBuf::from("/run/netns").join(ns);
    let name = name.to_string();
    std::thread::spawn(move || -> Result<()> {
        let file = std::fs::File::open(&path)?;
        // SAFETY: setns on this thread only, with an nsfs fd we opened.
        if unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) } != 0 {
            bail!("setns: {}", std::io::Error::last_os_error());
        }
        query(&name, server, Transport::Udp, false).map(drop)
    })
    .join()
    .is_ok_and(|r| r.is_ok())
}

/// How the lab client resolves a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Resolver {
    /// getaddrinfo, as most programs do (glibc, or musl in the static build).
    Libc,
    /// A query of our own over UDP to resolv.conf's first nameserver (Go's way).
    Udp,
    /// The same over TCP (what a resolver does after a truncated UDP answer).
    Tcp,
}

impl Resolver {
    pub fn as_str(self) -> &'static str {
        match self {
            Resolver::Libc => "libc",
            Resolver::Udp => "udp",
            Resolver::Tcp => "tcp",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    Udp,
    Tcp,
}

/// The addresses of `name` of `dst`'s family, resolved the way `how` says.
pub fn resolve(name: &str, how: Resolver, v6: bool) -> Result<Vec<IpAddr>> {
    let found = match how {
        Resolver::Libc => (name, 0)
            .to_socket_addrs()
            .with_context(|| format!("getaddrinfo({name})"))?
            .map(|a| a.ip())
            .collect(),
        Resolver::Udp | Resolver::Tcp => {
            let server = nameserver()?;
            let transport = if how == Resolver::Udp { Transport::Udp } else { Transport::Tcp };
            query(name, server, transport, v6)?
        }
    };
    Ok(found.into_iter().filter(|a: &IpAddr| a.is_ipv6() == v6).collect())
}

/// The first `nameserver` of /etc/resolv.conf.
fn nameserver() -> Result<IpAddr> {
    let text = std::fs::read_to_string("/etc/resolv.conf").context("reading /etc/resolv.conf")?;
    text.lines()
        .filter_map(|l| l.strip_prefix("nameserver"))
        .find_map(|a| a.trim().parse().ok())
        .ok_or_else(|| anyhow!("no nameserver in /etc/resolv.conf"))
}

/// Asks `server` for the A (or AAAA) records of `name`; their addresses.
fn query(name: &str, server: IpAddr, transport: Transport, v6: bool) -> Result<Vec<IpAddr>> {
    let id = (std::process::id() as u16) ^ 0x5a5a;
    let mut msg = vec![0, 0, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    msg[..2].copy_from_slice(&id.to_be_bytes());
    for label in name.split('.').filter(|l| !l.is_empty()) {
        let len = u8::try_from(label.len()).ok().filter(|&l| l < 64).context("a label over 63 bytes")?;
        msg.push(len);
        msg.extend(label.as_bytes());
    }
    msg.push(0);
    msg.extend(if v6 { [0, 28, 0, 1] } else { [0, 1, 0, 1] });
    let to = SocketAddr::new(server, 53);
    let answer = match transport {
        Transport::Udp => {
            let bind: SocketAddr = if server.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" }.parse()?;
            let sock = UdpSocket::bind(bind).context("a UDP socket")?;
            sock.set_read_timeout(Some(QUERY_TIMEOUT))?;
            sock.send_to(&msg, to).with_context(|| format!("sending a query to {to}"))?;
            let mut buf = vec![0; 4096];
            let n = sock.recv(&mut buf).with_context(|| format!("no answer from {to}"))?;
            buf.truncate(n);
            buf
        }
        Transport::Tcp => {
            let mut s = TcpStream::connect_timeout(&to, QUERY_TIMEOUT)
                .with_context(|| format!("connecting to {to}"))?;
            s.set_read_timeout(Some(QUERY_TIMEOUT))?;
            let mut framed = (msg.len() as u16).to_be_bytes().to_vec();
            framed.extend(&msg);
            s.write_all(&framed)?;
            let mut len = [0u8; 2];
            s.read_exact(&mut len).with_context(|| format!("no answer from {to}"))?;
            let mut buf = vec![0; usize::from(u16::from_be_bytes(len))];
            s.read_exact(&mut buf)?;
            buf
        }
    };
    if answer.get(..2) != Some(&id.to_be_bytes()[..]) {
        bail!("{to} answered another query");
    }
    Ok(crate::names::wire::answers(&answer).into_iter().map(|a| a.addr).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_answers_and_syns_as_tcpdump_prints_them() {
        let text = "\
1796427808.702786187 IP (tos 0x0, ttl 64, id 45411, offset 0, flags [DF], proto UDP (17), length 103)
    198.18.0.2.53 > 198.18.0.1.44786: [bad udp cksum 0xfe66 -> 0xec3d!] 4660* q: A? Alias.lab.test. 2/0/0 alias.lab.test. CNAME good.lab.test., good.lab.test. A 10.9.0.1 (75)
1796427808.702885885 IP (tos 0x0, ttl 64, id 45413, offset 0, flags [DF], proto UDP (17), length 115)
    198.18.0.2.53 > 198.18.0.1.59074: [udp sum ok] 4660* q: AAAA? good.lab.test. 1/0/0 good.lab.test. AAAA fd00::9 (87)
1796427808.702983910 IP (tos 0x0, ttl 64, id 45415, offset 0, flags [DF], proto UDP (17), length 60)
    198.18.0.2.53 > 198.18.0.1.60567: [udp sum ok] 4660 q: AAAA? other.lab.test. 0/0/0 (32)
1796427808.800000001 IP6 (flowlabel 0x1, hlim 64, next-header TCP (6) payload length: 140) fd00:7f0::1.40000 > fd00:7f0::2.8080: Flags [S], cksum 0x1 (correct), seq 1, win 64800, options [mss 1440], length 100
1796427808.900000000 IP (tos 0x0, ttl 64, id 1, offset 0, flags [DF], proto TCP (6), length 60)
    198.18.0.1.40001 > 198.18.0.2.8080: Flags [S], cksum 0x1 (correct), seq 1, win 64240, length 0
";
        let addr = |a: &str| a.parse::<IpAddr>().unwrap();
        assert_eq!(
            parse_lookups(text),
            [
                Seen::Answer {
                    at_ns: 1796427808702786187,
                    asked: "alias.lab.test".into(),
                    addrs: vec![addr("10.9.0.1")]
                },
                Seen::Answer {
                    at_ns: 1796427808702885885,
                    asked: "good.lab.test".into(),
                    addrs: vec![addr("fd00::9")]
                },
                Seen::Answer { at_ns: 1796427808702983910, asked: "other.lab.test".into(), addrs: vec![] },
                Seen::Syn { at_ns: 1796427808800000001, sport: 40000 },
                Seen::Syn { at_ns: 1796427808900000000, sport: 40001 },
            ]
        );
    }
}
