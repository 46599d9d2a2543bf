//! Client outcomes from TFO's own functions (the fentry backend): no hook here runs for a
//! plain connection, where the state tracepoint ran about four times per connection on
//! each end.
//!
//! - tcp_fastopen_cookie_check() is called only for a SYN that asks for TFO
//!   (tcp_send_syn_data(), with `fastopen_req` set; and from tcp_fastopen_defer_connect()
//!   on a TCP_FASTOPEN_CONNECT socket, without it): at its exit in the process's context
//!   the connection is followed, or, where active TFO is paused, is `not_attempted`.
//! - tcp_fastopen_cache_set() is called only from tcp_rcv_fastopen_synack(), for the
//!   SYN-ACK of a connection whose SYN asked for TFO: every outcome at a SYN-ACK is decided
//!   there, from the members the kernel is about to read (`handlers::client_outcome`).
//! - tcp_fastopen_active_detect_blackhole() runs on every retransmission timeout of any
//!   socket (not per connection): it times a followed SYN's timeouts, tells a pause of
//!   active TFO by the kernel's own condition (a client's timeouts, or a server TFO
//!   child's), and a connect that gave up (`expired`).
//! - tcp_fastopen_active_disable() runs only when active TFO is paused: the pauses an
//!   out-of-order FIN or RST makes (the timeouts' are told above).
//! - tcp_done_with_error() (tcp_reset() where the kernel has none) runs for a connection
//!   that ends by an error: a followed connect refused by a reset, with its error.
//!
//! Not seen: a connect the application closes in SYN_SENT, and one ended by an ICMP error
//! on kernels without tcp_done_with_error(): their state ages out of the LRU hash.
use aya_ebpf::{macros::map, maps::PerCpuArray};
use tfo_trace_common::{cookie_hash, counter, flags, trip, Cause, ListenerKey, Outcome, Role};

use crate::{
    filter,
    globals::cookie_key,
    handlers::{
        client_failed, client_flags, client_outcome, cookie_received, name_listener_owner, packet_time_ns,
        pause_of, refusal_cause, refused_data, req_cookie_hash, server_selected, syn_data_bytes,
        ERROR_OF_SOCKET,
    },
    kernel::{netns_of, present, state_of, tuple_of, Access, FastopenCookie, Sock, TcpSock, TCP_SYN_SENT},
    maps::{bump, conn_state, follow, forget, now, ConnState, Measure},
    record::{current_process, record, Known},
};

/// Exit of tcp_fastopen_cookie_check(sk, mss, cookie): `sent` is its verdict (a cookie, or
/// TFO without one); false with `cookie->len` -1 is active TFO paused after a blackhole
/// (the SYN goes out without the option), false with 0 a cookie request.
#[inline(always)]
pub fn on_syn_prepared<A: Access>(sk: Sock<A>, cookie: FastopenCookie<A>, sent: bool) {
    let tp = A::tcp_view(sk);
    if tp.is_null() || tp.fastopen_req().is_null() {
        // tcp_fastopen_defer_connect() asking whether to wait for the first write: the SYN
        // that goes out passes here again, with its request.
        return;
    }
    let process = current_process();
    if !filter::process_selected(process.pid, &process.comm, &process.thread) {
        return;
    }
    let netns = netns_of(sk.common());
    if filter::needs_state() {
        let t = tuple_of(sk.common());
        if !filter::connection_selected(netns, t.family, &t.daddr, t.dport, &t.saddr) {
            return;
        }
    }
    // Its start is the SYN's: tcp_connect() stamped the clock the SYN is sent by just
    // before (tcp_mstamp_refresh), so the handshake and the round trip tcp_ack() measures
    // on it start together; the clock now runs behind this call and this program.
    let mut state = ConnState { start_ns: packet_time_ns(tp), ..ConnState::new(&process) };
    if !sent && (cookie.foc_len() as u8 as i8) < 0 {
        // Nothing at its SYN-ACK will say more (its SYN has no TFO flag): decided now,
        // without a handshake time.
        let conn = Known::of(&state);
        let measure = Measure {
            stall_ns: 0,
            syn_data_bytes: 0,
            retransmits: 0,
            handshake_ns: 0,
            at_ns: 0,
            saved_srtt_us: 0,
        };
        record(sk.common(), Role::Client, Outcome::NotAttempted, netns, &conn, measure, |ev| {
            pause_of(sk, ev)
        });
        return;
    }
    // The cookie it sends, hashed: its SYN-ACK's cookie is compared with it (a SYN that
    // leaves before an earlier one's SYN-ACK cached a new cookie carries the old one).
    let len = cookie.foc_len() as u8 as i8;
    if sent && len > 0 && present!(foc_val) {
        state.sent_hash = cookie_hash(cookie_key(), cookie.foc_val());
    }
    // One call per SYN that goes out: an entry already at this address was a dead socket's.
    if !follow(sk, &state) {
        bump(counter::CONN_STATE_FAILED);
    }
}

