//! What `top`'s header shows besides the tables: the backend, `net.ipv4.tcp_fastopen` of
//! each traced namespace and what it turns on, events lost, paused destinations.
use std::time::Duration;

use crate::{kernel::sysctl::TcpFastopen, live::paused::Paused};

/// The facts the header shows besides the tables.
#[derive(Clone, Debug)]
pub struct HeaderInfo {
    pub backend: String,
    /// `net.ipv4.tcp_fastopen` where the traced connections are: the namespace tfo-trace
    /// runs in, or each `--netns` one; none in a replay (the recording does not hold it,
    /// and this host's says nothing of the one that recorded).
    pub tcp_fastopen: Vec<FastopenOf>,
    pub interval: Duration,
    /// Events the kernel could not write (ring buffer full).
    pub lost: u64,
    /// Colors unless NO_COLOR is set.
    pub color: bool,
    /// Events as they happen (rates mean *now*), not a replayed recording.
    pub live: bool,
    /// Where blackhole detection paused active TFO (live only), as of the last refresh.
    pub paused: Vec<Paused>,
}

/// `net.ipv4.tcp_fastopen` of one namespace the header speaks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FastopenOf {
    /// The traced namespace (`--netns`); None: the one tfo-trace runs in.
    pub netns: Option<u32>,
    /// Its `ip netns` name, where it has one.
    pub netns_name: Option<String>,
    /// None where it could not be read (the namespace gone, or not to be entered).
    pub value: Option<TcpFastopen>,
}

impl FastopenOf {
    /// The namespace as every view names it ([`crate::units::netns`]); None: tfo-trace's own.
    pub fn label(&self) -> Option<String> {
        self.netns.map(|n| crate::units::netns(n, self.netns_name.as_deref()))
    }
}

impl HeaderInfo {
    /// For live tracing: the sysctl of each namespace of `netns` (`--netns`), or of the one
    /// tfo-trace runs in where that is empty.
    pub fn new(backend: impl Into<String>, interval: Duration, netns: &[u32]) -> Self {
        HeaderInfo {
            backend: backend.into(),
            tcp_fastopen: fastopen_of(netns),
            interval,
            lost: 0,
            color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
            live: true,
            paused: Vec::new(),
        }
    }

    /// For a replay: no sysctl (see [`HeaderInfo::tcp_fastopen`]).
    pub fn replay(backend: impl Into<String>, interval: Duration) -> Self {
        HeaderInfo { tcp_fastopen: Vec::new(), live: false, ..HeaderInfo::new(backend, interval, &[]) }
    }

    /// `0x3 (client+server)`, or with `--netns` `lab-srv 0x2 (server), 4026532247 0x1
    /// (client)`: each value and what it turns on; None in a replay.
    pub fn fastopen_text(&self) -> Option<String> {
        let each: Vec<String> = self
            .tcp_fastopen
            .iter()
            .map(|f| {
                let value = f.value.map_or_else(|| "unknown".into(), fastopen_meaning);
                match f.label() {
                    Some(ns) => format!("{ns} {value}"),
                    None => value,
                }
            })
            .collect();
        (!each.is_empty()).then(|| each.join(", "))
    }
}

/// The sysctl of each namespace of `netns`, read inside it; of tfo-trace's own where
/// `netns` is empty.
fn fastopen_of(netns: &[u32]) -> Vec<FastopenOf> {
    use crate::kernel::{every_netns, netns::netns_names, sysctl::read_tcp_fastopen};
    if netns.is_empty() {
        return vec![FastopenOf { netns: None, netns_name: None, value: read_tcp_fastopen().ok() }];
    }
    let names = netns_names();
    let found = every_netns::find(netns);
    let read: std::collections::BTreeMap<u32, Option<TcpFastopen>> =
        every_netns::run_in_each(&found, || read_tcp_fastopen().ok())
            .into_iter()
            .map(|(inode, r)| (inode, r.ok().flatten()))
            .collect();
    netns
        .iter()
        .map(|&n| FastopenOf {
            netns: Some(n),
            netns_name: names.get(&u64::from(n)).cloned(),
            value: read.get(&n).copied().flatten(),
        })
        .collect()
}

/// `0x3 (client+server)`: the value and what it turns on.
fn fastopen_meaning(t: TcpFastopen) -> String {
    let mut on = Vec::new();
    if t.client_enabled() {
        on.push("client");
    }
    if t.server_enabled() {
        on.push("server");
    }
    if t.client_no_cookie() {
        on.push("no_cookie");
    }
    if t.server_cookie_not_required() {
        on.push("cookie_not_reqd");
    }
    if t.server_all_listeners() {
        on.push("all_listeners");
    }
    if t.unknown_bits() != 0 {
        on.push("unknown_bits");
    }
    if on.is_empty() {
        on.push("off");
    }
    format!("{:#x} ({})", t.value(), on.join("+"))
}
