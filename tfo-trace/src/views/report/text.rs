//! `report` as text (the default): the summary, then each row, listener and namespace with
//! its verdict and evidence.
use std::io::{self, Write};

use super::{
    lines::{
        balance_line, forgone_text, names_line, outcomes_line, rest_line, source_line, strength_line,
        summary_lines,
    },
    source::Rendered,
    verdict::{cached_sentence, said_client, said_finding, said_listener, Said},
};
use crate::{
    aggregation::report::{
        verdict::{DestinationReport, NamespaceFinding, Verdict},
        Built,
    },
    units,
};

pub(super) fn write(w: &mut impl Write, r: &Rendered) -> io::Result<()> {
    let b = r.built;
    let s = &b.summary;
    writeln!(w, "tfo-trace report: {}", source_line(r.source, r.sources))?;
    let nothing =
        s.groups == 0 && b.kernel_cache.is_empty() && b.listeners.is_empty() && b.namespaces.is_empty();
    if nothing {
        writeln!(w, "\nno TFO connections seen")?;
        return Ok(());
    }
    writeln!(w, "\nSummary")?;
    for l in summary_lines(r) {
        writeln!(w, "  {l}")?;
    }
    let rows = s.group_by.rows();
    if s.groups > 0 {
        let cap = rows[..1].to_uppercase() + &rows[1..];
        let shown = if b.rest.is_some() {
            format!(", the {} that lost the most time of {}", units::count(s.shown), units::count(s.groups))
        } else {
            String::new()
        };
        writeln!(w, "\n{cap} by time lost (client side{shown})")?;
    }
    for d in b.rows() {
        writeln!(w, "{}", row_title(&d, b))?;
        if let Some(names) = names_line(&d) {
            writeln!(w, "  names: {names}")?;
        }
        writeln!(w, "  connections: {}  {}", d.connections, outcomes_line(&d.outcomes))?;
        writeln!(w, "  added latency: {}", lost_line(&d))?;
        if let Some(b) =
            balance_line(d.saved_us_total, d.saved_measured, Some(d.accepted), d.net_us, d.connections)
        {
            writeln!(w, "  balance: {b}")?;
        }
        write_verdict_text(w, &d.verdict, &said_client(&d))?;
    }
    if let Some(rest) = &b.rest {
        writeln!(w, "{}", rest_line(rest, rows))?;
    }
    if !b.listeners.is_empty() {
        writeln!(w, "\nListeners (server side)")?;
    }
    for l in &b.listeners {
        let q = l.max_qlen.map(|q| format!("  max_qlen {q}")).unwrap_or_default();
        let ns = l.netns.map(|n| format!(" ({})", b.netns_label(n))).unwrap_or_default();
        writeln!(w, "{}{ns}{q}", l.listener)?;
        writeln!(w, "  outcomes: {}", outcomes_line(&l.outcomes))?;
        write_verdict_text(w, &l.verdict, &said_listener(l))?;
    }
    let (paused, counted): (Vec<&NamespaceFinding>, Vec<&NamespaceFinding>) =
        b.namespaces.iter().partition(|n| n.pause.is_some());
    if !paused.is_empty() {
        writeln!(w, "\nActive TFO paused (blackhole detection, per client namespace)")?;
    }
    for n in &paused {
        writeln!(w, "{}", b.netns_label(n.netns))?;
        write_verdict_text(w, &n.verdict, &said_finding(n))?;
    }
    if !counted.is_empty() {
        writeln!(
            w,
            "\nFrom the kernel's counters (not visible as events: per namespace, no listener or process named)"
        )?;
    }
    // One heading per namespace, its findings under it.
    let mut last = None;
    for n in counted {
        if last != Some(n.netns) {
            writeln!(w, "{}", b.netns_label(n.netns))?;
            last = Some(n.netns);
        }
        write_verdict_text(w, &n.verdict, &said_finding(n))?;
    }
    if !b.kernel_cache.is_empty() {
        writeln!(w, "\nFrom the kernel's TFO cache (ip tcp_metrics: no connection there in this window)")?;
    }
    for c in &b.kernel_cache {
        writeln!(w, "{} ({})", c.destination, b.netns_label(c.netns))?;
        writeln!(w, "  {}", cached_sentence(c))?;
    }
    Ok(())
}

pub(super) fn lost_line(d: &DestinationReport) -> String {
    let mut line = match (d.stalled, d.extra_round_trips) {
        (0, 0) => return "no time lost".into(),
        (0, _) => "no time lost to SYN timeouts".to_string(),
        _ => format!(
            "{} lost in total: {} per stalled connection ({}), {} per connection",
            units::duration_us(d.lost_us_total),
            units::duration_us(d.lost_us_per_stalled),
            d.stalled,
            units::duration_us(d.lost_us_per_connection)
        ),
    };
    if d.extra_round_trips > 0 {
        line.push_str(&format!("; {}", forgone_text(d.extra_round_trips, d.extra_round_trip_us)));
    }
    line
}

fn row_title(d: &DestinationReport, b: &Built) -> String {
    match (d.netns, d.destinations) {
        (Some(n), _) => format!("{} ({})", d.destination, b.netns_label(n)),
        (None, 1) => d.destination.clone(),
        (None, n) => format!("{} ({})", d.destination, units::plural(n, "destination", "destinations")),
    }
}

fn write_verdict_text<F>(w: &mut impl Write, v: &Verdict<F>, said: &Said) -> io::Result<()> {
    writeln!(w, "  verdict: {}", said.sentence)?;
    writeln!(w, "  evidence ({})", strength_line(v))?;
    for e in &said.evidence {
        writeln!(w, "    - {e}")?;
    }
    Ok(())
}
