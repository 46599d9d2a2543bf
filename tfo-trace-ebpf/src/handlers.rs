//! One handler per TFO transition, shared by every backend's entry points.
//!
//! Client (net/ipv4/tcp_input.c, tcp_rcv_synsent_state_process): tcp_ack() runs on the
//! SYN-ACK, then tcp_finish_connect() sets ESTABLISHED, then tcp_rcv_fastopen_synack()
//! decides the outcome from `syn_data`, `syn_fastopen`, `total_retrans` and whether the
//! SYN's data is still at the head of the retransmit queue. At the ESTABLISHED transition
//! all four already hold the values that function reads, so this handler reaches the same
//! verdict the kernel is about to reach, even where tcp_rcv_fastopen_synack is inlined.
use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::PerCpuArray,
    EbpfContext,
};
use aya_log_ebpf::{debug, warn};
use tfo_trace_common::{
    config, counter, flags, outcome, role, ListenerKey, ProcInfo, TfoEvent, TASK_COMM_LEN,
};

use crate::{
    kernel::{
        config_has, flag, layout, netns_of, read, read_bits, tuple_of, IPPROTO_TCP, TCP_CLOSE,
        TCP_ESTABLISHED, TCP_LISTEN, TCP_SYN_RECV, TCP_SYN_SENT,
    },
    maps::{bump, emit_with, ConnState, CONNS, LISTENERS},
};

#[inline(always)]
fn now() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

#[inline(always)]
fn current_process() -> (u32, [u8; TASK_COMM_LEN]) {
    let pid = (bpf_get_current_pid_tgid() >> 32) as u32;
    (pid, bpf_get_current_comm().unwrap_or([0; TASK_COMM_LEN]))
}

/// `sock:inet_sock_set_state`: every TCP state change.
#[inline(always)]
pub fn on_state_change<C: EbpfContext>(ctx: &C, sk: *const u8, old: i32, new: i32) {
    // The transition costs nothing to test; the protocol costs a kernel read. Most state
    // changes of a connection (FIN_WAIT*, CLOSE_WAIT, ...) matter to no handler below.
    let interesting = matches!(
        (old, new),
        (TCP_CLOSE, TCP_SYN_SENT) | (TCP_SYN_SENT, _) | (TCP_LISTEN, _) | (TCP_SYN_RECV, _) | (_, TCP_LISTEN)
    );
    if !interesting || read_bits(sk, layout!(sk_protocol)) != Some(IPPROTO_TCP) {
        return;
    }
    match (old, new) {
        (TCP_CLOSE, TCP_SYN_SENT) => client_connect(ctx, sk),
        (TCP_SYN_SENT, TCP_ESTABLISHED) => client_established(ctx, sk),
        (TCP_SYN_SENT, TCP_CLOSE) => client_failed(sk),
        (TCP_LISTEN, TCP_SYN_RECV) if config_has(config::SERVER_FROM_STATE) => server_child_created(sk),
        (TCP_SYN_RECV, _) => server_child_resolved(sk),
        (_, TCP_LISTEN) => listener_started(sk),
        (TCP_LISTEN, TCP_CLOSE) => listener_stopped(sk),
        _ => {}
    }
}

/// `tcp:tcp_retransmit_skb`: counts SYN timeouts of TFO connections we follow.
#[inline(always)]
pub fn on_retransmit(sk: *const u8) {
    let key = sk as u64;
    if let Some(state) = CONNS.get_ptr_mut(&key) {
        let sk_state: u8 = read(sk, layout!(skc_state)).unwrap_or(0);
        if sk_state as i32 == TCP_SYN_SENT {
            // SAFETY: pointer from a successful map lookup, valid for this program run.
            unsafe {
                (*state).retransmits += 1;
                (*state).last_retrans_ns = now();
                (*state).sport = read(sk, layout!(skc_num)).unwrap_or(0);
            }
        }
    }
}

