//! Kfunc calls for a loader that resolves none (aya 0.14): the programs call a placeholder
//! helper number (`tfo_trace_common::RDONLY_CAST_PLACEHOLDER`), and [`rewrite_calls`]
//! turns each such call in the object's code into a call of the kernel function by its
//! BTF id, before aya reads the object. aya passes kfunc calls through untouched.
use anyhow::{ensure, Context as _, Result};

const SHT_NOBITS: u32 = 8;
const SHF_EXECINSTR: u64 = 0x4;
/// BPF_JMP | BPF_CALL.
const CALL: u8 = 0x85;
/// src_reg of a kfunc call (include/uapi/linux/bpf.h); off 0 means vmlinux's BTF.
const BPF_PSEUDO_KFUNC_CALL: u8 = 2;

/// An ELF object in 8-byte-aligned memory, as the ELF reader under aya needs it.
pub struct AlignedObject {
    words: Vec<u64>,
    len: usize,
}

impl AlignedObject {
    fn new(bytes: &[u8]) -> Self {
        let words = bytes
            .chunks(8)
            .map(|c| {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                u64::from_ne_bytes(w)
            })
            .collect();
        AlignedObject { words, len: bytes.len() }
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes of the words' own memory, which lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}

/// The object with every call of helper number `placeholder` made a call of the kfunc
/// `kfunc_id`, and how many calls were rewritten.
pub fn rewrite_calls(object: &[u8], placeholder: u32, kfunc_id: u32) -> Result<(AlignedObject, usize)> {
    let mut bytes = object.to_vec();
    let rewritten = rewrite_in_place(&mut bytes, placeholder, kfunc_id).context("rewriting kfunc calls")?;
    Ok((AlignedObject::new(&bytes), rewritten))
}

fn rewrite_in_place(elf: &mut [u8], placeholder: u32, kfunc_id: u32) -> Result<usize> {
    ensure!(
        elf.get(..6) == Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]),
        "not a 64-bit little-endian ELF object"
    );
    let shoff = read_u64(elf, 0x28)? as usize;
    let shentsize = read_u16(elf, 0x3a)? as usize;
    let shnum = read_u16(elf, 0x3c)? as usize;
    let mut rewritten = 0;
    for i in 0..shnum {
        let h = shoff + i * shentsize;
        let (kind, flags) = (read_u32(elf, h + 4)?, read_u64(elf, h + 8)?);
        if kind == SHT_NOBITS || flags & SHF_EXECINSTR == 0 {
            continue;
        }
        let (off, size) = (read_u64(elf, h + 24)? as usize, read_u64(elf, h + 32)? as usize);
        let code = elf.get_mut(off..off + size).context("code section out of bounds")?;
        // 8-byte instructions; the second half of a 16-byte ld_imm64 has opcode 0, so it
        // never looks like a call.
        for insn in code.chunks_exact_mut(8) {
            let call_of_placeholder = insn[0] == CALL
                && insn[1] == 0
                && insn[2..4] == [0, 0]
                && insn[4..8] == placeholder.to_le_bytes();
            if call_of_placeholder {
                insn[1] = BPF_PSEUDO_KFUNC_CALL << 4; // src_reg in the high nibble
                insn[4..8].copy_from_slice(&kfunc_id.to_le_bytes());
                rewritten += 1;
            }
        }
    }
    Ok(rewritten)
}

fn field<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N]> {
    let s = b.get(at..at + N).context("ELF header out of bounds")?;
    Ok(s.try_into().expect("slice of N bytes"))
}

fn read_u16(b: &[u8], at: usize) -> Result<u16> {
    Ok(u16::from_le_bytes(field(b, at)?))
}

fn read_u32(b: &[u8], at: usize) -> Result<u32> {
    Ok(u32::from_le_bytes(field(b, at)?))
}

fn read_u64(b: &[u8], at: usize) -> Result<u64> {
    Ok(u64::from_le_bytes(field(b, at)?))
}

#[cfg(test)]
mod tests {
    use tfo_trace_common::RDONLY_CAST_PLACEHOLDER;

    use super::*;

    /// Calls of `number` with this src_reg (0: a helper, 2: a kfunc), at any 8-byte
    /// boundary of the file (the code sections are 8-byte aligned in it).
    fn calls(object: &[u8], number: u32, src_reg: u8) -> usize {
        let call = |i: &&[u8]| {
            i[0] == CALL && i[1] == src_reg << 4 && i[2..4] == [0, 0] && i[4..8] == number.to_le_bytes()
        };
        object.chunks_exact(8).filter(call).count()
    }

    #[test]
    fn rewrites_every_placeholder_call_of_the_embedded_object_and_nothing_else() {
        let object = super::super::EBPF_OBJECT;
        let placeholders = calls(object, RDONLY_CAST_PLACEHOLDER, 0);
        assert!(placeholders > 0, "the programs call the placeholder (kernel::Direct::tcp_sock)");
        let (patched, rewritten) = rewrite_calls(object, RDONLY_CAST_PLACEHOLDER, 4242).unwrap();
        let patched = patched.bytes();
        assert_eq!(rewritten, placeholders);
        assert_eq!(patched.len(), object.len());
        assert_eq!(calls(patched, RDONLY_CAST_PLACEHOLDER, 0), 0, "no placeholder left");
        assert_eq!(calls(patched, 4242, BPF_PSEUDO_KFUNC_CALL), rewritten);
        let changed = object.iter().zip(patched).filter(|(a, b)| a != b).count();
        assert!(changed <= rewritten * 5, "only the calls' src_reg and imm bytes change: {changed}");
        assert_eq!(patched.as_ptr() as usize % 8, 0, "8-byte aligned for the ELF reader");
    }

    #[test]
    fn refuses_what_is_not_an_elf_object() {
        let err = rewrite_calls(b"not an object at all", 1, 2).err().unwrap();
        assert!(format!("{err:#}").contains("not a 64-bit little-endian ELF object"), "{err:#}");
        let mut truncated = super::super::EBPF_OBJECT[..64].to_vec();
        assert!(rewrite_in_place(&mut truncated, 1, 2).is_err());
    }
}
