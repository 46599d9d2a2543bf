//! `tfo-trace top` against the real kernel. The lab makes real TFO connections (one
//! destination clean, one behind a middlebox that drops SYN-data) and what `top` shows,
//! in its plain rows and in its terminal UI (run in a real terminal: tmux), must equal the
//! kernel's own counters (nstat deltas per namespace) and the middlebox's drop counter.
//! Needs root; the terminal test also needs tmux. Each skips with the reason otherwise.
use crate::common;

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Read},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use common::{netns_inode, wire::WireStalls, Deltas, HookRun, Nstat};
use tfo_trace::lab::{traffic::ClientArgs, Lab, LabConfig, ServerHandle, Side};

/// The cells of the row whose first cell is `key`, by column title, from a block of text
/// whose header line starts with `first_title`. Cells never contain spaces.
fn row(text: &str, first_title: &str, key: &str) -> Option<BTreeMap<String, String>> {
    let mut header: Option<Vec<&str>> = None;
    for line in text.lines() {
        let cells: Vec<&str> = line.split_whitespace().collect();
        if cells.first() == Some(&first_title) {
            header = Some(cells);
        } else if let (Some(h), Some(&first)) = (&header, cells.first()) {
            if first == key {
                return Some(
                    h.iter().map(|t| t.to_string()).zip(cells.iter().map(|c| c.to_string())).collect(),
                );
            }
        }
    }
    None
}

fn num(r: &BTreeMap<String, String>, col: &str) -> u64 {
    r.get(col)
        .unwrap_or_else(|| panic!("no {col} column in {r:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{col}: {r:?}"))
}

/// A duration cell (`1.02s`, `981ms`, `120us`, `0`: tfo_trace::units) -> seconds.
fn secs(r: &BTreeMap<String, String>, col: &str) -> f64 {
    let v = &r[col];
    let (number, scale) = [("us", 1e-6), ("ms", 1e-3), ("s", 1.0)]
        .into_iter()
        .find_map(|(unit, scale)| Some((v.strip_suffix(unit)?, scale)))
        .unwrap_or((v.as_str(), 1.0));
    number.parse::<f64>().unwrap_or_else(|_| panic!("{col}={v}")) * scale
}

/// How far a duration cell may be from the value it prints: units prints three significant
/// digits, rounded half up (`2.04s`: within 5 ms).
fn rounding_s(printed_s: f64) -> f64 {
    if printed_s < 1e-3 {
        return 0.5e-6;
    }
    0.5 * 10f64.powi(printed_s.log10().floor() as i32 - 2)
}

/// The kernel's counters of the lab's namespaces and its middlebox's drops, from a moment
/// on.
struct Counters<'l> {
    lab: &'l Lab,
    netstat: Deltas<'l>,
    dropped: u64,
}

fn counters(lab: &Lab) -> Counters<'_> {
    Counters { lab, netstat: Deltas::since(lab), dropped: lab.middlebox_dropped().unwrap() }
}

impl Counters<'_> {
    /// (client, server, dropped) since.
    fn deltas(&self) -> (common::Nstat, common::Nstat, u64) {
        let (client, server) = self.netstat.both();
        (client, server, self.lab.middlebox_dropped().unwrap() - self.dropped)
    }
}

/// A lab whose client has a cookie for the server at `port`, then a middlebox that drops
/// every SYN carrying data: each connection from there on stalls once (1 s SYN timeout).
fn middlebox_lab(port: u16) -> (Lab, ServerHandle, SocketAddr) {
    let lab = Lab::create(LabConfig::default()).unwrap();
    let server = lab.start_server(common::exe(), 0, port, 16, false).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), port);
    let warm = lab.run_client(common::exe(), &ClientArgs::new(dst)).unwrap();
    assert_eq!(warm.ok_count(), 1, "cookie fetched before the middlebox");
    lab.middlebox_drop_syn_data(None).unwrap();
    (lab, server, dst)
}

fn require_tmux() {
    if Command::new("tmux").arg("-V").output().is_err() {
        common::skip("needs tmux (`apt-get install tmux`) to run top in a real terminal");
    }
}

/// A destination row says why its SYN-data was refused, as the wire shows it: toward
/// server address 1, the key rotated without a backup (its SYN-ACK brings another cookie:
/// `new_cookie`); toward a listener of server address 0 without TCP_FASTOPEN (the client
/// sends the cookie it holds for that address: its SYN-ACK carries no TFO option,
/// `no_tfo_option`). Each refusal is one the client's TcpExtTCPFastOpenActiveFail counts.
fn batch_rows_name_why_syn_data_was_refused() {
    require_kernel!();
    let lab = Lab::create(LabConfig { server_addrs: 2, ..LabConfig::default() }).unwrap();
    let key = |k| lab.set_sysctl(Side::Server, "net.ipv4.tcp_fastopen_key", k).unwrap();
    key("00000000-00000000-00000000-0000000a");
    let (tfo_port, plain_port) = (8091, 8092);
    let address = |i, port| SocketAddr::new(lab.server_addr(i, false).unwrap(), port);
    let (rotated, without_tfo) = (address(1, tfo_port), address(0, plain_port));
    let _servers = [
        lab.start_server(common::exe(), 0, tfo_port, 16, false).unwrap(),
        lab.start_server(common::exe(), 1, tfo_port, 16, false).unwrap(),
        lab.start_server(common::exe(), 0, plain_port, 0, false).unwrap(),
    ];
    let once = |dst| {
        let args = ClientArgs { count: 1, timeout_ms: 5000, ..ClientArgs::new(dst) };
        assert_eq!(lab.run_client(common::exe(), &args).unwrap().ok_count(), 1, "{dst}");
    };
    once(address(0, tfo_port)); // a cookie for each server address
    once(rotated);

    let cli_ns = netns_inode(&lab, Side::Client);
    let top = common::Tracer::start_command(&["top", "--batch", "-d", "1", "--netns", &cli_ns.to_string()]);
    let before = counters(&lab);
    let wire = lab.capture_syns(Side::Client).unwrap();
    key("00000000-00000000-00000000-0000000b");
    once(rotated);
    once(without_tfo);
    let (lines, stderr) = top.stop_lines();
    let wire = wire.stop();
    let (dc, _, _) = before.deltas();
    assert_eq!(dc.get("TcpExtTCPFastOpenActiveFail"), 2, "both SYN-data refused: {dc:?}");

    // The wire: each SYN carried a cookie and data; what its SYN-ACK said.
    let synack_to = |dst: SocketAddr| {
        let syn = wire.iter().find(|s| !s.syn_ack && s.dport == dst.port()).expect("the SYN on the wire");
        assert!(syn.cookie.is_some() && syn.payload > 0, "SYN-data with a cookie: {syn:?}");
        let synack = wire.iter().find(|s| s.syn_ack && s.dport == syn.sport).expect("its SYN-ACK");
        (syn.clone(), synack.clone())
    };
    let (syn, synack) = synack_to(rotated);
    assert!(synack.cookie.is_some() && synack.cookie != syn.cookie, "another cookie: {synack:?}");
    let (_, synack) = synack_to(without_tfo);
    assert!(!synack.tfo, "no TFO option: {synack:?}");

    let text = lines.join("\n");
    let last = text.rsplit("tfo-trace top ").next().unwrap_or_default();
    for (dst, cause) in [(rotated, "new_cookie"), (without_tfo, "no_tfo_option")] {
        let r = row(last, "DESTINATION", &dst.to_string())
            .unwrap_or_else(|| panic!("no row for {dst}:\n{last}\nstderr: {stderr:?}"));
        assert_eq!((num(&r, "NOT_ACKED"), r["CAUSE"].as_str()), (1, cause), "{dst}: {r:?}");
    }
}

