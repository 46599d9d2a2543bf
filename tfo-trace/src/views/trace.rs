//! `tfo-trace trace`: one line (or one JSON object) per TFO event, as it happens.
use std::{
    io::{self, Write},
    ops::ControlFlow,
    time::Duration,
};

use anyhow::{Context as _, Result};

use crate::{events::Event, probes::LoadOptions, views::session::Session};

pub struct TraceOptions {
    pub load: LoadOptions,
    pub json: bool,
    /// Stop by itself after this long (scripts, tests); None = until Ctrl-C.
    pub duration: Option<Duration>,
    /// `--record FILE`: every event also goes there (see `events::record`).
    pub record: Option<std::path::PathBuf>,
}

pub const HEADER: &str = "TIME                     ROLE   OUTCOME            PID     COMM             SOURCE                 DESTINATION            NETNS       DATA RTX HANDSHAKE     STALL  CONTAINER";

fn millis(us: u64) -> String {
    format!("{:.1}ms", us as f64 / 1000.0)
}

pub fn text_line(e: &Event) -> String {
    let time = e.ts.get(..23).unwrap_or(&e.ts).replace('T', " ");
    format!(
        "{time:<24} {:<6} {:<18} {:<7} {:<16} {:<22} {:<22} {:<11} {:>4} {:>3} {:>9} {:>9}  {}",
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
        e.container_name().unwrap_or_else(|| "-".into()),
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
    let mut session = Session::start(&opts.load, opts.record.as_deref())?;
    // One write per batch, not per line (stdout alone is line-buffered: a syscall per event).
    let mut stdout = io::BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    if !opts.json {
        writeln!(stdout, "{HEADER}").context("writing to stdout")?;
    }
    session
        .run(opts.duration, |batch| match write_events(&mut stdout, batch, opts.json) {
            // A reader that went away (`| head`) ends the trace, quietly.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(ControlFlow::Break(())),
            r => r.context("writing to stdout").map(ControlFlow::Continue),
        })
        .await?;
    eprintln!("{}", session.closing_line());
    Ok(())
}
