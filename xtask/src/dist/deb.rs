//! The Debian package: the static binary in /usr/bin, every man page, bash/zsh/fish
//! completions, the exporter's systemd unit (installed, not enabled: no maintainer
//! script, so `dpkg --purge` leaves nothing), copyright and changelog. Built with
//! `dpkg-deb` from a staged tree; no dependency, since the binary needs no library.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{clamp_mtimes, quiet, Source, VERSION};
use crate::cross::Arch;
use crate::util::{capture, cargo, run, workspace_root};

/// Who answers for the package (Debian's Maintainer field).
const MAINTAINER: &str = "tfo-trace developers <tfo-trace@users.noreply.github.com>";
/// The exporter's unit, as shipped in the repository for a hand install.
const UNIT: &str = "deploy/tfo-trace-exporter.service";
/// Where the hand install puts the binary, and where the package does.
const HAND_BIN: &str = "/usr/local/bin/tfo-trace";
const PACKAGE_BIN: &str = "/usr/bin/tfo-trace";

/// Man pages and completions, made by running the built binary.
pub struct Docs {
    /// `tfo-trace.1`, `tfo-trace-top.1`, ...
    pub man_pages: Vec<PathBuf>,
    /// (shell, script) for bash, zsh and fish.
    pub completions: Vec<(&'static str, String)>,
}

impl Docs {
    pub fn generate(arch: Arch, exe: &Path, dir: &Path) -> Result<Docs> {
        let man_dir = dir.join("man1");
        let mut man = arch.command(exe);
        man.arg("man").arg("--dir").arg(&man_dir);
        let listed = capture(&mut man).context("tfo-trace man --dir")?;
        let man_pages: Vec<PathBuf> = listed.lines().map(PathBuf::from).collect();
        if !man_pages.iter().any(|p| p.ends_with("tfo-trace.1")) || man_pages.len() < 2 {
            bail!("tfo-trace man --dir wrote {man_pages:?}: expected tfo-trace.1 and a page per subcommand");
        }
        let mut completions = Vec::new();
        for shell in ["bash", "zsh", "fish"] {
            let script = capture(arch.command(exe).args(["completions", shell]))
                .with_context(|| format!("tfo-trace completions {shell}"))?;
            completions.push((shell, script));
        }
        Ok(Docs { man_pages, completions })
    }
}

/// Where each shell's completion goes in a package (the shells' vendor directories).
fn completion_path(shell: &str) -> &'static str {
    match shell {
        "bash" => "usr/share/bash-completion/completions/tfo-trace",
        "zsh" => "usr/share/zsh/vendor-completions/_tfo-trace",
        _ => "usr/share/fish/vendor_completions.d/tfo-trace.fish",
    }
}

/// `tfo-trace_<version>_<arch>.deb` in `out`, staged in `stage`.
pub fn build(
    arch: Arch,
    exe: &Path,
    docs: &Docs,
    source: &Source,
    stage: &Path,
    out: &Path,
) -> Result<PathBuf> {
    let _ = fs::remove_dir_all(stage);
    let put = |rel: &str, bytes: &[u8], mode: u32| -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let path = stage.join(rel);
        fs::create_dir_all(path.parent().context("a parent")?)?;
        fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
        Ok(())
    };
    put(&PACKAGE_BIN[1..], &fs::read(exe)?, 0o755)?;
    for page in &docs.man_pages {
        let name = page.file_name().context("a page name")?.to_string_lossy();
        put(&format!("usr/share/man/man1/{name}.gz"), &gzip(page)?, 0o644)?;
    }
    for (shell, script) in &docs.completions {
        put(completion_path(shell), script.as_bytes(), 0o644)?;
    }
    put("lib/systemd/system/tfo-trace-exporter.service", unit()?.as_bytes(), 0o644)?;
    put("usr/share/doc/tfo-trace/copyright", copyright(arch, source)?.as_bytes(), 0o644)?;
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

/// deploy/'s unit with the package's binary path (the repository's is for a hand install
/// in /usr/local/bin).
fn unit() -> Result<String> {
    let text = fs::read_to_string(workspace_root().join(UNIT)).with_context(|| format!("reading {UNIT}"))?;
    let exec = format!("ExecStart={HAND_BIN} ");
    if !text.contains(&exec) {
        bail!("{UNIT} has no `{exec}` line to point at {PACKAGE_BIN}");
    }
    Ok(text.replace(&exec, &format!("ExecStart={PACKAGE_BIN} ")))
}