/// CLOSE -> SYN_SENT runs in the connecting process (tcp_v4_connect / tcp_v6_connect),
/// before tcp_connect() sends the SYN: the one moment pid and comm are the client's.
/// `fastopen_req` is set for sendto(MSG_FASTOPEN), `fastopen_connect` for
/// TCP_FASTOPEN_CONNECT.
#[inline(always)]
fn client_connect<C: EbpfContext>(ctx: &C, sk: *const u8) {
    let fastopen_req: u64 = read(sk, layout!(fastopen_req)).unwrap_or(0);
    if fastopen_req == 0 && !flag(sk, layout!(fastopen_connect)) {
        return;
    }
    let (pid, comm) = current_process();
    let state = ConnState::new(pid, comm);
    if CONNS.insert(&(sk as u64), &state, 0).is_err() {
        // Rare (LRU maps evict instead): counted, and said with -v.
        bump(counter::CONN_INSERT_FAILED);
        warn!(ctx, "tfo-trace: could not record a TFO connect of pid {}", pid);
    }
}

/// Fills the parts of an event every outcome shares, in place (`ev` is the reserved
/// ring-buffer slot, zeroed): no event-sized copy on the 512-byte BPF stack.
#[inline(always)]
pub(crate) fn fill_event(ev: &mut TfoEvent, sk: *const u8, role: u8, outcome: u8, state: Option<&ConnState>) {
    let t = tuple_of(sk);
    ev.ts_ns = now();
    ev.saddr = t.saddr;
    ev.daddr = t.daddr;
    ev.netns = netns_of(sk);
    ev.sport = t.sport;
    ev.dport = t.dport;
    ev.family = t.family;
    ev.role = role;
    ev.outcome = outcome;
    if let Some(s) = state {
        ev.start_ns = s.start_ns;
        ev.flags |= flags::START_KNOWN;
        if s.pid != 0 {
            ev.pid = s.pid;
            ev.comm = s.comm;
            ev.flags |= flags::PID_KNOWN;
        }
        if s.last_retrans_ns > s.start_ns {
            ev.stall_ns = s.last_retrans_ns - s.start_ns;
        }
    }
}

#[inline(always)]
fn client_established<C: EbpfContext>(ctx: &C, sk: *const u8) {
    let key = sk as u64;
    // SAFETY: the value is copied out before any other map operation.
    let state = unsafe { CONNS.get(&key) }.copied();
    let syn_data = flag(sk, layout!(syn_data));
    let syn_fastopen = flag(sk, layout!(syn_fastopen));
    if state.is_none() && !syn_data && !syn_fastopen {
        return; // a plain connection
    }
    if state.is_none() {
        // Started before we attached: no pid, no start time. Once per such connection.
        debug!(ctx, "tfo-trace: TFO connection without recorded connect (started before attach?)");
    }
    let total_retrans: u32 = read(sk, layout!(total_retrans)).unwrap_or(0);
    let result = if syn_data {
        // tcp_rcv_fastopen_synack: data = tp->syn_data ? tcp_rtx_queue_head(sk) : NULL.
        let rtx_head: u64 = read(sk, layout!(tcp_rtx_queue)).unwrap_or(0);
        if rtx_head == 0 {
            outcome::ACCEPTED
        } else if total_retrans > 0 {
            outcome::SYN_RETRANSMITTED
        } else {
            outcome::DATA_NOT_ACKED
        }
    } else if syn_fastopen {
        if total_retrans > 0 {
            outcome::SYN_RETRANSMITTED
        } else {
            outcome::COOKIE_REQUESTED
        }
    } else {
        outcome::NOT_ATTEMPTED
    };
    emit_with(|ev| {
        fill_event(ev, sk, role::CLIENT, result, state.as_ref());
        ev.retransmits = total_retrans;
        if syn_data {
            ev.syn_data_bytes = syn_data_bytes(sk);
        }
        if flag(sk, layout!(syn_fastopen_exp)) {
            ev.flags |= flags::EXP_OPTION;
        }
    });
    // tcp_rcv_fastopen_synack() runs next and caches the SYN-ACK's cookie; where that is
    // hooked, on_cookie_cached() still needs the process and drops the state itself.
    if !((syn_data || syn_fastopen) && config_has(config::COOKIE_FROM_CACHE_SET)) {
        let _ = CONNS.remove(&key);
    }
}

/// Payload bytes of the SYN-data: nothing but the SYN-data has been sent before the
/// handshake resolves, so bytes_sent is its length (retransmitted SYNs carry none).
#[inline(always)]
fn syn_data_bytes(sk: *const u8) -> u32 {
    let sent: u64 = read(sk, layout!(bytes_sent)).unwrap_or(0);
    sent as u32
}

