//! How `report` groups client connections: by destination (the default), by network prefix
//! (a middlebox in front of a whole /24 is one verdict, not one per address), by port, by
//! process, by container or by the DNS name the client resolved (`--names`). Pure: keys
//! from events, labels from keys.
use std::{
    borrow::Cow,
    net::{IpAddr, SocketAddr},
};

use serde::Serialize;

use crate::events::Event;

/// What one row of the report's client side stands for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// One row per destination address:port (per client namespace on one host).
    #[default]
    Destination,
    /// One row per network: the destination address cut to --prefix-v4 / --prefix-v6 bits.
    Prefix,
    /// One row per destination port.
    Port,
    /// One row per client process name (comm).
    Process,
    /// One row per client container (or systemd unit, or cgroup).
    Container,
    /// One row per DNS name the client resolved for its destination (`--names`), across
    /// that name's addresses; a connection without a name keeps its destination's row.
    Name,
}

impl GroupBy {
    /// The flag's value, and what one row is called in text.
    pub fn name(self) -> &'static str {
        match self {
            GroupBy::Destination => "destination",
            GroupBy::Prefix => "prefix",
            GroupBy::Port => "port",
            GroupBy::Process => "process",
            GroupBy::Container => "container",
            GroupBy::Name => "name",
        }
    }

    /// What a row is called in text: "destinations", "prefixes", ...
    pub fn rows(self) -> &'static str {
        match self {
            GroupBy::Destination => "destinations",
            GroupBy::Prefix => "prefixes",
            GroupBy::Port => "ports",
            GroupBy::Process => "processes",
            GroupBy::Container => "containers",
            GroupBy::Name => "names",
        }
    }

    /// Whether the group follows from the destination alone (then a destination is never
    /// split between groups).
    pub fn by_destination(self) -> bool {
        matches!(self, GroupBy::Destination | GroupBy::Prefix | GroupBy::Port)
    }
}

/// The default prefix lengths: a /24 is the usual unit of IPv4 routing and filtering, a /48
/// the usual IPv6 site.
pub(crate) const DEFAULT_PREFIX_V4: u8 = 24;
pub(crate) const DEFAULT_PREFIX_V6: u8 = 48;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GroupOptions {
    pub by: GroupBy,
    pub prefix_v4: u8,
    pub prefix_v6: u8,
}

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions { by: GroupBy::Destination, prefix_v4: DEFAULT_PREFIX_V4, prefix_v6: DEFAULT_PREFIX_V6 }
    }
}

/// A client connection's destination. `netns` is the client's namespace inode, or None in a
/// report of several hosts, where an inode names nothing across hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct DestKey {
    pub ip: IpAddr,
    pub port: u16,
    pub netns: Option<u32>,
}

impl DestKey {
    pub(crate) fn of(e: &Event, with_netns: bool) -> DestKey {
        DestKey { ip: e.daddr, port: e.dport, netns: with_netns.then_some(e.netns) }
    }

    /// `198.18.0.2:8080`, `[fd00::2]:8080`, as [`Event::destination`] writes it.
    pub(crate) fn label(&self) -> String {
        SocketAddr::new(self.ip, self.port).to_string()
    }
}

/// A row of the report's client side. `Process`, `Container` and `Name` hold an index into
/// the report's table of names (each name is stored once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum GroupKey {
    Destination(DestKey),
    Prefix {
        net: IpAddr,
        len: u8,
    },
    Port(u16),
    Process(u32),
    Container(u32),
    /// A DNS name (`--group-by name`).
    Name(u32),
}

/// The tag of a connection without a DNS name under `--group-by name`: it keeps its
/// destination's row.
pub(crate) const NO_NAME: u32 = u32::MAX;

/// A client event's DNS name (`Event::dname`, from `--names`) as `report` prints it:
/// control characters escaped (`\u{1b}`: a recording is input, not trusted); None without
/// one, or for an empty one.
pub(crate) fn dns_name(e: &Event) -> Option<Cow<'_, str>> {
    e.dname.as_deref().filter(|n| !n.is_empty()).map(crate::units::printable)
}

