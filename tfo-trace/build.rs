//! Builds the eBPF programs (tfo-trace-ebpf) for the bpf target with the nightly
//! toolchain and bpf-linker (`cargo xtask setup` installs both), and puts the object in
//! OUT_DIR, where probes/mod.rs embeds it: one binary is all a host needs.
fn main() -> anyhow::Result<()> {
    let root_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tfo-trace-ebpf");
    let ebpf = aya_build::Package { name: "tfo-trace-ebpf", root_dir, ..Default::default() };
    aya_build::build_ebpf([ebpf], aya_build::Toolchain::default())
}
