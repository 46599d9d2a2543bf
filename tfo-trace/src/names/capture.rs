//! The DNS answers a network namespace receives, read from two packet sockets made in it
//! (IPv4 and IPv6). A packet socket bound to one protocol sees only what arrives (it is on
//! the receive path, not the transmit one, where every packet would be cloned for it), and
//! the socket filter `tfo_dns_answers` (tfo-trace-ebpf/src/names.rs) passes only UDP and
//! TCP from port 53 up to it. Whatever resolver the process uses (glibc, musl, Go's own, a
//! raw query, a local cache), its answer arrives at the namespace as a packet.
use std::{
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
};

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
/// SO_ATTACH_BPF (asm-generic/socket.h): the filter as an eBPF program fd.
const SO_ATTACH_BPF: libc::c_int = 50;
/// What a socket may queue between two reads (the reader drains every 100 ms or sooner):
/// thousands of answers. Needs CAP_NET_ADMIN to pass net.core.rmem_max, which we have.
const RECEIVE_BUFFER_BYTES: libc::c_int = 4 << 20;
/// A packet no larger than this is read whole (a UDP answer with EDNS is at most 64 KiB;
/// past this it is cut and its message refused as truncated).
pub(crate) const MAX_PACKET: usize = 65_536;

/// The two packet sockets of one namespace, made by [`open_here`] on a thread inside it.
pub(crate) struct Sockets {
    fds: [OwnedFd; 2],
}

/// Opens the namespace's packet sockets from the calling thread's namespace, the filter
/// attached before either is bound (so nothing unfiltered is ever queued).
pub(crate) fn open_here(filter: RawFd) -> io::Result<Sockets> {
    Ok(Sockets { fds: [packet_socket(ETH_P_IP, filter)?, packet_socket(ETH_P_IPV6, filter)?] })
}

fn packet_socket(protocol: u16, filter: RawFd) -> io::Result<OwnedFd> {
    let check = |r: libc::c_int| if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) };
    // SAFETY: plain syscalls on a socket this function owns from its creation; every
    // pointer passed is to a live local of the size given.
    unsafe {
        // Protocol 0: the socket receives nothing until bound to one.
        let fd = check(libc::socket(
            libc::AF_PACKET,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let fd = OwnedFd::from_raw_fd(fd);
        let setopt = |name: libc::c_int, value: libc::c_int| {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                name,
                (&value as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        check(setopt(SO_ATTACH_BPF, filter))?;
        // Each packet's arrival time (CLOCK_REALTIME, as events' `ts`): which of two
        // answers for one address came before a connection.
        check(setopt(libc::SO_TIMESTAMPNS, 1))?;
        if setopt(libc::SO_RCVBUFFORCE, RECEIVE_BUFFER_BYTES) < 0 {
            setopt(libc::SO_RCVBUF, RECEIVE_BUFFER_BYTES);
        }
        let mut addr: libc::sockaddr_ll = std::mem::zeroed();
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = protocol.to_be();
        check(libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        ))?;
        Ok(fd)
    }
}

impl Sockets {
    /// Hands `each` every packet queued on either socket, with when it arrived (ns since
    /// the epoch; 0 if the kernel did not say), without waiting: at most `limit` per
    /// socket, so that a flood cannot keep the reader from its events.
    pub(crate) fn read(&self, buf: &mut [u8], limit: usize, mut each: impl FnMut(&[u8], u128)) {
        for fd in &self.fds {
            for _ in 0..limit {
                // SAFETY: all-zero is a valid sockaddr_ll, msghdr and control buffer.
                let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                let mut control = [0u64; 8]; // room for one SCM_TIMESTAMPNS, aligned
                let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
                // SAFETY: as above.
                let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
                msg.msg_name = (&mut from as *mut libc::sockaddr_ll).cast();
                msg.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
                msg.msg_iov = &mut iov;
                msg.msg_iovlen = 1;
                msg.msg_control = control.as_mut_ptr().cast();
                msg.msg_controllen = size_of_val(&control) as _;
                // SAFETY: every pointer in msg is to a live local of the length it gives.
                let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
                if n < 0 {
                    break; // EAGAIN: drained (any other error: try again next time)
                }
                // Only what is addressed to this host: not a neighbour's, seen promiscuously.
                if matches!(
                    from.sll_pkttype,
                    libc::PACKET_HOST | libc::PACKET_BROADCAST | libc::PACKET_MULTICAST
                ) {
                    each(&buf[..n as usize], arrival_ns(&msg));
                }
            }
        }
    }

    /// Packets the kernel dropped because a socket's queue was full, since the last call.
    pub(crate) fn dropped(&self) -> u64 {
        let mut total = 0;
        for fd in &self.fds {
            let mut stats = libc::tpacket_stats { tp_packets: 0, tp_drops: 0 };
            let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
            // SAFETY: stats is a live tpacket_stats and len its size.
            let r = unsafe {
                libc::getsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_PACKET,
                    libc::PACKET_STATISTICS,
                    (&mut stats as *mut libc::tpacket_stats).cast(),
                    &mut len,
                )
            };
            if r == 0 {
                total += u64::from(stats.tp_drops);
            }
        }
        total
    }
}

/// The SCM_TIMESTAMPNS of a received message, as ns since the epoch (0 without one).
fn arrival_ns(msg: &libc::msghdr) -> u128 {
    // SAFETY: the CMSG_* walk stays inside msg's control buffer, which the kernel filled
    // up to msg_controllen; the payload of SCM_TIMESTAMPNS is a timespec.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                return ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128;
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
        0
    }
}

