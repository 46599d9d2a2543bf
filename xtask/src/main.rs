//! `cargo xtask`: the project's developer tasks.
//!
//! - `setup`: installs what building and testing need (nightly + rust-src, bpf-linker
//!   built against the nightly's LLVM, Debian packages); fast when all is present.
//! - `build`: the demo's share of setup (the toolchain and the lab's packages:
//!   setup.rs's `Need::Demo`), then a release build of tfo-trace (its build.rs builds and
//!   embeds the eBPF object).
//! - `lint`: the gates: `cargo fmt --check`, clippy with `-D warnings` on the host crates
//!   and on the eBPF crate for the bpf target. Which lints: `[workspace.lints]` in the top
//!   Cargo.toml, so a plain `cargo clippy` applies them too.
//! - `test`: setup, the gates (`lint`), `dist` (once, for tests/integration/dist.rs) and a
//!   cached Debian 11 userspace (userspace.rs), then the whole test suite (unit + root-only
//!   kernel tests), then the VM kernel matrix (`vm`) unless `--no-vm` or `TFO_NO_VM=1`.
//!   Closes with passed, failed, skipped (each with its reason, partial skips too) and
//!   second runs (each with its cause; testlines.rs has their rule). Under `CI=true` what
//!   would only warn elsewhere fails the run: not root (every kernel test would skip), no
//!   Debian 11 userspace (tests/integration/dist.rs's checks in it would skip), the VM
//!   matrix skipped. Anywhere, a skip (whole or partial) that the one list of skips
//!   (skips.rs, the VM cells' too) does not allow on the host fails the run, named with
//!   its test and reason.
//! - `vm`: boots Debian's 5.10, 6.1 and 6.12 kernels under qemu and runs the kernel tests there,
//!   once per tracer backend (see docs/vm.md).
//! - `dist`: setup, then static x86_64 and aarch64 binaries, .debs, OCI images and
//!   SHA256SUMS in target/dist/ (dist/; the cross builds: cross.rs).
//! - `cross [--arch A] [--tests]`: the static musl build of dist alone (or of the test
//!   executables, for an arm64 VM or qemu-user), one `arch bin|test name path` line each.
//! - `demo`: the set-up of `build`, a build in the `demo` profile (Cargo.toml: cheaper to
//!   compile than the release build), then runs `tfo-trace demo` as root; it installs
//!   nothing only the tests use (`test` does that).
//! - `bench`: release build, then measures tfo-trace against no tracer, empty programs on
//!   the same hooks and bpftrace, and writes BENCHMARKS.md. `bench-report`: its `report
//!   --from` a million destinations step alone.
//! - `bench-static`: dist's static binary against the glibc build: sizes, start-up,
//!   `report`/`top --from` a million destinations (musl's allocator); BENCHMARKS.md.
//! - `soak`: release build, then 30 minutes of mixed lab traffic under `top` and `export`
//!   (memory, fds, counts against the kernel's), and writes SOAK.md.
//! - `grafana`: writes deploy/grafana/tfo-trace.json from deploy/grafana/dashboard.py
//!   (Grafana's foundation SDK, pinned, installed with pip when missing).
//! - `fuzz [--seconds N]`: setup and cargo-fuzz (installed when absent), then a bounded
//!   libFuzzer run of the recording reader, the replay of what it reads (report, top) and
//!   the ring-buffer event decoder (fuzz/); a crash is kept in fuzz/regressions/, which
//!   `test` replays on stable.
mod apt;
mod bench;
mod cross;
mod dist;
mod fuzz;
mod grafana;
mod setup;
mod skips;
mod soak;
mod testlines;
mod userspace;
mod util;
mod vm;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

use testlines::{partial_test, second_run_test, skipped_test, SecondRun};
use util::{cargo, is_root, run, which, workspace_root};

