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

use std::process::{Command, ExitCode};
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
    let result = setup::setup().and_then(|()| run_tests(args));
    println!("test: total elapsed {:.1} s", start.elapsed().as_secs_f64());
    result
}

fn run_tests(args: &[String]) -> Result<()> {
    if !is_root() {
        eprintln!("warning: not root: the kernel integration tests (network namespaces, eBPF) will skip");
    }
    let mut cmd = cargo();
    cmd.current_dir(workspace_root()).args(["test", "--workspace", "--exclude", "tfo-trace-ebpf"]).args(args);
    run(&mut cmd)
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
