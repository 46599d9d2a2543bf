//! The model of `tfo-trace report`: events in, one at a time, from one host or many; out, a
//! summary, the client-side rows ranked by time lost (the first N shown, the rest summed),
//! the listeners and the namespaces' findings. Pure: the kernel's facts come in as
//! [`Facts`], rendering is `views::report`.
//! [`builder`] gathers and ranks (its `built.rs` the rows, `summary.rs` the totals),
//! [`connections`] keeps what a destination's connections count, [`grouping`] makes the
//! rows of `--group-by`, [`verdict`] judges each row.
//!
//! Memory follows destinations, not events: a destination seen once costs one
//! [`connections::Slot`] (40 bytes) in an insertion-ordered hash map; rows are built, with
//! their sentences, only for what is shown.
pub(crate) mod builder;
pub(crate) mod connections;
pub(crate) mod facts;
pub(crate) mod grouping;
pub(crate) mod key_change;
pub(crate) mod verdict;

pub(crate) use self::{
    builder::{Built, ReportBuilder, Rest, Summary},
    facts::{Facts, ListenerFact},
    grouping::GroupOptions,
};

/// Rows shown unless `--top` or `--all` says otherwise.
pub(crate) const DEFAULT_TOP: usize = 20;

/// The whole report of `events` from one host, every row, grouped by destination (the
/// tests' shortcut; the views build theirs with options, from several sources).
#[cfg(test)]
pub(crate) fn of_events(events: &[crate::events::Event], facts: &Facts) -> builder::Report {
    let mut b = ReportBuilder::new(GroupOptions::default(), false);
    let host = b.host("");
    for e in events {
        b.add(e, host);
    }
    b.finish(facts.clone(), None).materialize()
}
