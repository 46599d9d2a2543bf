//! Cross builds: tfo-trace, or its test executables, as fully static musl executables for
//! x86_64 and aarch64, made on this x86_64 host from what rustup's installed nightly and
//! Debian's packages provide (`cargo xtask setup` installs them).
//!
//! rustup cannot download a target's standard library here, so std is built from the
//! nightly's `rust-src` (`-Zbuild-std`). A musl target's std normally takes its C runtime
//! and its unwinder from rust-std's `self-contained` folder, which only that download has;
//! here they come from:
//! - musl's libc.a and start files: Debian's `musl-dev` (amd64) and `musl-dev:arm64`;
//! - the linker driver: Debian's `gcc` / `gcc-aarch64-linux-gnu`, pointed at musl by a
//!   specs file written here (Debian's musl-gcc.specs, plus `-static-pie`: rustc links
//!   musl executables as static PIE, so the binary keeps its address randomisation);
//! - the unwinder (panics, backtraces): LLVM's libunwind from the same `rust-src`
//!   (src/llvm-project/libunwind), compiled here with that gcc, as rustc's own musl std
//!   ships it. gcc's libgcc_eh cannot stand in: Debian builds it for glibc (it calls
//!   `_dl_find_object`).
//!
//! Everything made for the toolchain goes to `target/cross/<triple>/`, once.
//!
//! Other tasks build with [`cross_build`]: `cross_build(&[Arch::Aarch64], What::Tracer)`
//! gives the static aarch64 `tfo-trace`; `What::Tests` gives the test executables
//! (`cargo test --no-run`: unit and integration tests) for booting in an arm64 VM or
//! running under qemu-user ([`Arch::runner`]).
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::util::{capture, display, nightly, run, target_dir, workspace_root};

/// The architectures tfo-trace ships for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    #[value(name = "x86_64")]
    X86_64,
    Aarch64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// As in file names (`tfo-trace-0.1.0-aarch64-linux`) and `uname -m`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// The Rust target.
    pub fn triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-musl",
            Arch::Aarch64 => "aarch64-unknown-linux-musl",
        }
    }

    /// Debian's (and the OCI image's) name for it.
    pub fn debian(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }

    /// Where Debian's musl-dev for this architecture keeps libc.a and the start files.
    fn musl_lib(self) -> PathBuf {
        PathBuf::from(format!("/usr/lib/{}-linux-musl", self.name()))
    }

    fn musl_include(self) -> PathBuf {
        PathBuf::from(format!("/usr/include/{}-linux-musl", self.name()))
    }

    /// The gcc that links for this architecture (Debian's native or cross compiler).
    fn gcc(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-linux-gnu-gcc",
            Arch::Aarch64 => "aarch64-linux-gnu-gcc",
        }
    }

    fn ar(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-linux-gnu-ar",
            Arch::Aarch64 => "aarch64-linux-gnu-ar",
        }
    }

    /// The Debian packages its build needs (what `cargo xtask setup` installs).
    pub fn packages(self) -> &'static [&'static str] {
        match self {
            Arch::X86_64 => &["musl-dev:amd64", "gcc", "g++"],
            Arch::Aarch64 => &["musl-dev:arm64", "gcc-aarch64-linux-gnu", "g++-aarch64-linux-gnu"],
        }
    }

    /// What runs its executables on this host: nothing for the host's own architecture,
    /// else qemu-user (Debian's `qemu-user-static`).
    pub fn runner(self) -> Option<&'static str> {
        match self {
            Arch::X86_64 => None,
            Arch::Aarch64 => Some("qemu-aarch64-static"),
        }
    }

    /// A command that runs `exe` (built for this architecture) here.
    pub fn command(self, exe: &Path) -> Command {
        match self.runner() {
            None => Command::new(exe),
            Some(qemu) => {
                let mut c = Command::new(qemu);
                c.arg(exe);
                c
            }
        }
    }

    /// `CARGO_TARGET_<TRIPLE>_...` and `CC_<triple>` spellings.
    fn env_upper(self) -> String {
        self.triple().to_uppercase().replace('-', "_")
    }

    fn env_lower(self) -> String {
        self.triple().replace('-', "_")
    }
}

