//! `cargo xtask vm`: the kernel matrix. Boots Debian's 5.10, 6.1 and 6.12 cloud kernels
//! under qemu and runs tfo-trace's integration tests inside, once per tracer backend.
//!
//! The way there (docs/vm.md says more):
//! 1. Debian packages on the host: qemu, a static busybox, cpio, xz, and the userspace the
//!    tests call (`ip`, `tc`, `nstat`, `nft`, `sysctl`, `tcpdump`), copied into the VM with their
//!    shared libraries as `ldd` lists them.
//! 2. The newest cloud kernel of each series ([`SERIES`]: `linux-image-5.10.0-N-cloud-amd64-unsigned`
//!    from bullseye, `linux-image-6.1.0-N-cloud-amd64-unsigned` and
//!    `linux-image-6.12.N+deb12-cloud-amd64-unsigned` from bookworm) that apt knows,
//!    downloaded once into `target/vm/debs/` and unpacked (vmlinuz + the modules the lab
//!    needs: veth, sch_netem, nf_tables, with their dependencies from each module's `.modinfo`).
//!    What differs between CPU architectures (qemu, machine, console, the package's
//!    architecture) is data ([`Arch`]).
//! 3. The test executables, built on the host, and their tests (`--list`).
//!    `env!("CARGO_BIN_EXE_tfo-trace")` is fixed at compile time, so every binary goes into
//!    the initramfs at its host path.
//! 4. One initramfs per kernel: a busybox `/init` that mounts the pseudo file systems, loads
//!    the modules, and runs the cell the kernel command line names (`tfo_cell=`).
//! 5. One qemu boot per cell, a cell being (kernel, backend) or (kernel, lab). No fixed
//!    wall-clock limit for a whole kernel: every test runs as its own process under a limit
//!    of its own inside the guest (a hung test is killed and named, the next one runs); the
//!    host kills a guest that stays silent longer than one test's limit (a hung kernel).
//!    Cells run `--jobs` at a time, by default as many as the host has cores for their
//!    vCPUs, so guests never compete for a core.
//! 6. The console parsed into a kernel x backend x binary table and a time table; any
//!    failure fails the task.
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::{Args, ValueEnum};

use crate::util::{capture, cargo, is_root, probe, run, workspace_root};

/// Debian packages the host needs for the VM runs (the tests' userspace comes from
/// iproute2, nftables and procps, which `cargo xtask setup` installs already).
const DEB_HOST: &[(&str, &str)] = &[
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
    // A listener's name as `ss -ltn` shows it (tests/report.rs names listeners so).
    "/usr/bin/ss",
    "/usr/sbin/nft",
    "/usr/sbin/sysctl",
    // The middlebox scenario checks stalls against the SYNs on the wire.
    "/usr/bin/tcpdump",
];
/// Host configuration the programs above read, copied when present.
const VM_ETC: &[&str] = &["/etc/iproute2", "/usr/share/iproute2", "/etc/protocols", "/etc/services"];
/// Kernel modules the lab needs; their dependencies are added from `.modinfo`.
const VM_MODULES: &[&str] = &["veth", "sch_netem", "nf_tables"];
/// Modules the lab needs where the kernel has them as modules rather than built in: the
/// nft `counter` expression (the middlebox rules count their drops) is `nft_counter.ko` on
/// 5.10 and part of nf_tables from 5.14 on. `ss` asks the kernel through sock_diag
/// (tcp_diag): without it ss reads /proc/net/tcp6, which does not say whether `[::]` is
/// IPv6-only, and names such a listener `*:P`.
const VM_MODULES_IF_PRESENT: &[&str] = &["nft_counter", "tcp_diag"];
/// The scenario tests (tracer against the kernel's counters): run once per backend, with
/// TFO_TRACE_BACKEND set (tests/common passes it as `--backend`).
const VM_PER_BACKEND: &[&str] = &["kernel_scenarios", "server_outcomes", "stalls", "report"];
/// Run once per kernel, without a backend: the lab itself (veth, netem, nft on this kernel).
const VM_ONCE: &[&str] = &["lab", "kernel_facts"];
// Every other tests/*.rs is host-only by default (views, formats, CLI, capabilities, the
// Prometheus exporter: nothing there depends on the kernel's hooks); `--bins` runs any.
/// The cell that runs `VM_ONCE` (and `doctor`) on each kernel.
const ONCE_CELL: &str = "lab";

/// Default limit of one test inside the guest. The longest scenario takes about 30 s under
/// TCG on a busy 2-core machine of this project's kind: ten times that before a test is
/// called hung.
const TEST_LIMIT_S: u64 = 300;
/// From qemu's start to /init running the tests: boot, modules, the backend probe (about
/// 10 s under TCG; `doctor` adds 5 s in the lab cell).
const BOOT_LIMIT_S: u64 = 300;

/// A CPU architecture the matrix boots: everything that differs between them, as data,
/// so that one more is one more entry.
#[derive(Debug)]
pub struct Arch {
    /// What `--arch` and the tables call it.
    name: &'static str,
    /// Debian's name, as kernel package names spell it.
    deb: &'static str,
    /// The emulator, and the Debian package that has it.
    qemu: &'static str,
    qemu_package: &'static str,
    /// qemu arguments that pick the board and CPU under TCG.
    machine: &'static [&'static str],
    /// The serial console the kernel writes to (`console=`).
    console: &'static str,
}

const X86_64: Arch = Arch {
    name: "x86_64",
    deb: "amd64",
    qemu: "qemu-system-x86_64",
    qemu_package: "qemu-system-x86",
    // TCG: every CPU feature qemu can emulate (the kernels' BPF JIT uses what it finds).
    machine: &["-cpu", "max"],
    console: "ttyS0",
};

const ARM64: Arch = Arch {
    name: "arm64",
    deb: "arm64",
    qemu: "qemu-system-aarch64",
    qemu_package: "qemu-system-arm",
    machine: &["-machine", "virt", "-cpu", "max"],
    console: "ttyAMA0",
};

const ARCHES: &[&Arch] = &[&X86_64, &ARM64];

