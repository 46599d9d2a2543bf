//! The tests' userspace inside the guest: busybox, the programs the tests call (`ip`, `tc`,
//! `ss`, `nstat`, `nft`, `sysctl`, `tcpdump`) and their shared libraries.
//!
//! A guest of the host's architecture gets the host's own programs, with the libraries
//! `ldd` lists. Another architecture's guest (arm64 on this x86_64 host) cannot run those:
//! its programs come from Debian's packages of that architecture (the same suite as the
//! host's), downloaded once into `target/vm/debs/` and unpacked into
//! `target/vm/userland-<arch>/`, never installed. Its libraries are found from each ELF's
//! `DT_NEEDED` entries and program interpreter (`readelf`, which reads any architecture's
//! ELF), in the unpacked packages of the programs' library dependencies.
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::arch::Arch;
use super::packages::{busybox_for, download_debs, host_deb_arch};
use crate::util::{capture, copy_file, copy_tree, run};

/// Programs copied into the VM (by their path on the host, which is their path in the
/// guest), and the Debian package that has them.
pub(super) const VM_PROGRAMS: &[(&str, &str)] = &[
    ("/usr/sbin/ip", "iproute2"),
    ("/usr/sbin/tc", "iproute2"),
    // report's listener names are checked against `ss -ltn`.
    ("/usr/bin/ss", "iproute2"),
    ("/usr/bin/nstat", "iproute2"),
    ("/usr/sbin/nft", "nftables"),
    ("/usr/sbin/sysctl", "procps"),
    // The middlebox scenario checks stalls against the SYNs on the wire.
    ("/usr/bin/tcpdump", "tcpdump"),
    // `--names` is checked against a DNS server in the lab's server namespace.
    ("/usr/sbin/dnsmasq", "dnsmasq-base"),
];
/// Host configuration the programs above read, copied when present (text: the same for
/// every architecture).
/// (dnsmasq looks its user and group up: root's, from passwd and group.)
const VM_ETC: &[&str] =
    &["/etc/iproute2", "/usr/share/iproute2", "/etc/protocols", "/etc/services", "/etc/passwd", "/etc/group"];

/// Where a guest's programs come from.
pub(super) enum Userland {
    /// The host's architecture: the host's own busybox and programs.
    Host,
    /// Another architecture: its Debian packages unpacked in `stage`.
    Debian {
        stage: PathBuf,
        busybox: PathBuf,
        /// Debian's multiarch folder of its libraries (`aarch64-linux-gnu`).
        multiarch: &'static str,
    },
}

impl Userland {
    /// The userspace for `arch`: the host's, or Debian's packages of `arch` (downloaded and
    /// unpacked once).
    pub(super) fn for_arch(arch: &Arch, work: &Path) -> Result<Userland> {
        if arch.deb == host_deb_arch() {
            return Ok(Userland::Host);
        }
        let busybox = busybox_for(arch, work)?;
        let stage = work.join(format!("userland-{}", arch.deb));
        unpack(&package_closure(arch)?, arch, work, &stage)?;
        Ok(Userland::Debian { stage, busybox, multiarch: arch.multiarch })
    }

    /// Copies busybox (to /usr/bin/busybox), the programs, their libraries and the host's
    /// configuration files for them into `root`, a merged-/usr tree.
    pub(super) fn install(&self, root: &Path) -> Result<()> {
        let busybox = match self {
            Userland::Host => Path::new("/bin/busybox"),
            Userland::Debian { busybox, .. } => busybox.as_path(),
        };
        copy_file(busybox, &root.join("usr/bin/busybox"))?;
        let mut programs = Vec::new();
        for (path, _) in VM_PROGRAMS {
            let dst = root.join(&path[1..]);
            match self {
                Userland::Host => copy_file(Path::new(path), &dst)?,
                Userland::Debian { stage, .. } => copy_file(&program_in(stage, path)?, &dst)?,
            }
            programs.push(dst);
        }
        let programs: Vec<&Path> = programs.iter().map(PathBuf::as_path).collect();
        self.install_libraries(&programs, root)?;
        for p in VM_ETC {
            if Path::new(p).exists() {
                copy_tree(Path::new(p), &root.join(&p[1..]))?;
            }
        }
        // `ip netns exec` mounts /etc/netns/NS/resolv.conf over /etc/resolv.conf, which
        // must be there to be mounted over (the lab's DNS server,
        // tests/integration/names.rs); empty, the guest has no resolver of its own.
        let resolv = root.join("etc/resolv.conf");
        if !resolv.exists() {
            std::fs::write(&resolv, "").with_context(|| format!("writing {}", resolv.display()))?;
        }
        Ok(())
    }

