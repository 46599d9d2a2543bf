//! Faults a production host throws at the tracer: signals under maximum load, SIGKILL,
//! two tracers at once, a bad BTF file or a backend that cannot load. Each must end with
//! nothing left attached, nothing lost that was recorded, and one clear line when it fails.
use crate::common;

use std::{
    collections::BTreeSet,
    io::BufRead as _,
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
};

use common::{bpftool, count, http_get, metric_sum, netns_inode, Deltas, Tracer};
use serde_json::Value;
use tfo_trace::{
    events::{Outcome, Role},
    lab::{traffic::ClientArgs, Lab, LabConfig, Side},
};

/// Links (tracepoint attachments) to any of `progs`, from a whole `bpftool link show`
/// (common::bpftool: a failed one is retried by the common rule, never read as none).
fn links_to(progs: &BTreeSet<u64>) -> Vec<Value> {
    let links = common::eventually("a whole `bpftool link show`", || bpftool::list("link"));
    links.into_iter().filter(|l| l["prog_id"].as_u64().is_some_and(|p| progs.contains(&p))).collect()
}

/// bpftool lists the tracer's programs, `ours`, and links to them: the listing that later
/// finds none left sees them while they are there.
fn assert_listed(ours: &BTreeSet<u64>) {
    let progs = common::eventually("a whole `bpftool prog show`", || bpftool::ids("prog"));
    assert!(ours.is_subset(&progs), "bpftool lists the tracer's programs {ours:?}: {progs:?}");
    assert!(!links_to(ours).is_empty(), "and links to them");
}

/// Waits until none of `ids` is loaded any more: the kernel frees a program once its last
/// fd and link are gone, after an RCU grace period. A bpftool that failed is not "none".
fn wait_gone(what: &str, ids: &BTreeSet<u64>) {
    common::eventually(format!("programs {ids:?} unloaded {what}"), || {
        let left: Vec<u64> = bpftool::ids("prog")?.intersection(ids).copied().collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("still loaded: {left:?}"))
        }
    });
}

/// `tfo-trace lab-load` at the maximum rate in the lab's client namespace, for `secs`.
fn max_load(lab: &Lab, secs: u32) -> Child {
    lab.set_sysctl(Side::Client, "net.ipv4.tcp_fastopen", "3").unwrap();
    Command::new("ip")
        .args(["netns", "exec", lab.netns(Side::Client)])
        .arg(common::exe())
        .args(["lab-load", "--listen", "127.0.0.1:8099", "--threads", "2", "--duration", &format!("{secs}s")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting lab-load")
}

fn under_load_detaches_and_completes_the_recording(signal: i32) {
    require_kernel!();
    bpftool::require("to list the kernel's programs");
    let lab = Lab::create(LabConfig::default()).unwrap();
    let file = std::env::temp_dir().join(format!("tfo-faults-{signal}-{}.jsonl", std::process::id()));
    let path = file.to_string_lossy().into_owned();
    let _ = std::fs::remove_file(&file); // a first run's, if this is the retry
    let tracer = Tracer::start_command(&["trace", "--json", "--record", &path]);
    let ours = common::bpf_ids_of(tracer.pid(), "prog_id");
    assert!(!ours.is_empty(), "the tracer holds its programs");
    assert_listed(&ours);
    let counters = Deltas::since(&lab);
    let mut load = max_load(&lab, 3);
    // Under load: a thousand TFO connections made (two events each) before the signal.
    counters.wait_for(Side::Client, "TcpExtTCPFastOpenActive", 1000);
    tracer.signal(signal);
    let (events, stderr) = tracer.stop(); // asserts exit 0
    let _ = load.wait();
    let summary = common::closing(&stderr).unwrap_or_else(|| panic!("no closing summary: {stderr:?}"));
    let seen = summary["events"].as_u64().unwrap_or_else(|| panic!("{summary}")) as usize;
    assert_eq!(events.len(), seen, "stdout has every event the summary counts: {summary}");
    assert!(seen > 1000, "under load: {summary}");
    // The recording: a header, then every event, each line whole.
    let lines: Vec<String> =
        std::io::BufReader::new(std::fs::File::open(&file).unwrap()).lines().map(Result::unwrap).collect();
    let _ = std::fs::remove_file(&file);
    assert_eq!(lines.len(), seen + 1, "header + {seen} events");
    for l in &lines {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("a torn line {l:?}: {e}"));
    }
    // Other tests (and other engineers) load programs on this host at the same time: what
    // must be gone is ours, every program and every link to one.
    wait_gone("after exit", &ours);
    let left = links_to(&ours);
    assert!(left.is_empty(), "links left behind: {left:?}");
}

fn sigkill_leaves_nothing_attached_or_pinned() {
    require_kernel!();
    bpftool::require("to list the kernel's programs");
    let pinned = |dir: &str| -> BTreeSet<PathBuf> {
        std::fs::read_dir(dir).map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect()).unwrap_or_default()
    };
    let pins_before = pinned("/sys/fs/bpf");
    let tracer = Tracer::start(&[]);
    let ours = common::bpf_ids_of(tracer.pid(), "prog_id");
    assert!(!ours.is_empty());
    assert_listed(&ours);
    tracer.signal(libc::SIGKILL);
    drop(tracer); // reaps it
    wait_gone("after SIGKILL", &ours);
    let left = links_to(&ours);
    assert!(left.is_empty(), "links left behind: {left:?}");
    assert_eq!(pinned("/sys/fs/bpf"), pins_before, "nothing pinned");
}