/// What a packet from port 53 carries.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Dns<'a> {
    /// A UDP datagram: one whole DNS message.
    Udp(&'a [u8]),
    /// A TCP segment: part of a stream of length-prefixed messages.
    Tcp(Segment<'a>),
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Segment<'a> {
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub seq: u32,
    /// SYN, FIN or RST: the stream starts or ends here.
    pub syn: bool,
    pub end: bool,
    pub payload: &'a [u8],
}

/// The transport payload of an IPv4 or IPv6 packet from port 53 (the socket filter passes
/// nothing else; a fragment after the first carries no header and is refused).
pub(crate) fn dns_of(packet: &[u8]) -> Option<Dns<'_>> {
    let (protocol, from, to, rest) = match packet.first()? >> 4 {
        4 => {
            let header_len = usize::from(packet[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([*packet.get(2)?, *packet.get(3)?]));
            let fragment_offset = u16::from_be_bytes([*packet.get(6)?, *packet.get(7)?]) & 0x1fff;
            if fragment_offset != 0 || header_len < 20 {
                return None;
            }
            let octets = |at: usize| -> Option<IpAddr> {
                let b: [u8; 4] = packet.get(at..at + 4)?.try_into().ok()?;
                Some(IpAddr::V4(Ipv4Addr::from(b)))
            };
            (*packet.get(9)?, octets(12)?, octets(16)?, packet.get(header_len..total.min(packet.len()))?)
        }
        6 => {
            let payload_len = usize::from(u16::from_be_bytes([*packet.get(4)?, *packet.get(5)?]));
            let octets = |at: usize| -> Option<IpAddr> {
                let b: [u8; 16] = packet.get(at..at + 16)?.try_into().ok()?;
                Some(IpAddr::V6(Ipv6Addr::from(b)))
            };
            (*packet.get(6)?, octets(8)?, octets(24)?, packet.get(40..(40 + payload_len).min(packet.len()))?)
        }
        _ => return None,
    };
    let port = |at: usize| -> Option<u16> { Some(u16::from_be_bytes([*rest.get(at)?, *rest.get(at + 1)?])) };
    let (sport, dport) = (port(0)?, port(2)?);
    match protocol {
        17 => Some(Dns::Udp(rest.get(8..)?)),
        6 => {
            let seq = u32::from_be_bytes(rest.get(4..8)?.try_into().ok()?);
            let data_at = usize::from(rest.get(12)? >> 4) * 4;
            let flags = *rest.get(13)?;
            Some(Dns::Tcp(Segment {
                from: SocketAddr::new(from, sport),
                to: SocketAddr::new(to, dport),
                seq,
                syn: flags & 0x02 != 0,
                end: flags & 0x05 != 0,
                payload: rest.get(data_at..)?,
            }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(protocol: u8, transport: &[u8]) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, protocol, 0, 0, 10, 0, 0, 53, 10, 0, 0, 7];
        let total = (p.len() + transport.len()) as u16;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p.extend(transport);
        p
    }

    #[test]
    fn a_udp_answer_gives_its_message_and_trailing_bytes_are_cut() {
        let mut p = ipv4(17, &[0, 53, 0x9c, 0x40, 0, 12, 0, 0, b'd', b'n', b's', b'!']);
        p.extend([0xee; 6]); // Ethernet padding after the IP packet
        assert_eq!(dns_of(&p), Some(Dns::Udp(b"dns!")));
    }

    #[test]
    fn a_tcp_segment_gives_its_stream_position_and_payload() {
        let mut tcp = vec![0, 53, 0x9c, 0x40, 0, 0, 1, 0, 0, 0, 0, 0, 0x50, 0x18, 0, 0, 0, 0, 0, 0];
        tcp.extend([0, 2, 0xab, 0xcd]);
        let packet = ipv4(6, &tcp);
        let Some(Dns::Tcp(s)) = dns_of(&packet) else { panic!("not a segment") };
        assert_eq!((s.from.to_string(), s.to.to_string()), ("10.0.0.53:53".into(), "10.0.0.7:40000".into()));
        assert_eq!((s.seq, s.syn, s.end, s.payload), (256, false, false, &[0, 2, 0xab, 0xcd][..]));
    }

    #[test]
    fn an_ipv6_answer_and_garbage() {
        let mut p = vec![0x60, 0, 0, 0, 0, 10, 17, 64];
        p.extend(Ipv6Addr::LOCALHOST.octets());
        p.extend(Ipv6Addr::LOCALHOST.octets());
        p.extend([0, 53, 0x9c, 0x40, 0, 10, 0, 0, 0xaa, 0xbb]);
        assert_eq!(dns_of(&p), Some(Dns::Udp(&[0xaa, 0xbb])));
        for cut in 0..p.len() - 2 {
            let _ = dns_of(&p[..cut]);
        }
        let mut fragment = ipv4(17, &[0; 12]);
        fragment[7] = 8;
        assert_eq!(dns_of(&fragment), None);
    }
}
