//! Server outcomes from tcp_try_fastopen() (net/ipv4/tcp_fastopen.c), the one function
//! every SYN at a listener passes through. Entry records the cookie the SYN carried
//! (foc->len: -1 no option, 0 cookie request, >0 a cookie); exit sees what the kernel
//! made of it (the child, and foc rewritten to the cookie that goes back in the SYN-ACK).
//! The kprobe backend hooks both (entry and exit); the fentry backend only the exit, where
//! it reads the cookie the SYN carried from the SYN's own options: one run per SYN.
use aya_ebpf::{helpers::generated::bpf_probe_read_kernel, macros::map, maps::PerCpuArray};
use tfo_trace_common::{flags, tcp_options, ListenerKey, Outcome, Role};

use crate::{
    handlers::{listener_started, name_listener_owner, server_selected},
    kernel::{
        family_of, netns_of, present, state_of, Access, FastopenCookie, RequestSock, SkBuff, Sock, TCP_LISTEN,
    },
    maps::{now, Measure, LISTENERS},
    record::{record, Known},
};

/// What entry saw, per CPU: the SYN is processed in softirq on one CPU from entry to exit.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SynSeen {
    pub sk: u64,
    pub req: u64,
    pub foc: u64,
    pub start_ns: u64,
    pub in_len: i32,
    pub syn_data_bytes: u32,
    /// Filled in at exit for the events: the listener's TFO queue and its limit, the
    /// namespace, whether the experimental option was used. The events read them from
    /// here, not from copies on the stack: five inlined outcomes, each holding pointers
    /// to those copies, took the program past the 512-byte BPF stack with its callee.
    pub qlen: u32,
    pub max_qlen: u32,
    pub netns: u32,
    pub exp: u32,
}

#[map]
static SYN_SEEN: PerCpuArray<SynSeen> = PerCpuArray::with_max_entries(1, 0);

const TFO_SERVER_ENABLE: u64 = 0x2;

/// Payload of the SYN: TCP_SKB_CB(skb)->end_seq - seq - 1 (the SYN flag takes one).
#[inline(always)]
fn syn_payload<A: Access>(skb: SkBuff<A>) -> u32 {
    let cb = skb.skb_cb();
    let seq = cb.tcb_seq() as u32;
    let end = cb.tcb_end_seq() as u32;
    end.wrapping_sub(seq).saturating_sub(1)
}

/// The cookie's length (an s8): -1, no option, also where this kernel has no such member.
#[inline(always)]
fn foc_len<A: Access>(foc: FastopenCookie<A>) -> i32 {
    foc.foc_len() as u8 as i8 as i32
}

#[inline(always)]
pub fn try_fastopen_enter<A: Access>(
    sk: Sock<A>,
    skb: SkBuff<A>,
    req: RequestSock<A>,
    foc: FastopenCookie<A>,
) {
    let in_len = foc_len(foc);
    let data = syn_payload(skb);
    // Plain SYNs (no TFO option, no data) are by far the most: nothing to remember.
    if in_len < 0 && data == 0 {
        return;
    }
    if let Some(slot) = SYN_SEEN.get_ptr_mut(0) {
        // SAFETY: per-CPU slot, written only on this CPU during this softirq.
        unsafe {
            *slot = SynSeen {
                sk: sk.addr(),
                req: req.addr(),
                foc: foc.addr(),
                start_ns: now(),
                in_len,
                syn_data_bytes: data,
                qlen: 0,
                max_qlen: 0,
                netns: 0,
                exp: 0,
            };
        }
    }
}

/// The SYN's TCP header, read whole with one probe read, and the walk of its options
/// between two offsets (`tcp_options::syn_option_step`): per CPU, a map value, so that
/// the verifier carries nothing of the walk from one offset to the next (and the 5.10
/// verifier refuses variable stack offsets).
#[repr(C)]
pub struct SynScratch {
    header: [u64; 8],
    next: u64,
    len: i64,
    exp: u64,
}

#[map]
static SYN_SCRATCH: PerCpuArray<SynScratch> = PerCpuArray::with_max_entries(1, 0);