#[derive(Parser)]
#[command(name = "xtask", bin_name = "cargo xtask", about = "Developer tasks for tfo-trace")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what is missing: nightly + rust-src, bpf-linker, Debian packages (idempotent)
    Setup,
    /// The toolchain and the demo's packages, then `cargo build --release -p tfo-trace`
    Build,
    /// Setup, then the gates (fmt, clippy), the whole test suite (kernel tests need root), the VM matrix
    Test {
        /// Skip the VM kernel matrix (also: env TFO_NO_VM=1)
        #[arg(long)]
        no_vm: bool,
        /// Extra arguments for `cargo test` (after `--`; a second `--` for the test
        /// binaries: `-- --test integration -- stalls::` runs the integration tests of
        /// tests/integration/stalls.rs)
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// The gates: `cargo fmt --check` and clippy -D warnings (host crates, and the eBPF crate for bpf)
    Lint,
    /// Setup, then target/dist/: static x86_64 and aarch64 binaries, .debs, OCI images, SHA256SUMS
    Dist(dist::DistArgs),
    /// Setup, then a static musl build for each --arch (default all): tfo-trace, or with
    /// --tests the test executables; prints their paths (run aarch64 ones with qemu-aarch64-static)
    Cross {
        #[arg(long, value_enum)]
        arch: Vec<cross::Arch>,
        /// The test executables (`cargo test --no-run`) instead of tfo-trace
        #[arg(long)]
        tests: bool,
    },
    /// Boot Debian's 5.10 / 6.1 / 6.12 kernels under qemu and run the kernel tests inside, per backend
    Vm(vm::VmArgs),
    /// Benchmark as root: connection rate, BPF cost, loss, CPU/RSS and start-up of tfo-trace
    /// vs no tracer and bpftrace; prints a table and writes BENCHMARKS.md
    Bench(bench::BenchArgs),
    /// Only the benchmark's report step: `report --from` a generated recording of 1,000,000
    /// destinations (text and JSON), peak RSS and time against the targets; no root needed
    BenchReport,
    /// The static binary of `dist` against the glibc build (as root): sizes, start-up to
    /// attached, `report`/`top --from` a million destinations; writes its BENCHMARKS.md block
    BenchStatic,
    /// Inside `bench --vm`'s guest: the rounds, then the section on the console
    #[command(hide = true)]
    BenchGuest(bench::GuestArgs),
    /// Long mixed lab traffic under `top` and `export` (default 30 min, as root); writes SOAK.md
    Soak(soak::SoakArgs),
    /// Fuzz the recording reader, report/top on what it reads, and the event decoder for N
    /// seconds in all (cargo-fuzz, nightly); prints runs and exec/s, keeps any crash in
    /// fuzz/regressions/
    Fuzz(fuzz::FuzzArgs),
    /// Write deploy/grafana/tfo-trace.json from deploy/grafana/dashboard.py (Grafana's
    /// foundation SDK, installed with pip when missing)
    Grafana,
    /// The toolchain and the demo's packages, the `demo` profile's build, then `tfo-trace demo` as root
    Demo {
        /// Extra arguments for `tfo-trace demo` (after `--`)
        #[arg(last = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli.task) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(task: Task) -> Result<()> {
    match task {
        Task::Setup => setup::setup(),
        Task::Build => build(),
        Task::Test { no_vm, args } => test(&args, no_vm || env_flag("TFO_NO_VM")),
        Task::Lint => {
            setup::setup()?;
            let problems = lint();
            if !problems.is_empty() {
                bail!("{}", problems.join("\n"));
            }
            Ok(())
        }
        Task::Vm(args) => {
            args.check()?;
            setup::setup()?;
            vm::vm(&args)
        }
        Task::Dist(args) => dist::dist(&args),
        Task::Cross { arch, tests } => {
            setup::setup()?;
            let arches = if arch.is_empty() { cross::Arch::ALL.to_vec() } else { arch };
            let what = if tests { cross::What::Tests } else { cross::What::Tracer };
            for b in cross::cross_build(&arches, what)? {
                let kind = if b.test { "test" } else { "bin" };
                println!("{} {kind} {} {}", b.arch.name(), b.name, b.exe.display());
            }
            Ok(())
        }
        Task::Demo { args } => demo(&args),
        Task::Bench(args) => bench::bench(&args),
        Task::BenchReport => bench::bench_report(),
        Task::BenchStatic => bench::bench_static(),
        Task::BenchGuest(args) => bench::bench_guest(&args),
        Task::Soak(args) => {
            setup::setup()?;
            soak::soak(&args)
        }
        Task::Fuzz(args) => fuzz::fuzz(&args),
        Task::Grafana => grafana::grafana(),
    }
}

/// The demo's share of the set-up (a fresh machine gets nothing only the tests use), then
/// the release build.
fn build() -> Result<()> {
    setup::setup_for(setup::Need::Demo)?;
    build_tfo_trace("release").map(drop)
}

/// `cargo build --profile <profile> -p tfo-trace`; returns target/<profile>/tfo-trace.
fn build_tfo_trace(profile: &str) -> Result<PathBuf> {
    let mut cmd = cargo();
    cmd.current_dir(workspace_root()).args(["build", "--profile", profile, "-p", "tfo-trace"]);
    run(&mut cmd)?;
    Ok(util::target_dir().join(profile).join("tfo-trace"))
}

/// `NAME` set to something other than empty, `0` or `false`.
fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// What the run cannot vouch for where it runs as CI (`CI=true`): each a problem there, a
/// warning elsewhere (a developer's machine may lack root, a VM, a Debian mirror).
fn ci_rule(ci: bool, problems: &mut Vec<String>, what: String) {
    if ci {
        problems.push(format!("CI: {what}"));
    } else {
        println!("warning: {what}");
    }
}

/// Host tests, then the VM matrix (even when host tests failed: both verdicts in one run);
/// then where the time went, the tests that could not run here with their reasons, and
/// the closing tally of everything, printed last.
fn test(args: &[String], no_vm: bool) -> Result<()> {
    let start = Instant::now();
    let ci = env_flag("CI");
    setup::setup()?;
    let setup_s = start.elapsed().as_secs_f64();
    let lint_problems = lint();
    let lint_s = start.elapsed().as_secs_f64() - setup_s;
    // What `dist` ships, built once here; tests/integration/dist.rs checks it, in the
    // Debian 11 userspace cached here too. A failure fails the run; the tests still run.
    let mut dist_problems = Vec::new();
    if let Err(e) = dist::build(&cross::Arch::ALL) {
        dist_problems.push(format!("dist: {e:#}"));
    }
    let dist_s = start.elapsed().as_secs_f64() - setup_s - lint_s;
    if let Err(e) = userspace::ensure(userspace::SUITE) {
        let what = format!("no Debian {} userspace, its checks will skip: {e:#}", userspace::SUITE);
        ci_rule(ci, &mut dist_problems, what);
    }
    if !is_root() {
        let what = "not root: the kernel integration tests (network namespaces, eBPF) will skip".to_string();
        ci_rule(ci, &mut dist_problems, what);
    }
    let userspace_s = start.elapsed().as_secs_f64() - setup_s - lint_s - dist_s;
    let host = run_tests(args)?;
    let host_s = start.elapsed().as_secs_f64() - setup_s - lint_s - dist_s - userspace_s;
    let (mut tally, mut problems, mut skipped) = (host.tally, host.problems, host.skipped);
    let (mut partial, mut second_runs) = (host.partial, host.second_runs);
    // A skip the list does not allow on the host is a test that did not run where it
    // should (a package set-up should have installed, no root, no BTF): as in a VM cell.
    tally.failed += host.unlisted.len() as u64;
    problems.extend(
        host.unlisted.iter().map(|s| format!("host: {s} (not on the list of skips, xtask/src/skips.rs)")),
    );
    // A gate that fails fails the run, but the tests still run: both verdicts at once.
    tally.failed += (lint_problems.len() + dist_problems.len()) as u64;
    problems.extend(lint_problems);
    problems.extend(dist_problems);
    if no_vm {
        ci_rule(ci, &mut problems, "vm: skipped (--no-vm / TFO_NO_VM): no test ran on another kernel".into());
    } else {
        match vm::test_matrix() {
            Ok(r) => {
                tally.passed += r.passed;
                tally.failed += r.failed;
                tally.ignored += r.ignored;
                problems.extend(r.problems.into_iter().map(|p| format!("vm: {p}")));
                skipped.extend(r.skipped.into_iter().map(|s| format!("vm {s}")));
                partial.extend(r.partial.into_iter().map(|s| format!("vm {s}")));
                second_runs.extend(r.second_runs);
            }
            Err(e) => {
                tally.failed += 1;
                problems.push(format!("vm: {e:#}"));
            }
        }
    }
    problems.extend(testlines::second_run_problems(&second_runs));
    let total_s = start.elapsed().as_secs_f64();
    println!();
    println!(
        "time: setup {setup_s:.1} s, gates {lint_s:.1} s, dist {dist_s:.1} s, Debian userspace {userspace_s:.1} s, \
         host build and tests {host_s:.1} s, VM {:.1} s, total {total_s:.1} s",
        total_s - setup_s - lint_s - dist_s - userspace_s - host_s
    );
    if let Some(build_s) = host.build_s {
        println!("time: host build {build_s:.1} s; slowest host test binaries and integration test modules:");
    }
    let mut bins = host.binary_s;
    bins.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (name, s) in bins.iter().take(5) {
        println!("time:   {s:>7.1} s  {name}");
    }
    if !skipped.is_empty() {
        println!("skipped ({}), each with the reason it cannot run here:", skipped.len());
        for s in &skipped {
            println!("  {s}");
        }
    }
    if !partial.is_empty() {
        println!(
            "partly skipped ({}): checks of tests that passed on the rest, each with its reason:",
            partial.len()
        );
        for s in &partial {
            println!("  {s}");
        }
    }
    if !second_runs.is_empty() {
        println!(
            "second runs ({}, at most {} allowed): tests whose first run failed with the kernel's skipped \
             hook run, run again:",
            second_runs.len(),
            testlines::SECOND_RUN_BUDGET
        );
        for r in &second_runs {
            println!("  {r}");
        }
    }
    println!(
        "summary: {} passed, {} failed, {} skipped, {} checks partly skipped, {} second runs",
        tally.passed,
        tally.failed,
        tally.ignored,
        partial.len(),
        second_runs.len()
    );
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    Ok(())
}

/// The gates, each run even when one before it failed; returns what failed, one line each.
fn lint() -> Vec<String> {
    let root = workspace_root();
    let mut fmt = cargo();
    fmt.current_dir(&root).args(["fmt", "--all", "--check"]);
    let mut host = cargo();
    host.current_dir(&root).args([
        "clippy",
        "--workspace",
        "--exclude",
        "tfo-trace-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    // The eBPF crate is no_std for the bpf target: linted there, with core built from
    // source as tfo-trace/build.rs does, in a target directory of its own.
    let mut ebpf = util::nightly("cargo");
    // --all-features: the floor's programs (a `fixtures` build's) are linted too.
    ebpf.current_dir(&root).args([
        "clippy",
        "-p",
        "tfo-trace-ebpf",
        "--all-features",
        "--target",
        "bpfel-unknown-none",
    ]);
    ebpf.args(["-Z", "build-std=core", "--target-dir"]).arg(root.join("target/ebpf-clippy"));
    ebpf.args(["--", "-D", "warnings"]);
    let mut problems = Vec::new();
    for (gate, mut cmd) in [("cargo fmt --check", fmt), ("clippy (host)", host), ("clippy (eBPF)", ebpf)] {
        if let Err(e) = run(&mut cmd) {
            problems.push(format!("gate {gate}: {e:#}"));
        }
    }
    problems
}

/// What the host run of `cargo test` gave.
#[derive(Default)]
struct HostRun {
    tally: Tally,
    problems: Vec<String>,
    /// `binary test: reason` for each test that said it cannot run here.
    skipped: Vec<String>,
    /// `binary test: reason` for each check a test said it could not make here.
    partial: Vec<String>,
    /// `binary test: skipped: reason` (or `partly skipped`) for each of those two that the
    /// list of skips does not allow on the host (skips.rs).
    unlisted: Vec<String>,
    /// Tests run a second time (testlines.rs).
    second_runs: Vec<SecondRun>,
    /// Each test libtest (or the integration harness) said FAILED, with its message: CI
    /// shows only the tail of the output, so the closing error names them.
    failures: testlines::Failures,
    /// cargo's `Finished` time for the build.
    build_s: Option<f64>,
    /// Seconds per test binary, or per module of the integration executable, from
    /// libtest's `finished in` lines.
    binary_s: Vec<(String, f64)>,
    /// The test binary running now (cargo's `Running` line).
    binary: String,
    /// In the integration executable, the module whose libtest run this is (the harness's
    /// `module:` line, testlines.rs).
    module: Option<String>,
}

impl HostRun {
    /// `reason` with why the list of skips allows it on the host (skips.rs), or marked
    /// `[NOT LISTED]` and kept in `unlisted` as `binary name: how: reason`.
    fn listed(&mut self, name: &str, how: &str, reason: &str) -> String {
        let (module, test) = testlines::split_test(name).unwrap_or((self.binary.as_str(), name));
        match skips::allowed(skips::Place::Host, module, test, reason) {
            Some(a) => {
                let checked =
                    a.host_fact.as_ref().map_or(String::new(), |f| format!("; checked here: {}", f.what));
                format!("{reason} [listed: {}{checked}]", a.why)
            }
            None => {
                self.unlisted.push(format!("{} {name}: {how}: {reason}", self.binary));
                format!("{reason} [NOT LISTED]")
            }
        }
    }

    /// One line of `cargo test`'s output (stdout or stderr).
    fn line(&mut self, line: &str) {
        self.tally.add(line);
        let l = line.trim();
        let binary = &self.binary;
        self.failures.line(binary, l);
        if let Some(rest) = l.strip_prefix("Running ") {
            // `Running tests/integration/main.rs (target/debug/deps/integration-0123)` or
            // `Running unittests src/lib.rs (...)`
            self.binary = rest.split(" (").next().unwrap_or(rest).to_string();
            self.module = None;
        } else if let Some(name) = testlines::module_start(l) {
            self.module = Some(name.to_string());
        } else if let Some((name, reason)) = skipped_test(l) {
            let said = self.listed(&name, "skipped", &reason);
            self.skipped.push(format!("{} {name}: {said}", self.binary));
        } else if let Some((name, reason)) = partial_test(l) {
            let said = self.listed(&name, "partly skipped", &reason);
            self.partial.push(format!("{} {name}: {said}", self.binary));
        } else if let Some((name, cause)) = second_run_test(l) {
            // `stalls::a_test` -> (`stalls`, `a_test`), as the VM cells name it.
            let (binary, test) = match testlines::split_test(&name) {
                Some((module, test)) => (module.to_string(), test.to_string()),
                None => (binary.clone(), name),
            };
            self.second_runs.push(SecondRun { place: "host".into(), binary, test, cause });
        } else if l.starts_with("test result:") {
            if let Some(s) = seconds_after(l, "finished in ") {
                self.binary_s.push((self.module.clone().unwrap_or_else(|| binary.clone()), s));
            }
        } else if l.starts_with("Finished ") && self.build_s.is_none() {
            self.build_s = seconds_after(l, " in ");
        }
    }
}

/// Runs cargo test on the host; returns the tally of every test binary and what went wrong.
fn run_tests(args: &[String]) -> Result<HostRun> {
    let mut cmd = cargo();
    cmd.current_dir(workspace_root())
        .args(["test", "--no-fail-fast", "--workspace", "--exclude", "tfo-trace-ebpf"])
        .args(args);
    cmd.env("TFO_DIST_DIR", dist::dist_dir());
    println!("+ {}", util::display(&cmd));
    // libtest prints one `test result:` line per test binary; the last one is often a
    // binary with no tests. Sum them all, so the closing line speaks for the whole suite.
    // cargo's own lines (`Finished`, `Running`) come on stderr: read both.
    let mut child =
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("starting cargo test")?;
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let pumps: Vec<_> = [
        Box::new(child.stdout.take().context("cargo test stdout")?) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().context("cargo test stderr")?),
    ]
    .into_iter()
    .map(|r| {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        })
    })
    .collect();
    drop(tx);
    let mut run = HostRun::default();
    for line in rx {
        println!("{line}");
        run.line(&line);
    }
    for p in pumps {
        let _ = p.join();
    }
    let status = child.wait().context("waiting for cargo test")?;
    if !status.success() {
        run.problems.extend(run.failures.said().map(|f| format!("host: {f}")));
        run.problems.push(format!("cargo test failed: {status}"));
    }
    if run.tally.passed == 0 {
        run.problems.push("cargo test ran no test".to_string());
    }
    Ok(run)
}

