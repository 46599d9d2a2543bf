//! One handler per TFO transition, shared by every backend's entry points, generic over
//! how they read the kernel ([`Access`]).
//!
//! Client (net/ipv4/tcp_input.c, tcp_rcv_synsent_state_process): tcp_ack() runs on the
//! SYN-ACK, then tcp_finish_connect() sets ESTABLISHED, then tcp_rcv_fastopen_synack()
//! decides the outcome from `syn_data`, `syn_fastopen`, `total_retrans` and whether the
//! SYN's data is still at the head of the retransmit queue. At the ESTABLISHED transition
//! all four already hold the values that function reads, so this handler reaches the same
//! verdict the kernel is about to reach, even where tcp_rcv_fastopen_synack is inlined.
//!
//! Cost: almost every connection on a busy host is plain TCP. For those, each handler
//! does one or two loads and returns; nothing is written anywhere. State is made only for
//! a connection that asked for TFO, and only the client's (the server child is judged by
//! its own flags when it leaves SYN_RECV). What a TFO connection does next is out of line
//! (`#[inline(never)]`: the `*_tfo` functions and the rare transitions). What every plain
//! connection runs is then the first few hundred bytes of the state hook's program, where
//! all inlined it was spread over 14 KB with the exit at the far end (measured on a 2-core
//! VM: 158 -> 92 ns per plain connection over the empty programs' floor); a TFO
//! connection pays a BPF-to-BPF call or two for it.
use tfo_trace_common::{
    config, cookie_hash, counter, flags, Cause, ListenerKey, Outcome, ProcInfo, Role, TfoEvent,
    PAUSE_AGE_UNKNOWN,
};

use crate::{
    filter,
    globals::{config_has, cookie_key, hz},
    kernel::{
        family_of, is_tcp, netns_of, present, state_of, tuple_of, Access, FastopenCookie, RequestSock, Sock,
        SockCommon, TcpSock, TCP_CLOSE, TCP_ESTABLISHED, TCP_FIN_WAIT1, TCP_LISTEN, TCP_SYN_RECV,
        TCP_SYN_SENT,
    },
    maps::{
        bump, conn_state, count_synack, follow, forget, get16, now, put16, synack_seq, ConnState, Measure,
        SynackMark, LISTENERS,
    },
    record::{current_process, record, Known},
};

/// `sock:inet_sock_set_state`: every TCP state change (and SCTP's, which never pass
/// through SYN_SENT or SYN_RECV).
#[inline(always)]
pub fn on_state_change<A: Access>(sk: Sock<A>, old: i32, new: i32) {
    // The transition costs nothing to test; most state changes of a connection
    // (FIN_WAIT*, CLOSE_WAIT, ...) matter to no handler below.
    match (old, new) {
        (TCP_CLOSE, TCP_SYN_SENT) => client_connect(sk),
        (TCP_SYN_SENT, TCP_ESTABLISHED) => client_established(sk),
        // tcp_done()'s callers set sk_err first: the socket's own error.
        (TCP_SYN_SENT, TCP_CLOSE) => client_failed(sk, ERROR_OF_SOCKET),
        // Pruned by the verifier where tcp_try_fastopen reports the server side.
        (TCP_SYN_RECV, _) if config_has(config::SERVER_FROM_STATE) => server_child_resolved(sk, new),
        (_, TCP_LISTEN) => listener_started(sk),
        (TCP_LISTEN, TCP_CLOSE) => listener_stopped(sk),
        // A TFO child its application closed before the handshake ended (server_child_tfo)
        // is judged when it leaves FIN_WAIT1. Pruned like the SYN_RECV arm.
        (TCP_FIN_WAIT1, _) if config_has(config::SERVER_FROM_STATE) => server_child_closed_early(sk),
        _ => {}
    }
}

/// `tcp:tcp_retransmit_skb`: times the SYN timeouts of TFO connections we follow.
#[inline(always)]
pub fn on_retransmit<A: Access>(sk: Sock<A>) {
    if state_of(sk.common()) != TCP_SYN_SENT {
        return; // data retransmissions: by far the most, and none of ours
    }
    let state = conn_state(sk);
    if !state.is_null() {
        // SAFETY: this connection's state, valid for this program run.
        unsafe {
            (*state).retransmits += 1;
            (*state).last_retrans_ns = now();
        }
    }
}

