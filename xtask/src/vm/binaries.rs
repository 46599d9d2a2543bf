//! Step 3, test binaries: the integration test executables for the guest's architecture
//! (the host's: the host run's own `cargo test --no-run` selection, so nothing is rebuilt;
//! another: the static musl cross build, xtask/src/cross.rs), the ones the VM runs, and
//! their tests as each binary lists them (another architecture's under qemu-user); the
//! user's `-- ARGS` split into what selects tests and what goes to every run.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{ensure, Context, Result};

use super::arch::Arch;
use crate::cross::{self, What};
use crate::util::{capture, cargo};

/// The scenario tests (tracer against the kernel's counters): run once per backend, with
/// TFO_TRACE_BACKEND set (tests/common passes it as `--backend`).
pub(super) const VM_PER_BACKEND: &[&str] = &[
    "kernel_scenarios",
    "server_outcomes",
    "stalls",
    "report",
    "refusal_causes",
    "server_speaks_first",
    "plain_cost",
];
/// Run once per kernel, without a backend: the lab itself (veth, netem, nft on this kernel).
/// `names` too: its socket filter and packet sockets are the same on every backend.
pub(super) const VM_ONCE: &[&str] = &["lab", "kernel_facts", "names"];
// Every other tests/*.rs is host-only by default (views, formats, CLI, capabilities, the
// Prometheus exporter: nothing there depends on the kernel's hooks); `--bins` runs any.

#[derive(Clone, Debug)]
pub(super) struct TestBin {
    pub(super) name: String,
    pub(super) path: PathBuf,
}

pub(super) struct Build {
    pub(super) tests: Vec<TestBin>,
    /// target/debug/tfo-trace (or target/<triple>/debug/tfo-trace): the path
    /// `CARGO_BIN_EXE_tfo-trace` names.
    pub(super) tfo_trace: PathBuf,
    /// The cross build's architecture, when not the host's: its executables run here only
    /// under qemu-user.
    pub(super) cross: Option<cross::Arch>,
}

/// The test executables for `arch`: for another architecture, only those `wanted` names
/// (empty: the default VM selection).
pub(super) fn build_tests(root: &Path, arch: &Arch, wanted: &[String]) -> Result<Build> {
    match arch.cross {
        None => host_build(root),
        Some(c) => cross_build(c, wanted),
    }
}

/// The static musl test executables of another architecture (`cargo xtask cross --tests`).
fn cross_build(arch: cross::Arch, wanted: &[String]) -> Result<Build> {
    let names: Vec<String> = if wanted.is_empty() {
        VM_PER_BACKEND.iter().chain(VM_ONCE).map(|n| n.to_string()).collect()
    } else {
        wanted.to_vec()
    };
    let built = cross::cross_build(&[arch], What::TestsNamed(&names))?;
    let mut tests: Vec<TestBin> = built
        .iter()
        .filter(|b| b.integration)
        .map(|b| TestBin { name: b.name.clone(), path: b.exe.clone() })
        .collect();
    tests.sort_by(|a, b| a.name.cmp(&b.name));
    ensure!(!tests.is_empty(), "the {} cross build made no integration test executable", arch.name());
    let tfo_trace = built
        .iter()
        .find(|b| !b.test && b.name == "tfo-trace")
        .map(|b| b.exe.clone())
        .with_context(|| format!("the {} cross build made no tfo-trace executable", arch.name()))?;
    Ok(Build { tests, tfo_trace, cross: Some(arch) })
}

fn host_build(root: &Path) -> Result<Build> {
    let mut cmd = cargo();
    // The same package selection as the host run in `cargo xtask test`, so the artifacts
    // (and the eBPF object built by tfo-trace's build.rs) are reused, not rebuilt with
    // other features; tfo-trace's own integration tests are picked from the list below.
    cmd.current_dir(root).args([
        "test",
        "--workspace",
        "--exclude",
        "tfo-trace-ebpf",
        "--no-run",
        "--message-format=json",
    ]);
    println!("+ {}", crate::util::display(&cmd));
    let out = cmd.stderr(Stdio::inherit()).output().context("starting cargo test --no-run")?;
    ensure!(out.status.success(), "cargo test --no-run failed: {}", out.status);
    let mut tests = Vec::new();
    let mut tfo_trace = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(exe) = msg["executable"].as_str() else { continue };
        let manifest = msg["manifest_path"].as_str().unwrap_or_default();
        if !manifest.ends_with("/tfo-trace/Cargo.toml") {
            continue;
        }
        let kinds = msg["target"]["kind"].as_array().cloned().unwrap_or_default();
        let name = msg["target"]["name"].as_str().unwrap_or_default().to_string();
        let is_test = msg["profile"]["test"] == true;
        if kinds.iter().any(|k| k == "test") {
            tests.push(TestBin { name, path: exe.into() });
        } else if kinds.iter().any(|k| k == "bin") && !is_test && name == "tfo-trace" {
            tfo_trace = Some(PathBuf::from(exe));
        }
    }
    tests.sort_by(|a, b| a.name.cmp(&b.name));
    ensure!(!tests.is_empty(), "cargo test --no-run listed no integration test executable");
    let tfo_trace = tfo_trace.unwrap_or_else(|| root.join("target/debug/tfo-trace"));
    ensure!(tfo_trace.exists(), "{} was not built", tfo_trace.display());
    Ok(Build { tests, tfo_trace, cross: None })
}

