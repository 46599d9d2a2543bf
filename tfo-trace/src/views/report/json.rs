//! `report --format json`: the model as it is, with where it came from and the replay's
//! errors.
use std::io::{self, Write};

use serde::Serialize;

use super::{
    source::{Rendered, Source},
    verdict::{SaidCached, SaidFinding, SaidRow},
};
use crate::aggregation::report::{
    verdict::{DestinationReport, ListenerReport},
    Rest, Summary,
};

#[derive(Serialize)]
struct JsonReport<'a> {
    source: &'a Source,
    /// Every recording merged (one for a single one, none live).
    sources: &'a [Source],
    summary: &'a Summary,
    destinations: Vec<SaidRow<'a, DestinationReport>>,
    /// The rows beyond `--top`, summed (null when every row is shown).
    rest: &'a Option<Rest>,
    listeners: Vec<SaidRow<'a, ListenerReport>>,
    namespaces: Vec<SaidFinding<'a>>,
    /// Destinations the kernel's cache (ip tcp_metrics) remembers losing SYN-data to, with
    /// no connection in the window (live only): not connections, and not in `destinations`.
    kernel_cache: Vec<SaidCached<'a>>,
    /// The error line of the first recording with bad lines (how many were skipped, the
    /// first few named; every other line is in the report).
    replay_error: Option<String>,
    /// The error line of each recording with bad lines.
    replay_errors: Vec<String>,
}

/// The report as one JSON object (`errors`: each recording's bad lines).
pub(super) fn write(w: &mut impl Write, r: &Rendered, errors: &[String]) -> io::Result<()> {
    let b = r.built;
    let rows: Vec<DestinationReport> = b.rows().collect();
    let j = JsonReport {
        source: r.source,
        sources: r.sources,
        summary: &b.summary,
        destinations: rows.iter().map(SaidRow::destination).collect(),
        rest: &b.rest,
        listeners: b.listeners.iter().map(SaidRow::listener).collect(),
        namespaces: b.namespaces.iter().map(SaidFinding::of).collect(),
        kernel_cache: b.kernel_cache.iter().map(SaidCached::of).collect(),
        replay_error: errors.first().cloned(),
        replay_errors: errors.to_vec(),
    };
    serde_json::to_writer_pretty(&mut *w, &j)?;
    writeln!(w)?;
    Ok(())
}
