//! A small reader of the kernel's BTF (/sys/kernel/btf/vmlinux), just enough to find
//! where a named member of a named struct lives, through nested anonymous unions and
//! structs, with bitfield positions. Format: Documentation/bpf/btf.rst.
use std::collections::HashMap;

use anyhow::{bail, ensure, Context as _, Result};

const BTF_MAGIC: u16 = 0xeb9f;

// BTF_KIND_* numbers (include/uapi/linux/btf.h).
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

#[derive(Debug, Clone)]
struct Member {
    /// Offset of the name in the string section: vmlinux has some 100,000 members, and a
    /// tracer's start (which parses all of them) should not copy their names.
    name_off: u32,
    type_id: u32,
    bit_offset: u32,
    /// 0 for a plain member.
    bitfield_size: u32,
}

#[derive(Debug, Clone)]
enum Type {
    /// Its members are `Btf::members[first..first + len]`.
    Composite {
        first: u32,
        len: u32,
        size: u32,
    },
    /// typedef, const, volatile, restrict, type tag: look through to `to`.
    Alias {
        to: u32,
    },
    /// int, enum, float, pointer: `size` bytes.
    Scalar {
        size: u32,
    },
    Array {
        elem: u32,
        nelems: u32,
    },
    Other,
}

/// Where a member lives, in bits from the start of the outer struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemberLocation {
    pub(crate) bit_offset: u32,
    /// 0 when the member is not a bitfield.
    pub(crate) bitfield_size: u32,
    /// Bytes of the member's type (0 where unknown).
    pub(crate) byte_size: u32,
}

pub struct Btf {
    /// Index = type id; id 0 is `void`.
    types: Vec<Type>,
    /// Every struct's and union's members, one after the other.
    members: Vec<Member>,
    strings: Vec<u8>,
    structs_by_name: HashMap<String, u32>,
    funcs_by_name: HashMap<String, u32>,
}

