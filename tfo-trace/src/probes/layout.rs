//! Builds the [`KernelLayout`] the eBPF programs read kernel structs with, from the
//! running kernel's BTF. This is our stand-in for CO-RE relocations, which Rust eBPF
//! cannot emit: one offset table per boot, never one generated for a single kernel.
use anyhow::{anyhow, bail, Result};
use tfo_trace_common::{Field, KernelLayout};

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

/// A member every supported kernel has: its absence is an error naming it.
fn required(btf: &Btf, strukt: &str, path: &[&str]) -> Result<Field> {
    located(btf, strukt, path).map(to_field)
}

fn located(btf: &Btf, strukt: &str, path: &[&str]) -> Result<MemberLocation> {
    btf.member_path(strukt, path).ok_or_else(|| {
        anyhow!(
            "this kernel's BTF has no `struct {strukt}` member `{}`: unsupported kernel layout",
            path.join(".")
        )
    })
}

/// How the programs read a member without decoding its `Field` at run time: `fixed!` (one
/// load of exactly this many bytes) or `bit!` (a byte load and a shift), in
/// tfo-trace-ebpf/src/kernel.rs.
#[derive(Clone, Copy)]
enum Read {
    Bytes(u32),
    OneBit,
}

impl Read {
    fn fits(self, loc: MemberLocation) -> bool {
        match self {
            Read::Bytes(n) => loc.bitfield_size == 0 && loc.byte_size == n,
            Read::OneBit => {
                let f = to_field(loc);
                f.bits == 1 && f.size == 1
            }
        }
    }

    fn describe(self) -> String {
        match self {
            Read::Bytes(n) => format!("{n} bytes"),
            Read::OneBit => "one bit".into(),
        }
    }
}

/// A member every supported kernel has in the shape `read` expects: a kernel where it is
/// missing or shaped otherwise is refused by name rather than misread.
fn shaped(btf: &Btf, strukt: &str, path: &[&str], read: Read) -> Result<Field> {
    let loc = located(btf, strukt, path)?;
    if !read.fits(loc) {
        bail!(
            "this kernel's `struct {strukt}` member `{}` is {}, where tfo-trace reads {}: \
             unsupported kernel layout",
            path.join("."),
            shape(loc),
            read.describe()
        );
    }
    Ok(to_field(loc))
}

fn fixed(btf: &Btf, strukt: &str, path: &[&str], bytes: u32) -> Result<Field> {
    shaped(btf, strukt, path, Read::Bytes(bytes))
}

fn one_bit(btf: &Btf, strukt: &str, path: &[&str]) -> Result<Field> {
    shaped(btf, strukt, path, Read::OneBit)
}

/// A member some kernels lack, given only in the shape `read` expects (absent, and the
/// programs' fallback taken, where it is shaped otherwise).
fn optional_shaped(btf: &Btf, strukt: &str, path: &[&str], read: Read) -> Field {
    btf.member_path(strukt, path).filter(|&loc| read.fits(loc)).map(to_field).unwrap_or_default()
}

fn shape(loc: MemberLocation) -> String {
    if loc.bitfield_size != 0 {
        format!("a {}-bit bitfield", loc.bitfield_size)
    } else {
        format!("{} bytes", loc.byte_size)
    }
}

fn optional(btf: &Btf, strukt: &str, path: &[&str]) -> Option<Field> {
    btf.member_path(strukt, path).map(to_field)
}

