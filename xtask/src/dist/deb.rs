//! The Debian package: the static binary in /usr/bin, every man page, bash/zsh/fish
//! completions, the exporter's systemd unit (installed, not enabled: no maintainer
//! script, so `dpkg --purge` leaves nothing), copyright and changelog. Built with
//! `dpkg-deb` from a staged tree; no dependency, since the binary needs no library.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use super::contents::{self, gzip, Docs, Layout, MAINTAINER};
use super::{clamp_mtimes, quiet, Source, VERSION};
use crate::cross::Arch;
use crate::util::{capture, run};

/// Debian's paths: units in /lib/systemd/system (Debian 11's, before the /usr merge),
/// zsh's vendor completions, the machine-readable copyright.
const DEBIAN: Layout = Layout {
    unit_dir: "lib/systemd/system",
    zsh_completion: "usr/share/zsh/vendor-completions/_tfo-trace",
    copyright: "usr/share/doc/tfo-trace/copyright",
    apache_text: "On Debian systems the full text of the Apache License 2.0 is in\n /usr/share/common-licenses/Apache-2.0.",
};

/// `tfo-trace_<version>_<arch>.deb` in `out`, staged in `stage`.
pub fn build(
    arch: Arch,
    exe: &Path,
    docs: &Docs,
    source: &Source,
    stage: &Path,
    out: &Path,
) -> Result<PathBuf> {
    contents::stage(stage, &DEBIAN, arch, exe, docs, source)?;
    let put = |rel: &str, bytes: &[u8], mode: u32| contents::put(stage, rel, bytes, mode);
    put("usr/share/lintian/overrides/tfo-trace", lintian_overrides(exe)?.as_bytes(), 0o644)?;
    let changelog = stage.join("changelog");
    fs::write(&changelog, changelog_text(source)?)?;
    put("usr/share/doc/tfo-trace/changelog.gz", &gzip(&changelog)?, 0o644)?;
    fs::remove_file(&changelog)?;

    let installed_kib = tree_bytes(stage)?.div_ceil(1024);
    put("DEBIAN/control", control(arch, installed_kib).as_bytes(), 0o644)?;
    put("DEBIAN/md5sums", md5sums(stage)?.as_bytes(), 0o644)?;
    normalize_dirs(stage)?;
    clamp_mtimes(stage, source.epoch)?;
    let deb = out.join(format!("tfo-trace_{VERSION}_{}.deb", arch.debian()));
    run(Command::new("dpkg-deb")
        .env("SOURCE_DATE_EPOCH", source.epoch.to_string())
        .args(["--root-owner-group", "-Zxz", "--build"])
        .arg(stage)
        .arg(&deb))?;
    Ok(deb)
}

fn control(arch: Arch, installed_kib: u64) -> String {
    // Debian's extended description: each line indented by one space, " ." between
    // paragraphs.
    let paragraphs: Vec<String> = contents::DESCRIPTION
        .iter()
        .map(|p| contents::wrap(p, 76).iter().map(|l| format!(" {l}\n")).collect())
        .collect();
    format!(
        "Package: tfo-trace
Version: {VERSION}
Architecture: {}
Maintainer: {MAINTAINER}
Installed-Size: {installed_kib}
Section: net
Priority: optional
Description: {}
{}",
        arch.debian(),
        contents::SUMMARY,
        paragraphs.join(" .\n")
    )
}

/// A native package's changelog: one entry for this build.
fn changelog_text(source: &Source) -> Result<String> {
    Ok(format!(
        "tfo-trace ({VERSION}) unstable; urgency=medium\n\n  * Built by `cargo xtask dist` from commit {}.\n\n -- {MAINTAINER}  {}\n",
        source.commit,
        source.rfc2822()?
    ))
}

/// The binary is static on purpose (one file for every distribution, the reason this
/// package exists), which lintian flags as a mistake: as `statically-linked-binary` when
/// it is a plain static executable (aarch64), as `shared-library-lacks-prerequisites` when
/// it is a static PIE (x86_64: a position-independent ELF with no DT_NEEDED). The override
/// names only the tag that applies, so an unused one is never shipped.
fn lintian_overrides(exe: &Path) -> Result<String> {
    let header = capture(Command::new("readelf").arg("-hW").arg(exe))?;
    let pie = header.lines().any(|l| l.trim_start().starts_with("Type:") && l.contains("DYN"));
    let tag = if pie { "shared-library-lacks-prerequisites" } else { "statically-linked-binary" };
    Ok(format!(
        "# Static on purpose: one binary that runs on every distribution, needing no library.\n\
         tfo-trace: {tag} [usr/bin/tfo-trace]\n"
    ))
}

/// Every file under `dir` (relative paths, sorted), DEBIAN/ left out.
fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                if path != dir.join("DEBIAN") {
                    todo.push(path);
                }
            } else {
                out.push(path.strip_prefix(dir)?.to_path_buf());
            }
        }
    }
    out.sort();
    Ok(out)
}

fn tree_bytes(dir: &Path) -> Result<u64> {
    files(dir)?.iter().map(|f| Ok(fs::metadata(dir.join(f))?.len())).sum()
}

/// DEBIAN/md5sums: `md5sum`'s lines for every installed file.
fn md5sums(stage: &Path) -> Result<String> {
    let files = files(stage)?;
    capture(Command::new("md5sum").current_dir(stage).arg("--").args(&files))
}

/// Folders 0755 whatever the umask.
fn normalize_dirs(stage: &Path) -> Result<()> {
    quiet(Command::new("find").arg(stage).args(["-type", "d", "-exec", "chmod", "0755", "{}", "+"]))
}
