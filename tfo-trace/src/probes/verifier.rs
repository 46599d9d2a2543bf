//! What the kernel's verifier did with each loaded program (bpf_prog_info), for doctor and
//! `-v`: how close the programs come to the kernel's limit.
use std::os::fd::AsFd as _;

use aya::Ebpf;

use crate::backends;

/// How much work the kernel's verifier did on one loaded program.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Verified {
    pub program: String,
    /// Instructions the verifier walked, over every path it explored (bpf_prog_info's
    /// verified_insns): the figure the kernel refuses a program at, past
    /// [`VERIFIER_INSN_LIMIT`].
    pub instructions: u32,
}

/// BPF_COMPLEXITY_LIMIT_INSNS (include/linux/bpf.h), every kernel since 5.2.
pub const VERIFIER_INSN_LIMIT: u32 = 1_000_000;

/// What the verifier walked for `program`, where the kernel reports it (5.16+).
pub(super) fn verified(ebpf: &Ebpf, program: &str) -> Option<Verified> {
    let fd = ebpf.program(program)?.fd().ok()?;
    let instructions = prog_info(fd.as_fd())?.verified_insns;
    // A kernel before 5.16 leaves the field as we passed it: 0.
    (instructions > 0).then(|| Verified { program: program.to_string(), instructions })
}

/// The loaded program the verifier worked hardest on, where the kernel reports it.
pub(super) fn largest_verification(ebpf: &Ebpf, hooks: &[backends::Hook]) -> Option<Verified> {
    hooks.iter().filter_map(|h| verified(ebpf, h.program)).max_by_key(|v| v.instructions)
}

/// BPF_OBJ_GET_INFO_BY_FD for one program (aya keeps the counters it returns private).
pub(super) fn prog_info(fd: std::os::fd::BorrowedFd<'_>) -> Option<aya_obj::generated::bpf_prog_info> {
    use std::os::fd::AsRawFd as _;
    #[repr(C)]
    struct InfoAttr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    // SAFETY: bpf_prog_info is plain integers; all zero is a valid value.
    let mut info: aya_obj::generated::bpf_prog_info = unsafe { std::mem::zeroed() };
    let attr = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of_val(&info) as u32,
        info: &mut info as *mut _ as u64,
    };
    // SAFETY: the attr points at a live, writable bpf_prog_info of the size it states; the
    // kernel writes at most that many bytes.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &attr as *const InfoAttr,
            std::mem::size_of::<InfoAttr>(),
        )
    };
    (rc == 0).then_some(info)
}