fn u16_at(b: &[u8], off: usize) -> Result<u16> {
    let s = b.get(off..off + 2).context("BTF truncated")?;
    Ok(u16::from_le_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], off: usize) -> Result<u32> {
    let s = b.get(off..off + 4).context("BTF truncated")?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// The bytes of the NUL-terminated string at `off`, without the NUL.
fn cstr_at(strings: &[u8], off: u32) -> &[u8] {
    let rest = strings.get(off as usize..).unwrap_or(&[]);
    let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
    &rest[..end]
}

fn str_at(strings: &[u8], off: u32) -> String {
    String::from_utf8_lossy(cstr_at(strings, off)).into_owned()
}

/// Whether the string at `off` is `name`, without copying it.
fn name_is(strings: &[u8], off: u32, name: &str) -> bool {
    let rest = strings.get(off as usize..).unwrap_or(&[]);
    rest.strip_prefix(name.as_bytes()).is_some_and(|tail| tail.first() == Some(&0))
}

/// The kernel functions (kfuncs) the programs may call, the only functions [`Btf::func_id`]
/// finds.
pub(crate) const KFUNCS: &[&str] = &["bpf_rdonly_cast"];

/// The running kernel's own BTF.
pub(crate) const KERNEL_BTF: &str = crate::kernel::uname::BTF_VMLINUX_PATH;

impl Btf {
    pub fn from_sys_fs() -> Result<Self> {
        Self::from_file(std::path::Path::new(KERNEL_BTF))
    }

    /// BTF from a file: the kernel's own, or one made for it (BTFHub, `pahole -J`) where the
    /// kernel carries none.
    pub(crate) fn from_file(path: &std::path::Path) -> Result<Self> {
        let bytes = std::fs::read(path).with_context(|| {
            if path == std::path::Path::new(KERNEL_BTF) {
                format!("reading {KERNEL_BTF}: this kernel has no BTF (CONFIG_DEBUG_INFO_BTF=y is required, or --btf FILE)")
            } else {
                format!("reading --btf {}", path.display())
            }
        })?;
        Self::parse(&bytes).with_context(|| format!("parsing {} as BTF", path.display()))
    }

    pub fn parse(b: &[u8]) -> Result<Self> {
        ensure!(u16_at(b, 0)? == BTF_MAGIC, "bad BTF magic (big-endian BTF is not supported)");
        let hdr_len = u32_at(b, 4)? as usize;
        let type_off = u32_at(b, 8)? as usize;
        let type_len = u32_at(b, 12)? as usize;
        let str_off = u32_at(b, 16)? as usize;
        let str_len = u32_at(b, 20)? as usize;
        let types_sec = b
            .get(hdr_len + type_off..hdr_len + type_off + type_len)
            .context("BTF type section out of bounds")?;
        let strings = b
            .get(hdr_len + str_off..hdr_len + str_off + str_len)
            .context("BTF string section out of bounds")?;

        let mut types = vec![Type::Other]; // id 0: void
        let mut members = Vec::new();
        let mut structs_by_name = HashMap::new();
        let mut funcs_by_name = HashMap::new();
        let wanted_funcs: Vec<&str> = KFUNCS
            .iter()
            .chain(crate::backends::ALTERNATIVES.iter().flat_map(|g| g.iter()))
            .copied()
            .collect();
        let mut pos = 0usize;
        while pos < types_sec.len() {
            let header = types_sec.get(pos..pos + 12).context("BTF truncated")?;
            let word =
                |at: usize| u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]);
            let (name_off, info, size_or_type) = (word(0), word(4), word(8));
            pos += 12;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let kind_flag = info >> 31 != 0;
            let id = types.len() as u32;
            let ty = match kind {
                KIND_STRUCT | KIND_UNION => {
                    let first = members.len() as u32;
                    // One bounds check per struct, not three per member: this loop is most
                    // of a tracer's own start.
                    let all = types_sec.get(pos..pos + vlen * 12).context("BTF truncated")?;
                    for m in all.chunks_exact(12) {
                        let word = |at: usize| u32::from_le_bytes([m[at], m[at + 1], m[at + 2], m[at + 3]]);
                        let offset = word(8);
                        let (bit_offset, bitfield_size) =
                            if kind_flag { (offset & 0xff_ffff, offset >> 24) } else { (offset, 0) };
                        members.push(Member {
                            name_off: word(0),
                            type_id: word(4),
                            bit_offset,
                            bitfield_size,
                        });
                    }
                    pos += vlen * 12;
                    if kind == KIND_STRUCT && name_off != 0 {
                        structs_by_name.entry(str_at(strings, name_off)).or_insert(id);
                    }
                    Type::Composite { first, len: vlen as u32, size: size_or_type }
                }
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    Type::Alias { to: size_or_type }
                }
                KIND_INT => {
                    pos += 4;
                    Type::Scalar { size: size_or_type }
                }
                KIND_VAR | KIND_DECL_TAG => {
                    pos += 4;
                    Type::Other
                }
                KIND_ARRAY => {
                    let array =
                        Type::Array { elem: u32_at(types_sec, pos)?, nelems: u32_at(types_sec, pos + 8)? };
                    pos += 12;
                    array
                }
                KIND_ENUM => {
                    pos += vlen * 8;
                    Type::Scalar { size: size_or_type }
                }
                KIND_FUNC_PROTO => {
                    pos += vlen * 8;
                    Type::Other
                }
                KIND_ENUM64 => {
                    pos += vlen * 12;
                    Type::Scalar { size: size_or_type }
                }
                KIND_DATASEC => {
                    pos += vlen * 12;
                    Type::Other
                }
                KIND_FLOAT => Type::Scalar { size: size_or_type },
                KIND_PTR => Type::Scalar { size: 8 },
                KIND_FUNC => {
                    // Only the kfuncs the programs call and the functions of which a
                    // kernel gets one hook: vmlinux names some 60,000 functions.
                    // Slices compare their lengths first: most of the list is passed over
                    // in an instruction or two (a hash would cost more).
                    let name = cstr_at(strings, name_off);
                    if let Some(name) = wanted_funcs.iter().find(|f| f.as_bytes() == name) {
                        funcs_by_name.entry(name.to_string()).or_insert(id);
                    }
                    Type::Other
                }
                KIND_FWD => Type::Other,
                other => bail!("unknown BTF kind {other} at type id {id}"),
            };
            types.push(ty);
        }
        Ok(Btf { types, members, strings: strings.to_vec(), structs_by_name, funcs_by_name })
    }

    fn resolve(&self, mut id: u32) -> Option<&Type> {
        for _ in 0..32 {
            match self.types.get(id as usize)? {
                Type::Alias { to } => id = *to,
                other => return Some(other),
            }
        }
        None
    }

    /// Bytes of a type, through aliases and arrays; 0 where unknown.
    fn byte_size(&self, id: u32, depth: u32) -> u32 {
        match (depth, self.resolve(id)) {
            (0..=8, Some(Type::Composite { size, .. } | Type::Scalar { size })) => *size,
            (0..=8, Some(Type::Array { elem, nelems })) => {
                self.byte_size(*elem, depth + 1).saturating_mul(*nelems)
            }
            _ => 0,
        }
    }

    /// [`Btf::member_path`] with a one-name path (the unit tests' shorthand).
    #[cfg(test)]
    pub(crate) fn member(&self, struct_name: &str, name: &str) -> Option<MemberLocation> {
        self.member_path(struct_name, &[name])
    }

    /// Finds `path` (e.g. `["inet_conn", "icsk_inet", "sk", "__sk_common", "skc_daddr"]`,
    /// or just `["skc_daddr"]`) in `struct_name`; members of anonymous unions/structs and,
    /// for a one-name path, of any nested struct are searched too. One name after the
    /// other: `["ns", "inum"]` in `net` is `net.ns.inum`, each step free to pass through
    /// anonymous unions and structs.
    pub(crate) fn member_path(&self, struct_name: &str, path: &[&str]) -> Option<MemberLocation> {
        let mut id = *self.structs_by_name.get(struct_name)?;
        let mut loc = MemberLocation { bit_offset: 0, bitfield_size: 0, byte_size: 0 };
        for name in path {
            let (found, type_id) = self.find_in(id, name, loc.bit_offset, 0)?;
            loc = found;
            id = type_id;
        }
        Some(loc)
    }

    /// Depth-first search by member name: an exact match at this level wins over nested ones.
    fn find_in(&self, id: u32, name: &str, base_bits: u32, depth: u32) -> Option<(MemberLocation, u32)> {
        if depth > 8 {
            return None;
        }
        let &Type::Composite { first, len, .. } = self.resolve(id)? else {
            return None;
        };
        let members = self.members.get(first as usize..(first + len) as usize)?;
        if let Some(m) = members.iter().find(|m| name_is(&self.strings, m.name_off, name)) {
            let loc = MemberLocation {
                bit_offset: base_bits + m.bit_offset,
                bitfield_size: m.bitfield_size,
                byte_size: self.byte_size(m.type_id, 0),
            };
            return Some((loc, m.type_id));
        }
        members
            .iter()
            .filter(|m| m.bitfield_size == 0)
            .find_map(|m| self.find_in(m.type_id, name, base_bits + m.bit_offset, depth + 1))
    }

    /// The type id of a named struct (the first of that name).
    pub(crate) fn struct_id(&self, name: &str) -> Option<u32> {
        self.structs_by_name.get(name).copied()
    }

    /// The type id of a named function, one of [`KFUNCS`].
    pub(crate) fn func_id(&self, name: &str) -> Option<u32> {
        self.funcs_by_name.get(name).copied()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a tiny BTF blob: struct inner { u32 a; u32 b:3; u32 c:2; };
    /// struct outer { u64 x; union { struct inner in; u64 y; }; }
    pub(crate) fn sample() -> Vec<u8> {
        let strings = b"\0inner\0a\0b\0c\0outer\0x\0in\0y\0u32\0".to_vec();
        let s = |name: &str| -> u32 {
            let needle = format!("\0{name}\0");
            strings.windows(needle.len()).position(|w| w == needle.as_bytes()).unwrap() as u32 + 1
        };
        let mut t = Vec::new();
        let mut push = |words: &[u32]| {
            for w in words {
                t.extend_from_slice(&w.to_le_bytes());
            }
        };
        // 1: int u32
        push(&[s("u32"), KIND_INT << 24, 4, 32]);
        // 2: struct inner, kind_flag set (bitfields)
        push(&[s("inner"), (KIND_STRUCT << 24) | (1 << 31) | 3, 8]);
        push(&[s("a"), 1, 0]);
        push(&[s("b"), 1, (3 << 24) | 32]);
        push(&[s("c"), 1, (2 << 24) | 35]);
        // 3: anonymous union { struct inner in; u64 y; }
        push(&[0, (KIND_UNION << 24) | 2, 8]);
        push(&[s("in"), 2, 0]);
        push(&[s("y"), 1, 0]);
        // 4: struct outer
        push(&[s("outer"), (KIND_STRUCT << 24) | 2, 16]);
        push(&[s("x"), 1, 0]);
        push(&[0, 3, 64]);
        let mut b = Vec::new();
        b.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        b.extend_from_slice(&[1, 0]);
        for w in [24u32, 0, t.len() as u32, t.len() as u32, strings.len() as u32] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(&t);
        b.extend_from_slice(&strings);
        b
    }

    #[test]
    fn a_name_matches_whole_not_as_a_prefix() {
        let strings = b"\0bpf_rdonly_cast_x\0bpf_rdonly_cast\0";
        assert!(!name_is(strings, 1, "bpf_rdonly_cast"));
        assert!(name_is(strings, 19, "bpf_rdonly_cast"));
        assert!(!name_is(strings, 99, "bpf_rdonly_cast"));
    }

    #[test]
    fn finds_members_through_anonymous_unions_and_bitfields() {
        let btf = Btf::parse(&sample()).unwrap();
        let loc = |bit_offset, bitfield_size, byte_size| {
            Some(MemberLocation { bit_offset, bitfield_size, byte_size })
        };
        assert_eq!(btf.member("outer", "x"), loc(0, 0, 4));
        assert_eq!(btf.member("outer", "a"), loc(64, 0, 4));
        assert_eq!(btf.member("outer", "c"), loc(64 + 35, 2, 4));
        assert_eq!(btf.member("inner", "b"), loc(32, 3, 4));
        assert_eq!(btf.member("outer", "in"), loc(64, 0, 8), "a struct member's size is the struct's");
        assert_eq!(btf.member("outer", "nope"), None);
        assert_eq!(btf.member("nope", "x"), None);
        assert_eq!(btf.member_path("outer", &["in", "c"]), loc(64 + 35, 2, 4));
    }

    #[test]
    fn rejects_garbage() {
        assert!(Btf::parse(b"not btf at all, not even close").is_err());
        assert!(Btf::parse(&sample()[..30]).is_err());
    }
}
