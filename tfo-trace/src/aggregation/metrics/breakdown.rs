//! The one opt-in label of `export`'s series (`destination` or `container`) and its cap
//! ([`Breakdown`]): which values get a series of their own ([`Capped`]), what each is
//! counted as, and what goes under [`OTHER`].
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::{
    aggregation::stall,
    events::{Event, Outcome, Role},
};

/// The value of the opt-in label (`destination`, `container`) that every value beyond the
/// cap is counted under, and whatever the kernel counted that no event brought (events lost).
pub const OTHER: &str = "other";

/// The `container` value of a process in no container (the root cgroup).
pub const NO_CONTAINER: &str = "none";

/// Label pairs of one series; a Vec so that the opt-in label exists only when asked for.
pub(super) type Labels = Vec<(&'static str, String)>;

/// The one opt-in label of the connection and stall counters, and its cap: at most this
/// many values get a series of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Breakdown {
    /// `destination`: the server's address:port ([`server_address`]).
    Destinations(usize),
    /// `container`: the process's container, or its cgroup path outside one
    /// ([`container_label`]).
    Containers(usize),
}

impl Breakdown {
    fn label(self) -> &'static str {
        match self {
            Breakdown::Destinations(_) => "destination",
            Breakdown::Containers(_) => "container",
        }
    }

    fn value(self, e: &Event) -> String {
        match self {
            Breakdown::Destinations(_) => server_address(e),
            Breakdown::Containers(_) => container_label(e),
        }
    }

    /// The labels of `e`'s series (the value's `self.label()`, and for a Kubernetes
    /// container `pod` and `namespace`, with `container` its name in the pod; for a client's
    /// destination named by `--names`, `dname`). Made once, from the event that admits the
    /// value ([`Capped::observe`]): a series keeps its labels for the exporter's lifetime.
    /// So a destination's `dname` is the name its first event came with, whatever later
    /// ones say (a name that changed, or one learnt after that first connect): one series
    /// per destination, never a second one beside it, and none beyond the cap (a listener at
    /// the same address:port shares the value's labels). Absent where no name was known, as
    /// `namespace` is without one: Prometheus reads an absent label and an empty one alike.
    fn series_labels(self, e: &Event, value: &str) -> Labels {
        match (self, &e.pod) {
            (Breakdown::Containers(_), Some(pod)) => {
                let name = e.container_name.as_deref().unwrap_or(value);
                let mut l: Labels = vec![("container", name.to_string()), ("pod", pod.to_string())];
                l.extend(e.pod_namespace.as_deref().map(|ns| ("namespace", ns.to_string())));
                l
            }
            (Breakdown::Destinations(_), _) => {
                let mut l: Labels = vec![("destination", value.to_string())];
                l.extend(e.dname.as_deref().filter(|n| !n.is_empty()).map(|n| ("dname", n.to_string())));
                l
            }
            _ => vec![(self.label(), value.to_string())],
        }
    }

    fn cap(self) -> usize {
        match self {
            Breakdown::Destinations(k) | Breakdown::Containers(k) => k,
        }
    }
}

/// The opt-in series, from events. Which values get a series of their own, for each role
/// apart (client destinations and server listeners do not take each other's places):
///
/// - the first `cap` distinct values seen;
/// - after those, up to `cap` more, each admitted at its first failure (a stall, data not
///   acked, a refused cookie, an overflow: [`is_failure`]): a destination that starts to
///   fail after the quiet ones took the places still gets a series of its own. Its counts
///   run from that failure; what it did before stays under [`OTHER`].
///
/// Every later value is counted under [`OTHER`]. A value is never moved between series, so
/// every counter only goes up (what `rate()` needs), and the series count stays at most
/// `2 cap + 1` per (role, outcome). "other" also takes what the kernel counted beyond the
/// events that arrived, so the series of one (role, outcome) always sum to the kernel's
/// exact total.
#[derive(Debug)]
pub(super) struct Capped {
    breakdown: Breakdown,
    /// Each value with a series of its own (in either role), and its series' labels.
    admitted: HashMap<String, Labels>,
    /// Which role admitted which value.
    admitted_for: HashSet<(Role, String)>,
    /// Per role ([`Role::index`]): values admitted first come, and at their first failure.
    first_come: [usize; 2],
    at_failure: [usize; 2],
    pub(super) connections: BTreeMap<(Role, Outcome, String), u64>,
    pub(super) stall_ns: BTreeMap<String, u64>,
    pub(super) saved_ns: BTreeMap<String, u64>,
}

