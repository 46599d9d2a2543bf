//! `cargo xtask setup`: checks each prerequisite and installs what is missing.
//! Prints one line per item: `ok: ...` or `installing: ...`.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};

use crate::util::{capture, cargo_home, is_root, nightly, probe, run, which};

/// Debian packages the demo needs (`cargo xtask demo`, `tfo-trace demo`): ip for the lab's
/// namespaces, nft for its middlebox, sysctl for TFO in each namespace, and dnsmasq as the
/// lab's DNS server for `--names`.
const DEB_DEMO: &[&str] = &["iproute2", "nftables", "procps", "dnsmasq-base"];
/// Debian packages the tests use beyond the demo's (nstat and tc come with iproute2):
/// tcpdump, tmux, bpftool, prometheus for promtool, which checks the shipped alerting
/// rules (deploy/prometheus, tests/integration/export.rs), and the real Prometheus the
/// export tests and the Grafana dashboard's test query, prometheus-alertmanager, which
/// tests/integration/export.rs runs the rules' alerts through end to end, and openssl and
/// curl, which make a certificate for `export --web.config.file` and scrape over TLS:
/// tests/integration/export_http.rs, and hping3, the SYN flood of
/// tests/integration/server_outcomes.rs.
const DEB_TEST: &[&str] =
    &["tcpdump", "tmux", "bpftool", "prometheus", "prometheus-alertmanager", "openssl", "curl", "hping3"];
/// `cargo xtask dist` and its checks in the test suite (tests/integration/dist.rs): the
/// musl and cross toolchains (with cross.rs's `Arch::packages`), readelf, qemu-user for the
/// aarch64 binary, debootstrap for a Debian 11 userspace, lintian for the .debs, rpmlint
/// for the rpms and rpm to install one into a scratch root.
const DEB_DIST: &[&str] = &["binutils", "qemu-user-static", "debootstrap", "lintian", "rpmlint", "rpm"];
/// The foreign architecture whose packages the aarch64 build needs (musl-dev:arm64).
const FOREIGN_ARCH: &str = "arm64";
/// Nice to have (setcap for tests/integration/capabilities.rs, systemd for its
/// `systemd-analyze verify` of the shipped unit, dockerd and podman for
/// tests/integration/containers.rs and the image check of tests/integration/dist.rs, and
/// catatonit, the pause program of the pod `podman kube play` makes of the DaemonSet in
/// tests/integration/containers.rs, which skip without them); a failed install is only a
/// warning.
const DEB_OPTIONAL: &[&str] = &["libcap2-bin", "systemd", "docker.io", "podman", "catatonit"];
/// Nice to have from PyPI (no Debian package has them), each with how to tell it is there:
/// kubernetes-validate, Kubernetes' schema check of deploy/kubernetes/ in
/// tests/integration/containers.rs, and Grafana's foundation SDK, which writes the
/// dashboard (`cargo xtask grafana`) and with which tests/integration/export/dashboard.rs
/// checks the committed one; each test skips without its tool.
const PYPI_OPTIONAL: &[(Present, &str)] = &[
    (Present::Command("kubernetes-validate"), "kubernetes-validate==1.37.0"),
    (Present::Module(crate::grafana::SDK_MODULE), crate::grafana::SDK),
];