/// A kernel series the matrix boots: the Debian package that has it, for any [`Arch`].
#[derive(Debug)]
struct Series {
    /// `5.10`, as `--kernel` takes it.
    short: &'static str,
    /// The Debian suite it comes from (`cargo xtask setup` adds the ones the machine lacks).
    suite: &'static str,
    /// Package name before the ABI number...
    prefix: &'static str,
    /// ...and after it, up to the architecture: the package is
    /// `{prefix}{N}{flavour}{arch.deb}-unsigned`.
    flavour: &'static str,
}

/// Every series, oldest first: 5.10 (Debian 11; Amazon Linux 2 and older Bottlerocket run
/// 5.10 too), 6.1 (Debian 12, AL2023), 6.12 (a bookworm backport, Debian 13's series).
const SERIES: &[Series] = &[
    Series { short: "5.10", suite: "bullseye", prefix: "linux-image-5.10.0-", flavour: "-cloud-" },
    Series { short: "6.1", suite: "bookworm", prefix: "linux-image-6.1.0-", flavour: "-cloud-" },
    Series { short: "6.12", suite: "bookworm", prefix: "linux-image-6.12.", flavour: "+deb12-cloud-" },
];

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
    fn series(self) -> Vec<&'static Series> {
        let one = |short: &str| SERIES.iter().filter(|s| s.short == short).collect();
        match self {
            KernelChoice::V5_10 => one("5.10"),
            KernelChoice::V6_1 => one("6.1"),
            KernelChoice::V6_12 => one("6.12"),
            KernelChoice::All => SERIES.iter().collect(),
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum ArchChoice {
    #[value(name = "x86_64")]
    X86_64,
    Arm64,
}

impl ArchChoice {
    fn arch(self) -> &'static Arch {
        let name = match self {
            ArchChoice::X86_64 => "x86_64",
            ArchChoice::Arm64 => "arm64",
        };
        ARCHES.iter().copied().find(|a| a.name == name).unwrap_or(&X86_64)
    }
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
    /// Which CPU architecture's kernels to boot
    #[arg(long, value_enum, default_value = "x86_64")]
    pub arch: ArchChoice,
    /// Only boot each kernel with a busybox /init that prints a marker and powers off: the
    /// architecture's plumbing (package, emulator, console, initramfs), no tests
    #[arg(long)]
    pub boot_only: bool,
    /// Tracer backends to run the backend-dependent tests with (TFO_TRACE_BACKEND in the VM)
    #[arg(long, value_delimiter = ',', default_value = "tracepoint,raw-tracepoint,fentry,kprobe")]
    pub backend: Vec<String>,
    /// Integration test binaries to run (default: kernel_scenarios,server_outcomes,stalls,
    /// report per backend; lab and kernel_facts once per kernel)
    #[arg(long, value_delimiter = ',')]
    pub bins: Vec<String>,
    /// qemu accelerator; CI's budget is planned for TCG
    #[arg(long, value_enum, default_value = "tcg")]
    pub accel: Accel,
    /// Limit of one test inside the guest, in seconds (the test is killed and named past
    /// it; the host kills a guest silent for this long plus two minutes)
    #[arg(long, default_value_t = TEST_LIMIT_S)]
    pub test_limit_s: u64,
    /// Guest memory in MiB
    #[arg(long, default_value_t = 1024)]
    pub memory_mb: u32,
    /// vCPUs per guest
    #[arg(long, default_value_t = 1)]
    pub smp: u32,
    /// Guests at once (default: host cores / vCPUs per guest, at least 1)
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Arguments for each test binary inside the VM (a name filter, `--exact`, ...), after `--`
    #[arg(last = true)]
    pub filter: Vec<String>,
}

impl Default for VmArgs {
    fn default() -> Self {
        VmArgs {
            kernel: KernelChoice::All,
            arch: ArchChoice::X86_64,
            boot_only: false,
            backend: ["tracepoint", "raw-tracepoint", "fentry", "kprobe"].map(String::from).to_vec(),
            bins: Vec::new(),
            accel: Accel::Tcg,
            test_limit_s: TEST_LIMIT_S,
            memory_mb: 1024,
            smp: 1,
            jobs: None,
            filter: Vec::new(),
        }
    }
}

impl VmArgs {
    /// Rejects bad arguments before anything is installed or built.
    pub fn check(&self) -> Result<()> {
        for b in &self.backend {
            ensure!(
                ["tracepoint", "raw-tracepoint", "fentry", "kprobe", "auto"].contains(&b.as_str()),
                "unknown backend `{b}` (tracepoint, raw-tracepoint, fentry, kprobe, auto)"
            );
            ensure!(b != ONCE_CELL, "`{ONCE_CELL}` names the per-kernel cell, not a backend");
        }
        ensure!(
            self.boot_only || self.arch.arch().name == X86_64.name,
            "--arch {}: the tests inside an {} guest must be built for it, and this branch has no \
             cross build of them yet (the aarch64 build comes with `cargo xtask dist`); \
             --boot-only boots its kernels without tests",
            self.arch.arch().name,
            self.arch.arch().name
        );
        ensure!(self.smp >= 1, "--smp must be at least 1");
        ensure!(self.jobs != Some(0), "--jobs must be at least 1");
        ensure!(self.test_limit_s >= 10, "--test-limit-s below 10 s would call every test hung");
        Ok(())
    }

    fn jobs(&self) -> usize {
        self.jobs.unwrap_or_else(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            (cores / self.smp as usize).max(1)
        })
    }
}

/// What the matrix ran, for `cargo xtask test`'s closing tally.
#[derive(Default, Debug)]
pub struct Report {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    /// Cells and tests that failed or did not run, one line each.
    pub problems: Vec<String>,
    /// Tests that reported themselves as unable to run here: `cell test: reason`.
    pub skipped: Vec<String>,
    /// Kernel tests that failed once and passed on their second run: `cell test ...`
    /// (the harness's `retried:` lines, tests/common/harness.rs).
    pub retried: Vec<String>,
}

/// `cargo xtask vm`: errors when any cell failed.
pub fn vm(args: &VmArgs) -> Result<()> {
    let report = if args.boot_only { boot_only(args)? } else { matrix(args)? };
    if !report.problems.is_empty() {
        bail!("VM matrix: {} problem(s):\n  {}", report.problems.len(), report.problems.join("\n  "));
    }
    Ok(())
}