pub fn from_btf(btf: &Btf) -> Result<KernelLayout> {
    Ok(KernelLayout {
        skc_family: fixed(btf, "sock", &["skc_family"], 2)?,
        skc_state: fixed(btf, "sock", &["skc_state"], 1)?,
        skc_num: fixed(btf, "sock", &["skc_num"], 2)?,
        skc_dport: fixed(btf, "sock", &["skc_dport"], 2)?,
        skc_rcv_saddr: fixed(btf, "sock", &["skc_rcv_saddr"], 4)?,
        skc_daddr: fixed(btf, "sock", &["skc_daddr"], 4)?,
        skc_v6_rcv_saddr: required(btf, "sock", &["skc_v6_rcv_saddr"])?,
        skc_v6_daddr: required(btf, "sock", &["skc_v6_daddr"])?,
        skc_net: fixed(btf, "sock", &["skc_net"], 8)?,
        sk_protocol: fixed(btf, "sock", &["sk_protocol"], 2)?,
        tcp_rtx_queue: fixed(btf, "sock", &["tcp_rtx_queue"], 8)?,
        net_ns_inum: fixed(btf, "net", &["ns", "inum"], 4)?,
        // Without it (or at another size) each outcome reads ns.inum itself.
        net_cookie: optional_shaped(btf, "net", &["net_cookie"], Read::Bytes(8)),
        fastopen_req: fixed(btf, "tcp_sock", &["fastopen_req"], 8)?,
        total_retrans: fixed(btf, "tcp_sock", &["total_retrans"], 4)?,
        bytes_sent: fixed(btf, "tcp_sock", &["bytes_sent"], 8)?,
        bytes_received: fixed(btf, "tcp_sock", &["bytes_received"], 8)?,
        inet_sport: fixed(btf, "tcp_sock", &["inet_conn", "icsk_inet", "inet_sport"], 2)?,
        fastopen_connect: one_bit(btf, "tcp_sock", &["fastopen_connect"])?,
        syn_data: one_bit(btf, "tcp_sock", &["syn_data"])?,
        syn_fastopen: one_bit(btf, "tcp_sock", &["syn_fastopen"])?,
        syn_fastopen_exp: one_bit(btf, "tcp_sock", &["syn_fastopen_exp"])?,
        syn_data_acked: one_bit(btf, "tcp_sock", &["syn_data_acked"])?,
        // Added in 6.x; older kernels fall back to syn_data_acked (see handlers.rs).
        syn_fastopen_child: optional_shaped(btf, "tcp_sock", &["syn_fastopen_child"], Read::OneBit),
        srtt_us: fixed(btf, "tcp_sock", &["srtt_us"], 4)?,
        // Without it (or at another size) outcomes read the clock.
        tcp_clock_cache: optional_shaped(btf, "tcp_sock", &["tcp_clock_cache"], Read::Bytes(8)),
        // Read only by the tcp_try_fastopen hooks of the fentry/kprobe backends; a kernel
        // without one of them loses that detail, not the tracer.
        foc_len: optional(btf, "tcp_fastopen_cookie", &["len"]).unwrap_or_default(),
        foc_exp: optional(btf, "tcp_fastopen_cookie", &["exp"]).unwrap_or_default(),
        skb_cb: optional(btf, "sk_buff", &["cb"]).unwrap_or_default(),
        tcb_seq: optional(btf, "tcp_skb_cb", &["seq"]).unwrap_or_default(),
        tcb_end_seq: optional(btf, "tcp_skb_cb", &["end_seq"]).unwrap_or_default(),
        fastopenq_qlen: optional(btf, "tcp_sock", &["icsk_accept_queue", "fastopenq", "qlen"])
            .unwrap_or_default(),
        fastopenq_max_qlen: optional(btf, "tcp_sock", &["icsk_accept_queue", "fastopenq", "max_qlen"])
            .unwrap_or_default(),
        net_sysctl_tcp_fastopen: optional(btf, "net", &["ipv4", "sysctl_tcp_fastopen"]).unwrap_or_default(),
        // Read as 4 bytes (an atomic_t) on every plain client's handshake.
        net_tfo_active_disable_times: optional_shaped(
            btf,
            "net",
            &["ipv4", "tfo_active_disable_times"],
            Read::Bytes(4),
        ),
        req_num_retrans: optional(btf, "request_sock", &["num_retrans"]).unwrap_or_default(),
        // Read only by the cgroup tracepoints (a new or removed cgroup, never a
        // connection); without them containers are named by walking the hierarchy.
        cgroup_kn: optional_shaped(btf, "cgroup", &["kn"], Read::Bytes(8)),
        cgroup_root: optional_shaped(btf, "cgroup", &["root"], Read::Bytes(8)),
        kernfs_node_id: optional_shaped(btf, "kernfs_node", &["id"], Read::Bytes(8)),
        cgroup_root_hierarchy_id: optional_shaped(btf, "cgroup_root", &["hierarchy_id"], Read::Bytes(4)),
    })
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
        assert_eq!(fixed(&btf, "outer", &["x"], 4).unwrap(), to_field(loc(0, 0, 4)));
        let err = |r: Result<Field>| r.unwrap_err().to_string();
        assert!(
            err(fixed(&btf, "outer", &["x"], 2)).contains("`x` is 4 bytes, where tfo-trace reads 2 bytes")
        );
        assert!(err(fixed(&btf, "outer", &["c"], 4)).contains("is a 2-bit bitfield"));
        assert!(
            err(one_bit(&btf, "outer", &["c"])).contains("a 2-bit bitfield, where tfo-trace reads one bit")
        );
        assert!(err(fixed(&btf, "outer", &["nope"], 4)).contains("has no `struct outer` member `nope`"));
    }
}