/// What entry to tcp_fastopen_active_detect_blackhole() saw, per CPU: the socket and the
/// namespace's tfo_active_disable_times (the kernel bumps it, with
/// TcpExtTCPFastOpenBlackhole, exactly when it pauses active TFO).
#[map]
static BLACKHOLE_SEEN: PerCpuArray<[u64; 2]> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn active_disable_times(sk: *const u8) -> u64 {
    let net: u64 = read(sk, layout!(skc_net)).unwrap_or(0);
    if net == 0 {
        return 0;
    }
    read::<u32>(net as *const u8, layout!(net_tfo_active_disable_times)).unwrap_or(0) as u64
}

/// Entry of tcp_fastopen_active_detect_blackhole(sk, expired), called on every SYN or
/// retransmission timeout. tcp_fastopen_active_disable() is inlined into it on some
/// kernels, so the pause is seen as its effect: the counter moving during the call.
#[inline(always)]
pub fn detect_blackhole_enter(sk: *const u8) {
    if let Some(slot) = BLACKHOLE_SEEN.get_ptr_mut(0) {
        // SAFETY: per-CPU slot, used from entry to exit of one call on this CPU.
        unsafe { *slot = [sk as u64, active_disable_times(sk)] };
    }
}

#[inline(always)]
pub fn detect_blackhole_exit() {
    let Some(slot) = BLACKHOLE_SEEN.get_ptr_mut(0) else { return };
    // SAFETY: as above; cleared so one entry is used once.
    let [sk, before] = unsafe { core::mem::replace(&mut *slot, [0, 0]) };
    let sk = sk as *const u8;
    if sk.is_null() || active_disable_times(sk) <= before {
        return;
    }
    // SAFETY: copied out before any other map operation.
    let state = unsafe { CONNS.get(&(sk as u64)) }.copied();
    emit_with(|ev| {
        fill_event(ev, sk, role::CLIENT, outcome::ACTIVE_DISABLED, state.as_ref());
        ev.retransmits = read(sk, layout!(total_retrans)).unwrap_or(0);
        if flag(sk, layout!(syn_data)) {
            ev.syn_data_bytes = syn_data_bytes(sk);
        }
    });
}

/// tcp_fastopen_cache_set(sk, mss, cookie, syn_lost, try_exp): the SYN-ACK's cookie going
/// into the destination's cache. A NULL cookie (the SYN timer) or len <= 0 (no cookie in
/// the SYN-ACK) caches nothing new.
#[inline(always)]
pub fn on_cookie_cached(sk: *const u8, cookie: *const u8) {
    if cookie.is_null() {
        return; // the SYN timer recording a loss: the connection is still in SYN_SENT
    }
    // SAFETY: copied out before any other map operation.
    let state = unsafe { CONNS.get(&(sk as u64)) }.copied();
    // The last use of this connection's state (client_established kept it for us).
    let _ = CONNS.remove(&(sk as u64));
    let len = read::<i8>(cookie, layout!(foc_len)).unwrap_or(-1);
    if len <= 0 {
        return;
    }
    emit_with(|ev| {
        fill_event(ev, sk, role::CLIENT, outcome::COOKIE_RECEIVED, state.as_ref());
        ev.cookie_len = len as u8;
        ev.flags |= flags::COOKIE_LEN_KNOWN;
        if read::<u8>(cookie, layout!(foc_exp)).unwrap_or(0) != 0 {
            ev.flags |= flags::EXP_OPTION;
        }
        ev.retransmits = read(sk, layout!(total_retrans)).unwrap_or(0);
    });
}

/// SYN_SENT -> CLOSE: a TFO connection that never completed (timeout, reset, refused).
#[inline(always)]
fn client_failed(sk: *const u8) {
    let key = sk as u64;
    // SAFETY: copied out before any other map operation.
    let Some(state) = (unsafe { CONNS.get(&key) }).copied() else {
        return;
    };
    let total_retrans: u32 = read(sk, layout!(total_retrans)).unwrap_or(0);
    let syn_data = flag(sk, layout!(syn_data));
    // A deferred TCP_FASTOPEN_CONNECT socket closed before its first write sent nothing.
    if syn_data || flag(sk, layout!(syn_fastopen)) || total_retrans > 0 {
        emit_with(|ev| {
            fill_event(ev, sk, role::CLIENT, outcome::CONNECT_FAILED, Some(&state));
            ev.retransmits = total_retrans;
            if ev.sport == 0 {
                ev.sport = state.sport;
            }
            if syn_data {
                ev.syn_data_bytes = syn_data_bytes(sk);
            }
        });
    }
    let _ = CONNS.remove(&key);
}