/// Builds, boots and runs every cell; prints the tables; returns the tally.
pub fn matrix(args: &VmArgs) -> Result<Report> {
    let start = Instant::now();
    args.check()?;
    let root = workspace_root();
    let work = root.join("target/vm");
    fs::create_dir_all(work.join("debs")).context("creating target/vm/debs")?;
    let arch = args.arch.arch();
    host_packages(arch)?;
    let kernels = kernels(args.kernel, arch, &work)?;
    for k in &kernels {
        println!("vm: kernel {} is {} ({}, {})", k.short, k.release, k.package, k.arch.name);
    }
    let build = build_tests(&root)?;
    let bins = select_bins(&build, &args.bins)?;
    let listed = bins
        .iter()
        .map(|b| Ok(((*b).clone(), list_tests(b, &args.filter)?)))
        .collect::<Result<Vec<(TestBin, Vec<String>)>>>()?;
    let cells = plan(&kernels, &listed, &args.backend);
    ensure!(!cells.is_empty(), "no test matches {:?}", args.filter);
    let initrds = kernels
        .iter()
        .map(|k| {
            let mine: Vec<&Cell> = cells.iter().filter(|c| c.kernel == k.short).collect();
            initramfs(&work, k, &build, &mine, &args.filter, args.test_limit_s)
        })
        .collect::<Result<Vec<_>>>()?;
    let prepared_s = start.elapsed().as_secs_f64();
    let jobs = args.jobs().min(cells.len());
    println!(
        "vm: {} cell(s) on {} kernel(s), {jobs} guest(s) at once, {} vCPU(s) each, {} s per test at most",
        cells.len(),
        kernels.len(),
        args.smp,
        args.test_limit_s
    );
    let boots = run_cells(&cells, &kernels, &initrds, args, jobs);
    let report = summarize(&cells, &boots);
    print_time_table(&cells, &boots, prepared_s, start.elapsed().as_secs_f64(), jobs);
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

/// `--boot-only`: each kernel of the architecture boots to a busybox /init that prints the
/// markers the matrix reads (with `uname -m`) and powers off. What an architecture needs
/// before its tests can run there: its kernel package, emulator, board, console.
fn boot_only(args: &VmArgs) -> Result<Report> {
    let start = Instant::now();
    args.check()?;
    let work = workspace_root().join("target/vm");
    fs::create_dir_all(work.join("debs")).context("creating target/vm/debs")?;
    let arch = args.arch.arch();
    host_packages(arch)?;
    foreign_arch(arch)?;
    let kernels = kernels(args.kernel, arch, &work)?;
    let busybox = busybox_for(arch, &work)?;
    let mut report = Report::default();
    for k in &kernels {
        println!("vm: kernel {} is {} ({}, {})", k.short, k.release, k.package, k.arch.name);
        let initrd = boot_initramfs(&work, k, &busybox)?;
        let cell = Cell { kernel: k.short.clone(), name: BOOT_CELL.into(), runs: Vec::new() };
        let boot = boot(k, &cell, &initrd, args)?;
        match (boot.boot_s, &boot.end) {
            (Some(s), None) => {
                println!("vm: {} ({}) booted to /init in {s:.1} s, powered off", k.short, k.arch.name);
                report.passed += 1;
            }
            (_, end) => {
                report.failed += 1;
                let why = end.clone().unwrap_or_else(|| "no boot marker".into());
                report.problems.push(format!("{} boot: {why}", k.short));
            }
        }
    }
    println!("vm: boot only, {} kernel(s), {:.1} s", kernels.len(), start.elapsed().as_secs_f64());
    Ok(report)
}

/// The cell name of `--boot-only` boots.
const BOOT_CELL: &str = "boot";

/// The host's own architecture in Debian's words (`dpkg --print-architecture`).
fn host_deb_arch() -> String {
    probe(Command::new("dpkg").arg("--print-architecture")).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// apt must know the architecture's packages to download its kernel and busybox
/// (`dpkg --add-architecture`, then `apt-get update`); nothing of it is installed.
fn foreign_arch(arch: &Arch) -> Result<()> {
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
    run(Command::new("dpkg").args(["--add-architecture", arch.deb]))?;
    run(Command::new("apt-get").args(["update", "-q"]))
}

/// A static busybox for `arch`: the host's own, or the architecture's busybox-static
/// package unpacked under target/vm.
fn busybox_for(arch: &Arch, work: &Path) -> Result<PathBuf> {
    if arch.deb == host_deb_arch() {
        return Ok(PathBuf::from("/bin/busybox"));
    }
    let dir = work.join(format!("busybox-{}", arch.deb));
    let exe = dir.join("bin/busybox");
    if exe.exists() {
        return Ok(exe);
    }
    let debs = work.join("debs");
    let qualified = format!("busybox-static:{}", arch.deb);
    run(Command::new("apt-get").current_dir(&debs).args(["download", &qualified]))
        .with_context(|| format!("apt-get download {qualified}"))?;
    let deb = fs::read_dir(&debs)?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with("busybox-static_") && n.ends_with(&format!("_{}.deb", arch.deb))
            })
        })
        .with_context(|| format!("apt-get download left no busybox-static_*_{}.deb", arch.deb))?;
    fs::create_dir_all(&dir)?;
    run(Command::new("dpkg").arg("-x").arg(&deb).arg(&dir))?;
    ensure!(exe.exists(), "{} has no bin/busybox", deb.display());
    Ok(exe)
}

/// The initramfs of a boot-only run: busybox and an /init that says where it runs.
fn boot_initramfs(work: &Path, k: &Kernel, busybox: &Path) -> Result<PathBuf> {
    let dir = work.join(&k.short);
    let root = dir.join("boot-root");
    let _ = fs::remove_dir_all(&root);
    for d in ["bin", "proc", "sys", "dev"] {
        fs::create_dir_all(root.join(d))?;
    }
    copy_file(busybox, &root.join("bin/busybox"))?;
    let init = root.join("init");
    fs::write(
        &init,
        format!(
            "#!/bin/busybox sh
             # Generated by `cargo xtask vm --boot-only` for {package}.
             /bin/busybox mount -t proc proc /proc
             read up _ < /proc/uptime
             echo \"TFO-VM-BOOT $(/bin/busybox uname -r) cell={BOOT_CELL} uptime=$up\"
             echo \"TFO-VM-ARCH $(/bin/busybox uname -m)\"
             echo TFO-VM-DONE
             /bin/busybox poweroff -f
",
            package = k.package
        ),
    )?;
    fs::set_permissions(&init, fs::Permissions::from_mode(0o755))?;
    let cpio = dir.join("boot.cpio");
    let mut sh = Command::new("sh");
    sh.current_dir(&root)
        .arg("-c")
        .arg(format!("find . -print0 | cpio --null -o -H newc -R 0:0 --quiet > '{}'", cpio.display()));
    run(&mut sh).context("packing the boot initramfs")?;
    Ok(cpio)
}

