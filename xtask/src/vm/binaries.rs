//! Step 3, the tests: the integration test executable for the guest's architecture (the
//! host's: the host run's own `cargo test --no-run` selection, so nothing is rebuilt;
//! another: the static musl cross build, xtask/src/cross.rs), the modules of it the VM
//! runs, and their tests as the executable lists them (another architecture's under
//! qemu-user); the user's `-- ARGS` split into what selects tests and what goes to every
//! run.
//!
//! The integration tests are one executable of modules, one per former test binary
//! (`tests/integration/stalls.rs`: module `stalls`), its tests named `MODULE::TEST`
//! (crate::testlines). The VM's cells, its allow-list of skips and its tables speak of
//! modules and of each test's name in its module, as they spoke of binaries.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, ensure, Context, Result};

use super::arch::Arch;
use crate::cross::{self, What};
use crate::testlines::{split_test, INTEGRATION};
use crate::util::{capture, cargo};

/// The scenario tests (tracer against the kernel's counters): run once per backend, with
/// TFO_TRACE_BACKEND set (tests/integration/common passes it as `--backend`).
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
// Every other module is host-only by default (views, formats, CLI, capabilities, the
// Prometheus exporter: nothing there depends on the kernel's hooks); `--bins` runs any.

/// One module of the integration executable (a former test binary).
#[derive(Clone, Debug)]
pub(super) struct TestModule {
    /// The module's name (`stalls`), the prefix of its tests' names.
    pub(super) name: String,
    /// The integration executable.
    pub(super) path: PathBuf,
}

pub(super) struct Build {
    /// The integration executable.
    pub(super) integration: PathBuf,
    /// target/debug/tfo-trace (or target/<triple>/debug/tfo-trace): the path
    /// `CARGO_BIN_EXE_tfo-trace` names.
    pub(super) tfo_trace: PathBuf,
    /// The cross build's architecture, when not the host's: its executables run here only
    /// under qemu-user.
    pub(super) cross: Option<cross::Arch>,
}

/// The integration executable and `tfo-trace` for `arch`.
pub(super) fn build_tests(root: &Path, arch: &Arch) -> Result<Build> {
    match arch.cross {
        None => host_build(root),
        Some(c) => cross_build(c),
    }
}

/// The static musl integration executable of another architecture (`cargo xtask cross
/// --tests`).
fn cross_build(arch: cross::Arch) -> Result<Build> {
    let built = cross::cross_build(&[arch], What::Integration)?;
    let integration =
        built.iter().find(|b| b.integration && b.name == INTEGRATION).map(|b| b.exe.clone()).with_context(
            || format!("the {} cross build made no `{INTEGRATION}` test executable", arch.name()),
        )?;
    let tfo_trace = built
        .iter()
        .find(|b| !b.test && b.name == "tfo-trace")
        .map(|b| b.exe.clone())
        .with_context(|| format!("the {} cross build made no tfo-trace executable", arch.name()))?;
    Ok(Build { integration, tfo_trace, cross: Some(arch) })
}

fn host_build(root: &Path) -> Result<Build> {
    let mut cmd = cargo();
    // The same package selection as the host run in `cargo xtask test`, so the artifacts
    // (and the eBPF object built by tfo-trace's build.rs) are reused, not rebuilt with
    // other features; tfo-trace's integration executable is picked from the list below.
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
    let mut integration = None;
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
        let name = msg["target"]["name"].as_str().unwrap_or_default();
        let is_test = msg["profile"]["test"] == true;
        if kinds.iter().any(|k| k == "test") && name == INTEGRATION {
            integration = Some(PathBuf::from(exe));
        } else if kinds.iter().any(|k| k == "bin") && !is_test && name == "tfo-trace" {
            tfo_trace = Some(PathBuf::from(exe));
        }
    }
    let integration = integration
        .with_context(|| format!("cargo test --no-run built no `{INTEGRATION}` test executable"))?;
    let tfo_trace = tfo_trace.unwrap_or_else(|| root.join("target/debug/tfo-trace"));
    ensure!(tfo_trace.exists(), "{} was not built", tfo_trace.display());
    Ok(Build { integration, tfo_trace, cross: None })
}

