//! The listening TCP sockets of one network namespace, from the kernel's sock_diag netlink
//! interface (`ss -ltn` reads the same): a dump asked for the LISTEN state only walks the
//! listening hash and never the established one, so it costs the listeners, not the
//! namespace's every socket. /proc/net/tcp (what listeners.rs read before) has no such
//! filter: its seq_file walks the listening hash and then every established and TIME_WAIT
//! socket (tcp4_seq_start: listening_get_first, then established_get_first), and with
//! 10,000 TIME_WAIT sockets one read took ~75 ms (issue 55).
//!
//! inet_diag_dump_icsk() (net/ipv4/inet_diag.c:1038 and :1183 in 6.12, :1023/:1074 in
//! 5.10, :1028/:1080 in 6.1): with `idiag_states == TCPF_LISTEN` it walks `lhash2` and
//! stops before the ehash loop (`if (!(idiag_states & ~TCPF_LISTEN)) goto out`).
//!
//! The TCP sockets a process can hold (every state but TIME_WAIT and NEW_SYN_RECV, which no
//! fd holds: [`held_inodes_here`]) come the same way: the dump still walks the established
//! hash, but skips a socket of another state before writing anything of it, where
//! /proc/net/tcp formats every one of them.
//!
//! A netlink socket belongs to the namespace it was made in: [`listening_here`] and
//! [`held_inodes_here`] read the calling thread's namespace (a thread that entered another
//! one with setns reads that one's). No privilege is needed to ask (as for `ss`).
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use anyhow::{bail, Context as _, Result};
use neli::{
    consts::{nl::NlmF, socket::NlFamily},
    nl::{NlPayload, NlmsghdrBuilder},
    socket::synchronous::NlSocketHandle,
    types::Buffer,
    utils::Groups,
};

/// SOCK_DIAG_BY_FAMILY (include/uapi/linux/sock_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// TCP_LISTEN, TCP_TIME_WAIT, TCP_NEW_SYN_RECV (include/net/tcp_states.h), and the bits
/// of `idiag_states`.
const TCP_LISTEN: u8 = 10;
const TCP_TIME_WAIT: u8 = 6;
const TCP_NEW_SYN_RECV: u8 = 12;
const TCPF_LISTEN: u32 = 1 << TCP_LISTEN;
/// Every state an fd can hold: TCPF_ALL (0xfff, include/net/tcp_states.h) but TIME_WAIT
/// (a timewait sock) and NEW_SYN_RECV (a request sock).
const TCPF_HELD: u32 = 0xfff & !(1 << TCP_TIME_WAIT) & !(1 << TCP_NEW_SYN_RECV);
/// sizeof(struct inet_diag_req_v2) and sizeof(struct inet_diag_msg)
/// (include/uapi/linux/inet_diag.h).
const REQ_LEN: usize = 56;
const MSG_LEN: usize = 72;
/// Datagrams read for one dump at most: the kernel fills each (up to 32 KiB, about 400
/// listeners with no extension asked for), so this bounds a dump at millions of listeners.
const MAX_DATAGRAMS: usize = 100_000;

/// One listening socket: its bound address, its socket inode (as /proc/PID/fd links name
/// it), and its accept queue now and at most (inet_diag_msg's `idiag_rqueue` and
/// `idiag_wqueue` for a listener: sk_ack_backlog and sk_max_ack_backlog, inet_diag.c
/// inet_sk_diag_fill).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Listening {
    pub addr: SocketAddr,
    pub inode: u64,
    pub accept_queue: u32,
    pub backlog: u32,
}

/// The listening TCP sockets (IPv4 and IPv6) of the calling thread's namespace.
pub(crate) fn listening_here() -> Result<Vec<Listening>> {
    let mut out = Vec::new();
    dump_here(TCPF_LISTEN, |s| out.extend(s.filter(|d| d.state == TCP_LISTEN).map(|d| d.listening)))?;
    Ok(out)
}

/// The socket inodes of every TCP socket of the calling thread's namespace that a process
/// can hold (none of TIME_WAIT or NEW_SYN_RECV).
pub(crate) fn held_inodes_here() -> Result<Vec<u64>> {
    let mut out = Vec::new();
    dump_here(TCPF_HELD, |s| out.extend(s.map(|d| d.listening.inode).filter(|&i| i != 0)))?;
    Ok(out)
}

/// One socket of a dump: the fields of its inet_diag_msg read here.
struct Diag {
    state: u8,
    listening: Listening,
}

/// Dumps the TCP sockets of `states` (IPv4, then IPv6) of the calling thread's namespace,
/// each handed to `take`.
fn dump_here(states: u32, mut take: impl FnMut(&mut dyn Iterator<Item = Diag>)) -> Result<()> {
    let socket = NlSocketHandle::connect(NlFamily::SockOrInetDiag, None, Groups::empty())
        .context("opening a sock_diag netlink socket")?;
    for (seq, family) in [(1, libc::AF_INET as u8), (2, libc::AF_INET6 as u8)] {
        dump(&socket, seq, family, states, &mut take)?;
    }
    Ok(())
}