// ---- 1. host packages ---------------------------------------------------------------------

fn host_packages(arch: &Arch) -> Result<()> {
    let qemu = format!("/usr/bin/{}", arch.qemu);
    let wanted: Vec<(&str, &str)> =
        DEB_HOST.iter().copied().chain([(arch.qemu_package, qemu.as_str())]).collect();
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
    /// `5.10`, `6.1`, `6.12` on x86_64; `6.1-arm64` on another architecture: the
    /// tables' KERNEL column and the folder under target/vm.
    short: String,
    arch: &'static Arch,
    /// The package name, e.g. `linux-image-6.1.0-57-cloud-amd64-unsigned`.
    package: String,
    /// `uname -r` inside, e.g. `6.1.0-57-cloud-amd64`.
    release: String,
    vmlinuz: PathBuf,
    /// `lib/modules/<release>` of the unpacked package.
    modules: PathBuf,
}

fn kernels(choice: KernelChoice, arch: &'static Arch, work: &Path) -> Result<Vec<Kernel>> {
    choice.series().into_iter().map(|s| kernel(s, arch, work)).collect()
}

/// Package name pattern of a series on an architecture: (prefix, suffix) around the ABI
/// number, e.g. `linux-image-5.10.0-` `-cloud-amd64-unsigned`.
fn kernel_prefix(series: &Series, arch: &Arch) -> (String, String) {
    (series.prefix.to_string(), format!("{}{}-unsigned", series.flavour, arch.deb))
}

/// The number between prefix and suffix (`57` in `...6.1.0-57-cloud...`), for ordering.
fn abi_number(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?.strip_suffix(suffix)?.parse().ok()
}

/// The newest package of one series apt knows, downloaded (cached) and unpacked (cached).
fn kernel(series: &Series, arch: &'static Arch, work: &Path) -> Result<Kernel> {
    let (prefix, suffix) = kernel_prefix(series, arch);
    let suffix = suffix.as_str();
    let short = if arch.name == X86_64.name {
        series.short.to_string()
    } else {
        format!("{}-{}", series.short, arch.name)
    };
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
            newest(&names).with_context(|| {
                format!(
                    "apt knows no {prefix}*{suffix} package and none is cached (it is in Debian's {} \
                     suite: `cargo xtask setup` adds it to apt's sources)",
                    series.suite
                )
            })?
        }
    };
    let deb = match cached(&package) {
        Some(d) => {
            println!("ok: {package} (cached)");
            d
        }
        None => {
            println!("downloading: {package}");
            // Qualified with its architecture: apt picks the host's by default.
            let qualified = format!("{package}:{}", arch.deb);
            run(Command::new("apt-get").current_dir(&debs).args(["download", &qualified]))
                .with_context(|| format!("apt-get download {qualified}"))?;
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
    Ok(Kernel { short, arch, package, modules: dir.join("lib/modules").join(&release), release, vmlinuz })
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

/// The binaries `--bins` names, or the default VM selection.
fn select_bins<'a>(build: &'a Build, wanted: &[String]) -> Result<Vec<&'a TestBin>> {
    if wanted.is_empty() {
        let (vm, host): (Vec<&TestBin>, Vec<&TestBin>) = build
            .tests
            .iter()
            .partition(|t| VM_PER_BACKEND.contains(&t.name.as_str()) || VM_ONCE.contains(&t.name.as_str()));
        let host: Vec<&str> = host.iter().map(|t| t.name.as_str()).collect();
        println!("vm: host-only test binaries (not run in the VM): {}", host.join(", "));
        return Ok(vm);
    }
    wanted
        .iter()
        .map(|name| {
            build.tests.iter().find(|t| &t.name == name).with_context(|| {
                let all: Vec<_> = build.tests.iter().map(|t| t.name.as_str()).collect();
                format!("no integration test binary `{name}` (there are: {})", all.join(", "))
            })
        })
        .collect()
}

/// The tests of one binary that `filter` selects, as the binary itself lists them
/// (`--list`: `name: test` lines).
fn list_tests(bin: &TestBin, filter: &[String]) -> Result<Vec<String>> {
    let out = capture(Command::new(&bin.path).arg("--list").args(list_args(filter)))
        .with_context(|| format!("listing the tests of {}", bin.name))?;
    Ok(out.lines().filter_map(|l| l.strip_suffix(": test")).map(str::to_string).collect())
}

/// What of the user's `-- ARGS` selects tests (the filter, `--exact`, `--skip X`); the rest
/// (`--nocapture`, ...) only changes how each test runs.
fn list_args(filter: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = filter.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--exact" | "--ignored" | "--include-ignored" => out.push(a.clone()),
            "--skip" => {
                out.push(a.clone());
                out.extend(it.next().cloned());
            }
            s if !s.starts_with('-') => out.push(a.clone()),
            _ => {}
        }
    }
    out
}

/// Flags of the user's `-- ARGS` that go to every test run (not the selection).
fn run_args(filter: &[String]) -> Vec<String> {
    let selecting = list_args(filter);
    let mut out = Vec::new();
    let mut it = filter.iter();
    while let Some(a) = it.next() {
        if a == "--skip" {
            it.next();
        } else if !selecting.contains(a) {
            out.push(a.clone());
        }
    }
    out
}

/// One qemu boot: a kernel with a backend (the scenario binaries) or with `lab`.
#[derive(Clone, Debug)]
struct Cell {
    kernel: String,
    /// A backend name, or [`ONCE_CELL`].
    name: String,
    /// The binaries and the tests of each this cell runs.
    runs: Vec<(TestBin, Vec<String>)>,
}

