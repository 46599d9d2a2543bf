use which::which;

/// Rebuild the eBPF object when bpf-linker changes (a new LLVM means new codegen).
fn main() {
    let bpf_linker = which("bpf-linker").unwrap();
    println!("cargo:rerun-if-changed={}", bpf_linker.to_str().unwrap());
}
