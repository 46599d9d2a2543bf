//! `cargo xtask vm`: the kernel matrix. Boots Debian's 6.1 and 6.12 cloud kernels under
//! qemu and runs tfo-trace's integration tests inside, once per tracer backend.
//!
//! The way there (docs/vm.md says more):
//! 1. Debian packages on the host: qemu, a static busybox, cpio, xz, and the userspace the
//!    tests call (`ip`, `tc`, `nstat`, `nft`, `sysctl`, `tcpdump`), copied into the VM with their
//!    shared libraries as `ldd` lists them.
//! 2. The newest `linux-image-6.1.0-N-cloud-amd64-unsigned` and
//!    `linux-image-6.12.N+deb12-cloud-amd64-unsigned` that apt knows, downloaded once into
//!    `target/vm/debs/` and unpacked (vmlinuz + the modules the lab needs: veth, sch_netem,
//!    nf_tables, with their dependencies from each module's `.modinfo`).
//! 3. The test executables, built on the host. `env!("CARGO_BIN_EXE_tfo-trace")` is fixed at
//!    compile time, so every binary goes into the initramfs at its host path.
//! 4. A busybox `/init` that mounts the pseudo file systems, loads the modules, runs each
//!    test binary with `--test-threads=1` and prints `TFO-VM-RESULT` markers on ttyS0.
//! 5. qemu, no network device, a hard timeout per kernel (qemu killed by its pid).
//! 6. The console parsed into a kernel x backend x binary table; any failure fails the task.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::{Args, ValueEnum};

use crate::util::{capture, cargo, is_root, probe, run, workspace_root};