fn control(arch: Arch, installed_kib: u64) -> String {
    format!(
        "Package: tfo-trace
Version: {VERSION}
Architecture: {}
Maintainer: {MAINTAINER}
Installed-Size: {installed_kib}
Section: net
Priority: optional
Description: eBPF tracer for TCP Fast Open (RFC 7413)
 tfo-trace watches the kernel's TCP Fast Open paths with eBPF and reports one
 event per connection and outcome: cookie requested, SYN-data accepted, data
 not acknowledged, SYN-data dropped on the path (the one-second stall), with
 the process, the addresses and the network namespace of each.
 .
 Commands: trace, stalls, top, report, doctor, and export (Prometheus
 metrics; the systemd unit tfo-trace-exporter.service is installed, not
 enabled). One static binary with its eBPF programs embedded; it needs a
 kernel with BTF and CAP_BPF + CAP_PERFMON (or root).
",
        arch.debian()
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

/// Debian's machine-readable copyright: tfo-trace's licence, and what the static binary
/// links into itself (musl, LLVM's libunwind, Rust's std, every crate, each with its
/// licence as its authors declare it).
fn copyright(arch: Arch, source: &Source) -> Result<String> {
    let year = source.year()?;
    let mut bundled = vec![
        "musl libc (MIT)".to_string(),
        "LLVM libunwind (Apache-2.0 WITH LLVM-exception)".to_string(),
        "the Rust standard library (MIT OR Apache-2.0)".to_string(),
    ];
    bundled.extend(crates(arch)?.into_iter().map(|(n, v, l)| format!("{n} {v} ({l})")));
    let comment: String = bundled.iter().map(|b| format!(" {b}\n")).collect();
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: tfo-trace

Files: *
Copyright: {year} tfo-trace developers
License: MIT or Apache-2.0
Comment: The executable is statically linked; it contains:
{comment}
License: MIT
 Permission is hereby granted, free of charge, to any person obtaining a copy
 of this software and associated documentation files (the \"Software\"), to deal
 in the Software without restriction, including without limitation the rights
 to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
 copies of the Software, and to permit persons to whom the Software is
 furnished to do so, subject to the following conditions:
 .
 The above copyright notice and this permission notice shall be included in
 all copies or substantial portions of the Software.
 .
 THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
 IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
 FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
 AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
 LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
 OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
 SOFTWARE.

License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
"
    ))
}

/// (name, version, licence) of every crate the tfo-trace executable is built from for
/// `arch` (normal dependencies, transitively; build-time tools left out).
fn crates(arch: Arch) -> Result<Vec<(String, String, String)>> {
    let meta = capture(cargo().current_dir(workspace_root()).args([
        "metadata",
        "--format-version",
        "1",
        "--filter-platform",
        arch.triple(),
    ]))?;
    let meta: Value = serde_json::from_str(&meta).context("cargo metadata's JSON")?;
    let packages = meta["packages"].as_array().context("packages")?;
    let nodes = meta["resolve"]["nodes"].as_array().context("resolve.nodes")?;
    let root = packages
        .iter()
        .find(|p| p["name"] == "tfo-trace")
        .and_then(|p| p["id"].as_str())
        .context("tfo-trace in cargo metadata")?;
    let mut seen = std::collections::BTreeSet::new();
    let mut todo = vec![root.to_string()];
    while let Some(id) = todo.pop() {
        if !seen.insert(id.clone()) {
            continue;
        }
        let Some(node) = nodes.iter().find(|n| n["id"] == id.as_str()) else { continue };
        for dep in node["deps"].as_array().into_iter().flatten() {
            let normal = dep["dep_kinds"].as_array().into_iter().flatten().any(|k| k["kind"].is_null());
            if normal {
                todo.push(dep["pkg"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    seen.remove(root);
    let mut out: Vec<_> = packages
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| seen.contains(id)))
        .map(|p| {
            let s = |k: &str| p[k].as_str().unwrap_or("unknown").to_string();
            (s("name"), s("version"), s("license"))
        })
        .collect();
    out.sort();
    Ok(out)
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

/// `gzip -9n`: no name or time in the header, so the same page gives the same bytes.
fn gzip(path: &Path) -> Result<Vec<u8>> {
    let out = Command::new("gzip").args(["-9n", "-c"]).arg(path).output().context("gzip")?;
    if !out.status.success() {
        bail!("gzip {} failed", path.display());
    }
    Ok(out.stdout)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packaged_unit_runs_the_packaged_binary() {
        let u = unit().unwrap();
        assert!(u.contains("ExecStart=/usr/bin/tfo-trace export "), "{u}");
        assert!(!u.contains("ExecStart=/usr/local/bin"), "{u}");
    }

    #[test]
    fn completions_go_where_each_shell_looks() {
        assert_eq!(completion_path("bash"), "usr/share/bash-completion/completions/tfo-trace");
        assert_eq!(completion_path("zsh"), "usr/share/zsh/vendor-completions/_tfo-trace");
        assert_eq!(completion_path("fish"), "usr/share/fish/vendor_completions.d/tfo-trace.fish");
    }
}