/// `... finished in 9.87s` -> 9.87; `... in 1m 26s` -> 86.
fn seconds_after(line: &str, marker: &str) -> Option<f64> {
    let rest = &line[line.rfind(marker)? + marker.len()..];
    let mut total = 0.0;
    let mut any = false;
    for word in rest.split_whitespace() {
        if let Some(m) = word.strip_suffix('m').and_then(|m| m.parse::<f64>().ok()) {
            total += 60.0 * m;
            any = true;
        } else if let Some(s) = word.strip_suffix('s').and_then(|s| s.parse::<f64>().ok()) {
            total += s;
            any = true;
        } else {
            break;
        }
    }
    any.then_some(total)
}

/// Totals of libtest's `test result: ok. 5 passed; 0 failed; 1 ignored; ...` lines.
#[derive(Default, Debug, PartialEq)]
struct Tally {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Tally {
    fn add(&mut self, line: &str) {
        let Some(rest) = line.strip_prefix("test result: ") else { return };
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(what), Some(n)) = (words.next(), words.next()) else { continue };
            let Ok(n) = n.parse::<u64>() else { continue };
            match what {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
    }
}

/// The demo's share of the set-up, then the `demo` profile's build (Cargo.toml: the
/// release build unoptimized, far less to compile), then `tfo-trace demo`.
fn demo(args: &[String]) -> Result<()> {
    setup::setup_for(setup::Need::Demo)?;
    let bin = build_tfo_trace("demo")?;
    let mut cmd = if is_root() {
        Command::new(&bin)
    } else if let Some(sudo) = which("sudo") {
        eprintln!("not root: running the demo through sudo");
        let mut c = Command::new(sudo);
        c.arg("--").arg(&bin);
        c
    } else {
        bail!("the demo needs root and sudo is not installed: run `cargo xtask demo` as root");
    };
    cmd.arg("demo").args(args);
    exec(&mut cmd)
}

/// Replaces this process with `cmd`: its exit code and signals are the demo's own.
fn exec(cmd: &mut Command) -> Result<()> {
    use std::os::unix::process::CommandExt;
    println!("+ {}", util::display(cmd));
    let err = cmd.exec();
    Err(err).with_context(|| format!("exec {}", cmd.get_program().to_string_lossy()))
}

#[cfg(test)]
mod tally_tests {
    use super::Tally;

