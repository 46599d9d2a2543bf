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
use binaries::{build_tests, list_args, list_tests, select_modules, Build};
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
    /// Tests (`module::test`, or a prefix of it) this part's cells leave out.
    leave_out: &'static [&'static str],
}

/// `cargo xtask test`'s share of the matrix, sized from the cells' work (docs/vm.md has
/// the figures and the table): every backend on 5.10 x86_64 (the oldest kernel), kprobe
/// (what `auto` picks) with tracepoint and fentry's refusal on 5.10 arm64, fentry on 6.1
/// and 6.12, and each kernel's `lab` cell. Each backend's cell runs what its own code
/// decides; the whole matrix, every module on every backend of every kernel of both
/// architectures, is `cargo xtask vm` and `cargo xtask vm --arch arm64`.
struct TestPart {
    arch: ArchChoice,
    kernel: KernelChoice,
    /// Empty: every backend.
    backends: &'static [&'static str],
    /// Empty: the default VM selection (binaries.rs).
    bins: &'static [&'static str],
    /// Tests (`module::test`, or a prefix) left out of this part's cells: what another
    /// cell of the matrix proves for them (docs/vm.md says which).
    leave_out: &'static [&'static str],
}

/// The scenario modules that compare a backend's own events with the kernel's counters;
/// the views over those events (`stalls`, `report`) and `server_speaks_first` are left to
/// the cells named below.
const SCENARIOS: &[&str] = &["kernel_scenarios", "server_outcomes", "refusal_causes", "plain_cost"];
/// The blackhole tests: a SYN timeout or several each, 8-20 s of idle wait in a guest.
const BLACKHOLE: &[&str] = &["server_outcomes::blackhole_"];

const TEST_MATRIX: &[TestPart] = &[
    // The oldest kernel, every backend. tracepoint: every module (its own view of the
    // outcomes, from the state hook and the namespaces' counters).
    TestPart {
        arch: ArchChoice::X86_64,
        kernel: KernelChoice::V5_10,
        backends: &["tracepoint"],
        bins: &[],
        leave_out: &[],
    },
    // fentry: its hooks against the kernel; its views and blackhole tests in 6.12's cell.
    TestPart {
        arch: ArchChoice::X86_64,
        kernel: KernelChoice::V5_10,
        backends: &["fentry"],
        bins: SCENARIOS,
        leave_out: BLACKHOLE,
    },
    // kprobe: fentry's functions through kprobes (a kretprobe's arguments kept from the
    // entry): its own blackhole hook and server_speaks_first's child made from a cookie.
    TestPart {
        arch: ArchChoice::X86_64,
        kernel: KernelChoice::V5_10,
        backends: &["kprobe"],
        bins: &["kernel_scenarios", "server_outcomes", "refusal_causes", "server_speaks_first", "plain_cost"],
        leave_out: &[],
    },
    // raw-tracepoint: tracepoint's handlers, every member read through
    // bpf_probe_read_kernel: the scenarios that read them, client and server.
    TestPart {
        arch: ArchChoice::X86_64,
        kernel: KernelChoice::V5_10,
        backends: &["raw-tracepoint"],
        bins: &["kernel_scenarios", "plain_cost"],
        leave_out: &[],
    },
    // 6.1: fentry (what `auto` picks) on Debian 12's kernel, and its lab.
    TestPart {
        arch: ArchChoice::X86_64,
        kernel: KernelChoice::V6_1,
        backends: &["fentry"],
        bins: &["kernel_scenarios", "plain_cost", "lab", "kernel_facts", "names"],
        leave_out: &[],
    },
    // 6.12: fentry with every module.
    TestPart {
        arch: ArchChoice::X86_64,
        kernel: KernelChoice::V6_12,
        backends: &["fentry"],
        bins: &[],
        leave_out: &[],
    },
    // arm64: kprobe (what `auto` picks there: kprobe arguments from arm64's pt_regs, its
    // symbols and struct layouts), fentry's refusal, and tracepoint's scenarios.
    TestPart {
        arch: ArchChoice::Arm64,
        kernel: KernelChoice::V5_10,
        backends: &["kprobe", "fentry"],
        bins: &["kernel_scenarios", "server_outcomes", "lab", "kernel_facts"],
        leave_out: &[],
    },
    TestPart {
        arch: ArchChoice::Arm64,
        kernel: KernelChoice::V5_10,
        backends: &["tracepoint"],
        bins: &["kernel_scenarios"],
        leave_out: &[],
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
        leave_out: &[],
    };
    run_parts(&[part], args)
}

