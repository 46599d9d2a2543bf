//! The rpm packages (RHEL, Fedora, Amazon Linux, SUSE): the same files as the .deb at the
//! paths those distributions use (units in /usr/lib/systemd/system, zsh's site-functions,
//! the licence under /usr/share/licenses), the unit installed and not enabled (no
//! scriptlet at all: `rpm -e` leaves nothing, and nothing runs as root at install).
//!
//! Built by rpmbuild (Debian's `rpm` package, which the test command's set-up installs)
//! from a spec written here and the staged tree, so the demo's set-up builds nothing for
//! it. rpmbuild's own post-install steps are off: the binary is stripped already and
//! built for another architecture than the host's strip knows, the man pages are gzipped
//! already, and a static binary needs no debuginfo package nor build-id links. No
//! Requires: the binary is static (AutoReqProv off; rpm still adds its own rpmlib()
//! features). The payload is gzip, which every rpm reads (Amazon Linux 2's and SLES
//! 12's 4.11 too). Times are the commit's (SOURCE_DATE_EPOCH): the same bytes each build.
//! Not signed: tfo-trace.rpmlintrc beside this file says why (the one rpmlint finding the
//! tests filter).
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::contents::{self, Docs, Layout, MAINTAINER};
use super::{Source, VERSION};
use crate::cross::Arch;
use crate::util::run;

/// The package's release: the first build of each version.
const RELEASE: &str = "1";

/// The paths of Fedora, RHEL and openSUSE (`%{_unitdir}`, zsh's site-functions,
/// `%{_defaultlicensedir}`).
const RPM: Layout = Layout {
    unit_dir: "usr/lib/systemd/system",
    zsh_completion: "usr/share/zsh/site-functions/_tfo-trace",
    copyright: "usr/share/licenses/tfo-trace/COPYRIGHT",
    apache_text: "The full text of the Apache License 2.0: https://www.apache.org/licenses/LICENSE-2.0",
};

/// `tfo-trace-<version>-1.<arch>.rpm` (name-version-release.arch) in `out`, built in `work`.
pub fn build(
    arch: Arch,
    exe: &Path,
    docs: &Docs,
    source: &Source,
    work: &Path,
    out: &Path,
) -> Result<PathBuf> {
    let _ = fs::remove_dir_all(work);
    let stage = work.join("stage");
    let files = contents::stage(&stage, &RPM, arch, exe, docs, source)?;
    let spec = work.join("tfo-trace.spec");
    fs::write(&spec, spec_text(&files, &stage, source)?)
        .with_context(|| format!("writing {}", spec.display()))?;
    let name = format!("tfo-trace-{VERSION}-{RELEASE}.{}.rpm", arch.name());
    let define = |cmd: &mut Command, macro_name: &str, value: &str| {
        cmd.arg("--define").arg(format!("{macro_name} {value}"));
    };
    let mut cmd = Command::new("rpmbuild");
    cmd.env("SOURCE_DATE_EPOCH", source.epoch.to_string())
        .arg("-bb")
        .arg(format!("--target={}-linux", arch.name()));
    define(&mut cmd, "_topdir", &work.join("top").to_string_lossy());
    define(&mut cmd, "_rpmdir", &out.to_string_lossy());
    define(&mut cmd, "_build_name_fmt", &name);
    define(&mut cmd, "__os_install_post", "%{nil}");
    define(&mut cmd, "debug_package", "%{nil}");
    define(&mut cmd, "_build_id_links", "none");
    define(&mut cmd, "_binary_payload", "w9.gzdio");
    define(&mut cmd, "_buildhost", "localhost");
    define(&mut cmd, "use_source_date_epoch_as_buildtime", "1");
    define(&mut cmd, "clamp_mtime_to_source_date_epoch", "1");
    run(cmd.arg(&spec).stdout(std::process::Stdio::null())).context("rpmbuild (Debian's rpm package)")?;
    let rpm = out.join(&name);
    if !rpm.exists() {
        bail!("rpmbuild wrote no {}", rpm.display());
    }
    Ok(rpm)
}

/// The spec: what the package is, `files` (its paths from /, as staged in `stage`) copied
/// into the build root as they are, and a changelog entry for this build.
fn spec_text(files: &[String], stage: &Path, source: &Source) -> Result<String> {
    let description: Vec<String> =
        contents::DESCRIPTION.iter().map(|p| contents::wrap(p, 76).join("\n")).collect();
    let copyright = format!("/{}", RPM.copyright);
    let listed: String = files
        .iter()
        .map(|f| match f.as_str() {
            f if f.starts_with("/usr/share/man/") => format!("%doc {f}\n"),
            f if f == copyright => format!("%license {f}\n"),
            f => format!("{f}\n"),
        })
        .collect();
    let license_dir =
        Path::new(RPM.copyright).parent().context("the licence's folder")?.display().to_string();
    let date = capture_date(source)?;
    Ok(format!(
        "Name: tfo-trace
Version: {VERSION}
Release: {RELEASE}
Summary: {summary}
License: MIT OR Apache-2.0
Group: Applications/System
Packager: {MAINTAINER}
AutoReqProv: no

%description
{description}

%install
cp -a {stage}/. %{{buildroot}}/

%files
%defattr(-,root,root,-)
%dir /{license_dir}
{listed}
%changelog
* {date} {MAINTAINER} - {VERSION}-{RELEASE}
- Built by `cargo xtask dist` from commit {commit}.
",
        summary = contents::SUMMARY,
        description = description.join("\n\n"),
        stage = stage.display(),
        commit = source.commit,
    ))
}

/// `Thu Dec 03 2026`: a %changelog entry's date.
fn capture_date(source: &Source) -> Result<String> {
    let out = crate::util::capture(
        Command::new("date")
            .env("LC_ALL", "C")
            .args(["-u", "+%a %b %d %Y", "-d"])
            .arg(format!("@{}", source.epoch)),
    )?;
    Ok(out.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_marks_pages_as_docs_and_the_copyright_as_licence() {
        let source = Source { commit: "cdbb5da584e3".into(), epoch: 0 };
        let files = [
            "/usr/bin/tfo-trace".to_string(),
            "/usr/share/man/man1/tfo-trace.1.gz".into(),
            format!("/{}", RPM.copyright),
        ];
        let spec = spec_text(&files, Path::new("/stage"), &source).unwrap();
        assert!(spec.contains("\n/usr/bin/tfo-trace\n"), "{spec}");
        assert!(spec.contains("\n%doc /usr/share/man/man1/tfo-trace.1.gz\n"), "{spec}");
        assert!(spec.contains("\n%license /usr/share/licenses/tfo-trace/COPYRIGHT\n"), "{spec}");
        assert!(spec.contains("\n%dir /usr/share/licenses/tfo-trace\n"), "{spec}");
        assert!(spec.contains("* Thu Jan 01 1970 "), "{spec}");
    }
}
