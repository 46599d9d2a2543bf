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
//!   active TFO by the kernel's own condition, and a connect that gave up (`expired`).
//! - tcp_done_with_error() (tcp_reset() where the kernel has none) runs for a connection
//!   that ends by an error: a followed connect refused by a reset.
//!
//! Not seen: a connect the application closes in SYN_SENT, and one ended by an ICMP error
//! on kernels without tcp_done_with_error(): their state ages out of the LRU hash.
use tfo_trace_common::{cookie_hash, counter, flags, Cause, Outcome, Role};

use crate::{
    filter,
    globals::cookie_key,
    handlers::{
        client_failed, client_flags, client_outcome, cookie_received, packet_time_ns, refusal_cause,
        refused_data, req_cookie_hash, syn_data_bytes,
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
        record(sk.common(), Role::Client, Outcome::NotAttempted, netns, &conn, measure, |_| {});
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
    // tracer) where a blocking socket's request still holds it.
    let sent = if !refused {
        0
    } else if conn.sent_hash != 0 {
        conn.sent_hash
    } else {
        req_cookie_hash(tp)
    };
    let cause = if refused { refusal_cause(len, hash, sent) } else { Cause::Unknown };
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

/// tcp_fastopen_active_detect_blackhole(sk, expired) (fexit; kprobe: its entry, the call
/// changing nothing read here), which tcp_write_timeout() calls on every retransmission
/// timeout; tcp_retransmit_timer() then resends the SYN (`expired` false), or
/// tcp_write_err() ends the connect (true).
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
        client_failed(sk); // tcp_write_err() follows: SYN_SENT -> CLOSE
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
    if pauses_active_tfo(sk, tp, expired) && (conn.known || !filter::needs_state()) {
        let f = client_flags(tp);
        let measure = Measure {
            stall_ns: conn.stall_ns(),
            syn_data_bytes: if f.syn_data { syn_data_bytes(tp) } else { 0 },
            retransmits: tp.total_retrans(),
            handshake_ns: 0,
            at_ns: 0,
            saved_srtt_us: 0,
        };
        let netns = netns_of(sk.common());
        record(sk.common(), Role::Client, Outcome::ActiveDisabled, netns, &conn, measure, |_| {});
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

/// What tcp_fastopen_active_detect_blackhole() decides for a socket that used TFO: a pause
/// of active TFO (tcp_fastopen_active_disable(), inlined into it on the kernels checked)
/// on the third timeout in a row, or on giving up before it, unless the namespace's
/// blackhole timeout is 0. Each pause moves TcpExtTCPFastOpenBlackhole.
#[inline(always)]
fn pauses_active_tfo<A: Access>(sk: Sock<A>, tp: TcpSock<A>, expired: bool) -> bool {
    if !present!(icsk_retransmits) || !present!(net_tfo_blackhole_timeout) {
        return false;
    }
    let timeouts = tp.icsk_retransmits();
    if !(timeouts == 2 || (timeouts < 2 && expired)) {
        return false;
    }
    let net = sk.common().skc_net();
    !net.is_null() && net.net_tfo_blackhole_timeout() != 0
}

/// Entry of tcp_done_with_error(sk, err) (6.1+) or tcp_reset(sk[, skb]): a connection that
/// ends by an error. Only a followed connect still in SYN_SENT is ours: refused by a reset
/// (and, with tcp_done_with_error, an ICMP error or tcp_abort).
#[inline(always)]
pub fn on_error_end<A: Access>(sk: Sock<A>) {
    if state_of(sk.common()) != TCP_SYN_SENT {
        return;
    }
    client_failed(sk);
}