/// `export` and `trace` at once: both see everything; stopping one leaves the other exact.
fn two_tracers_at_once_do_not_disturb_each_other() {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, 8080, 16, false).unwrap();
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), 8080);
    let client = |count| ClientArgs { count, ..ClientArgs::new(dst) };
    assert_eq!(lab.run_client(common::exe(), &client(1)).unwrap().ok_count(), 1, "cookie");
    let cli_ns = netns_inode(&lab, Side::Client);
    let before = Deltas::since(&lab);
    let mut export = Tracer::start_command(&[
        "export",
        "--web.listen-address",
        "127.0.0.1:0",
        "--netns",
        &cli_ns.to_string(),
    ]);
    let line = export.wait_stderr("serving metrics on http://");
    let addr: SocketAddr =
        line.split("http://").nth(1).and_then(|r| r.split('/').next()).unwrap().parse().unwrap();
    let trace = Tracer::start(&[]);
    assert_eq!(lab.run_client(common::exe(), &client(10)).unwrap().ok_count(), 10);
    let (events, _) = trace.stop();
    assert_eq!(
        count(&events, cli_ns, Role::Client, Outcome::Accepted),
        before.client().get("TcpExtTCPFastOpenActive")
    );
    // The other tracer, still running, keeps counting after the first one is gone.
    assert_eq!(lab.run_client(common::exe(), &client(7)).unwrap().ok_count(), 7);
    let d = before.client();
    // Each scrape reads the kernel's counts then.
    let (_, text) = http_get(addr, "/metrics").unwrap();
    let accepted =
        metric_sum(&text, "tfo_trace_connections_total", &[r#"role="client""#, r#"outcome="accepted""#]);
    assert_eq!(accepted as u64, d.get("TcpExtTCPFastOpenActive"), "{text}");
    assert_eq!(d.get("TcpExtTCPFastOpenActive"), 17);
    export.stop_lines();
}

/// SIGHUP (a dropped ssh session) ends every long-running command as SIGTERM does: exit 0,
/// its closing summary (or `report`'s report) said, a recording whole. Each died of it
/// before, exit 129, without a word (issue 37, item 6; `demo`: tests/integration/top.rs).
fn a_hang_up_ends_every_command_as_sigterm_does() {
    require_kernel!();
    let rec = common::TempFile::new("hung-up");
    let commands: [&[&str]; 5] = [
        &["trace", "--json-summary", "--record", rec.path(), "--force"],
        &["stalls", "--json-summary"],
        &["top", "--batch", "--json-summary"],
        &["report", "--duration", "10m", "--format", "json"],
        &["export", "--web.listen-address", "127.0.0.1:0", "--json-summary"],
    ];
    for args in commands {
        for signal in [libc::SIGTERM, libc::SIGHUP] {
            let tracer = Tracer::start_command(args);
            let (stdout, stderr) = tracer.stop_lines_with(signal); // asserts exit 0
            if args[0] == "report" {
                let report: Value = serde_json::from_str(&stdout.join("\n")).unwrap_or_else(|e| {
                    panic!("{args:?}, signal {signal}: no report ({e}): {stdout:?} {stderr:?}")
                });
                assert_eq!(report["source"]["kind"], "live", "{report}");
                continue;
            }
            let closing = common::closing(&stderr)
                .unwrap_or_else(|| panic!("{args:?}, signal {signal}: no closing summary: {stderr:?}"));
            if args[0] == "trace" {
                assert_eq!(closing["recorded_to"], rec.path(), "{closing}");
                let text = std::fs::read_to_string(&rec.0).unwrap();
                assert!(text.starts_with("{\"tfo_trace_recording\":1"), "the recording's header: {text}");
            }
        }
    }
}

/// Runs `tfo-trace ARGS` to its end: (exit code, stderr).
fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(common::exe()).args(args).output().expect("running tfo-trace");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn a_missing_or_bad_btf_or_an_unloadable_backend_is_one_clear_line() {
    require_kernel!();
    let garbage = std::env::temp_dir().join(format!("tfo-faults-btf-{}", std::process::id()));
    std::fs::write(&garbage, b"not BTF at all").unwrap();
    let garbage_path = garbage.to_string_lossy().into_owned();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["trace", "--duration", "1s", "--btf", "/nonexistent/vmlinux"], "/nonexistent/vmlinux"),
        (vec!["trace", "--duration", "1s", "--btf", &garbage_path], "BTF"),
        (
            vec![
                "export",
                "--duration",
                "1s",
                "--web.listen-address",
                "127.0.0.1:0",
                "--btf",
                "/nonexistent",
            ],
            "/nonexistent",
        ),
    ];
    for (args, needle) in cases {
        let (code, err) = run(&args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(needle) && !err.contains("panicked"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_file(&garbage);
    // A backend this kernel cannot load, forced: one line naming it and why.
    for backend in ["fentry", "kprobe"] {
        let (code, err) = run(&["trace", "--duration", "1s", "--backend", backend]);
        if code == Some(0) {
            // It loads here: then it is the one that ran, not another in its place.
            assert!(
                err.contains(&format!("attached with the {backend} backend")),
                "--backend {backend}: {err}"
            );
            common::partial_skip(format!(
                "the {backend} backend loads on this kernel: its refusal is not checked"
            ));
            continue;
        }
        assert_eq!(code, Some(1), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(err.contains(&format!("the {backend} backend cannot load here")), "{err}");
    }
}

module_tests!(
    under_load_detaches_and_completes_the_recording {
        sigint: libc::SIGINT,
        sigterm: libc::SIGTERM,
        sighup: libc::SIGHUP,
    },
    a_hang_up_ends_every_command_as_sigterm_does,
    sigkill_leaves_nothing_attached_or_pinned,
    two_tracers_at_once_do_not_disturb_each_other,
    a_missing_or_bad_btf_or_an_unloadable_backend_is_one_clear_line,
);