/// CLOSE -> SYN_SENT runs in the connecting process (tcp_v4_connect / tcp_v6_connect),
/// before tcp_connect() sends the SYN: the one moment pid and comm are the client's.
/// `fastopen_req` is set for sendto(MSG_FASTOPEN), `fastopen_connect` for
/// TCP_FASTOPEN_CONNECT.
#[inline(always)]
fn client_connect<A: Access>(sk: Sock<A>) {
    let tp = A::tcp_view(sk);
    if tp.is_null() {
        return;
    }
    if tp.fastopen_req().is_null() && !tp.fastopen_connect() {
        return; // a plain connect
    }
    client_connect_tfo(sk);
}

#[inline(never)] // see the module's doc
fn client_connect_tfo<A: Access>(sk: Sock<A>) {
    if !is_tcp(sk) {
        return;
    }
    let process = current_process();
    if !filter::process_selected(process.pid, &process.comm, &process.thread) {
        return;
    }
    // Where it goes is known at connect() (tcp_v4_connect sets the destination and the
    // route's source before SYN_SENT); only the source port comes later.
    let mut state = ConnState::new(&process);
    let counts_synacks = !config_has(config::COOKIE_FROM_CACHE_SET);
    if filter::needs_state() || counts_synacks {
        let t = tuple_of(sk.common());
        if filter::needs_state()
            && !filter::connection_selected(netns_of(sk.common()), t.family, &t.daddr, t.dport, &t.saddr)
        {
            return;
        }
        // Where no hook sees the SYN-ACK's cookie: which of the destination's SYN-ACKs
        // came before this SYN (tcp_connect() reads the cookie it sends from the cache
        // next, in this same call).
        if counts_synacks {
            state.syn_seq = synack_seq(t.family, t.daddr);
        }
    }
    if !follow(sk, &state) {
        bump(counter::CONN_STATE_FAILED);
    }
}

/// The SYN's data, or what the SYN-ACK's cookie brought: what the client asked for.
pub(crate) struct ClientFlags {
    pub syn_data: bool,
    pub syn_fastopen: bool,
    pub exp: bool,
}

#[inline(always)]
pub(crate) fn client_flags<A: Access>(tp: TcpSock<A>) -> ClientFlags {
    ClientFlags { syn_data: tp.syn_data(), syn_fastopen: tp.syn_fastopen(), exp: tp.syn_fastopen_exp() }
}

/// When the packet that changes this socket's state is being processed. Before it changes
/// a state, tcp_rcv_state_process() (and its SYN_SENT branch) refreshes tp->tcp_clock_cache
/// from the clock bpf_ktime_get_ns reads, so this is a load from a line the kernel has just
/// written instead of a clock read (a paravirtual clock call in a VM); a few microseconds
/// earlier than the state change itself. A clock read where the kernel has no such member.
#[inline(always)]
pub(crate) fn packet_time_ns<A: Access>(tp: TcpSock<A>) -> u64 {
    if present!(tcp_clock_cache) {
        let t = tp.tcp_clock_cache();
        if t != 0 {
            return t;
        }
    }
    now()
}

/// The smoothed round trip (`srtt_us`, kept << 3), in ns. Right after the handshake it is
/// the handshake's own sample: tcp_ack() on the SYN-ACK (client, timed from the last SYN's
/// timestamp echo) or tcp_synack_rtt_meas() (server child); 0 where Karn's rule gave none.
#[inline(always)]
fn srtt_ns(srtt_us: u32) -> u64 {
    (srtt_us as u64 >> 3) * 1000
}

/// Payload bytes of the SYN-data: nothing but the SYN-data has been sent before the
/// handshake resolves, so bytes_sent is its length (retransmitted SYNs carry none).
#[inline(always)]
pub(crate) fn syn_data_bytes<A: Access>(tp: TcpSock<A>) -> u32 {
    tp.bytes_sent() as u32
}

/// The socket's namespace's tfo_active_disable_times; 0 where this kernel has none
/// (userspace gives the member only at the 4 bytes read here).
#[inline(always)]
fn active_disable_times<A: Access>(sk: Sock<A>) -> u64 {
    let net = sk.common().skc_net();
    if !present!(net_tfo_active_disable_times) || net.is_null() {
        return 0;
    }
    net.net_tfo_active_disable_times() as u64
}

