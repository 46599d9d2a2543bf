//! The kernel's counters of a namespace as `nstat` itself reads them (`nstat -asz` inside
//! it: /proc/net/netstat, /proc/net/snmp and /proc/net/snmp6), never through the product's
//! parser (`tfo_trace::kernel::netstat`): the tests' one oracle for the kernel's own
//! counts. nstat's text is parsed here, by code that shares nothing with the product's,
//! and a counter nstat does not list fails the test (a misspelt name, or one this kernel
//! lacks), where a 0 would let a silent tracer pass.
//!
//! [`Deltas`] is both lab namespaces' counters from a moment on: what the tests compare the
//! tracer's figures with, and what a wait on the kernel waits on.
use std::{collections::BTreeMap, fmt, process::Command};

use tfo_trace::lab::{Lab, Side};

use super::eventually;

/// Where a namespace's counters are read from.
#[derive(Clone, Debug)]
pub enum Netns {
    /// An `ip netns` name (`ip netns exec NAME nstat`).
    Named(String),
    /// The namespace of a running process (`nsenter --net=/proc/PID/ns/net nstat`): a
    /// container's, which `ip netns` does not list.
    OfProcess(u32),
}

impl fmt::Display for Netns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Netns::Named(name) => write!(f, "netns {name}"),
            Netns::OfProcess(pid) => write!(f, "the netns of pid {pid}"),
        }
    }
}

/// Every counter of one namespace, by nstat's name (`TcpExtTCPFastOpenActive`), as read at
/// one moment or as moved between two ([`Nstat::since`]).
#[derive(Clone, PartialEq)]
pub struct Nstat {
    netns: String,
    counters: BTreeMap<String, u64>,
}

/// The counters that are not 0: what a failed assertion shows.
impl fmt::Debug for Nstat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.nonzero()).finish()
    }
}

impl Nstat {
    /// `nstat -asz` in the namespace named `netns` (`ip netns` name).
    pub fn read(netns: &str) -> Nstat {
        Self::read_in(&Netns::Named(netns.to_string()))
    }

    /// `nstat -asz` in `netns`: absolute values (`-a`), zeros included (`-z`: every
    /// counter the kernel has is listed), nstat's history file left alone (`-s`).
    pub fn read_in(netns: &Netns) -> Nstat {
        let mut cmd = match netns {
            Netns::Named(name) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", name]);
                c
            }
            Netns::OfProcess(pid) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/proc/{pid}/ns/net"));
                c
            }
        };
        let out = cmd
            .args(["nstat", "-asz"])
            .output()
            .unwrap_or_else(|e| panic!("running nstat in {netns}: {e} (`apt-get install iproute2`)"));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "nstat in {netns}: {}{text}", String::from_utf8_lossy(&out.stderr));
        let counters = Self::parse(&text).unwrap_or_else(|e| panic!("nstat in {netns}: {e}: {text}"));
        let read = Nstat { netns: netns.to_string(), counters };
        read.get("TcpExtTCPFastOpenActive"); // nstat listed what a TFO test reads, or fails here
        read
    }

    /// nstat's lines: `#kernel`, then `NAME VALUE RATE` each. Err on a line of another
    /// shape: a format not understood must not read as counters that stayed at 0.
    pub fn parse(text: &str) -> Result<BTreeMap<String, u64>, String> {
        let mut counters = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let mut words = line.split_whitespace();
            let (Some(name), Some(value)) = (words.next(), words.next()) else {
                return Err(format!("not `NAME VALUE RATE`: {line:?}"));
            };
            let value = value.parse().map_err(|e| format!("{line:?}: {e}"))?;
            counters.insert(name.to_string(), value);
        }
        if counters.is_empty() {
            return Err("no counter listed".into());
        }
        Ok(counters)
    }

    /// Counters of a fixed text, for the tests of this oracle itself.
    pub fn of_text(netns: &str, text: &str) -> Nstat {
        Nstat { netns: netns.to_string(), counters: Self::parse(text).unwrap() }
    }

    /// A counter's value (or how much it moved). Fails the test when nstat did not list
    /// it: a misspelt name, or a counter this kernel does not have.
    pub fn get(&self, name: &str) -> u64 {
        *self.counters.get(name).unwrap_or_else(|| {
            let like: Vec<&String> = self.counters.keys().filter(|k| same_family(k, name)).collect();
            panic!(
                "nstat in {} lists no counter {name:?} (misspelt, or this kernel lacks it); \
                 of its {} counters, these start alike: {like:?}",
                self.netns,
                self.counters.len()
            )
        })
    }

    /// How much each counter moved from `before` to `self` (saturating at 0: gauges such
    /// as TcpCurrEstab fall).
    pub fn since(&self, before: &Nstat) -> Nstat {
        let counters = self
            .counters
            .iter()
            .map(|(k, v)| (k.clone(), v.saturating_sub(before.counters.get(k).copied().unwrap_or(0))))
            .collect();
        Nstat { netns: self.netns.clone(), counters }
    }

    /// The counters that are not 0.
    pub fn nonzero(&self) -> impl Iterator<Item = (&str, u64)> {
        self.counters.iter().filter(|(_, v)| **v > 0).map(|(k, v)| (k.as_str(), *v))
    }
}

/// Whether two counter names start alike (their group and the first letters of the
/// name): the ones a misspelling most likely meant.
fn same_family(a: &str, b: &str) -> bool {
    let stem = |s: &str| s.chars().take(12).collect::<String>();
    stem(a) == stem(b)
}

/// The kernel's counters of a lab's client and server namespaces from the moment
/// [`Deltas::since`] was called: `nstat` of each, as a delta.
pub struct Deltas<'l> {
    lab: &'l Lab,
    client: Nstat,
    server: Nstat,
}

impl<'l> Deltas<'l> {
    /// Both namespaces' counters now: the deltas count from here.
    pub fn since(lab: &'l Lab) -> Deltas<'l> {
        Deltas {
            lab,
            client: Nstat::read(lab.netns(Side::Client)),
            server: Nstat::read(lab.netns(Side::Server)),
        }
    }

    /// How much each counter of `side`'s namespace has moved since.
    pub fn of(&self, side: Side) -> Nstat {
        let before = match side {
            Side::Client => &self.client,
            Side::Server => &self.server,
        };
        Nstat::read(self.lab.netns(side)).since(before)
    }

    pub fn client(&self) -> Nstat {
        self.of(Side::Client)
    }

    pub fn server(&self) -> Nstat {
        self.of(Side::Server)
    }

    /// (client, server).
    pub fn both(&self) -> (Nstat, Nstat) {
        (self.client(), self.server())
    }

    /// Waits ([`eventually`]) until `counter` has risen by at least `n` in `side`'s
    /// namespace; returns that namespace's deltas then.
    pub fn wait_for(&self, side: Side, counter: &str, n: u64) -> Nstat {
        eventually(format!("{counter} up by {n} in the {side:?} namespace"), || {
            let d = self.of(side);
            if d.get(counter) >= n {
                Ok(d)
            } else {
                Err(format!("{d:?}"))
            }
        })
    }
}
