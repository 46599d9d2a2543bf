//! A Debian 11 (bullseye, glibc 2.31) userspace for the test suite's checks of what `dist`
//! ships (tfo-trace/tests/integration/dist.rs): `debootstrap --variant=minbase`, plus
//! man-db so `man tfo-trace` can be tried there, made once and cached in
//! `target/userspace/`. The tests never change it: each mounts an overlay on it and chroots
//! into that.
use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::util::{is_root, run, target_dir, which};

/// Debian 11: the oldest glibc (2.31) of the distributions the static binary is for.
pub const SUITE: &str = "bullseye";
const MIRROR: &str = "http://deb.debian.org/debian";
/// Written last: a folder without it is a debootstrap that did not finish.
const COMPLETE: &str = ".tfo-trace-complete";

/// `target/userspace/<suite>`.
pub fn dir(suite: &str) -> PathBuf {
    target_dir().join("userspace").join(suite)
}

/// Where the reason goes when the userspace cannot be made (the tests skip with it).
pub fn failure_file(suite: &str) -> PathBuf {
    target_dir().join("userspace").join(format!("{suite}.failed"))
}

/// Makes the userspace unless it is cached; on failure, records why for the tests.
pub fn ensure(suite: &str) -> Result<PathBuf> {
    let result = make(suite);
    let failed = failure_file(suite);
    match &result {
        Ok(_) => {
            let _ = fs::remove_file(&failed);
        }
        Err(e) => {
            let _ = fs::create_dir_all(failed.parent().unwrap_or(&target_dir()));
            let _ = fs::write(&failed, format!("{e:#}"));
        }
    }
    result
}

fn make(suite: &str) -> Result<PathBuf> {
    let root = dir(suite);
    if root.join(COMPLETE).exists() {
        println!("userspace: {suite} cached in {}", root.display());
        return Ok(root);
    }
    if !is_root() {
        bail!("debootstrap needs root");
    }
    if which("debootstrap").is_none() {
        bail!("no debootstrap; run `cargo xtask setup`");
    }
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    run(Command::new("debootstrap")
        .args(["--variant=minbase", "--include=man-db"])
        .arg(suite)
        .arg(&root)
        .arg(MIRROR))
    .with_context(|| format!("debootstrap {suite}"))?;
    fs::write(root.join(COMPLETE), "")?;
    Ok(root)
}