/// Debian packages the host needs for the VM runs (the tests' userspace comes from
/// iproute2, nftables and procps, which `cargo xtask setup` installs already).
const DEB_HOST: &[(&str, &str)] = &[
    ("qemu-system-x86", "/usr/bin/qemu-system-x86_64"),
    ("busybox-static", "/bin/busybox"),
    ("cpio", "/usr/bin/cpio"),
    ("xz-utils", "/usr/bin/xz"),
    ("iproute2", "/usr/sbin/ip"),
    ("nftables", "/usr/sbin/nft"),
    ("procps", "/usr/sbin/sysctl"),
    ("binutils", "/usr/bin/objcopy"),
    ("tcpdump", "/usr/bin/tcpdump"),
];
/// Host programs copied into the VM (by their path on the host, with their libraries).
const VM_PROGRAMS: &[&str] = &[
    "/usr/sbin/ip",
    "/usr/sbin/tc",
    "/usr/bin/nstat",
    "/usr/sbin/nft",
    "/usr/sbin/sysctl",
    // The middlebox scenario checks stalls against the SYNs on the wire.
    "/usr/bin/tcpdump",
];
/// Host configuration the programs above read, copied when present.
const VM_ETC: &[&str] = &["/etc/iproute2", "/usr/share/iproute2", "/etc/protocols", "/etc/services"];
/// Kernel modules the lab needs; their dependencies are added from `.modinfo`.
const VM_MODULES: &[&str] = &["veth", "sch_netem", "nf_tables"];
/// The scenario tests (tracer against the kernel's counters): run once per backend, with
/// TFO_TRACE_BACKEND set (tests/common passes it as `--backend`).
const VM_PER_BACKEND: &[&str] = &["kernel_scenarios", "server_outcomes", "stalls", "report"];
/// Run once per kernel, without a backend: the lab itself (veth, netem, nft on this kernel).
const VM_ONCE: &[&str] = &["lab"];
// Every other tests/*.rs is host-only by default (views, formats, CLI, capabilities, the
// Prometheus exporter: nothing there depends on the kernel's hooks); `--bins` runs any.
/// A test binary that runs longer than this inside the VM is killed (busybox `timeout`).
const PER_BINARY_TIMEOUT_S: u64 = 900;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum KernelChoice {
    #[value(name = "6.1")]
    V6_1,
    #[value(name = "6.12")]
    V6_12,
    All,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Accel {
    /// Hardware virtualization (/dev/kvm); on this project's machines the guest hangs
    /// before its first line, so it is not the default
    Kvm,
    /// Plain emulation: slower, works everywhere
    Tcg,
}

#[derive(Args, Debug, Clone)]
pub struct VmArgs {
    /// Which Debian kernel(s) to boot
    #[arg(long, value_enum, default_value = "all")]
    pub kernel: KernelChoice,
    /// Tracer backends to run the backend-dependent tests with (TFO_TRACE_BACKEND in the VM)
    #[arg(long, value_delimiter = ',', default_value = "tracepoint,fentry,kprobe")]
    pub backend: Vec<String>,
    /// Integration test binaries to run (default: kernel_scenarios,server_outcomes,stalls per
    /// backend, lab once)
    #[arg(long, value_delimiter = ',')]
    pub bins: Vec<String>,
    /// qemu accelerator; CI's budget is planned for TCG
    #[arg(long, value_enum, default_value = "tcg")]
    pub accel: Accel,
    /// Hard limit for one kernel's boot and tests, in minutes (qemu is killed past it)
    #[arg(long, default_value_t = 15)]
    pub timeout_min: u64,
    /// Guest memory in MiB
    #[arg(long, default_value_t = 1024)]
    pub memory_mb: u32,
    /// Boot the kernels one after the other (default: both at once; same verdicts and cell
    /// times measured on 2 cores, 4.5 min instead of 7)
    #[arg(long)]
    pub sequential: bool,
    /// Arguments for each test binary inside the VM (a filter, `--exact`, ...), after `--`
    #[arg(last = true)]
    pub filter: Vec<String>,
}

impl Default for VmArgs {
    fn default() -> Self {
        VmArgs {
            kernel: KernelChoice::All,
            backend: ["tracepoint", "fentry", "kprobe"].map(String::from).to_vec(),
            bins: Vec::new(),
            accel: Accel::Tcg,
            timeout_min: 15,
            memory_mb: 1024,
            sequential: false,
            filter: Vec::new(),
        }
    }
}

/// What the matrix ran, for `cargo xtask test`'s closing tally.
#[derive(Default, Debug)]
pub struct Report {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    /// Cells that failed or did not run, one line each.
    pub problems: Vec<String>,
}

impl VmArgs {
    /// Rejects bad arguments before anything is installed or built.
    pub fn check(&self) -> Result<()> {
        for b in &self.backend {
            ensure!(
                ["tracepoint", "fentry", "kprobe", "auto"].contains(&b.as_str()),
                "unknown backend `{b}` (tracepoint, fentry, kprobe, auto)"
            );
        }
        Ok(())
    }
}

/// `cargo xtask vm`: errors when any cell failed.
pub fn vm(args: &VmArgs) -> Result<()> {
    let report = matrix(args)?;
    if !report.problems.is_empty() {
        bail!("VM matrix: {} problem(s):\n  {}", report.problems.len(), report.problems.join("\n  "));
    }
    Ok(())
}

/// Builds, boots and runs every selected kernel; prints the table; returns the tally.
pub fn matrix(args: &VmArgs) -> Result<Report> {
    let start = Instant::now();
    args.check()?;
    let root = workspace_root();
    let work = root.join("target/vm");
    fs::create_dir_all(work.join("debs")).context("creating target/vm/debs")?;
    host_packages()?;
    let kernels = kernels(args.kernel, &work)?;
    let build = build_tests(&root)?;
    let bins: Vec<&TestBin> = if args.bins.is_empty() {
        let (vm, host): (Vec<&TestBin>, Vec<&TestBin>) = build
            .tests
            .iter()
            .partition(|t| VM_PER_BACKEND.contains(&t.name.as_str()) || VM_ONCE.contains(&t.name.as_str()));
        let host: Vec<&str> = host.iter().map(|t| t.name.as_str()).collect();
        println!("vm: host-only test binaries (not run in the VM): {}", host.join(", "));
        vm
    } else {
        let mut v = Vec::new();
        for name in &args.bins {
            let b = build.tests.iter().find(|t| &t.name == name).with_context(|| {
                let all: Vec<_> = build.tests.iter().map(|t| t.name.as_str()).collect();
                format!("no integration test binary `{name}` (there are: {})", all.join(", "))
            })?;
            v.push(b);
        }
        v
    };
    let plan = plan(&bins, &args.backend);
    let accel = accel(args.accel);
    let mut report = Report::default();
    let mut table = Vec::new();
    let initrds = kernels
        .iter()
        .map(|k| initramfs(&work, k, &build, &plan, &args.filter))
        .collect::<Result<Vec<_>>>()?;
    let boots: Vec<Boot> = if !args.sequential {
        // One qemu per kernel at once: the tests mostly wait (RTOs, netem), so two guests
        // on two cores take little more than one.
        std::thread::scope(|s| {
            let running: Vec<_> =
                kernels.iter().zip(&initrds).map(|(k, i)| s.spawn(move || boot(k, i, accel, args))).collect();
            running.into_iter().map(|h| h.join().expect("qemu thread panicked")).collect::<Result<Vec<_>>>()
        })?
    } else {
        kernels.iter().zip(&initrds).map(|(k, i)| boot(k, i, accel, args)).collect::<Result<Vec<_>>>()?
    };
    for (k, boot) in kernels.iter().zip(&boots) {
        for cell in &plan {
            let res = boot.results.get(&(cell.bin.name.clone(), cell.backend.clone()));
            match res {
                Some(r) => {
                    report.passed += r.passed;
                    report.failed += r.failed;
                    report.ignored += r.ignored;
                    if r.exit != 0 {
                        // A binary that died before its `test result:` line still counts once.
                        if r.failed == 0 {
                            report.failed += 1;
                        }
                        report.problems.push(format!(
                            "{} {} {}: exit {}{}",
                            k.short,
                            cell.backend,
                            cell.bin.name,
                            r.exit,
                            if r.failed_tests.is_empty() {
                                String::new()
                            } else {
                                format!(" ({})", r.failed_tests.join(", "))
                            }
                        ));
                    }
                }
                None => {
                    report.failed += 1;
                    let why = match boot.unloadable.get(&cell.backend) {
                        Some(e) => format!("backend does not load: {e}"),
                        None => boot.end.clone().unwrap_or_else(|| "no result marker".into()),
                    };
                    report
                        .problems
                        .push(format!("{} {} {}: did not run ({why})", k.short, cell.backend, cell.bin.name));
                    table.push((k.short.clone(), cell.clone(), None, why));
                    continue;
                }
            }
            table.push((k.short.clone(), cell.clone(), res.cloned(), String::new()));
        }
        table_boot_line(k, boot, accel);
    }
    print_table(&table);
    println!(
        "vm: {} kernel(s), {} passed, {} failed, {} ignored, total {:.1} s",
        kernels.len(),
        report.passed,
        report.failed,
        report.ignored,
        start.elapsed().as_secs_f64()
    );
    Ok(report)
}

// ---- 1. host packages ---------------------------------------------------------------------

fn host_packages() -> Result<()> {
    let missing: Vec<&str> =
        DEB_HOST.iter().filter(|(_, p)| !Path::new(p).exists()).map(|(d, _)| *d).collect();
    if missing.is_empty() {
        println!(
            "ok: VM host packages ({})",
            DEB_HOST.iter().map(|(d, _)| *d).collect::<Vec<_>>().join(", ")
        );
    } else {
        ensure!(
            is_root(),
            "the VM runner needs Debian packages {}: run as root or install them",
            missing.join(" ")
        );
        println!("installing: {}", missing.join(" "));
        if run(Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing))
        .is_err()
        {
            run(Command::new("apt-get").args(["update", "-q"]))?;
            run(Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(&missing))?;
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

// ---- 2. kernels ---------------------------------------------------------------------------

/// One Debian kernel, unpacked.
struct Kernel {
    /// `6.1`, `6.12`
    short: String,
    /// The package name, e.g. `linux-image-6.1.0-57-cloud-amd64-unsigned`.
    package: String,
    /// `uname -r` inside, e.g. `6.1.0-57-cloud-amd64`.
    release: String,
    vmlinuz: PathBuf,
    /// `lib/modules/<release>` of the unpacked package.
    modules: PathBuf,
}

fn kernels(choice: KernelChoice, work: &Path) -> Result<Vec<Kernel>> {
    let wanted: &[&str] = match choice {
        KernelChoice::V6_1 => &["6.1"],
        KernelChoice::V6_12 => &["6.12"],
        KernelChoice::All => &["6.1", "6.12"],
    };
    wanted.iter().map(|s| kernel(s, work)).collect()
}

/// Package name pattern: 6.1 is `linux-image-6.1.0-<abi>-cloud-amd64-unsigned`, 6.12 (a
/// bookworm backport) is `linux-image-6.12.<n>+deb12-cloud-amd64-unsigned`.
fn kernel_prefix(short: &str) -> (String, &'static str) {
    match short {
        "6.1" => ("linux-image-6.1.0-".into(), "-cloud-amd64-unsigned"),
        s => (format!("linux-image-{s}."), "+deb12-cloud-amd64-unsigned"),
    }
}

/// The number between prefix and suffix (`57` in `...6.1.0-57-cloud...`), for ordering.
fn abi_number(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?.strip_suffix(suffix)?.parse().ok()
}

/// The newest package of one series apt knows, downloaded (cached) and unpacked (cached).
fn kernel(short: &str, work: &Path) -> Result<Kernel> {
    let (prefix, suffix) = kernel_prefix(short);
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
        run(Command::new("apt-get").args(["update", "-q"]))?;
        package = newest(&pkgnames());
    }
    let debs = work.join("debs");
    let cached = |pkg: &str| -> Option<PathBuf> {
        fs::read_dir(&debs).ok()?.flatten().map(|e| e.path()).find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{pkg}_")) && n.ends_with(".deb"))
        })
    };
    let package = match package {
        Some(p) => p,
        None => {
            // Offline: the newest package already in the cache.
            let names: String = fs::read_dir(&debs)?
                .flatten()
                .filter_map(|e| {
                    e.file_name().to_str().and_then(|n| n.split('_').next()).map(|n| format!("{n}\n"))
                })
                .collect();
            newest(&names)
                .with_context(|| format!("apt knows no {prefix}*{suffix} package and none is cached"))?
        }
    };
    let deb = match cached(&package) {
        Some(d) => {
            println!("ok: {package} (cached)");
            d
        }
        None => {
            println!("downloading: {package}");
            run(Command::new("apt-get").current_dir(&debs).args(["download", &package]))
                .with_context(|| format!("apt-get download {package}"))?;
            cached(&package).with_context(|| format!("apt-get download left no {package}_*.deb"))?
        }
    };
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
        short: short.into(),
        package,
        modules: dir.join("lib/modules").join(&release),
        release,
        vmlinuz,
    })
}