/// The namespace's pauses of active TFO as the kernel keeps them (net->ipv4), into the
/// event of a connection the pause concerns (`not_attempted`): how many so far
/// (tfo_active_disable_times, which sets the last one's length in
/// tcp_fastopen_active_should_disable(): the blackhole timeout << min(times - 1, 6)) and how
/// long ago the last began (tfo_active_disable_stamp, in jiffies; HZ from userspace). The
/// pause's length and end are then the kernel's own, not counted from the pauses seen.
#[inline(always)]
pub(crate) fn pause_of<A: Access>(sk: Sock<A>, ev: &mut TfoEvent) {
    let times = active_disable_times(sk);
    ev.pause_times = times.min(u16::MAX as u64) as u16;
    ev.pause_age_ms = PAUSE_AGE_UNKNOWN;
    let hz = hz() as u64;
    let net = sk.common().skc_net();
    if times == 0 || hz == 0 || !present!(net_tfo_active_disable_stamp) || net.is_null() {
        return;
    }
    // SAFETY: a helper without preconditions.
    let jiffies = unsafe { aya_ebpf::helpers::generated::bpf_jiffies64() };
    // Capped before the product (a saturating one is a 128-bit multiply BPF has no call for):
    // 2^32 jiffies is months at any HZ, well past the longest pause.
    let age = jiffies.wrapping_sub(net.net_tfo_active_disable_stamp()).min(u32::MAX as u64);
    ev.pause_age_ms = (age * 1000 / hz).min(PAUSE_AGE_UNKNOWN as u64 - 1) as u32;
}

/// Whether a connection whose SYN had no TFO option may still have asked for TFO (and be
/// followed, to report `not_attempted`). tcp_fastopen_cookie_check() leaves the option
/// out while active TFO is paused after a blackhole, which only happens in a namespace
/// whose tfo_active_disable_times is nonzero; TCP_FASTOPEN_CONNECT sockets keep their bit.
/// Everywhere else (almost every connection of a busy host) a SYN without the option was
/// a plain connect, and the state lookup is skipped. (Not covered: an option left out for
/// lack of option space, as with TCP-MD5; its state ages out of the LRU hash.)
#[inline(always)]
fn may_have_left_option_out<A: Access>(sk: Sock<A>, tp: TcpSock<A>) -> bool {
    tp.fastopen_connect() || !present!(net_tfo_active_disable_times) || active_disable_times(sk) != 0
}

#[inline(always)]
fn client_established<A: Access>(sk: Sock<A>) {
    let tp = A::tcp_view(sk);
    if tp.is_null() {
        return;
    }
    let f = client_flags(tp);
    if !f.syn_data && !f.syn_fastopen && !may_have_left_option_out(sk, tp) {
        return; // plain: no lookup, nothing written
    }
    client_established_tfo(sk);
}

#[inline(never)] // see the module's doc
fn client_established_tfo<A: Access>(sk: Sock<A>) {
    let tp = A::tcp_sock(sk);
    if tp.is_null() {
        return;
    }
    let f = client_flags(tp);
    let no_tfo_option = !f.syn_data && !f.syn_fastopen;
    // A connection that asked for TFO has state (and one older than the tracer may not).
    let state = conn_state(sk);
    if state.is_null() && (no_tfo_option || filter::needs_state()) {
        return; // plain, or filtered out at connect (or older than the tracer, with filters)
    }
    let conn = Known::of(state);
    // tcp_rcv_fastopen_synack() runs next and caches the SYN-ACK's cookie; where that is
    // hooked, on_cookie_cached() still needs the process and ends the state itself, and
    // tells a refused SYN-data there, with what its SYN-ACK said.
    let cookie_next = (f.syn_data || f.syn_fastopen) && config_has(config::COOKIE_FROM_CACHE_SET);
    let c = client_outcome(sk, tp, &f, &conn);
    if cookie_next && refused_data(&f, c.outcome) {
        return; // on_cookie_cached() tells it, and ends the state
    }
    // Where no hook sees the SYN-ACK's cookie, userspace reads the cache after the event:
    // a SYN-ACK that may write it is counted first, and a refused SYN-data says which
    // cookie its SYN carried where a blocking socket's request still holds it.
    let mark = if !cookie_next && writes_cookie_cache(&f, c.outcome) {
        let t = tuple_of(sk.common());
        count_synack(t.family, t.daddr, packet_time_ns(tp))
    } else {
        SynackMark { seq: 0, gap_us: 0 }
    };
    let sent = if refused_data(&f, c.outcome) { req_cookie_hash(tp) } else { 0 };
    record(sk.common(), Role::Client, c.outcome, netns_of(sk.common()), &conn, c.measure, |ev| {
        if f.exp {
            ev.flags |= flags::EXP_OPTION;
        }
        if mark.seq != 0 {
            ev.syn_seq = conn.syn_seq;
            ev.synack_seq = mark.seq;
            ev.synack_gap_us = mark.gap_us;
            ev.sent_cookie_hash = sent;
        }
        if refused_data(&f, c.outcome) && !f.syn_fastopen {
            ev.cause = Cause::NoCookieSent as u8; // the SYN carried no option to judge
        }
        if c.outcome == Outcome::NotAttempted {
            pause_of(sk, ev);
        }
    });
    if conn.known && !cookie_next {
        forget(sk);
    }
}

