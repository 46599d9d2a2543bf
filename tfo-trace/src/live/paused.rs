//! What blackhole detection's pauses did, for the live views (`stalls`' summary, `top`):
//! the pauses found in the events (`aggregation::blackhole`), how many the namespaces'
//! counters counted where no hook sees them, and how long each lasts by the namespace's
//! `tcp_fastopen_blackhole_timeout_sec`, read now; and the one sentence that says a
//! namespace's pauses ([`pause_sentence`]), which `report` says too.
use serde::Serialize;

use crate::{
    aggregation::{
        blackhole::{PauseSummary, Pauses, Tripper},
        kernel_counted::KernelCounted,
    },
    events::{Outcome, Role, Trip},
    kernel::{netns, sysctl},
    units,
};

/// One client namespace's pauses, and the sentence every view says them with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Paused {
    #[serde(flatten)]
    pub summary: PauseSummary,
    pub sentence: String,
}

/// Each namespace where active TFO was paused: from `pauses`, with `counted` (the live
/// namespaces' counters) for how many pauses there were where no hook sees them. Reads
/// the sysctl of those namespaces only, and only where there is one.
pub(crate) fn said(pauses: &Pauses, counted: &KernelCounted) -> Vec<Paused> {
    let blind = counted.counts(Role::Client, Outcome::ActiveDisabled);
    let moved = |ns: u32| {
        counted
            .rows
            .iter()
            .filter(|r| r.netns == ns && (r.role, r.outcome) == (Role::Client, Outcome::ActiveDisabled))
            .map(|r| r.count)
            .sum::<u64>()
    };
    let mut namespaces: Vec<u32> = pauses.namespaces().collect();
    if blind {
        for r in counted.rows.iter().filter(|r| r.outcome == Outcome::ActiveDisabled) {
            if !namespaces.contains(&r.netns) {
                namespaces.push(r.netns);
            }
        }
    }
    if namespaces.is_empty() {
        return Vec::new();
    }
    let timeouts = sysctl::blackhole_timeouts(&namespaces);
    let names = netns::netns_names();
    namespaces
        .into_iter()
        .filter_map(|ns| {
            let summary = pauses.summary(ns, blind.then(|| moved(ns)), timeouts.get(&ns).copied())?;
            let label =
                format!("netns {}", crate::units::netns(ns, names.get(&u64::from(ns)).map(String::as_str)));
            Some(Paused { sentence: pause_sentence(&summary, &label), summary })
        })
        .collect()
}

/// What the trippers did, for "paused ... because ...": SYNs lost to the destinations of
/// connects, a server TFO child's data lost to its client, a FIN or RST before any data.
fn tripped_because(trippers: &[&Tripper]) -> String {
    let of = |keep: &dyn Fn(&Tripper) -> bool| -> Vec<&str> {
        trippers.iter().filter(|t| keep(t)).map(|t| t.destination.as_str()).collect()
    };
    let out_of_order = |t: &Tripper| t.trip == Some(Trip::OutOfOrderEnd);
    let mut parts = Vec::new();
    let syns = of(&|t| t.role == Role::Client && !out_of_order(t));
    if !syns.is_empty() {
        parts.push(format!("SYNs to {} were lost", syns.join(" and ")));
    }
    let children = of(&|t| t.role == Role::Server);
    if !children.is_empty() {
        parts.push(format!(
            "a TFO child of this namespace's server timed out three times in a row sending to {}",
            children.join(" and ")
        ));
    }
    let ends = of(&out_of_order);
    if !ends.is_empty() {
        parts.push(format!(
            "{} FIN or RST came before any of its data (the data lost on the path)",
            ends.join(" and ")
        ));
    }
    parts.join(" and ")
}

/// `TFO paused in netns N until T because SYNs to X were lost; 4 connections to 1 other
/// destination went without TFO`: the one wording of `report`, `stalls` and `top`.
pub(crate) fn pause_sentence(p: &PauseSummary, ns: &str) -> String {
    let times = if p.pauses > 1 { format!(" {} times", p.pauses) } else { String::new() };
    let mut s = format!("TFO paused in {ns}{times}");
    let last = p.last();
    let end = match (last.and_then(|l| l.resumed.as_ref()), last.and_then(|l| l.until.as_ref())) {
        (Some(r), _) => format!(" until {} UTC (TFO attempted again)", r.millis()),
        (None, Some(u)) => format!(" until {} UTC", u.millis()),
        (None, None) if p.timeout_s == Some(0) => {
            " (tcp_fastopen_blackhole_timeout_sec is 0 now: paused no more)".to_string()
        }
        (None, None) => " for tcp_fastopen_blackhole_timeout_sec, doubled at each pause".to_string(),
    };
    s.push_str(&end);
    let trippers = p.tripping_destinations();
    if trippers.is_empty() && p.pauses == 0 {
        s.push_str(" (since before tfo-trace started)");
    } else if trippers.is_empty() {
        s.push_str(" (no event shows the connection that tripped it)");
    } else {
        s.push_str(&format!(" because {}", tripped_because(&trippers)));
    }
    let (others, destinations) = p.to_others();
    let itself = p.without_tfo - others;
    if p.without_tfo == 0 {
        s.push_str("; no connection went without TFO during it");
    } else if trippers.is_empty() {
        s.push_str(&format!(
            "; {} to {} went without TFO",
            units::plural(p.without_tfo, "connection", "connections"),
            units::plural(destinations, "destination", "destinations")
        ));
    } else {
        if others > 0 {
            s.push_str(&format!(
                "; {} to {} went without TFO",
                units::plural(others, "connection", "connections"),
                units::plural(destinations, "other destination", "other destinations")
            ));
        }
        if itself > 0 {
            let to = if trippers.len() == 1 { trippers[0].destination.as_str() } else { "those" };
            s.push_str(&format!("{} {itself} to {to}", if others > 0 { " and" } else { ";" }));
            if others == 0 {
                s.push_str(" went without TFO");
            }
        }
    }
    if !trippers.is_empty() && p.timeout_s != Some(0) {
        s.push_str(
            ": fix the path to it, or set net.ipv4.tcp_fastopen_blackhole_timeout_sec=0 (the default since \
             Linux 5.14, and in the stable kernels that took the change) so that one lost destination does not \
             pause TFO for every other",
        );
    }
    s
}