/// Entry of tcp_fastopen_cache_set(sk, mss, cookie, syn_lost, try_exp): the SYN-ACK of a
/// connection that asked for TFO, after tcp_ack() and tcp_finish_connect(), before
/// tcp_rcv_fastopen_synack() reads the retransmit queue and sets `syn_data_acked`. Every
/// outcome at a SYN-ACK, with a refused SYN-data's cause and the cookie it brought.
#[inline(always)]
pub fn on_synack<A: Access>(sk: Sock<A>, cookie: FastopenCookie<A>) {
    if cookie.is_null() {
        return;
    }
    let state = conn_state(sk);
    if state.is_null() && filter::needs_state() {
        return; // filtered out at the SYN (or older than the tracer, with filters)
    }
    let conn = Known::of(state);
    if conn.known {
        forget(sk);
    }
    let tp = A::tcp_sock(sk);
    if tp.is_null() {
        return;
    }
    let len = cookie.foc_len() as u8 as i8;
    let hash = if len > 0 && present!(foc_val) { cookie_hash(cookie_key(), cookie.foc_val()) } else { 0 };
    let f = client_flags(tp);
    let c = client_outcome(sk, tp, &f, &conn);
    let refused = refused_data(&f, c.outcome);
    // The cookie the SYN carried: hashed as it left, or (a connection older than the
    // tracer) where a blocking socket's request still holds it. None in no-cookie mode.
    let sent = if !refused || !f.syn_fastopen {
        0
    } else if conn.sent_hash != 0 {
        conn.sent_hash
    } else {
        req_cookie_hash(tp)
    };
    let cause = if !refused {
        Cause::Unknown
    } else if !f.syn_fastopen {
        // The SYN's option was left out (no-cookie mode): tcp_rcv_fastopen_synack()
        // ignores any cookie its SYN-ACK brings (len -1 here whatever the server sent).
        Cause::NoCookieSent
    } else {
        refusal_cause(len, hash, sent)
    };
    let netns = netns_of(sk.common());
    record(sk.common(), Role::Client, c.outcome, netns, &conn, c.measure, |ev| {
        if f.exp {
            ev.flags |= flags::EXP_OPTION;
        }
        if refused {
            ev.cause = cause as u8;
            ev.cookie_hash = hash;
            ev.sent_cookie_hash = sent;
            ev.cookie_len = if len > 0 { len as u8 } else { 0 };
            ev.flags |= flags::COOKIE_LEN_KNOWN;
        }
    });
    if len > 0 {
        cookie_received(sk, tp, cookie, hash, &conn);
    }
}

/// Entry of tcp_fastopen_active_detect_blackhole(sk, expired), which tcp_write_timeout()
/// calls on every retransmission timeout; tcp_retransmit_timer() then resends (`expired`
/// false), or tcp_write_err() ends the connection (true). Its entry, not its exit: the
/// call changes nothing read here but the namespace's pause count, and a pause it makes is
/// claimed before tcp_fastopen_active_disable() runs (`on_active_disable`, where that is
/// not inlined into it).
#[inline(always)]
pub fn on_timeout<A: Access>(sk: Sock<A>, expired: bool) {
    let tp = A::tcp_view(sk);
    if tp.is_null() {
        return;
    }
    // The kernel's own first test: a socket that never used TFO (almost every timeout).
    if !(tp.syn_fastopen() || tp.syn_data() || tp.syn_data_acked()) {
        return;
    }
    // One call after the other, not one inside the other: each has a large stack frame,
    // and the verifier refuses a call chain over 512 bytes.
    if timeout_tfo(sk, expired) {
        // tcp_write_err() follows: SYN_SENT -> CLOSE, with sk_err_soft (an ICMP error
        // held) or ETIMEDOUT.
        client_failed(sk, timed_out_error(sk));
    }
}

