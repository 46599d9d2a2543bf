//! Which rows a table of `top` shows, and in what order: the tables (`1`-`4`, Tab), the sort
//! orders (`s`, `--sort`), the `/` filter and the key cells the rows print. The model
//! (`aggregation::top`) counts; this is how the view looks at what it counted.
use std::{cmp::Ordering, collections::BTreeMap, sync::Arc};

use crate::{
    aggregation::top::{Row, RowKey, RowStats, Snapshot, TableSnapshot},
    cli::Sort,
};

/// The tables of `top`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum View {
    /// Client events, by destination address:port.
    Destinations,
    /// Server events, by listener address:port and network namespace.
    Listeners,
    /// All events, by process (pid, comm).
    Processes,
    /// All events, by container ([`crate::events::Event::container_label`]: the container,
    /// else the systemd unit, else the cgroup path; the host's root cgroup on its own row)
    /// and role: a container's client connections and its server ones are two rows.
    Containers,
}

impl View {
    pub(crate) const ALL: [View; 4] =
        [View::Destinations, View::Listeners, View::Processes, View::Containers];

    /// Its number key in the terminal UI (1-based position in [`View::ALL`]).
    pub(crate) fn key(self) -> usize {
        View::ALL.iter().position(|&v| v == self).unwrap_or(0) + 1
    }

    pub(crate) fn next(self) -> View {
        View::ALL[self.key() % View::ALL.len()]
    }

    /// Its table in a snapshot.
    pub(crate) fn table(self, snap: &Snapshot) -> &TableSnapshot {
        match self {
            View::Destinations => &snap.destinations,
            View::Listeners => &snap.listeners,
            View::Processes => &snap.processes,
            View::Containers => &snap.containers,
        }
    }
}

/// The rows of one table that pass `filter`, in `sort` order.
pub(crate) fn rows<'a>(snap: &'a Snapshot, view: View, sort: Sort, filter: &str) -> Vec<&'a Row> {
    let needle = filter.trim().to_lowercase();
    let mut rows: Vec<&Row> =
        view.table(snap).rows.iter().filter(|r| matches(r, &needle, &snap.netns_names)).collect();
    rows.sort_by(|a, b| sort.compare(a, b));
    rows
}

/// The key cells as the tables print them, one per key column of the view (`-` where the
/// pid, the process name or the container is not known: the host has no container; a
/// listener's namespace by its name where known, [`crate::units::netns`]).
pub(crate) fn cells(key: &RowKey, netns_names: &BTreeMap<u32, Arc<str>>) -> Vec<String> {
    match key {
        RowKey::Destination(a) => vec![crate::units::destination(a.ip(), a.port(), None)],
        RowKey::Listener { addr, netns } => {
            vec![addr.to_string(), crate::units::netns(*netns, netns_names.get(netns).map(|n| &**n))]
        }
        RowKey::Process { pid, comm } => vec![
            if *pid == 0 { "-".into() } else { pid.to_string() },
            if comm.is_empty() { "-".into() } else { comm.to_string() },
        ],
        RowKey::Container { label, role } => {
            vec![label.as_deref().unwrap_or("-").to_string(), role.name().to_string()]
        }
    }
}

/// The NAME cell of a destination row: the name its process last resolved the address by
/// (`--names`, [`Row::name`]), as [`crate::units::write_destination`] prints a name; `-`
/// where none is known.
pub(crate) fn name_cell(row: &Row) -> String {
    match row.name.as_deref().filter(|n| !n.is_empty()) {
        None => "-".into(),
        Some(name) => crate::units::printable(name).into_owned(),
    }
}

/// `/` filter: a case-insensitive substring of the address:port, the port, a destination's
/// name (`--names`), the netns (its inode, or its `ip netns` name from `netns_names`), the
/// pid, the process name or the container (`-`: the host). `needle` is already lower case.
fn matches(row: &Row, needle: &str, netns_names: &BTreeMap<u32, Arc<str>>) -> bool {
    let inode = |netns: &u32| netns.to_string().contains(needle);
    needle.is_empty()
        || cells(&row.key, netns_names).iter().any(|c| c.to_lowercase().contains(needle))
        || row.name.as_deref().is_some_and(|n| n.to_lowercase().contains(needle))
        || matches!(&row.key, RowKey::Listener { netns, .. } if inode(netns))
}