/// How to tell a PyPI package is installed.
#[derive(Clone, Copy)]
pub enum Present {
    /// A command it puts in PATH.
    Command(&'static str),
    /// A module python3 imports.
    Module(&'static str),
}

impl Present {
    pub fn holds(self) -> bool {
        match self {
            Present::Command(c) => which(c).is_some(),
            Present::Module(m) => {
                probe(Command::new("python3").args(["-c", &format!("import {m}")])).is_some()
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Present::Command(n) | Present::Module(n) => n,
        }
    }
}

/// Records the LLVM major the installed bpf-linker was built for (it can't tell itself).
const STAMP: &str = "bpf-linker.llvm-major";

/// What a task needs installed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Build tfo-trace and run its lab (`build`, `demo`): the nightly's rust-src,
    /// bpf-linker and [`DEB_DEMO`].
    Demo,
    /// Everything `test` runs besides: the gates' components, `dist`'s cross toolchains,
    /// the tests' packages, the VM kernels' apt suites.
    Everything,
}

/// Everything (`test`, `dist`, `vm`, ...).
pub fn setup() -> Result<()> {
    setup_for(Need::Everything)
}

pub fn setup_for(need: Need) -> Result<()> {
    let cargo_bin = cargo_home()?.join("bin");
    ensure_in_path(&cargo_bin)?;
    let rustc_vv = nightly_toolchain()?;
    rust_components(need)?;
    let major = llvm_major(&rustc_vv)?;
    bpf_linker(&major, &cargo_bin)?;
    debian_packages(need)?;
    if need == Need::Everything {
        python_tools();
        vm_kernel_suites()?;
    }
    Ok(())
}

/// bpf-linker lands in `$CARGO_HOME/bin`; the eBPF build (tfo-trace/build.rs -> rustc) finds it in PATH.
fn ensure_in_path(dir: &Path) -> Result<()> {
    let path = env::var_os("PATH").unwrap_or_default();
    if env::split_paths(&path).any(|p| p == dir) {
        return Ok(());
    }
    let joined = env::join_paths(std::iter::once(dir.to_path_buf()).chain(env::split_paths(&path)))
        .context("adding $CARGO_HOME/bin to PATH")?;
    env::set_var("PATH", joined);
    Ok(())
}

// ---- Rust toolchain -------------------------------------------------------------------

/// Makes sure `nightly` is installed; returns its `rustc -vV` output.
fn nightly_toolchain() -> Result<String> {
    if let Some(vv) = probe(nightly("rustc").arg("-vV")) {
        println!("ok: nightly toolchain ({})", first_line(&vv));
        return Ok(vv);
    }
    println!("installing: nightly toolchain");
    run(Command::new("rustup").args(["toolchain", "install", "nightly", "--profile", "minimal"]))
        .context("rustup toolchain install nightly")?;
    capture(nightly("rustc").arg("-vV")).context("rustc +nightly -vV after installing nightly")
}

/// rust-src builds `core` for the bpf target; clippy lints the eBPF crate for that target;
/// the default toolchain's clippy and rustfmt are the test command's gates.
fn rust_components(need: Need) -> Result<()> {
    if need == Need::Demo {
        return components(Some("nightly"), &["rust-src"]);
    }
    components(Some("nightly"), &["rust-src", "clippy"])?;
    components(None, &["clippy", "rustfmt"])
}

/// Adds the components `toolchain` (None: the default one) lacks.
fn components(toolchain: Option<&str>, wanted: &[&str]) -> Result<()> {
    let name = toolchain.unwrap_or("default");
    let mut list = Command::new("rustup");
    list.args(["component", "list", "--installed"]);
    list.args(toolchain.map(|t| ["--toolchain", t]).iter().flatten());
    let installed = capture(&mut list).with_context(|| format!("rustup component list ({name})"))?;
    for c in wanted {
        if installed.lines().any(|l| l.trim().starts_with(c)) {
            println!("ok: {c} ({name})");
            continue;
        }
        println!("installing: {c} ({name})");
        let mut add = Command::new("rustup");
        add.args(["component", "add", c]);
        add.args(toolchain.map(|t| ["--toolchain", t]).iter().flatten());
        run(&mut add).with_context(|| format!("rustup component add {c} ({name})"))?;
    }
    Ok(())
}

/// `LLVM version: 22.1.4` -> "22".
fn llvm_major(rustc_vv: &str) -> Result<String> {
    rustc_vv
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version:"))
        .and_then(|v| v.trim().split('.').next())
        .filter(|m| !m.is_empty() && m.chars().all(|c| c.is_ascii_digit()))
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no `LLVM version: N.x` line in `rustc +nightly -vV`:\n{rustc_vv}"))
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("").trim()
}

// ---- bpf-linker -----------------------------------------------------------------------

fn bpf_linker(major: &str, cargo_bin: &Path) -> Result<()> {
    match bpf_linker_state(major, cargo_bin) {
        Ok(version) => {
            println!("ok: {version} (LLVM {major})");
            Ok(())
        }
        Err(why) => {
            println!("installing: bpf-linker for LLVM {major} ({why})");
            install_bpf_linker(major, cargo_bin)
        }
    }
}

/// `Ok(version line)` if an installed bpf-linker runs and was built for LLVM `major`;
/// `Err(reason to reinstall)` otherwise.
fn bpf_linker_state(major: &str, cargo_bin: &Path) -> std::result::Result<String, String> {
    let exe = which("bpf-linker").ok_or("not installed")?;
    // A bpf-linker linked to an older nightly's libLLVM no longer starts: reinstall it.
    let version = probe(Command::new(&exe).arg("--version")).ok_or("installed but does not run")?;
    let built_for = reported_llvm(&exe)
        .or_else(|| crates2_llvm(cargo_bin))
        .or_else(|| stamp_llvm(cargo_bin))
        .ok_or("its LLVM version is unknown")?;
    if built_for != major {
        return Err(format!("installed one is for LLVM {built_for}"));
    }
    Ok(first_line(&version).to_string())
}

/// Newer bpf-linkers may print `LLVM version ...` with `--version --verbose`.
fn reported_llvm(exe: &Path) -> Option<String> {
    let out = probe(Command::new(exe).args(["--version", "--verbose"]))?;
    let rest = out.lines().find_map(|l| l.split_once("LLVM").map(|(_, r)| r.to_string()))?;
    let digits: String =
        rest.chars().skip_while(|c| !c.is_ascii_digit()).take_while(|c| c.is_ascii_digit()).collect();
    (!digits.is_empty()).then_some(digits)
}

/// cargo's own install record: the `llvm-N` feature bpf-linker was installed with.
fn crates2_llvm(cargo_bin: &Path) -> Option<String> {
    let text = fs::read_to_string(cargo_bin.parent()?.join(".crates2.json")).ok()?;
    let entry = &text[text.find("\"bpf-linker ")?..];
    let entry = &entry[..entry.find('}')?];
    let feature = &entry[entry.find("\"llvm-")? + "\"llvm-".len()..];
    let digits: String = feature.chars().take_while(|c| c.is_ascii_digit()).collect();
    (!digits.is_empty()).then_some(digits)
}

fn stamp_path(cargo_bin: &Path) -> Option<PathBuf> {
    Some(cargo_bin.parent()?.join(STAMP))
}

fn stamp_llvm(cargo_bin: &Path) -> Option<String> {
    let text = fs::read_to_string(stamp_path(cargo_bin)?).ok()?;
    Some(text.trim().to_string()).filter(|s| !s.is_empty())
}

/// Builds bpf-linker from crates.io against the nightly's own libLLVM (no system LLVM).
/// Its work is LLVM's, in that library: its own code and dependencies are built at
/// opt-level 1 without the full debug info its release profile asks for (`debug = 2`),
/// which takes a third off its compile time (109 -> 74 CPU seconds here; issue 54).
fn install_bpf_linker(major: &str, cargo_bin: &Path) -> Result<()> {
    let rustflags = bpf_linker_rustflags(major)?;
    let install = |locked: bool| {
        let mut cmd = nightly("cargo");
        cmd.args(["install", "bpf-linker", "--force", "--no-default-features", "--features"])
            .arg(format!("llvm-{major},no-llvm-linking"))
            .env("RUSTFLAGS", &rustflags)
            .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "1")
            .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR");
        if locked {
            cmd.arg("--locked");
        }
        run(&mut cmd).context("cargo +nightly install bpf-linker")
    };
    if let Err(e) = install(true) {
        eprintln!("warning: {e:#}; retrying without --locked");
        install(false)?;
    }
    let exe = which("bpf-linker").context("bpf-linker is not in PATH after cargo install")?;
    capture(Command::new(&exe).arg("--version")).context("bpf-linker --version after install")?;
    let stamp = stamp_path(cargo_bin).context("no parent directory for $CARGO_HOME/bin")?;
    fs::write(&stamp, format!("{major}\n")).with_context(|| format!("writing {}", stamp.display()))
}

/// `-L native=<sysroot>/lib -l dylib=LLVM-<major>-... -C link-arg=-Wl,-rpath,<sysroot>/lib`
fn bpf_linker_rustflags(major: &str) -> Result<String> {
    let sysroot =
        capture(nightly("rustc").args(["--print", "sysroot"])).context("rustc +nightly --print sysroot")?;
    let lib = PathBuf::from(sysroot.trim()).join("lib");
    let llvm = find_libllvm(&lib, major)?;
    let lib = lib.display();
    Ok(format!("-L native={lib} -l dylib={llvm} -C link-arg=-Wl,-rpath,{lib}"))
}

/// `<lib>/libLLVM-22-rust-1.97.0-nightly.so` -> "LLVM-22-rust-1.97.0-nightly".
fn find_libllvm(lib: &Path, major: &str) -> Result<String> {
    let prefix = format!("libLLVM-{major}");
    let entries = fs::read_dir(lib).with_context(|| format!("listing {}", lib.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix) && n.ends_with(".so"))
        .collect();
    names.sort();
    let name = names
        .into_iter()
        .find(|n| n[prefix.len()..].starts_with(['-', '.']))
        .with_context(|| format!("no {prefix}-*.so in {} (is the nightly complete?)", lib.display()))?;
    Ok(name["lib".len()..name.len() - ".so".len()].to_string())
}

// ---- Debian packages ------------------------------------------------------------------

fn debian_packages(need: Need) -> Result<()> {
    if which("dpkg-query").is_none() {
        println!("warning: no dpkg-query (not Debian?): install by hand: {}", DEB_DEMO.join(" "));
        return Ok(());
    }
    let mut wanted: Vec<&str> = DEB_DEMO.to_vec();
    let mut optional: &[&str] = &[];
    if need == Need::Everything {
        wanted.extend(DEB_TEST.iter().chain(DEB_DIST));
        wanted.extend(crate::cross::Arch::ALL.iter().flat_map(|a| a.packages().iter().copied()));
        optional = DEB_OPTIONAL;
    }
    let required = missing(&wanted);
    let optional = missing(optional);
    if required.is_empty() && optional.is_empty() {
        return Ok(());
    }
    if is_root() && required.iter().any(|p| p.ends_with(&format!(":{FOREIGN_ARCH}"))) {
        foreign_architecture()?;
    }
    if !is_root() {
        if required.is_empty() {
            println!("warning: optional package(s) not installed: {}", optional.join(" "));
            return Ok(());
        }
        bail!("missing Debian packages; as root run: apt-get install {}", required.join(" "));
    }
    crate::apt::run(apt().arg("update")).context("apt-get update")?;
    if !required.is_empty() {
        crate::apt::run(&mut apt_install(&required)).context("apt-get install")?;
    }
    if !optional.is_empty() {
        if let Err(e) = crate::apt::run(&mut apt_install(&optional)) {
            println!("warning: optional package(s) not installed ({e:#})");
        }
    }
    Ok(())
}

/// Installs each missing [`PYPI_OPTIONAL`] with the machine's `python3 -m pip`; a failure
/// (no pip, or a Python that refuses packages outside apt) is only a warning.
fn python_tools() {
    for (present, requirement) in PYPI_OPTIONAL {
        if let Err(e) = pip_install(*present, requirement) {
            println!("warning: {e:#}");
        }
    }
}

/// Installs `requirement` with the machine's `python3 -m pip` unless `present` holds.
pub fn pip_install(present: Present, requirement: &str) -> Result<()> {
    let name = present.name();
    if present.holds() {
        println!("ok: {name}");
        return Ok(());
    }
    println!("installing: {requirement} (pip)");
    run(Command::new("python3").args(["-m", "pip", "install", "--quiet", requirement]))
        .with_context(|| format!("{requirement} not installed"))?;
    if !present.holds() {
        bail!("{requirement} installed, but {name} is not found");
    }
    Ok(())
}

// ---- Debian suites for the VM kernels --------------------------------------------------

/// Where setup lists the suites the VM matrix takes kernels from (deb822 format).
const VM_SUITES_FILE: &str = "/etc/apt/sources.list.d/tfo-trace-vm-kernels.sources";
/// The suites beyond the machine's own (bookworm) that hold kernels the VM matrix boots:
/// bullseye (Debian 11) has the 5.10 cloud kernel, what Debian 11, Amazon Linux 2 and older
/// Bottlerocket fleets run.
const VM_SUITES: &[&str] = &["bullseye"];

/// Adds [`VM_SUITES`] to apt's sources (once: a suite listed anywhere already is left
/// alone) and refreshes the index when it added one. Older suites never win an upgrade
/// (their versions are lower), so the machine's own packages stay as they are.
fn vm_kernel_suites() -> Result<()> {
    let listed = listed_suites();
    let missing: Vec<&str> = VM_SUITES.iter().copied().filter(|s| !listed.iter().any(|l| l == s)).collect();
    if missing.is_empty() {
        println!("ok: apt suites for the VM kernels ({})", VM_SUITES.join(", "));
        return Ok(());
    }
    if !is_root() || which("apt-get").is_none() {
        println!(
            "warning: apt lists no {} suite: `cargo xtask vm --kernel 5.10` needs it (run setup as root)",
            missing.join(", ")
        );
        return Ok(());
    }
    println!("installing: apt suite(s) {} ({VM_SUITES_FILE})", missing.join(", "));
    let entry = format!(
        "# Added by `cargo xtask setup`: kernels for `cargo xtask vm` (docs/vm.md).\n\
         Types: deb\nURIs: http://deb.debian.org/debian\nSuites: {}\nComponents: main\n\
         Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
        missing.join(" ")
    );
    fs::write(VM_SUITES_FILE, entry).with_context(|| format!("writing {VM_SUITES_FILE}"))?;
    crate::apt::run(apt().args(["update", "-q"])).context("apt-get update")
}

/// Every suite named in apt's sources (one-line and deb822 formats).
fn listed_suites() -> Vec<String> {
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(dir) = fs::read_dir("/etc/apt/sources.list.d") {
        files.extend(
            dir.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "list" || x == "sources")),
        );
    }
    files.iter().filter_map(|f| fs::read_to_string(f).ok()).flat_map(|t| suites_in(&t)).collect()
}

