//! `tfo-trace stalls`: only the connections that stalled (lost time to a SYN timeout, as
//! `aggregation::stall` defines it), one line each with the cause, and a summary by
//! destination at exit. What on-call runs when a service reports 1 s p99s.
use std::{
    collections::BTreeMap,
    io::{self, Write},
    net::SocketAddr,
    ops::ControlFlow,
    sync::Arc,
};

use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::{
    aggregation::{
        blackhole::Pauses,
        stall::{self, Cause, StallTally},
    },
    cli::LinesOptions,
    events::Event,
    live::{
        paused::{self, Paused},
        session::Session,
    },
    units,
};

/// One stalled connection in JSON: its event as `trace --json` prints it (one schema for
/// an event everywhere; its time lost is `stall_us`), and the cause.
#[derive(Serialize)]
struct StallLine<'a> {
    #[serde(flatten)]
    event: &'a Event,
    cause: Cause,
}

fn write_line(out: &mut impl Write, e: &Event, cause: Cause, lost_us: u64, json: bool) -> io::Result<()> {
    if json {
        let line = StallLine { event: e, cause };
        serde_json::to_writer(&mut *out, &line)?;
        writeln!(out)
    } else {
        writeln!(
            out,
            "{:<23} {:<7} {:<16} {:<24} {:<24} {:>10} {:>3}  {}",
            e.ts.millis(),
            e.pid,
            units::process(&e.comm, e.thread.as_deref()),
            units::destination(e.daddr, e.dport, e.dname.as_deref()),
            cause.name(),
            units::duration_us(lost_us),
            e.retransmits,
            e.container_label().unwrap_or("-")
        )
    }
}

/// What the summary keeps of one destination (by address): its tallies, and the name its
/// connections last came with (`--names`; most recent known wins, as in `top`).
#[derive(Default)]
struct PerDestination {
    name: Option<Arc<str>>,
    tally: StallTally,
}

/// The summary's destinations, by address.
type PerDestinations = BTreeMap<SocketAddr, PerDestination>;

/// Counts `e` in its destination's tallies.
fn count(per_dst: &mut PerDestinations, e: &Event) {
    let d = per_dst.entry(SocketAddr::new(e.daddr, e.dport)).or_default();
    if e.dname.is_some() {
        d.name.clone_from(&e.dname);
    }
    d.tally.add(e);
}

/// The summary's DESTINATION column: as wide as its widest destination from 28 up to 48
/// characters (every address fits); a name that would make it wider is cut.
const SUMMARY_WIDTH: (usize, usize) = (28, 48);