// ---- 3. test binaries ---------------------------------------------------------------------

#[derive(Clone, Debug)]
struct TestBin {
    name: String,
    path: PathBuf,
}

struct Build {
    tests: Vec<TestBin>,
    /// target/debug/tfo-trace: the path `CARGO_BIN_EXE_tfo-trace` names.
    tfo_trace: PathBuf,
}

fn build_tests(root: &Path) -> Result<Build> {
    let mut cmd = cargo();
    // The same package selection as the host run in `cargo xtask test`, so the artifacts
    // (and the eBPF object built by tfo-trace's build.rs) are reused, not rebuilt with
    // other features; tfo-trace's own integration tests are picked from the list below.
    cmd.current_dir(root).args([
        "test",
        "--workspace",
        "--exclude",
        "tfo-trace-ebpf",
        "--no-run",
        "--message-format=json",
    ]);
    println!("+ {}", crate::util::display(&cmd));
    let out = cmd.stderr(Stdio::inherit()).output().context("starting cargo test --no-run")?;
    ensure!(out.status.success(), "cargo test --no-run failed: {}", out.status);
    let mut tests = Vec::new();
    let mut tfo_trace = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(exe) = msg["executable"].as_str() else { continue };
        let manifest = msg["manifest_path"].as_str().unwrap_or_default();
        if !manifest.ends_with("/tfo-trace/Cargo.toml") {
            continue;
        }
        let kinds = msg["target"]["kind"].as_array().cloned().unwrap_or_default();
        let name = msg["target"]["name"].as_str().unwrap_or_default().to_string();
        let is_test = msg["profile"]["test"] == true;
        if kinds.iter().any(|k| k == "test") {
            tests.push(TestBin { name, path: exe.into() });
        } else if kinds.iter().any(|k| k == "bin") && !is_test && name == "tfo-trace" {
            tfo_trace = Some(PathBuf::from(exe));
        }
    }
    tests.sort_by(|a, b| a.name.cmp(&b.name));
    ensure!(!tests.is_empty(), "cargo test --no-run listed no integration test executable");
    let tfo_trace = tfo_trace.unwrap_or_else(|| root.join("target/debug/tfo-trace"));
    ensure!(tfo_trace.exists(), "{} was not built", tfo_trace.display());
    Ok(Build { tests, tfo_trace })
}