/// Whether the SYN-ACK of this outcome may write the destination's cookie cache
/// (tcp_rcv_fastopen_synack -> tcp_fastopen_cache_set, for a SYN that asked for TFO): a
/// refusal's and a cookie request's bring a cookie, a cookie sent without data may get
/// another. Not an accepted SYN-data (only a server's backup key sends one a cookie), nor
/// a SYN resent (the resent SYN has no TFO option, so its SYN-ACK brings none).
#[inline(always)]
fn writes_cookie_cache(f: &ClientFlags, outcome: Outcome) -> bool {
    (f.syn_data || f.syn_fastopen)
        && matches!(outcome, Outcome::DataNotAcked | Outcome::CookieRequested | Outcome::CookieSentNoData)
}

/// The hash of the cookie the SYN carried, where the socket's TFO request still holds it:
/// a blocking sendto(MSG_FASTOPEN) (or first write) waits in __inet_stream_connect for the
/// SYN-ACK before tcp_sendmsg_fastopen() frees it; tcp_send_syn_data() set only its length
/// to -1 after the SYN, its bytes stay. 0 where it is gone or held no cookie.
#[inline(always)]
pub(crate) fn req_cookie_hash<A: Access>(tp: TcpSock<A>) -> u32 {
    let req = tp.fastopen_req();
    if req.is_null() || !present!(req_cookie) || !present!(foc_val) {
        return 0;
    }
    let val = req.req_cookie().foc_val();
    if val[0] == 0 && val[1] == 0 {
        return 0;
    }
    cookie_hash(cookie_key(), val)
}

/// A client's outcome at its SYN-ACK and what it measures.
pub(crate) struct ClientOutcome {
    pub outcome: Outcome,
    pub measure: Measure,
}

/// The outcome tcp_rcv_fastopen_synack() is about to reach for this connection, from the
/// same members it reads (unchanged from the ESTABLISHED transition until it has cached
/// the SYN-ACK's cookie: both client_established_tfo and on_cookie_cached decide it).
#[inline(always)]
pub(crate) fn client_outcome<A: Access>(
    sk: Sock<A>,
    tp: TcpSock<A>,
    f: &ClientFlags,
    conn: &Known,
) -> ClientOutcome {
    let at_ns = if conn.known { packet_time_ns(tp) } else { 0 }; // handshake and event
    let total_retrans = tp.total_retrans();
    let outcome = if f.syn_data {
        // tcp_rcv_fastopen_synack: data = tp->syn_data ? tcp_rtx_queue_head(sk) : NULL.
        if sk.tcp_rtx_queue() == 0 {
            Outcome::Accepted
        } else if total_retrans > 0 {
            Outcome::SynRetransmitted
        } else {
            Outcome::DataNotAcked
        }
    } else if f.syn_fastopen {
        if total_retrans > 0 {
            Outcome::SynRetransmitted
        } else {
            syn_option_without_data(tp)
        }
    } else {
        Outcome::NotAttempted
    };
    let data = if f.syn_data { syn_data_bytes(tp) } else { 0 };
    let handshake_ns = conn.since_start(at_ns);
    let srtt_us = tp.srtt_us();
    let stall_ns = if total_retrans > 0 {
        conn.stall_at_synack_ns(handshake_ns, srtt_ns(srtt_us))
    } else {
        conn.stall_ns()
    };
    // What an accepted SYN-data saved: the round trip the request did not wait for.
    // tcp_ack() on this SYN-ACK has just taken the connection's first RTT sample (the
    // SYN-data's send to the SYN-ACK, tcp_clean_rtx_queue), and tcp_rtt_estimator()'s
    // first sample is srtt_us = sample << 3; tcp_finish_connect() then set ESTABLISHED,
    // which is this hook. The value is already loaded for the stall: no load added.
    let saved_srtt_us = if outcome == Outcome::Accepted { srtt_us } else { 0 };
    let measure = Measure {
        stall_ns,
        syn_data_bytes: data,
        retransmits: total_retrans,
        handshake_ns,
        at_ns,
        saved_srtt_us,
    };
    ClientOutcome { outcome, measure }
}

