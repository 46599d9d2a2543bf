//! Step 2, kernels: the newest Debian cloud kernel of each series ([`SERIES`]) for an
//! architecture that apt knows, downloaded once into `target/vm/debs/` and unpacked once
//! into `target/vm/kernels/<package>/` (offline: the newest cached package).
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};
use clap::ValueEnum;

use super::arch::{Arch, X86_64};
use super::packages::{cached_deb, download_debs};
use crate::util::{is_root, probe, run};

/// A kernel series the matrix boots: the Debian package that has it, for any [`Arch`].
#[derive(Debug)]
pub(super) struct Series {
    /// `5.10`, as `--kernel` takes it.
    pub(super) short: &'static str,
    /// The Debian suite it comes from (`cargo xtask setup` adds the ones the machine lacks).
    pub(super) suite: &'static str,
    /// Package name before the ABI number...
    pub(super) prefix: &'static str,
    /// ...and after it, up to the architecture: the package is
    /// `{prefix}{N}{flavour}{arch.deb}-unsigned`.
    pub(super) flavour: &'static str,
}

/// Every series, oldest first: 5.10 (Debian 11; Amazon Linux 2 and older Bottlerocket run
/// 5.10 too), 6.1 (Debian 12, AL2023), 6.12 (a bookworm backport, Debian 13's series).
pub(super) const SERIES: &[Series] = &[
    Series { short: "5.10", suite: "bullseye", prefix: "linux-image-5.10.0-", flavour: "-cloud-" },
    Series { short: "6.1", suite: "bookworm", prefix: "linux-image-6.1.0-", flavour: "-cloud-" },
    Series { short: "6.12", suite: "bookworm", prefix: "linux-image-6.12.", flavour: "+deb12-cloud-" },
];

/// A backend that a series cannot load on an architecture, and why. Its cell runs no tests
/// (they could not run): it checks that the tracer still refuses the backend with this
/// errno, that `--backend auto` passes over it and says why, and that `doctor` says so. A
/// kernel that starts loading it fails the cell: then its tests belong in the matrix.
#[derive(Debug)]
pub(super) struct Refusal {
    pub(super) series: &'static str,
    pub(super) arch: &'static str,
    pub(super) backend: &'static str,
    /// The errno's name in the tracer's one-line reason.
    pub(super) errno: &'static str,
    pub(super) why: &'static str,
}

/// fentry on arm64 needs BPF trampolines (arm64's JIT has them from 6.0) and, to divert a
/// kernel function to one, ftrace direct calls (arm64 from 6.4, commit 2aa6ac03516d):
/// without them register_fentry() (kernel/bpf/trampoline.c) answers ENOTSUPP.
pub(super) const REFUSALS: &[Refusal] = &[
    Refusal {
        series: "5.10",
        arch: "arm64",
        backend: "fentry",
        errno: "ENOTSUPP",
        why: "no BPF trampolines on arm64 before 6.0",
    },
    Refusal {
        series: "6.1",
        arch: "arm64",
        backend: "fentry",
        errno: "ENOTSUPP",
        why: "arm64 has BPF trampolines from 6.0 but attaches them to kernel functions through \
              ftrace direct calls, which it has from 6.4",
    },
];

impl Kernel {
    /// Why this kernel cannot load `backend`, when the matrix knows it cannot.
    pub(super) fn refusal(&self, backend: &str) -> Option<&'static Refusal> {
        REFUSALS.iter().find(|r| r.series == self.series && r.arch == self.arch.name && r.backend == backend)
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum KernelChoice {
    #[value(name = "5.10")]
    V5_10,
    #[value(name = "6.1")]
    V6_1,
    #[value(name = "6.12")]
    V6_12,
    All,
}

impl KernelChoice {
    pub(super) fn series(self) -> Vec<&'static Series> {
        let one = |short: &str| SERIES.iter().filter(|s| s.short == short).collect();
        match self {
            KernelChoice::V5_10 => one("5.10"),
            KernelChoice::V6_1 => one("6.1"),
            KernelChoice::V6_12 => one("6.12"),
            KernelChoice::All => SERIES.iter().collect(),
        }
    }
}

/// One Debian kernel, unpacked.
pub(super) struct Kernel {
    /// `5.10`, `6.1`, `6.12` on x86_64; `6.1-arm64` on another architecture: the
    /// tables' KERNEL column and the folder under target/vm.
    pub(super) short: String,
    /// Its series (`5.10`), whatever the architecture.
    pub(super) series: &'static str,
    pub(super) arch: &'static Arch,
    /// The package name, e.g. `linux-image-6.1.0-57-cloud-amd64-unsigned`.
    pub(super) package: String,
    /// `uname -r` inside, e.g. `6.1.0-57-cloud-amd64`.
    pub(super) release: String,
    pub(super) vmlinuz: PathBuf,
    /// `lib/modules/<release>` of the unpacked package.
    pub(super) modules: PathBuf,
}