/// The Cargo profile of [`What::Tracer`] (the workspace's Cargo.toml).
pub const PROFILE: &str = "release-static";

/// What [`cross_build`] builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// `tfo-trace` (profile `release-static`: release, stripped), the eBPF object embedded.
    Tracer,
    /// Every test executable of the tfo-trace package (`cargo test --no-run`, dev profile).
    Tests,
    /// Only the integration test executable (`--test integration`: a VM runs no unit
    /// test, and each static executable takes its time to link), and the `tfo-trace` it
    /// runs, in [`PROFILE`]: the arm64 cells of `cargo xtask test` come after `dist`, whose
    /// dependencies (and std) it reuses: 3 crates compiled instead of every one (6 min 22 s
    /// of the test command's VM preparation on a quiet machine before). Stripped, so a
    /// failing test there prints its message without symbols in its backtrace.
    Integration,
}

/// One executable a cross build made.
#[derive(Clone, Debug)]
pub struct Built {
    pub arch: Arch,
    /// The cargo target's name (`tfo-trace`, `integration`).
    pub name: String,
    /// A test harness (`cargo test --no-run` also builds the `tfo-trace` binary itself,
    /// which the integration tests run, under the same name as its unit tests).
    pub test: bool,
    /// The integration tests (`tests/integration/`), as opposed to a crate's unit tests.
    pub integration: bool,
    pub exe: PathBuf,
}

/// Builds `what` for every architecture in `arches` in one cargo run (build scripts and
/// proc macros are built once for all of them); returns the executables.
pub fn cross_build(arches: &[Arch], what: What) -> Result<Vec<Built>> {
    let mut cmd = nightly("cargo");
    cmd.current_dir(workspace_root());
    match what {
        What::Tracer => cmd.args(["build", "--profile", PROFILE, "-p", "tfo-trace", "--bin", "tfo-trace"]),
        What::Tests => cmd.args(["test", "--no-run", "-p", "tfo-trace"]),
        What::Integration => cmd.args([
            "test",
            "--no-run",
            "--profile",
            PROFILE,
            "-p",
            "tfo-trace",
            "--test",
            crate::testlines::INTEGRATION,
        ]),
    };
    // std from rust-src; panic_unwind too, so panics unwind and print as on the host.
    cmd.args(["-Z", "build-std=std,panic_unwind", "--message-format=json-render-diagnostics"]);
    // Flags from the environment would replace the per-target ones below.
    cmd.env_remove("RUSTFLAGS").env_remove("CARGO_ENCODED_RUSTFLAGS");
    for &arch in arches {
        let tc = toolchain(arch)?;
        cmd.args(["--target", arch.triple()]);
        let specs = format!("-specs={}", tc.specs.display());
        let flags = format!(
            "-C link-self-contained=no -C link-arg={specs} -L native={} -C link-arg={}",
            tc.lib_dir.display(),
            tc.libgcc.display()
        );
        cmd.env(format!("CARGO_TARGET_{}_LINKER", arch.env_upper()), arch.gcc())
            .env(format!("CARGO_TARGET_{}_RUSTFLAGS", arch.env_upper()), flags)
            // C code in a crate (the cc crate) is compiled for musl too.
            .env(format!("CC_{}", arch.env_lower()), arch.gcc())
            .env(format!("AR_{}", arch.env_lower()), arch.ar())
            .env(format!("CFLAGS_{}", arch.env_lower()), &specs);
    }
    println!("+ {}", display(&cmd));
    let mut child = cmd.stdout(Stdio::piped()).spawn().context("starting cargo (cross build)")?;
    let stdout = child.stdout.take().context("cargo stdout")?;
    let mut built = Vec::new();
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            println!("{line}");
            continue;
        };
        if let Some(b) = executable(&msg, arches) {
            built.push(b);
        }
    }
    let status = child.wait().context("waiting for cargo (cross build)")?;
    if !status.success() {
        bail!("cross build for {} failed: {status}", names(arches));
    }
    for &arch in arches {
        if !built.iter().any(|b| b.arch == arch) {
            bail!("the cross build for {} named no executable", arch.name());
        }
    }
    Ok(built)
}

