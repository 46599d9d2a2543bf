//! Raw socket plumbing the lab's TFO peers share: what std's sockets cannot do
//! (TCP_FASTOPEN on a listener before listen(), sendto(MSG_FASTOPEN) with an address).
use std::io;
use std::mem;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use anyhow::{Context as _, Result};

/// A fresh blocking TCP socket of `family` (AF_INET / AF_INET6), wrapped for std's I/O and timeouts.
pub(super) fn new_socket(family: libc::c_int) -> Result<TcpStream> {
    // SAFETY: plain syscall; the fd is owned right away.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error()).context("socket(SOCK_STREAM)");
    }
    // SAFETY: fd is a new, valid descriptor that nothing else owns.
    Ok(TcpStream::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

pub(super) fn family_of(addr: &SocketAddr) -> libc::c_int {
    if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    }
}

/// A listener on `addr` with SO_REUSEADDR, TCP_FASTOPEN set to `tfo_queue` (0: left off)
/// before listen(), and accept() returning every `accept_poll` so loops can check for stop.
/// An IPv6 one takes IPv4 too (dual-stack: IPV6_V6ONLY 0, as Go's listeners do), whatever
/// the namespace's net.ipv6.bindv6only says; with `v6_only`, IPv6 only.
pub(super) fn tfo_listener(
    addr: SocketAddr,
    tfo_queue: u32,
    backlog: i32,
    accept_poll: Duration,
    v6_only: bool,
) -> Result<TcpListener> {
    let s = new_socket(family_of(&addr))?;
    setsockopt_int(&s, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1).context("setsockopt(SO_REUSEADDR)")?;
    if addr.is_ipv6() {
        setsockopt_int(&s, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, v6_only.into())
            .context("setsockopt(IPV6_V6ONLY)")?;
    }
    let (sa, len) = sockaddr(&addr);
    // SAFETY: valid fd and sockaddr of the given length.
    if unsafe { libc::bind(s.as_raw_fd(), (&sa as *const libc::sockaddr_storage).cast(), len) } != 0 {
        return Err(io::Error::last_os_error()).with_context(|| format!("bind {addr}"));
    }
    if tfo_queue > 0 {
        let q = libc::c_int::try_from(tfo_queue).context("--tfo-queue too large")?;
        setsockopt_int(&s, libc::IPPROTO_TCP, libc::TCP_FASTOPEN, q)
            .with_context(|| format!("setsockopt(TCP_FASTOPEN, {q})"))?;
    }
    // SAFETY: valid fd.
    if unsafe { libc::listen(s.as_raw_fd(), backlog) } != 0 {
        return Err(io::Error::last_os_error()).with_context(|| format!("listen {addr}"));
    }
    // std's TcpStream sets SO_RCVTIMEO, which accept() honours too.
    s.set_read_timeout(Some(accept_poll)).context("setsockopt(SO_RCVTIMEO)")?;
    Ok(TcpListener::from(OwnedFd::from(s)))
}

/// The listener's own TFO key (TCP_FASTOPEN_KEY, include/uapi/linux/tcp.h: 16 bytes, one
/// key without a backup), in place of its namespace's net.ipv4.tcp_fastopen_key.
pub(super) fn set_tfo_key(s: &impl AsRawFd, key: &[u8; 16]) -> io::Result<()> {
    const TCP_FASTOPEN_KEY: libc::c_int = 33;
    // SAFETY: the option value is 16 bytes of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            TCP_FASTOPEN_KEY,
            key.as_ptr().cast(),
            key.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(super) fn setsockopt_int(
    s: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a c_int of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(super) fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            let sin = unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr = libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) };
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above.
            let sin6 = unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr = libc::in6_addr { s6_addr: a.ip().octets() };
            sin6.sin6_scope_id = a.scope_id();
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

const MSG_FASTOPEN: libc::c_int = 0x2000_0000; // include/uapi/linux/socket.h
const _: () = assert!(MSG_FASTOPEN == libc::MSG_FASTOPEN);

/// sendto(MSG_FASTOPEN) on a fresh socket: connect, and the data in the SYN when the kernel
/// has a cookie for `sa`. Returns the bytes it took (the rest goes with write()).
pub(super) fn sendto_fastopen(
    s: &TcpStream,
    payload: &[u8],
    sa: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> io::Result<usize> {
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
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}