/// The error tcp_write_err() ends a connection with: sk_err_soft, else ETIMEDOUT.
#[inline(always)]
fn timed_out_error<A: Access>(sk: Sock<A>) -> u8 {
    let soft = if present!(sk_err_soft) { sk.sk_err_soft() } else { 0 };
    if soft > 0 && soft <= u8::MAX as i32 {
        soft as u8
    } else {
        ETIMEDOUT
    }
}

/// Whether a followed connect has given up (its state is left for `client_failed`).
#[inline(never)] // off the plain timeouts' path (handlers' module doc)
fn timeout_tfo<A: Access>(sk: Sock<A>, expired: bool) -> bool {
    let tp = A::tcp_sock(sk);
    if tp.is_null() {
        return false;
    }
    let state = conn_state(sk);
    let conn = Known::of(state);
    if pauses_active_tfo(sk, tp, expired) {
        paused_by_timeouts(sk, tp, &conn);
    }
    // Only connects are followed, until their SYN-ACK.
    if state.is_null() || state_of(sk.common()) != TCP_SYN_SENT {
        return false;
    }
    if expired {
        return true;
    }
    // SAFETY: this connection's state, valid for this program run.
    unsafe {
        (*state).retransmits += 1;
        (*state).last_retrans_ns = now(); // the SYN is resent as this timer run returns
    }
    false
}

/// The `active_disabled` of a socket whose timeouts pause active TFO: a client's, or a
/// server's TFO child (`syn_data_acked` without `syn_data`: tcp_fastopen_add_skb() set it
/// on the child; a client sets it only with `syn_data`), whose data timeouts after the
/// handshake pause the namespace's active TFO all the same.
#[inline(always)] // into timeout_tfo: one more frame would pass the 512-byte stack
fn paused_by_timeouts<A: Access>(sk: Sock<A>, tp: TcpSock<A>, conn: &Known) {
    let child = tp.syn_data_acked() && !tp.syn_data() && !tp.syn_fastopen();
    let netns = netns_of(sk.common());
    let selected =
        if child { server_selected(sk.common(), netns) } else { conn.known || !filter::needs_state() };
    let Some(nth) = claim_pause(sk) else { return };
    if !selected {
        return;
    }
    let f = client_flags(tp);
    let measure = Measure {
        stall_ns: conn.stall_ns(),
        syn_data_bytes: if f.syn_data { syn_data_bytes(tp) } else { 0 },
        retransmits: tp.total_retrans(),
        handshake_ns: 0,
        at_ns: 0,
        saved_srtt_us: 0,
    };
    let role = if child { Role::Server } else { Role::Client };
    record(sk.common(), role, Outcome::ActiveDisabled, netns, conn, measure, |ev| {
        ev.pause_times = nth;
        ev.pause_age_ms = 0;
        ev.pause_trip = trip::TIMEOUTS;
        if child {
            name_listener_owner(ev, &ListenerKey::new(netns, ev.sport, ev.family));
        }
    });
}

/// What tcp_fastopen_active_detect_blackhole() decides for a socket that used TFO: a pause
/// of active TFO (tcp_fastopen_active_disable(), inlined into it on the kernels checked)
/// on the third timeout in a row (`icsk_retransmits` 2 as it runs: tcp_update_rto_stats()
/// counts each timeout after it), or on giving up before it, unless the namespace's
/// blackhole timeout is 0. Each pause moves TcpExtTCPFastOpenBlackhole.
#[inline(always)]
fn pauses_active_tfo<A: Access>(sk: Sock<A>, tp: TcpSock<A>, expired: bool) -> bool {
    if !present!(icsk_retransmits) {
        return false;
    }
    let timeouts = tp.icsk_retransmits();
    (timeouts == 2 || (timeouts < 2 && expired)) && blackhole_detection_on(sk)
}

/// Whether the socket's namespace pauses active TFO when told to: its blackhole timeout
/// is above 0 (tcp_fastopen_active_disable() returns at once otherwise).
#[inline(always)]
fn blackhole_detection_on<A: Access>(sk: Sock<A>) -> bool {
    let net = sk.common().skc_net();
    present!(net_tfo_blackhole_timeout) && !net.is_null() && net.net_tfo_blackhole_timeout() != 0
}

