//! The socket-to-`struct tcp_sock` cast of the typed programs (`kernel::Direct::tcp_sock`
//! in the eBPF crate), chosen for this kernel and written into the object before load.
//!
//! The object carries a placeholder call (`TCP_SOCK_CAST_CALL`), since aya has no kfunc
//! relocations. It becomes the kfunc bpf_rdonly_cast (6.2+), which the verifier replaces
//! with a register move, or, on older kernels, the helper bpf_skc_to_tcp_sock: a real call,
//! paid on every state change a handler looks at, plain connections included.
use anyhow::{bail, Context as _, Result};
use object::{Object as _, ObjectSection as _, SectionKind};
use tfo_trace_common::TCP_SOCK_CAST_CALL;

use super::btf::Btf;

/// BPF_FUNC_skc_to_tcp_sock (include/uapi/linux/bpf.h), 5.9+.
const HELPER_SKC_TO_TCP_SOCK: i32 = 137;
/// BPF_JMP | BPF_CALL.
const OP_CALL: u8 = 0x85;
/// src_reg of a call to a kernel function; its imm is the function's BTF id (in vmlinux:
/// insn.off 0).
const PSEUDO_KFUNC_CALL: u8 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TcpSockCast {
    /// bpf_rdonly_cast: `func` its id in the kernel's BTF, `tcp_sock` that of the struct.
    Kfunc {
        func: u32,
        tcp_sock: u32,
    },
    Helper,
}

impl TcpSockCast {
    /// The cheapest cast the kernel's own BTF (the one the verifier checks against) offers.
    pub(super) fn for_kernel(btf: &Btf) -> TcpSockCast {
        match (btf.func_id("bpf_rdonly_cast"), btf.struct_id("tcp_sock")) {
            (Some(func), Some(tcp_sock)) => TcpSockCast::Kfunc { func, tcp_sock },
            _ => TcpSockCast::Helper,
        }
    }

    /// What the programs' TCP_SOCK_BTF_ID global holds (the helper ignores it).
    pub(super) fn tcp_sock_btf_id(self) -> u32 {
        match self {
            TcpSockCast::Kfunc { tcp_sock, .. } => tcp_sock,
            TcpSockCast::Helper => 0,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            TcpSockCast::Kfunc { .. } => "kfunc bpf_rdonly_cast",
            TcpSockCast::Helper => "helper bpf_skc_to_tcp_sock",
        }
    }
}

/// An ELF object in 8-byte aligned memory, as aya's parser needs it.
pub(super) struct AlignedObject {
    words: Vec<u64>,
    len: usize,
}

impl AlignedObject {
    pub(super) fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialized bytes; u8 has no alignment.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `self` is borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

/// A copy of `object` with every placeholder call rewritten to `cast`; how many there were.
pub(super) fn patch(object: &[u8], cast: TcpSockCast) -> Result<(AlignedObject, usize)> {
    let mut out = AlignedObject { words: vec![0; object.len().div_ceil(8)], len: object.len() };
    out.bytes_mut().copy_from_slice(object);
    let code_ranges: Vec<(usize, usize)> = {
        let file = object::File::parse(object).context("parsing the eBPF object")?;
        file.sections()
            .filter(|s| s.kind() == SectionKind::Text)
            .filter_map(|s| s.file_range())
            .map(|(start, len)| (start as usize, len as usize))
            .collect()
    };
    let mut patched = 0;
    for (start, len) in code_ranges {
        let Some(code) = out.bytes_mut().get_mut(start..start + len) else {
            bail!("a code section of the eBPF object lies outside it");
        };
        for insn in code.chunks_exact_mut(8) {
            if call_of(insn) != Some((0, TCP_SOCK_CAST_CALL)) {
                continue;
            }
            let (src_reg, imm) = match cast {
                TcpSockCast::Kfunc { func, .. } => (PSEUDO_KFUNC_CALL, func as i32),
                TcpSockCast::Helper => (0, HELPER_SKC_TO_TCP_SOCK),
            };
            insn[1] = (src_reg << 4) | (insn[1] & 0x0f);
            insn[2..4].copy_from_slice(&0i16.to_le_bytes()); // off 0: vmlinux's BTF
            insn[4..8].copy_from_slice(&imm.to_le_bytes());
            patched += 1;
        }
    }
    Ok((out, patched))
}

/// A call instruction's src_reg (0: a helper) and imm (the helper's number, or the
/// function's BTF id); None for any other instruction.
fn call_of(insn: &[u8]) -> Option<(u8, i32)> {
    (insn[0] == OP_CALL).then(|| (insn[1] >> 4, i32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(object: &[u8], src_reg: u8, imm: i32) -> usize {
        let file = object::File::parse(object).unwrap();
        file.sections()
            .filter(|s| s.kind() == SectionKind::Text)
            .map(|s| s.data().unwrap().chunks_exact(8).filter(|i| call_of(i) == Some((src_reg, imm))).count())
            .sum()
    }

    #[test]
    fn every_placeholder_becomes_the_kfunc_or_the_helper() {
        let object = super::super::EBPF_OBJECT;
        let placeholders = calls(object, 0, TCP_SOCK_CAST_CALL);
        assert!(placeholders > 0, "the embedded object has no cast placeholder");
        let (kfunc, n) = patch(object, TcpSockCast::Kfunc { func: 65425, tcp_sock: 4242 }).unwrap();
        assert_eq!(n, placeholders);
        assert_eq!(calls(kfunc.bytes(), 0, TCP_SOCK_CAST_CALL), 0);
        assert_eq!(calls(kfunc.bytes(), PSEUDO_KFUNC_CALL, 65425), placeholders);
        let helpers_before = calls(object, 0, HELPER_SKC_TO_TCP_SOCK);
        let (helper, n) = patch(object, TcpSockCast::Helper).unwrap();
        assert_eq!(n, placeholders);
        assert_eq!(calls(helper.bytes(), 0, HELPER_SKC_TO_TCP_SOCK), helpers_before + placeholders);
        assert_eq!(helper.bytes().len(), object.len());
        assert_eq!(helper.bytes().as_ptr() as usize % 8, 0);
    }

    #[test]
    fn a_btf_without_the_kfunc_falls_back_to_the_helper() {
        let btf = Btf::parse(&super::super::btf::tests::sample()).unwrap();
        assert_eq!(TcpSockCast::for_kernel(&btf), TcpSockCast::Helper);
        assert_eq!(TcpSockCast::Helper.tcp_sock_btf_id(), 0);
    }
}