/// `top --batch -d 1`, stopped with Ctrl-C once the lab's connections are done: its last
/// snapshot (the one printed at the stop) has every connection, however slow the machine.
/// Meanwhile a clean destination gets a cookie request and two TFO connections, and the
/// middlebox destination a cookie request (small SYN, passes) and one SYN-data that is
/// dropped.
fn batch_rows_match_the_kernel_counters() {
    require_kernel!();
    let lab = Lab::create(LabConfig { server_addrs: 2, ..LabConfig::default() }).unwrap();
    let port = 8090;
    let _clean_srv = lab.start_server(common::exe(), 0, port, 16, false).unwrap();
    let _bad_srv = lab.start_server(common::exe(), 1, port, 16, false).unwrap();
    let clean = SocketAddr::new(lab.server_addr(0, false).unwrap(), port);
    let bad = SocketAddr::new(lab.server_addr(1, false).unwrap(), port);
    lab.middlebox_drop_syn_data(Some(bad.ip())).unwrap();
    let before = counters(&lab);
    let wire = lab.capture_syns(Side::Client).unwrap();
    let recording = std::env::temp_dir().join(format!("tfo-top-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&recording); // a first run's, if this is the retry

    let top = common::Tracer::start_command(&[
        "top",
        "--batch",
        "-d",
        "1",
        "--record",
        &recording.display().to_string(),
    ]);
    // Both clients at once: everything is over about 1.1 s after they start.
    let c1 = lab.spawn_client(common::exe(), &ClientArgs { count: 3, ..ClientArgs::new(clean) }).unwrap();
    let c2 = lab.spawn_client(common::exe(), &ClientArgs { count: 2, ..ClientArgs::new(bad) }).unwrap();
    let (r1, r2) = (c1.wait(common::HANG_LIMIT).unwrap(), c2.wait(common::HANG_LIMIT).unwrap());
    assert_eq!((r1.ok_count(), r2.ok_count()), (3, 2), "lab connections");
    let (lines, _) = top.stop_lines();
    let stalled = WireStalls::of(&wire.stop());
    let text = lines.join("\n");
    let (dc, ds, dropped) = before.deltas();

    let snapshots: Vec<&str> = text.split("tfo-trace top ").filter(|s| !s.trim().is_empty()).collect();
    let last = snapshots.last().unwrap_or_else(|| panic!("no snapshot printed at the stop\n{text}"));

    // The kernel's view first.
    assert_eq!(dropped, 1, "one SYN-data dropped by the middlebox");
    assert_eq!(dc.get("TcpExtTCPSynRetrans"), 1, "client counters: {dc:?}");
    assert_eq!(ds.get("TcpExtTCPFastOpenCookieReqd"), 2, "one cookie request per destination: {ds:?}");
    // And top's rows.
    let b = row(last, "DESTINATION", &bad.to_string()).unwrap_or_else(|| panic!("no row for {bad}:\n{last}"));
    let c =
        row(last, "DESTINATION", &clean.to_string()).unwrap_or_else(|| panic!("no row for {clean}:\n{last}"));
    let stall_rows = num(&b, "STALLS");
    // The events top made its rows from, as it recorded them.
    let recorded = std::fs::read_to_string(&recording).unwrap();
    let recorded: Vec<tfo_trace::events::Event> = recorded
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let recorded_stalls = recorded.iter().filter(|e| e.stall_us > 0 && e.daddr == bad.ip()).count() as u64;
    common::assert_view_count(
        HookRun::Established,
        stall_rows,
        recorded_stalls,
        dc.get("TcpExtTCPSynRetrans"),
        format!("top's STALLS of {bad}: {b:?}"),
    );
    assert_eq!(num(&b, "STALLS"), dropped);
    assert_eq!(num(&c, "STALLS"), 0, "{c:?}");
    assert_eq!(num(&b, "ATTEMPTS") + num(&c, "ATTEMPTS"), 5, "one event per connection");
    assert_eq!(num(&b, "COOKIE") + num(&c, "COOKIE"), ds.get("TcpExtTCPFastOpenCookieReqd"));
    assert_eq!(num(&b, "ACCEPTED") + num(&c, "ACCEPTED"), dc.get("TcpExtTCPFastOpenActive"));
    assert_eq!(num(&b, "NOT_ACKED") + num(&c, "NOT_ACKED"), 0);
    let lost = secs(&b, "LOST");
    stalled.assert_total(1, lost, rounding_s(lost), format!("one SYN timeout lost: {b:?}"));
    assert!(secs(&b, "P99") >= 0.9, "the stall is the tail: {b:?}");
    // The server side: one listener row per address, in the server namespace.
    let l =
        row(last, "LISTENER", &clean.to_string()).unwrap_or_else(|| panic!("no listener {clean}:\n{last}"));
    assert_eq!(l["NETNS"], lab.netns(Side::Server), "the namespace by its `ip netns` name");
    let lb = row(last, "LISTENER", &bad.to_string()).map(|r| num(&r, "ACCEPTED")).unwrap_or(0);
    assert_eq!(num(&l, "ACCEPTED") + lb, ds.get("TcpExtTCPFastOpenPassive"), "{ds:?}");
    // The process table: the middlebox client is the one that stalled.
    let p = row(last, "PID", &r2.pid.to_string()).unwrap_or_else(|| panic!("no process {}:\n{last}", r2.pid));
    assert_eq!(p["COMM"], "tfo-trace");
    assert_eq!(num(&p, "STALLS"), 1);
    assert_eq!(num(&p, "ATTEMPTS"), 2);

    // The recording has the stall to the microsecond: the wire's gap.
    let stall = recorded
        .iter()
        .find(|e| e.stall_us > 0 && e.daddr == bad.ip())
        .unwrap_or_else(|| panic!("no stall recorded: {recorded:?}"));
    stalled.assert_stall(stall, format!("{stall:?}"));

    // The recording replays into the same rows: `top --from` against the same kernel deltas.
    let replay =
        Command::new(common::exe()).args(["top", "--batch", "--from"]).arg(&recording).output().unwrap();
    let _ = std::fs::remove_file(&recording);
    assert!(replay.status.success(), "{}", String::from_utf8_lossy(&replay.stderr));
    let text = String::from_utf8_lossy(&replay.stdout);
    let b =
        row(&text, "DESTINATION", &bad.to_string()).unwrap_or_else(|| panic!("replay lacks {bad}:\n{text}"));
    let c = row(&text, "DESTINATION", &clean.to_string())
        .unwrap_or_else(|| panic!("replay lacks {clean}:\n{text}"));
    assert_eq!(num(&b, "STALLS"), stall_rows, "replayed {b:?}");
    assert_eq!(num(&b, "ACCEPTED") + num(&c, "ACCEPTED"), dc.get("TcpExtTCPFastOpenActive"));
    assert_eq!(num(&b, "COOKIE") + num(&c, "COOKIE"), ds.get("TcpExtTCPFastOpenCookieReqd"));
}

/// How long a snapshot may take to come: only a hung top waits this long.
const WAIT: Duration = common::HANG_LIMIT;

/// A tmux server of our own (its own socket), killed with the test.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> String {
        let out =
            Command::new("tmux").args(["-L", &self.socket, "-f", "/dev/null"]).args(args).output().unwrap();
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "top"])
    }

    /// Polls the screen until `ok` holds ([`common::eventually`]).
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        common::eventually(what, || {
            let s = self.screen();
            if ok(&s) {
                Ok(s)
            } else {
                Err(format!("screen:\n{s}"))
            }
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).output();
    }
}

/// Waits for `path` to hold whole lines; returns them.
fn wait_file(what: &str, path: &Path) -> String {
    common::eventually(what, || {
        let mut s = String::new();
        let _ = std::fs::File::open(path).map(|mut f| f.read_to_string(&mut s));
        if s.ends_with('\n') {
            Ok(s)
        } else {
            Err(s)
        }
    })
}

