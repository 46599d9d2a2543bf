//! What differs between the CPU architectures the matrix boots (emulator, board, console,
//! Debian's architecture name, how its test executable is built), as data: one more
//! architecture is one more entry.
use clap::ValueEnum;

use crate::cross;

/// A CPU architecture the matrix boots.
#[derive(Debug)]
pub struct Arch {
    /// What `--arch` and the tables call it.
    pub(super) name: &'static str,
    /// Debian's name, as kernel package names spell it.
    pub(super) deb: &'static str,
    /// Debian's multiarch folder of its libraries (`/usr/lib/<multiarch>`).
    pub(super) multiarch: &'static str,
    /// The emulator, and the Debian package that has it.
    pub(super) qemu: &'static str,
    pub(super) qemu_package: &'static str,
    /// qemu arguments that pick the board and CPU under TCG.
    pub(super) machine: &'static [&'static str],
    /// The serial console the kernel writes to (`console=`).
    pub(super) console: &'static str,
    /// Where its test executables come from: None, the host's own `cargo test` build
    /// (the host's architecture); else the static musl cross build of that architecture
    /// (xtask/src/cross.rs), listed on the host under qemu-user.
    pub(super) cross: Option<cross::Arch>,
    /// The objcopy that strips its executables' debug info.
    pub(super) objcopy: &'static str,
    /// More host packages its runs need, with a file each installs: (package, path).
    pub(super) host_packages: &'static [(&'static str, &'static str)],
    /// How long its guests take for the same tests, in percent of an x86_64 guest's (TCG on
    /// this project's x86_64 machines): cells are started longest first.
    pub(super) test_time_percent: u32,
}

pub(super) const X86_64: Arch = Arch {
    name: "x86_64",
    deb: "amd64",
    multiarch: "x86_64-linux-gnu",
    qemu: "qemu-system-x86_64",
    qemu_package: "qemu-system-x86",
    // TCG: every CPU feature qemu can emulate (the kernels' BPF JIT uses what it finds).
    machine: &["-cpu", "max"],
    console: "ttyS0",
    cross: None,
    objcopy: "objcopy",
    host_packages: &[],
    test_time_percent: 100,
};

pub(super) const ARM64: Arch = Arch {
    name: "arm64",
    deb: "arm64",
    multiarch: "aarch64-linux-gnu",
    qemu: "qemu-system-aarch64",
    qemu_package: "qemu-system-arm",
    // `max` has pointer authentication, which the kernels use on every function return:
    // qemu's implementation-defined algorithm instead of QARMA5 takes a 6.1 kernel to /init
    // in 6.7 s of guest time instead of 16.3 s (TCG, this project's machine kind).
    machine: &["-machine", "virt", "-cpu", "max,pauth-impdef=on"],
    console: "ttyAMA0",
    cross: Some(cross::Arch::Aarch64),
    objcopy: "aarch64-linux-gnu-objcopy",
    host_packages: &[
        ("binutils-aarch64-linux-gnu", "/usr/bin/aarch64-linux-gnu-objcopy"),
        ("qemu-user-static", "/usr/bin/qemu-aarch64-static"),
    ],
    test_time_percent: 200,
};

pub(super) const ARCHES: &[&Arch] = &[&X86_64, &ARM64];

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum ArchChoice {
    #[value(name = "x86_64")]
    X86_64,
    Arm64,
}

impl ArchChoice {
    pub(super) fn arch(self) -> &'static Arch {
        let name = match self {
            ArchChoice::X86_64 => "x86_64",
            ArchChoice::Arm64 => "arm64",
        };
        ARCHES.iter().copied().find(|a| a.name == name).unwrap_or(&X86_64)
    }
}