/// `cargo xtask test`'s VM share: [`TEST_MATRIX`], in one schedule.
pub fn test_matrix() -> Result<Report> {
    let args = VmArgs::default();
    run_parts(&test_parts(&args), &args)
}

/// [`TEST_MATRIX`] as parts, an empty backend list meaning `args`' backends.
fn test_parts(args: &VmArgs) -> Vec<Part> {
    let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    TEST_MATRIX
        .iter()
        .map(|t| Part {
            arch: t.arch.arch(),
            kernel: t.kernel,
            backends: if t.backends.is_empty() { args.backend.clone() } else { strings(t.backends) },
            bins: strings(t.bins),
            leave_out: t.leave_out,
        })
        .collect()
}

/// What an architecture's cells share, made once per run: its test build, its userland,
/// and the tests the build lists (all, and those the filter selects).
struct Prepared {
    arch: &'static str,
    build: Build,
    userland: Userland,
    every: Vec<String>,
    selected: Vec<String>,
}

/// Adds the cells of `part` on `kernels` to `cells`: the modules it names of the tests
/// `selected`, less those it leaves out. A cell another part planned already is an error.
fn plan_part(
    part: &Part,
    kernels: &[kernels::Kernel],
    integration: &std::path::Path,
    every: &[String],
    selected: &[String],
    cells: &mut Vec<Cell>,
) -> Result<()> {
    let mut listed = select_modules(integration, every, selected, &part.bins)?;
    for (module, tests) in &mut listed {
        tests.retain(|t| !part.leave_out.iter().any(|out| format!("{}::{t}", module.name).starts_with(out)));
    }
    for cell in plan(kernels, &listed, &part.backends) {
        ensure!(
            !cells.iter().any(|c| c.kernel == cell.kernel && c.name == cell.name),
            "two parts of the matrix plan the cell {}",
            cell.label()
        );
        cells.push(cell);
    }
    Ok(())
}