/// `ip` with only its first `len` bits kept.
pub(crate) fn mask(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let len = u32::from(len.min(32));
            let m = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let len = u32::from(len.min(128));
            let m = if len == 0 { 0 } else { u128::MAX << (128 - len) };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

impl GroupBy {
    /// The name a connection is grouped under when grouping by process, container or DNS
    /// name; None otherwise (no name needs storing), and for a connection without a DNS
    /// name when grouping by those (it keeps its destination's row).
    pub(crate) fn tag_name(self, e: &Event) -> Option<Cow<'_, str>> {
        match self {
            GroupBy::Process => Some(Cow::Borrowed(&e.comm)),
            GroupBy::Container => Some(Cow::Borrowed(e.container_label().unwrap_or_default())),
            GroupBy::Name => dns_name(e),
            _ => None,
        }
    }
}

impl GroupOptions {
    /// The group of a destination; `tag` is the name index of the connection's process,
    /// container or DNS name (used only when grouping by those; [`NO_NAME`] for a connection
    /// without a DNS name, which keeps its destination's row).
    pub(crate) fn key(&self, dest: &DestKey, tag: u32) -> GroupKey {
        match self.by {
            GroupBy::Destination => GroupKey::Destination(*dest),
            GroupBy::Prefix => {
                // An IPv4-mapped IPv6 destination is an IPv4 one (a dual-stack socket).
                let ip = match dest.ip {
                    IpAddr::V6(a) => a.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(dest.ip),
                    v4 => v4,
                };
                let len = if ip.is_ipv4() { self.prefix_v4 } else { self.prefix_v6 };
                GroupKey::Prefix { net: mask(ip, len), len }
            }
            GroupBy::Port => GroupKey::Port(dest.port),
            GroupBy::Process => GroupKey::Process(tag),
            GroupBy::Container => GroupKey::Container(tag),
            GroupBy::Name if tag == NO_NAME => GroupKey::Destination(*dest),
            GroupBy::Name => GroupKey::Name(tag),
        }
    }
}

impl GroupKey {
    /// How the row is named: `198.18.0.2:8080`, `198.18.0.0/24`, `port 8080`, `process curl`,
    /// `container 3f2a9c1b0d4e` (`no container` for processes outside any), `api.example`.
    pub(crate) fn label(&self, name: impl Fn(u32) -> String) -> String {
        match self {
            GroupKey::Destination(d) => d.label(),
            GroupKey::Prefix { net, len } => format!("{net}/{len}"),
            GroupKey::Port(p) => format!("port {p}"),
            GroupKey::Process(t) => format!("process {}", name(*t)),
            GroupKey::Container(t) => match name(*t) {
                n if n.is_empty() => "no container".to_string(),
                n => format!("container {n}"),
            },
            GroupKey::Name(t) => name(*t),
        }
    }

    /// A group of the destinations that one sender (a process, a container) reached,
    /// named by the sender.
    pub(crate) fn named_by_sender(&self) -> bool {
        matches!(self, GroupKey::Process(_) | GroupKey::Container(_))
    }

