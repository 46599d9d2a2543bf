//! What a hook costs a plain (non-TFO) connection: when it runs for one, how often.

/// When a hook runs for a plain (non-TFO) TCP connection: the cost that tracing TFO puts
/// on every other connection of the host. `doctor`, `-v`, docs/cost.md and the run-count
/// test (tests/integration/plain_cost.rs) all read it from here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlainRuns {
    /// Only for TFO connections (or nothing connection-related at all).
    Never,
    /// inet_sock_set_state: every TCP state change of every socket, TFO or not.
    PerStateChange,
    /// tcp_try_fastopen: every SYN at a listener that is not answered by a syncookie.
    PerListenerSyn,
    /// tcp_retransmit_skb: every retransmitted segment of any socket.
    PerRetransmission,
    /// tcp_fastopen_active_detect_blackhole: every retransmission timeout of any socket.
    PerRto,
    /// tcp_retransmit_synack: every SYN-ACK a listener resends.
    PerSynackResend,
    /// cgroup_mkdir/rmdir: every cgroup made or removed, never per connection.
    PerCgroupChange,
    /// tcp_done_with_error / tcp_reset: every connection that ends by an error (a RST, an
    /// ICMP error, an abort), never a healthy one.
    PerErrorEnd,
    /// inet_csk_listen_start/stop: every listen() and every listener closed, never per
    /// connection.
    PerListenerChange,
}

/// Runs of one hook for one plain connection, at each end, on a loss-free connection that
/// both ends close with a FIN (its client and its server socket both on this host).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PlainCost {
    pub client: u32,
    pub server: u32,
}

impl PlainCost {
    pub const fn total(self) -> u32 {
        self.client + self.server
    }
}

impl PlainRuns {
    /// Runs per plain connection, measured by tests/integration/plain_cost.rs (bpf_stats run_cnt over
    /// 200 connections; host 6.18 tracepoint, VM 6.1 fentry): the state hook runs for the
    /// client's CLOSE->SYN_SENT->ESTABLISHED->FIN_WAIT1->FIN_WAIT2->CLOSE and the server
    /// child's CLOSE->SYN_RECV->ESTABLISHED->CLOSE_WAIT->LAST_ACK->CLOSE.
    pub const fn per_connection(self) -> PlainCost {
        match self {
            PlainRuns::PerStateChange => PlainCost { client: 5, server: 5 },
            PlainRuns::PerListenerSyn => PlainCost { client: 0, server: 1 },
            PlainRuns::Never
            | PlainRuns::PerRetransmission
            | PlainRuns::PerRto
            | PlainRuns::PerSynackResend
            | PlainRuns::PerCgroupChange
            | PlainRuns::PerErrorEnd
            | PlainRuns::PerListenerChange => PlainCost { client: 0, server: 0 },
        }
    }

    /// When it runs, as `doctor` says it.
    pub const fn when(self) -> &'static str {
        match self {
            PlainRuns::Never => "never: only for TFO connections",
            PlainRuns::PerStateChange => "each state change of its two sockets",
            PlainRuns::PerListenerSyn => "the SYN at the listener",
            PlainRuns::PerRetransmission => "each retransmitted segment",
            PlainRuns::PerRto => "each retransmission timeout",
            PlainRuns::PerSynackResend => "each SYN-ACK resent",
            PlainRuns::PerCgroupChange => "each cgroup made or removed",
            PlainRuns::PerErrorEnd => "each connection that ends by an error",
            PlainRuns::PerListenerChange => "each listen() and listener close",
        }
    }

    /// What makes it run beyond a healthy connection's handshake and close, if anything.
    pub(super) const fn unless(self) -> Option<&'static str> {
        match self {
            PlainRuns::PerRetransmission => Some("it retransmits"),
            PlainRuns::PerRto => Some("a retransmission timer fires"),
            PlainRuns::PerSynackResend => Some("a SYN-ACK is resent"),
            PlainRuns::PerCgroupChange => Some("a cgroup is made or removed"),
            PlainRuns::PerErrorEnd => Some("it ends by an error"),
            PlainRuns::PerListenerChange => Some("a listener opens or closes"),
            PlainRuns::Never | PlainRuns::PerStateChange | PlainRuns::PerListenerSyn => None,
        }
    }
}
