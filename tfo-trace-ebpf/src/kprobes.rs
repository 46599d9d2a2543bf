//! kprobe/kretprobe backend entry points: the twins of fentry.rs where trampolines are
//! refused but kprobes exist, on the same functions. Untyped addresses: fields are read
//! with bpf_probe_read_kernel. A kprobe stands for an fentry; an fexit is a kprobe that
//! keeps the arguments and a kretprobe that reads them back (a kretprobe has none), except
//! where the exit sees nothing the entry does not. A plain client connection runs none of
//! these programs, a plain server connection the tcp_try_fastopen pair once each. SYN-ACK
//! resends come from the raw tracepoint.
use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{kprobe, kretprobe, map},
    maps::LruHashMap,
    programs::{ProbeContext, RetProbeContext},
};

use crate::{
    client::{on_active_disable, on_error_end, on_syn_prepared, on_synack, on_timeout, ECONNREFUSED},
    kernel::{FastopenCookie, Probe, RequestSock, SkBuff, Sock},
    server::{on_listen_start, on_listen_stop, try_fastopen_enter, try_fastopen_exit, CallArgs},
};

/// The arguments of a call in process context (a syscall), from its kprobe to its
/// kretprobe, keyed by the calling thread (`bpf_get_current_pid_tgid`): the thread may
/// sleep and move to another CPU between the two, so a per-CPU slot would not do. Removed
/// at the return; LRU, so that a return the kernel did not report (a kretprobe out of
/// instances) cannot pin an entry. One map per function: a stale entry of one is never
/// read as the other's.
#[map]
static SYN_PREPARING: LruHashMap<u64, [u64; 2]> = LruHashMap::with_max_entries(1024, 0);
#[map]
static LISTEN_STARTING: LruHashMap<u64, [u64; 2]> = LruHashMap::with_max_entries(1024, 0);

/// Keeps `args` for this thread's return from the call.
#[inline(always)]
fn keep(calls: &LruHashMap<u64, [u64; 2]>, args: [u64; 2]) {
    let _ = calls.insert(bpf_get_current_pid_tgid(), args, 0);
}

/// What this thread's call kept at its entry, removed (each entry is read once).
#[inline(always)]
fn take(calls: &LruHashMap<u64, [u64; 2]>) -> Option<[u64; 2]> {
    let thread = bpf_get_current_pid_tgid();
    // SAFETY: the value is copied out before the entry is removed.
    let args = unsafe { calls.get(thread) }.copied()?;
    let _ = calls.remove(thread);
    Some(args)
}

#[kprobe]
pub fn tfo_try_fastopen_kprobe(ctx: ProbeContext) -> u32 {
    let (Some(sk), Some(skb), Some(req), Some(foc)) = (ctx.arg(0), ctx.arg(1), ctx.arg(2), ctx.arg(3)) else {
        return 0;
    };
    try_fastopen_enter::<Probe>(Sock::at(sk), SkBuff::at(skb), RequestSock::at(req), FastopenCookie::at(foc));
    0
}

#[kretprobe]
pub fn tfo_try_fastopen_kretprobe(ctx: RetProbeContext) -> u32 {
    let seen = CallArgs { sk: Sock::null(), req: RequestSock::null(), foc: FastopenCookie::null() };
    try_fastopen_exit::<Probe>(seen, Sock::at(ctx.ret()));
    0
}

/// bool tcp_fastopen_cookie_check(struct sock *sk, u16 *mss, struct tcp_fastopen_cookie *cookie)
#[kprobe]
pub fn tfo_syn_prepared_kprobe(ctx: ProbeContext) -> u32 {
    if let (Some(sk), Some(cookie)) = (ctx.arg::<u64>(0), ctx.arg::<u64>(2)) {
        keep(&SYN_PREPARING, [sk, cookie]);
    }
    0
}

#[kretprobe]
pub fn tfo_syn_prepared_kretprobe(ctx: RetProbeContext) -> u32 {
    let Some([sk, cookie]) = take(&SYN_PREPARING) else { return 0 };
    // A bool return: only its low byte is defined.
    let sent: u64 = ctx.ret();
    on_syn_prepared::<Probe>(
        Sock::at(sk as *const u8),
        FastopenCookie::at(cookie as *const u8),
        sent as u8 != 0,
    );
    0
}

/// void tcp_fastopen_active_detect_blackhole(struct sock *sk, bool expired): its entry
/// alone, as on the fentry backend.
#[kprobe]
pub fn tfo_timeout_kprobe(ctx: ProbeContext) -> u32 {
    if let (Some(sk), Some(expired)) = (ctx.arg::<*const u8>(0), ctx.arg::<u64>(1)) {
        on_timeout::<Probe>(Sock::at(sk), expired as u8 != 0);
    }
    0
}

/// void tcp_fastopen_active_disable(struct sock *sk)
#[kprobe]
pub fn tfo_active_disable_kprobe(ctx: ProbeContext) -> u32 {
    if let Some(sk) = ctx.arg::<*const u8>(0) {
        on_active_disable::<Probe>(Sock::at(sk));
    }
    0
}

/// void tcp_fastopen_cache_set(struct sock *sk, u16 mss, struct tcp_fastopen_cookie *cookie,
///     bool syn_lost, u16 try_exp)
#[kprobe]
pub fn tfo_cookie_cached_kprobe(ctx: ProbeContext) -> u32 {
    if let (Some(sk), Some(cookie)) = (ctx.arg(0), ctx.arg(2)) {
        on_synack::<Probe>(Sock::at(sk), FastopenCookie::at(cookie));
    }
    0
}

/// void tcp_done_with_error(struct sock *sk, int err) (6.1+ on the kernels checked)
#[kprobe]
pub fn tfo_error_end_kprobe(ctx: ProbeContext) -> u32 {
    if let (Some(sk), Some(err)) = (ctx.arg(0), ctx.arg::<u64>(1)) {
        on_error_end::<Probe>(Sock::at(sk), err as i32);
    }
    0
}

/// void tcp_reset(struct sock *sk[, struct sk_buff *skb]): where tcp_done_with_error is absent.
#[kprobe]
pub fn tfo_reset_kprobe(ctx: ProbeContext) -> u32 {
    if let Some(sk) = ctx.arg(0) {
        on_error_end::<Probe>(Sock::at(sk), ECONNREFUSED);
    }
    0
}

/// int inet_csk_listen_start(struct sock *sk[, int backlog]): the state is LISTEN only
/// inside the call.
#[kprobe]
pub fn tfo_listen_start_kprobe(ctx: ProbeContext) -> u32 {
    if let Some(sk) = ctx.arg::<u64>(0) {
        keep(&LISTEN_STARTING, [sk, 0]);
    }
    0
}

#[kretprobe]
pub fn tfo_listen_start_kretprobe(_ctx: RetProbeContext) -> u32 {
    if let Some([sk, _]) = take(&LISTEN_STARTING) {
        on_listen_start::<Probe>(Sock::at(sk as *const u8));
    }
    0
}

/// void inet_csk_listen_stop(struct sock *sk)
#[kprobe]
pub fn tfo_listen_stop_kprobe(ctx: ProbeContext) -> u32 {
    if let Some(sk) = ctx.arg(0) {
        on_listen_stop::<Probe>(Sock::at(sk));
    }
    0
}
