//! `tfo-trace stalls`: only the connections that lost time to TFO, one line each, and a
//! summary by destination at exit. What on-call runs when a service reports 1 s p99s.
use std::{
    collections::BTreeMap,
    io::{self, Write},
    time::Duration,
};

use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::{
    events::{reader::EventSource, Event, Outcome, Role},
    probes::LoadOptions,
    views::trace,
};

pub struct StallsOptions {
    pub load: LoadOptions,
    pub json: bool,
    pub duration: Option<Duration>,
    /// `--record FILE`: every event (not only the stalls) also goes there.
    pub record: Option<std::path::PathBuf>,
}

/// Why a connection lost time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The SYN carrying data timed out (a middlebox dropping SYN-data, typically).
    SynDataDropped,
    /// The SYN asking for a cookie timed out.
    CookieRequestDropped,
    /// The SYN-ACK acknowledged only the SYN: the data went again after the handshake.
    DataNotAckedResent,
    /// The SYN-data got through but a SYN timed out anyway (SYN-ACK lost).
    SynTimeout,
}

impl Cause {
    pub fn name(self) -> &'static str {
        match self {
            Cause::SynDataDropped => "syn_data_dropped",
            Cause::CookieRequestDropped => "cookie_request_dropped",
            Cause::DataNotAckedResent => "data_not_acked_resent",
            Cause::SynTimeout => "syn_timeout",
        }
    }
}

/// The cause and the time lost, for a client event that lost time; None otherwise.
/// For data not acked the loss is the extra round trip the resent data takes, estimated
/// by the handshake time.
pub fn classify(e: &Event) -> Option<(Cause, u64)> {
    if e.role != Role::Client {
        return None;
    }
    match e.outcome {
        Outcome::SynRetransmitted if e.syn_data_bytes > 0 => Some((Cause::SynDataDropped, e.stall_us)),
        Outcome::SynRetransmitted => Some((Cause::CookieRequestDropped, e.stall_us)),
        Outcome::DataNotAcked => Some((Cause::DataNotAckedResent, e.handshake_us.unwrap_or(0))),
        _ if e.stall_us > 0 => Some((Cause::SynTimeout, e.stall_us)),
        _ => None,
    }
}

#[derive(Serialize)]
struct StallLine<'a> {
    ts: &'a str,
    pid: u32,
    comm: &'a str,
    saddr: String,
    daddr: String,
    netns: u32,
    cause: Cause,
    lost_us: u64,
    retransmits: u32,
}

#[derive(Default)]
struct PerDestination {
    stalls: u64,
    lost_us: u64,
    by_cause: BTreeMap<Cause, u64>,
}

fn write_line(out: &mut impl Write, e: &Event, cause: Cause, lost_us: u64, json: bool) -> io::Result<()> {
    if json {
        let line = StallLine {
            ts: &e.ts,
            pid: e.pid,
            comm: &e.comm,
            saddr: e.source(),
            daddr: e.destination(),
            netns: e.netns,
            cause,
            lost_us,
            retransmits: e.retransmits,
        };
        serde_json::to_writer(&mut *out, &line)?;
        writeln!(out)
    } else {
        writeln!(
            out,
            "{:<23} {:<7} {:<16} {:<24} {:<24} {:>9.3}s {:>3}",
            e.ts.get(..23).unwrap_or(&e.ts).replace('T', " "),
            e.pid,
            if e.comm.is_empty() { "-" } else { &e.comm },
            e.destination(),
            cause.name(),
            lost_us as f64 / 1e6,
            e.retransmits
        )
    }
}

fn write_summary(out: &mut impl Write, per_dst: &BTreeMap<String, PerDestination>) -> io::Result<()> {
    writeln!(out, "\n{:<28} {:>7} {:>11} {:>11}  CAUSES", "DESTINATION", "STALLS", "LOST", "PER_CONN")?;
    for (dst, d) in per_dst {
        let causes: Vec<String> = d.by_cause.iter().map(|(c, n)| format!("{}={n}", c.name())).collect();
        writeln!(
            out,
            "{dst:<28} {:>7} {:>10.3}s {:>10.3}s  {}",
            d.stalls,
            d.lost_us as f64 / 1e6,
            d.lost_us as f64 / 1e6 / d.stalls.max(1) as f64,
            causes.join(" ")
        )?;
    }
    out.flush()
}

pub async fn run(opts: StallsOptions) -> Result<()> {
    let mut tracer = trace::start(&opts.load)?;
    let mut recorder = trace::recorder(opts.record.as_deref(), &tracer)?;
    let mut source = EventSource::new(&mut tracer.ebpf)?;
    // One write per batch, not per line (stdout alone is line-buffered).
    let mut out = io::BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    if !opts.json {
        writeln!(
            out,
            "{:<23} {:<7} {:<16} {:<24} {:<24} {:>10} {:>3}",
            "TIME", "PID", "COMM", "DESTINATION", "CAUSE", "LOST", "RTX"
        )?;
    }
    let mut stop = crate::views::stop::Stop::new(opts.duration)?;
    let mut per_dst: BTreeMap<String, PerDestination> = BTreeMap::new();
    let mut batch = Vec::new();
    let mut done = false;
    while !done {
        tokio::select! {
            r = source.next_batch(&mut batch) => r?,
            _ = stop.requested() => done = true,
        }
        if done {
            source.drain(&mut batch);
        }
        trace::record(&mut recorder, &batch)?;
        for e in batch.drain(..) {
            let Some((cause, lost_us)) = classify(&e) else { continue };
            let d = per_dst.entry(e.destination()).or_default();
            d.stalls += 1;
            d.lost_us += lost_us;
            *d.by_cause.entry(cause).or_default() += 1;
            match write_line(&mut out, &e, cause, lost_us, opts.json) {
                Err(err) if err.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
                r => r.context("writing to stdout")?,
            }
        }
        out.flush().ok();
    }
    if !opts.json {
        write_summary(&mut out, &per_dst).context("writing to stdout")?;
    }
    let total: u64 = per_dst.values().map(|d| d.stalls).sum();
    eprintln!("tfo-trace: {total} stalled connections, {} events lost", source.lost());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::sample_event;
    use std::net::{IpAddr, Ipv4Addr};

    fn ev(outcome: Outcome, data: u32, stall_us: u64) -> Event {
        Event {
            ts: "2026-11-30T08:00:00.000000000Z".into(),
            sport: 1,
            daddr: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 3)),
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
    fn causes() {
        assert_eq!(
            classify(&ev(Outcome::SynRetransmitted, 64, 1_020_000)),
            Some((Cause::SynDataDropped, 1_020_000))
        );
        assert_eq!(
            classify(&ev(Outcome::SynRetransmitted, 0, 1_010_000)),
            Some((Cause::CookieRequestDropped, 1_010_000))
        );
        assert_eq!(classify(&ev(Outcome::DataNotAcked, 64, 0)), Some((Cause::DataNotAckedResent, 1_100)));
        assert_eq!(classify(&ev(Outcome::Accepted, 64, 1_000_000)), Some((Cause::SynTimeout, 1_000_000)));
        assert_eq!(classify(&ev(Outcome::Accepted, 64, 0)), None);
        let mut server = ev(Outcome::Accepted, 64, 0);
        server.role = Role::Server;
        assert_eq!(classify(&server), None);
    }
}