impl Capped {
    pub(super) fn new(breakdown: Breakdown) -> Capped {
        Capped {
            breakdown,
            admitted: HashMap::new(),
            admitted_for: HashSet::new(),
            first_come: [0; 2],
            at_failure: [0; 2],
            connections: BTreeMap::new(),
            stall_ns: BTreeMap::new(),
            saved_ns: BTreeMap::new(),
        }
    }

    /// Whether `e`'s value has (or now gets) a series of its own for `e`'s role.
    fn admit(&mut self, e: &Event, value: &str) -> bool {
        let key = (e.role, value.to_string());
        if self.admitted_for.contains(&key) {
            return true;
        }
        let r = role_index(e.role);
        let cap = self.breakdown.cap();
        if self.first_come[r] < cap {
            self.first_come[r] += 1;
        } else if self.at_failure[r] < cap && is_failure(e) {
            self.at_failure[r] += 1;
        } else {
            return false; // counted under "other", from the kernel's total
        }
        self.admitted_for.insert(key);
        if !self.admitted.contains_key(value) {
            self.admitted.insert(value.to_string(), self.breakdown.series_labels(e, value));
        }
        true
    }

    /// Counts `e` under its value if that has (or now gets) a series of its own: which,
    /// returned.
    pub(super) fn observe(&mut self, e: &Event) -> Option<String> {
        let value = self.breakdown.value(e);
        if !self.admit(e, &value) {
            return None;
        }
        if let Some(s) = stall::of(e).filter(|s| s.lost_us > 0) {
            *self.stall_ns.entry(value.clone()).or_default() += s.lost_us * 1000;
        }
        // As the kernel's `saved_ns` of client `accepted` sums it.
        if let Some(us) = stall::saved_us(e) {
            *self.saved_ns.entry(value.clone()).or_default() += us * 1000;
        }
        *self.connections.entry((e.role, e.outcome, value.clone())).or_default() += 1;
        Some(value)
    }
}

fn role_index(role: Role) -> usize {
    match role {
        Role::Client => 0,
        Role::Server => 1,
    }
}

/// Whether an event tells of TFO failing: a stall (its SYN timed out), the data not
/// acked or the connect given up on (client); a cookie refused, a full TFO queue, a
/// listener without TFO, a SYN-ACK resent (server). What earns a late destination a series.
fn is_failure(e: &Event) -> bool {
    use Outcome::*;
    match e.role {
        Role::Client => {
            stall::of(e).is_some() || matches!(e.outcome, DataNotAcked | SynRetransmitted | ConnectFailed)
        }
        Role::Server => {
            matches!(e.outcome, CookieInvalid | QueueOverflow | ListenerDisabled | SynackRetransmitted)
        }
    }
}

/// The `container` value of an event: its container as the views name it (its name, else
/// the id's first 12 characters as docker shows it), the systemd unit or cgroup path
/// outside one, `unknown` where its cgroup could not be named, [`NO_CONTAINER`] in the root
/// cgroup. A Kubernetes container's series say `container` (its name in the pod), `pod`
/// and `namespace` apart ([`Breakdown::series_labels`]).
pub fn container_label(e: &Event) -> String {
    e.container_name().unwrap_or_else(|| NO_CONTAINER.to_string())
}

/// The server a connection went to: for a client event its destination, for a server
/// event its listener as every view names it ([`crate::events::EventRef::listener_name`]).
/// Never the client's ephemeral port, which would make the label unbounded.
pub fn server_address(e: &Event) -> String {
    match e.role {
        Role::Client => e.destination(),
        Role::Server => e.view().listener_name().to_string(),
    }
}

impl Capped {
    /// The labels of the series of `value` (an admitted one, or [`OTHER`]).
    pub(super) fn labels_of(&self, value: &str) -> Labels {
        self.admitted.get(value).cloned().unwrap_or_else(|| vec![(self.breakdown.label(), value.to_string())])
    }
}
