//! What blackhole detection's pauses did, for the live views (`stalls`' summary, `top`):
//! the pauses found in the events (`aggregation::blackhole`), how many the namespaces'
//! counters counted where no hook sees them, and how long each lasts by the namespace's
//! `tcp_fastopen_blackhole_timeout_sec`, read now.
use serde::Serialize;

use crate::{
    aggregation::{
        blackhole::{PauseSummary, Pauses},
        kernel_counted::KernelCounted,
        report::verdict::pause_sentence,
    },
    events::{Outcome, Role},
    kernel::{netns, sysctl},
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
pub fn said(pauses: &Pauses, counted: &KernelCounted) -> Vec<Paused> {
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
            let label = match names.get(&u64::from(ns)) {
                Some(n) => format!("netns {n}"),
                None => format!("netns {ns}"),
            };
            Some(Paused { sentence: pause_sentence(&summary, &label), summary })
        })
        .collect()
}
