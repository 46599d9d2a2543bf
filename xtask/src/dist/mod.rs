//! `cargo xtask dist`: what a fleet installs, in `target/dist/`:
//!
//! - `tfo-trace-<version>-x86_64-linux`, `tfo-trace-<version>-aarch64-linux`: static musl
//!   executables (no program interpreter, no shared library), the eBPF object embedded,
//!   stripped ([`crate::cross`] builds them);
//! - `tfo-trace_<version>_amd64.deb`, `tfo-trace_<version>_arm64.deb` ([`deb`]);
//! - `tfo-trace-<version>-1.x86_64.rpm`, `tfo-trace-<version>-1.aarch64.rpm` ([`rpm`]);
//! - `tfo-trace-<version>-<arch>-linux-image.tar`: an OCI image per architecture, the
//!   binary alone on an empty base, that `docker load` takes ([`image`]);
//! - `SHA256SUMS` of all of them.
//!
//! Scratch work goes to `target/dist-work/`. Timestamps are the commit's
//! (SOURCE_DATE_EPOCH), so the packages and images do not change from one run to the next.
mod contents;
mod deb;
mod image;
mod rpm;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use crate::cross::{self, Arch, What};
use crate::util::{capture, probe, target_dir, workspace_root};

/// The workspace's version: what `tfo-trace --version` prints too.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(clap::Args, Debug, Default)]
pub struct DistArgs {
    /// Only this architecture (repeatable); default: all
    #[arg(long, value_enum)]
    arch: Vec<Arch>,
}

/// `target/dist/`.
pub fn dist_dir() -> PathBuf {
    target_dir().join("dist")
}

/// `tfo-trace-0.1.0-aarch64-linux`.
pub fn binary_name(arch: Arch) -> String {
    format!("tfo-trace-{VERSION}-{}-linux", arch.name())
}

pub fn dist(args: &DistArgs) -> Result<()> {
    let start = Instant::now();
    crate::setup::setup()?;
    let arches = if args.arch.is_empty() { Arch::ALL.to_vec() } else { args.arch.clone() };
    let made = build(&arches)?;
    println!("dist: in {}:", dist_dir().display());
    for path in &made {
        let size = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        println!("dist:   {:>10} bytes  {}", size, path.file_name().unwrap_or_default().to_string_lossy());
    }
    println!("dist: total {:.1} s (setup included)", start.elapsed().as_secs_f64());
    Ok(())
}

/// Phase times, printed as each ends and summed at the end.
struct Phases {
    start: Instant,
    last: Instant,
}

impl Phases {
    fn new() -> Phases {
        let now = Instant::now();
        Phases { start: now, last: now }
    }

    fn done(&mut self, what: &str) {
        let now = Instant::now();
        println!("dist: phase {what}: {:.1} s", (now - self.last).as_secs_f64());
        self.last = now;
    }
}

