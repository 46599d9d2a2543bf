//! Small helpers around std::process::Command and the environment.
use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// Prints the command line, runs it with inherited stdio, errors on a non-zero exit.
pub fn run(cmd: &mut Command) -> Result<()> {
    let line = display(cmd);
    println!("+ {line}");
    let status = cmd.status().with_context(|| format!("failed to start `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed: {status}");
    }
    Ok(())
}

/// Runs a query command quietly; `Some(stdout)` if it started and exited 0.
pub fn probe(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a query command quietly and returns its stdout; errors if it fails.
pub fn capture(cmd: &mut Command) -> Result<String> {
    let line = display(cmd);
    let out = cmd.output().with_context(|| format!("failed to start `{line}`"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        bail!("`{line}` failed: {}: {}", out.status, stderr.trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The command line as a shell would show it, with the env vars set on it.
pub fn display(cmd: &Command) -> String {
    let envs = cmd
        .get_envs()
        .filter_map(|(k, v)| v.map(|v| format!("{}={}", k.to_string_lossy(), quote(&v.to_string_lossy()))));
    let prog = std::iter::once(cmd.get_program().to_string_lossy().into_owned());
    let args = cmd.get_args().map(|a| quote(&a.to_string_lossy()));
    envs.chain(prog).chain(args).collect::<Vec<_>>().join(" ")
}

fn quote(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The workspace root (xtask's parent directory).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Cargo's target directory: CARGO_TARGET_DIR (relative to the workspace), else `target/`.
pub fn target_dir() -> PathBuf {
    match env::var_os("CARGO_TARGET_DIR").map(PathBuf::from) {
        Some(p) if p.is_absolute() => p,
        Some(p) => workspace_root().join(p),
        None => workspace_root().join("target"),
    }
}

/// The cargo that runs us (same toolchain), or `cargo` from PATH.
pub fn cargo() -> Command {
    Command::new(env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo")))
}

/// `rustup run nightly <tool>`, never auto-installing the toolchain behind our back.
pub fn nightly(tool: &str) -> Command {
    let mut cmd = Command::new("rustup");
    cmd.env("RUSTUP_AUTO_INSTALL", "0").args(["run", "nightly", tool]);
    cmd
}

/// `$CARGO_HOME`, else `~/.cargo`.
pub fn cargo_home() -> Result<PathBuf> {
    if let Some(h) = env::var_os("CARGO_HOME") {
        return Ok(PathBuf::from(h));
    }
    let home = env::var_os("HOME").context("neither CARGO_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cargo"))
}

/// First executable file named `name` in PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = env::var_os("PATH")?;
    env::split_paths(&path).map(|d| d.join(name)).find(|p| {
        fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
    })
}

/// Effective uid is 0 (read from /proc/self/status: no libc needed).
pub fn is_root() -> bool {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .is_some_and(|euid| euid == "0")
}

/// The release build of tfo-trace with its `fixtures` feature: the floor's empty programs
/// and the hidden `floor`, `lab-load` and `lab-soak` subcommands, which the bench and the
/// soak run and a user's build leaves out (tfo-trace/Cargo.toml). The tracer's own code is
/// the same. Returns the binary (target/release/tfo-trace, until the next plain build).
pub fn build_release_with_fixtures() -> Result<PathBuf> {
    let mut build = cargo();
    build.current_dir(workspace_root()).args([
        "build",
        "--release",
        "-p",
        "tfo-trace",
        "--features",
        "fixtures",
    ]);
    run(&mut build)?;
    Ok(target_dir().join("release/tfo-trace"))
}

/// Copies `src` to `dst`, making `dst`'s folder first.
pub fn copy_file(src: &Path, dst: &Path) -> Result<()> {
    if let Some(parent) = dst.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::copy(src, dst).with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
    Ok(())
}

/// Copies the tree at `src` (a file or a folder) to `dst`.
pub fn copy_tree(src: &Path, dst: &Path) -> Result<()> {
    if src.is_dir() {
        fs::create_dir_all(dst)?;
        for e in fs::read_dir(src)? {
            let e = e?;
            copy_tree(&e.path(), &dst.join(e.file_name()))?;
        }
        Ok(())
    } else {
        copy_file(src, dst)
    }
}
