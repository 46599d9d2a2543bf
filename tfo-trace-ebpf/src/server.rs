//! Server outcomes from tcp_try_fastopen() (net/ipv4/tcp_fastopen.c), the one function
//! every SYN at a listener passes through. Entry records the cookie the SYN carried
//! (foc->len: -1 no option, 0 cookie request, >0 a cookie); exit sees what the kernel
//! made of it (the child, and foc rewritten to the cookie that goes back in the SYN-ACK).
//! Shared by the fentry/fexit and kprobe/kretprobe twins.
use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::map, maps::PerCpuArray};
use tfo_trace_common::{flags, outcome, role, ListenerKey};

use crate::{
    handlers::{fill_event, name_listener_owner},
    kernel::{layout, netns_of, read},
    maps::emit_with,
};

/// What entry saw, per CPU: the SYN is processed in softirq on one CPU from entry to exit.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SynSeen {
    pub sk: u64,
    pub skb: u64,
    pub req: u64,
    pub foc: u64,
    pub start_ns: u64,
    pub in_len: i32,
    pub syn_data_bytes: u32,
}

#[map]
static SYN_SEEN: PerCpuArray<SynSeen> = PerCpuArray::with_max_entries(1, 0);

const TFO_SERVER_ENABLE: u32 = 0x2;

/// Payload of the SYN: TCP_SKB_CB(skb)->end_seq - seq - 1 (the SYN flag takes one).
#[inline(always)]
fn syn_payload(skb: *const u8) -> u32 {
    let cb = skb.wrapping_add(layout!(skb_cb).off as usize);
    let seq: u32 = read(cb, layout!(tcb_seq)).unwrap_or(0);
    let end: u32 = read(cb, layout!(tcb_end_seq)).unwrap_or(0);
    end.wrapping_sub(seq).saturating_sub(1)
}

#[inline(always)]
fn foc_len(foc: *const u8) -> i32 {
    read::<i8>(foc, layout!(foc_len)).unwrap_or(-1) as i32
}

#[inline(always)]
pub fn try_fastopen_enter(sk: *const u8, skb: *const u8, req: *const u8, foc: *const u8) {
    let in_len = foc_len(foc);
    let data = syn_payload(skb);
    // Plain SYNs (no TFO option, no data) are by far the most: nothing to remember.
    if in_len < 0 && data == 0 {
        return;
    }
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(slot) = SYN_SEEN.get_ptr_mut(0) {
        // SAFETY: per-CPU slot, written only on this CPU during this softirq.
        unsafe {
            *slot = SynSeen {
                sk: sk as u64,
                skb: skb as u64,
                req: req as u64,
                foc: foc as u64,
                start_ns: now,
                in_len,
                syn_data_bytes: data,
            };
        }
    }
}

#[inline(always)]
pub fn try_fastopen_exit(child: *const u8) {
    let Some(slot) = SYN_SEEN.get_ptr_mut(0) else { return };
    // SAFETY: per-CPU slot of this CPU; copied, then cleared so it is used once.
    let seen = unsafe { *slot };
    if seen.sk == 0 {
        return;
    }
    // SAFETY: as above.
    unsafe { (*slot).sk = 0 };
    let (sk, req, foc) = (seen.sk as *const u8, seen.req as *const u8, seen.foc as *const u8);
    let out_len = foc_len(foc);
    let listener =
        ListenerKey { netns: netns_of(sk), port: read(sk, layout!(skc_num)).unwrap_or(0), _pad: 0 };

    let emit_server = |what: u8, cookie_len: i32, extra_flags: u8| {
        emit_with(|ev| {
            // The request sock starts with a sock_common holding the SYN's addresses and
            // ports (tcp_v4_init_req / tcp_openreq_init ran before tcp_try_fastopen).
            fill_event(ev, req, role::SERVER, what, None);
            ev.netns = listener.netns;
            ev.syn_data_bytes = seen.syn_data_bytes;
            ev.start_ns = seen.start_ns;
            ev.queue_len = read(sk, layout!(fastopenq_qlen)).unwrap_or(0);
            ev.queue_max = read(sk, layout!(fastopenq_max_qlen)).unwrap_or(0);
            ev.flags |= flags::QUEUE_KNOWN | extra_flags;
            if cookie_len > 0 {
                ev.cookie_len = cookie_len as u8;
                ev.flags |= flags::COOKIE_LEN_KNOWN;
            }
            if read::<u8>(foc, layout!(foc_exp)).unwrap_or(0) != 0 {
                ev.flags |= flags::EXP_OPTION;
            }
            name_listener_owner(ev, &listener);
        })
    };

    if seen.in_len == 0 {
        // Every SYN with an empty option counts as TcpExtTCPFastOpenCookieReqd; the
        // cookie going back (if any) is foc after the call.
        let issued = if out_len > 0 { flags::COOKIE_ISSUED } else { 0 };
        emit_server(outcome::COOKIE_REQUESTED, out_len, issued);
    }
    if !child.is_null() {
        // foc stays a valid cookie only when the backup key matched (ret == 2).
        let what = if out_len > 0 && seen.in_len > 0 { outcome::ACCEPTED_ALT_KEY } else { outcome::ACCEPTED };
        emit_server(what, seen.in_len, 0);
        return;
    }
    if seen.in_len > 0 && out_len > 0 {
        // A cookie came in, no child came out, and a fresh cookie goes back:
        // TcpExtTCPFastOpenPassiveFail (invalid cookie, or the child could not be made).
        emit_server(outcome::COOKIE_INVALID, seen.in_len, 0);
        return;
    }
    if seen.in_len > 0 || (seen.in_len < 0 && seen.syn_data_bytes > 0) {
        // The early return of tcp_try_fastopen: server bit off, no TCP_FASTOPEN on the
        // listener, or its TFO queue full (tcp_fastopen_queue_check counts
        // TcpExtTCPFastOpenListenOverflow).
        let net: u64 = read(sk, layout!(skc_net)).unwrap_or(0);
        let bits: u32 = read(net as *const u8, layout!(net_sysctl_tcp_fastopen)).unwrap_or(0);
        let qlen: i32 = read(sk, layout!(fastopenq_qlen)).unwrap_or(0);
        let max_qlen: i32 = read(sk, layout!(fastopenq_max_qlen)).unwrap_or(0);
        if bits & TFO_SERVER_ENABLE != 0 && max_qlen > 0 && qlen >= max_qlen {
            emit_server(outcome::QUEUE_OVERFLOW, seen.in_len, 0);
        } else if seen.in_len > 0 {
            emit_server(outcome::LISTENER_DISABLED, seen.in_len, 0);
        }
    }
}
