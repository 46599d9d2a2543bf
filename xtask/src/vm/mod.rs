//! `cargo xtask vm`: the kernel matrix. Boots Debian's 5.10, 6.1 and 6.12 cloud kernels
//! under qemu and runs tfo-trace's integration tests inside, once per tracer backend.
//!
//! The way there, one step per file (docs/vm.md says more):
//! 1. `packages.rs`: Debian packages on the host: qemu, a static busybox, cpio, xz, and the
//!    userspace the tests call (`ip`, `tc`, `nstat`, `nft`, `sysctl`, `tcpdump`).
//! 2. `kernels.rs`: the newest cloud kernel of each series ([`kernels::SERIES`]) that apt
//!    knows, downloaded once into `target/vm/debs/` and unpacked; `modules.rs`: the modules
//!    the lab needs (veth, sch_netem, nf_tables) with their dependencies from each module's
//!    `.modinfo`. What differs between CPU architectures (qemu, machine, console, the
//!    package's architecture) is data (`arch.rs`).
//! 3. `binaries.rs`: the integration test executable, built on the host, and the tests of
//!    its modules (`--list`). `env!("CARGO_BIN_EXE_tfo-trace")` is fixed at compile time, so
//!    it goes into the initramfs at its host path.
//! 4. `initramfs.rs`: one initramfs per kernel, with the host programs and their shared
//!    libraries; `guest.rs`: its busybox `/init`, which mounts the pseudo file systems,
//!    loads the modules, and runs the cell the kernel command line names (`tfo_cell=`).
//! 5. `cells.rs`: one qemu boot per cell, a cell being (kernel, backend) or (kernel, lab),
//!    `--jobs` at a time, by default as many as the host has cores for their vCPUs, so
//!    guests never compete for a core; `qemu.rs`: the boot itself. No fixed wall-clock limit
//!    for a whole kernel: every test runs as its own process under a limit of its own inside
//!    the guest (a hung test is killed and named, the next one runs); the host kills a guest
//!    that stays silent longer than one test's limit (a hung kernel).
//! 6. `console.rs`: the console parsed into one result per test; `summary.rs`: a kernel x
//!    backend x binary table and a time table; any failure fails the task.
//!
//! `args.rs`: the flags (`VmArgs`), checked first.
//! `boot_only.rs`: `--boot-only`, an architecture's kernels booted without tests.
//! `bench.rs`: the guest of `cargo xtask bench --vm` (crate::bench runs in it).
mod arch;
mod args;
pub(crate) mod bench;
mod binaries;
mod boot_only;
mod cells;
mod console;
mod guest;
mod initramfs;
mod kernels;
mod modules;
mod packages;
mod qemu;
mod summary;
mod userland;

use std::fs;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};

use crate::util::workspace_root;
use arch::{Arch, ArchChoice};
pub use args::VmArgs;
use binaries::{build_tests, list_args, list_tests, select_modules};
use cells::{plan, run_cells, schedule, Cell};
use initramfs::initramfs;
use kernels::{kernels, KernelChoice};
use packages::{foreign_arch, host_packages};
pub use qemu::Accel;
pub(crate) use qemu::{accel as accel_name, Resources};
use qemu::{boot, Boot};
pub use summary::Report;
use summary::{print_time_table, summarize};
use userland::Userland;

/// `cargo xtask vm`: errors when any cell failed, or its second runs broke the rule on them.
pub fn vm(args: &VmArgs) -> Result<()> {
    let mut report = if args.boot_only { boot_only::boot_only(args)? } else { matrix(args)? };
    for s in &report.skipped {
        println!("vm: skipped: {s}");
    }
    for s in &report.partial {
        println!("vm: partly skipped: {s}");
    }
    for r in &report.second_runs {
        println!("vm: second run: {r}");
    }
    report.problems.extend(crate::testlines::second_run_problems(&report.second_runs));
    if !report.problems.is_empty() {
        bail!("VM matrix: {} problem(s):\n  {}", report.problems.len(), report.problems.join("\n  "));
    }
    Ok(())
}

/// One architecture's share of a run: its kernels, backends and test modules.
struct Part {
    arch: &'static Arch,
    kernel: KernelChoice,
    backends: Vec<String>,
    /// Test modules by name; empty: the default VM selection (cells.rs).
    bins: Vec<String>,
}