impl Cell {
    fn backend(&self) -> Option<&str> {
        (self.name != ONCE_CELL).then_some(self.name.as_str())
    }

    fn test_count(&self) -> usize {
        self.runs.iter().map(|(_, t)| t.len()).sum()
    }

    fn label(&self) -> String {
        format!("{} {}", self.kernel, self.name)
    }
}

fn plan(kernels: &[Kernel], listed: &[(TestBin, Vec<String>)], backends: &[String]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for k in kernels {
        let pick = |once: bool| -> Vec<(TestBin, Vec<String>)> {
            listed
                .iter()
                .filter(|(b, t)| !t.is_empty() && VM_ONCE.contains(&b.name.as_str()) == once)
                .cloned()
                .collect()
        };
        for be in backends {
            cells.push(Cell { kernel: k.short.clone(), name: be.clone(), runs: pick(false) });
        }
        cells.push(Cell { kernel: k.short.clone(), name: ONCE_CELL.into(), runs: pick(true) });
    }
    cells.retain(|c| c.test_count() > 0);
    // Longest first, so the last guest to finish is a short one.
    cells.sort_by_key(|c| std::cmp::Reverse(c.test_count()));
    cells
}

// ---- 4. the initramfs ---------------------------------------------------------------------

/// One initramfs per kernel, holding every cell of that kernel (`/cells/<name>.sh`); the
/// kernel command line picks the cell.
fn initramfs(
    work: &Path,
    k: &Kernel,
    build: &Build,
    cells: &[&Cell],
    filter: &[String],
    test_limit_s: u64,
) -> Result<PathBuf> {
    let dir = work.join(&k.short);
    let root = dir.join("root");
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root)?;
    // A merged-/usr layout like the host's, so host paths and ldd's paths both resolve.
    for d in [
        "usr/bin",
        "usr/sbin",
        "usr/lib",
        "usr/lib64",
        "etc",
        "proc",
        "sys",
        "dev",
        "run",
        "tmp",
        "root",
        "cells",
    ] {
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
    let mut exes: Vec<&Path> =
        cells.iter().flat_map(|c| c.runs.iter().map(|(b, _)| b.path.as_path())).collect();
    exes.push(&build.tfo_trace);
    exes.sort();
    exes.dedup();
    for exe in exes {
        let dst = root.join(exe.strip_prefix("/").context("test binary path is not absolute")?);
        fs::create_dir_all(dst.parent().context("a binary path without a parent")?)?;
        run(Command::new("objcopy").arg("--strip-debug").arg(exe).arg(&dst))?;
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
    let modules = modules(k, &root)?;
    let init = root.join("init");
    fs::write(&init, init_script(k, build, &modules))?;
    fs::set_permissions(&init, fs::Permissions::from_mode(0o755))?;
    for c in cells {
        fs::write(root.join("cells").join(format!("{}.sh", c.name)), cell_script(c, filter, test_limit_s))?;
    }
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
    for m in VM_MODULES_IF_PRESENT.iter().filter(|m| index.contains_key(**m)) {
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

/// `/init`: what every cell shares (mounts, modules), then the cell `tfo_cell=` names.
fn init_script(k: &Kernel, build: &Build, modules: &[String]) -> String {
    let mut s = String::new();
    let tfo = build.tfo_trace.display();
    let _ = write!(
        s,
        r#"#!/bin/busybox sh
# Generated by `cargo xtask vm` for {package}: runs one cell of tfo-trace's tests, prints
# markers on the console, powers off.
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
        r#"cell=$(sed -n 's/.*tfo_cell=\([^ ]*\).*/\1/p' /proc/cmdline)
read up _ < /proc/uptime
echo "TFO-VM-BOOT $(uname -r) cell=$cell uptime=$up"
if [ "$cell" = {once} ]; then
    echo "TFO-VM-DOCTOR begin"
    {tfo} doctor 2>&1
    echo "TFO-VM-DOCTOR end"
fi
# Loads one backend for a second; on failure prints the end of the -v log (the verifier's
# words) and the one-line reason. The backend's tests run only when it loads.
probe() {{
    {tfo} -v trace --backend "$1" --duration 1s >/dev/null 2>/tmp/probe-$1.log
    rc=$?
    [ $rc -eq 0 ] || tail -n 60 /tmp/probe-$1.log
    echo "TFO-VM-BACKEND $1 $rc $(grep -m1 'tfo-trace: error' /tmp/probe-$1.log)"
    return $rc
}}
# One test, as its own process under its own limit: a hung test is killed and named.
# Usage: one_test LIMIT_S BINARY_NAME TEST_NAME COMMAND...
one_test() {{
    limit=$1 bin=$2 name=$3
    shift 3
    echo "TFO-VM-TEST $bin $name"
    t0=$(date +%s)
    cd /tmp
    timeout "$limit" "$@"
    rc=$?
    echo "TFO-VM-END $bin $name $rc $(( $(date +%s) - t0 ))"
}}
if [ -f "/cells/$cell.sh" ]; then
    . "/cells/$cell.sh"
else
    echo "TFO-VM-WARN no cell named '$cell'"
fi
echo TFO-VM-DONE
sync
poweroff -f
"#,
        once = sh_quote(ONCE_CELL),
    );
    s
}

/// The part of /init one cell runs: the backend probe, then each test under its limit.
fn cell_script(cell: &Cell, filter: &[String], test_limit_s: u64) -> String {
    let mut s = String::new();
    let extra: String = run_args(filter).iter().map(|a| format!(" {}", sh_quote(a))).collect();
    match cell.backend() {
        Some(b) => {
            let _ = writeln!(s, "probe {b}\nloads=$?\nexport TFO_TRACE_BACKEND={b}");
        }
        None => s.push_str("loads=0\n"),
    }
    s.push_str("if [ $loads -eq 0 ]; then\n");
    for (bin, tests) in &cell.runs {
        for t in tests {
            let _ = writeln!(
                s,
                "one_test {test_limit_s} {name} {t} {path} --exact {t} --test-threads=1{extra}",
                name = bin.name,
                t = sh_quote(t),
                path = bin.path.display(),
            );
        }
    }
    s.push_str("fi\n");
    s
}

// ---- 5. boot ------------------------------------------------------------------------------

fn accel(a: Accel) -> &'static str {
    match a {
        Accel::Kvm => "kvm",
        Accel::Tcg => "tcg",
    }
}

/// The board and CPU arguments: the architecture's, less `-cpu max` under KVM (the host's
/// CPU is what a KVM guest gets).
fn qemu_machine(arch: &Arch, accel: Accel) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut it = arch.machine.iter();
    while let Some(&a) = it.next() {
        if a == "-cpu" && accel == Accel::Kvm {
            it.next();
            continue;
        }
        out.push(a);
    }
    out
}

/// One test's run inside the guest.
#[derive(Clone, Debug, Default)]
struct TestRun {
    exit: i32,
    seconds: u64,
    passed: u64,
    failed: u64,
    ignored: u64,
    /// Why the test said it cannot run here.
    skip_reason: Option<String>,
    /// The harness's `retried:` line: it passed on its second run, after this failure.
    retried: Option<String>,
}

/// What one boot of one cell gave.
#[derive(Default)]
struct Boot {
    /// Host seconds from qemu's start to the `TFO-VM-BOOT` marker.
    boot_s: Option<f64>,
    total_s: f64,
    /// (binary, test) -> its run.
    results: BTreeMap<(String, String), TestRun>,
    /// The backend did not load in this kernel: the tracer's reason.
    unloadable: Option<String>,
    /// Why the run ended early, when it did (hung, panic, no DONE marker).
    end: Option<String>,
}

/// Runs every cell, `jobs` guests at once; results in the order of `cells`.
fn run_cells(
    cells: &[Cell],
    kernels: &[Kernel],
    initrds: &[PathBuf],
    args: &VmArgs,
    jobs: usize,
) -> Vec<Boot> {
    let queue = Mutex::new((0..cells.len()).collect::<VecDeque<usize>>());
    let done = Mutex::new(BTreeMap::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let Some(i) = queue.lock().map(|mut q| q.pop_front()).unwrap_or(None) else { return };
                let c = &cells[i];
                let k = kernels.iter().position(|k| k.short == c.kernel).expect("a planned kernel");
                let boot = boot(&kernels[k], c, &initrds[k], args).unwrap_or_else(|e| Boot {
                    end: Some(format!("qemu did not run: {e:#}")),
                    ..Boot::default()
                });
                if let Ok(mut d) = done.lock() {
                    d.insert(i, boot);
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_default();
    (0..cells.len()).map(|i| done.remove(&i).unwrap_or_default()).collect()
}

fn boot(k: &Kernel, cell: &Cell, initrd: &Path, args: &VmArgs) -> Result<Boot> {
    let accel = accel(args.accel);
    let log_path = initrd.with_file_name(format!("console-{}.log", cell.name));
    let mut log = fs::File::create(&log_path)?;
    let mut cmd = Command::new(k.arch.qemu);
    cmd.args(["-accel", accel, "-m", &args.memory_mb.to_string(), "-smp", &args.smp.to_string()])
        .args(qemu_machine(k.arch, args.accel))
        .args(["-nographic", "-no-reboot", "-nic", "none", "-serial", "mon:stdio"])
        .arg("-kernel")
        .arg(&k.vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", &format!("console={} panic=-1 quiet tfo_cell={}", k.arch.console, cell.name)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    println!("+ {}", crate::util::display(&cmd));
    let start = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("starting {}", k.arch.qemu))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take().context("qemu stdout")?;
    let tx2 = tx.clone();
    std::thread::spawn(move || read_lines(stdout, tx));
    let stderr = child.stderr.take().context("qemu stderr")?;
    std::thread::spawn(move || read_lines(stderr, tx2));
    // Limits sized from the cell's own work: a boot, then each test under its own limit
    // (enforced in the guest). The host steps in only when the guest itself is stuck: no
    // line for longer than one test may take, or more time than all its tests may take.
    let silence_limit = Duration::from_secs(args.test_limit_s + 120);
    let boot_limit = Duration::from_secs(BOOT_LIMIT_S);
    let whole_limit =
        Duration::from_secs(BOOT_LIMIT_S + 60 + (cell.test_count() as u64 + 1) * (args.test_limit_s + 5));
    let prefix = format!("[{}]", cell.label());
    let mut parser = Console::default();
    let mut boot_s = None;
    let mut end = None;
    let mut done_at: Option<Instant> = None;
    let mut last_line = Instant::now();
    let mut on_line = |line: String, parser: &mut Console| {
        use std::io::Write;
        let _ = writeln!(log, "{line}");
        println!("{prefix} {line}");
        parser.line(&line);
    };
    loop {
        if parser.booted && boot_s.is_none() {
            boot_s = Some(start.elapsed().as_secs_f64());
        }
        if parser.done && done_at.is_none() {
            done_at = Some(Instant::now());
        }
        let hung = if !parser.booted && start.elapsed() > boot_limit {
            Some(format!("did not boot within {} s", boot_limit.as_secs()))
        } else if last_line.elapsed() > silence_limit {
            Some(format!(
                "silent for {} s{}",
                silence_limit.as_secs(),
                parser.current.as_ref().map_or(String::new(), |(b, t)| format!(" during {b} {t}"))
            ))
        } else if start.elapsed() > whole_limit {
            Some(format!("still running after {} s, the sum of its tests' limits", whole_limit.as_secs()))
        } else {
            None
        };
        if let Some(why) = hung {
            end = Some(format!("hung guest ({}): {why}; killed qemu (pid {pid})", cell.label()));
            let _ = child.kill();
            break;
        }
        // `poweroff -f` follows the DONE marker at once; a guest that lingers is stopped.
        if done_at.is_some_and(|d| d.elapsed() > Duration::from_secs(30)) {
            let _ = child.kill();
            break;
        }
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(line) => {
                last_line = Instant::now();
                on_line(line, &mut parser)
            }
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

/// Reads the serial console of one cell, line by line.
#[derive(Default)]
struct Console {
    /// The test running now: (binary, test).
    current: Option<(String, String)>,
    cur: TestRun,
    results: BTreeMap<(String, String), TestRun>,
    panic: Option<String>,
    /// `TFO-VM-BOOT` seen: /init runs.
    booted: bool,
    /// `TFO-VM-DONE` seen: every test ran.
    done: bool,
    /// The backend failed to load: the tracer's error line.
    unloadable: Option<String>,
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
            if let (Some(_), Some(rc)) = (w.next(), w.next()) {
                if rc != "0" {
                    let why = w.next().unwrap_or("").trim();
                    let why = why.strip_prefix("tfo-trace: error: ").unwrap_or(why);
                    let why = if why.is_empty() { format!("tfo-trace exited {rc}") } else { why.to_string() };
                    self.unloadable = Some(why);
                }
            }
        } else if let Some(rest) = l.strip_prefix("TFO-VM-TEST ") {
            let mut w = rest.split_whitespace();
            if let (Some(bin), Some(test)) = (w.next(), w.next()) {
                self.current = Some((bin.to_string(), test.to_string()));
                self.cur = TestRun::default();
            }
        } else if let Some(rest) = l.strip_prefix("TFO-VM-END ") {
            let w: Vec<&str> = rest.split_whitespace().collect();
            if let [bin, test, rc, secs, ..] = w[..] {
                let mut r = std::mem::take(&mut self.cur);
                r.exit = rc.parse().unwrap_or(-1);
                r.seconds = secs.parse().unwrap_or(0);
                self.results.insert((bin.to_string(), test.to_string()), r);
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
        } else if let Some((_, reason)) = skipped_test(l) {
            self.cur.skip_reason = Some(reason);
        } else if let Some(what) = retried_test(l) {
            self.cur.retried = Some(what.to_string());
        } else if l.contains("Kernel panic") && self.panic.is_none() {
            self.panic = Some(l.to_string());
        }
    }
}

/// The harness's `retried: NAME passed on its second run; ...` line
/// (tests/common/harness.rs): what follows the marker.
pub fn retried_test(line: &str) -> Option<&str> {
    line.strip_prefix("retried: ")
}

/// `test NAME   ... ignored (REASON)` (libtest-mimic pads the name): (name, reason).
pub fn skipped_test(line: &str) -> Option<(String, String)> {
    let rest = line.strip_prefix("test ")?;
    let (name, verdict) = rest.split_once(" ... ")?;
    let reason = verdict.strip_prefix("ignored (")?.strip_suffix(')')?;
    Some((name.trim().to_string(), reason.to_string()))
}

/// Per cell and test: the tally, and every problem in one line.
fn summarize(cells: &[Cell], boots: &[Boot]) -> Report {
    let mut report = Report::default();
    for (cell, boot) in cells.iter().zip(boots) {
        for (bin, tests) in &cell.runs {
            for t in tests {
                let what = format!("{} {}::{t}", cell.label(), bin.name);
                let Some(r) = boot.results.get(&(bin.name.clone(), t.clone())) else {
                    report.failed += 1;
                    let why = match (&boot.unloadable, &boot.end) {
                        (Some(e), _) => format!("backend does not load: {e}"),
                        (None, Some(end)) => end.clone(),
                        (None, None) => "no result marker".into(),
                    };
                    report.problems.push(format!("{what}: did not run ({why})"));
                    continue;
                };
                report.passed += r.passed;
                report.failed += r.failed;
                report.ignored += r.ignored;
                if let Some(reason) = &r.skip_reason {
                    report.skipped.push(format!("{what}: {reason}"));
                }
                if let Some(retried) = &r.retried {
                    report.retried.push(format!("{}: {retried}", cell.label()));
                }
                let ran_nothing = r.exit == 0 && r.passed + r.ignored == 0;
                if r.exit != 0 || ran_nothing {
                    // A test that died before its `test result:` line still counts once.
                    if r.failed == 0 {
                        report.failed += 1;
                    }
                    report.problems.push(format!("{what}: {}", verdict(r)));
                }
            }
        }
        if let Some(end) = &boot.end {
            if boot.results.len() == cell.test_count() {
                report.problems.push(end.clone());
                report.failed += 1;
            }
        }
    }
    print_result_table(cells, boots);
    report
}

/// `pass`, `FAIL(101)`, `timeout (300 s)` ...
fn verdict(r: &TestRun) -> String {
    match r.exit {
        0 if r.passed + r.ignored == 0 => "ran no test".into(),
        0 if r.passed == 0 => "skipped".into(),
        0 => "pass".into(),
        // busybox timeout: 124 past the limit, 143 when it had to SIGTERM.
        124 | 143 => format!("timeout ({} s)", r.seconds),
        rc => format!("FAIL({rc})"),
    }
}

fn print_result_table(cells: &[Cell], boots: &[Boot]) {
    println!();
    println!(
        "{:<7} {:<14} {:<18} {:<16} {:>6} {:>6} {:>7} {:>6}  PROBLEMS",
        "KERNEL", "CELL", "BINARY", "RESULT", "PASSED", "FAILED", "IGNORED", "TIME"
    );
    for (cell, boot) in cells.iter().zip(boots) {
        for (bin, tests) in &cell.runs {
            let runs: Vec<(&String, Option<&TestRun>)> =
                tests.iter().map(|t| (t, boot.results.get(&(bin.name.clone(), t.clone())))).collect();
            let ran: Vec<&TestRun> = runs.iter().filter_map(|(_, r)| *r).collect();
            let bad: Vec<String> = runs
                .iter()
                .filter_map(|(t, r)| match r {
                    None => Some(format!("{t}: not run")),
                    Some(r) if r.exit != 0 || r.passed + r.ignored == 0 => {
                        Some(format!("{t}: {}", verdict(r)))
                    }
                    Some(_) => None,
                })
                .collect();
            let result = if ran.is_empty() {
                "not run".to_string()
            } else if bad.is_empty() {
                "pass".to_string()
            } else {
                format!("FAIL ({} of {})", bad.len(), tests.len())
            };
            println!(
                "{:<7} {:<14} {:<18} {:<16} {:>6} {:>6} {:>7} {:>5}s  {}",
                cell.kernel,
                cell.name,
                bin.name,
                result,
                ran.iter().map(|r| r.passed).sum::<u64>(),
                ran.iter().map(|r| r.failed).sum::<u64>(),
                ran.iter().map(|r| r.ignored).sum::<u64>(),
                ran.iter().map(|r| r.seconds).sum::<u64>(),
                if ran.is_empty() {
                    boot.unloadable.clone().or(boot.end.clone()).unwrap_or_default()
                } else {
                    bad.join(", ")
                }
            );
        }
    }
    println!();
}

/// Where the VM time went: per cell, boot and tests; then the whole.
fn print_time_table(cells: &[Cell], boots: &[Boot], prepared_s: f64, total_s: f64, jobs: usize) {
    println!(
        "{:<7} {:<14} {:>6} {:>7} {:>7} {:>7}  SLOWEST TEST",
        "KERNEL", "CELL", "TESTS", "BOOT", "TESTS_S", "WHOLE"
    );
    let mut guest_s = 0.0;
    for (cell, boot) in cells.iter().zip(boots) {
        let tests_s: u64 = boot.results.values().map(|r| r.seconds).sum();
        let slowest = boot.results.iter().max_by_key(|(_, r)| r.seconds);
        guest_s += boot.total_s;
        println!(
            "{:<7} {:<14} {:>6} {:>6.1}s {:>6}s {:>6.1}s  {}",
            cell.kernel,
            cell.name,
            cell.test_count(),
            boot.boot_s.unwrap_or(0.0),
            tests_s,
            boot.total_s,
            slowest.map_or(String::new(), |((b, t), r)| format!("{b}::{t} {} s", r.seconds))
        );
    }
    // Per kernel: what one more kernel costs the test command.
    let mut per_kernel: BTreeMap<&str, (usize, f64)> = BTreeMap::new();
    for (cell, boot) in cells.iter().zip(boots) {
        let k = per_kernel.entry(cell.kernel.as_str()).or_default();
        k.0 += 1;
        k.1 += boot.total_s;
    }
    for (kernel, (n, s)) in &per_kernel {
        println!("vm: time: kernel {kernel}: {n} cell(s), {s:.1} s of guest time");
    }
    println!(
        "vm: time: {prepared_s:.1} s preparing (packages, kernels, test build, initramfs), \
         {guest_s:.1} s of guest time in {:.1} s with {jobs} guest(s) at once",
        total_s - prepared_s
    );
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn kvm_guests_get_the_host_cpu() {
        assert_eq!(qemu_machine(&X86_64, Accel::Tcg), ["-cpu", "max"]);
        assert!(qemu_machine(&X86_64, Accel::Kvm).is_empty());
        assert_eq!(qemu_machine(&ARM64, Accel::Kvm), ["-machine", "virt"]);
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
    fn console_results_skips_and_counts() {
        let mut c = Console::default();
        for l in [
            "TFO-VM-BACKEND fentry 1 tfo-trace: error: the fentry backend cannot load here: EACCES",
            "TFO-VM-TEST stalls stalls_lists_every_connection",
            "running 1 test",
            "test stalls_lists_every_connection ... FAILED",
            "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 9.1s",
            "TFO-VM-END stalls stalls_lists_every_connection 101 12",
            "TFO-VM-TEST lab tfo_ipv4",
            "test tfo_ipv4      ... ignored (not root; lab tests create network namespaces)",
            "test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 9 filtered out; finished in 0s",
            "TFO-VM-END lab tfo_ipv4 0 1",
            "TFO-VM-TEST lab hangs",
        ] {
            c.line(l);
        }
        let r = &c.results[&("stalls".into(), "stalls_lists_every_connection".into())];
        assert_eq!((r.exit, r.failed, r.seconds), (101, 1, 12));
        let r = &c.results[&("lab".into(), "tfo_ipv4".into())];
        assert_eq!((r.exit, r.passed, r.ignored), (0, 0, 1));
        assert_eq!(r.skip_reason.as_deref(), Some("not root; lab tests create network namespaces"));
        assert_eq!(verdict(r), "skipped");
        assert_eq!(c.unloadable.as_deref(), Some("the fentry backend cannot load here: EACCES"));
        assert_eq!(c.current, Some(("lab".into(), "hangs".into())), "the test a hung guest was running");
    }

    #[test]
    fn a_test_passed_on_its_second_run_is_listed() {
        let mut c = Console::default();
        for l in [
            "TFO-VM-TEST stalls a",
            "retried: a passed on its second run; its first run failed: 2 != 3",
            "test a ... ok",
            "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 9 filtered out; finished in 9s",
            "TFO-VM-END stalls a 0 9",
        ] {
            c.line(l);
        }
        let bin = TestBin { name: "stalls".into(), path: "/x/stalls".into() };
        let cell =
            Cell { kernel: "6.1".into(), name: "tracepoint".into(), runs: vec![(bin, vec!["a".into()])] };
        let boot = Boot { results: c.results, ..Boot::default() };
        let r = summarize(&[cell], &[boot]);
        assert_eq!((r.passed, r.failed), (1, 0));
        assert_eq!(r.retried.len(), 1, "{:?}", r.retried);
        assert!(
            r.retried[0].contains("a passed on its second run; its first run failed: 2 != 3"),
            "{:?}",
            r.retried
        );
    }

    #[test]
    fn user_arguments_split_into_selection_and_run_flags() {
        let args: Vec<String> =
            ["stalls_", "--exact", "--nocapture", "--skip", "slow"].map(String::from).to_vec();
        assert_eq!(list_args(&args), ["stalls_", "--exact", "--skip", "slow"]);
        assert_eq!(run_args(&args), ["--nocapture"]);
    }

    #[test]
    fn a_test_that_runs_nothing_or_times_out_is_a_problem() {
        let bin = TestBin { name: "stalls".into(), path: "/x/stalls".into() };
        let cell = Cell {
            kernel: "6.1".into(),
            name: "tracepoint".into(),
            runs: vec![(bin, vec!["a".into(), "b".into(), "c".into()])],
        };
        let mut boot = Boot::default();
        boot.results
            .insert(("stalls".into(), "a".into()), TestRun { exit: 0, passed: 1, ..TestRun::default() });
        boot.results
            .insert(("stalls".into(), "b".into()), TestRun { exit: 124, seconds: 300, ..TestRun::default() });
        let r = summarize(&[cell], &[boot]);
        assert_eq!((r.passed, r.failed), (1, 2));
        assert!(r.problems.iter().any(|p| p.contains("stalls::b: timeout (300 s)")), "{:?}", r.problems);
        assert!(r.problems.iter().any(|p| p.contains("stalls::c: did not run")), "{:?}", r.problems);
    }
}