/// tcp_fastopen_cookie_check() sets fastopen_client_fail to TFO_COOKIE_UNAVAILABLE when
/// it found no cookie to send, so the SYN's option asked for one; with a cookie it leaves
/// 0, and tcp_send_syn_data() sent that cookie with no data (`syn_data` = copied > 0: a
/// zero-length sendto, or no room for data). Read only for such a SYN, off the plain path.
#[inline(always)]
fn syn_option_without_data<A: Access>(tp: TcpSock<A>) -> Outcome {
    const TFO_COOKIE_UNAVAILABLE: u64 = 1;
    if tp.fastopen_client_fail() == TFO_COOKIE_UNAVAILABLE {
        Outcome::CookieRequested
    } else {
        Outcome::CookieSentNoData
    }
}

/// Whether the SYN-ACK did not take the SYN's data: what its cause is told for. Not a SYN
/// timeout: that SYN-ACK answers the plain SYN resent, which carries no TFO option.
#[inline(always)]
pub(crate) fn refused_data(f: &ClientFlags, outcome: Outcome) -> bool {
    f.syn_data && outcome == Outcome::DataNotAcked
}

/// [`client_failed`]'s `error`: the socket's own `sk_err`, which tcp_done()'s callers
/// (tcp_reset / tcp_done_with_error, tcp_write_err) set before the socket reaches CLOSE.
pub(crate) const ERROR_OF_SOCKET: u8 = 0;

/// SYN_SENT -> CLOSE: a TFO connection that never completed (timeout, reset, refused), and
/// the error it ended with (an errno; [`ERROR_OF_SOCKET`]: read it off the socket).
#[inline(never)] // rare: out of the plain connections' way (the module's doc)
pub(crate) fn client_failed<A: Access>(sk: Sock<A>, error: u8) {
    let state = conn_state(sk);
    if state.is_null() {
        return;
    }
    let conn = Known::of(state);
    forget(sk);
    let tp = A::tcp_sock(sk);
    if tp.is_null() {
        return;
    }
    let total_retrans = tp.total_retrans();
    let f = client_flags(tp);
    // A deferred TCP_FASTOPEN_CONNECT socket closed before its first write sent nothing.
    if !(f.syn_data || f.syn_fastopen || total_retrans > 0) {
        return;
    }
    let data = if f.syn_data { syn_data_bytes(tp) } else { 0 };
    let measure = Measure {
        stall_ns: conn.stall_ns(),
        syn_data_bytes: data,
        retransmits: total_retrans,
        handshake_ns: 0,
        at_ns: 0,
        saved_srtt_us: 0,
    };
    // tcp_set_state(TCP_CLOSE) runs inet_put_port(), which zeroes skc_num, before this
    // tracepoint fires (for a reset as for a timeout): the port the SYN left from is
    // still in inet_sport.
    let bound_port = u16::from_be(tp.inet_sport());
    let error = if error != ERROR_OF_SOCKET { error } else { socket_error(sk) };
    record(sk.common(), Role::Client, Outcome::ConnectFailed, netns_of(sk.common()), &conn, measure, |ev| {
        if ev.sport == 0 {
            ev.sport = bound_port;
        }
        ev.error = error;
    });
}

/// The socket's `sk_err` as an errno (0 unknown; every errno fits a byte).
#[inline(always)]
fn socket_error<A: Access>(sk: Sock<A>) -> u8 {
    if !present!(sk_err) {
        return 0;
    }
    sk.sk_err().clamp(0, u8::MAX as i32) as u8
}