/// `cargo xtask test`'s share of the matrix, sized from the cells' work (docs/vm.md has
/// the figures): 5.10 on x86_64 and on arm64 with every backend that loads there (the oldest
/// kernel, and the architecture where kprobe arguments come from another `pt_regs`, the
/// hooks' symbols and the struct layouts differ, fentry is refused); on 6.1 and 6.12 the
/// backend `auto` picks there (fentry) and the `lab` cell. The whole matrix, every backend
/// on every kernel of both architectures, is `cargo xtask vm` and `cargo xtask vm --arch
/// arm64`.
struct TestPart {
    arch: ArchChoice,
    kernel: KernelChoice,
    /// Empty: every backend.
    backends: &'static [&'static str],
    /// Empty: the default VM selection (binaries.rs).
    bins: &'static [&'static str],
}

const TEST_MATRIX: &[TestPart] = &[
    TestPart { arch: ArchChoice::X86_64, kernel: KernelChoice::V5_10, backends: &[], bins: &[] },
    TestPart { arch: ArchChoice::X86_64, kernel: KernelChoice::V6_1, backends: &["fentry"], bins: &[] },
    TestPart { arch: ArchChoice::X86_64, kernel: KernelChoice::V6_12, backends: &["fentry"], bins: &[] },
    // arm64 under TCG runs at half the speed: the modules that prove what differs there.
    TestPart {
        arch: ArchChoice::Arm64,
        kernel: KernelChoice::V5_10,
        backends: &[],
        bins: &["kernel_scenarios", "server_outcomes", "lab", "kernel_facts"],
    },
];

/// `cargo xtask vm`: builds, boots and runs every cell of `args`; prints the tables;
/// returns the tally.
pub fn matrix(args: &VmArgs) -> Result<Report> {
    args.check()?;
    let part = Part {
        arch: args.arch.arch(),
        kernel: args.kernel,
        backends: args.backend.clone(),
        bins: args.bins.clone(),
    };
    run_parts(&[part], args)
}

/// `cargo xtask test`'s VM share: [`TEST_MATRIX`], in one schedule.
pub fn test_matrix() -> Result<Report> {
    let args = VmArgs::default();
    let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    let parts: Vec<Part> = TEST_MATRIX
        .iter()
        .map(|t| Part {
            arch: t.arch.arch(),
            kernel: t.kernel,
            backends: if t.backends.is_empty() { args.backend.clone() } else { strings(t.backends) },
            bins: strings(t.bins),
        })
        .collect();
    run_parts(&parts, &args)
}

/// Prepares every part (packages, kernels, test binaries, initramfs), then boots all their
/// cells in one schedule, so that guests of every architecture share the cores.
fn run_parts(parts: &[Part], args: &VmArgs) -> Result<Report> {
    let start = Instant::now();
    let root = workspace_root();
    let work = root.join("target/vm");
    fs::create_dir_all(work.join("debs")).context("creating target/vm/debs")?;
    let (mut all_kernels, mut cells, mut initrds) = (Vec::new(), Vec::new(), Vec::new());
    for part in parts {
        let arch = part.arch;
        host_packages(arch)?;
        foreign_arch(arch)?;
        let kernels = kernels(part.kernel, arch, &work)?;
        for k in &kernels {
            println!("vm: kernel {} is {} ({}, {})", k.short, k.release, k.package, k.arch.name);
        }
        let userland = Userland::for_arch(arch, &work)?;
        let build = build_tests(&root, arch)?;
        let every = list_tests(&build, &[])?;
        let selected = if list_args(&args.filter).is_empty() {
            every.clone()
        } else {
            list_tests(&build, &args.filter)?
        };
        let listed = select_modules(&build.integration, &every, &selected, &part.bins)?;
        let mine = plan(&kernels, &listed, &part.backends);
        for k in &kernels {
            let of_k: Vec<&Cell> = mine.iter().filter(|c| c.kernel == k.short).collect();
            initrds.push(initramfs(&work, k, &build, &of_k, &userland, &args.filter, args.test_limit_s)?);
        }
        cells.extend(mine);
        all_kernels.extend(kernels);
    }
    ensure!(!cells.is_empty(), "no test matches {:?}", args.filter);
    schedule(&mut cells, &all_kernels);
    let kernels = all_kernels;
    let prepared_s = start.elapsed().as_secs_f64();
    let jobs = args.jobs().min(cells.len());
    println!(
        "vm: {} cell(s) on {} kernel(s), {jobs} guest(s) at once, {} vCPU(s) each, {} s per test at most",
        cells.len(),
        kernels.len(),
        args.smp,
        args.test_limit_s
    );
    let boots = run_cells(&cells, jobs, |c| {
        let k = kernels.iter().position(|k| k.short == c.kernel).expect("a planned kernel");
        boot(&kernels[k], c, &initrds[k], &args.resources(), args.test_limit_s)
            .unwrap_or_else(|e| Boot { end: Some(format!("qemu did not run: {e:#}")), ..Boot::default() })
    });
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