/// The suites of one sources file: `Suites: a b` lines (deb822), or the third word of
/// `deb [opts] URI SUITE COMPONENTS` lines.
fn suites_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
        if let Some(rest) = line.strip_prefix("Suites:") {
            out.extend(rest.split_whitespace().map(str::to_string));
        } else if let Some(rest) = line.strip_prefix("deb ") {
            let rest = match rest.trim_start().strip_prefix('[') {
                Some(r) => r.split_once(']').map_or("", |(_, r)| r),
                None => rest,
            };
            out.extend(rest.split_whitespace().nth(1).map(str::to_string));
        }
    }
    out
}

/// Lets apt install `FOREIGN_ARCH` packages: `dpkg --add-architecture` (once), and, when no
/// source then offers them (a sources entry limited to amd64), one sources file of our own
/// for the same suites. Both steps are skipped when already done.
fn foreign_architecture() -> Result<()> {
    let foreign = capture(Command::new("dpkg").arg("--print-foreign-architectures"))?;
    if !foreign.lines().any(|a| a.trim() == FOREIGN_ARCH) {
        println!("installing: dpkg architecture {FOREIGN_ARCH}");
        crate::apt::run(Command::new("dpkg").args(["--add-architecture", FOREIGN_ARCH]))?;
    }
    crate::apt::run(apt().arg("update")).context("apt-get update")?;
    let probe_pkg = format!("musl-dev:{FOREIGN_ARCH}");
    if has_candidate(&probe_pkg) {
        return Ok(());
    }
    let codename = capture(Command::new("sh").args(["-c", ". /etc/os-release && echo $VERSION_CODENAME"]))?;
    let codename = codename.trim();
    if codename.is_empty() {
        bail!("no {FOREIGN_ARCH} packages offered and no VERSION_CODENAME in /etc/os-release");
    }
    let path = Path::new(EXTRA_SOURCES);
    println!("installing: {} ({FOREIGN_ARCH} packages of {codename})", path.display());
    let text = format!(
        "# Written by `cargo xtask setup`: the {FOREIGN_ARCH} packages tfo-trace's aarch64 build needs.\n\
         Types: deb\nURIs: http://deb.debian.org/debian\nSuites: {codename} {codename}-updates\n\
         Components: main\nArchitectures: {FOREIGN_ARCH}\n\
         Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    );
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    crate::apt::run(apt().arg("update")).context("apt-get update")?;
    if !has_candidate(&probe_pkg) {
        bail!("apt offers no {probe_pkg} even with {}", path.display());
    }
    Ok(())
}

/// Our own sources file, written only when the machine's sources offer no arm64 packages.
const EXTRA_SOURCES: &str = "/etc/apt/sources.list.d/tfo-trace-arm64.sources";

fn has_candidate(pkg: &str) -> bool {
    probe(Command::new("apt-cache").args(["policy", pkg]))
        .is_some_and(|p| p.lines().any(|l| l.trim().starts_with("Candidate:") && !l.contains("(none)")))
}

/// Prints one line per package; returns those not installed.
fn missing<'a>(pkgs: &[&'a str]) -> Vec<&'a str> {
    pkgs.iter()
        .copied()
        .filter(|p| {
            let installed = deb_installed(p);
            println!("{}: deb {p}", if installed { "ok" } else { "installing" });
            !installed
        })
        .collect()
}

