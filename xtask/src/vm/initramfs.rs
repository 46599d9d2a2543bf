//! Step 4, the initramfs of a kernel: a merged-/usr tree with the userspace of its
//! architecture (userland.rs: a static busybox, the programs the tests call and their
//! shared libraries), the integration test executable at its host path (debug info stripped), the
//! modules, `/init` and one script per cell; packed with `cpio -H newc`.
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use super::binaries::Build;
use super::cells::Cell;
use super::guest::{cell_script, init_script};
use super::kernels::Kernel;
use super::modules::modules;
use super::userland::Userland;
use crate::util::run;

/// One initramfs per kernel, holding every cell of that kernel (`/cells/<name>.sh`); the
/// kernel command line picks the cell.
pub(super) fn initramfs(
    work: &Path,
    k: &Kernel,
    build: &Build,
    cells: &[&Cell],
    userland: &Userland,
    filter: &[String],
    test_limit_s: u64,
) -> Result<PathBuf> {
    let dir = work.join(&k.short);
    let root = dir.join("root");
    merged_usr_root(&root, userland)?;
    fs::create_dir_all(root.join("cells"))?;
    // The tests and tfo-trace at their host paths, without debug info (a fifth of the size).
    let mut exes: Vec<&Path> =
        cells.iter().flat_map(|c| c.runs.iter().map(|(b, _)| b.path.as_path())).collect();
    exes.push(&build.tfo_trace);
    exes.sort();
    exes.dedup();
    install_stripped(k, &exes, &root, userland)?;
    let modules = modules(k, &root)?;
    let init = root.join("init");
    fs::write(&init, init_script(k, build, &modules))?;
    fs::set_permissions(&init, fs::Permissions::from_mode(0o755))?;
    for c in cells {
        fs::write(root.join("cells").join(format!("{}.sh", c.name)), cell_script(c, filter, test_limit_s))?;
    }
    pack(&root, &dir.join("initrd.cpio"))
}

/// A fresh merged-/usr tree at `root` like the host's, so host paths and ldd's paths both
/// resolve, with `userland` (busybox, the programs, their libraries) and root's passwd.
pub(super) fn merged_usr_root(root: &Path, userland: &Userland) -> Result<()> {
    let _ = fs::remove_dir_all(root);
    fs::create_dir_all(root)?;
    for d in
        ["usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc", "proc", "sys", "dev", "run", "tmp", "root"]
    {
        fs::create_dir_all(root.join(d))?;
    }
    for (link, to) in [("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")] {
        symlink(to, root.join(link))?;
    }
    userland.install(root)?;
    fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    )?;
    fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n")?;
    Ok(())
}

/// Copies `exes` into `root` at their host paths without debug info (a fifth of the size),
/// with the shared libraries they need.
pub(super) fn install_stripped(k: &Kernel, exes: &[&Path], root: &Path, userland: &Userland) -> Result<()> {
    for exe in exes {
        let dst = root.join(exe.strip_prefix("/").context("a binary path that is not absolute")?);
        fs::create_dir_all(dst.parent().context("a binary path without a parent")?)?;
        run(Command::new(k.arch.objcopy).arg("--strip-debug").arg(exe).arg(&dst))?;
    }
    userland.install_libraries(exes, root)
}

/// Packs `root` into the newc cpio archive `cpio`.
pub(super) fn pack(root: &Path, cpio: &Path) -> Result<PathBuf> {
    let mut sh = Command::new("sh");
    sh.current_dir(root)
        .arg("-c")
        .arg(format!("find . -print0 | cpio --null -o -H newc -R 0:0 --quiet > '{}'", cpio.display()));
    run(&mut sh).context("packing the initramfs")?;
    let size = fs::metadata(cpio)?.len();
    println!("initramfs: {} ({:.0} MiB)", cpio.display(), size as f64 / (1 << 20) as f64);
    Ok(cpio.to_path_buf())
}