/// The pause a call of tcp_fastopen_active_disable() on `sk` is about to make, by the
/// namespace's count it will reach (`tfo_active_disable_times` + 1), claimed once per CPU:
/// None where another hook already told it (detect_blackhole's entry, then
/// tcp_fastopen_active_disable() itself where a kernel does not inline it there).
#[inline(always)]
fn claim_pause<A: Access>(sk: Sock<A>) -> Option<u16> {
    let net = sk.common().skc_net();
    let times = if present!(net_tfo_active_disable_times) && !net.is_null() {
        net.net_tfo_active_disable_times()
    } else {
        0
    };
    let nth = times.saturating_add(1).min(u16::MAX as u32) as u16;
    let slot = PAUSE_CLAIMED.get_ptr_mut(0)?;
    // SAFETY: this CPU's slot, used only within this program run (a timer or softirq runs
    // the caller and the callee on one CPU).
    unsafe {
        if (*slot).sk == sk.addr() && (*slot).nth == nth {
            return None;
        }
        *slot = PauseClaim { sk: sk.addr(), nth, _pad: [0; 3] };
    }
    Some(nth)
}

/// The last pause told on this CPU: the socket and the pause's number.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PauseClaim {
    sk: u64,
    nth: u16,
    _pad: [u16; 3],
}

#[map]
static PAUSE_CLAIMED: PerCpuArray<PauseClaim> = PerCpuArray::with_max_entries(1, 0);

/// Entry of tcp_fastopen_active_disable(sk): a pause of active TFO made elsewhere than by
/// timeouts (those are told at detect_blackhole's entry and claimed first): on a TFO client
/// socket that got no data, the peer's FIN alone in the out-of-order queue at close
/// (tcp_fastopen_active_disable_ofo_check(), tcp_fastopen.c), an out-of-order RST
/// (tcp_validate_incoming()) or FIN after close (tcp_rcv_state_process(), tcp_input.c): the
/// server's data lost on the path. Runs only when a pause is made, never for a plain
/// connection.
#[inline(always)]
pub fn on_active_disable<A: Access>(sk: Sock<A>) {
    if !blackhole_detection_on(sk) {
        return; // returns at once: no pause
    }
    let tp = A::tcp_sock(sk);
    if tp.is_null() {
        return;
    }
    let Some(nth) = claim_pause(sk) else { return };
    let netns = netns_of(sk.common());
    if filter::needs_state() {
        let t = tuple_of(sk.common());
        if !filter::connection_selected(netns, t.family, &t.daddr, t.dport, &t.saddr) {
            return;
        }
    }
    let measure = Measure {
        stall_ns: 0,
        syn_data_bytes: 0,
        retransmits: tp.total_retrans(),
        handshake_ns: 0,
        at_ns: 0,
        saved_srtt_us: 0,
    };
    record(sk.common(), Role::Client, Outcome::ActiveDisabled, netns, &Known::NONE, measure, |ev| {
        ev.pause_times = nth;
        ev.pause_age_ms = 0;
        ev.pause_trip = trip::OUT_OF_ORDER_END;
    });
}

/// Entry of tcp_done_with_error(sk, err) (6.1+) or tcp_reset(sk[, skb]): a connection that
/// ends by an error, `err` (tcp_reset() of a SYN_SENT socket: ECONNREFUSED), which the call
/// is about to put in sk_err. Only a followed connect still in SYN_SENT is ours: refused by
/// a reset (and, with tcp_done_with_error, an ICMP error or tcp_abort).
#[inline(always)]
pub fn on_error_end<A: Access>(sk: Sock<A>, err: i32) {
    if state_of(sk.common()) != TCP_SYN_SENT {
        return;
    }
    let err = if err > 0 && err <= u8::MAX as i32 { err as u8 } else { ERROR_OF_SOCKET };
    client_failed(sk, err);
}

/// ECONNREFUSED: what tcp_reset() sets on a SYN_SENT socket.
pub const ECONNREFUSED: i32 = 111;
/// ETIMEDOUT: what tcp_write_err() sets where no ICMP error was held.
const ETIMEDOUT: u8 = 110;