/// Builds everything for `arches` into [`dist_dir`] (emptied first); returns the files.
/// `cargo xtask test` calls it once, and every check of the suite uses what it made.
pub fn build(arches: &[Arch]) -> Result<Vec<PathBuf>> {
    let mut phases = Phases::new();
    let out = dist_dir();
    // Nothing of an earlier run survives a failed one: the tests never check stale files.
    let _ = fs::remove_dir_all(&out);
    let source = Source::of_workspace()?;
    // build.rs reads it (tfo-trace --version): the commit, marked when the tree is dirty.
    std::env::set_var("TFO_TRACE_COMMIT", &source.commit);
    std::env::set_var("SOURCE_DATE_EPOCH", source.epoch.to_string());
    let built = cross::cross_build(arches, What::Tracer)?;
    phases.done(&format!("compile ({})", cross::names(arches)));

    let work = target_dir().join("dist-work");
    for dir in [&out, &work] {
        let _ = fs::remove_dir_all(dir);
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut made = Vec::new();
    let mut binaries = Vec::new();
    for &arch in arches {
        let exe = &built
            .iter()
            .find(|b| b.arch == arch && b.name == "tfo-trace")
            .context("no tfo-trace built")?
            .exe;
        let dst = out.join(binary_name(arch));
        fs::copy(exe, &dst).with_context(|| format!("copying {} to {}", exe.display(), dst.display()))?;
        check_static(&dst, arch)?;
        binaries.push((arch, dst.clone()));
        made.push(dst);
    }

    // Pages and completions are the same for every architecture: made once, by the first
    // binary (under qemu-user when it is not this host's).
    let (doc_arch, doc_exe) = &binaries[0];
    let docs = contents::Docs::generate(*doc_arch, doc_exe, &work.join("docs"))?;
    phases.done("man pages and completions");
    for (arch, exe) in &binaries {
        made.push(deb::build(
            *arch,
            exe,
            &docs,
            &source,
            &work.join(format!("deb-{}", arch.debian())),
            &out,
        )?);
        made.push(rpm::build(*arch, exe, &docs, &source, &work.join(format!("rpm-{}", arch.name())), &out)?);
    }
    phases.done("packages");
    for (arch, exe) in &binaries {
        made.push(image::build(*arch, exe, &source, &work.join(format!("image-{}", arch.debian())), &out)?);
    }
    phases.done("images");
    made.push(write_sha256sums(&out, &made)?);
    println!("dist: {} files in {:.1} s", made.len(), (Instant::now() - phases.start).as_secs_f64());
    Ok(made)
}

/// The source being shipped: its commit and time.
pub struct Source {
    /// `cdbb5da584e3`, with `-dirty` when tracked files differ from it.
    pub commit: String,
    /// SOURCE_DATE_EPOCH when set, else the commit's time: every timestamp shipped.
    pub epoch: u64,
}

impl Source {
    fn of_workspace() -> Result<Source> {
        let git = |args: &[&str]| probe(Command::new("git").current_dir(workspace_root()).args(args));
        let commit = git(&["rev-parse", "--short=12", "HEAD"]).map(|c| c.trim().to_string());
        let dirty =
            git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.trim().is_empty());
        let commit = match commit {
            Some(c) if dirty => format!("{c}-dirty"),
            Some(c) => c,
            None => "unknown".to_string(),
        };
        let epoch = match std::env::var("SOURCE_DATE_EPOCH").ok().and_then(|s| s.parse().ok()) {
            Some(e) => e,
            None => git(&["log", "-1", "--format=%ct"]).and_then(|s| s.trim().parse().ok()).unwrap_or(0),
        };
        Ok(Source { commit, epoch })
    }

    /// `Thu, 03 Dec 2026 08:00:00 +0000` (Debian's changelog date).
    fn rfc2822(&self) -> Result<String> {
        let out = capture(Command::new("date").args(["-u", "-R", "-d"]).arg(format!("@{}", self.epoch)))?;
        Ok(out.trim().to_string())
    }

    /// `2026` (the copyright's year).
    fn year(&self) -> Result<String> {
        let out = capture(Command::new("date").args(["-u", "+%Y", "-d"]).arg(format!("@{}", self.epoch)))?;
        Ok(out.trim().to_string())
    }

    /// `2026-12-03T08:00:00Z` (the image's `created`).
    fn rfc3339(&self) -> Result<String> {
        let out = capture(
            Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%SZ", "-d"]).arg(format!("@{}", self.epoch)),
        )?;
        Ok(out.trim().to_string())
    }
}

/// A host must need nothing beside the file: no program interpreter (PT_INTERP), no
/// shared library (DT_NEEDED), and the machine it says it is for.
fn check_static(exe: &Path, arch: Arch) -> Result<()> {
    let headers = capture(Command::new("readelf").args(["-hlW"]).arg(exe))?;
    let dynamic = capture(Command::new("readelf").args(["-dW"]).arg(exe))?;
    if let Some(l) = headers.lines().find(|l| l.contains("INTERP") || l.contains("program interpreter")) {
        bail!("{} has a program interpreter: {}", exe.display(), l.trim());
    }
    if let Some(l) = dynamic.lines().find(|l| l.contains("(NEEDED)")) {
        bail!("{} needs a shared library: {}", exe.display(), l.trim());
    }
    let machine = match arch {
        Arch::X86_64 => "X86-64",
        Arch::Aarch64 => "AArch64",
    };
    if !headers.lines().any(|l| l.trim_start().starts_with("Machine:") && l.contains(machine)) {
        bail!("{} is not an {machine} executable", exe.display());
    }
    Ok(())
}

/// Lowercase hex SHA-256 of a file.
pub fn sha256_file(path: &Path) -> Result<String> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(sha256_hex(&bytes))
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// `SHA256SUMS` in `sha256sum`'s format (`sha256sum -c SHA256SUMS` checks it).
fn write_sha256sums(out: &Path, files: &[PathBuf]) -> Result<PathBuf> {
    let mut text = String::new();
    for f in files {
        let name = f.file_name().context("a file name")?.to_string_lossy();
        text.push_str(&format!("{}  {name}\n", sha256_file(f)?));
    }
    let path = out.join("SHA256SUMS");
    fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Sets every file's and folder's mtime under `dir` to `epoch` (packages and images made
/// from it do not change between runs).
fn clamp_mtimes(dir: &Path, epoch: u64) -> Result<()> {
    crate::util::run(
        Command::new("find")
            .arg(dir)
            .args(["-exec", "touch", "-h", "-d"])
            .arg(format!("@{epoch}"))
            .args(["{}", "+"]),
    )
}

/// Runs `cmd` (or reports why it failed): the tar and gzip steps.
fn quiet(cmd: &mut Command) -> Result<()> {
    capture(cmd).map(|_| ())
}
