//! `tfo-trace demo`: the built-in lab, traced. Two destinations on one TFO server
//! namespace, one clean and one behind a middlebox that drops SYNs carrying data, and
//! clients in a second namespace, all shown by `top`: a newcomer sees accepted
//! connections and one-second stalls within seconds. With dnsmasq installed, the clients
//! look their servers up by name first and `--names` (always on here) names each row.
use std::{
    io::{self, IsTerminal},
    net::SocketAddr,
    time::Duration,
};

use anyhow::{Context as _, Result};

use crate::{
    aggregation::top::DEFAULT_CAPACITY,
    cli::{DemoOptions, LiveOptions, Sort, TopOptions},
    lab::{
        traffic::{ClientArgs, ClientMode},
        ClientChild, Lab, LabConfig,
    },
    live::session::Session,
    views::top::{self, HeaderInfo},
};

const PORT: u16 = 8080;

/// Clients that stop by themselves within `duration`: a paced stream to the clean
/// destination (both ways of asking for TFO) and back-to-back connections to the one
/// behind the middlebox, each of which pays the 1 s SYN timeout.
/// With a DNS server (`dns`), each client first looks its destination up by name through
/// libc, as an application would: `--names` then names every row.
fn start_traffic(
    lab: &Lab,
    exe: &std::path::Path,
    duration: Duration,
    dns: bool,
) -> Result<Vec<ClientChild>> {
    let secs = duration.as_secs().max(2) as u32;
    let clean = SocketAddr::new(lab.server_addr(0, false)?, PORT);
    let dropped = SocketAddr::new(lab.server_addr(1, false)?, PORT);
    let clean_v6 = SocketAddr::new(lab.server_addr(0, true)?, PORT);
    let named = |name: &str| dns.then(|| name.to_string());
    let specs = [
        ClientArgs { count: secs * 2, interval_ms: 500, resolve: named(API), ..ClientArgs::new(clean) },
        ClientArgs {
            count: secs,
            interval_ms: 1000,
            mode: ClientMode::FastopenConnect,
            resolve: named(API),
            ..ClientArgs::new(clean_v6)
        },
        // Each of these takes about a second: the SYN-data is dropped, the SYN resent.
        ClientArgs {
            count: secs.saturating_sub(1).max(1),
            interval_ms: 0,
            resolve: named(EDGE),
            ..ClientArgs::new(dropped)
        },
    ];
    specs.iter().map(|s| lab.spawn_client(exe, s)).collect()
}

/// The demo's names: the clean server, and the address behind the middlebox.
const API: &str = "api.lab.test";
const EDGE: &str = "edge.lab.test";

/// The lab's DNS server, when dnsmasq is installed (without it the demo runs unnamed).
fn start_dns(lab: &Lab) -> Result<Option<crate::lab::dns::DnsServer>> {
    if let Some(why) = crate::lab::dns::cannot_serve() {
        crate::note!("tfo-trace demo: {why}: destinations go unnamed")?;
        return Ok(None);
    }
    let ttl = 60;
    let zone = crate::lab::dns::Zone {
        addresses: vec![
            (API.into(), lab.server_addr(0, false)?, ttl),
            (API.into(), lab.server_addr(0, true)?, ttl),
            (EDGE.into(), lab.server_addr(1, false)?, ttl),
        ],
        cnames: Vec::new(),
    };
    lab.start_dns(&zone).map(Some)
}

pub async fn run(demo: DemoOptions) -> Result<()> {
    let exe = std::env::current_exe().context("locating the tfo-trace executable")?;
    let load = demo.load;
    // Privileges are checked (one clear line) before anything is created.
    let mut session = Session::start(&load, None)?;
    // Ctrl-C, SIGTERM and SIGHUP from here on are the demo's to handle: the lab it builds
    // next (namespaces, servers, nft rules, dnsmasq and its files) must go with it. Without
    // this, a signal before top took over ended the process at once and left them behind.
    let mut stop = session.take_stop(None)?;

    crate::note!("tfo-trace demo: building the lab (2 namespaces, 2 destinations, 1 middlebox)")?;
    let lab = Lab::create(LabConfig { server_addrs: 2, ..LabConfig::default() })?;
    let _servers = (0..2)
        .flat_map(|i| [(i, false), (i, true)])
        .map(|(i, v6)| lab.start_server(&exe, i, PORT, 16, v6))
        .collect::<Result<Vec<_>>>()?;
    let dropped = lab.server_addr(1, false)?;
    lab.middlebox_drop_syn_data(Some(dropped))?;
    let dns = start_dns(&lab)?;
    session.watch_new_namespaces();
    crate::note!(
        "tfo-trace demo: server {} is clean, {} sits behind a middlebox dropping SYN-data; \
         tracing for {} (Ctrl-C stops early)",
        lab.server_addr(0, false)?,
        dropped,
        crate::units::period(demo.duration)
    )?;
    let clients = start_traffic(&lab, &exe, demo.duration, dns.is_some())?;

    // `top` shows the lab: the live UI on a terminal, table snapshots otherwise. It stops
    // two seconds after the traffic, so the last stalled connections are in.
    let tty = io::stdout().is_terminal() && !demo.json;
    let interval = if tty { Duration::from_secs(1) } else { Duration::from_secs(5) };
    let opts = TopOptions {
        live: LiveOptions {
            load,
            duration: None, // `stop`'s deadline
            json_summary: demo.json_summary,
            record: None,
        },
        interval,
        count: None,
        batch: false,
        json: demo.json,
        sort: Sort::Stalls,
        filter: String::new(),
        max_groups: DEFAULT_CAPACITY,
        from: None,
    };
    let info = HeaderInfo::new(session.tracer.backend.to_string(), interval, &[]);
    stop.stop_after(demo.duration + Duration::from_secs(2));
    top::run_on(&mut session, &opts, info, &mut stop).await?;
    for c in clients {
        c.kill();
    }
    // Read before the lab's namespaces go: their counters are the last word on them.
    let closing = session.closing();
    drop(dns);
    drop(lab);
    closing.say(demo.json_summary, "tfo-trace demo", "; lab removed")?;
    Ok(())
}