/// `cookie_received`: a SYN-ACK's cookie (`hash` its keyed hash) on its way into the
/// destination's cache.
#[inline(always)]
pub(crate) fn cookie_received<A: Access>(
    sk: Sock<A>,
    tp: TcpSock<A>,
    cookie: FastopenCookie<A>,
    hash: u32,
    conn: &Known,
) {
    let len = cookie.foc_len() as u8;
    let exp = cookie.foc_exp() != 0;
    let retransmits = tp.total_retrans();
    let measure =
        Measure { stall_ns: 0, syn_data_bytes: 0, retransmits, handshake_ns: 0, at_ns: 0, saved_srtt_us: 0 };
    record(sk.common(), Role::Client, Outcome::CookieReceived, netns_of(sk.common()), conn, measure, |ev| {
        ev.cookie_len = len;
        ev.cookie_hash = hash;
        ev.flags |= flags::COOKIE_LEN_KNOWN;
        if exp {
            ev.flags |= flags::EXP_OPTION;
        }
    });
}

/// A refused SYN-data's cause from what its SYN-ACK brought (`len`, the hash `got`) and
/// the hash of the cookie its SYN carried (`sent`, 0: not seen).
#[inline(always)]
pub(crate) fn refusal_cause(len: i8, got: u32, sent: u32) -> Cause {
    if len <= 0 {
        Cause::NoTfoOption
    } else if sent == 0 {
        Cause::Unknown
    } else if sent == got {
        Cause::SameCookie
    } else {
        Cause::NewCookie
    }
}

/// Whether a server child is a TFO one: `syn_fastopen_child` (kernels that have it) or
/// `syn_data_acked`, set by tcp_fastopen_add_skb() when the SYN's data was queued. Decided
/// from the child itself: nothing is remembered for the (many) plain children.
#[inline(always)]
fn is_tfo_child<A: Access>(tp: TcpSock<A>) -> bool {
    // Userspace gives syn_fastopen_child only as the one bit read here.
    if present!(syn_fastopen_child) {
        tp.syn_fastopen_child()
    } else {
        tp.syn_data_acked()
    }
}

/// A child leaving SYN_RECV (for `new`).
#[inline(always)]
fn server_child_resolved<A: Access>(sk: Sock<A>, new: i32) {
    let tp = A::tcp_view(sk);
    if tp.is_null() {
        return;
    }
    if is_tfo_child(tp) {
        server_child_tfo(sk, new);
    }
}

#[inline(never)] // see the module's doc
fn server_child_tfo<A: Access>(sk: Sock<A>, new: i32) {
    let tp = A::tcp_sock(sk);
    if tp.is_null() {
        return;
    }
    let netns = netns_of(sk.common());
    if !server_selected(sk.common(), netns) {
        return;
    }
    // tcp_rtx_synack() counts each SYN-ACK a TFO child resends in SYN_RECV in its
    // total_retrans. A child that resent one has state since (on_synack_retransmit): when it
    // started.
    let retransmits = tp.total_retrans();
    // Closed by its application before the client's ACK of the SYN-ACK (tcp_close_state():
    // SYN_RECV -> FIN_WAIT1; a server that answers and closes at once, HTTP/1.0 style): the
    // child keeps its request sock (fastopen_rsk) and resends its SYN-ACK from FIN_WAIT1
    // (tcp_retransmit_timer -> tcp_fastopen_synack_timer), which tcp_passive_fastopen()
    // no longer counts in total_retrans. Judged as it leaves FIN_WAIT1
    // (server_child_closed_early), with every SYN-ACK it resent.
    if new == TCP_FIN_WAIT1 && present!(fastopen_rsk) && !tp.fastopen_rsk().is_null() {
        follow_closed_child(sk, tp, retransmits);
        return;
    }
    let resent = if retransmits > 0 { Known::of(conn_state(sk)) } else { Known::NONE };
    if resent.known {
        forget(sk);
    }
    child_accepted(sk, tp, netns, retransmits, tp.bytes_received() as u32, &resent);
}