/// One run inside the VM: a binary with a backend (`auto` for backend-independent ones).
#[derive(Clone, Debug)]
struct Cell {
    bin: TestBin,
    backend: String,
}

fn plan(bins: &[&TestBin], backends: &[String]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for b in bins {
        if VM_ONCE.contains(&b.name.as_str()) {
            cells.push(Cell { bin: (*b).clone(), backend: "auto".into() });
        } else {
            for be in backends {
                cells.push(Cell { bin: (*b).clone(), backend: be.clone() });
            }
        }
    }
    // Backend-major order: one backend's whole suite, then the next.
    cells.sort_by_key(|c| {
        (backends.iter().position(|b| *b == c.backend).unwrap_or(usize::MAX), c.bin.name.clone())
    });
    cells
}

// ---- 4. the initramfs ---------------------------------------------------------------------

fn initramfs(work: &Path, k: &Kernel, build: &Build, plan: &[Cell], filter: &[String]) -> Result<PathBuf> {
    let dir = work.join(&k.short);
    let root = dir.join("root");
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root)?;
    // A merged-/usr layout like the host's, so host paths and ldd's paths both resolve.
    for d in
        ["usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc", "proc", "sys", "dev", "run", "tmp", "root"]
    {
        fs::create_dir_all(root.join(d))?;
    }
    for (link, to) in [("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")] {
        symlink(to, root.join(link))?;
    }
    copy_file(Path::new("/bin/busybox"), &root.join("usr/bin/busybox"))?;
    let mut libs = BTreeSet::new();
    for p in VM_PROGRAMS {
        copy_file(Path::new(p), &root.join(&p[1..]))?;
        libs.extend(shared_libs(Path::new(p))?);
    }
    for p in VM_ETC {
        if Path::new(p).exists() {
            copy_tree(Path::new(p), &root.join(&p[1..]))?;
        }
    }
    fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    )?;
    fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n")?;
    // The tests and tfo-trace at their host paths, without debug info (a fifth of the size).
    let mut exes: Vec<&Path> = plan.iter().map(|c| c.bin.path.as_path()).collect();
    exes.push(&build.tfo_trace);
    exes.sort();
    exes.dedup();
    for exe in exes {
        let dst = root.join(exe.strip_prefix("/").context("test binary path is not absolute")?);
        fs::create_dir_all(dst.parent().unwrap())?;
        run(Command::new("objcopy").arg("--strip-debug").arg(exe).arg(&dst))?;
        libs.extend(shared_libs(exe)?);
    }
    for lib in &libs {
        copy_file(lib, &root.join(lib.strip_prefix("/").unwrap()))?;
        // ldd names /lib/x86_64-linux-gnu/...; the file itself may be behind symlinks.
        let real = fs::canonicalize(lib)?;
        if real != *lib {
            let dst = root.join(real.strip_prefix("/").unwrap());
            if !dst.exists() {
                copy_file(&real, &dst)?;
            }
        }
    }
    let modules = modules(k, &root)?;
    let script = init_script(k, build, plan, filter, &modules);
    fs::write(root.join("init"), script)?;
    fs::set_permissions(root.join("init"), fs::Permissions::from_mode(0o755))?;
    let cpio = dir.join("initrd.cpio");
    let mut sh = Command::new("sh");
    sh.current_dir(&root)
        .arg("-c")
        .arg(format!("find . -print0 | cpio --null -o -H newc -R 0:0 --quiet > '{}'", cpio.display()));
    run(&mut sh).context("packing the initramfs")?;
    let size = fs::metadata(&cpio)?.len();
    println!("initramfs: {} ({:.0} MiB)", cpio.display(), size as f64 / (1 << 20) as f64);
    Ok(cpio)
}

