//! `report --format markdown`: the same report as tables, for an issue or a wiki.
use std::io::{self, Write};

use super::{
    lines::{names_line, outcomes_line, rest_line, source_line, strength_line, summary_lines},
    source::Rendered,
    verdict::{cached_sentence, said_client, said_finding, said_listener, Said},
};
use crate::{
    aggregation::report::verdict::{DestinationReport, NamespaceFinding},
    units,
};

pub(super) fn write(w: &mut impl Write, r: &Rendered) -> io::Result<()> {
    let b = r.built;
    writeln!(w, "# tfo-trace report\n\n{}.", md(&source_line(r.source, r.sources)))?;
    writeln!(w, "\n## Summary\n")?;
    for l in summary_lines(r) {
        writeln!(w, "- {}", md(&l))?;
    }
    let rows: Vec<DestinationReport> = b.rows().collect();
    let said: Vec<Said> = rows.iter().map(said_client).collect();
    if !rows.is_empty() {
        let title = b.summary.group_by.rows();
        writeln!(w, "\n## {}{} by time lost\n", title[..1].to_uppercase(), &title[1..])?;
        writeln!(w, "| Destination | Netns | Connections | Accepted | SYN-data dropped | Not acked | Time lost | Per stalled connection | Saved | Net | Verdict | Evidence |")?;
        writeln!(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")?;
        for (d, said) in rows.iter().zip(&said) {
            writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                md(&match names_line(d) {
                    Some(names) => format!("{} ({names})", d.destination),
                    None => d.destination.clone(),
                }),
                md(&d.netns.map_or_else(|| "-".into(), |n| b.netns_name(n))),
                d.connections,
                d.accepted,
                d.syn_data_dropped,
                d.data_not_acked,
                lost_cell(d.lost_us_total),
                if d.stalled == 0 { "-".to_string() } else { units::duration_us(d.lost_us_per_stalled) },
                if d.saved_measured == 0 { "-".to_string() } else { units::duration_us(d.saved_us_total) },
                // Nothing accepted: nothing to save, what was lost is the net.
                if d.saved_measured == 0 && d.accepted > 0 {
                    "-".to_string()
                } else {
                    units::net_us(d.net_us)
                },
                md(&said.sentence),
                md(&strength_line(&d.verdict))
            )?;
        }
        if let Some(rest) = &b.rest {
            writeln!(w, "\n{}", md(&rest_line(rest, title)))?;
        }
        for (d, said) in rows.iter().zip(&said).filter(|(_, s)| !s.evidence.is_empty()) {
            writeln!(w, "\n**{}**: {}\n", md(&d.destination), md(&said.sentence))?;
            for e in &said.evidence {
                writeln!(w, "- {}", md(e))?;
            }
        }
    }
    if !b.listeners.is_empty() {
        writeln!(w, "\n## Listeners\n")?;
        writeln!(w, "| Listener | Netns | Outcomes | max_qlen | Verdict | Evidence |")?;
        writeln!(w, "|---|---|---|---:|---|---|")?;
        for l in &b.listeners {
            writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} |",
                md(&l.listener),
                md(&l.netns.map_or_else(|| "-".into(), |n| b.netns_name(n))),
                md(&outcomes_line(&l.outcomes)),
                opt(l.max_qlen),
                md(&said_listener(l).sentence),
                md(&strength_line(&l.verdict))
            )?;
        }
    }
    let (paused, counted): (Vec<&NamespaceFinding>, Vec<&NamespaceFinding>) =
        b.namespaces.iter().partition(|n| n.pause.is_some());
    for (title, findings) in [
        ("Active TFO paused (blackhole detection, per client namespace)", paused),
        ("From the kernel's counters (per namespace, no listener or process named)", counted),
    ] {
        if !findings.is_empty() {
            writeln!(w, "\n## {title}\n")?;
        }
        for n in findings {
            let said = said_finding(n);
            writeln!(w, "- {}: {}", md(&b.netns_label(n.netns)), md(&said.sentence))?;
            for e in &said.evidence {
                writeln!(w, "  - {}", md(e))?;
            }
        }
    }
    if !b.kernel_cache.is_empty() {
        writeln!(w, "\n## From the kernel's TFO cache (ip tcp_metrics)\n")?;
        for c in &b.kernel_cache {
            writeln!(
                w,
                "- {} ({}): {}",
                md(&c.destination),
                md(&b.netns_label(c.netns)),
                md(&cached_sentence(c))
            )?;
        }
    }
    Ok(())
}

/// Time lost in a table cell, in the words the text report uses for none.
fn lost_cell(us: u64) -> String {
    if us == 0 {
        "no time lost".into()
    } else {
        units::duration_us(us)
    }
}

/// `|` would end a table cell.
fn md(s: &str) -> String {
    s.replace('|', "\\|")
}

fn opt(n: Option<u32>) -> String {
    n.map(|n| n.to_string()).unwrap_or_else(|| "-".into())
}
