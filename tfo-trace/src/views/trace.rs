//! `tfo-trace trace`: one line (or one JSON object) per TFO event, as it happens.
use std::{
    io::{self, Write},
    time::Duration,
};

use anyhow::{Context as _, Result};

use crate::{
    events::{
        reader::EventSource,
        record::{Header, Recorder},
        Event,
    },
    probes::{self, LoadOptions, Tracer},
};

pub struct TraceOptions {
    pub load: LoadOptions,
    pub json: bool,
    /// Stop by itself after this long (scripts, tests); None = until Ctrl-C.
    pub duration: Option<Duration>,
    /// `--record FILE`: every event also goes there (see `events::record`).
    pub record: Option<std::path::PathBuf>,
}

/// Opens the `--record` file, if any, with a header naming the backend that runs.
pub fn recorder(path: Option<&std::path::Path>, tracer: &Tracer) -> Result<Option<Recorder>> {
    path.map(|p| Recorder::create(p, &Header::now(tracer.backend.name()))).transpose()
}

/// Appends a batch to the recording, if one is being made.
pub fn record(recorder: &mut Option<Recorder>, events: &[Event]) -> Result<()> {
    match recorder {
        Some(r) if !events.is_empty() => r.write_batch(events),
        _ => Ok(()),
    }
}

/// Loads and attaches the programs after the privilege check, and says on stderr which
/// backend runs and why any richer one was passed over.
pub fn start(load: &LoadOptions) -> Result<Tracer> {
    if let Err(line) = crate::kernel::privileges::check_tracing_privileges() {
        anyhow::bail!(PrivilegeError(line));
    }
    let tracer = probes::load(load)?;
    if !tracer.skipped.is_empty() {
        let why: Vec<String> =
            tracer.skipped.iter().map(|s| format!("{}: {}", s.backend, s.reason)).collect();
        eprintln!("tfo-trace: using the {} backend ({})", tracer.backend, why.join("; "));
    }
    eprintln!(
        "tfo-trace: {} programs attached with the {} backend in {} ms; Ctrl-C to stop",
        probes::table::hooks(tracer.backend).len(),
        tracer.backend,
        tracer.attach_time.as_millis()
    );
    Ok(tracer)
}

/// Missing privileges: main prints the line alone, before any kernel error text.
#[derive(Debug)]
pub struct PrivilegeError(pub String);

impl std::fmt::Display for PrivilegeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PrivilegeError {}

pub const HEADER: &str = "TIME                     ROLE   OUTCOME            PID     COMM             SOURCE                 DESTINATION            NETNS       DATA RTX HANDSHAKE     STALL";

fn millis(us: u64) -> String {
    format!("{:.1}ms", us as f64 / 1000.0)
}

pub fn text_line(e: &Event) -> String {
    let time = e.ts.get(..23).unwrap_or(&e.ts).replace('T', " ");
    format!(
        "{time:<24} {:<6} {:<18} {:<7} {:<16} {:<22} {:<22} {:<11} {:>4} {:>3} {:>9} {:>9}",
        e.role.name(),
        e.outcome.name(),
        e.pid,
        if e.comm.is_empty() { "-" } else { &e.comm },
        e.source(),
        e.destination(),
        e.netns,
        e.syn_data_bytes,
        e.retransmits,
        e.handshake_us.map(millis).unwrap_or_else(|| "-".into()),
        millis(e.stall_us),
    )
}

pub fn write_events(out: &mut impl Write, events: &[Event], json: bool) -> io::Result<()> {
    for e in events {
        if json {
            serde_json::to_writer(&mut *out, e)?;
            out.write_all(b"\n")?;
        } else {
            writeln!(out, "{}", text_line(e))?;
        }
    }
    out.flush()
}

pub async fn run(opts: TraceOptions) -> Result<()> {
    let mut tracer = start(&opts.load)?;
    let mut recorder = recorder(opts.record.as_deref(), &tracer)?;
    let mut source = EventSource::new(&mut tracer.ebpf)?;
    // One write per batch, not per line (stdout alone is line-buffered: a syscall per event).
    let mut stdout = io::BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    if !opts.json {
        writeln!(stdout, "{HEADER}").context("writing to stdout")?;
    }
    let mut stop = crate::views::stop::Stop::new(opts.duration)?;
    let mut batch = Vec::new();
    let mut seen = 0u64;
    loop {
        tokio::select! {
            r = source.next_batch(&mut batch) => r?,
            _ = stop.requested() => break,
        }
        seen += batch.len() as u64;
        record(&mut recorder, &batch)?;
        match write_events(&mut stdout, &batch, opts.json) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            r => r.context("writing to stdout")?,
        }
        batch.clear();
    }
    // What the kernel already wrote is still delivered after Ctrl-C.
    source.drain(&mut batch);
    seen += batch.len() as u64;
    record(&mut recorder, &batch)?;
    if let Err(e) = write_events(&mut stdout, &batch, opts.json) {
        if e.kind() != io::ErrorKind::BrokenPipe {
            return Err(e).context("writing to stdout");
        }
    }
    eprintln!(
        "{}{}",
        closing_line(seen, &source, &tracer),
        recorder.map(|r| format!(", recorded to {}", r.path().display())).unwrap_or_default()
    );
    Ok(())
}

/// What a live view says when it stops: events delivered, and every way one could have
/// gone missing: lost in a full ring buffer (the kernel still counted those), skipped by
/// the kernel (a hook hit again while running), not decodable.
pub fn closing_line(seen: u64, source: &EventSource, tracer: &Tracer) -> String {
    let mut line = format!("tfo-trace: {seen} events, {} lost", source.lost());
    if let Ok(counts) = source.kernel_counts() {
        let counted: u64 = counts.iter().map(|(_, _, _, c)| c.events).sum();
        line.push_str(&format!(" ({counted} outcomes counted in the kernel)"));
    }
    let missed = tracer.run_stats().missed;
    if missed > 0 {
        line.push_str(&format!(", {missed} hook runs missed by the kernel (recursion)"));
    }
    if source.malformed > 0 {
        line.push_str(&format!(", {} malformed", source.malformed));
    }
    line
}
