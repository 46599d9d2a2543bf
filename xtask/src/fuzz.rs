//! `cargo xtask fuzz [--seconds N]`: a bounded libFuzzer run of every target in `fuzz/`
//! (cargo-fuzz on the nightly toolchain, installed here when absent), N seconds in total.
//!
//! Each target starts from its seeds (`fuzz/seeds/<target>`, in the repository) and its
//! past crashes (`fuzz/regressions/<target>`), growing a scratch corpus in `fuzz/corpus/`
//! (ignored by git). A new crash or hang is copied into `fuzz/regressions/<target>`,
//! where `cargo xtask test` replays it on stable (tfo-trace's fuzz module tests): commit
//! it with its fix.
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{bail, Context, Result};

use crate::util::{display, nightly, probe, run, which, workspace_root};

/// The targets, as named in fuzz/Cargo.toml and under fuzz/seeds/.
const TARGETS: &[&str] = &["recording", "event_decoder", "replay", "dns_answer"];

#[derive(clap::Args)]
pub struct FuzzArgs {
    /// Total fuzzing time in seconds, shared evenly by the targets (the build comes on top)
    #[arg(long, default_value_t = 180, value_parser = clap::value_parser!(u64).range(2..))]
    seconds: u64,
}

/// What libFuzzer said about one run.
#[derive(Default, Debug, PartialEq)]
struct Stats {
    runs: Option<u64>,
    execs_per_s: Option<u64>,
    /// Artifacts (crash-, timeout-, oom-, leak- files) it wrote.
    artifacts: Vec<PathBuf>,
}

pub fn fuzz(args: &FuzzArgs) -> Result<()> {
    crate::setup::setup()?; // nightly, and bpf-linker: tfo-trace's build.rs builds its eBPF object
    cargo_fuzz()?;
    let per_target = (args.seconds / TARGETS.len() as u64).max(1);
    let mut found = Vec::new();
    for target in TARGETS {
        let stats = fuzz_target(target, per_target)?;
        let runs = stats.runs.map_or("?".into(), |n| n.to_string());
        let rate = stats.execs_per_s.map_or("?".into(), |n| n.to_string());
        println!(
            "fuzz: {target}: {runs} runs ({rate} exec/s) of {per_target} s at most, {} crash(es)",
            stats.artifacts.len()
        );
        for a in &stats.artifacts {
            let kept = keep_as_regression(target, a)?;
            println!("fuzz: {target}: crash kept as {}", kept.display());
            found.push(kept);
        }
    }
    if !found.is_empty() {
        bail!(
            "{} crash(es) found; each is now in fuzz/regressions/ and fails `cargo xtask test` until fixed",
            found.len()
        );
    }
    Ok(())
}

/// Installs cargo-fuzz from crates.io with the nightly toolchain when it is not there.
fn cargo_fuzz() -> Result<()> {
    if which("cargo-fuzz").is_some() {
        if let Some(v) = probe(nightly("cargo").args(["fuzz", "--version"])) {
            println!("ok: {}", v.trim());
            return Ok(());
        }
    }
    println!("installing: cargo-fuzz");
    run(nightly("cargo").args(["install", "cargo-fuzz", "--locked"]))
        .context("cargo +nightly install cargo-fuzz")
}

fn fuzz_target(target: &str, seconds: u64) -> Result<Stats> {
    let fuzz_dir = workspace_root().join("fuzz");
    let scratch = fuzz_dir.join("corpus").join(target);
    let regressions = fuzz_dir.join("regressions").join(target);
    for dir in [&scratch, &regressions] {
        // libFuzzer exits on a corpus directory that does not exist.
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut cmd = nightly("cargo");
    // The scratch corpus first: libFuzzer adds what it finds there, never to the seeds.
    // Debug assertions on, so an arithmetic overflow is a crash as in the test builds.
    cmd.current_dir(workspace_root())
        .args(["fuzz", "run", "--debug-assertions", target])
        .arg(&scratch)
        .arg(fuzz_dir.join("seeds").join(target))
        .arg(&regressions)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        // A hang is a bug too: any input taking over 10 s is reported as a timeout.
        .arg("-timeout=10")
        .arg("-print_final_stats=1");
    // A dictionary of the input's words (fuzz/<target>.dict), where the target has one.
    let dict = fuzz_dir.join(format!("{target}.dict"));
    if dict.is_file() {
        cmd.arg(format!("-dict={}", dict.display()));
    }
    cmd.stdout(Stdio::inherit()).stderr(Stdio::piped());
    println!("+ {}", display(&cmd));
    let mut child = cmd.spawn().context("starting cargo fuzz run")?;
    let stderr = child.stderr.take().context("cargo fuzz stderr")?;
    let mut stats = Stats::default();
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        // libFuzzer prints a line per new coverage and its dictionary: keep the log short.
        if !(line.starts_with('#') || line.starts_with('"')) || line.contains("DONE") {
            eprintln!("{line}");
        }
        stats.read(&line, &fuzz_dir);
    }
    let status = child.wait().context("waiting for cargo fuzz run")?;
    if !status.success() && stats.artifacts.is_empty() {
        bail!("cargo fuzz run {target} failed ({status}) without a crash input: see its output above");
    }
    Ok(stats)
}

impl Stats {
    /// Reads one line of libFuzzer's (or cargo-fuzz's) stderr.
    fn read(&mut self, line: &str, fuzz_dir: &Path) {
        let number = |key: &str| line.strip_prefix(key).and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(n) = number("stat::number_of_executed_units:") {
            self.runs = Some(n);
        } else if let Some(n) = number("stat::average_exec_per_sec:") {
            self.execs_per_s = Some(n);
        } else if let Some(rest) = line.split_once("written to ").map(|(_, r)| r) {
            // `artifact_prefix='…/'; Test unit written to fuzz/artifacts/recording/crash-…`
            let path = PathBuf::from(rest.trim());
            let path =
                if path.is_absolute() { path } else { fuzz_dir.parent().unwrap_or(fuzz_dir).join(path) };
            if !self.artifacts.contains(&path) {
                self.artifacts.push(path);
            }
        }
    }
}

/// Copies a crash input into the target's regression corpus (named by its content hash,
/// as libFuzzer named it), so it stays after `fuzz/artifacts` is cleaned.
fn keep_as_regression(target: &str, artifact: &Path) -> Result<PathBuf> {
    let dir = workspace_root().join("fuzz/regressions").join(target);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let name = artifact.file_name().context("crash input without a file name")?;
    let kept = dir.join(name);
    fs::copy(artifact, &kept)
        .with_context(|| format!("copying {} to {}", artifact.display(), kept.display()))?;
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_libfuzzer_output() {
        let dir = Path::new("/r/fuzz");
        let mut s = Stats::default();
        for line in [
            "#524288\tpulse  cov: 1187 ft: 4012 corp: 310/22Kb exec/s: 17476 rss: 80Mb",
            "artifact_prefix='/r/fuzz/artifacts/recording/'; Test unit written to /r/fuzz/artifacts/recording/crash-0a1b",
            "stat::number_of_executed_units: 1585335",
            "stat::average_exec_per_sec:     17614",
        ] {
            s.read(line, dir);
        }
        assert_eq!(
            s,
            Stats {
                runs: Some(1_585_335),
                execs_per_s: Some(17_614),
                artifacts: vec![PathBuf::from("/r/fuzz/artifacts/recording/crash-0a1b")],
            }
        );
    }
}
