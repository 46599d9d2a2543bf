//! `--record FILE` when the disk fills while tracing (issue 55, item 6): on a 64 KiB tmpfs
//! the test mounts (and unmounts), every command that records (`trace`, `stalls`, `top`)
//! goes on tracing to stdout with one warning, keeps its closing summary, says how many
//! events the recording lacks, leaves the file with whole lines only, and exits 1. The
//! oracle is the kernel's own counters of the lab's namespaces (nstat): every TFO
//! connection the kernel counted is an event delivered, on stdout or in the recording.
//! Needs root (a lab, a mount).
use crate::common;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use common::{netns_inode, Deltas, Tracer};
use serde_json::Value;
use tfo_trace::lab::{traffic::ClientArgs, Lab, LabConfig, Side};

/// A tmpfs of `size` mounted on a folder of its own (named per test and pid: the tests of
/// this module run at once), unmounted (and the folder removed) when dropped, even when
/// the test fails.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(name: &str, size: &str) -> SmallDisk {
        let dir = std::env::temp_dir().join(format!("tfo-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tfo-test"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount: {}", String::from_utf8_lossy(&out.stderr));
        SmallDisk(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazily where a process still holds a file there (a tracer killed as the test
        // failed): the mount goes from the tree at once, its memory once they are gone.
        let unmounted = |lazy: bool| {
            let mut umount = Command::new("umount");
            umount.args(lazy.then_some("-l")).arg(&self.0);
            umount.output().is_ok_and(|o| o.status.success())
        };
        if !unmounted(false) && !unmounted(true) {
            eprintln!("could not unmount the test's tmpfs {}", self.0.display());
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// What a recording holds: its header, then only whole event lines (a cut last line
/// would be a bad line for every replay).
fn whole_events_in(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "the recording ends with a whole line");
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().expect("a header")).unwrap();
    assert_eq!(header["tfo_trace_recording"], 1);
    let mut events = 0;
    for l in lines {
        serde_json::from_str::<tfo_trace::events::Event>(l).unwrap_or_else(|e| panic!("{e}: {l:?}"));
        events += 1;
    }
    events
}

/// One command recording onto a full disk: `args` (`trace --json`, `stalls --json`, `top
/// --batch`), traced in the lab's two namespaces only, while `n` accepted TFO connections
/// (two events each) overflow a 64 KiB tmpfs many times over.
fn records_onto_a_full_disk(args: &[&str]) {
    require_kernel!();
    let lab = Lab::create(LabConfig::default()).unwrap();
    let port = 8095;
    let _server = lab.start_server(common::exe(), 0, port, 16, false).unwrap();
    let dst = std::net::SocketAddr::new(lab.server_addr(0, false).unwrap(), port);
    // The cookie first: from here on every connection is accepted SYN-data.
    assert_eq!(lab.run_client(common::exe(), &ClientArgs::new(dst)).unwrap().ok_count(), 1);
    let disk = SmallDisk::mount(&format!("full-disk-{}", args[0]), "64k");
    let recording = disk.file("r.jsonl");
    let (cli, srv) =
        (netns_inode(&lab, Side::Client).to_string(), netns_inode(&lab, Side::Server).to_string());
    let mut cmd: Vec<&str> = args.to_vec();
    cmd.extend(["--json-summary", "--netns", &cli, "--netns", &srv, "--record"]);
    let recording_arg = recording.display().to_string();
    cmd.push(&recording_arg);
    let before = Deltas::since(&lab);
    let tracer = Tracer::start_command(&cmd);
    let n = 300;
    let run = lab.run_client(common::exe(), &ClientArgs { count: n, ..ClientArgs::new(dst) }).unwrap();
    assert_eq!(run.ok_count(), n as usize, "lab connections");
    let (client, server) = before.both();
    let (status, stdout, stderr) = tracer.stop_with_status(libc::SIGINT);
    let what = format!("{args:?}: stderr {stderr:?}");

    // The kernel's account: n accepted SYN-data at each end.
    let (active, passive) = (client.get("TcpExtTCPFastOpenActive"), server.get("TcpExtTCPFastOpenPassive"));
    assert_eq!((active, passive), (u64::from(n), u64::from(n)), "{client:?} {server:?}");

    // One warning when writing failed, and the summary kept.
    let warnings: Vec<&String> =
        stderr.iter().filter(|l| l.contains("warning") && l.contains("recording")).collect();
    assert_eq!(warnings.len(), 1, "one warning: {what}");
    assert!(
        warnings[0].contains("No space left on device") && warnings[0].contains("tracing goes on"),
        "{what}"
    );
    let closing = common::closing(&stderr).unwrap_or_else(|| panic!("no closing summary: {what}"));
    let number = |k: &str| closing[k].as_u64().unwrap_or_else(|| panic!("{k} in {closing}"));
    // Every outcome the kernel counted was delivered (none lost, none after the last read).
    assert_eq!(number("counted"), active + passive, "{closing}");
    assert_eq!(
        (number("events"), number("events_lost"), number("unread")),
        (active + passive, 0, 0),
        "{closing}"
    );
    // What the recording lacks is what it does not hold: whole lines only.
    let recorded = whole_events_in(&recording);
    assert!(recorded < number("events"), "the disk filled: {recorded} recorded");
    assert_eq!(number("unrecorded"), number("events") - recorded, "{closing}");
    assert!(closing["recording_failed"].as_str().is_some_and(|w| w.contains("No space left")), "{closing}");
    // The command fails, after its summary, with one line saying how many are missing.
    assert_eq!(status.code(), Some(1), "{what}");
    let last = stderr.last().unwrap();
    let lacks = format!("lacks the last {} of the {} events", number("unrecorded"), number("events"));
    assert!(last.starts_with("tfo-trace: error: the recording ") && last.contains(&lacks), "{what}");

    // Tracing went on to stdout: `trace` printed every event the kernel counted.
    if args[0] == "trace" {
        let events: Vec<tfo_trace::events::Event> =
            stdout.iter().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
        assert_eq!(events.len() as u64, active + passive, "every event on stdout");
    }
    if args[0] == "top" {
        let last = stdout.iter().rev().find(|l| l.starts_with("tfo-trace top ")).expect("a snapshot");
        assert!(last.contains(&format!("client_attempts={n} ")), "{last}");
    }
}

module_tests!(records_onto_a_full_disk {
    trace: &["trace", "--json"],
    stalls: &["stalls", "--json"],
    top: &["top", "--batch", "-d", "1"],
});