/// The terminal UI in a real terminal (tmux, 120x30): the middlebox destination's row
/// shows the stalls the kernel counted; keys switch tables; `q` exits 0 and gives the
/// terminal back (normal screen, cooked mode, held-back stderr printed).
fn tui_in_a_real_terminal_matches_the_kernel() {
    require_kernel!();
    require_tmux();
    let (lab, _server, dst) = middlebox_lab(8091);
    let before = counters(&lab);
    let wire = lab.capture_syns(Side::Client).unwrap();

    let dir: PathBuf = std::env::temp_dir().join(format!("tfotest-top-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let status_file = dir.join("status");
    let stty_file = dir.join("stty");
    let _ = std::fs::remove_file(&status_file);
    let script = format!(
        "'{}' top -d 1; echo \"exit=$?\" > '{}'; stty -a > '{}'; exec sleep 120",
        common::exe().display(),
        status_file.display(),
        stty_file.display()
    );
    let tmux = Tmux { socket: format!("tfotest-{}", std::process::id()) };
    tmux.cmd(&["new-session", "-d", "-x", "120", "-y", "30", "-s", "top", "sh", "-c", &script]);

    // The header only shows once the programs are attached.
    tmux.wait_for("the top screen", |s| s.contains("tfo-trace top") && s.contains("DESTINATION"));
    let n = 2;
    let run = lab.run_client(common::exe(), &ClientArgs { count: n, ..ClientArgs::new(dst) }).unwrap();
    assert_eq!(run.ok_count(), n as usize);
    let stalled = WireStalls::of(&wire.stop());
    let (dc, _, dropped) = before.deltas();
    assert_eq!(dc.get("TcpExtTCPSynRetrans"), u64::from(n), "kernel: {dc:?}");
    assert_eq!(dropped, u64::from(n), "middlebox drops");

    let key = dst.to_string();
    let screen = tmux.wait_for("the stalled destination's row", |s| {
        row(s, "DESTINATION", &key).is_some_and(|r| num(&r, "STALLS") == u64::from(n))
    });
    let r = row(&screen, "DESTINATION", &key).unwrap();
    assert_eq!(num(&r, "STALLS"), dc.get("TcpExtTCPSynRetrans"), "{r:?}");
    assert_eq!(num(&r, "STALLS"), dropped);
    assert_eq!(num(&r, "ATTEMPTS"), u64::from(n), "{r:?}");
    // No refusal: every SYN-data the kernel failed (ActiveFail) is one it resent (a stall).
    let refused = dc.get("TcpExtTCPFastOpenActiveFail") - dc.get("TcpExtTCPSynRetrans");
    assert_eq!(num(&r, "NOT_ACKED"), refused, "{r:?}");
    let lost = secs(&r, "LOST");
    stalled.assert_total(u64::from(n), lost, rounding_s(lost), format!("{r:?}"));
    // What 120 columns keep (issue 55, item 4): ACCEPTED, ATT/S and P50 come at 140.
    for col in ["NOT_ACKED", "CAUSE", "STALL/S", "LOST/S", "P99", "STALL_HISTORY"] {
        assert!(r.contains_key(col), "{col} at 120 wide: {r:?}");
    }
    assert!(screen.contains("tcp_fastopen 0x"), "{screen}");
    assert!(screen.lines().last().is_some_and(|l| l.contains("q quit")), "footer:\n{screen}");

    // `3`: the process table, the client process with its stalls.
    tmux.cmd(&["send-keys", "-t", "top", "3"]);
    let pid = run.pid.to_string();
    let screen = tmux.wait_for("the process table", |s| row(s, "PID", &pid).is_some());
    let p = row(&screen, "PID", &pid).unwrap();
    assert_eq!((p["COMM"].as_str(), num(&p, "STALLS")), ("tfo-trace", u64::from(n)), "{p:?}");
    // `4`: the container table (the lab client's is this test's cgroup: no fixed name).
    tmux.cmd(&["send-keys", "-t", "top", "4"]);
    tmux.wait_for("the container table", |s| {
        s.lines().any(|l| l.starts_with("CONTAINER ")) && s.contains("[4] Cont")
    });
    // `/` filter on another address: the row goes away.
    tmux.cmd(&["send-keys", "-t", "top", "1"]);
    tmux.cmd(&["send-keys", "-t", "top", "/"]);
    tmux.cmd(&["send-keys", "-t", "top", "-l", "203.0.113.9"]);
    tmux.cmd(&["send-keys", "-t", "top", "Enter"]);
    tmux.wait_for("the filter", |s| {
        s.contains("filter: 203.0.113.9") && row(s, "DESTINATION", &key).is_none()
    });

    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    let status = wait_file("top exiting after q", &status_file);
    assert_eq!(status.trim(), "exit=0");
    let stty = wait_file("stty after top", &stty_file);
    let raw = stty.split_whitespace().any(|w| w == "-icanon" || w == "-echo");
    assert!(!raw, "terminal left in raw mode: {stty}");
    assert_eq!(tmux.cmd(&["display-message", "-p", "-t", "top", "#{alternate_on}"]).trim(), "0");
    let after = tmux.screen();
    assert!(!after.contains("DESTINATION"), "the UI is gone from the normal screen:\n{after}");
    assert!(after.contains("programs attached"), "{after}");
    assert!(
        after.contains(" events, ") && after.contains(" lost"),
        "the exit summary, after the UI:\n{after}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The number in a table's title (`[1] Destinations (3 rows)`), and the rows under it (up
/// to the next title, or the footer): those drawn plus the `... N more rows` a full table
/// ends with.
fn title_and_rows(screen: &str, title: &str) -> Option<(usize, usize)> {
    let lines: Vec<&str> = screen.lines().collect();
    let at = lines.iter().position(|l| l.trim_start().starts_with(title))?;
    let count = lines[at].split('(').nth(1)?.split_whitespace().next()?.parse().ok()?;
    let mut rows = 0;
    for l in lines[at + 2..]
        .iter()
        .take_while(|l| !l.starts_with(" [") && !l.starts_with("q quit") && !l.trim().is_empty())
    {
        rows += match l.strip_prefix("... ").and_then(|m| m.split_whitespace().next()) {
            Some(more) => more.parse::<usize>().ok()?,
            None => 1,
        };
    }
    Some((count, rows))
}

/// A rate cell (`0`, `0.50`, `12.5`, `1234`, `-`) as a number; `-` (not measured yet) is None.
fn rate(r: &BTreeMap<String, String>, col: &str) -> Option<f64> {
    let v = r.get(col).unwrap_or_else(|| panic!("no {col} column in {r:?}"));
    (v != "-").then(|| v.parse().unwrap_or_else(|_| panic!("{col}={v}")))
}

/// The terminal UI in a tall terminal (tmux, 200x60): the three tables at once, each
/// titled with its key, its name and the rows it really has. Two connections stall behind
/// the middlebox: the destination's STALL/S shows them while they happen (stalls in one
/// refresh over its length), then falls back to 0 once they stop, while STALLS keeps the
/// kernel's count and the row's graph keeps the stalled refreshes.
fn tui_stall_rate_falls_back_to_zero_when_stalls_stop() {
    require_kernel!();
    require_tmux();
    let (lab, _server, dst) = middlebox_lab(8092);
    let before = counters(&lab);
    let wire = lab.capture_syns(Side::Client).unwrap();

    // A 2 s refresh: a stall's rate stays on screen for 2 s, polled every 100 ms.
    let interval = 2.0;
    let dir: PathBuf = std::env::temp_dir().join(format!("tfotest-top-rate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let status_file = dir.join("status");
    let script = format!(
        "'{}' top -d 2; echo \"exit=$?\" > '{}'; exec sleep 120",
        common::exe().display(),
        status_file.display()
    );
    let tmux = Tmux { socket: format!("tfotest-rate-{}", std::process::id()) };
    tmux.cmd(&["new-session", "-d", "-x", "200", "-y", "60", "-s", "top", "sh", "-c", &script]);
    tmux.wait_for("the stacked tables", |s| {
        s.contains("tfo-trace top")
            && ["[1] Destinations (", "[2] Listeners (", "[3] Processes (", "[4] Containers ("]
                .iter()
                .all(|t| s.contains(t))
    });

    let n = 2u64;
    let client =
        lab.spawn_client(common::exe(), &ClientArgs { count: n as u32, ..ClientArgs::new(dst) }).unwrap();
    let key = dst.to_string();
    // While they stall: the highest STALL/S seen on the destination's row.
    let mut peak: Option<f64> = None;
    let screen = common::eventually("the stall rate rising, then back to 0", || {
        let s = tmux.screen();
        if let Some(r) = row(&s, "DESTINATION", &key) {
            let now = rate(&r, "STALL/S");
            if let Some(v) = now.filter(|&v| v > 0.0) {
                peak = Some(peak.map_or(v, |p: f64| p.max(v)));
            }
            if peak.is_some() && num(&r, "STALLS") == n && now == Some(0.0) {
                return Ok(s);
            }
        }
        Err(format!("peak {peak:?}; screen:\n{s}"))
    });
    let run = client.wait(common::HANG_LIMIT).unwrap();
    assert_eq!(run.ok_count(), n as usize);
    let stalled = WireStalls::of(&wire.stop());
    let (dc, _, dropped) = before.deltas();
    assert_eq!(dc.get("TcpExtTCPSynRetrans"), n, "kernel: {dc:?}");
    assert_eq!(dropped, n, "middlebox drops");

    let r = row(&screen, "DESTINATION", &key).unwrap();
    assert_eq!(num(&r, "STALLS"), dc.get("TcpExtTCPSynRetrans"), "{r:?}");
    assert_eq!(rate(&r, "LOST/S"), Some(0.0), "no time lost once the stalls stopped: {r:?}");
    let lost = secs(&r, "LOST");
    stalled.assert_total(n, lost, rounding_s(lost), format!("{r:?}"));
    // The peak was the stalls of one refresh over its length: one or both of them.
    let peak = peak.unwrap();
    let in_one_refresh = (peak * interval).round() as u64;
    assert!((1..=n).contains(&in_one_refresh), "peak {peak}/s over a {interval} s refresh");
    let graph = &r["STALL_HISTORY"];
    let bars = graph.chars().filter(|&c| c != '·').count() as u64;
    assert!((1..=n).contains(&bars) && graph.ends_with('·'), "stalled refreshes, then quiet: {graph}");
    // Each title's count is the rows drawn under it (an empty table draws why instead).
    for title in ["[1] Destinations (", "[2] Listeners (", "[3] Processes (", "[4] Containers ("] {
        let (count, drawn) = title_and_rows(&screen, title).unwrap_or_else(|| panic!("{title}:\n{screen}"));
        if count == 0 {
            assert!(screen.contains("no server TFO events yet") && title.contains("Listeners"), "{screen}");
        } else {
            assert_eq!(count, drawn, "{title}:\n{screen}");
        }
    }
    assert!(title_and_rows(&screen, "[1] Destinations (").is_some_and(|(c, _)| c >= 1));
    assert!(title_and_rows(&screen, "[3] Processes (").is_some_and(|(c, _)| c >= 1));
    assert!(title_and_rows(&screen, "[4] Containers (").is_some_and(|(c, _)| c >= 1));
    assert!(screen.contains("stalls/2s "), "the host's graph in the header:\n{screen}");

    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    let status = wait_file("top exiting after q", &status_file);
    assert_eq!(status.trim(), "exit=0");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `top --batch --json -d 1` while connections stall: every snapshot carries its rates and
/// the real length of its interval, so the stalls per second times the interval, summed
/// over the snapshots, give back the stalls the kernel counted; and the last snapshot,
/// after the stalls stopped, has a stall rate of 0 beside the unchanged total.
fn batch_json_rates_sum_to_the_kernel_counters() {
    require_kernel!();
    let (lab, _server, dst) = middlebox_lab(8093);
    let before = counters(&lab);
    let wire = lab.capture_syns(Side::Client).unwrap();

    let mut child = Command::new(common::exe())
        .args(["top", "--batch", "--json", "-d", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || common::read_all(stderr));
    let mut snaps: Vec<serde_json::Value> = Vec::new();
    let next = |snaps: &mut Vec<serde_json::Value>| {
        let l = rx.recv_timeout(WAIT).expect("a snapshot every second");
        snaps.push(serde_json::from_str(&l).unwrap_or_else(|e| panic!("{e}: {l}")));
    };
    // The first snapshot: the programs are attached.
    next(&mut snaps);
    let n = 2u64;
    let run = lab.run_client(common::exe(), &ClientArgs { count: n as u32, ..ClientArgs::new(dst) }).unwrap();
    assert_eq!(run.ok_count(), n as usize);
    let key = dst.to_string();
    let dest = |v: &serde_json::Value| -> Option<serde_json::Value> {
        v["destinations"].as_array()?.iter().find(|d| d["destination"] == key.as_str()).cloned()
    };
    // Snapshots until one shows both stalls and one after it shows no new one.
    common::eventually("a quiet snapshot after the stalls", || {
        next(&mut snaps);
        let quiet_after_all = snaps.iter().rev().take(2).all(|v| dest(v).is_some_and(|d| d["stalls"] == n))
            && dest(snaps.last().unwrap()).is_some_and(|d| d["stalls_per_s"] == 0.0);
        if quiet_after_all {
            Ok(())
        } else {
            Err(snaps.last().cloned())
        }
    });
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let err = err.join().unwrap();
    assert!(status.success(), "exit {status}; stderr {err}");
    let stalled = WireStalls::of(&wire.stop());
    let (dc, _, dropped) = before.deltas();
    assert_eq!(dc.get("TcpExtTCPSynRetrans"), n, "kernel: {dc:?}");
    assert_eq!(dropped, n);

    let mut stalls_from_rates = 0.0;
    let mut lost_from_rates = 0.0;
    for v in &snaps[1..] {
        let interval = v["rate_interval_s"].as_f64().expect("every live snapshot has its interval");
        assert!(interval > 0.5 && interval < 30.0, "a 1 s refresh: {interval}");
        if let Some(d) = dest(v) {
            stalls_from_rates += d["stalls_per_s"].as_f64().expect("a rate on every row") * interval;
            lost_from_rates += d["lost_per_s"].as_f64().unwrap() * interval;
            assert!(d["attempts_per_s"].as_f64().is_some(), "{d}");
        }
        assert!(v["totals"]["client"]["stalls_per_s"].as_f64().is_some(), "{v}");
    }
    // The row appears with its first event: every stall is in some snapshot's interval.
    assert!(
        (stalls_from_rates - dc.get("TcpExtTCPSynRetrans") as f64).abs() < 1e-6,
        "rates x intervals = {stalls_from_rates}, kernel {dc:?}"
    );
    let last = dest(snaps.last().unwrap()).unwrap();
    let lost_total = last["stall_us"].as_f64().unwrap() / 1e6;
    assert!((lost_from_rates - lost_total).abs() < 1e-6, "{lost_from_rates} vs {lost_total}");
    stalled.assert_total(n, lost_total, 0.0, format!("{last}"));
    assert_eq!((last["stalls"].as_u64(), last["stalls_per_s"].as_f64()), (Some(n), Some(0.0)), "{last}");
    assert_eq!(last["lost_per_s"].as_f64(), Some(0.0));
    // The host's graph: every client stall on the host, ours among them (others' traffic
    // may add to it, never take from it).
    let history = snaps.last().unwrap()["stall_history"].as_array().unwrap().clone();
    let host_stalls: u64 = history.iter().map(|v| v.as_u64().unwrap()).sum();
    assert!(host_stalls >= n, "{history:?}");
}

/// `top --batch --count 2`: two snapshots, then it exits 0 by itself.
fn count_stops_top_by_itself() {
    require_kernel!();
    let mut child = Command::new(common::exe())
        .args(["top", "--batch", "--count", "2", "-d", "200ms"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let out = std::thread::spawn(move || common::read_all(stdout));
    let status = common::wait_exit(&mut child, "top --count 2");
    let text = out.join().unwrap();
    assert!(status.success(), "exit {status}");
    assert_eq!(text.matches("tfo-trace top ").count(), 2, "--count 2: two snapshots\n{text}");
}

/// Whether a process (by pid) is one of the lab's clients (`tfo-trace lab-client`).
fn is_lab_client(pid: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|&b| b == 0).any(|arg| arg == b"lab-client"))
}

/// `top`'s header says `net.ipv4.tcp_fastopen` of the namespaces it traces: each `--netns`
/// one's, as that namespace reads it (it showed the host's whatever `--netns` said), and in
/// a replay none (the host replaying is not the one that recorded) (issue 37, item 10).
fn header_sysctl_is_the_traced_namespaces() {
    require_kernel!();
    // A value no host has by default, so that the host's cannot pass for it.
    let lab = Lab::create(LabConfig { server_fastopen: 0x602, ..LabConfig::default() }).unwrap();
    let read = |side| {
        let out = Command::new("ip")
            .args(["netns", "exec", lab.netns(side), "cat", "/proc/sys/net/ipv4/tcp_fastopen"])
            .output()
            .unwrap();
        format!("{:#x}", String::from_utf8_lossy(&out.stdout).trim().parse::<u32>().unwrap())
    };
    let (srv, cli) = (read(Side::Server), read(Side::Client));
    assert_eq!(srv, "0x602");
    let (srv_ns, cli_ns) = (lab.netns(Side::Server).to_string(), lab.netns(Side::Client).to_string());
    let mut top = common::Tracer::start_command(&["top", "--batch", "-d", "1", "--netns", &srv_ns]);
    let head = top.wait_stdout("a snapshot's header", |l| l.starts_with("tfo-trace top "));
    assert!(head.contains(&format!(" tcp_fastopen={srv_ns}:{srv} ")), "{head}");
    drop(top);
    let top = common::Tracer::start_command(
        &["top", "--json", "-d", "1", "--netns", &srv_ns, "--netns", &cli_ns, "--record"]
            .into_iter()
            .chain([recording_path("header").as_str()])
            .collect::<Vec<_>>(),
    );
    let (lines, _) = top.stop_lines();
    let snap: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    let by_name: BTreeMap<String, String> = snap["tcp_fastopen_netns"]
        .as_array()
        .unwrap_or_else(|| panic!("{snap}"))
        .iter()
        .map(|n| {
            (n["netns_name"].as_str().unwrap().to_string(), format!("{:#x}", n["value"].as_u64().unwrap()))
        })
        .collect();
    assert_eq!(by_name, BTreeMap::from([(srv_ns.clone(), srv), (cli_ns.clone(), cli)]), "{snap}");
    assert!(snap["tcp_fastopen"].is_null(), "two namespaces, no one value: {snap}");
    // The replay: none.
    let replay = Command::new(common::exe())
        .args(["top", "--batch", "--from", &recording_path("header")])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(recording_path("header"));
    let text = String::from_utf8_lossy(&replay.stdout);
    let head = text.lines().find(|l| l.starts_with("tfo-trace top ")).unwrap_or_else(|| panic!("{text}"));
    assert!(!head.contains("tcp_fastopen"), "{head}");
}

fn recording_path(what: &str) -> String {
    std::env::temp_dir().join(format!("tfo-top-{what}-{}.jsonl", std::process::id())).display().to_string()
}

/// `demo --json` (issue 31, item 9): its help says what it prints, `top`'s tables as JSON
/// lines, and it prints them. Its closing summary against the kernel: the demo runs in a
/// cgroup of its own, traced with `--cgroup` (only its lab's connections are counted, not
/// those of the tests beside it); once its clients have finished, every outcome the kernel
/// counted was read (`unread` 0, nothing lost), and what it counted is what the counters of
/// the demo's own namespaces say (nstat, read while the demo is held with SIGSTOP: born
/// after the tracer started, everything they counted is the demo's).
fn demo_json_prints_tables_and_its_closing_summary_adds_up() {
    require_kernel!();
    let help = Command::new(common::exe()).args(["demo", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let json_help = help.lines().skip_while(|l| !l.contains("--json")).take(3).collect::<Vec<_>>().join(" ");
    assert!(json_help.contains("top") && json_help.contains("tables"), "{json_help}");
    assert!(!json_help.contains("events as JSON"), "{json_help}");

    let mut cgroups = common::cgroups::Cgroups::new();
    let dir = cgroups.make("demo");
    let args = ["demo", "--json", "--duration", "3s", "--cgroup", &common::cgroups::rel(&dir)];
    // The demo starts in the cgroup, and its lab (its children) with it.
    let mut demo = common::Tracer::start_command_with(&args, |c| {
        tfo_trace::lab::join_cgroup_at_spawn(c, Some(&dir)).unwrap();
    });
    demo.wait_stderr("tracing for");
    let prefix = format!("{}-{}-", tfo_trace::lab::NS_PREFIX, demo.pid());
    let namespaces: Vec<String> = std::fs::read_dir("/run/netns")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert_eq!(namespaces.len(), 2, "the demo's client and server namespaces: {namespaces:?}");
    // Its clients (each runs for seconds) stop by themselves within the duration: wait for
    // that fact, seen started then gone, then hold the demo while its namespaces' counters
    // are read.
    let in_cgroup = || std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    common::eventually("the demo's clients started, then finished", || {
        let clients: Vec<String> =
            in_cgroup().lines().filter(|p| is_lab_client(p)).map(String::from).collect();
        seen.extend(clients.iter().cloned());
        if !seen.is_empty() && clients.is_empty() {
            Ok(())
        } else {
            Err(clients)
        }
    });
    demo.signal(libc::SIGSTOP);
    let nstat: Vec<Nstat> = namespaces.iter().map(|n| Nstat::read(n)).collect();
    demo.signal(libc::SIGCONT);
    let (lines, stderr) = demo.stop_lines();
    assert!(!lines.is_empty(), "{stderr:?}");
    for l in &lines {
        let snap: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(snap["destinations"].is_array() && snap["totals"].is_object(), "a top snapshot: {l}");
    }
    let closing = common::closing(&stderr).unwrap_or_else(|| panic!("no closing summary: {stderr:?}"));
    let number = |key: &str| closing[key].as_u64().unwrap_or_else(|| panic!("no {key} in {closing}"));
    let (events, lost, unread, counted) =
        (number("events"), number("events_lost"), number("unread"), number("counted"));
    assert!(events > 0, "{closing}");
    assert_eq!((unread, lost), (0, 0), "every outcome read once the clients finished: {closing}");
    assert_eq!(events, counted, "{closing}");

    // The kernel's outcomes in the demo's namespaces, as the backend counts them: each
    // client connection's (TFO accepted, SYN-data not acked or dropped, or a cookie asked
    // for), each server child's, and where the backend sees them, the cookie requests at
    // the server and the cookies the clients received.
    let sum = |counter: &str| nstat.iter().map(|n| n.get(counter)).sum::<u64>();
    let cookie_requests = sum("TcpExtTCPFastOpenCookieReqd");
    let mut expected = sum("TcpExtTCPFastOpenActive") + sum("TcpExtTCPFastOpenActiveFail") + cookie_requests;
    expected += sum("TcpExtTCPFastOpenPassive");
    for (role, outcome) in [
        (tfo_trace::events::Role::Server, tfo_trace::events::Outcome::CookieRequested),
        (tfo_trace::events::Role::Client, tfo_trace::events::Outcome::CookieReceived),
    ] {
        if common::sees(&stderr, role, outcome) {
            expected += cookie_requests;
        }
    }
    eprintln!("demo: counted {counted}; its namespaces' nstat: {expected}");
    assert!(sum("TcpExtTCPSynRetrans") > 0, "the demo's middlebox stalled connections: {nstat:?}");
    assert_eq!(counted, expected, "the demo's counted outcomes vs its namespaces' nstat: {closing}");
}

/// A Ctrl-C while the demo is still building its lab (before top starts) ends it cleanly:
/// exit 0, its closing summary said, and its lab gone (`assert_demo_lab_gone`). Until the
/// demo took Ctrl-C before building its lab, a Ctrl-C then ended the process at once and
/// left all of it behind.
fn demo_stopped_while_it_builds_its_lab_removes_the_lab() {
    require_kernel!();
    let mut demo = common::Tracer::start_command(&["demo", "--json", "--duration", "60s"]);
    demo.wait_stderr("building the lab");
    let pid = demo.pid();
    let (_, stderr) = demo.stop_lines();
    assert_demo_lab_gone(pid, &stderr);
}

/// A hang-up (the ssh session that ran it dropped: SIGHUP) while the demo's lab runs ends it
/// as Ctrl-C and SIGTERM do: exit 0, its closing summary, its lab gone. It exited 129 and
/// left two namespaces with their nft table, dnsmasq and its files behind (issue 37, item 6).
fn demo_hung_up_removes_its_lab() {
    require_kernel!();
    let mut demo = common::Tracer::start_command(&["demo", "--json", "--duration", "60s"]);
    // Its first snapshot: the lab (and its DNS server, where dnsmasq is installed) runs.
    demo.wait_stdout("the demo's first snapshot", |l| l.starts_with('{'));
    let pid = demo.pid();
    let dns = tfo_trace::lab::dns::cannot_serve().is_none();
    assert!(!dns || !demo_leftovers(pid).is_empty(), "the lab runs before the signal");
    let (_, stderr) = demo.stop_lines_with(libc::SIGHUP);
    assert_demo_lab_gone(pid, &stderr);
}

/// What the demo of process `pid` may leave behind: its namespaces (`tfolab-PID-N-{cli,srv}`,
/// which hold the nft table), dnsmasq's folder in /tmp and the client's /etc/netns
/// resolv.conf, and a dnsmasq serving from that folder.
fn demo_leftovers(pid: u32) -> Vec<String> {
    let prefix = format!("{}-{pid}-", tfo_trace::lab::NS_PREFIX);
    let ours = |dir: &str| -> Vec<String> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(&prefix))
            .map(|n| format!("{dir}/{n}"))
            .collect()
    };
    let mut left: Vec<String> = ["/run/netns", "/etc/netns"].into_iter().flat_map(ours).collect();
    left.extend(ours(&std::env::temp_dir().to_string_lossy()));
    let dnsmasq = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("dnsmasq") && c.contains(&prefix));
    left.extend(dnsmasq);
    left
}

/// The demo of process `pid` ended cleanly: its closing summary said, nothing of its lab
/// left ([`demo_leftovers`]), and no orphaned lab server or client (this test binary's
/// tfo-trace, run as `lab-server` or `lab-client`) still running.
fn assert_demo_lab_gone(pid: u32, stderr: &[String]) {
    assert!(common::closing(stderr).is_some(), "no closing summary: {stderr:?}");
    let left = demo_leftovers(pid);
    assert!(left.is_empty(), "left behind: {left:?}; {stderr:?}");
    // Ours once orphaned: a lab process of this binary whose parent is no longer a
    // tfo-trace (other tests' demos, running beside this one, are their servers' parents).
    let exe = std::fs::canonicalize(common::exe()).unwrap();
    let is_ours = |pid: &str| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == exe);
    let parent = |pid: &str| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit(") ").next().and_then(|rest| rest.split(' ').nth(1)).unwrap_or("0").to_string()
    };
    let running: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|pid| pid.parse::<u32>().is_ok() && is_ours(pid) && !is_ours(&parent(pid)))
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/cmdline")).ok())
        .filter(|cmd| cmd.contains("lab-server") || cmd.contains("lab-client"))
        .collect();
    assert!(running.is_empty(), "lab processes left running: {running:?}");
}

/// A process that has not exited yet (a zombie has).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rfind(')').is_some_and(|i| !s[i..].starts_with(") Z")))
}

/// CPU time (user + system) a process used so far, in clock ticks (/proc/PID/stat's
/// utime and stime, the 14th and 15th fields).
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    Some(after_comm.get(11)?.parse::<u64>().ok()? + after_comm.get(12)?.parse::<u64>().ok()?)
}

/// Kills a process the test started, by its pid, if the test ends with it still running.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if running(self.0) {
            let _ = Command::new("kill").args(["-KILL", &self.0.to_string()]).status();
        }
    }
}