    pub(crate) fn netns(&self) -> Option<u32> {
        match self {
            GroupKey::Destination(d) => d.netns,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{sample_event, Outcome, Role};

    fn dest(ip: &str, port: u16) -> DestKey {
        DestKey { ip: ip.parse().unwrap(), port, netns: None }
    }

    #[test]
    fn prefixes_default_to_24_and_48() {
        let o = GroupOptions { by: GroupBy::Prefix, ..Default::default() };
        let label = |ip, port| o.key(&dest(ip, port), 0).label(|_| String::new());
        assert_eq!(label("203.0.113.77", 443), "203.0.113.0/24");
        assert_eq!(label("203.0.113.200", 8443), "203.0.113.0/24", "the port is not part of a prefix");
        assert_eq!(label("2001:db8:1:2::7", 443), "2001:db8:1::/48");
        assert_eq!(label("::ffff:203.0.113.9", 443), "203.0.113.0/24", "v4-mapped is IPv4");
        let o = GroupOptions { by: GroupBy::Prefix, prefix_v4: 16, prefix_v6: 64 };
        assert_eq!(o.key(&dest("10.1.2.3", 1), 0).label(|_| String::new()), "10.1.0.0/16");
        assert_eq!(o.key(&dest("fd00:7f0:3:4:5::1", 1), 0).label(|_| String::new()), "fd00:7f0:3:4::/64");
        assert_eq!(mask("10.1.2.3".parse().unwrap(), 0), "0.0.0.0".parse::<IpAddr>().unwrap());
        assert_eq!(mask("10.1.2.3".parse().unwrap(), 32), "10.1.2.3".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn labels_and_subjects() {
        let names = |t: u32| ["", "curl"][t as usize].to_string();
        let d = GroupKey::Destination(dest("198.18.0.2", 8080));
        assert_eq!(d.label(names), "198.18.0.2:8080");
        assert!(!d.named_by_sender());
        assert_eq!(GroupKey::Port(443).label(names), "port 443");
        assert_eq!(GroupKey::Process(1).label(names), "process curl");
        assert!(GroupKey::Process(1).named_by_sender());
        assert_eq!(GroupKey::Container(0).label(names), "no container");
        assert_eq!(GroupKey::Destination(dest("fd00::2", 80)).label(names), "[fd00::2]:80");
    }

    #[test]
    fn tags_only_where_needed() {
        let e = Event {
            container_id: Some("3f2a9c1b0d4e5f6a".into()),
            ..sample_event(Role::Client, Outcome::Accepted)
        };
        let by = |by: GroupBy| by.tag_name(&e);
        assert_eq!(by(GroupBy::Destination), None);
        assert_eq!(by(GroupBy::Process).as_deref(), Some("c"));
        assert_eq!(by(GroupBy::Container).as_deref(), Some("3f2a9c1b0d4e"));
        let plain = sample_event(Role::Client, Outcome::Accepted);
        assert_eq!(GroupBy::Container.tag_name(&plain).as_deref(), Some(""));
        assert_eq!(DestKey::of(&plain, true).netns, Some(1));
        assert_eq!(DestKey::of(&plain, false).netns, None);
    }

    #[test]
    fn by_name_with_the_destination_for_connections_without_one() {
        let o = GroupOptions { by: GroupBy::Name, ..Default::default() };
        let named =
            Event { dname: Some("api.example".into()), ..sample_event(Role::Client, Outcome::Accepted) };
        assert_eq!(o.by.tag_name(&named).as_deref(), Some("api.example"));
        let plain = sample_event(Role::Client, Outcome::Accepted);
        assert_eq!(o.by.tag_name(&plain), None);
        let empty = Event { dname: Some("".into()), ..plain.clone() };
        assert_eq!(dns_name(&empty), None, "an empty name is none");
        let d = dest("198.18.0.3", 8080);
        assert_eq!(o.key(&d, 4), GroupKey::Name(4));
        assert_eq!(o.key(&d, NO_NAME), GroupKey::Destination(d), "no name: the destination's row");
        let names = |_| "api.example".to_string();
        assert_eq!(GroupKey::Name(4).label(names), "api.example");
        assert!(!GroupKey::Name(4).named_by_sender());
        assert_eq!(GroupKey::Name(4).netns(), None);
        assert!(!GroupBy::Name.by_destination());
        assert_eq!((GroupBy::Name.name(), GroupBy::Name.rows()), ("name", "names"));
        let evil = Event { dname: Some("a\u{1b}]0;x\u{7}.example".into()), ..plain };
        assert_eq!(dns_name(&evil).as_deref(), Some("a\\u{1b}]0;x\\u{7}.example"));
    }
}
