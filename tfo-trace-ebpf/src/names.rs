//! DNS answers, for `--names`: a socket filter on the packet sockets userspace opens in
//! each network namespace (tfo-trace/src/names/capture.rs). It keeps a UDP datagram or a
//! TCP segment from port 53, whole, and drops every other packet; the DNS message is read
//! in userspace. It runs on every packet the namespace receives, so it reads as little as
//! it can: one load of 24 bytes for IPv4 without options, a second for IPv6's ports.
use aya_ebpf::{macros::socket_filter, programs::SkBuffContext};

const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const DNS_PORT: u16 = 53;
/// The IPv6 fixed header; a DNS answer behind extension headers is not looked for.
const IPV6_HEADER_LEN: usize = 40;

#[socket_filter]
pub fn tfo_dns_answers(ctx: SkBuffContext) -> i64 {
    if from_dns_port(&ctx) {
        i64::from(ctx.len())
    } else {
        0
    }
}

/// Whether the packet (the socket is SOCK_DGRAM: it starts at the IP header) is UDP or
/// TCP from port 53.
#[inline(always)]
fn from_dns_port(ctx: &SkBuffContext) -> bool {
    // The IPv4 header without options and the ports after it; the first 24 bytes of an
    // IPv6 header. Anything shorter is no DNS answer.
    let Ok(head) = ctx.load::<[u8; 24]>(0) else { return false };
    let source_port = match head[0] >> 4 {
        4 if matches!(head[9], IPPROTO_UDP | IPPROTO_TCP) => {
            let header_len = usize::from(head[0] & 0x0f) * 4;
            if header_len == 20 {
                u16::from_be_bytes([head[20], head[21]])
            } else {
                match ctx.load::<[u8; 2]>(header_len) {
                    Ok(port) => u16::from_be_bytes(port),
                    Err(_) => return false,
                }
            }
        }
        6 if matches!(head[6], IPPROTO_UDP | IPPROTO_TCP) => match ctx.load::<[u8; 2]>(IPV6_HEADER_LEN) {
            Ok(port) => u16::from_be_bytes(port),
            Err(_) => return false,
        },
        _ => return false,
    };
    source_port == DNS_PORT
}
