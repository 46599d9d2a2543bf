//! `cargo xtask`: the project's developer tasks.
//!
//! - `setup`: installs what building and testing need (nightly + rust-src, bpf-linker
//!   built against the nightly's LLVM, Debian packages); fast when all is present.
//! - `build`: setup, then a release build of tfo-trace (its build.rs builds and embeds
//!   the eBPF object).
//! - `test`: setup, then the whole test suite (unit + root-only kernel tests).
//! - `demo`: setup, release build, then runs `tfo-trace demo` as root.
mod setup;
mod util;

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

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
    /// Setup, then `cargo build --release -p tfo-trace`
    Build,
    /// Setup, then run the whole test suite (kernel tests need root)
    Test {
        /// Extra arguments for `cargo test` (after `--`; use a second `--` for the test binaries)
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Setup, release build, then run `tfo-trace demo` as root
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
        Task::Test { args } => test(&args),
        Task::Demo { args } => demo(&args),
    }
}

fn build() -> Result<()> {
    setup::setup()?;
    build_release()
}

fn build_release() -> Result<()> {
    let mut cmd = cargo();
    cmd.current_dir(workspace_root()).args(["build", "--release", "-p", "tfo-trace"]);
    run(&mut cmd)
}

fn test(args: &[String]) -> Result<()> {
    let start = Instant::now();
    setup::setup()?;
    run_tests(args, start)
}

/// Runs cargo test; the closing line is a tally of the whole suite, printed last.
fn run_tests(args: &[String], start: Instant) -> Result<()> {
    if !is_root() {
        eprintln!("warning: not root: the kernel integration tests (network namespaces, eBPF) will skip");
    }
    let mut cmd = cargo();
    cmd.current_dir(workspace_root()).args(["test", "--workspace", "--exclude", "tfo-trace-ebpf"]).args(args);
    println!("+ {}", util::display(&cmd));
    // libtest prints one `test result:` line per test binary; the last one is often a
    // binary with no tests. Sum them all, so the closing line speaks for the whole suite.
    let mut child = cmd.stdout(Stdio::piped()).spawn().context("starting cargo test")?;
    let stdout = child.stdout.take().context("cargo test stdout")?;
    let mut tally = Tally::default();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading cargo test output")?;
        println!("{line}");
        tally.add(&line);
    }
    let status = child.wait().context("waiting for cargo test")?;
    println!("test: total elapsed {:.1} s", start.elapsed().as_secs_f64());
    println!("summary: {} passed, {} failed, {} skipped", tally.passed, tally.failed, tally.ignored);
    if !status.success() {
        bail!("cargo test failed: {status}");
    }
    if tally.passed == 0 {
        bail!("cargo test ran no test");
    }
    Ok(())
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

fn demo(args: &[String]) -> Result<()> {
    build()?;
    let bin = workspace_root().join("target/release/tfo-trace");
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
}