/// LISTEN -> SYN_RECV is inet_csk_clone_lock() making a child. For TFO the child is
/// made from the SYN (tcp_fastopen_create_child); for a plain handshake from the final
/// ACK. Which one it was is only known when the child leaves SYN_RECV.
#[inline(always)]
fn server_child_created(sk: *const u8) {
    let state = ConnState::new(0, [0; TASK_COMM_LEN]);
    let _ = CONNS.insert(&(sk as u64), &state, 0);
}

/// A child leaving SYN_RECV: a TFO child has `syn_fastopen_child` (kernels that have it)
/// or `syn_data_acked`, set by tcp_fastopen_add_skb() when the SYN's data was queued.
#[inline(always)]
fn server_child_resolved(sk: *const u8) {
    let key = sk as u64;
    // SAFETY: copied out before any other map operation.
    let state = unsafe { CONNS.get(&key) }.copied();
    let _ = CONNS.remove(&key);
    if !config_has(config::SERVER_FROM_STATE) {
        return; // the backend reports server outcomes from tcp_try_fastopen
    }
    let child_field = layout!(syn_fastopen_child);
    let is_tfo_child =
        if child_field.present != 0 { flag(sk, child_field) } else { flag(sk, layout!(syn_data_acked)) };
    if !is_tfo_child {
        return;
    }
    emit_with(|ev| {
        fill_event(ev, sk, role::SERVER, outcome::ACCEPTED, state.as_ref());
        let received: u64 = read(sk, layout!(bytes_received)).unwrap_or(0);
        ev.syn_data_bytes = received as u32;
        let listener = ListenerKey { netns: ev.netns, port: ev.sport, _pad: 0 };
        name_listener_owner(ev, &listener);
    });
}

/// tcp_rtx_synack(sk, req): for a plain handshake `sk` is the listener; for TFO it is the
/// child made from the SYN-data, still in SYN_RECV (tcp_fastopen_synack_timer, or the
/// client's SYN retransmitted into tcp_check_req). Each call also counts as
/// TcpExtTCPSynRetrans in the server's namespace.
#[inline(always)]
pub fn on_synack_retransmit(sk: *const u8, req: *const u8) {
    let state: u8 = read(sk, layout!(skc_state)).unwrap_or(0);
    if state as i32 != TCP_SYN_RECV {
        return;
    }
    emit_with(|ev| {
        fill_event(ev, sk, role::SERVER, outcome::SYNACK_RETRANSMITTED, None);
        let before: u8 = read(req, layout!(req_num_retrans)).unwrap_or(0);
        ev.retransmits = before as u32 + 1; // inet_rtx_syn_ack() counts it after the send
        let received: u64 = read(sk, layout!(bytes_received)).unwrap_or(0);
        ev.syn_data_bytes = received as u32;
        let listener = ListenerKey { netns: ev.netns, port: ev.sport, _pad: 0 };
        name_listener_owner(ev, &listener);
    });
}

/// A listener is known by its namespace and local port (what a child socket shares).
#[inline(always)]
pub(crate) fn listener_key(sk: *const u8) -> ListenerKey {
    ListenerKey { netns: netns_of(sk), port: read(sk, layout!(skc_num)).unwrap_or(0), _pad: 0 }
}

/// Server events name the process that called listen() on that port.
#[inline(always)]
pub(crate) fn name_listener_owner(ev: &mut TfoEvent, listener: &ListenerKey) {
    // SAFETY: copied out before any other map operation.
    if let Some(owner) = unsafe { LISTENERS.get(listener) }.copied() {
        ev.pid = owner.pid;
        ev.comm = owner.comm;
        ev.flags |= flags::PID_KNOWN;
    }
}

/// listen() runs in the owner's process context: remember who owns the port.
#[inline(always)]
fn listener_started(sk: *const u8) {
    let (pid, comm) = current_process();
    let _ = LISTENERS.insert(&listener_key(sk), &ProcInfo { pid, _pad: 0, comm }, 0);
}

#[inline(always)]
fn listener_stopped(sk: *const u8) {
    let _ = LISTENERS.remove(&listener_key(sk));
}