fn deb_installed(pkg: &str) -> bool {
    probe(Command::new("dpkg-query").args(["-W", "-f=${Status}", pkg]))
        .is_some_and(|s| s.trim() == "install ok installed")
}

/// apt-get, waiting for another package manager's locks first (crate::apt).
fn apt() -> Command {
    crate::apt::apt_get()
}

fn apt_install(pkgs: &[&str]) -> Command {
    let mut cmd = apt();
    cmd.args(["install", "-y", "--no-install-recommends"]).args(pkgs);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_llvm_major() {
        let vv = "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)\nhost: x\nLLVM version: 22.1.4\n";
        assert_eq!(llvm_major(vv).ok().as_deref(), Some("22"));
        assert!(llvm_major("rustc 1.0\n").is_err());
    }

    #[test]
    fn suites_of_both_source_formats() {
        let deb822 = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n";
        assert_eq!(suites_in(deb822), ["bookworm", "bookworm-updates"]);
        let one_line = "deb [arch=amd64] http://deb.debian.org/debian bullseye main\n# deb x trixie main\n";
        assert_eq!(suites_in(one_line), ["bullseye"]);
        assert_eq!(suites_in("deb https://x/apt cloud-sdk-bookworm main"), ["cloud-sdk-bookworm"]);
    }

    #[test]
    fn reads_crates2_feature() {
        let dir = env::temp_dir().join(format!("xtask-crates2-{}", std::process::id()));
        let bin = dir.join("bin");
        let json =
            r#"{"installs":{"bpf-linker 0.13.0 (registry+x)":{"features":["llvm-22","no-llvm-linking"]}}}"#;
        let written = fs::create_dir_all(&bin).and_then(|()| fs::write(dir.join(".crates2.json"), json));
        assert!(written.is_ok());
        assert_eq!(crates2_llvm(&bin).as_deref(), Some("22"));
        let _ = fs::remove_dir_all(&dir);
    }
}