/// `x86_64, aarch64`.
pub fn names(arches: &[Arch]) -> String {
    arches.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ")
}

/// A `compiler-artifact` message's executable, with the architecture its path names.
fn executable(msg: &Value, arches: &[Arch]) -> Option<Built> {
    if msg["reason"] != "compiler-artifact" {
        return None;
    }
    let exe = PathBuf::from(msg["executable"].as_str()?);
    let arch = *arches.iter().find(|a| exe.components().any(|c| c.as_os_str() == a.triple()))?;
    let name = msg["target"]["name"].as_str()?.to_string();
    let test = msg["profile"]["test"].as_bool().unwrap_or(false);
    let kinds = msg["target"]["kind"].as_array();
    let integration = kinds.is_some_and(|k| k.iter().any(|k| k == "test"));
    Some(Built { arch, name, test, integration, exe })
}

/// What the linker needs for one architecture, beyond Debian's packages.
struct Toolchain {
    specs: PathBuf,
    /// Holds libunwind.a.
    lib_dir: PathBuf,
    /// gcc's libgcc.a, last on the line: C code in a crate (mimalloc) calls its helpers
    /// (`__popcountdi2`), and rustc links with `-nodefaultlibs`, which leaves it out.
    libgcc: PathBuf,
}

/// Writes the specs file and builds libunwind.a for `arch` in `target/cross/<triple>/`
/// (the library once per nightly: its sources come with it).
fn toolchain(arch: Arch) -> Result<Toolchain> {
    let libc = arch.musl_lib().join("libc.a");
    if !libc.exists() {
        bail!(
            "{} is missing: the {} build needs Debian's {}; run `cargo xtask setup`",
            libc.display(),
            arch.name(),
            arch.packages().join(" ")
        );
    }
    let dir = target_dir().join("cross").join(arch.triple());
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let specs = dir.join("musl.specs");
    fs::write(&specs, specs_text(arch)).with_context(|| format!("writing {}", specs.display()))?;
    let sysroot =
        capture(nightly("rustc").args(["--print", "sysroot"])).context("rustc +nightly --print sysroot")?;
    let sources = Path::new(sysroot.trim()).join("lib/rustlib/src/rust/src/llvm-project/libunwind");
    let stamp = dir.join("libunwind.stamp");
    let want = format!("{}\n", sources.display());
    let lib = dir.join("libunwind.a");
    if !(lib.exists() && fs::read_to_string(&stamp).is_ok_and(|s| s == want)) {
        build_libunwind(arch, &sources, &specs, &dir)?;
        fs::write(&stamp, want).with_context(|| format!("writing {}", stamp.display()))?;
    }
    let libgcc = capture(Command::new(arch.gcc()).arg("-print-libgcc-file-name"))?;
    Ok(Toolchain { specs, lib_dir: dir, libgcc: PathBuf::from(libgcc.trim()) })
}

/// Debian's musl-gcc.specs for `arch`, with `-static-pie` handled (rcrt1.o, no dynamic
/// linker) and without libgcc_eh (the unwinder is libunwind.a).
fn specs_text(arch: Arch) -> String {
    let (lib, inc) = (arch.musl_lib(), arch.musl_include());
    let (lib, inc) = (lib.display(), inc.display());
    format!(
        "%rename cpp_options old_cpp_options

*cpp_options:
-nostdinc -isystem {inc} -isystem include%s %(old_cpp_options)

*cc1:
%(cc1_cpu) -nostdinc -isystem {inc} -isystem include%s

*link_libgcc:
-L{lib} -L .%s

*libgcc:
libgcc.a%s

*startfile:
%{{static-pie: {lib}/rcrt1.o; !shared: {lib}/Scrt1.o}} {lib}/crti.o crtbeginS.o%s

*endfile:
crtendS.o%s {lib}/crtn.o

*link:
-nostdlib %{{shared:-shared}} %{{static-pie:-static -pie --no-dynamic-linker -z text}} %{{!static-pie:%{{!shared:-static}}}}

"
    )
}

