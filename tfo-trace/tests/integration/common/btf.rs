//! What the running kernel's types are, read by the tests themselves from its BTF
//! (/sys/kernel/btf/vmlinux), with no code of the product's (`tfo_trace::probes::btf`): a
//! test that decides what the kernel has must not agree with a bug of the parser it checks.
//! Only what the tests ask: whether a struct has a member (its own, or one of an anonymous
//! struct or union inside it). The format: include/uapi/linux/btf.h (the same in 5.10,
//! 6.1, 6.12), Documentation/bpf/btf.rst.
use std::path::Path;

/// The kernel's own BTF.
pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;

/// One type of the type section: its name's offset in the string section, its kind, the
/// type it refers to (a typedef's or qualifier's target), and its members (name offset,
/// type id) where it is a struct or union.
struct Type {
    name_off: u32,
    kind: u32,
    target: u32,
    members: Vec<(u32, u32)>,
}

/// The types of one BTF blob, by id (id 0 is `void`), and its strings.
pub struct Btf {
    types: Vec<Type>,
    strings: Vec<u8>,
}

impl Btf {
    /// Reads and parses `path`.
    pub fn read(path: impl AsRef<Path>) -> Result<Btf, String> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&data).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// struct btf_header, then the type section, each `struct btf_type` followed by its
    /// kind's data; little-endian (the only byte order of the kernels the tests run).
    pub fn parse(data: &[u8]) -> Result<Btf, String> {
        let u32_at = |at: usize| -> Result<u32, String> {
            let b = data.get(at..at + 4).ok_or(format!("cut short at byte {at}"))?;
            Ok(u32::from_le_bytes(b.try_into().unwrap()))
        };
        let magic = u16::from_le_bytes(data.get(..2).ok_or("empty")?.try_into().unwrap());
        if magic != MAGIC {
            return Err(format!("magic {magic:#x}, not BTF's {MAGIC:#x}"));
        }
        let hdr_len = u32_at(4)? as usize;
        let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
        let (str_off, str_len) = (u32_at(16)? as usize, u32_at(20)? as usize);
        let strings = data
            .get(hdr_len + str_off..hdr_len + str_off + str_len)
            .ok_or("string section out of the file")?
            .to_vec();
        let (start, end) = (hdr_len + type_off, hdr_len + type_off + type_len);
        let mut types = vec![Type { name_off: 0, kind: 0, target: 0, members: Vec::new() }];
        let mut at = start;
        while at < end {
            let (name_off, info, target) = (u32_at(at)?, u32_at(at + 4)?, u32_at(at + 8)?);
            let (kind, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
            at += 12;
            // The bytes after each kind's btf_type (btf.h: BTF_KIND_*).
            let extra = match kind {
                1 | 14 | 17 => 4,             // INT, VAR, DECL_TAG: a u32
                3 => 12,                      // ARRAY: struct btf_array
                4 | 5 | 15 | 19 => 12 * vlen, // STRUCT, UNION, DATASEC, ENUM64
                6 | 13 => 8 * vlen,           // ENUM, FUNC_PROTO
                2 | 7..=12 | 16 | 18 => 0,    // PTR, FWD, TYPEDEF, qualifiers, FUNC, FLOAT, TYPE_TAG
                other => return Err(format!("type {} at byte {at}: unknown kind {other}", types.len())),
            };
            let members = if matches!(kind, KIND_STRUCT | KIND_UNION) {
                (0..vlen)
                    .map(|i| Ok((u32_at(at + 12 * i)?, u32_at(at + 12 * i + 4)?)))
                    .collect::<Result<_, String>>()?
            } else {
                Vec::new()
            };
            types.push(Type { name_off, kind, target, members });
            at += extra;
        }
        if at != end {
            return Err(format!("the type section ends inside a type (byte {at}, not {end})"));
        }
        Ok(Btf { types, strings })
    }

    /// The name of type `id` (None: no such type; "" for an anonymous one).
    pub fn type_name(&self, id: u32) -> Option<&str> {
        self.types.get(id as usize).map(|t| self.name(t.name_off))
    }

    fn name(&self, off: u32) -> &str {
        let rest = self.strings.get(off as usize..).unwrap_or_default();
        let len = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..len]).unwrap_or("")
    }

    /// Whether struct `name` exists and has member `member`, its own or that of an
    /// anonymous struct or union inside it (as C lets the member be named directly).
    /// Err where no struct has that name.
    pub fn struct_has_member(&self, name: &str, member: &str) -> Result<bool, String> {
        let id = self
            .types
            .iter()
            .position(|t| t.kind == KIND_STRUCT && self.name(t.name_off) == name)
            .ok_or(format!("no struct {name} in this BTF"))?;
        Ok(self.has_member(id, member, 0))
    }

    fn has_member(&self, id: usize, member: &str, depth: u32) -> bool {
        let Some(t) = self.types.get(id) else { return false };
        depth < 8
            && t.members.iter().any(|&(name_off, type_id)| match name_off {
                0 => self.has_member(self.resolved(type_id as usize), member, depth + 1),
                _ => self.name(name_off) == member,
            })
    }

    /// A member's type with its qualifiers and typedefs taken off (an anonymous member is
    /// a struct or union, but may be const or volatile).
    fn resolved(&self, mut id: usize) -> usize {
        for _ in 0..16 {
            let Some(t) = self.types.get(id) else { break };
            if !matches!(t.kind, 8..=11 | 18) {
                break;
            }
            id = t.target as usize;
        }
        id
    }
}