/// `top` in a tmux pane, then the pane's terminal closed (tmux killed, as a dropped ssh
/// session or a closed terminal window closes it): top exits by itself, without spinning.
/// `own_session`: top runs under setsid, outside the terminal's session, where no SIGHUP
/// reaches it (a supervisor that relays none) and only the terminal's hang-up tells it.
fn top_exits_when_its_terminal_closes(own_session: bool) {
    require_kernel!();
    require_tmux();
    let dir = std::env::temp_dir().join(format!("tfotest-top-hup-{}-{own_session}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("pid");
    let _ = std::fs::remove_file(&pid_file);
    let top = format!("'{}' top -d 1", common::exe().display());
    // In the background of a non-interactive sh, setsid is no group leader and execs top
    // in place: `$!` is top's pid either way. Its stdin, which sh would make /dev/null,
    // is the terminal's, through fd 3.
    let run = if own_session { format!("setsid {top}") } else { top };
    let script = format!("exec 3<&0; {run} <&3 3<&- & echo $! > '{}'; wait", pid_file.display());
    let tmux = Tmux { socket: format!("tfotest-hup-{}-{own_session}", std::process::id()) };
    tmux.cmd(&["new-session", "-d", "-x", "100", "-y", "30", "-s", "top", "sh", "-c", &script]);
    let pid: u32 = wait_file("top's pid", &pid_file).trim().parse().unwrap();
    let _top = KillOnDrop(pid);
    tmux.wait_for("the top screen", |s| s.contains("tfo-trace top") && s.contains("DESTINATION"));
    drop(tmux);
    common::eventually("top to exit once its terminal closed", || {
        if running(pid) {
            Err(format!("pid {pid} still running, {:?} CPU ticks used so far", cpu_ticks(pid)))
        } else {
            Ok(())
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// The terminal closed under `top`: it gets SIGHUP (the terminal's session).
fn top_exits_when_its_terminal_closes_on_sighup() {
    top_exits_when_its_terminal_closes(false);
}

/// The terminal closed under `top` in a session of its own: no SIGHUP, only the hang-up.
fn top_exits_when_its_terminal_closes_without_sighup() {
    top_exits_when_its_terminal_closes(true);
}

/// TIME_WAIT sockets made in the busy namespace before `top` starts (issue 55): every one
/// of them is a line of /proc/net/tcp, which the reader used to read again for each new
/// listener; ~9,000 stay after the kernel recycles some (about 10 ms a read here).
const BUSY_TIME_WAIT: u32 = 12_000;
/// New TFO listeners while `top` runs, and the connections they take (each listener a
/// new name to look up: 2,000 lookups of ~10 ms held the old reader ~20 s).
const BUSY_LISTENERS: u32 = 2_000;
const BUSY_CONNECTIONS: u32 = 6_000;
const BUSY_RATE: u32 = 1_000;
/// The listeners come in this many waves, from port [`BUSY_PORT`] on.
const BUSY_WAVES: u32 = 2;
const BUSY_PORT: u32 = 30_000;

/// `top --batch --json` in a namespace holding thousands of TIME_WAIT sockets while 2,000
/// new TFO listeners take 6,000 connections, in two waves (issue 55, item 1): a snapshot
/// still comes about every second during the load, SIGTERM ends it at once, and its
/// listener table names each of the 2,000 listeners by its bound address (as `ss -ltn`
/// does; the second wave's opened after the reader read the namespace for the first), their
/// server connections summing to the namespace's TcpExtTCPFastOpenPassive. Before, each
/// new listener's name re-read /proc/PID/net/tcp on the view's thread: no snapshot for
/// ~20 s, and SIGTERM waited as long. Bounded: the load stops by count or 60 s.
fn batch_keeps_time_beside_many_sockets() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    lab.set_sysctl(Side::Client, "net.ipv4.tcp_fastopen", "3").unwrap();
    let ns = lab.netns(Side::Client).to_string();
    let netns = netns_inode(&lab, Side::Client);
    let lab_load = |args: &[&str]| -> serde_json::Value {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(common::exe())
            .arg("lab-load")
            .args(args)
            .output()
            .expect("running lab-load");
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("lab-load: {e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    // The server closes first (--fin): each of its sockets waits in TIME_WAIT for 60 s.
    let fill = BUSY_TIME_WAIT.to_string();
    lab_load(&[
        "--listen",
        "127.0.0.1:20000",
        "--listeners",
        "4",
        "--fin",
        "--count",
        &fill,
        "--duration",
        "60s",
    ]);
    let ss = Command::new("ip")
        .args(["netns", "exec", &ns, "ss", "-tanH", "state", "time-wait"])
        .output()
        .unwrap();
    let time_wait = String::from_utf8_lossy(&ss.stdout).lines().count();
    assert!(time_wait >= 5_000, "the namespace holds {time_wait} TIME_WAIT sockets, not thousands");

    // A ring large enough that no event is lost to it: the listener table is then exact.
    let inode = netns.to_string();
    let mut top = common::Tracer::start_command(&[
        "top",
        "--batch",
        "--json",
        "-d",
        "1",
        "--netns",
        &inode,
        "--ring-buffer-size",
        "16777216",
    ]);
    let before = Deltas::since(&lab);
    // Two waves, one after the other: the second's listeners are newer than what the
    // reader read of the namespace for the first, and are named all the same.
    let (count, rate, listeners) = (
        (BUSY_CONNECTIONS / BUSY_WAVES).to_string(),
        BUSY_RATE.to_string(),
        (BUSY_LISTENERS / BUSY_WAVES).to_string(),
    );
    let load_ns = ns.clone();
    let started = std::time::Instant::now();
    let load = std::thread::spawn(move || {
        let mut outs = Vec::new();
        for wave in 0..BUSY_WAVES {
            let listen = format!("127.0.0.1:{}", BUSY_PORT + wave * (BUSY_LISTENERS / BUSY_WAVES));
            let out = Command::new("ip")
                .args(["netns", "exec", &load_ns])
                .arg(common::exe())
                .args(["lab-load", "--listen", &listen, "--listeners", &listeners])
                .args(["--count", &count, "--rate", &rate, "--duration", "60s"])
                .output()
                .expect("running lab-load");
            outs.push(out);
        }
        (outs, started.elapsed())
    });
    let mut arrivals = Vec::new();
    while !load.is_finished() {
        top.wait_stdout("a snapshot", |l| l.starts_with('{'));
        arrivals.push(started.elapsed());
    }
    let (outs, load_took) = load.join().unwrap();
    let mut made = 0;
    for out in outs {
        let wave: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("lab-load: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        made += wave["connections"].as_u64().unwrap_or_else(|| panic!("{wave}"));
    }
    assert_eq!(made, u64::from(BUSY_CONNECTIONS));
    let on_time = arrivals.iter().filter(|t| **t <= load_took).count() as u64;
    eprintln!(
        "busy: {time_wait} TIME_WAIT sockets; {on_time} snapshots in the {load_took:?} of load; {made} connections"
    );
    // One a second is on time; half of them leaves room for a loaded machine.
    assert!(
        on_time * 2 >= load_took.as_secs(),
        "{on_time} snapshots in the {load_took:?} of load (at {arrivals:?}); {time_wait} TIME_WAIT sockets"
    );
    // What the kernel counted is in a snapshot before the signal (a refresh reads it).
    let passive = before.client().get("TcpExtTCPFastOpenPassive");
    assert_eq!(passive, u64::from(BUSY_CONNECTIONS), "the kernel agrees with the load first");
    let served = |l: &str| -> Option<u64> {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        v["totals"]["server"]["accepted"].as_u64()
    };
    top.wait_stdout("a snapshot with every connection", |l| served(l) == Some(passive));
    let term = std::time::Instant::now();
    let (lines, stderr) = top.stop_lines_with(libc::SIGTERM);
    let exit_after = term.elapsed();
    eprintln!("busy: top ended {exit_after:?} after SIGTERM");
    assert!(exit_after < Duration::from_secs(5), "SIGTERM took {exit_after:?} to end top");
    let closing = common::closing(&stderr).unwrap_or_else(|| panic!("no closing summary: {stderr:?}"));
    assert_eq!(closing["events_lost"], 0, "{closing}");
    let last: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    let rows: Vec<&serde_json::Value> = last["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["netns"] == netns && l["listener"].as_str().is_some_and(|a| a.contains(":3")))
        .collect();
    let names: std::collections::BTreeSet<String> =
        rows.iter().map(|l| l["listener"].as_str().unwrap().to_string()).collect();
    let wanted: std::collections::BTreeSet<String> =
        (0..BUSY_LISTENERS).map(|k| format!("0.0.0.0:{}", BUSY_PORT + k)).collect();
    assert_eq!(names, wanted, "each listener by its bound address");
    let accepted: u64 = rows.iter().map(|l| l["accepted"].as_u64().unwrap()).sum();
    assert_eq!(accepted, passive, "the listeners' connections against TcpExtTCPFastOpenPassive");
}

/// The terminal column (1-based) where `title` ends in `header` (titles are ASCII: a byte
/// is a column).
fn title_end(header: &str, title: &str) -> Option<usize> {
    let mut at = 0;
    for token in header.split(' ') {
        if token == title {
            return Some(at + title.len());
        }
        at += token.len() + 1;
    }
    None
}

/// The columns a character takes on a terminal, as this test measures them: two for East
/// Asian Wide and Fullwidth ones (CJK, kana, hangul), one for the rest it meets.
fn char_columns(c: char) -> usize {
    let wide = matches!(c as u32, 0x1100..=0x115F | 0x2E80..=0x303E | 0x3041..=0x33FF | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF | 0xAC00..=0xD7A3 | 0xF900..=0xFAFF | 0xFF00..=0xFF60 | 0xFFE0..=0xFFE6);
    if wide {
        2
    } else {
        1
    }
}

/// Terminal columns of a line.
fn columns(line: &str) -> usize {
    line.chars().map(char_columns).sum()
}

/// The cell of `row` that ends at display column `end` (a right-aligned number under its
/// title): None where none does (the row is shifted).
fn cell_ending_at(row: &str, end: usize) -> Option<String> {
    let mut columns = 0;
    let mut cell = String::new();
    for c in row.chars() {
        columns += char_columns(c);
        if c == ' ' {
            cell.clear();
        } else {
            cell.push(c);
        }
        if columns == end {
            return (!cell.is_empty()).then_some(cell);
        }
    }
    None
}

/// The row whose first cell is `key` and the header line above it that starts with
/// `first_title`: (header, row).
fn header_and_row<'s>(screen: &'s str, first_title: &str, key: &str) -> Option<(&'s str, &'s str)> {
    let mut header = None;
    for line in screen.lines() {
        let first = line.split_whitespace().next();
        if first == Some(first_title) {
            header = Some(line);
        } else if first == Some(key) {
            return Some((header?, line));
        }
    }
    None
}

/// Issue 55, items 4, 5 and 8: the real `top` in real terminals (tmux) of 80x24 and
/// 200x50, traced in a lab's two namespaces. Toward one server address the client's IPv6
/// source alternates (NAT66: nft snat in front of it), so each SYN-data comes back with a
/// new cookie and is refused (the client's TcpExtTCPFastOpenActiveFail, the server's
/// PassiveFail; the SYN-ACKs on the wire); toward the other a middlebox drops SYN-data
/// (TcpExtTCPSynRetrans, its nft counter, the gaps on the wire), from a client whose name
/// the kernel cut inside a character (`aデータベース` is 19 bytes, comm keeps 15); an IPv4
/// listener takes two TFO connections. Both screens must say what those counters say:
/// refusals, stalls, time lost (at 80 columns too), each word whole, each glyph whole,
/// every line within the terminal, every number under its title, the namespaces by their
/// `ip netns` names.
fn tui_at_80x24_and_200x50_says_refusals_stalls_and_time_lost() {
    require_kernel!();
    require_tmux();
    let lab = Lab::create(LabConfig { server_addrs: 2, ..LabConfig::default() }).unwrap();
    let (nat, bad) = (
        SocketAddr::new(lab.server_addr(0, true).unwrap(), 8097),
        SocketAddr::new(lab.server_addr(1, true).unwrap(), 8098),
    );
    let plain = SocketAddr::new(lab.server_addr(0, false).unwrap(), 8099);
    let _servers = [
        lab.start_server(common::exe(), 0, nat.port(), 16, true).unwrap(),
        lab.start_server(common::exe(), 1, bad.port(), 16, true).unwrap(),
        lab.start_server(common::exe(), 0, plain.port(), 16, false).unwrap(),
    ];
    for dst in [nat, bad, plain] {
        assert_eq!(
            lab.run_client(common::exe(), &ClientArgs::new(dst)).unwrap().ok_count(),
            1,
            "a cookie for {dst}"
        );
    }
    // The NAT gives the other address first: the first SYN-data already meets the change.
    lab.client_snat(&[lab.client_nat_addr(0, true), lab.client_addr(true)]).unwrap();
    lab.middlebox_drop_syn_data(Some(bad.ip())).unwrap();
    // The stalled connections' client, named as the kernel will cut it.
    let dir = common::TempDir::new("top-cjk");
    let cjk = dir.0.join("aデータベース");
    std::os::unix::fs::symlink(common::exe(), &cjk).unwrap();

    let (cli, srv) = (netns_inode(&lab, Side::Client), netns_inode(&lab, Side::Server));
    let terminal = |w: u16, h: u16| {
        let status = dir.0.join(format!("status-{w}"));
        let script = format!(
            "'{}' top -d 1 --netns {cli} --netns {srv}; echo \"exit=$?\" > '{}'; exec sleep 120",
            common::exe().display(),
            status.display()
        );
        let tmux = Tmux { socket: format!("tfotest-{w}x{h}-{}", std::process::id()) };
        let (w, h) = (w.to_string(), h.to_string());
        tmux.cmd(&["new-session", "-d", "-x", &w, "-y", &h, "-s", "top", "sh", "-c", &script]);
        tmux.wait_for("the top screen", |s| s.contains("tfo-trace top") && s.contains("DESTINATION"));
        (tmux, status)
    };
    let ((t80, status80), (t200, status200)) = (terminal(80, 24), terminal(200, 50));

    let before = counters(&lab);
    let nstat = Deltas::since(&lab);
    let wire = lab.capture_syns(Side::Client).unwrap();
    let refused = 4;
    let run = lab.run_client(common::exe(), &ClientArgs { count: refused, ..ClientArgs::new(nat) }).unwrap();
    assert_eq!(run.ok_count(), refused as usize);
    let stalled = lab.run_client(&cjk, &ClientArgs { count: 2, ..ClientArgs::new(bad) }).unwrap();
    assert_eq!(stalled.ok_count(), 2);
    let accepted = lab.run_client(common::exe(), &ClientArgs { count: 2, ..ClientArgs::new(plain) }).unwrap();
    assert_eq!(accepted.ok_count(), 2);
    let wire = wire.stop();
    let (dc, ds) = nstat.both();
    let (_, _, dropped) = before.deltas();

    // The kernel's account first.
    let (active_fail, syn_retrans) = (dc.get("TcpExtTCPFastOpenActiveFail"), dc.get("TcpExtTCPSynRetrans"));
    let passive_fail = ds.get("TcpExtTCPFastOpenPassiveFail");
    assert_eq!((syn_retrans, dropped), (2, 2), "the middlebox's stalls: {dc:?}");
    assert_eq!(
        active_fail - syn_retrans,
        u64::from(refused),
        "every SYN-data through the NAT refused: {dc:?}"
    );
    assert_eq!(passive_fail, u64::from(refused), "the server refused each cookie: {ds:?}");
    // The wire: each SYN-data through the NAT brought back another cookie.
    for syn in wire.iter().filter(|s| !s.syn_ack && s.dport == nat.port()) {
        let synack = wire.iter().find(|a| a.syn_ack && a.dport == syn.sport).expect("its SYN-ACK");
        assert!(syn.cookie.is_some() && syn.payload > 0, "SYN-data with a cookie: {syn:?}");
        assert!(synack.cookie.is_some() && synack.cookie != syn.cookie, "a new cookie: {synack:?}");
    }
    let stalls = WireStalls::of(&wire);
    let srv_name = lab.netns(Side::Server).to_string();

    for (tmux, (w, h)) in [(&t80, (80, 24)), (&t200, (200, 50))] {
        let nat_key = nat.to_string();
        let screen = tmux.wait_for("the refusals and the stalls", |s| {
            row(s, "DESTINATION", &nat_key).is_some_and(|r| r.get("NOT_ACKED").is_some_and(|n| n == "4"))
                && row(s, "DESTINATION", &bad.to_string()).is_some_and(|r| num(&r, "STALLS") == 2)
        });
        let what = format!("{w}x{h}:\n{screen}");
        for line in screen.lines() {
            assert!(columns(line) <= w, "{what}\nwider than the terminal: {line:?}");
            assert!(!line.contains('\u{fffd}'), "{what}\na glyph cut: {line:?}");
        }
        // The destinations: the refusals, why, the stalls and what they cost.
        let r = row(&screen, "DESTINATION", &nat_key).unwrap();
        assert_eq!((num(&r, "ATTEMPTS"), num(&r, "NOT_ACKED")), (u64::from(refused), passive_fail), "{what}");
        assert_eq!(r["CAUSE"], "new_cookie", "{what}");
        let b = row(&screen, "DESTINATION", &bad.to_string()).unwrap();
        assert_eq!((num(&b, "STALLS"), num(&b, "NOT_ACKED")), (syn_retrans, 0), "{what}");
        let lost = secs(&b, "LOST");
        stalls.assert_total(syn_retrans, lost, rounding_s(lost), format!("{w}x{h}: {b:?}"));
        // The header, whole words: the refusals and the stalls, the server's refusals
        // counted by its namespace (the `kernel*` line), that namespace by its name.
        let client = screen.lines().find(|l| l.starts_with("client ")).unwrap();
        assert!(client.contains(&format!(" {} not_acked ", active_fail - syn_retrans)), "{what}");
        assert!(client.contains(&format!(" {syn_retrans} stalls ")), "{what}");
        let kernel: Vec<&str> = screen
            .lines()
            .skip_while(|l| !l.starts_with("kernel* "))
            .take_while(|l| l.starts_with("kernel* ") || l.starts_with("        "))
            .collect();
        let said = kernel.join(" ").split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(said.contains(&format!("netns {srv_name}: ")), "{what}");
        assert!(said.contains(&format!("server cookie_invalid {passive_fail}")), "{what}");
        assert!(!said.contains(&srv.to_string()), "the name, not the inode: {what}");
        let server = screen.lines().find(|l| l.starts_with("server ")).unwrap();
        assert!(server.contains(&format!(" {passive_fail} invalid*")), "{what}");
    }

    // 200x50: every table at once. The listener by its namespace's name; the stalled
    // client named as the kernel cut it, its numbers under their titles.
    let screen = t200.wait_for("the listener's row", |s| row(s, "LISTENER", &plain.to_string()).is_some());
    let l = row(&screen, "LISTENER", &plain.to_string()).unwrap();
    assert_eq!(
        (l["NETNS"].as_str(), num(&l, "ACCEPTED")),
        (srv_name.as_str(), ds.get("TcpExtTCPFastOpenPassive")),
        "{screen}"
    );
    // 80x24: the process table (`3`).
    t80.cmd(&["send-keys", "-t", "top", "3"]);
    let pid = stalled.pid.to_string();
    let screen80 = t80.wait_for("the process table", |s| row(s, "PID", &pid).is_some());
    for (screen, w) in [(&screen80, 80), (&screen, 200)] {
        let (header, line) =
            header_and_row(screen, "PID", &pid).unwrap_or_else(|| panic!("no {pid}:\n{screen}"));
        assert_eq!(
            line.split_whitespace().nth(1),
            Some("aデータベ"),
            "{w}: the piece the kernel cut goes:\n{screen}"
        );
        for (title, want) in [("ATTEMPTS", 2), ("STALLS", syn_retrans)] {
            let end = title_end(header, title).unwrap_or_else(|| panic!("{w}: no {title}: {header}"));
            assert_eq!(
                cell_ending_at(line, end),
                Some(want.to_string()),
                "{w}: {title} under its title:\n{header}\n{line}"
            );
        }
    }

    for (tmux, status) in [(&t80, &status80), (&t200, &status200)] {
        tmux.cmd(&["send-keys", "-t", "top", "q"]);
        assert_eq!(wait_file("top exiting after q", status).trim(), "exit=0");
    }
}

/// Issue 55, item 8: `top --from` and `report --from` named a listener's namespace by its
/// inode although the recording carries `netns_name`, while the live report named it.
/// One rule everywhere: the `ip netns` name where known. The names are the lab's own
/// (`ip netns`), the inodes the namespaces' files' (`stat`); the counts the kernel's.
fn replays_name_namespaces_as_live_views_do() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let port = 8093;
    let _server = lab.start_server(common::exe(), 0, port, 16, false).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), port);
    assert_eq!(lab.run_client(common::exe(), &ClientArgs::new(dst)).unwrap().ok_count(), 1, "cookie");
    let (cli, srv) = (netns_inode(&lab, Side::Client), netns_inode(&lab, Side::Server));
    let (cli_name, srv_name) = (lab.netns(Side::Client), lab.netns(Side::Server));
    let recording = common::TempFile::new("replay-names");
    let (c, s) = (cli.to_string(), srv.to_string());
    let tracer = common::Tracer::start(&["--netns", &c, "--netns", &s, "--record", recording.path()]);
    let nstat = Deltas::since(&lab);
    assert_eq!(
        lab.run_client(common::exe(), &ClientArgs { count: 2, ..ClientArgs::new(dst) }).unwrap().ok_count(),
        2
    );
    let passive = nstat.server().get("TcpExtTCPFastOpenPassive");
    let _ = tracer.stop();
    assert_eq!(passive, 2);

    let run = |args: &[&str]| {
        let out = Command::new(common::exe()).args(args).arg(recording.path()).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let top = run(&["top", "--batch", "--from"]);
    let l = row(&top, "LISTENER", &dst.to_string()).unwrap_or_else(|| panic!("{top}"));
    assert_eq!((l["NETNS"].as_str(), num(&l, "ACCEPTED")), (srv_name, passive), "{top}");
    let text = run(&["report", "--from"]);
    assert!(text.contains(&format!("{dst} (netns {srv_name})")), "the listener:\n{text}");
    assert!(text.contains(&format!("{dst} (netns {cli_name})")), "the destination:\n{text}");
    let markdown = run(&["report", "--format", "markdown", "--from"]);
    assert!(
        markdown.contains(&format!("| {srv_name} |")) && markdown.contains(&format!("| {cli_name} |")),
        "{markdown}"
    );
    for (what, out) in [("top", &top), ("report", &text), ("markdown", &markdown)] {
        assert!(
            !out.contains(&srv.to_string()) && !out.contains(&cli.to_string()),
            "{what}: an inode:\n{out}"
        );
    }
}

module_tests!(
    batch_keeps_time_beside_many_sockets,
    demo_stopped_while_it_builds_its_lab_removes_the_lab,
    demo_hung_up_removes_its_lab,
    header_sysctl_is_the_traced_namespaces,
    demo_json_prints_tables_and_its_closing_summary_adds_up,
    count_stops_top_by_itself,
    batch_rows_match_the_kernel_counters,
    batch_rows_name_why_syn_data_was_refused,
    tui_in_a_real_terminal_matches_the_kernel,
    tui_stall_rate_falls_back_to_zero_when_stalls_stop,
    top_exits_when_its_terminal_closes_on_sighup,
    top_exits_when_its_terminal_closes_without_sighup,
    batch_json_rates_sum_to_the_kernel_counters,
    tui_at_80x24_and_200x50_says_refusals_stalls_and_time_lost,
    replays_name_namespaces_as_live_views_do,
);