/// The longest TCP header: 20 bytes and 40 of options.
const MAX_TCP_HEADER: u32 = 60;

/// One offset of the walk, `at` a constant: the state in and out of map memory (volatile:
/// kept out of registers from one offset to the next). Every plain SYN runs it: an offset
/// past the options costs a compare, one inside an option a load more; only where an
/// option starts (five or so in a SYN) is the step made.
macro_rules! option_steps {
    ($scratch:ident, $options:ident, $byte:ident; $($at:literal)*) => {$(
        // SAFETY: fields of this CPU's slot, used only within this program run.
        unsafe {
            if $at < $options && core::ptr::read_volatile(&(*$scratch).next) == $at {
                let mut next = $at;
                let mut foc = tcp_options::SynCookie {
                    len: core::ptr::read_volatile(&(*$scratch).len) as i32,
                    exp: core::ptr::read_volatile(&(*$scratch).exp) != 0,
                };
                tcp_options::syn_option_step($at, $options, &mut next, &mut foc, &$byte);
                core::ptr::write_volatile(&mut (*$scratch).next, next as u64);
                core::ptr::write_volatile(&mut (*$scratch).len, foc.len as i64);
                core::ptr::write_volatile(&mut (*$scratch).exp, foc.exp as u64);
            }
        }
    )*};
}

/// The TFO option of the SYN in `skb` as tcp_parse_options() read it before
/// tcp_try_fastopen() (`tcp_options::syn_cookie`): from the header at skb->head +
/// transport_header, which stays where it was when the child's clone of the SYN is pulled.
#[inline(always)]
fn syn_cookie<A: Access>(skb: SkBuff<A>) -> tcp_options::SynCookie {
    let none = tcp_options::SynCookie { len: -1, exp: false };
    if !present!(skb_head) || !present!(skb_transport_header) {
        return none;
    }
    let Some(scratch) = SYN_SCRATCH.get_ptr_mut(0) else { return none };
    let th = skb.skb_head().wrapping_add(skb.skb_transport_header() as u64);
    // SAFETY: this CPU's slot: 64 writable bytes of header, which the helper fills
    // MAX_TCP_HEADER of (zeros where the kernel's cannot be read); every byte read below is
    // at a constant offset inside them.
    let (bytes, options) = unsafe {
        let header = core::ptr::addr_of_mut!((*scratch).header) as *mut u8;
        bpf_probe_read_kernel(header as *mut _, MAX_TCP_HEADER, th as *const _);
        core::ptr::write_volatile(&mut (*scratch).next, 0);
        core::ptr::write_volatile(&mut (*scratch).len, -1);
        core::ptr::write_volatile(&mut (*scratch).exp, 0);
        let doff = (*header.add(12) >> 4) as usize;
        (header as *const u8, (doff * 4).saturating_sub(20))
    };
    // Most SYNs carry no TFO option: a word-wise look for its kinds lets them go before
    // the walk.
    // SAFETY: as above; the slot's whole aligned words.
    if !tcp_options::options_may_hold_tfo(unsafe { &(*scratch).header }, options) {
        return none;
    }
    // SAFETY: as above; `i` is below 43 (an option's magic at the last offset), masked anyway.
    let byte = |i: usize| unsafe { *bytes.add((20 + i) & 63) };
    option_steps!(scratch, options, byte;
        0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19
        20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39);
    // SAFETY: as above.
    unsafe {
        tcp_options::SynCookie {
            len: core::ptr::read_volatile(&(*scratch).len) as i32,
            exp: core::ptr::read_volatile(&(*scratch).exp) != 0,
        }
    }
}

