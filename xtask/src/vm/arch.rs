//! What differs between the CPU architectures the matrix boots (emulator, board, console,
//! Debian's architecture name), as data: one more architecture is one more entry.
use clap::ValueEnum;

/// A CPU architecture the matrix boots: everything that differs between them, as data,
/// so that one more is one more entry.
#[derive(Debug)]
pub struct Arch {
    /// What `--arch` and the tables call it.
    pub(super) name: &'static str,
    /// Debian's name, as kernel package names spell it.
    pub(super) deb: &'static str,
    /// The emulator, and the Debian package that has it.
    pub(super) qemu: &'static str,
    pub(super) qemu_package: &'static str,
    /// qemu arguments that pick the board and CPU under TCG.
    pub(super) machine: &'static [&'static str],
    /// The serial console the kernel writes to (`console=`).
    pub(super) console: &'static str,
}

pub(super) const X86_64: Arch = Arch {
    name: "x86_64",
    deb: "amd64",
    qemu: "qemu-system-x86_64",
    qemu_package: "qemu-system-x86",
    // TCG: every CPU feature qemu can emulate (the kernels' BPF JIT uses what it finds).
    machine: &["-cpu", "max"],
    console: "ttyS0",
};

pub(super) const ARM64: Arch = Arch {
    name: "arm64",
    deb: "arm64",
    qemu: "qemu-system-aarch64",
    qemu_package: "qemu-system-arm",
    machine: &["-machine", "virt", "-cpu", "max"],
    console: "ttyAMA0",
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
