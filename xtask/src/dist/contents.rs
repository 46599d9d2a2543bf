//! What every package installs, whatever its format: the binary, the man pages and
//! completions it writes itself, the exporter's systemd unit, the description and the
//! copyright. deb.rs and rpm.rs each put these where their distributions look.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::Source;
use crate::cross::Arch;
use crate::util::{capture, cargo, workspace_root};

/// Who answers for the packages (Debian's Maintainer, rpm's Packager).
pub const MAINTAINER: &str = "tfo-trace developers <tfo-trace@users.noreply.github.com>";
/// The exporter's unit, as shipped in the repository for a hand install.
const UNIT: &str = "deploy/tfo-trace-exporter.service";
/// Where the hand install puts the binary, and where the packages do.
const HAND_BIN: &str = "/usr/local/bin/tfo-trace";
pub const PACKAGE_BIN: &str = "/usr/bin/tfo-trace";
/// The unit's file name, in the directory each distribution keeps units in.
pub const UNIT_NAME: &str = "tfo-trace-exporter.service";
/// The one-line summary (Debian's first Description line, rpm's Summary, which rpmlint
/// wants capitalized).
pub const SUMMARY: &str = "TCP Fast Open (RFC 7413) tracer built on eBPF";
/// The long description's paragraphs.
pub const DESCRIPTION: &[&str] = &[
    "tfo-trace watches the kernel's TCP Fast Open paths with eBPF and reports one \
     event per connection and outcome: cookie requested, SYN-data accepted, data \
     not acknowledged, SYN-data dropped on the path (the one-second stall), with \
     the process, the addresses and the network namespace of each.",
    "Commands: trace, stalls, top, report, doctor, and export (Prometheus \
     metrics; the systemd unit tfo-trace-exporter.service is installed, not \
     enabled). One static binary with its eBPF programs embedded; it needs a \
     kernel with BTF and CAP_BPF + CAP_PERFMON (or root).",
];

/// `text` wrapped at `width` columns, one line each.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("one line at least");
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(word.to_string());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines
}

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

/// Where a family of distributions keeps what the packages install (paths from /).
pub struct Layout {
    /// systemd's units (`%{_unitdir}` on rpm systems).
    pub unit_dir: &'static str,
    /// zsh's completions (Debian's vendor-completions; site-functions elsewhere).
    pub zsh_completion: &'static str,
    /// The copyright and licence file.
    pub copyright: &'static str,
    /// Where that family keeps the Apache License 2.0's full text.
    pub apache_text: &'static str,
}

/// Puts `bytes` at `rel` under `stage` with `mode`, making its folders.
pub fn put(stage: &Path, rel: &str, bytes: &[u8], mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = stage.join(rel);
    fs::create_dir_all(path.parent().context("a parent")?)?;
    fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// Stages in `stage` (emptied first) what every package installs, at `layout`'s paths:
/// the binary in /usr/bin, every man page (gzipped), bash, zsh and fish completions, the
/// exporter's unit, the copyright. Returns the paths staged (from /, sorted).
pub fn stage(
    stage: &Path,
    layout: &Layout,
    arch: Arch,
    exe: &Path,
    docs: &Docs,
    source: &Source,
) -> Result<Vec<String>> {
    let _ = fs::remove_dir_all(stage);
    let mut staged = Vec::new();
    let mut add = |rel: &str, bytes: &[u8], mode: u32| -> Result<()> {
        put(stage, rel, bytes, mode)?;
        staged.push(format!("/{rel}"));
        Ok(())
    };
    add(&PACKAGE_BIN[1..], &fs::read(exe)?, 0o755)?;
    for page in &docs.man_pages {
        let name = page.file_name().context("a page name")?.to_string_lossy();
        add(&format!("usr/share/man/man1/{name}.gz"), &gzip(page)?, 0o644)?;
    }
    for (shell, script) in &docs.completions {
        let path = match *shell {
            "bash" => "usr/share/bash-completion/completions/tfo-trace",
            "zsh" => layout.zsh_completion,
            _ => "usr/share/fish/vendor_completions.d/tfo-trace.fish",
        };
        add(path, script.as_bytes(), 0o644)?;
    }
    add(&format!("{}/{UNIT_NAME}", layout.unit_dir), unit()?.as_bytes(), 0o644)?;
    add(layout.copyright, copyright(arch, source, layout.apache_text)?.as_bytes(), 0o644)?;
    staged.sort();
    Ok(staged)
}

/// deploy/'s unit with the packages' binary path (the repository's is for a hand install
/// in /usr/local/bin).
fn unit() -> Result<String> {
    let text = fs::read_to_string(workspace_root().join(UNIT)).with_context(|| format!("reading {UNIT}"))?;
    let exec = format!("ExecStart={HAND_BIN} ");
    if !text.contains(&exec) {
        bail!("{UNIT} has no `{exec}` line to point at {PACKAGE_BIN}");
    }
    Ok(text.replace(&exec, &format!("ExecStart={PACKAGE_BIN} ")))
}

/// Machine-readable copyright (Debian's format, readable as it is elsewhere): tfo-trace's
/// licence, and what the static binary links into itself (musl, LLVM's libunwind, Rust's
/// std, every crate, each with its licence as its authors declare it). `apache_text`:
/// where the full text of the Apache License 2.0 is on the target system.
fn copyright(arch: Arch, source: &Source, apache_text: &str) -> Result<String> {
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
 {apache_text}
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

/// `gzip -9n`: no name or time in the header, so the same page gives the same bytes.
pub fn gzip(path: &Path) -> Result<Vec<u8>> {
    let out = Command::new("gzip").args(["-9n", "-c"]).arg(path).output().context("gzip")?;
    if !out.status.success() {
        bail!("gzip {} failed", path.display());
    }
    Ok(out.stdout)
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
    fn wraps_at_the_width() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("", 5), [""]);
    }
}