/// Exit of tcp_try_fastopen() alone (fexit): what the entry hook remembers is read from the
/// SYN itself (the cookie it carried, its payload), then judged as the twins judge it.
#[inline(always)]
pub fn try_fastopen_fexit<A: Access>(args: CallArgs<A>, skb: SkBuff<A>, child: Sock<A>) {
    let data = syn_payload(skb);
    let cookie = syn_cookie(skb);
    // Plain SYNs (no TFO option, no data) are by far the most: nothing more.
    if cookie.len < 0 && data == 0 {
        return;
    }
    let Some(slot) = SYN_SEEN.get_ptr_mut(0) else { return };
    // SAFETY: per-CPU slot, written only on this CPU during this softirq.
    unsafe {
        *slot = SynSeen {
            sk: args.sk.addr(),
            req: args.req.addr(),
            foc: args.foc.addr(),
            start_ns: now(),
            in_len: cookie.len,
            syn_data_bytes: data,
            qlen: 0,
            max_qlen: 0,
            netns: 0,
            exp: 0,
        };
    }
    try_fastopen_exit(args, child);
}

/// Exit of inet_csk_listen_start(): a socket in LISTEN now has its port (a failed listen()
/// is back in CLOSE), in the owner's process context.
#[inline(always)]
pub fn on_listen_start<A: Access>(sk: Sock<A>) {
    if state_of(sk.common()) == TCP_LISTEN {
        listener_started(sk);
    }
}

/// Entry of inet_csk_listen_stop(): the listener closes. tcp_set_state(TCP_CLOSE) has run,
/// which clears skc_num unless the port was bound explicitly: its port is inet_sport's.
#[inline(always)]
pub fn on_listen_stop<A: Access>(sk: Sock<A>) {
    let tp = A::tcp_sock(sk);
    if tp.is_null() {
        return;
    }
    let key = ListenerKey::new(netns_of(sk.common()), u16::from_be(tp.inet_sport()), family_of(sk.common()));
    let _ = LISTENERS.remove(key);
}

/// The arguments of the call, where the hook sees them again (fexit: typed pointers that
/// direct loads need); a kretprobe does not (all null), and uses the addresses entry saw
/// (`Access::TYPED` says which).
pub struct CallArgs<A> {
    pub sk: Sock<A>,
    pub req: RequestSock<A>,
    pub foc: FastopenCookie<A>,
}

