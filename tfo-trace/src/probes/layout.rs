//! Builds the [`KernelLayout`] the eBPF programs read kernel structs with, from the
//! running kernel's BTF. This is our stand-in for CO-RE relocations, which Rust eBPF
//! cannot emit: one offset table per boot, never one generated for a single kernel. Which
//! members, and in which shape, is `tfo_trace_common::kernel_structs!`: the table the
//! programs' accessors are made from too.
use anyhow::{anyhow, bail, Result};
use tfo_trace_common::{Field, FieldSpec, KernelLayout, Shape};

use super::btf::{Btf, MemberLocation};

fn to_field(loc: MemberLocation) -> Field {
    let off = loc.bit_offset / 8;
    if loc.bitfield_size == 0 {
        // A whole member is loaded at its own size; larger ones (an IPv6 address, an
        // array) are read in 8-byte pieces by the programs, which know them.
        let size = if matches!(loc.byte_size, 1 | 2 | 4) { loc.byte_size } else { 8 };
        return Field { off, shift: 0, bits: 0, present: 1, size: size as u8 };
    }
    // The smallest load that covers the bitfield: the verifier lets a BTF-typed program
    // load a bitfield only by a load that starts at its first byte and covers it whole.
    let shift = loc.bit_offset % 8;
    let end = shift + loc.bitfield_size;
    let size = [1u32, 2, 4, 8].into_iter().find(|s| end <= s * 8).unwrap_or(8);
    Field { off, shift: shift as u8, bits: loc.bitfield_size as u8, present: 1, size: size as u8 }
}

fn located(btf: &Btf, strukt: &str, path: &[&str]) -> Result<MemberLocation> {
    btf.member_path(strukt, path).ok_or_else(|| {
        anyhow!(
            "this kernel's BTF has no `struct {strukt}` member `{}`: unsupported kernel layout",
            path.join(".")
        )
    })
}

/// Whether a member found in BTF has the shape the programs read it in.
fn fits(shape: Shape, loc: MemberLocation) -> bool {
    match shape {
        Shape::Bytes(n) => loc.bitfield_size == 0 && loc.byte_size == n,
        Shape::OneBit => {
            let f = to_field(loc);
            f.bits == 1 && f.size == 1
        }
        Shape::Any => true,
    }
}

fn describe(shape: Shape) -> String {
    match shape {
        Shape::Bytes(n) => format!("{n} bytes"),
        Shape::OneBit => "one bit".into(),
        Shape::Any => "any integer".into(),
    }
}

/// A member every supported kernel has in the shape `shape` says the programs read: a
/// kernel where it is missing or shaped otherwise is refused by name rather than misread.
fn shaped(btf: &Btf, strukt: &str, path: &[&str], shape: Shape) -> Result<Field> {
    let loc = located(btf, strukt, path)?;
    if !fits(shape, loc) {
        bail!(
            "this kernel's `struct {strukt}` member `{}` is {}, where tfo-trace reads {}: \
             unsupported kernel layout",
            path.join("."),
            describe_location(loc),
            describe(shape)
        );
    }
    Ok(to_field(loc))
}

/// A member some kernels lack, given only in the shape the programs read (absent, and the
/// programs' fallback taken, where it is shaped otherwise).
fn optional_shaped(btf: &Btf, strukt: &str, path: &[&str], shape: Shape) -> Field {
    btf.member_path(strukt, path).filter(|&loc| fits(shape, loc)).map(to_field).unwrap_or_default()
}

fn describe_location(loc: MemberLocation) -> String {
    if loc.bitfield_size != 0 {
        format!("a {}-bit bitfield", loc.bitfield_size)
    } else {
        format!("{} bytes", loc.byte_size)
    }
}

/// One member, as its spec in `tfo_trace_common::kernel_structs!` says: required ones are
/// refused by name when missing or shaped otherwise; optional ones are absent then.
fn field(btf: &Btf, spec: &FieldSpec) -> Result<Field> {
    if spec.required {
        shaped(btf, spec.strukt, spec.path, spec.shape)
    } else {
        Ok(optional_shaped(btf, spec.strukt, spec.path, spec.shape))
    }
}

/// Every member the programs read, found in this kernel's BTF.
pub fn from_btf(btf: &Btf) -> Result<KernelLayout> {
    KernelLayout::try_from_specs(|spec| field(btf, spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(bit_offset: u32, bitfield_size: u32, byte_size: u32) -> MemberLocation {
        MemberLocation { bit_offset, bitfield_size, byte_size }
    }

    #[test]
    fn loads_cover_the_field_from_its_first_byte() {
        // A 1-bit flag in the 3rd bit of byte 100: one byte.
        assert_eq!(to_field(loc(802, 1, 1)), Field { off: 100, shift: 2, bits: 1, present: 1, size: 1 });
        // 2 bits across a byte boundary (bits 7 and 8): two bytes.
        assert_eq!(to_field(loc(807, 2, 1)), Field { off: 100, shift: 7, bits: 2, present: 1, size: 2 });
        // Whole members load at their size; a pointer or a struct of 8+ bytes at 8.
        assert_eq!(to_field(loc(64, 0, 2)).size, 2);
        assert_eq!(to_field(loc(64, 0, 4)).size, 4);
        assert_eq!(to_field(loc(64, 0, 16)).size, 8);
    }

    #[test]
    fn fixed_size_reads_refuse_a_kernel_where_the_member_differs() {
        let btf = Btf::parse(&crate::probes::btf::tests::sample()).unwrap();
        let four = Shape::Bytes(4);
        assert_eq!(shaped(&btf, "outer", &["x"], four).unwrap(), to_field(loc(0, 0, 4)));
        let err = |r: Result<Field>| r.unwrap_err().to_string();
        assert!(err(shaped(&btf, "outer", &["x"], Shape::Bytes(2)))
            .contains("`x` is 4 bytes, where tfo-trace reads 2 bytes"));
        assert!(err(shaped(&btf, "outer", &["c"], four)).contains("is a 2-bit bitfield"));
        assert!(err(shaped(&btf, "outer", &["c"], Shape::OneBit))
            .contains("a 2-bit bitfield, where tfo-trace reads one bit"));
        assert!(err(shaped(&btf, "outer", &["nope"], four)).contains("has no `struct outer` member `nope`"));
        // An optional member in another shape is absent, not misread.
        assert_eq!(optional_shaped(&btf, "outer", &["x"], Shape::Bytes(8)), Field::default());
        assert_eq!(optional_shaped(&btf, "outer", &["c"], Shape::Any).present, 1);
    }
}