/// One family's sockets of `states`, handed to `take` a datagram at a time.
fn dump(
    socket: &NlSocketHandle,
    seq: u32,
    family: u8,
    states: u32,
    take: &mut impl FnMut(&mut dyn Iterator<Item = Diag>),
) -> Result<()> {
    let msg = NlmsghdrBuilder::default()
        .nl_type(SOCK_DIAG_BY_FAMILY)
        .nl_flags(NlmF::REQUEST | NlmF::DUMP)
        .nl_seq(seq)
        .nl_payload(NlPayload::Payload(Buffer::from(request(family, states).to_vec())))
        .build()
        .context("building a sock_diag request")?;
    socket.send(&msg).context("asking sock_diag for TCP sockets")?;
    for _ in 0..MAX_DATAGRAMS {
        let (msgs, _) = socket.recv::<u16, Buffer>().context("reading sock_diag")?;
        for msg in msgs {
            let msg = msg.context("decoding a sock_diag answer")?;
            if *msg.nl_seq() != seq {
                continue;
            }
            match msg.nl_payload() {
                NlPayload::Payload(body) => take(&mut parse_msg(body.as_ref()).into_iter()),
                NlPayload::Err(e) => bail!("sock_diag: {e}"),
                NlPayload::Ack(_) | NlPayload::DumpExtAck(_) | NlPayload::Empty => return Ok(()),
            }
        }
    }
    bail!("sock_diag: no end to the dump after {MAX_DATAGRAMS} datagrams")
}

/// struct inet_diag_req_v2 asking for every TCP socket of `family` in `states`, with no
/// extension.
fn request(family: u8, states: u32) -> [u8; REQ_LEN] {
    let mut req = [0u8; REQ_LEN];
    req[0] = family;
    req[1] = libc::IPPROTO_TCP as u8;
    req[4..8].copy_from_slice(&states.to_ne_bytes());
    req
}

/// One struct inet_diag_msg. For a listener, the queue fields are its accept queue and
/// backlog; for other states, its receive and send queues.
fn parse_msg(b: &[u8]) -> Option<Diag> {
    if b.len() < MSG_LEN {
        return None;
    }
    let port = u16::from_be_bytes([b[4], b[5]]);
    // idiag_src: 4 bytes for IPv4, 16 for IPv6, in network order.
    let ip: IpAddr = match i32::from(b[0]) {
        libc::AF_INET => Ipv4Addr::new(b[8], b[9], b[10], b[11]).into(),
        libc::AF_INET6 => Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).ok()?).into(),
        _ => return None,
    };
    let u32_at = |at: usize| u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let listening = Listening {
        addr: SocketAddr::new(ip, port),
        accept_queue: u32_at(56),
        backlog: u32_at(60),
        inode: u64::from(u32_at(68)),
    };
    Some(Diag { state: b[1], listening })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An inet_diag_msg as the kernel writes it.
    fn msg(family: u8, state: u8, src: &[u8], port: u16, queue: (u32, u32), inode: u32) -> Vec<u8> {
        let mut b = vec![0u8; MSG_LEN];
        b[0] = family;
        b[1] = state;
        b[4..6].copy_from_slice(&port.to_be_bytes());
        b[8..8 + src.len()].copy_from_slice(src);
        b[56..60].copy_from_slice(&queue.0.to_ne_bytes());
        b[60..64].copy_from_slice(&queue.1.to_ne_bytes());
        b[68..72].copy_from_slice(&inode.to_ne_bytes());
        b
    }

    #[test]
    fn reads_a_listener_of_each_family() {
        let v4 = msg(libc::AF_INET as u8, TCP_LISTEN, &[10, 0, 0, 1], 8080, (3, 128), 4242);
        let d = parse_msg(&v4).unwrap();
        assert_eq!(d.state, TCP_LISTEN);
        assert_eq!(
            d.listening,
            Listening { addr: "10.0.0.1:8080".parse().unwrap(), inode: 4242, accept_queue: 3, backlog: 128 }
        );
        let v6 = msg(libc::AF_INET6 as u8, TCP_LISTEN, &Ipv6Addr::LOCALHOST.octets(), 443, (0, 4096), 7);
        assert_eq!(
            parse_msg(&v6).map(|d| (d.listening.addr, d.listening.inode)),
            Some(("[::1]:443".parse().unwrap(), 7))
        );
        // Another family, or cut short: nothing.
        assert!(parse_msg(&msg(libc::AF_UNIX as u8, TCP_LISTEN, &[10, 0, 0, 1], 1, (0, 0), 1)).is_none());
        assert!(parse_msg(&v4[..MSG_LEN - 1]).is_none());
    }

    /// The dump finds a listener of ours with its inode (as /proc/self/fd names it) and
    /// its backlog, and no connected socket.
    #[test]
    fn finds_our_own_listener() {
        use std::os::fd::AsRawFd as _;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let _conn = std::net::TcpStream::connect(addr).unwrap();
        let link = std::fs::read_link(format!("/proc/self/fd/{}", l.as_raw_fd())).unwrap();
        let inode: u64 =
            link.to_str().unwrap().trim_start_matches("socket:[").trim_end_matches(']').parse().unwrap();
        let found = listening_here().unwrap();
        let ours: Vec<&Listening> = found.iter().filter(|s| s.addr.port() == addr.port()).collect();
        assert_eq!(ours.len(), 1, "{found:?}");
        assert_eq!((ours[0].addr, ours[0].inode), (addr, inode));
        assert_eq!(ours[0].backlog, 128, "std's listen backlog");
        // Held sockets: the listener and the connection's two ends, no TIME_WAIT.
        let held = held_inodes_here().unwrap();
        assert!(held.contains(&inode), "{held:?}");
    }
}