/// The sort orders `s` cycles through (`--sort` names them: [`Sort`]).
impl Sort {
    pub const ALL: [Sort; 7] =
        [Sort::Attempts, Sort::Stalls, Sort::StallRate, Sort::Lost, Sort::P99, Sort::Accepted, Sort::Name];

    pub fn next(self) -> Sort {
        let i = Self::ALL.iter().position(|&s| s == self).unwrap_or(0);
        Self::ALL[(i + 1) % Self::ALL.len()]
    }

    pub fn name(self) -> &'static str {
        match self {
            Sort::Attempts => "attempts",
            Sort::Stalls => "stalls",
            Sort::StallRate => "stalls/s",
            Sort::Lost => "lost",
            Sort::P99 => "p99",
            Sort::Accepted => "accepted",
            Sort::Name => "name",
        }
    }

    /// Biggest first, then by key so the order is stable.
    fn compare(self, a: &Row, b: &Row) -> Ordering {
        let (x, y) = (&a.stats, &b.stats);
        let by = match self {
            Sort::Attempts => y.attempts.cmp(&x.attempts),
            Sort::Stalls => (y.stalls, y.stall_us).cmp(&(x.stalls, x.stall_us)),
            Sort::StallRate => {
                let now = |s: &RowStats| (s.stalls_per_s.unwrap_or(-1.0), s.lost_per_s.unwrap_or(-1.0));
                now(y).partial_cmp(&now(x)).unwrap_or(Ordering::Equal)
            }
            Sort::Lost => (y.stall_us, y.stalls).cmp(&(x.stall_us, x.stalls)),
            Sort::P99 => y.p99_us.cmp(&x.p99_us),
            Sort::Accepted => y.accepted.cmp(&x.accepted),
            Sort::Name => Ordering::Equal,
        };
        by.then_with(|| a.key.cmp(&b.key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        aggregation::top::{
            model_of,
            tests::{container_events, demo_events, named_demo_events, DOCKER_ID},
        },
        events::{Event, Role},
    };
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};

    fn dst(host: u8, port: u16) -> RowKey {
        RowKey::Destination(SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, host)), port))
    }

    #[test]
    fn sort_and_filter() {
        let s = model_of(&demo_events()).snapshot();
        let rows = |view, sort, filter| rows(&s, view, sort, filter);
        assert_eq!(rows(View::Destinations, Sort::Attempts, "")[0].key, dst(2, 8080));
        assert_eq!(rows(View::Destinations, Sort::Stalls, "")[0].key, dst(3, 8080));
        assert_eq!(rows(View::Destinations, Sort::Lost, "")[0].key, dst(3, 8080));
        assert_eq!(rows(View::Destinations, Sort::P99, "")[0].key, dst(3, 8080));
        assert_eq!(rows(View::Destinations, Sort::Name, "")[0].key, dst(2, 8080));

        assert_eq!(rows(View::Destinations, Sort::Attempts, "0.3:").len(), 1);
        assert_eq!(rows(View::Destinations, Sort::Attempts, "8080").len(), 2, "by port");
        assert_eq!(rows(View::Listeners, Sort::Attempts, "8081").len(), 1);
        assert_eq!(rows(View::Listeners, Sort::Attempts, "4026532246").len(), 2, "by netns");
        // By the namespace's `ip netns` name too, as events name it (issue 31, item 12).
        let named: Vec<Event> = demo_events()
            .into_iter()
            .map(|e| Event { netns_name: (e.role == Role::Server).then(|| "tfolab-7-srv".into()), ..e })
            .collect();
        let n = model_of(&named).snapshot();
        assert_eq!(super::rows(&n, View::Listeners, Sort::Attempts, "TFOLAB-7").len(), 2, "by netns name");
        assert_eq!(super::rows(&n, View::Listeners, Sort::Attempts, "4026532246").len(), 2, "and by inode");
        // The NETNS cell names it where known, as every view does (issue 55, item 8).
        let listener = super::rows(&n, View::Listeners, Sort::Attempts, "")[0];
        assert_eq!(cells(&listener.key, &n.netns_names)[1], "tfolab-7-srv");
        assert_eq!(cells(&listener.key, &BTreeMap::new())[1], "4026532246");
        assert!(rows(View::Listeners, Sort::Attempts, "tfolab").is_empty(), "no names known");
        assert_eq!(rows(View::Processes, Sort::Attempts, "NGINX").len(), 1, "by name, any case");
        assert_eq!(rows(View::Processes, Sort::Attempts, "100").len(), 1, "by pid");
        assert!(rows(View::Processes, Sort::Attempts, "nothing").is_empty());

        let mut sort = Sort::Attempts;
        for _ in 0..Sort::ALL.len() {
            sort = sort.next();
        }
        assert_eq!(sort, Sort::Attempts, "s cycles back");
        assert_eq!(View::Processes.next(), View::Containers);
        assert_eq!(View::Containers.next(), View::Destinations);
        assert_eq!(View::Containers.key(), 4);
    }

    #[test]
    fn containers_sort_and_filter_with_the_host_as_a_dash() {
        let s = model_of(&container_events()).snapshot();
        let rows = |sort, filter| rows(&s, View::Containers, sort, filter);
        assert_eq!(
            cells(&rows(Sort::Name, "")[0].key, &BTreeMap::new()),
            ["-", "client"],
            "the host first, shown as -"
        );
        assert_eq!(cells(&rows(Sort::Stalls, "")[0].key, &BTreeMap::new()), [&DOCKER_ID[..12], "client"]);
        assert_eq!(rows(Sort::Attempts, "4F1E").len(), 1, "by id, any case");
        assert_eq!(rows(Sort::Attempts, "server").len(), 1, "by role: the unit's listener");
        assert_eq!(rows(Sort::Attempts, "nginx").len(), 1, "by unit");
        assert!(rows(Sort::Attempts, "nothing").is_empty());
    }

    /// `--names`: `/` finds a destination by its name too (any case), and its NAME cell is
    /// the name, escaped as text views print one, or `-`.
    #[test]
    fn the_filter_matches_a_destinations_name() {
        let s = model_of(&named_demo_events()).snapshot();
        let keys = |filter| -> Vec<String> {
            rows(&s, View::Destinations, Sort::Attempts, filter)
                .iter()
                .map(|r| cells(&r.key, &BTreeMap::new())[0].clone())
                .collect()
        };
        assert_eq!(keys("API.EX"), ["198.18.0.2:8080"]);
        assert_eq!(keys("eu-west"), ["[fd00:7f0::2]:8080"]);
        assert_eq!(keys("example"), ["198.18.0.2:8080", "[fd00:7f0::2]:8080"]);
        assert_eq!(keys("0.3:"), ["198.18.0.3:8080"], "by address as before");
        assert!(rows(&s, View::Processes, Sort::Attempts, "api.example").is_empty(), "destinations only");
        let name = |addr: &str| {
            let row =
                s.destinations.rows.iter().find(|r| cells(&r.key, &BTreeMap::new())[0] == addr).unwrap();
            name_cell(row)
        };
        assert_eq!((name("198.18.0.2:8080"), name("198.18.0.3:8080")), ("api.example".into(), "-".into()));
        let odd = Row { name: Some("a\x1bb".into()), ..s.destinations.rows[0].clone() };
        assert_eq!(name_cell(&odd), "a\\u{1b}b");
    }

    #[test]
    fn unknown_process_shows_a_dash() {
        assert_eq!(cells(&RowKey::Process { pid: 0, comm: "".into() }, &BTreeMap::new()), vec!["-", "-"]);
    }
}
