//! The command line as users meet it: usage errors, missing privileges, doctor.
mod common;

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
            "inf",
            "NaN",
            "5d",
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

fn bad_backends_are_usage_errors() {
    for sub in ["trace", "stalls", "top", "report", "export", "demo"] {
        for bad in ["dtrace", "", "FENTRY", "kprobe,fentry", "tracepoint "] {
            assert_usage_error(&[sub, "--backend", bad], "--backend");
        }
    }
}

/// The flags that take an address, a port or a number naming a thing, and the lab's
/// address flags (there is no CIDR flag today).
fn bad_addresses_ports_and_numbers_are_usage_errors() {
    for bad in [
        "localhost:9435",
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
    assert!(err.contains("tracepoint backend"), "backend named: {err}");
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

tests_main!(
    unknown_flags_are_usage_errors,
    bad_durations_are_usage_errors,
    bad_ring_buffer_sizes_are_usage_errors,
    bad_backends_are_usage_errors,
    bad_addresses_ports_and_numbers_are_usage_errors,
    non_utf8_arguments_are_usage_errors,
    without_capabilities_one_line_names_what_is_missing,
    doctor_reports_this_kernel_and_exits_zero,
    trace_stops_by_itself_and_reports_counts,
    completions_and_man_page_name_the_subcommands,
);