fn copy_file(src: &Path, dst: &Path) -> Result<()> {
    if let Some(parent) = dst.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::copy(src, dst).with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
    Ok(())
}

fn copy_tree(src: &Path, dst: &Path) -> Result<()> {
    if src.is_dir() {
        fs::create_dir_all(dst)?;
        for e in fs::read_dir(src)? {
            let e = e?;
            copy_tree(&e.path(), &dst.join(e.file_name()))?;
        }
        Ok(())
    } else {
        copy_file(src, dst)
    }
}

/// The libraries `ldd` resolves for one executable, with the dynamic loader.
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

/// Copies `VM_MODULES` and their dependencies (uncompressed) to /modules; returns the file
/// names in load order (dependencies first).
fn modules(k: &Kernel, root: &Path) -> Result<Vec<String>> {
    let mut index = HashMap::new();
    index_modules(&k.modules.join("kernel"), &mut index)?;
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for m in VM_MODULES {
        add_module(m, &index, &mut seen, &mut order)?;
    }
    let dst = root.join("modules");
    fs::create_dir_all(&dst)?;
    let mut names = Vec::new();
    for (name, bytes) in order {
        let file = format!("{name}.ko");
        fs::write(dst.join(&file), bytes)?;
        names.push(file);
    }
    Ok(names)
}

/// Module name (`-` spelled `_`) -> file, for every `.ko` / `.ko.xz` under `dir`.
fn index_modules(dir: &Path, index: &mut HashMap<String, PathBuf>) -> Result<()> {
    for e in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        if p.is_dir() {
            index_modules(&p, index)?;
        } else if let Some(n) = p.file_name().and_then(|n| n.to_str()) {
            if let Some(stem) = n.strip_suffix(".ko.xz").or_else(|| n.strip_suffix(".ko")) {
                index.insert(stem.replace('-', "_"), p.clone());
            }
        }
    }
    Ok(())
}

fn add_module(
    name: &str,
    index: &HashMap<String, PathBuf>,
    seen: &mut BTreeSet<String>,
    order: &mut Vec<(String, Vec<u8>)>,
) -> Result<()> {
    let name = name.replace('-', "_");
    if !seen.insert(name.clone()) {
        return Ok(());
    }
    let path = index.get(&name).with_context(|| format!("kernel module {name} is not in the package"))?;
    let bytes = if path.extension().is_some_and(|e| e == "xz") {
        let out = Command::new("xz").arg("-dc").arg(path).output().context("running xz -dc")?;
        ensure!(out.status.success(), "xz -dc {} failed", path.display());
        out.stdout
    } else {
        fs::read(path)?
    };
    for dep in modinfo_depends(&bytes) {
        add_module(&dep, index, seen, order)?;
    }
    order.push((name, bytes));
    Ok(())
}