    /// Copies into `root` the shared libraries `exes` need (and the dynamic loader), at the
    /// paths the loader looks for them.
    pub(super) fn install_libraries(&self, exes: &[&Path], root: &Path) -> Result<()> {
        match self {
            Userland::Host => {
                let mut libs = BTreeSet::new();
                for exe in exes {
                    libs.extend(shared_libs(exe)?);
                }
                for lib in &libs {
                    copy_file(lib, &root.join(lib.strip_prefix("/")?))?;
                    // ldd names /lib/x86_64-linux-gnu/...; the file itself may be behind symlinks.
                    let real = fs::canonicalize(lib)?;
                    if real != *lib {
                        let dst = root.join(real.strip_prefix("/")?);
                        if !dst.exists() {
                            copy_file(&real, &dst)?;
                        }
                    }
                }
            }
            Userland::Debian { stage, multiarch, .. } => {
                for (guest, file) in needed_closure(exes, stage, multiarch)? {
                    copy_file(&file, &root.join(&guest))?;
                }
            }
        }
        Ok(())
    }
}

/// A program of the unpacked packages by its host path: Debian 12's packages still install
/// some under /bin and /sbin, which merged /usr makes the same folders.
fn program_in(stage: &Path, host_path: &str) -> Result<PathBuf> {
    let name = Path::new(host_path).file_name().context("a program path without a name")?;
    ["usr/sbin", "sbin", "usr/bin", "bin"]
        .iter()
        .map(|dir| stage.join(dir).join(name))
        .find_map(|p| resolve_in(stage, &p).ok())
        .with_context(|| format!("no {} in the packages unpacked in {}", host_path, stage.display()))
}