/// A TFO child's `accepted` (the state hook's server outcome), with the SYN-ACKs it resent
/// and its data; `resent`: its state where it was followed (a SYN-ACK resent, or closed
/// before its handshake ended): the handshake is timed from its first SYN-ACK.
#[inline(always)]
fn child_accepted<A: Access>(
    sk: Sock<A>,
    tp: TcpSock<A>,
    netns: u32,
    retransmits: u32,
    data: u32,
    resent: &Known,
) {
    let srtt_us = tp.srtt_us();
    // The time only the event needs: none where only refusals are sent, unless the
    // handshake needs it.
    let at_ns = if config_has(config::REFUSAL_EVENTS_ONLY) && !resent.known { 0 } else { packet_time_ns(tp) };
    // The handshake of a child is its SYN-ACK's round trip, which tcp_rcv_state_process()
    // has just measured (tcp_synack_rtt_meas); where Karn's rule gave no sample (the
    // SYN-ACK was resent), or the child was followed, from its first SYN-ACK to now.
    let handshake_ns = if resent.known { resent.since_start(at_ns) } else { srtt_ns(srtt_us) };
    // The same sample is what the server saved: the SYN's data reached the listener's
    // queue when the child was made (tcp_try_fastopen), one round trip before this final
    // ACK would have brought it. (Where tcp_ack() sampled a reply sent before this ACK,
    // the sample starts at that send, a little after the SYN: slightly less.)
    // A child made from a cookie without data (a client that reads first) saved nothing.
    let measure = Measure {
        stall_ns: 0,
        syn_data_bytes: data,
        retransmits,
        handshake_ns,
        at_ns,
        saved_srtt_us: if data > 0 { srtt_us } else { 0 },
    };
    record(sk.common(), Role::Server, Outcome::Accepted, netns, &Known::NONE, measure, |ev| {
        if handshake_ns > 0 {
            ev.start_ns = ev.ts_ns.saturating_sub(handshake_ns);
            ev.flags |= flags::START_KNOWN;
        }
        name_listener_owner(ev, &ListenerKey::new(netns, ev.sport, ev.family));
    });
}

/// Follows a TFO child closed before its handshake ended (or updates its state, where a
/// SYN-ACK resent in SYN_RECV already follows it): the SYN-ACKs resent so far, its data.
#[inline(always)]
fn follow_closed_child<A: Access>(sk: Sock<A>, tp: TcpSock<A>, retransmits: u32) {
    let data = tp.bytes_received() as u32;
    let state = conn_state(sk);
    if state.is_null() {
        let first_synack_us = tp.fastopen_rsk().tcp_request().snt_synack();
        let child =
            ConnState { retransmits, syn_data_bytes: data, ..ConnState::child_since(first_synack_us) };
        let _ = follow(sk, &child);
    } else {
        // SAFETY: this connection's state, valid for this program run.
        unsafe {
            (*state).retransmits = retransmits;
            (*state).syn_data_bytes = data;
        }
    }
}

/// A socket leaving FIN_WAIT1: a TFO child followed since its application closed it in
/// SYN_RECV has ended its handshake (or given up), every SYN-ACK it resent behind it. Plain
/// sockets (most active closes) go after the child test, as at SYN_RECV.
#[inline(always)]
fn server_child_closed_early<A: Access>(sk: Sock<A>) {
    let tp = A::tcp_view(sk);
    if tp.is_null() {
        return;
    }
    if is_tfo_child(tp) {
        server_child_closed_early_tfo(sk);
    }
}

#[inline(never)] // see the module's doc
fn server_child_closed_early_tfo<A: Access>(sk: Sock<A>) {
    let state = conn_state(sk);
    if state.is_null() {
        return; // a child that ended its handshake before it was closed: judged then
    }
    // SAFETY: this connection's state, valid for this program run.
    let (retransmits, data) = unsafe { ((*state).retransmits, (*state).syn_data_bytes) };
    let followed = Known::of(state);
    forget(sk);
    let tp = A::tcp_sock(sk);
    if tp.is_null() {
        return;
    }
    child_accepted(sk, tp, netns_of(sk.common()), retransmits, data, &followed);
}