/// The binaries `--bins` names, or the default VM selection: every one of them must have
/// been built (a binary of the matrix that is missing is an error, not a smaller matrix).
pub(super) fn select_bins<'a>(build: &'a Build, wanted: &[String]) -> Result<Vec<&'a TestBin>> {
    let names: Vec<&str> = if wanted.is_empty() {
        let host: Vec<&str> = build
            .tests
            .iter()
            .map(|t| t.name.as_str())
            .filter(|n| !VM_PER_BACKEND.contains(n) && !VM_ONCE.contains(n))
            .collect();
        if !host.is_empty() {
            println!("vm: host-only test binaries (not run in the VM): {}", host.join(", "));
        }
        VM_PER_BACKEND.iter().chain(VM_ONCE).copied().collect()
    } else {
        wanted.iter().map(String::as_str).collect()
    };
    names
        .into_iter()
        .map(|name| {
            build.tests.iter().find(|t| t.name == name).with_context(|| {
                let all: Vec<_> = build.tests.iter().map(|t| t.name.as_str()).collect();
                format!("no integration test binary `{name}` (there are: {})", all.join(", "))
            })
        })
        .collect()
}

/// A binary of the matrix lists no test: without a filter of the user's (`-- NAME`), that
/// is a broken binary, never a cell with nothing to do.
pub(super) fn check_listed(listed: &[(TestBin, Vec<String>)], filter: &[String]) -> Result<()> {
    if !list_args(filter).is_empty() {
        return Ok(());
    }
    let empty: Vec<&str> =
        listed.iter().filter(|(_, t)| t.is_empty()).map(|(b, _)| b.name.as_str()).collect();
    ensure!(empty.is_empty(), "test binaries that list no test (`--list`): {}", empty.join(", "));
    Ok(())
}

/// The tests of one binary that `filter` selects, as the binary itself lists them
/// (`--list`: `name: test` lines).
pub(super) fn list_tests(build: &Build, bin: &TestBin, filter: &[String]) -> Result<Vec<String>> {
    let mut cmd = match build.cross {
        None => Command::new(&bin.path),
        Some(arch) => arch.command(&bin.path),
    };
    let out = capture(cmd.arg("--list").args(list_args(filter)))
        .with_context(|| format!("listing the tests of {}", bin.name))?;
    Ok(out.lines().filter_map(|l| l.strip_suffix(": test")).map(str::to_string).collect())
}

/// What of the user's `-- ARGS` selects tests (the filter, `--exact`, `--skip X`); the rest
/// (`--nocapture`, ...) only changes how each test runs.
pub(super) fn list_args(filter: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = filter.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--exact" | "--ignored" | "--include-ignored" => out.push(a.clone()),
            "--skip" => {
                out.push(a.clone());
                out.extend(it.next().cloned());
            }
            s if !s.starts_with('-') => out.push(a.clone()),
            _ => {}
        }
    }
    out
}

/// Flags of the user's `-- ARGS` that go to every test run (not the selection).
pub(super) fn run_args(filter: &[String]) -> Vec<String> {
    let selecting = list_args(filter);
    let mut out = Vec::new();
    let mut it = filter.iter();
    while let Some(a) = it.next() {
        if a == "--skip" {
            it.next();
        } else if !selecting.contains(a) {
            out.push(a.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_binary_of_the_matrix_must_be_built_and_list_tests() {
        let bin = |n: &str| TestBin { name: n.into(), path: format!("/x/{n}").into() };
        let all: Vec<TestBin> =
            VM_PER_BACKEND.iter().chain(VM_ONCE).chain(&["cli"]).map(|n| bin(n)).collect();
        let build = Build { tests: all.clone(), tfo_trace: "/x/tfo-trace".into(), cross: None };
        assert_eq!(select_bins(&build, &[]).unwrap().len(), VM_PER_BACKEND.len() + VM_ONCE.len());
        let without_stalls: Vec<TestBin> = all.iter().filter(|b| b.name != "stalls").cloned().collect();
        let build = Build { tests: without_stalls, ..build };
        let err = select_bins(&build, &[]).unwrap_err().to_string();
        assert!(err.starts_with("no integration test binary `stalls`"), "{err}");
        let listed = vec![(bin("lab"), vec!["a".to_string()]), (bin("names"), Vec::new())];
        let err = check_listed(&listed, &[]).unwrap_err().to_string();
        assert_eq!(err, "test binaries that list no test (`--list`): names");
        assert!(
            check_listed(&listed, &["--exact".into(), "a".into()]).is_ok(),
            "a filter may select nothing here"
        );
    }

    #[test]
    fn user_arguments_split_into_selection_and_run_flags() {
        let args: Vec<String> =
            ["stalls_", "--exact", "--nocapture", "--skip", "slow"].map(String::from).to_vec();
        assert_eq!(list_args(&args), ["stalls_", "--exact", "--skip", "slow"]);
        assert_eq!(run_args(&args), ["--nocapture"]);
    }
}