/// Prepares every part (packages, kernels, test binaries, initramfs), then boots all their
/// cells in one schedule, so that guests of every architecture share the cores.
fn run_parts(parts: &[Part], args: &VmArgs) -> Result<Report> {
    let start = Instant::now();
    let root = workspace_root();
    let work = root.join("target/vm");
    fs::create_dir_all(work.join("debs")).context("creating target/vm/debs")?;
    // Several parts may name one kernel (one backend with fewer modules than the others):
    // its cells share one initramfs, made once they are all planned.
    let (mut all_kernels, mut cells) = (Vec::<kernels::Kernel>::new(), Vec::new());
    let mut prepared: Vec<Prepared> = Vec::new();
    for part in parts {
        let arch = part.arch;
        let new_arch = !prepared.iter().any(|p| p.arch == arch.name);
        if new_arch {
            host_packages(arch)?;
            foreign_arch(arch)?;
        }
        let kernels = kernels(part.kernel, arch, &work)?;
        for k in kernels.iter().filter(|k| !all_kernels.iter().any(|known| known.short == k.short)) {
            println!("vm: kernel {} is {} ({}, {})", k.short, k.release, k.package, k.arch.name);
        }
        if new_arch {
            let userland = Userland::for_arch(arch, &work)?;
            let build = build_tests(&root, arch)?;
            let every = list_tests(&build, &[])?;
            let selected = if list_args(&args.filter).is_empty() {
                every.clone()
            } else {
                list_tests(&build, &args.filter)?
            };
            prepared.push(Prepared { arch: arch.name, build, userland, every, selected });
        }
        let Prepared { build, every, selected, .. } =
            prepared.iter().find(|p| p.arch == arch.name).expect("prepared above");
        plan_part(part, &kernels, &build.integration, every, selected, &mut cells)?;
        for k in kernels {
            if !all_kernels.iter().any(|known| known.short == k.short) {
                all_kernels.push(k);
            }
        }
    }
    let mut initrds = Vec::new();
    for k in &all_kernels {
        let Prepared { build, userland, .. } =
            prepared.iter().find(|p| p.arch == k.arch.name).expect("prepared with its part");
        let of_k: Vec<&Cell> = cells.iter().filter(|c| c.kernel == k.short).collect();
        initrds.push(initramfs(&work, k, build, &of_k, userland, &args.filter, args.test_limit_s)?);
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

#[cfg(test)]
mod tests {
    use super::*;
    use binaries::{VM_ONCE, VM_PER_BACKEND};

    fn kernel(series: &'static kernels::Series, arch: &'static Arch) -> kernels::Kernel {
        kernels::Kernel {
            short: kernels::short_name(series, arch),
            series: series.short,
            arch,
            package: String::new(),
            release: String::new(),
            vmlinuz: Default::default(),
            modules: Default::default(),
        }
    }

    /// Every part of `cargo xtask test`'s matrix planned as run_parts does, with two tests
    /// per module (one of them a blackhole test): one cell per kernel and backend, one lab
    /// cell per kernel, and the blackhole tests only where docs/vm.md says.
    #[test]
    fn the_test_matrix_plans_each_cell_once() {
        let every: Vec<String> = VM_PER_BACKEND
            .iter()
            .chain(VM_ONCE)
            .flat_map(|m| [format!("{m}::blackhole_a"), format!("{m}::plain_b")])
            .collect();
        let mut cells = Vec::new();
        for part in test_parts(&VmArgs::default()) {
            let kernels: Vec<kernels::Kernel> =
                part.kernel.series().iter().map(|s| kernel(s, part.arch)).collect();
            plan_part(&part, &kernels, std::path::Path::new("integration"), &every, &every, &mut cells)
                .unwrap();
        }
        let labels: Vec<String> = cells.iter().map(Cell::label).collect();
        let expected = [
            "5.10 tracepoint",
            "5.10 lab",
            "5.10 fentry",
            "5.10 kprobe",
            "5.10 raw-tracepoint",
            "6.1 fentry",
            "6.1 lab",
            "6.12 fentry",
            "6.12 lab",
            "5.10-arm64 kprobe",
            "5.10-arm64 fentry",
            "5.10-arm64 lab",
            "5.10-arm64 tracepoint",
        ];
        assert_eq!(labels, expected);
        let runs = |label: &str, module: &str| -> Vec<String> {
            let cell = cells.iter().find(|c| c.label() == label).unwrap();
            cell.runs.iter().filter(|(m, _)| m.name == module).flat_map(|(_, t)| t.clone()).collect()
        };
        let both = ["blackhole_a", "plain_b"];
        for with in ["5.10 tracepoint", "5.10 kprobe", "6.12 fentry", "5.10-arm64 kprobe"] {
            assert_eq!(runs(with, "server_outcomes"), both, "{with}");
        }
        assert_eq!(runs("5.10 fentry", "server_outcomes"), ["plain_b"]);
        // Every backend's cells run kernel_scenarios whole.
        for cell in cells.iter().filter(|c| c.backend().is_some() && c.refused.is_none()) {
            assert_eq!(runs(&cell.label(), "kernel_scenarios"), both, "{}", cell.label());
        }
        // The views where the events differ; the fentry refusal checked, not run.
        for view in ["stalls", "report"] {
            let with: Vec<String> =
                cells.iter().filter(|c| runs(&c.label(), view).len() == 2).map(Cell::label).collect();
            assert_eq!(with, ["5.10 tracepoint", "6.12 fentry"], "{view}");
        }
        assert!(cells.iter().find(|c| c.label() == "5.10-arm64 fentry").unwrap().refused.is_some());
    }
}
