//! `tfo-trace demo`: the built-in lab, traced. Two destinations on one TFO server
//! namespace, one clean and one behind a middlebox that drops SYNs carrying data, and
//! clients in a second namespace: a newcomer sees accepted connections and one-second
//! stalls within seconds, then a per-destination summary.
use std::{
    io::{self, Write},
    net::SocketAddr,
    time::Duration,
};

use anyhow::{Context as _, Result};

use crate::{
    aggregation,
    cli::DemoArgs,
    events::{reader::EventSource, Event, Outcome, Role},
    lab::{
        traffic::{ClientArgs, ClientMode},
        ClientChild, Lab, LabConfig,
    },
    probes::LoadOptions,
    views::trace,
};

const PORT: u16 = 8080;

/// Clients that stop by themselves within `duration`: a paced stream to the clean
/// destination (both ways of asking for TFO) and back-to-back connections to the one
/// behind the middlebox, each of which pays the 1 s SYN timeout.
fn start_traffic(lab: &Lab, exe: &std::path::Path, duration: Duration) -> Result<Vec<ClientChild>> {
    let secs = duration.as_secs().max(2) as u32;
    let clean = SocketAddr::new(lab.server_addr(0, false)?, PORT);
    let dropped = SocketAddr::new(lab.server_addr(1, false)?, PORT);
    let clean_v6 = SocketAddr::new(lab.server_addr(0, true)?, PORT);
    let specs = [
        ClientArgs { count: secs * 2, interval_ms: 500, ..ClientArgs::new(clean) },
        ClientArgs {
            count: secs,
            interval_ms: 1000,
            mode: ClientMode::FastopenConnect,
            ..ClientArgs::new(clean_v6)
        },
        // Each of these takes about a second: the SYN-data is dropped, the SYN resent.
        ClientArgs { count: secs.saturating_sub(1).max(1), interval_ms: 0, ..ClientArgs::new(dropped) },
    ];
    specs.iter().map(|s| lab.spawn_client(exe, s)).collect()
}

fn summary(out: &mut impl Write, events: &[Event]) -> io::Result<()> {
    let by_dst = aggregation::by_destination(events);
    writeln!(out)?;
    writeln!(
        out,
        "{:<28} {:>8} {:>8} {:>9} {:>9} {:>7} {:>10}",
        "DESTINATION", "CONNS", "COOKIE", "ACCEPTED", "NOT_ACKED", "STALLS", "TIME_LOST"
    )?;
    for (dst, t) in &by_dst.groups {
        writeln!(
            out,
            "{:<28} {:>8} {:>8} {:>9} {:>9} {:>7} {:>9.2}s",
            dst,
            t.total(),
            t.count(Role::Client, Outcome::CookieRequested),
            t.count(Role::Client, Outcome::Accepted),
            t.count(Role::Client, Outcome::DataNotAcked),
            t.count(Role::Client, Outcome::SynRetransmitted),
            t.stall_us_total as f64 / 1e6,
        )?;
    }
    let servers = events.iter().filter(|e| e.role == Role::Server).count();
    writeln!(out, "server side: {servers} TFO children accepted")?;
    out.flush()
}

pub async fn run(args: DemoArgs) -> Result<()> {
    let exe = std::env::current_exe().context("locating the tfo-trace executable")?;
    let load = LoadOptions { backend: args.probe.backend, ring_buffer_bytes: args.probe.ring_buffer_size };
    // Privileges are checked (one clear line) before anything is created.
    let mut tracer = trace::start(&load)?;
    let mut source = EventSource::new(&mut tracer.ebpf)?;

    eprintln!("tfo-trace demo: building the lab (2 namespaces, 2 destinations, 1 middlebox)");
    let lab = Lab::create(LabConfig { server_addrs: 2, ..LabConfig::default() })?;
    let _servers = (0..2)
        .flat_map(|i| [(i, false), (i, true)])
        .map(|(i, v6)| lab.start_server(&exe, i, PORT, 16, v6))
        .collect::<Result<Vec<_>>>()?;
    let dropped = lab.server_addr(1, false)?;
    lab.middlebox_drop_syn_data(Some(dropped))?;
    eprintln!(
        "tfo-trace demo: server {} is clean, {} sits behind a middlebox dropping SYN-data; \
         tracing for {:?} (Ctrl-C stops early)",
        lab.server_addr(0, false)?,
        dropped,
        args.duration
    );
    let clients = start_traffic(&lab, &exe, args.duration)?;

    let mut stdout = io::stdout().lock();
    if !args.json {
        writeln!(stdout, "{}", trace::HEADER)?;
    }
    // Two seconds past the traffic, so the last stalled connections are seen.
    let mut stop = crate::views::stop::Stop::new(Some(args.duration + Duration::from_secs(2)))?;
    let mut all = Vec::new();
    let mut batch = Vec::new();
    loop {
        tokio::select! {
            r = source.next_batch(&mut batch) => r?,
            _ = stop.requested() => break,
        }
        trace::write_events(&mut stdout, &batch, args.json)?;
        all.append(&mut batch);
    }
    for c in clients {
        c.kill();
    }
    source.drain(&mut batch);
    trace::write_events(&mut stdout, &batch, args.json)?;
    all.append(&mut batch);
    if !args.json {
        summary(&mut stdout, &all)?;
    }
    eprintln!("tfo-trace demo: {} events, {} lost; lab removed", all.len(), source.lost());
    drop(lab);
    Ok(())
}