/// The `depends=a,b` entry of a module's `.modinfo` (NUL-separated `key=value` strings).
fn modinfo_depends(ko: &[u8]) -> Vec<String> {
    ko.split(|&b| b == 0)
        .filter_map(|s| s.strip_prefix(b"depends="))
        .flat_map(|d| String::from_utf8_lossy(d).split(',').map(str::to_string).collect::<Vec<_>>())
        .filter(|d| !d.is_empty())
        .collect()
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn init_script(k: &Kernel, build: &Build, plan: &[Cell], filter: &[String], modules: &[String]) -> String {
    let mut s = String::new();
    let tfo = build.tfo_trace.display();
    let _ = write!(
        s,
        r#"#!/bin/busybox sh
# Generated by `cargo xtask vm` for {package}: runs tfo-trace's tests, prints markers, powers off.
/bin/busybox mkdir -p /bb
/bin/busybox --install -s /bb
export PATH=/usr/sbin:/usr/bin:/bb HOME=/root RUST_BACKTRACE=1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
# No tmpfs on /tmp: the test binaries may live under /tmp on the host, hence here too.
chmod 1777 /tmp
mkdir -p /sys/fs/cgroup /run/netns
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
ip link set lo up
"#,
        package = k.package
    );
    for m in modules {
        let _ = writeln!(s, "insmod /modules/{m} || echo 'TFO-VM-WARN insmod {m} failed'");
    }
    let _ = write!(
        s,
        r#"read up _ < /proc/uptime
echo "TFO-VM-BOOT $(uname -r) uptime=$up"
echo "TFO-VM-DOCTOR begin"
{tfo} doctor 2>&1
echo "TFO-VM-DOCTOR end"
# Loads one backend for a second; on failure prints the end of the -v log (the verifier's
# words) and the one-line reason. The backend's tests run only when it loads.
probe() {{
    {tfo} -v trace --backend "$1" --duration 1s >/dev/null 2>/tmp/probe-$1.log
    rc=$?
    [ $rc -eq 0 ] || tail -n 60 /tmp/probe-$1.log
    echo "TFO-VM-BACKEND $1 $rc $(grep -m1 'tfo-trace: error' /tmp/probe-$1.log)"
    return $rc
}}
"#
    );
    let args: String = filter.iter().map(|a| format!(" {}", sh_quote(a))).collect();
    let mut probed = BTreeSet::new();
    for c in plan {
        let b = &c.backend;
        if b != "auto" && probed.insert(b.clone()) {
            let _ = writeln!(s, "probe {b}; loads_{b}=$?");
        }
        let (env, guard) = if b == "auto" {
            (String::new(), "0".to_string())
        } else {
            (format!("TFO_TRACE_BACKEND={b} "), format!("$loads_{b}"))
        };
        let _ = write!(
            s,
            r#"if [ {guard} -eq 0 ]; then
echo "TFO-VM-START {name} {b}"
t0=$(date +%s)
cd /tmp
{env}timeout {limit} {path} --test-threads=1{args}
rc=$?
echo "TFO-VM-RESULT {name} {b} $rc $(( $(date +%s) - t0 ))"
fi
"#,
            name = c.bin.name,
            path = c.bin.path.display(),
            limit = PER_BINARY_TIMEOUT_S,
        );
    }
    s.push_str("echo TFO-VM-DONE\nsync\npoweroff -f\n");
    s
}

// ---- 5. boot ------------------------------------------------------------------------------

fn accel(a: Accel) -> &'static str {
    match a {
        Accel::Kvm => "kvm",
        Accel::Tcg => "tcg",
    }
}

#[derive(Clone, Debug, Default)]
struct RunResult {
    exit: i32,
    seconds: u64,
    passed: u64,
    failed: u64,
    ignored: u64,
    failed_tests: Vec<String>,
}

struct Boot {
    /// Host seconds from qemu's start to the `TFO-VM-BOOT` marker.
    boot_s: Option<f64>,
    total_s: f64,
    results: BTreeMap<(String, String), RunResult>,
    /// Backends that did not load in this kernel, with the tracer's reason.
    unloadable: BTreeMap<String, String>,
    /// Why the run ended early, when it did (timeout, panic, no DONE marker).
    end: Option<String>,
}