pub(super) fn kernels(choice: KernelChoice, arch: &'static Arch, work: &Path) -> Result<Vec<Kernel>> {
    choice.series().into_iter().map(|s| kernel(s, arch, work)).collect()
}

/// `5.10` on x86_64, `5.10-arm64` on another architecture (`Kernel::short`).
pub(super) fn short_name(series: &Series, arch: &Arch) -> String {
    if arch.name == X86_64.name {
        series.short.to_string()
    } else {
        format!("{}-{}", series.short, arch.name)
    }
}

/// Package name pattern of a series on an architecture: (prefix, suffix) around the ABI
/// number, e.g. `linux-image-5.10.0-` `-cloud-amd64-unsigned`.
pub(super) fn kernel_prefix(series: &Series, arch: &Arch) -> (String, String) {
    (series.prefix.to_string(), format!("{}{}-unsigned", series.flavour, arch.deb))
}

/// The number between prefix and suffix (`57` in `...6.1.0-57-cloud...`), for ordering.
pub(super) fn abi_number(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?.strip_suffix(suffix)?.parse().ok()
}

/// The newest package of one series apt knows, downloaded (cached) and unpacked (cached).
pub(super) fn kernel(series: &Series, arch: &'static Arch, work: &Path) -> Result<Kernel> {
    let (prefix, suffix) = kernel_prefix(series, arch);
    let suffix = suffix.as_str();
    let short = short_name(series, arch);
    let newest = |names: &str| {
        names
            .lines()
            .filter_map(|n| abi_number(n.trim(), &prefix, suffix).map(|v| (v, n.trim().to_string())))
            .max()
            .map(|(_, n)| n)
    };
    let pkgnames = || probe(Command::new("apt-cache").args(["pkgnames", &prefix])).unwrap_or_default();
    let mut package = newest(&pkgnames());
    if package.is_none() && is_root() {
        crate::apt::run(crate::apt::apt_get().args(["update", "-q"]))?;
        package = newest(&pkgnames());
    }
    let package = match package {
        Some(p) => p,
        None => {
            // Offline: the newest package already in the cache.
            let names: String = fs::read_dir(work.join("debs"))?
                .flatten()
                .filter_map(|e| {
                    e.file_name().to_str().and_then(|n| n.split('_').next()).map(|n| format!("{n}\n"))
                })
                .collect();
            newest(&names).with_context(|| {
                format!(
                    "apt knows no {prefix}*{suffix} package and none is cached (it is in Debian's {} \
                     suite: `cargo xtask setup` adds it to apt's sources)",
                    series.suite
                )
            })?
        }
    };
    if cached_deb(work, &package, arch).is_some() {
        println!("ok: {package} (cached)");
    }
    let deb = download_debs(work, arch, std::slice::from_ref(&package))?.remove(0);
    let dir = work.join("kernels").join(&package);
    let stamp = dir.join(".unpacked");
    if !stamp.exists() {
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        run(Command::new("dpkg").arg("-x").arg(&deb).arg(&dir)).context("unpacking the kernel package")?;
        fs::write(&stamp, "")?;
    }
    let release = fs::read_dir(dir.join("lib/modules"))
        .context("no lib/modules in the kernel package")?
        .flatten()
        .find_map(|e| e.file_name().to_str().map(String::from))
        .context("lib/modules is empty")?;
    let vmlinuz = dir.join("boot").join(format!("vmlinuz-{release}"));
    ensure!(vmlinuz.exists(), "{} missing from {package}", vmlinuz.display());
    Ok(Kernel {
        short,
        series: series.short,
        arch,
        package,
        modules: dir.join("lib/modules").join(&release),
        release,
        vmlinuz,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::arch::ARM64;

    #[test]
    fn newest_kernel_package_by_abi_number() {
        let series = |short| SERIES.iter().find(|s| s.short == short).unwrap();
        let (p, s) = kernel_prefix(series("6.1"), &X86_64);
        assert_eq!(abi_number("linux-image-6.1.0-57-cloud-amd64-unsigned", &p, &s), Some(57));
        assert_eq!(abi_number("linux-image-6.1.0-57-cloud-amd64", &p, &s), None);
        let (p, s) = kernel_prefix(series("6.12"), &X86_64);
        assert_eq!(abi_number("linux-image-6.12.117+deb12-cloud-amd64-unsigned", &p, &s), Some(117));
        assert_eq!(abi_number("linux-image-6.12.117+deb12-amd64-unsigned", &p, &s), None);
        let (p, s) = kernel_prefix(series("5.10"), &X86_64);
        assert_eq!(abi_number("linux-image-5.10.0-35-cloud-amd64-unsigned", &p, &s), Some(35));
        let (p, s) = kernel_prefix(series("5.10"), &ARM64);
        assert_eq!(abi_number("linux-image-5.10.0-35-cloud-arm64-unsigned", &p, &s), Some(35));
        assert_eq!(abi_number("linux-image-5.10.0-35-cloud-amd64-unsigned", &p, &s), None);
    }
}