#[inline(always)]
pub fn try_fastopen_exit<A: Access>(args: CallArgs<A>, child: Sock<A>) {
    let Some(slot) = SYN_SEEN.get_ptr_mut(0) else { return };
    // SAFETY: per-CPU slot of this CPU, written only by this softirq; its `sk` cleared so
    // it is used once.
    let seen = unsafe { &mut *slot };
    if seen.sk == 0 {
        return;
    }
    let at_entry = (seen.sk, seen.req, seen.foc);
    seen.sk = 0;
    // Typed hooks read from their own arguments (the verifier would refuse the numbers
    // remembered at entry); the others have only those numbers.
    let (sk, req, foc) = if !A::TYPED {
        (
            Sock::at(at_entry.0 as *const u8),
            RequestSock::at(at_entry.1 as *const u8),
            FastopenCookie::at(at_entry.2 as *const u8),
        )
    } else if !args.sk.is_null() && args.sk.addr() == at_entry.0 {
        (args.sk, args.req, args.foc)
    } else {
        return;
    };
    let tp = A::tcp_sock(sk);
    if tp.is_null() {
        return;
    }
    let out_len = foc_len(foc);
    let netns = netns_of(sk.common());
    // The request sock holds the SYN's addresses: the server's as source (its local port
    // is the listener's).
    if !server_selected(req.common(), netns) {
        return;
    }
    seen.qlen = tp.fastopenq_qlen() as u32;
    seen.max_qlen = tp.fastopenq_max_qlen() as u32;
    seen.netns = netns;
    seen.exp = (foc.foc_exp() != 0) as u32;
    let seen = &*seen;

    let server = |what: Outcome, cookie_len: i32, extra_flags: u8| {
        // The child is judged at the SYN, before any handshake: no handshake time.
        let measure = Measure {
            stall_ns: 0,
            syn_data_bytes: seen.syn_data_bytes,
            retransmits: 0,
            handshake_ns: 0,
            at_ns: 0,
            saved_srtt_us: 0,
        };
        // The request sock starts with a sock_common holding the SYN's addresses and
        // ports (tcp_v4_init_req / tcp_openreq_init ran before tcp_try_fastopen).
        record(req.common(), Role::Server, what, seen.netns, &Known::NONE, measure, |ev| {
            ev.start_ns = seen.start_ns;
            ev.queue_len = seen.qlen;
            ev.queue_max = seen.max_qlen;
            ev.flags |= flags::QUEUE_KNOWN | extra_flags;
            if cookie_len >= 0 {
                // 0: the SYN asked for a cookie.
                ev.cookie_len = cookie_len as u8;
                ev.flags |= flags::COOKIE_LEN_KNOWN;
            }
            if seen.exp != 0 {
                ev.flags |= flags::EXP_OPTION;
            }
            name_listener_owner(ev, &ListenerKey::new(seen.netns, ev.sport, ev.family));
        })
    };

    // One event per SYN, where the kernel may count one SYN twice: every SYN with an empty
    // option is TcpExtTCPFastOpenCookieReqd, whether it then overflows the TFO queue
    // (ListenOverflow) or, where no cookie is required (0x200), makes a child (Passive).
    // Such a SYN's event is the overflow's or the child's, its cookie_len 0.
    if !child.is_null() {
        // foc stays a valid cookie only when the backup key matched (ret == 2).
        let what = if out_len > 0 && seen.in_len > 0 { Outcome::AcceptedAltKey } else { Outcome::Accepted };
        server(what, seen.in_len, 0);
        return;
    }
    if seen.in_len > 0 && out_len > 0 {
        // A cookie came in, no child came out, and a fresh cookie goes back:
        // TcpExtTCPFastOpenPassiveFail (invalid cookie, or the child could not be made).
        server(Outcome::CookieInvalid, seen.in_len, 0);
        return;
    }
    // The early return of tcp_try_fastopen: server bit off, no TCP_FASTOPEN on the listener,
    // or its TFO queue full (tcp_fastopen_queue_check, inlined: it counts
    // TcpExtTCPFastOpenListenOverflow). No cookie goes back from it.
    let net = sk.common().skc_net();
    let bits = if net.is_null() { 0 } else { net.net_sysctl_tcp_fastopen() };
    let server_on = bits & TFO_SERVER_ENABLE != 0;
    let overflowed = server_on && seen.max_qlen > 0 && seen.qlen >= seen.max_qlen;
    if seen.in_len == 0 {
        // The cookie going back (if any) is foc after the call.
        if out_len <= 0 && overflowed {
            server(Outcome::QueueOverflow, 0, 0);
        } else {
            let issued = if out_len > 0 { flags::COOKIE_ISSUED } else { 0 };
            server(Outcome::CookieRequested, out_len, issued);
        }
        return;
    }
    if overflowed && (seen.in_len > 0 || seen.syn_data_bytes > 0) {
        server(Outcome::QueueOverflow, seen.in_len, 0);
    } else if seen.in_len > 0 {
        server(Outcome::ListenerDisabled, seen.in_len, 0);
    } else if seen.syn_data_bytes > 0 && server_on && seen.max_qlen > 0 && !cookie_not_required(bits, tp) {
        // SYN-data without a TFO option at a listener that takes TFO with a cookie: past the
        // queue check, neither cookie branch runs (foc->len -1) and NULL goes back with no
        // counter moved. (Where no cookie is required, by the sysctl's 0x200 or the
        // listener's TCP_FASTOPEN_NO_COOKIE, such a SYN makes a child; a route's
        // fastopen_no_cookie is not read here.)
        server(Outcome::DataWithoutCookie, -1, 0);
    }
}

/// TFO_SERVER_COOKIE_NOT_REQD: the namespace takes SYN-data without a cookie.
const TFO_SERVER_COOKIE_NOT_REQD: u64 = 0x200;

/// Whether a listener takes SYN-data without a cookie (tcp_fastopen_no_cookie(): the
/// namespace's 0x200, or TCP_FASTOPEN_NO_COOKIE on the listener).
#[inline(always)]
fn cookie_not_required<A: Access>(bits: u64, listener: crate::kernel::TcpSock<A>) -> bool {
    bits & TFO_SERVER_COOKIE_NOT_REQD != 0 || (present!(fastopen_no_cookie) && listener.fastopen_no_cookie())
}