fn boot(k: &Kernel, initrd: &Path, accel: &str, args: &VmArgs) -> Result<Boot> {
    let log_path = initrd.with_file_name("console.log");
    let mut log = fs::File::create(&log_path)?;
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-accel", accel, "-m", &args.memory_mb.to_string(), "-smp", "2"])
        // TCG: every CPU feature qemu can emulate (the kernels' BPF JIT uses what it finds).
        .args(if accel == "tcg" { &["-cpu", "max"][..] } else { &[] })
        .args(["-nographic", "-no-reboot", "-nic", "none", "-serial", "mon:stdio"])
        .arg("-kernel")
        .arg(&k.vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", "console=ttyS0 panic=-1 quiet"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    println!("+ {}", crate::util::display(&cmd));
    let start = Instant::now();
    let mut child = cmd.spawn().context("starting qemu-system-x86_64")?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    let tx2 = tx.clone();
    std::thread::spawn(move || read_lines(stdout, tx));
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || read_lines(stderr, tx2));
    let deadline = start + Duration::from_secs(args.timeout_min * 60);
    let mut parser = Console::default();
    let mut boot_s = None;
    let mut end = None;
    let mut done_at: Option<Instant> = None;
    let mut on_line = |line: String, parser: &mut Console| {
        use std::io::Write;
        let _ = writeln!(log, "{line}");
        println!("[{}] {line}", k.short);
        parser.line(&line);
    };
    loop {
        if parser.booted && boot_s.is_none() {
            boot_s = Some(start.elapsed().as_secs_f64());
        }
        if parser.done && done_at.is_none() {
            done_at = Some(Instant::now());
        }
        if Instant::now() >= deadline {
            end = Some(format!("timeout: killed qemu (pid {pid}) after {} min", args.timeout_min));
            let _ = child.kill();
            break;
        }
        // `poweroff -f` follows the DONE marker at once; a guest that lingers is stopped.
        if done_at.is_some_and(|d| d.elapsed() > Duration::from_secs(30)) {
            let _ = child.kill();
            break;
        }
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(line) => on_line(line, &mut parser),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // Both pipes closed: qemu is gone.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if let Ok(Some(_)) = child.try_wait() {
            // Whatever is still buffered in the pipes.
            while let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
                on_line(line, &mut parser);
            }
            break;
        }
    }
    let _ = child.kill();
    let status = child.wait().context("waiting for qemu")?;
    if end.is_none() && !parser.done {
        end = Some(match parser.panic.take() {
            Some(p) => format!("kernel: {p}"),
            None => format!("qemu exited ({status}) before the tests finished; see {}", log_path.display()),
        });
    }
    Ok(Boot {
        boot_s,
        total_s: start.elapsed().as_secs_f64(),
        results: parser.results,
        unloadable: parser.unloadable,
        end,
    })
}

fn read_lines(r: impl Read, tx: mpsc::Sender<String>) {
    let mut r = BufReader::new(r);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match r.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let line = strip_escapes(&String::from_utf8_lossy(&buf));
                if tx.send(line).is_err() {
                    return;
                }
            }
        }
    }
}

/// The line without its end, control characters and terminal escapes (the firmware clears
/// the screen with `ESC c`, `ESC [ ? 7 l`, `ESC [ 2 J` before the kernel's first line).
fn strip_escapes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: parameters and intermediates up to a final byte in @..~; any other
            // escape (such as `ESC c`) is two characters.
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else if !c.is_control() || c == '\t' {
            out.push(c);
        }
    }
    out
}

// ---- 6. the console -----------------------------------------------------------------------

/// Reads the serial console line by line.
#[derive(Default)]
struct Console {
    current: Option<(String, String)>,
    cur: RunResult,
    results: BTreeMap<(String, String), RunResult>,
    panic: Option<String>,
    /// `TFO-VM-BOOT` seen: /init runs.
    booted: bool,
    /// `TFO-VM-DONE` seen: every test binary ran.
    done: bool,
    /// Backends that failed to load: backend -> the tracer's error line.
    unloadable: BTreeMap<String, String>,
}

impl Console {
    fn line(&mut self, line: &str) {
        // A marker may share its line with what was printed before it without a newline.
        let l = match line.find("TFO-VM-") {
            Some(i) => &line[i..],
            None => line.trim_start(),
        };
        if l.starts_with("TFO-VM-BOOT") {
            self.booted = true;
        } else if l.starts_with("TFO-VM-DONE") {
            self.done = true;
        } else if let Some(rest) = l.strip_prefix("TFO-VM-BACKEND ") {
            // `TFO-VM-BACKEND fentry 1 tfo-trace: error: the fentry backend cannot load here: ...`
            let mut w = rest.splitn(3, ' ');
            if let (Some(b), Some(rc)) = (w.next(), w.next()) {
                if rc != "0" {
                    let why = w.next().unwrap_or("").trim();
                    let why = why.strip_prefix("tfo-trace: error: ").unwrap_or(why);
                    let why = if why.is_empty() { format!("tfo-trace exited {rc}") } else { why.to_string() };
                    self.unloadable.insert(b.to_string(), why);
                }
            }
        } else if let Some(rest) = l.strip_prefix("TFO-VM-START ") {
            let mut w = rest.split_whitespace();
            if let (Some(bin), Some(backend)) = (w.next(), w.next()) {
                self.current = Some((bin.to_string(), backend.to_string()));
                self.cur = RunResult::default();
            }
        } else if let Some(rest) = l.strip_prefix("TFO-VM-RESULT ") {
            let w: Vec<&str> = rest.split_whitespace().collect();
            if let [bin, backend, rc, secs, ..] = w[..] {
                let mut r = std::mem::take(&mut self.cur);
                r.exit = rc.parse().unwrap_or(-1);
                r.seconds = secs.parse().unwrap_or(0);
                self.results.insert((bin.to_string(), backend.to_string()), r);
                self.current = None;
            }
        } else if let Some(rest) = l.strip_prefix("test result: ") {
            for part in rest.split(';') {
                let mut words = part.split_whitespace().rev();
                let (Some(what), Some(n)) = (words.next(), words.next()) else { continue };
                let Ok(n) = n.parse::<u64>() else { continue };
                match what {
                    "passed" => self.cur.passed += n,
                    "failed" => self.cur.failed += n,
                    "ignored" => self.cur.ignored += n,
                    _ => {}
                }
            }
        } else if let Some(name) = l.strip_prefix("test ").and_then(|r| r.strip_suffix(" ... FAILED")) {
            self.cur.failed_tests.push(name.to_string());
        } else if l.contains("Kernel panic") && self.panic.is_none() {
            self.panic = Some(l.to_string());
        }
    }
}