fn write_summary(out: &mut impl Write, per_dst: &PerDestinations) -> io::Result<()> {
    let stalled: Vec<(String, &StallTally)> = per_dst
        .iter()
        .filter(|(_, d)| d.tally.stalls.count() > 0)
        .map(|(a, d)| {
            (units::destination_within(a.ip(), a.port(), d.name.as_deref(), SUMMARY_WIDTH.1), &d.tally)
        })
        .collect();
    let width = stalled.iter().map(|(dst, _)| units::width(dst)).fold(SUMMARY_WIDTH.0, usize::max);
    // No table at all without a stall (the closing line says 0).
    if !stalled.is_empty() {
        writeln!(
            out,
            "\n{:<width$} {:>7} {:>11} {:>11} {:>11} {:>11}  CAUSES",
            "DESTINATION", "STALLS", "LOST", "PER_CONN", "SAVED", "NET"
        )?;
    } else if per_dst.values().any(|d| d.tally.extra_round_trips > 0) {
        writeln!(out)?;
    }
    for (dst, d) in stalled {
        let s = &d.stalls;
        let causes: Vec<String> = s.causes().map(|c| format!("{}={}", c.name(), s.count_of(c))).collect();
        writeln!(
            out,
            "{} {:>7} {:>11} {:>11} {:>11} {:>11}  {}",
            units::pad(&dst, width, units::Align::Left),
            s.count(),
            units::duration_us(s.lost_us()),
            units::duration_us(s.lost_us() / s.count().max(1)),
            units::duration_us(d.saved_us),
            units::net_us(stall::net_us(d.saved_us, s.lost_us())),
            causes.join(" ")
        )?;
    }
    // Refused SYN-data is no stall and no time lost against plain TCP (the kernel resends the
    // data at once on the SYN-ACK): the round trip a working TFO saves, forgone; said apart.
    for (a, d) in per_dst.iter().filter(|(_, d)| d.tally.extra_round_trips > 0) {
        let (dst, d) = (units::destination(a.ip(), a.port(), d.name.as_deref()), &d.tally);
        let causes: Vec<String> = crate::events::Cause::ALL
            .iter()
            .filter(|c| d.refused_by_cause[**c as usize] > 0)
            .map(|c| format!("{}={}", c.name(), d.refused_by_cause[*c as usize]))
            .collect();
        writeln!(
            out,
            "{dst}: {} not acknowledged, not stalls: the kernel resent the data at once on the SYN-ACK, \
             no slower than without TFO; gain forgone ~{} (the round trip a working TFO saves each); \
             why: {} (`tfo-trace report` has the verdict)",
            units::plural(d.extra_round_trips, "SYN-data", "SYN-data"),
            units::duration_us(d.extra_round_trip_us),
            if causes.is_empty() { "unknown".to_string() } else { causes.join(" ") }
        )?;
    }
    out.flush()
}

/// Blackhole detection's pauses, after the destinations: the connections they left
/// without TFO are no stalls, but they are what one lost destination cost the others.
fn write_paused(out: &mut impl Write, paused: &[Paused]) -> io::Result<()> {
    for p in paused {
        writeln!(out, "\n{}", p.sentence)?;
    }
    out.flush()
}

/// What `stalls` prints and keeps, live or replayed: a line per stalled connection as it
/// comes, and what the summary at the end is made of.
struct Stalls<W: Write> {
    out: W,
    json: bool,
    per_dst: PerDestinations,
    pauses: Pauses,
}

impl<W: Write> Stalls<W> {
    /// The view, its header printed (text).
    fn start(mut out: W, json: bool) -> Result<Self> {
        if !json {
            crate::live::output::stdout_written(writeln!(
                out,
                "{:<23} {:<7} {:<16} {:<24} {:<24} {:>10} {:>3}  CONTAINER",
                "TIME", "PID", "COMM", "DESTINATION", "CAUSE", "LOST", "RTX"
            ))?;
        }
        Ok(Stalls { out, json, per_dst: PerDestinations::new(), pauses: Pauses::default() })
    }

    /// One event: counted for the summary, and its line if it stalled. Break once stdout
    /// is closed (`| head`).
    fn add(&mut self, e: &Event) -> Result<ControlFlow<()>> {
        self.pauses.add(&e.view());
        let (stall, extra) = (stall::of(e), stall::extra_round_trip_us(e));
        // What the same destinations saved, for the summary's balance.
        if stall.is_some() || extra.is_some() || stall::saved_us(e).is_some() {
            count(&mut self.per_dst, e);
        }
        let Some(stall) = stall else { return Ok(ControlFlow::Continue(())) };
        match write_line(&mut self.out, e, stall.cause, stall.lost_us, self.json) {
            Err(err) if err.kind() == io::ErrorKind::BrokenPipe => Ok(ControlFlow::Break(())),
            r => r.context("writing to stdout").map(ControlFlow::Continue),
        }
    }

    /// Flushes the lines so far (a batch's); Break once stdout is closed.
    fn flush(&mut self) -> ControlFlow<()> {
        match self.out.flush() {
            Err(err) if err.kind() == io::ErrorKind::BrokenPipe => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        }
    }

