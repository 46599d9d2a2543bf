//! The eBPF build, as aya-build 0.2's `build_ebpf` runs it (the same cargo command: the
//! nightly through `rustup run`, `-Z build-std=core` on a nightly, the package's features,
//! `bpf_target_arch` and BTF in the rustflags, a target directory of its own in OUT_DIR;
//! AYA_BUILD_SKIP honoured; rerun when the package's sources change), with its output
//! kept back. aya-build relays every line the inner cargo prints as a cargo warning, its
//! `Compiling` and `Downloaded` progress too: dozens of `warning:` lines on every clean
//! build. Here a failed build shows all of it, and a good one only rustc's warnings.
use std::{
    env,
    ffi::{OsStr, OsString},
    fs,
    io::{BufReader, Read as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{anyhow, bail, Context as _, Result};
use cargo_metadata::{diagnostic::DiagnosticLevel, Artifact, CompilerMessage, Message};

/// One eBPF package to build: its bins land in OUT_DIR under their own names.
pub struct Package<'a> {
    pub name: &'a str,
    pub root_dir: &'a str,
    pub features: &'a [&'a str],
}

/// The toolchain `rustup run` builds with.
const TOOLCHAIN: &str = "nightly";

pub fn build(package: &Package<'_>) -> Result<()> {
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    if let Some(skip) = env::var_os("AYA_BUILD_SKIP") {
        if skip == "1" || skip.eq_ignore_ascii_case("true") {
            println!("cargo:warning=AYA_BUILD_SKIP={}; skipping eBPF build", skip.to_string_lossy());
            return Ok(());
        }
    }
    // Cargo rebuilds us when the package's library changes (a build-dependency would), not
    // its bins: watch its whole folder.
    println!("cargo:rerun-if-changed={}", package.root_dir);
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR not set")?);
    let (mut cargo, target_dir) = inner_command(package, &out_dir)?;
    // Held until the objects are copied out: another outer build with other features
    // would put its own at the same paths in the shared directory.
    fs::create_dir_all(&target_dir).with_context(|| format!("creating {}", target_dir.display()))?;
    let lock_path = target_dir.join("tfo-trace-build.lock");
    let lock = fs::File::create(&lock_path).with_context(|| format!("creating {}", lock_path.display()))?;
    lock.lock().with_context(|| format!("locking {}", lock_path.display()))?;
    let mut child = cargo
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("failed to spawn {cargo:?}"))?;
    // cargo's own lines (progress, and its errors) on stderr, read aside so that neither
    // pipe fills while the other is read.
    let mut stderr = child.stderr.take().context("the eBPF build's stderr")?;
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let stdout = BufReader::new(child.stdout.take().context("the eBPF build's stdout")?);
    let mut executables = Vec::new();
    // Every diagnostic and stray line, for a failure; the warnings apart.
    let (mut said, mut warnings) = (Vec::new(), Vec::new());
    for message in Message::parse_stream(stdout) {
        match message.context("the eBPF build's messages")? {
            Message::CompilerArtifact(Artifact { executable: Some(exe), target, .. }) => {
                executables.push((target.name, exe.into_std_path_buf()));
            }
            Message::CompilerMessage(CompilerMessage { message, .. }) => {
                let rendered = message.rendered.unwrap_or(message.message);
                if message.level == DiagnosticLevel::Warning {
                    warnings.push(rendered.clone());
                }
                said.push(rendered);
            }
            Message::TextLine(line) => said.push(line),
            _ => {}
        }
    }
    let status = child.wait().with_context(|| format!("failed to wait for {cargo:?}"))?;
    let stderr = stderr.join().map_err(|_| anyhow!("reading the eBPF build's stderr"))?;
    if !status.success() {
        // Cargo shows a failed build script's stderr: all of it, so the error is there,
        // the compiler's first.
        for text in &said {
            eprintln!("{text}");
        }
        eprint!("{stderr}");
        bail!("the eBPF build failed ({status}): {cargo:?}");
    }
    for line in warnings.iter().flat_map(|w| w.trim_end().lines()) {
        println!("cargo:warning={line}");
    }
    for (name, exe) in executables {
        let dst = out_dir.join(name);
        fs::copy(&exe, &dst).with_context(|| format!("copying {} to {}", exe.display(), dst.display()))?;
    }
    drop(lock);
    Ok(())
}