fn table_boot_line(k: &Kernel, b: &Boot, accel: &str) {
    println!(
        "vm: {} ({}, {accel}): boot {} s, whole run {:.1} s{}",
        k.short,
        k.release,
        b.boot_s.map_or("?".into(), |s| format!("{s:.1}")),
        b.total_s,
        b.end.as_deref().map_or(String::new(), |e| format!(" — {e}"))
    );
}

/// One row: kernel, cell, its result if it ran, else why not.
type Row = (String, Cell, Option<RunResult>, String);

fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:<7} {:<11} {:<18} {:<8} {:>6} {:>6} {:>7} {:>6}  FAILED TESTS",
        "KERNEL", "BACKEND", "BINARY", "RESULT", "PASSED", "FAILED", "IGNORED", "TIME"
    );
    for (k, c, r, why) in rows {
        match r {
            Some(r) => println!(
                "{:<7} {:<11} {:<18} {:<8} {:>6} {:>6} {:>7} {:>5}s  {}",
                k,
                c.backend,
                c.bin.name,
                match r.exit {
                    0 => "pass".to_string(),
                    124 | 143 => "timeout".to_string(),
                    rc => format!("FAIL({rc})"),
                },
                r.passed,
                r.failed,
                r.ignored,
                r.seconds,
                r.failed_tests.join(", ")
            ),
            None => println!("{:<7} {:<11} {:<18} {:<8} {why}", k, c.backend, c.bin.name, "not run"),
        }
    }
    println!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_kernel_package_by_abi_number() {
        let (p, s) = kernel_prefix("6.1");
        assert_eq!(abi_number("linux-image-6.1.0-57-cloud-amd64-unsigned", &p, s), Some(57));
        assert_eq!(abi_number("linux-image-6.1.0-57-cloud-amd64", &p, s), None);
        let (p, s) = kernel_prefix("6.12");
        assert_eq!(abi_number("linux-image-6.12.117+deb12-cloud-amd64-unsigned", &p, s), Some(117));
        assert_eq!(abi_number("linux-image-6.12.117+deb12-amd64-unsigned", &p, s), None);
    }

    #[test]
    fn modinfo_depends_lists_dependencies() {
        let ko = b"\x7fELF...\0license=GPL\0depends=nfnetlink,libcrc32c\0name=nf_tables\0";
        assert_eq!(modinfo_depends(ko), ["nfnetlink", "libcrc32c"]);
        assert!(modinfo_depends(b"depends=\0name=veth\0").is_empty());
    }

    #[test]
    fn escapes_are_stripped() {
        assert_eq!(
            strip_escapes("\x1bc\x1b[?7l\x1b[2JTFO-VM-BOOT 6.1 uptime=3.78\r\n"),
            "TFO-VM-BOOT 6.1 uptime=3.78"
        );
    }

    #[test]
    fn console_results_and_counts() {
        let mut c = Console::default();
        for l in [
            "TFO-VM-START stalls tracepoint",
            "running 1 test",
            "test stalls_lists_every_connection ... FAILED",
            "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 9.1s",
            "TFO-VM-RESULT stalls tracepoint 101 12",
            "TFO-VM-START lab auto",
            "test result: ok. 11 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 30s",
            "TFO-VM-RESULT lab auto 0 31",
            "TFO-VM-BACKEND fentry 1 tfo-trace: error: the fentry backend cannot load here: EACCES",
            "TFO-VM-BACKEND kprobe 0 ",
        ] {
            c.line(l);
        }
        let r = &c.results[&("stalls".into(), "tracepoint".into())];
        assert_eq!((r.exit, r.failed, r.seconds), (101, 1, 12));
        assert_eq!(r.failed_tests, ["stalls_lists_every_connection"]);
        let r = &c.results[&("lab".into(), "auto".into())];
        assert_eq!((r.exit, r.passed), (0, 11));
        assert_eq!(c.unloadable.len(), 1);
        assert_eq!(c.unloadable["fentry"], "the fentry backend cannot load here: EACCES");
    }
}
