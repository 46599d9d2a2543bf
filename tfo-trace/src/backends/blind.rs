//! What a backend cannot see: each outcome no hook of it reports, why, and the kernel
//! counter that counts it instead.
use tfo_trace_common::{Outcome, Role};
use Outcome::*;
use Role::{Client, Server};

/// Outcomes no hook of a backend can see, with the reason: what `doctor` prints and
/// what a test must not expect; and where the kernel's own per-namespace counters count
/// them instead ([`KernelCounter`]), so that every view still shows how many.
pub struct Blind {
    pub role: Role,
    pub outcome: Outcome,
    pub why: &'static str,
    pub counter: KernelCounter,
}

/// The kernel's SNMP counter (`/proc/net/netstat` of the namespace it happened in, as
/// `nstat` names it) that counts an outcome no hook sees: never attributed to a listener
/// or a process, only to a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelCounter {
    /// Moves once per such outcome, in the namespace of the socket it happened on.
    Exact(&'static str),
    /// Moves once per such outcome, which the hooks report as `of`: its count moves
    /// from `of` to this outcome (so `of` means the same as on a backend that sees both).
    Within { counter: &'static str, of: Outcome },
    /// No counter of any namespace moves for it; the reason says where it shows instead.
    None(&'static str),
}

impl KernelCounter {
    /// The counter's `nstat` name, where there is one.
    pub fn name(self) -> Option<&'static str> {
        match self {
            KernelCounter::Exact(c) | KernelCounter::Within { counter: c, .. } => Some(c),
            KernelCounter::None(_) => None,
        }
    }
}

pub(super) const TRACEPOINT_BLIND: &[Blind] = &[
    Blind {
        role: Client,
        outcome: CookieReceived,
        why: "the SYN-ACK's cookie goes to the metrics cache without a socket state change \
              (`ip tcp_metrics` shows it)",
        counter: KernelCounter::None(
            "no SNMP counter counts cookies received: `ip tcp_metrics` shows each destination's fo_cookie",
        ),
    },
    Blind {
        role: Client,
        outcome: ActiveDisabled,
        why: "pausing active TFO changes no socket state; its effect shows as \
              not_attempted on the next connections",
        // tcp_fastopen_active_disable(): once per pause, in the socket's namespace.
        counter: KernelCounter::Exact("TcpExtTCPFastOpenBlackhole"),
    },
    Blind {
        role: Server,
        outcome: ActiveDisabled,
        why: "a server TFO child's timeouts pause the namespace's active TFO without a socket \
              state change",
        counter: KernelCounter::None(
            "TcpExtTCPFastOpenBlackhole counts every pause of the namespace, whichever socket \
             tripped it: the client's active_disabled",
        ),
    },
    Blind {
        role: Server,
        outcome: CookieRequested,
        why: "a cookie request makes only a request sock, which no tracepoint reports",
        // tcp_try_fastopen(): every SYN with an empty TFO option at a listener, whether a
        // cookie goes back or not. The fentry backend's server cookie_requested counts the
        // same SYNs but those that overflowed the TFO queue (its queue_overflow, which
        // ListenOverflow counts too) or made a child where no cookie is required (0x200:
        // its accepted, Passive too): one event per SYN where the kernel counts two.
        // The client's cookie_requested, which this backend sees, is the same SYN from the
        // other end: role keeps the two apart.
        counter: KernelCounter::Exact("TcpExtTCPFastOpenCookieReqd"),
    },
    Blind {
        role: Server,
        outcome: CookieInvalid,
        why: "decided inside tcp_try_fastopen(); no socket state changes",
        // tcp_try_fastopen(): a cookie that fails the check, or a good one whose child
        // could not be made; the fentry backend's cookie_invalid is both too.
        counter: KernelCounter::Exact("TcpExtTCPFastOpenPassiveFail"),
    },
    Blind {
        role: Server,
        outcome: AcceptedAltKey,
        why: "the child looks the same for either key: counted as accepted",
        // tcp_try_fastopen(): a child made on the backup key; TcpExtTCPFastOpenPassive
        // counts it too, and the state hook reports it as accepted.
        counter: KernelCounter::Within { counter: "TcpExtTCPFastOpenPassiveAltKey", of: Accepted },
    },
    Blind {
        role: Server,
        outcome: QueueOverflow,
        why: "tcp_fastopen_queue_check() is inlined and changes no socket state",
        // tcp_fastopen_queue_check(): once per SYN refused for a full TFO queue.
        counter: KernelCounter::Exact("TcpExtTCPFastOpenListenOverflow"),
    },
    Blind {
        role: Server,
        outcome: ListenerDisabled,
        why: "the SYN falls back to a plain handshake with no trace of the cookie",
        counter: KernelCounter::None(
            "no server counter moves (tcp_try_fastopen() returns before counting); the client's \
             TcpExtTCPFastOpenActiveFail does, seen as its data_not_acked",
        ),
    },
    Blind {
        role: Server,
        outcome: DataWithoutCookie,
        why: "decided inside tcp_try_fastopen(); the SYN falls back to a plain handshake",
        counter: KernelCounter::None(
            "no server counter moves (tcp_try_fastopen() returns NULL past its checks without \
             counting); the client's TcpExtTCPFastOpenActiveFail does, seen as its data_not_acked \
             (cause no_cookie_sent where the client left the option out)",
        ),
    },
];