/// The libraries `ldd` resolves for one executable of the host's architecture, with the
/// dynamic loader.
fn shared_libs(exe: &Path) -> Result<Vec<PathBuf>> {
    let out = capture(Command::new("ldd").arg(exe))?;
    let mut libs = Vec::new();
    for line in out.lines() {
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` or `/lib64/ld-linux-x86-64.so.2 (0x...)`
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        } else if line.contains("not found") {
            bail!("{}: {}", exe.display(), line.trim());
        }
    }
    Ok(libs)
}

/// The packages of the programs and every library package they depend on, transitively
/// (`apt-cache depends`, Depends and Pre-Depends): a library package is `Multi-Arch: same`
/// (co-installable for several architectures, as `libc6` and `zlib1g` are), which leaves
/// out what only maintainer scripts need (debconf, perl-base, adduser).
fn package_closure(arch: &Arch) -> Result<BTreeSet<String>> {
    let mut all: BTreeSet<String> = VM_PROGRAMS.iter().map(|(_, pkg)| pkg.to_string()).collect();
    let mut next: Vec<String> = all.iter().cloned().collect();
    let qualified = |names: &[String]| names.iter().map(|p| format!("{p}:{}", arch.deb)).collect::<Vec<_>>();
    while !next.is_empty() {
        let mut cmd = Command::new("apt-cache");
        cmd.args(["depends", "--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks"]);
        cmd.args(["--no-replaces", "--no-enhances"]).args(qualified(&next));
        let listing = capture(&mut cmd).context("apt-cache depends (the guest's library packages)")?;
        let new: Vec<String> = real_depends(&listing).into_iter().filter(|p| !all.contains(p)).collect();
        if new.is_empty() {
            break;
        }
        let show = capture(Command::new("apt-cache").arg("show").args(qualified(&new)))
            .context("apt-cache show (the guest's library packages)")?;
        next = multi_arch_same(&show).into_iter().filter(|p| all.insert(p.clone())).collect();
    }
    Ok(all)
}

/// The packages an `apt-cache depends` listing names as real dependencies
/// (`  Depends: libc6:arm64`; `<virtual>` names and the providers listed under them are
/// passed over).
fn real_depends(listing: &str) -> BTreeSet<String> {
    listing
        .lines()
        .filter_map(|l| {
            let l = l.trim_start().trim_start_matches('|');
            l.strip_prefix("Depends: ").or_else(|| l.strip_prefix("PreDepends: "))
        })
        .filter(|dep| !dep.starts_with('<'))
        .map(|dep| dep.split(':').next().unwrap_or(dep).trim().to_string())
        .collect()
}

/// The packages of an `apt-cache show` listing whose stanza says `Multi-Arch: same`.
fn multi_arch_same(show: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for stanza in show.split("\n\n") {
        let field = |name: &str| stanza.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
        if let (Some(pkg), Some("same")) = (field("Package:"), field("Multi-Arch:")) {
            out.insert(pkg.to_string());
        }
    }
    out
}

/// Downloads (once, into `work/debs`) and unpacks `packages` of `arch` into `stage`; again
/// only when the set of package files changed.
fn unpack(packages: &BTreeSet<String>, arch: &Arch, work: &Path, stage: &Path) -> Result<()> {
    let packages: Vec<String> = packages.iter().cloned().collect();
    let files = download_debs(work, arch, &packages)?;
    let stamp = stage.join(".unpacked");
    let want: String = files.iter().map(|f| format!("{}\n", f.display())).collect();
    if fs::read_to_string(&stamp).is_ok_and(|s| s == want) {
        return Ok(());
    }
    let _ = fs::remove_dir_all(stage);
    fs::create_dir_all(stage).with_context(|| format!("creating {}", stage.display()))?;
    for f in &files {
        run(Command::new("dpkg").arg("-x").arg(f).arg(stage))
            .with_context(|| format!("unpacking {}", f.display()))?;
    }
    fs::write(&stamp, want).with_context(|| format!("writing {}", stamp.display()))
}

/// What a dynamically linked ELF asks of the loader: its program interpreter, if any, and
/// its `DT_NEEDED` sonames (`readelf -d -l`).
fn elf_needs(exe: &Path) -> Result<(Option<String>, Vec<String>)> {
    let out = capture(Command::new("readelf").args(["-W", "-d", "-l"]).arg(exe))?;
    Ok(parse_elf_needs(&out))
}

fn parse_elf_needs(readelf: &str) -> (Option<String>, Vec<String>) {
    let bracketed = |l: &str, marker: &str| -> Option<String> {
        let rest = &l[l.find(marker)? + marker.len()..];
        Some(rest.split(']').next()?.to_string())
    };
    let interp = readelf.lines().find_map(|l| bracketed(l, "[Requesting program interpreter: "));
    let needed = readelf
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| bracketed(l, "Shared library: ["))
        .collect();
    (interp, needed)
}

/// Every library `exes` need, transitively, found in `stage`: guest path -> the file's
/// contents in the stage (links followed inside the stage).
fn needed_closure(exes: &[&Path], stage: &Path, multiarch: &str) -> Result<BTreeMap<PathBuf, PathBuf>> {
    let dirs: Vec<PathBuf> =
        [format!("lib/{multiarch}"), format!("usr/lib/{multiarch}"), "lib".into(), "usr/lib".into()]
            .iter()
            .map(PathBuf::from)
            .collect();
    let mut found = BTreeMap::new();
    let mut queue: VecDeque<(String, PathBuf)> =
        exes.iter().map(|e| (e.display().to_string(), e.to_path_buf())).collect();
    while let Some((who, elf)) = queue.pop_front() {
        let (interp, sonames) = elf_needs(&elf)?;
        let mut wanted: Vec<PathBuf> =
            interp.iter().map(|i| PathBuf::from(i.trim_start_matches('/'))).collect();
        for so in &sonames {
            let at = dirs
                .iter()
                .map(|d| d.join(so))
                .find(|p| stage.join(p).exists() || stage.join(p).is_symlink());
            match at {
                Some(p) => wanted.push(p),
                None => bail!(
                    "{who} needs {so}, which none of the unpacked packages in {} has (a library \
                     package missing from the closure of the programs' Depends)",
                    stage.display()
                ),
            }
        }
        for guest in wanted {
            if found.contains_key(&guest) {
                continue;
            }
            let file = resolve_in(stage, &stage.join(&guest))
                .with_context(|| format!("{who} needs /{}", guest.display()))?;
            queue.push_back((format!("/{}", guest.display()), file.clone()));
            found.insert(guest, file);
        }
    }
    Ok(found)
}

/// `path` with its symbolic links followed inside `stage`, where an absolute link target
/// (`/lib/ld-linux-aarch64.so.1 -> /lib/aarch64-linux-gnu/...`) means a path in the stage,
/// not on the host.
fn resolve_in(stage: &Path, path: &Path) -> Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..16 {
        let meta = fs::symlink_metadata(&p).with_context(|| format!("{} does not exist", p.display()))?;
        if !meta.file_type().is_symlink() {
            return Ok(p);
        }
        let target = fs::read_link(&p)?;
        p = match target.strip_prefix("/") {
            Ok(abs) => stage.join(abs),
            Err(_) => p.parent().context("a link without a parent")?.join(target),
        };
    }
    bail!("{}: too many levels of symbolic links", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_packages_from_apt_cache() {
        let listing = "iproute2:arm64
 |Depends: <debconf:arm64>
    debconf
  Depends: libbpf1:arm64
  Depends: libc6:arm64
  Depends: libcap2-bin:arm64
    libcap2-bin
  PreDepends: libzstd1:arm64
libproc2-0:arm64
  Depends: libsystemd0:arm64
    libelogind0:arm64
";
        let got: Vec<String> = real_depends(listing).into_iter().collect();
        assert_eq!(got, ["libbpf1", "libc6", "libcap2-bin", "libsystemd0", "libzstd1"]);
        let show = "Package: zlib1g\nArchitecture: arm64\nMulti-Arch: same\n\n\
                    Package: perl-base\nArchitecture: arm64\n\n\
                    Package: libcap2-bin\nMulti-Arch: foreign\n";
        assert_eq!(multi_arch_same(show).into_iter().collect::<Vec<_>>(), ["zlib1g"]);
    }

    #[test]
    fn interpreter_and_needed_from_readelf() {
        let out = "
  [Requesting program interpreter: /lib/ld-linux-aarch64.so.1]
 0x0000000000000001 (NEEDED)             Shared library: [libmnl.so.0]
 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]
 0x000000000000000e (SONAME)             Library soname: [libx.so.1]
";
        let (interp, needed) = parse_elf_needs(out);
        assert_eq!(interp.as_deref(), Some("/lib/ld-linux-aarch64.so.1"));
        assert_eq!(needed, ["libmnl.so.0", "libc.so.6"]);
        assert_eq!(
            parse_elf_needs("Elf file type is DYN (Position-Independent Executable file)"),
            (None, vec![])
        );
    }
}
