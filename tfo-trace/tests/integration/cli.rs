//! The command line as users meet it: usage errors, missing privileges, doctor.
use crate::common;

use std::{os::unix::process::CommandExt, process::Command};

fn tfo_trace(args: &[&str]) -> std::process::Output {
    Command::new(common::exe()).args(args).output().expect("running tfo-trace")
}

/// A usage error as clap reports it: exit 2, nothing on stdout, `error: ...` naming the
/// flag on the first line (or, for a value starting with `-`, which clap takes for a flag,
/// that value), the pointer to --help at the end, and no panic.
fn assert_usage_error(args: &[&str], names: &str) {
    let out = tfo_trace(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?}: usage errors go to stderr");
    let first = err.lines().next().unwrap_or("");
    assert!(first.starts_with("error:"), "{args:?}: {err}");
    let value = args.last().copied().unwrap_or("");
    let taken_for_a_flag = value.starts_with('-') && first.contains("unexpected argument '-");
    assert!(first.contains(names) || taken_for_a_flag, "{args:?}: {names:?} not named in {first:?}");
    assert!(err.trim_end().ends_with("For more information, try '--help'."), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

fn unknown_flags_are_usage_errors() {
    for sub in ["trace", "stalls", "top", "report", "doctor", "export", "demo", "completions"] {
        assert_usage_error(&[sub, "--no-such-flag"], "--no-such-flag");
    }
    assert_usage_error(&["--no-such-flag"], "--no-such-flag");
    assert_usage_error(&["no-such-command"], "no-such-command");
    assert_usage_error(&["trace", "extra"], "extra");
}

/// Every flag that takes a duration, with values that are not one (or out of range).
fn bad_durations_are_usage_errors() {
    let flags = [
        ("trace", "--duration", "--duration"),
        ("stalls", "--duration", "--duration"),
        ("top", "--duration", "--duration"),
        ("top", "-d", "--delay"),
        ("report", "--duration", "--duration"),
        ("export", "--duration", "--duration"),
        ("export", "--interval", "--interval"),
        ("demo", "--duration", "--duration"),
    ];
    for (sub, flag, name) in flags {
        for bad in [
            "soon",
            "0",
            "0s",
            "-5s",
            "5 parsecs",
            "1e9",
            "1e3",
            "+5",
            "inf",
            "NaN",
            "1mo",
            "1y",
            "1.2.3s",
            "",
            "367d",
            "10000h",
            "0.0000000001",
            "0.5ms",
        ] {
            assert_usage_error(&[sub, flag, bad], name);
        }
    }
}

fn bad_ring_buffer_sizes_are_usage_errors() {
    for sub in ["trace", "stalls", "top", "report", "export", "demo"] {
        for bad in ["1000", "5000", "0", "-4096", "4096k", "4294967296", "0x1000", ""] {
            assert_usage_error(&[sub, "--ring-buffer-size", bad], "--ring-buffer-size");
        }
    }
}

/// Sizes past the documented range (up to 256 MiB, a power of two, at least a page) are
/// usage errors that say which rule they break: 1 GiB took 4.7 s to attach and 2.1 GB of
/// memory (issue 37, item 11), and 4294967296 is too large, not "not a number".
fn ring_buffer_sizes_out_of_range_say_the_range() {
    let message = |args: &[&str]| {
        assert_usage_error(args, "--ring-buffer-size");
        String::from_utf8_lossy(&tfo_trace(args).stderr).lines().next().unwrap_or("").to_string()
    };
    for big in ["536870912", "1073741824", "4294967296", "18446744073709551616"] {
        // With a duration, so that a size taken (the fault) ends the run instead of hanging it.
        let m = message(&["trace", "--duration", "1s", "--ring-buffer-size", big]);
        assert!(m.contains("at most 268435456 (256 MiB)") && !m.contains("not a number"), "{big}: {m}");
    }
    assert!(message(&["trace", "--ring-buffer-size", "5000"]).contains("a power of two"));
    assert!(message(&["trace", "--ring-buffer-size", "2048"]).contains("at least 4096"));
    assert!(message(&["trace", "--ring-buffer-size", "lots"]).contains("not a number of bytes"));
}

/// A `--netns` inode no namespace has now is a usage error for a live run, as `--netns 0`
/// is (it traced nothing, silently, before: issue 37, item 11); a replay takes any inode
/// (the recording's namespaces may be gone).
fn netns_inodes_that_name_no_namespace_are_usage_errors() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::skip("needs root: only root sees every process's namespace");
    }
    // An inode no namespace of this host has: past every inode /proc shows.
    let taken: Vec<u64> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::metadata(e.ok()?.path().join("ns/net")).ok())
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .collect();
    let free = (12345..).find(|i| !taken.contains(i)).unwrap().to_string();
    for sub in ["trace", "stalls", "top", "report", "export"] {
        assert_usage_error(&[sub, "--duration", "1s", "--netns", &free], "--netns");
        let first = String::from_utf8_lossy(&tfo_trace(&[sub, "--duration", "1s", "--netns", &free]).stderr)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        assert!(first.contains("no network namespace has inode") && first.contains("now"), "{first}");
    }
    for sub in ["report", "top"] {
        let out = tfo_trace(&[sub, "--from", LAB_RECORDING, "--netns", &free]);
        assert_eq!(out.status.code(), Some(0), "{sub}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

fn bad_backends_are_usage_errors() {
    for sub in ["trace", "stalls", "top", "report", "export", "demo"] {
        for bad in ["dtrace", "", "FENTRY", "kprobe,fentry", "tracepoint "] {
            assert_usage_error(&[sub, "--backend", bad], "--backend");
        }
    }
}

/// What the messages of the usage errors say: in the user's words (no library type, no
/// 2^64 - 1), and durations in days as the range they name ("1ms to 366 days") says.
fn usage_messages_speak_the_users_language() {
    let message = |args: &[&str]| {
        let out = tfo_trace(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or("").to_string()
    };
    for bad in ["soon", "5 parsecs", "1e3"] {
        let m = message(&["trace", "--duration", bad]);
        assert!(!m.contains("jiff") && !m.contains("Span"), "{m}");
        assert!(m.contains("30s") && m.contains("2d"), "examples of what is meant: {m}");
    }
    assert!(message(&["trace", "--duration", "1mo"]).contains("say it in days, like 30d"));
    assert!(message(&["trace", "--duration", "367d"]).contains("1ms to 366 days"));
    let m = message(&["top", "-n", "0"]);
    assert!(!m.contains("18446744073709551615") && m.contains("at least 1"), "{m}");
    // Days and weeks are what they say; a replay with them runs.
    for good in ["1d", "2 days", "1w", "366d", "1d 2h", "90", "0.5"] {
        let out = tfo_trace(&["top", "--batch", "--from", LAB_RECORDING, "--duration", good]);
        assert_eq!(out.status.code(), Some(0), "--duration {good}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Flags that could do nothing are refused (exit 2) before anything runs: a filter on
/// pid 0, netns 0 or an empty process name, the same recording given twice (its events
/// would count twice), directly or through its folder.
fn flags_that_can_do_nothing_are_usage_errors() {
    // With a duration, so that a flag taken (the fault) ends the run instead of hanging it.
    for sub in ["trace", "stalls", "top", "report", "export"] {
        assert_usage_error(&[sub, "--duration", "1s", "--pid", "0"], "--pid");
        assert_usage_error(&[sub, "--duration", "1s", "--netns", "0"], "--netns");
        assert_usage_error(&[sub, "--duration", "1s", "--comm", ""], "--comm");
    }
    // A replay traces nothing: the flags of the kernel side can do nothing with --from.
    for sub in ["report", "top"] {
        for (flag, value) in [("--backend", "fentry"), ("--ring-buffer-size", "8192"), ("--btf", "/x.btf")] {
            assert_usage_error(&[sub, "--from", LAB_RECORDING, flag, value], flag);
        }
        assert_usage_error(&[sub, "--from", LAB_RECORDING, "--names"], "--names");
    }
    let folder = common::TempDir::new("twice");
    let dir = folder.0.clone();
    let rec = dir.join("web-1.jsonl");
    std::fs::copy(LAB_RECORDING, &rec).unwrap();
    let link = std::env::temp_dir().join(format!("tfo-test-{}-twice-link.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&rec, &link).unwrap();
    let (rec_s, dir_s, link_s) = (rec.to_str().unwrap(), dir.to_str().unwrap(), link.to_str().unwrap());
    for args in [
        &["report", "--from", rec_s, "--from", rec_s][..],
        &["report", "--from", dir_s, "--from", rec_s],
        &["report", "--from", link_s, "--from", rec_s],
    ] {
        assert_usage_error(args, "twice");
    }
    let _ = std::fs::remove_file(&link);
}

/// `--outcome` naming an outcome the backend that runs cannot see: one warning line, as
/// `doctor` would say it; an outcome it sees: none.
fn outcomes_the_backend_cannot_see_are_named() {
    require_kernel!();
    for outcome in ["cookie_received", "accepted_alt_key", "accepted"] {
        let out = tfo_trace(&["trace", "--outcome", outcome, "--duration", "1s"]);
        let err: Vec<String> = String::from_utf8_lossy(&out.stderr).lines().map(String::from).collect();
        assert_eq!(out.status.code(), Some(0), "{err:?}");
        let backend = common::backend_of(&err);
        let blind: Vec<&tfo_trace::backends::Blind> = tfo_trace::backends::blind_spots(backend)
            .iter()
            .filter(|b| b.outcome.name() == outcome)
            .collect();
        let warnings: Vec<&String> = err.iter().filter(|l| l.contains("cannot see")).collect();
        if blind.is_empty() {
            assert!(warnings.is_empty(), "{outcome} on {backend}: {err:?}");
        } else {
            assert_eq!(warnings.len(), 1, "{outcome} on {backend}: one line: {err:?}");
            assert!(warnings[0].contains(outcome) && warnings[0].contains(blind[0].why), "{}", warnings[0]);
        }
    }
}

/// Completions offer what a user may type: not the hidden helpers of xtask.
fn completions_leave_out_the_hidden_subcommands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = tfo_trace(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0));
        let script = String::from_utf8_lossy(&out.stdout);
        for hidden in ["lab-server", "lab-client", "lab-load", "lab-soak", "floor"] {
            assert!(!script.contains(hidden), "{shell} completion offers {hidden}");
        }
        for sub in ["trace", "stalls", "top", "report", "doctor", "export", "demo", "outcome"] {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
    }
}

/// `--record` never follows a symbolic link (a root-run tracer writing under /tmp) and
/// never replaces a file unless told to with `--force`: one line says why, exit 2, and the
/// files are as they were. A new file, or `--force`, records (mode 0600).
fn record_refuses_links_and_existing_files() {
    require_kernel!();
    use std::os::unix::fs::PermissionsExt as _;
    let folder = common::TempDir::new("record");
    let dir = &folder.0;
    let at = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let precious = at("precious.txt");
    std::fs::write(&precious, "keep me\n").unwrap();
    std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::symlink(&precious, at("link.jsonl")).unwrap();
    std::os::unix::fs::symlink(at("nowhere.txt"), at("dangling.jsonl")).unwrap();
    std::fs::write(at("old.jsonl"), "an older recording\n").unwrap();
    let refused = |args: &[&str], why: &str| {
        let out = tfo_trace(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(why), "{args:?}: {why:?} not in {err}");
    };
    for sub in ["trace", "stalls", "top"] {
        for force in [&[][..], &["--force"]] {
            let link = at("link.jsonl");
            refused(&[&[sub, "--duration", "1s", "--record", &link][..], force].concat(), "symbolic link");
            let dangling = at("dangling.jsonl");
            refused(
                &[&[sub, "--duration", "1s", "--record", &dangling][..], force].concat(),
                "symbolic link",
            );
        }
        refused(&[sub, "--duration", "1s", "--record", &at("old.jsonl")], "--force");
    }
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me\n");
    assert_eq!(std::fs::metadata(&precious).unwrap().permissions().mode() & 0o777, 0o644);
    assert!(!dir.join("nowhere.txt").exists(), "nothing made through a dangling link");
    assert_eq!(std::fs::read_to_string(at("old.jsonl")).unwrap(), "an older recording\n");

    for (file, extra) in [("new.jsonl", &[][..]), ("old.jsonl", &["--force"][..])] {
        let out = tfo_trace(&[&["trace", "--duration", "1s", "--record", &at(file)][..], extra].concat());
        assert_eq!(out.status.code(), Some(0), "{file}: {}", String::from_utf8_lossy(&out.stderr));
        let text = std::fs::read_to_string(at(file)).unwrap();
        assert!(text.starts_with("{\"tfo_trace_recording\":1"), "{file}: {text}");
        assert_eq!(std::fs::metadata(at(file)).unwrap().permissions().mode() & 0o777, 0o600, "{file}");
    }
}

/// The flags that take an address, a port or a number naming a thing, and the lab's
/// address flags (there is no CIDR flag today).
fn bad_addresses_ports_and_numbers_are_usage_errors() {
    for bad in [
        "localhost:17413",
        "127.0.0.1",
        "127.0.0.1:99999",
        "127.0.0.1:-1",
        "300.1.1.1:80",
        "::1:80",
        "[::1]",
        "",
    ] {
        assert_usage_error(&["export", "--web.listen-address", bad], "--web.listen-address");
        assert_usage_error(&["lab-client", "--dst", bad], "--dst");
        assert_usage_error(&["lab-server", "--listen", bad], "--listen");
    }
    for bad in ["abc", "-1", "4294967296", "0x10"] {
        assert_usage_error(&["export", "--netns", bad], "--netns");
    }
    for bad in ["0", "1001", "x"] {
        assert_usage_error(&["export", "--top-destinations", bad], "--top-destinations");
    }
    for bad in ["0", "-1", "x", "10000001"] {
        assert_usage_error(&["top", "--max-groups", bad], "--max-groups");
    }
    assert_usage_error(&["top", "-n", "0"], "--count");
    assert_usage_error(&["report", "--format", "yaml"], "--format");
}

/// Arguments that are not UTF-8 are named, not a panic.
fn non_utf8_arguments_are_usage_errors() {
    use std::{ffi::OsStr, os::unix::ffi::OsStrExt};
    let out = Command::new(common::exe())
        .args([OsStr::new("trace"), OsStr::new("--duration"), OsStr::from_bytes(b"5\xffs")])
        .output()
        .expect("running tfo-trace");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("error:") && !err.contains("panicked"), "{err}");
}

fn without_capabilities_one_line_names_what_is_missing() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::skip("needs root to drop to an unprivileged user");
    }
    // nobody (65534) with no capabilities at all.
    let out = Command::new(common::exe())
        .args(["trace", "--duration", "1s"])
        .uid(65534)
        .gid(65534)
        .output()
        .expect("running tfo-trace as nobody");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("CAP_BPF") && err.contains("sudo"), "{err}");
    assert!(out.stdout.is_empty());
}

fn doctor_reports_this_kernel_and_exits_zero() {
    let out = tfo_trace(&["doctor"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(text.contains(release.trim()), "kernel release shown");
    let bits = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_fastopen").unwrap();
    assert!(text.contains("net.ipv4.tcp_fastopen:"), "sysctl shown");
    assert!(text.contains(bits.trim()), "current value {bits} shown");
    assert!(text.contains("tcp_try_fastopen"), "hook points listed");
}

fn trace_stops_by_itself_and_reports_counts() {
    require_kernel!();
    let out = tfo_trace(&["trace", "--duration", "1s"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(" lost"), "events and lost counted: {err}");
    // It names the backend it attached with, whichever this kernel gives (`auto`).
    let lines: Vec<String> = err.lines().map(String::from).collect();
    let backend = common::backend_of(&lines);
    assert!(err.contains(&format!("{backend} backend")), "backend named: {err}");
}

fn completions_and_man_page_name_the_subcommands() {
    let out = tfo_trace(&["completions", "bash"]);
    assert_eq!(out.status.code(), Some(0));
    let script = String::from_utf8_lossy(&out.stdout);
    for sub in ["trace", "stalls", "doctor", "demo"] {
        assert!(script.contains(sub), "bash completion lacks {sub}");
    }
    let out = tfo_trace(&["man"]);
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.starts_with(".ie") || page.contains(".TH"), "roff output");
    assert!(page.contains("tfo\\-trace"));
    assert!(!page.contains("lab\\-client"), "hidden subcommands stay out of the man page");
    assert_eq!(tfo_trace(&["completions", "tcsh"]).status.code(), Some(2));
}

/// A pipe whose reader is already gone: what `| head -1` leaves once head has exited.
fn closed_pipe() -> std::process::Stdio {
    use std::os::fd::FromRawFd as _;
    let mut fds = [0i32; 2];
    // SAFETY: pipe writes two new descriptors into the array; each is owned right away.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fds[0] is ours and closed here; fds[1] is owned by the Stdio.
    unsafe {
        drop(std::os::fd::OwnedFd::from_raw_fd(fds[0]));
        std::process::Stdio::from(std::os::fd::OwnedFd::from_raw_fd(fds[1]))
    }
}

/// `args` with its stdout, its stderr, then both closed pipes: every time exit 0 and no
/// panic (a panic's message has nowhere to go, its exit code says it: 101). A command that
/// fails after writing all of its stdout still fails (`failing`: exit 1) when only its
/// stderr is gone: the closed pipe cut nothing short, and the failure is not a success.
fn ends_quietly_on_closed_pipes(args: &[&str], failing: bool) {
    for (out_closed, err_closed) in [(true, false), (false, true), (true, true)] {
        let mut cmd = Command::new(common::exe());
        cmd.args(args).stdin(std::process::Stdio::null());
        cmd.stdout(if out_closed { closed_pipe() } else { std::process::Stdio::null() });
        cmd.stderr(if err_closed { closed_pipe() } else { std::process::Stdio::piped() });
        let out = cmd.output().expect("running tfo-trace");
        let err = String::from_utf8_lossy(&out.stderr);
        let which = match (out_closed, err_closed) {
            (true, false) => "stdout",
            (false, true) => "stderr",
            _ => "stdout and stderr",
        };
        let code = if failing && !out_closed { 1 } else { 0 };
        assert_eq!(out.status.code(), Some(code), "{args:?} with {which} closed: {:?}: {err}", out.status);
        assert!(err.is_empty() || !err.contains("roken pipe"), "{args:?}: quietly, not {err:?}");
    }
}

/// One rule for every command: a reader that went away (`| head -1`, `2>&1 | head -1`) on
/// stdout or stderr ends it quietly with exit 0 (issue 31, item 4).
fn closed_stdout_or_stderr_ends_every_command_quietly() {
    let rec = common::TempFile::new("closed-pipes");
    std::fs::copy(LAB_RECORDING, &rec.0).unwrap();
    let bad = common::TempFile::new("closed-pipes-bad");
    let mut text = std::fs::read_to_string(LAB_RECORDING).unwrap();
    text.push_str("junk\n");
    std::fs::write(&bad.0, text).unwrap();
    let runs: [&[&str]; 8] = [
        &["doctor"],
        &["doctor", "--json"],
        &["man"],
        &["completions", "bash"],
        &["--help"],
        &["report", "--from", rec.path()],
        &["report", "--from", bad.path()],
        &["top", "--batch", "--from", rec.path()],
    ];
    for args in runs {
        ends_quietly_on_closed_pipes(args, args.contains(&bad.path()));
    }
    if common::skip_reason().is_some() {
        common::skip("the tracing commands need root and BTF (the others passed)");
    }
    for args in [
        &["trace", "--duration", "2s"][..],
        &["trace", "--json", "--duration", "2s"],
        &["stalls", "--duration", "2s"],
        &["top", "--batch", "--duration", "2s"],
        &["report", "--duration", "2s"],
    ] {
        ends_quietly_on_closed_pipes(args, false);
    }
}

const LAB_RECORDING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/seeds/recording/lab.jsonl");

module_tests!(
    closed_stdout_or_stderr_ends_every_command_quietly,
    record_refuses_links_and_existing_files,
    usage_messages_speak_the_users_language,
    flags_that_can_do_nothing_are_usage_errors,
    outcomes_the_backend_cannot_see_are_named,
    completions_leave_out_the_hidden_subcommands,
    unknown_flags_are_usage_errors,
    bad_durations_are_usage_errors,
    bad_ring_buffer_sizes_are_usage_errors,
    ring_buffer_sizes_out_of_range_say_the_range,
    netns_inodes_that_name_no_namespace_are_usage_errors,
    bad_backends_are_usage_errors,
    bad_addresses_ports_and_numbers_are_usage_errors,
    non_utf8_arguments_are_usage_errors,
    without_capabilities_one_line_names_what_is_missing,
    doctor_reports_this_kernel_and_exits_zero,
    trace_stops_by_itself_and_reports_counts,
    completions_and_man_page_name_the_subcommands,
);