    #[test]
    fn sums_every_test_binary() {
        let mut t = Tally::default();
        for line in [
            "test result: ok. 47 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.31s",
            "running 6 tests",
            "test result: FAILED. 5 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 5.5s",
            "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
        ] {
            t.add(line);
        }
        assert_eq!(t, Tally { passed: 52, failed: 1, ignored: 1 });
    }

    #[test]
    fn under_ci_what_would_only_warn_fails_the_run() {
        let mut problems = Vec::new();
        super::ci_rule(false, &mut problems, "not root: the kernel integration tests will skip".into());
        assert!(problems.is_empty(), "a warning off CI: {problems:?}");
        super::ci_rule(true, &mut problems, "not root: the kernel integration tests will skip".into());
        assert_eq!(problems, ["CI: not root: the kernel integration tests will skip"]);
    }

    #[test]
    fn host_lines_are_read_per_binary_and_per_integration_test_module() {
        use crate::testlines::SecondRun;
        let mut run = super::HostRun::default();
        // As `cargo test` and the integration executable print them (module `stalls` and
        // `top` of tests/integration/).
        for line in [
            "    Finished `test` profile [optimized + debuginfo] target(s) in 4m 22s",
            "     Running unittests src/lib.rs (target/debug/deps/tfo_trace-0123)",
            "test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.50s",
            "     Running tests/integration/main.rs (target/debug/deps/integration-4567)",
            "module: stalls",
            "running 2 tests",
            "second run: stalls::stalls_a: one ESTABLISHED short (...): the tracer counted 1, the kernel 2",
            "retried: stalls::stalls_a passed on its second run; its first run failed: one ESTABLISHED short",
            "test stalls::stalls_a ... ok",
            "partial: stalls::stalls_b: server cookie_invalid is not visible to the tracepoint backend",
            "test stalls::stalls_b ... ok",
            "test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 30.00s",
            "module: top",
            "running 1 test",
            "test top::tfo_ipv4 ... ignored (needs tmux: not installed)",
            "test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 5 filtered out; finished in 0.10s",
        ] {
            run.line(line);
        }
        assert_eq!(run.tally, Tally { passed: 7, failed: 0, ignored: 1 });
        assert_eq!(run.build_s, Some(262.0));
        let times: Vec<(&str, f64)> = run.binary_s.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        assert_eq!(times, [("unittests src/lib.rs", 1.5), ("stalls", 30.0), ("top", 0.1)]);
        // Each skip with why the list allows it on the host, or marked and kept apart.
        assert_eq!(
            run.skipped,
            ["tests/integration/main.rs top::tfo_ipv4: needs tmux: not installed [NOT LISTED]"]
        );
        assert_eq!(
            run.unlisted,
            ["tests/integration/main.rs top::tfo_ipv4: skipped: needs tmux: not installed"]
        );
        let blind =
            "tests/integration/main.rs stalls::stalls_b: server cookie_invalid is not visible to the \
                     tracepoint backend [listed: the tracepoint backends are blind";
        assert!(run.partial.len() == 1 && run.partial[0].starts_with(blind), "{:?}", run.partial);
        let cause = "one ESTABLISHED short (...): the tracer counted 1, the kernel 2";
        let second = SecondRun {
            place: "host".into(),
            binary: "stalls".into(),
            test: "stalls_a".into(),
            cause: cause.into(),
        };
        assert_eq!(run.second_runs, [second], "named as a VM cell names it, so the rule on twice sees both");
    }

