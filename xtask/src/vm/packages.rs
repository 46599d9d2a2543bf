//! Step 1, host packages: what the host needs for the VM runs (the emulator, a static
//! busybox, cpio, xz, binutils and the tests' userspace), installed with apt when missing;
//! another architecture's packages known to apt (`dpkg --add-architecture`) and its busybox
//! unpacked under target/vm, never installed.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};

use super::arch::Arch;
use crate::apt::{self, apt_get};
use crate::util::{is_root, probe, run};

/// Debian packages the host needs for the VM runs (the tests' userspace comes from
/// iproute2, nftables and procps, which `cargo xtask setup` installs already).
pub(super) const DEB_HOST: &[(&str, &str)] = &[
    ("busybox-static", "/bin/busybox"),
    ("cpio", "/usr/bin/cpio"),
    ("xz-utils", "/usr/bin/xz"),
    ("iproute2", "/usr/sbin/ip"),
    ("nftables", "/usr/sbin/nft"),
    ("procps", "/usr/sbin/sysctl"),
    ("binutils", "/usr/bin/objcopy"),
    ("tcpdump", "/usr/bin/tcpdump"),
    ("dnsmasq-base", "/usr/sbin/dnsmasq"),
];

pub(super) fn host_packages(arch: &Arch) -> Result<()> {
    let qemu = format!("/usr/bin/{}", arch.qemu);
    let wanted: Vec<(&str, &str)> = DEB_HOST
        .iter()
        .chain(arch.host_packages)
        .copied()
        .chain([(arch.qemu_package, qemu.as_str())])
        .collect();
    let missing: Vec<&str> = wanted.iter().filter(|(_, p)| !Path::new(p).exists()).map(|(d, _)| *d).collect();
    if missing.is_empty() {
        println!("ok: VM host packages ({})", wanted.iter().map(|(d, _)| *d).collect::<Vec<_>>().join(", "));
    } else {
        ensure!(
            is_root(),
            "the VM runner needs Debian packages {}: run as root or install them",
            missing.join(" ")
        );
        println!("installing: {}", missing.join(" "));
        let install = || {
            let mut cmd = apt_get();
            cmd.args(["install", "-y", "-q", "--no-install-recommends"]).args(&missing);
            cmd
        };
        if apt::run(&mut install()).is_err() {
            apt::run(apt_get().args(["update", "-q"]))?;
            apt::run(&mut install())?;
        }
    }
    // The initramfs has no libc of its own for busybox: it must be the static build.
    let ldd = Command::new("ldd").arg("/bin/busybox").output().context("running ldd /bin/busybox")?;
    ensure!(
        !ldd.status.success() || String::from_utf8_lossy(&ldd.stdout).contains("not a dynamic"),
        "/bin/busybox is dynamically linked: install busybox-static (apt-get install busybox-static)"
    );
    Ok(())
}

/// The host's own architecture in Debian's words (`dpkg --print-architecture`).
pub(super) fn host_deb_arch() -> String {
    probe(Command::new("dpkg").arg("--print-architecture")).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// apt must know the architecture's packages to download its kernel and busybox
/// (`dpkg --add-architecture`, then `apt-get update`); nothing of it is installed.
pub(super) fn foreign_arch(arch: &Arch) -> Result<()> {
    if arch.deb == host_deb_arch() {
        return Ok(());
    }
    let known = probe(Command::new("dpkg").arg("--print-foreign-architectures")).unwrap_or_default();
    if known.split_whitespace().any(|a| a == arch.deb) {
        return Ok(());
    }
    ensure!(
        is_root(),
        "apt does not list {} packages: as root, `dpkg --add-architecture {}`",
        arch.deb,
        arch.deb
    );
    apt::run(Command::new("dpkg").args(["--add-architecture", arch.deb]))?;
    apt::run(apt_get().args(["update", "-q"]))
}

/// A static busybox for `arch`: the host's own, or the architecture's busybox-static
/// package unpacked under target/vm.
pub(super) fn busybox_for(arch: &Arch, work: &Path) -> Result<PathBuf> {
    if arch.deb == host_deb_arch() {
        return Ok(PathBuf::from("/bin/busybox"));
    }
    let dir = work.join(format!("busybox-{}", arch.deb));
    let exe = dir.join("bin/busybox");
    if exe.exists() {
        return Ok(exe);
    }
    let debs = download_debs(work, arch, &["busybox-static".to_string()])?;
    fs::create_dir_all(&dir)?;
    run(Command::new("dpkg").arg("-x").arg(&debs[0]).arg(&dir))?;
    ensure!(exe.exists(), "{} has no bin/busybox", debs[0].display());
    Ok(exe)
}

/// The `.deb` of `package` for `arch` in the download cache (`target/vm/debs/`), if any.
pub(super) fn cached_deb(work: &Path, package: &str, arch: &Arch) -> Option<PathBuf> {
    let (start, end) = (format!("{package}_"), format!("_{}.deb", arch.deb));
    fs::read_dir(work.join("debs")).ok()?.flatten().map(|e| e.path()).find(|p| {
        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&start) && n.ends_with(&end))
    })
}

/// The `.deb` files of `packages` for `arch`: those not cached yet downloaded in one
/// `apt-get download` (qualified with the architecture: apt picks the host's by default).
pub(super) fn download_debs(work: &Path, arch: &Arch, packages: &[String]) -> Result<Vec<PathBuf>> {
    let missing: Vec<String> = packages
        .iter()
        .filter(|p| cached_deb(work, p, arch).is_none())
        .map(|p| format!("{p}:{}", arch.deb))
        .collect();
    if !missing.is_empty() {
        println!("downloading: {}", missing.join(" "));
        apt::run(apt_get().current_dir(work.join("debs")).arg("download").args(&missing))
            .with_context(|| format!("apt-get download {}", missing.join(" ")))?;
    }
    packages
        .iter()
        .map(|p| {
            cached_deb(work, p, arch)
                .with_context(|| format!("apt-get download left no {p}_*_{}.deb", arch.deb))
        })
        .collect()
}