/// LLVM's libunwind for `arch`, compiled as rustc's bootstrap compiles it for its musl
/// targets (src/bootstrap: `Libunwind`): C, assembly and one C++ file without the C++
/// library.
fn build_libunwind(arch: Arch, sources: &Path, specs: &Path, out: &Path) -> Result<()> {
    println!("cross: building LLVM libunwind for {} from {}", arch.name(), sources.display());
    let objs = out.join("libunwind-obj");
    let _ = fs::remove_dir_all(&objs);
    fs::create_dir_all(&objs).with_context(|| format!("creating {}", objs.display()))?;
    let common = [
        format!("-specs={}", specs.display()),
        "-O2".into(),
        "-fPIC".into(),
        format!("-I{}", sources.join("include").display()),
        "-funwind-tables".into(),
        "-fvisibility=hidden".into(),
        "-fstrict-aliasing".into(),
        "-D_LIBUNWIND_DISABLE_VISIBILITY_ANNOTATIONS".into(),
        "-D_LIBUNWIND_IS_NATIVE_ONLY".into(),
        "-D_LIBUNWIND_HIDE_SYMBOLS".into(),
        "-DNDEBUG".into(),
    ];
    let files: [(&str, &[&str]); 5] = [
        ("UnwindLevel1.c", &["-std=c99"]),
        ("UnwindLevel1-gcc-ext.c", &["-std=c99"]),
        ("UnwindRegistersRestore.S", &[]),
        ("UnwindRegistersSave.S", &[]),
        ("libunwind.cpp", &["-x", "c++", "-std=c++17", "-nostdinc++", "-fno-exceptions", "-fno-rtti"]),
    ];
    let mut made = Vec::new();
    for (file, extra) in files {
        let obj = objs.join(format!("{file}.o"));
        let mut cc = Command::new(arch.gcc());
        cc.args(extra).args(&common).arg("-c").arg(sources.join("src").join(file)).arg("-o").arg(&obj);
        run(&mut cc).with_context(|| format!("compiling libunwind's {file} for {}", arch.name()))?;
        made.push(obj);
    }
    let lib = out.join("libunwind.a");
    let _ = fs::remove_file(&lib);
    run(Command::new(arch.ar()).arg("rcs").arg(&lib).args(&made)).context("ar libunwind.a")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_artifact_is_matched_to_its_architecture() {
        let msg = serde_json::json!({
            "reason": "compiler-artifact",
            "target": {"name": "tfo-trace"},
            "executable": "/w/target/aarch64-unknown-linux-musl/release-static/tfo-trace",
        });
        let b = executable(&msg, &Arch::ALL).unwrap();
        assert_eq!((b.arch, b.name.as_str(), b.test), (Arch::Aarch64, "tfo-trace", false));
        let mut harness = msg.clone();
        harness["profile"] = serde_json::json!({"test": true});
        assert!(executable(&harness, &Arch::ALL).unwrap().test);
        assert!(!executable(&harness, &Arch::ALL).unwrap().integration, "the binary's unit tests");
        harness["target"] = serde_json::json!({"name": "integration", "kind": ["test"]});
        assert!(executable(&harness, &Arch::ALL).unwrap().integration, "tests/integration/");
        assert!(executable(&msg, &[Arch::X86_64]).is_none(), "not an x86_64 path");
        let lib =
            serde_json::json!({"reason": "compiler-artifact", "target": {"name": "x"}, "executable": null});
        assert!(executable(&lib, &Arch::ALL).is_none(), "a library has no executable");
    }

    #[test]
    fn specs_link_static_pie_without_a_dynamic_linker() {
        let s = specs_text(Arch::Aarch64);
        assert!(s.contains("%{static-pie: /usr/lib/aarch64-linux-musl/rcrt1.o;"), "{s}");
        assert!(s.contains("--no-dynamic-linker"), "{s}");
        assert!(!s.contains("ld-musl"), "no program interpreter: {s}");
    }
}
