//! The kernel's counters of a lab namespace as `nstat` itself reads them (`ip netns exec NS
//! nstat -asz`), not through the product's own parser (`tfo_trace::kernel::netstat`): the
//! oracle for a test whose subject is what the product reads from those very counters
//! (the outcomes counted from the namespaces' counters on the tracepoint backends).
use std::{collections::BTreeMap, process::Command};

use tfo_trace::lab::{Lab, Side};

/// Every counter of one namespace, by `nstat`'s name.
#[derive(Clone, Default, PartialEq)]
pub struct Nstat(BTreeMap<String, u64>);

/// The counters that are not 0: what a failed assertion shows.
impl std::fmt::Debug for Nstat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.0.iter().filter(|(_, v)| **v > 0)).finish()
    }
}

impl Nstat {
    /// `nstat -asz` in the namespace named `netns` (`ip netns` name): absolute values, zeros
    /// included, nstat's history file left alone.
    pub fn read(netns: &str) -> Nstat {
        let out = Command::new("ip")
            .args(["netns", "exec", netns, "nstat", "-asz"])
            .output()
            .unwrap_or_else(|e| panic!("running nstat in {netns}: {e}"));
        assert!(out.status.success(), "nstat in {netns}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        let counters = Nstat::parse(&text);
        assert!(counters.0.contains_key("TcpExtTCPFastOpenActive"), "nstat in {netns} said: {text}");
        counters
    }

    /// nstat's lines: `#kernel`, then `NAME VALUE RATE`.
    fn parse(text: &str) -> Nstat {
        Nstat(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let mut w = l.split_whitespace();
                    Some((w.next()?.to_string(), w.next()?.parse().ok()?))
                })
                .collect(),
        )
    }

    /// A counter; fails the test where nstat does not list it (a misspelled name must not
    /// read as 0), naming the counters it lists.
    pub fn get(&self, name: &str) -> u64 {
        listed(&self.0, name, "nstat")
    }

    /// How much each counter moved from `before` to `self` (one `before` lacks counts
    /// from 0).
    pub fn since(&self, before: &Nstat) -> Nstat {
        Nstat(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(before.0.get(k).copied().unwrap_or(0))))
                .collect(),
        )
    }
}

/// A lab's two namespaces as `nstat` reads them from a moment on ([`crate::Deltas`]' twin).
pub struct NstatSince<'l> {
    lab: &'l Lab,
    client: Nstat,
    server: Nstat,
}

impl<'l> NstatSince<'l> {
    pub fn since(lab: &'l Lab) -> NstatSince<'l> {
        let read = |side| Nstat::read(lab.netns(side));
        NstatSince { lab, client: read(Side::Client), server: read(Side::Server) }
    }

    /// How much each counter of `side`'s namespace has moved since.
    pub fn of(&self, side: Side) -> Nstat {
        let before = match side {
            Side::Client => &self.client,
            Side::Server => &self.server,
        };
        Nstat::read(self.lab.netns(side)).since(before)
    }

    pub fn server(&self) -> Nstat {
        self.of(Side::Server)
    }

    /// (client, server).
    pub fn both(&self) -> (Nstat, Nstat) {
        (self.of(Side::Client), self.of(Side::Server))
    }
}

/// Counter `name` of `counters` (as `source` listed them); fails the test where it is not
/// listed, naming the counters that are: a misspelled name must not read as 0.
pub fn listed(counters: &BTreeMap<String, u64>, name: &str, source: &str) -> u64 {
    counters.get(name).copied().unwrap_or_else(|| {
        let there: Vec<&str> = counters.keys().map(String::as_str).collect();
        panic!("no counter {name:?}: {source} lists {}: {}", there.len(), there.join(" "))
    })
}