    /// The summary by destination and the pauses (text), with what the namespaces' own
    /// counters counted (`counted`; nothing for a replay).
    fn summary(&mut self, counted: &crate::aggregation::kernel_counted::KernelCounted) -> Result<()> {
        if self.json {
            return Ok(());
        }
        let paused = paused::said(&self.pauses, counted);
        crate::live::output::stdout_written(
            write_summary(&mut self.out, &self.per_dst).and_then(|_| write_paused(&mut self.out, &paused)),
        )
    }

    fn stalled(&self) -> u64 {
        self.per_dst.values().map(|d| d.tally.stalls.count()).sum()
    }
}

pub async fn run(opts: LinesOptions) -> Result<()> {
    // One write per batch, not per line (stdout alone is line-buffered).
    let out = io::BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    let LinesOptions { live, json, from } = opts;
    if let Some(from) = from {
        let mut view = Stalls::start(out, json)?;
        let replayed =
            crate::events::replay::replay_each(&from.paths, &from.filter, from.window, |e| view.add(e))?;
        if view.flush().is_break() {
            return Ok(());
        }
        view.summary(&Default::default())?;
        crate::note!(
            "tfo-trace: {}",
            crate::units::plural(view.stalled(), "stalled connection", "stalled connections")
        )?;
        return super::replayed::said(&from, &replayed);
    }
    let mut session = Session::start(&live.load, live.record.as_ref())?;
    let mut view = Stalls::start(out, json)?;
    let mut pipe_closed = false;
    session
        .run(live.duration, |batch| {
            for e in batch.iter() {
                if view.add(e)?.is_break() {
                    pipe_closed = true;
                    return Ok(ControlFlow::Break(()));
                }
            }
            pipe_closed = view.flush().is_break();
            Ok(if pipe_closed { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
        })
        .await?;
    if pipe_closed {
        return Ok(());
    }
    view.summary(&session.kernel_counted())?;
    let mut closing = session.closing();
    closing.stalled = Some(view.stalled());
    closing.say(live.json_summary, "tfo-trace", "")?;
    closing.recording_kept()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{sample_event, Outcome, Role, Timestamp};
    use std::net::{IpAddr, Ipv4Addr};

    fn ev(outcome: Outcome, host: u8, data: u32, stall_us: u64) -> Event {
        Event {
            ts: Timestamp::parse("2026-11-30T08:00:00.000000000Z").unwrap(),
            sport: 1,
            daddr: IpAddr::V4(Ipv4Addr::new(198, 18, 0, host)),
            dport: 443,
            pid: 7,
            comm: "curl".into(),
            syn_data_bytes: data,
            retransmits: u32::from(stall_us > 0),
            handshake_us: Some(1_100),
            stall_us,
            ..sample_event(Role::Client, outcome)
        }
    }

    #[test]
    fn no_stall_no_summary_table() {
        let mut per_dst = PerDestinations::new();
        count(&mut per_dst, &ev(Outcome::Accepted, 2, 64, 0));
        let mut out = Vec::new();
        write_summary(&mut out, &per_dst).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "", "no header over no rows");
    }

    #[test]
    fn lines_and_summary_show_stalls_and_keep_forgone_round_trips_apart() {
        let events = [
            ev(Outcome::SynRetransmitted, 3, 64, 1_020_000),
            ev(Outcome::SynRetransmitted, 3, 0, 1_010_000),
            Event { saved_us: Some(30_000), ..ev(Outcome::Accepted, 3, 64, 0) },
            ev(Outcome::Accepted, 2, 64, 0),
            ev(Outcome::DataNotAcked, 2, 64, 0),
        ];
        let mut per_dst = PerDestinations::new();
        let mut out = Vec::new();
        for e in &events {
            count(&mut per_dst, e);
            if let Some(s) = stall::of(e) {
                write_line(&mut out, e, s.cause, s.lost_us, true).unwrap();
            }
        }
        let lines: Vec<serde_json::Value> =
            String::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2, "one line per stall: {lines:?}");
        assert_eq!(lines[0]["cause"], "syn_data_dropped");
        assert_eq!(lines[0]["stall_us"], 1_020_000);
        assert_eq!(lines[1]["cause"], "cookie_request_dropped");
        // One schema for an event everywhere (issue 31, item 12): `trace --json`'s object,
        // plus the cause.
        for (line, e) in lines.iter().zip([&events[0], &events[1]]) {
            let mut line = line.clone();
            line.as_object_mut().unwrap().remove("cause");
            assert_eq!(line, serde_json::to_value(e).unwrap());
        }

        let mut out = Vec::new();
        write_summary(&mut out, &per_dst).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
        assert!(rows[0].starts_with("DESTINATION"), "{text}");
        assert!(
            rows[1].starts_with("198.18.0.3:443") && rows[1].contains("2       2.03s       1.02s"),
            "{text}"
        );
        assert!(rows[1].ends_with("syn_data_dropped=1 cookie_request_dropped=1"), "{text}");
        // What the same destination saved beside it (issue 30), and the balance.
        assert!(rows[1].contains("1.02s        30ms         -2s"), "{text}");
        assert_eq!(rows.len(), 3, "{text}");
        assert!(
            rows[2].starts_with("198.18.0.2:443: 1 SYN-data not acknowledged, not stalls:")
                && rows[2].contains("no slower than without TFO; gain forgone ~1.1ms"),
            "{text}"
        );
    }

    /// `--names`: each line names its destination whole; the summary keeps one row per
    /// address, named by the last name its connections came with, cut to its column if it
    /// must be (never the address).
    #[test]
    fn named_destinations_in_lines_and_summary() {
        let named = |host, name: Option<&str>| Event {
            dname: name.map(Into::into),
            ..ev(Outcome::SynRetransmitted, host, 64, 1_020_000)
        };
        let long = format!("{}.example.com", "x".repeat(60));
        let v6 = Event { daddr: "fd00:7f0::3".parse().unwrap(), ..named(0, Some("v6.example")) };
        let events = [
            named(3, None),
            named(3, Some("old.example")),
            named(3, Some("api.example")),
            named(3, None),
            named(4, Some(&long)),
            v6,
        ];
        let mut per_dst = PerDestinations::new();
        let mut out = Vec::new();
        for e in &events {
            count(&mut per_dst, e);
            let s = stall::of(e).unwrap();
            write_line(&mut out, e, s.cause, s.lost_us, false).unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "2026-11-30 08:00:00.000 7       curl             198.18.0.3:443           syn_data_dropped              1.02s   1  -"
        );
        assert_eq!(
            lines[2],
            "2026-11-30 08:00:00.000 7       curl             api.example (198.18.0.3:443) syn_data_dropped              1.02s   1  -"
        );
        assert!(lines[4].contains(&format!(" {long} (198.18.0.4:443) syn_data_dropped ")), "whole: {text}");
        assert!(lines[5].contains(" v6.example ([fd00:7f0::3]:443) "), "{text}");
        // JSON: the event's `dname`, as `trace --json` has it.
        let mut json = Vec::new();
        let s = stall::of(&events[2]).unwrap();
        write_line(&mut json, &events[2], s.cause, s.lost_us, true).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            (&v["dname"], &v["daddr"]),
            (&serde_json::json!("api.example"), &serde_json::json!("198.18.0.3"))
        );

        let mut out = Vec::new();
        write_summary(&mut out, &per_dst).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(rows.len(), 4, "one row per address: {text}");
        // The column is as wide as the widest (cut) destination: 48.
        assert!(rows[0].starts_with(&format!("{:<48} ", "DESTINATION")), "{text}");
        assert!(rows[1].starts_with(&format!("{:<48} ", "api.example (198.18.0.3:443)")), "{text}");
        assert!(rows[1].contains("      4       4.08s"), "{text}");
        let cut = format!("{}~ (198.18.0.4:443)", "x".repeat(30));
        assert_eq!(cut.len(), 48);
        assert!(rows[2].starts_with(&format!("{cut} ")), "{text}");
        assert!(rows[3].starts_with(&format!("{:<48} ", "v6.example ([fd00:7f0::3]:443)")), "{text}");
    }
}