/// tcp_rtx_synack(sk, req): for a plain handshake `sk` is the listener; for TFO it is the
/// child made from the SYN-data, in SYN_RECV, or in FIN_WAIT1 where its application closed
/// it before the handshake ended (tcp_fastopen_synack_timer, or the client's SYN
/// retransmitted into tcp_check_req). Each call also counts as TcpExtTCPSynRetrans in the
/// server's namespace.
#[inline(always)]
pub fn on_synack_retransmit<A: Access>(sk: Sock<A>, req: RequestSock<A>) {
    let state = state_of(sk.common());
    if state != TCP_SYN_RECV && state != TCP_FIN_WAIT1 {
        return; // a listener's (a plain handshake's)
    }
    let tp = A::tcp_sock(sk);
    if tp.is_null() {
        return;
    }
    let before = req.req_num_retrans() as u32;
    let data = tp.bytes_received() as u32;
    let netns = netns_of(sk.common());
    if !server_selected(sk.common(), netns) {
        return;
    }
    if config_has(config::SERVER_FROM_STATE) {
        if state == TCP_SYN_RECV && before == 0 {
            // Where the child is judged as it leaves SYN_RECV, its first resend starts
            // following it: Karn's rule leaves that moment no round-trip sample to time the
            // handshake by.
            let _ = follow(sk, &ConnState::child_since(req.tcp_request().snt_synack()));
        } else if state == TCP_FIN_WAIT1 {
            // Followed since it was closed: the request's own count, this resend included.
            let followed = conn_state(sk);
            if !followed.is_null() {
                // SAFETY: this connection's state, valid for this program run.
                unsafe { (*followed).retransmits = before + 1 };
            }
        }
    }
    // inet_rtx_syn_ack() counts this one after the send: the event counts it already.
    let measure = Measure {
        stall_ns: 0,
        syn_data_bytes: data,
        retransmits: before + 1,
        handshake_ns: 0,
        at_ns: 0,
        saved_srtt_us: 0,
    };
    record(sk.common(), Role::Server, Outcome::SynackRetransmitted, netns, &Known::NONE, measure, |ev| {
        name_listener_owner(ev, &ListenerKey::new(netns, ev.sport, ev.family));
    });
}

/// A listener is known by its namespace, local port and family (what a child socket
/// shares).
#[inline(always)]
pub(crate) fn listener_key<A: Access>(sk: SockCommon<A>) -> ListenerKey {
    ListenerKey::new(netns_of(sk), sk.skc_num(), family_of(sk))
}

/// Server events name the process that called listen() on that port.
#[inline(always)]
pub(crate) fn name_listener_owner(ev: &mut TfoEvent, listener: &ListenerKey) {
    if let Some(owner) = LISTENERS.get_ptr(listener) {
        // SAFETY: a value of LISTENERS, read at once.
        let owner = unsafe { &*owner };
        ev.pid = owner.pid;
        put16(&mut ev.comm, get16(&owner.comm));
        put16(&mut ev.thread, get16(&owner.thread));
        ev.cgroup_id = owner.cgroup_id;
        ev.flags |= flags::PID_KNOWN;
    }
}

/// The filters for a server-side connection: `sk` (a child, or a request sock) holds the
/// server's address and port as its source, the client's as its destination; the
/// process is the listener's owner, judged at listen() (unknown: a listener older than the
/// tracer, which process filters cannot select). Nothing is read without filters.
#[inline(always)]
pub(crate) fn server_selected<A: Access>(sk: SockCommon<A>, netns: u32) -> bool {
    if !filter::needs_state() {
        return true;
    }
    let t = tuple_of(sk);
    if !filter::connection_selected(netns, t.family, &t.saddr, t.sport, &t.daddr) {
        return false;
    }
    if !filter::by_process() {
        return true;
    }
    let listener = ListenerKey::new(netns, t.sport, t.family);
    // SAFETY: a value of LISTENERS, read at once.
    LISTENERS.get_ptr(listener).is_some_and(|o| unsafe { (*o).selected } != 0)
}

/// listen() runs in the owner's process context: remember who owns the port.
#[inline(never)] // rare: out of the plain connections' way (the module's doc)
pub(crate) fn listener_started<A: Access>(sk: Sock<A>) {
    if A::tcp_sock(sk).is_null() {
        return; // an SCTP listener
    }
    let process = current_process();
    let selected = filter::process_selected(process.pid, &process.comm, &process.thread) as u32;
    let mut owner = core::mem::MaybeUninit::<ProcInfo>::uninit();
    let p = owner.as_mut_ptr();
    // SAFETY: every field of the ProcInfo is written before assume_init, the comm by
    // words (a `[0; 16]` initializer would be a memset call).
    let owner = unsafe {
        core::ptr::addr_of_mut!((*p).pid).write(process.pid);
        core::ptr::addr_of_mut!((*p).selected).write(selected);
        core::ptr::addr_of_mut!((*p).cgroup_id).write(process.cgroup_id);
        put16(&mut *core::ptr::addr_of_mut!((*p).comm), process.comm);
        put16(&mut *core::ptr::addr_of_mut!((*p).thread), process.thread);
        owner.assume_init()
    };
    let _ = LISTENERS.insert(listener_key(sk.common()), owner, 0);
}

#[inline(never)] // rare: out of the plain connections' way (the module's doc)
fn listener_stopped<A: Access>(sk: Sock<A>) {
    let _ = LISTENERS.remove(listener_key(sk.common()));
}
