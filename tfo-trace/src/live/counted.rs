//! The namespaces' own counts ([`KernelCounted`]) as the live views say them: the one
//! wording of `top`, its batch lines and the closing line.
use std::collections::BTreeMap;

use crate::{aggregation::kernel_counted::KernelCounted, units};

/// How a namespace is named in sentences: `netns lab-srv`, `netns 4026532246` for one
/// without an `ip netns` name ([`units::netns`]), or for one this user cannot name, `an
/// unnamed netns (pid 1234's)`.
fn namespace_phrase(counted: &KernelCounted, key: u32) -> String {
    if let Some(pid) = counted.unnamed.get(&key) {
        return format!("an unnamed netns (pid {pid}'s)");
    }
    format!("netns {}", units::netns(key, counted.netns_names.get(&key).map(String::as_str)))
}

/// `2 namespaces unreadable (netns 4026532246: setns: Operation not permitted; ...)`:
/// what the counts leave out, where anything is; None where nothing is.
pub(crate) fn unreadable_phrase(counted: &KernelCounted) -> Option<String> {
    if counted.unreadable.is_empty() {
        return None;
    }
    let each: Vec<String> = counted
        .unreadable
        .iter()
        .map(|(i, why)| format!("{}: {why}", namespace_phrase(counted, *i)))
        .collect();
    let n = units::plural(counted.unreadable.len() as u64, "namespace", "namespaces");
    Some(format!("{n} unreadable, not counted ({})", each.join("; ")))
}

/// One phrase per namespace where a count moved: `netns lab-srv: server queue_overflow 3,
/// server cookie_invalid 1, SyncookiesSent 40` (a SYN flood's counters by `nstat`'s name,
/// less its `TcpExt`).
pub(crate) fn per_namespace(counted: &KernelCounted) -> Vec<String> {
    let mut each: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (ns, rows) in counted.by_namespace() {
        let said = rows.iter().map(|r| format!("{} {} {}", r.role.name(), r.outcome.name(), r.count));
        each.entry(ns).or_default().extend(said);
    }
    for r in &counted.flood {
        let name = r.counter.strip_prefix("TcpExt").unwrap_or(r.counter);
        each.entry(r.netns).or_default().push(format!("{name} {}", r.count));
    }
    each.into_iter()
        .map(|(ns, said)| format!("{}: {}", namespace_phrase(counted, ns), said.join(", ")))
        .collect()
}

/// What a reader needs to know of where these counts come from, for `backend`.
pub(crate) fn provenance(backend: &str) -> String {
    format!(
        "counted by each namespace's own kernel counters: no {backend} hook sees these, so no \
         listener or process is named"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        aggregation::kernel_counted::{CountedRow, FloodRow},
        events::{Outcome, Role},
    };

    fn row(netns: u32, outcome: Outcome, count: u64) -> CountedRow {
        CountedRow {
            netns,
            role: Role::Server,
            outcome,
            count,
            counter: "TCPFastOpenListenOverflow",
            within: None,
        }
    }

    #[test]
    fn each_namespace_by_its_name_or_the_pid_it_was_read_through() {
        let counted = KernelCounted {
            rows: vec![
                row(7, Outcome::QueueOverflow, 3),
                row(7, Outcome::CookieInvalid, 1),
                row(9, Outcome::QueueOverflow, 2),
            ],
            flood: vec![FloodRow { netns: 7, counter: "TcpExtSyncookiesSent", count: 40 }],
            unnamed: BTreeMap::from([(9, 1234)]),
            netns_names: BTreeMap::from([(7, "lab-srv".to_string())]),
            ..Default::default()
        };
        assert_eq!(
            per_namespace(&counted),
            [
                "netns lab-srv: server queue_overflow 3, server cookie_invalid 1, SyncookiesSent 40",
                "an unnamed netns (pid 1234's): server queue_overflow 2"
            ]
        );
        assert_eq!(unreadable_phrase(&counted), None);
    }

    #[test]
    fn what_could_not_be_read_is_said_with_why() {
        let mut counted = KernelCounted {
            unreadable: BTreeMap::from([(5, "setns: Operation not permitted".to_string())]),
            ..Default::default()
        };
        assert_eq!(
            unreadable_phrase(&counted).as_deref(),
            Some("1 namespace unreadable, not counted (netns 5: setns: Operation not permitted)")
        );
        counted.unreadable.insert(6, "gone".into());
        assert_eq!(
            unreadable_phrase(&counted).as_deref(),
            Some("2 namespaces unreadable, not counted (netns 5: setns: Operation not permitted; netns 6: gone)")
        );
    }
}