/// The modules `--bins` names (or the default VM selection), each with its tests among
/// `selected` (names as the executable lists them). Every module asked for must be among
/// `every` test's (a module of the matrix that is missing is an error, not a smaller
/// matrix); a filter of the user's may leave one with nothing to run.
pub(super) fn select_modules(
    integration: &Path,
    every: &[String],
    selected: &[String],
    wanted: &[String],
) -> Result<Vec<(TestModule, Vec<String>)>> {
    let mut modules: Vec<&str> = every.iter().filter_map(|t| Some(split_test(t)?.0)).collect();
    modules.dedup();
    ensure!(!modules.is_empty(), "the integration test executable lists no test (`--list`)");
    let names: Vec<&str> = if wanted.is_empty() {
        let host: Vec<&str> =
            modules.iter().copied().filter(|n| !VM_PER_BACKEND.contains(n) && !VM_ONCE.contains(n)).collect();
        if !host.is_empty() {
            println!("vm: host-only test modules (not run in the VM): {}", host.join(", "));
        }
        VM_PER_BACKEND.iter().chain(VM_ONCE).copied().collect()
    } else {
        wanted.iter().map(String::as_str).collect()
    };
    if let Some(missing) = names.iter().find(|n| !modules.contains(n)) {
        bail!("no integration test module `{missing}` (there are: {})", modules.join(", "));
    }
    Ok(names
        .into_iter()
        .map(|name| {
            let tests = selected
                .iter()
                .filter_map(|t| split_test(t).filter(|(m, _)| *m == name).map(|(_, test)| test.to_string()))
                .collect();
            (TestModule { name: name.to_string(), path: integration.to_path_buf() }, tests)
        })
        .collect())
}

/// The tests of the integration executable that `filter` selects, as it lists them
/// (`--list`: `MODULE::TEST: test` lines).
pub(super) fn list_tests(build: &Build, filter: &[String]) -> Result<Vec<String>> {
    let mut cmd = match build.cross {
        None => Command::new(&build.integration),
        Some(arch) => arch.command(&build.integration),
    };
    let out = capture(cmd.arg("--list").args(list_args(filter))).context("listing the integration tests")?;
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
    fn every_module_of_the_matrix_must_be_in_the_executable() {
        let exe = Path::new("/x/integration");
        let names = |modules: &[&str]| -> Vec<String> {
            modules.iter().flat_map(|m| [format!("{m}::{m}_a"), format!("{m}::{m}_b")]).collect()
        };
        let all: Vec<&str> = VM_PER_BACKEND.iter().chain(VM_ONCE).chain(&["cli"]).copied().collect();
        let every = names(&all);
        let selected = select_modules(exe, &every, &every, &[]).unwrap();
        assert_eq!(selected.len(), VM_PER_BACKEND.len() + VM_ONCE.len(), "cli is host-only");
        let (stalls, tests) = selected.iter().find(|(m, _)| m.name == "stalls").unwrap();
        assert_eq!(
            (stalls.path.as_path(), tests.as_slice()),
            (exe, &["stalls_a".to_string(), "stalls_b".into()][..])
        );
        let cli = select_modules(exe, &every, &["cli::cli_b".into()], &["cli".into()]).unwrap();
        assert_eq!(cli[0].1, ["cli_b"], "the tests a filter selected");
        let lab = select_modules(exe, &every, &[], &["lab".into()]).unwrap();
        assert!(lab[0].1.is_empty(), "a filter may select nothing here");
        let without_stalls: Vec<&str> = all.iter().copied().filter(|m| *m != "stalls").collect();
        let every = names(&without_stalls);
        let err = select_modules(exe, &every, &every, &[]).unwrap_err().to_string();
        assert!(err.starts_with("no integration test module `stalls`"), "{err}");
    }

    #[test]
    fn user_arguments_split_into_selection_and_run_flags() {
        let args: Vec<String> =
            ["stalls_", "--exact", "--nocapture", "--skip", "slow"].map(String::from).to_vec();
        assert_eq!(list_args(&args), ["stalls_", "--exact", "--skip", "slow"]);
        assert_eq!(run_args(&args), ["--nocapture"]);
    }
}
