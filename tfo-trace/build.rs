//! Builds the eBPF programs (tfo-trace-ebpf) for the bpf target with the nightly
//! toolchain and bpf-linker (`cargo xtask setup` installs both), and puts the object in
//! OUT_DIR, where probes/mod.rs embeds it: one binary is all a host needs (build/ebpf.rs:
//! aya-build's way, showing the inner build's output only when it fails, and its
//! warnings). Then says what this build is, for `tfo-trace --version` (src/build_info.rs).
use std::{env, fs, path::PathBuf, process::Command};

use sha2::{Digest, Sha256};

#[path = "build/ebpf.rs"]
mod ebpf;

fn main() -> anyhow::Result<()> {
    let root_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tfo-trace-ebpf");
    // The floor's empty programs go into the object only for the `fixtures` build.
    let features: &[&str] = if env::var_os("CARGO_FEATURE_FIXTURES").is_some() { &["floor"] } else { &[] };
    ebpf::build(&ebpf::Package { name: "tfo-trace-ebpf", root_dir, features })?;
    build_info()
}

/// The commit, the target and the SHA-256 of the eBPF object just built, as compile-time
/// environment variables.
fn build_info() -> anyhow::Result<()> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or_else(|| anyhow::anyhow!("OUT_DIR not set"))?);
    // Absent only when AYA_BUILD_SKIP skipped the eBPF build (then nothing is embedded).
    let ebpf_sha256 = match fs::read(out_dir.join("tfo-trace")) {
        Ok(object) => Sha256::digest(&object).iter().map(|b| format!("{b:02x}")).collect(),
        Err(_) => "none".to_string(),
    };
    println!("cargo:rustc-env=TFO_TRACE_EBPF_SHA256={ebpf_sha256}");
    println!("cargo:rustc-env=TFO_TRACE_TARGET={}", env::var("TARGET")?);
    println!("cargo:rustc-env=TFO_TRACE_COMMIT={}", commit());
    Ok(())
}

/// TFO_TRACE_COMMIT when set (`cargo xtask dist` sets it, with `-dirty` for uncommitted
/// changes), else git's HEAD, else `unknown` (a source tarball).
fn commit() -> String {
    println!("cargo:rerun-if-env-changed=TFO_TRACE_COMMIT");
    if let Some(c) = env::var("TFO_TRACE_COMMIT").ok().filter(|c| !c.is_empty()) {
        return c;
    }
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    // Rebuild when HEAD moves: HEAD itself, the branch it names, and packed refs.
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", &branch]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_string())
}