    #[test]
    fn a_failed_host_test_is_named_with_its_panic() {
        let mut run = super::HostRun::default();
        for line in [
            "     Running tests/integration/main.rs (target/debug/deps/integration-4567)",
            "module: server_outcomes",
            "test server_outcomes::blackhole_a ... FAILED",
            "test server_outcomes::blackhole_b ... ok",
            "failures:",
            "---- server_outcomes::blackhole_a stdout ----",
            "note: some output of the test",
            "thread 'server_outcomes::blackhole_a' panicked at tests/integration/server_outcomes.rs:10:5:",
            "client syn_retransmitted: the tracer counted 0, the kernel 1",
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
        ] {
            run.line(line);
        }
        assert_eq!(
            run.failures.said().collect::<Vec<_>>(),
            ["tests/integration/main.rs server_outcomes::blackhole_a: FAILED: client syn_retransmitted: the \
              tracer counted 0, the kernel 1"]
        );
    }

    #[test]
    fn durations_of_cargo_and_libtest() {
        use super::seconds_after;
        assert_eq!(seconds_after("test result: ok. 1 passed; finished in 9.87s", "finished in "), Some(9.87));
        assert_eq!(
            seconds_after("Finished `test` profile [unoptimized] target(s) in 1m 26s", " in "),
            Some(86.0)
        );
        assert_eq!(seconds_after("Finished in soon", " in "), None);
    }
}
