//! The command line as users meet it: usage errors, missing privileges, doctor.
mod common;

use std::{os::unix::process::CommandExt, process::Command};

fn tfo_trace(args: &[&str]) -> std::process::Output {
    Command::new(common::exe()).args(args).output().expect("running tfo-trace")
}

fn unknown_flag_is_a_usage_error() {
    let out = tfo_trace(&["trace", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-such-flag"));
}

fn bad_values_are_usage_errors_with_one_clear_line() {
    for args in [
        &["trace", "--duration", "soon"][..],
        &["trace", "--ring-buffer-size", "1000"],
        &["trace", "--backend", "dtrace"],
    ] {
        let out = tfo_trace(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error:"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
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
    unknown_flag_is_a_usage_error,
    bad_values_are_usage_errors_with_one_clear_line,
    without_capabilities_one_line_names_what_is_missing,
    doctor_reports_this_kernel_and_exits_zero,
    trace_stops_by_itself_and_reports_counts,
    completions_and_man_page_name_the_subcommands,
);