/// `cargo build` of the package's bins for the bpf target of this build's endianness.
/// With the target directory it builds in.
fn inner_command(package: &Package<'_>, out_dir: &Path) -> Result<(Command, PathBuf)> {
    let target = match env::var("CARGO_CFG_TARGET_ENDIAN")?.as_str() {
        "little" => "bpfel-unknown-none",
        "big" => "bpfeb-unknown-none",
        other => bail!("unsupported endian={other}"),
    };
    let arch = env::var("CARGO_CFG_TARGET_ARCH")?;
    let arch = if arch.starts_with("riscv64") { "riscv64" } else { arch.as_str() };
    let rustup = which::which("rustup");
    if let Err(e) = &rustup {
        println!("cargo:warning=which(rustup)={e}; proceeding with current toolchain");
    }
    let tool = |program: &str| match &rustup {
        Ok(rustup) => {
            let mut c = Command::new(rustup);
            c.args(["run", TOOLCHAIN, program]);
            c
        }
        Err(_) => Command::new(program),
    };
    let channel = rustc_version::VersionMeta::for_command(tool("rustc"))
        .context("failed to get rustc version meta")?
        .channel;
    // RUSTC_BOOTSTRAP: "1" or the package's name allows -Z flags, "-1" forbids them;
    // otherwise the compiler's channel decides.
    let build_std = match env::var_os("RUSTC_BOOTSTRAP") {
        Some(b) if b == "1" || b == package.name => true,
        Some(b) if b == "-1" => false,
        _ => channel == rustc_version::Channel::Nightly,
    };
    let mut cargo = tool("cargo");
    cargo.args(["build", "--package", package.name, "--bins", "--message-format=json", "--release"]);
    cargo.args(["--target", target]);
    if build_std {
        cargo.args(["-Z", "build-std=core"]);
    }
    cargo.args(["--features", &package.features.join(",")]);
    let rustflags: Vec<String> =
        [format!("--cfg=bpf_target_arch=\"{arch}\""), "-Cdebuginfo=2".into(), "-Clink-arg=--btf".into()]
            .into();
    cargo.env("CARGO_ENCODED_RUSTFLAGS", OsString::from(rustflags.join("\x1f")));
    // The toolchain rustup picked, not the outer build's compiler or wrapper.
    for key in ["RUSTC", "RUSTC_WORKSPACE_WRAPPER"] {
        cargo.env_remove(key);
    }
    let target_dir = inner_target_dir(package, out_dir, arch);
    cargo.arg("--target-dir").arg(OsStr::new(&target_dir));
    Ok((cargo, target_dir))
}

/// A target directory apart from the outer build's (which cargo has locked): one per
/// architecture beside it, `ebpf/<arch>/<package>` in the outer target directory (the
/// ancestor of OUT_DIR that holds cargo's CACHEDIR.TAG), shared by the outer builds of
/// every profile, target triple and feature set. Building `core` for the bpf target is
/// most of an eBPF build (about 45 of 50 CPU-seconds here), and the test command's builds
/// (debug, and release for two targets with and without `fixtures`) each paid it in an
/// OUT_DIR of their own. The inner cargo locks the directory and rebuilds what changed;
/// `bpf_target_arch` is in the rustflags, which cargo does not keep apart, hence one per
/// architecture. Where no tag is found (another build system), OUT_DIR as before.
fn inner_target_dir(package: &Package<'_>, out_dir: &Path, arch: &str) -> PathBuf {
    match out_dir.ancestors().find(|dir| dir.join("CACHEDIR.TAG").is_file()) {
        Some(outer) => outer.join("ebpf").join(arch).join(package.name),
        None => out_dir.join("aya-build").join("target").join(package.name),
    }
}
