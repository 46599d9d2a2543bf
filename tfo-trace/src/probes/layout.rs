//! Builds the [`KernelLayout`] the eBPF programs read kernel structs with, from the
//! running kernel's BTF. This is our stand-in for CO-RE relocations, which Rust eBPF
//! cannot emit: one offset table per boot, never one generated for a single kernel.
use anyhow::{anyhow, Result};
use tfo_trace_common::{Field, KernelLayout};

use super::btf::{Btf, MemberLocation};

fn to_field(loc: MemberLocation) -> Field {
    if loc.bitfield_size == 0 {
        Field { off: loc.bit_offset / 8, shift: 0, bits: 0, present: 1, _pad: 0 }
    } else {
        Field {
            off: loc.bit_offset / 8,
            shift: (loc.bit_offset % 8) as u8,
            bits: loc.bitfield_size as u8,
            present: 1,
            _pad: 0,
        }
    }
}

/// A member every supported kernel has: its absence is an error naming it.
fn required(btf: &Btf, strukt: &str, path: &[&str]) -> Result<Field> {
    optional(btf, strukt, path).ok_or_else(|| {
        anyhow!(
            "this kernel's BTF has no `struct {strukt}` member `{}`: unsupported kernel layout",
            path.join(".")
        )
    })
}

fn optional(btf: &Btf, strukt: &str, path: &[&str]) -> Option<Field> {
    btf.member_path(strukt, path).map(to_field)
}

/// The eBPF side reads small fields with read_bits(): a whole u16 (5.6+) must be masked
/// to its 16 bits, exactly like the 8-bit bitfield it was on older kernels.
fn as_bits(field: Field, whole_bits: u8) -> Field {
    if field.bits == 0 {
        Field { bits: whole_bits, ..field }
    } else {
        field
    }
}

pub fn from_btf(btf: &Btf) -> Result<KernelLayout> {
    Ok(KernelLayout {
        skc_family: required(btf, "sock", &["skc_family"])?,
        skc_state: required(btf, "sock", &["skc_state"])?,
        skc_num: required(btf, "sock", &["skc_num"])?,
        skc_dport: required(btf, "sock", &["skc_dport"])?,
        skc_rcv_saddr: required(btf, "sock", &["skc_rcv_saddr"])?,
        skc_daddr: required(btf, "sock", &["skc_daddr"])?,
        skc_v6_rcv_saddr: required(btf, "sock", &["skc_v6_rcv_saddr"])?,
        skc_v6_daddr: required(btf, "sock", &["skc_v6_daddr"])?,
        skc_net: required(btf, "sock", &["skc_net"])?,
        sk_protocol: as_bits(required(btf, "sock", &["sk_protocol"])?, 16),
        tcp_rtx_queue: required(btf, "sock", &["tcp_rtx_queue"])?,
        net_ns_inum: required(btf, "net", &["ns", "inum"])?,
        fastopen_req: required(btf, "tcp_sock", &["fastopen_req"])?,
        total_retrans: required(btf, "tcp_sock", &["total_retrans"])?,
        bytes_sent: required(btf, "tcp_sock", &["bytes_sent"])?,
        bytes_received: required(btf, "tcp_sock", &["bytes_received"])?,
        fastopen_connect: required(btf, "tcp_sock", &["fastopen_connect"])?,
        syn_data: required(btf, "tcp_sock", &["syn_data"])?,
        syn_fastopen: required(btf, "tcp_sock", &["syn_fastopen"])?,
        syn_fastopen_exp: required(btf, "tcp_sock", &["syn_fastopen_exp"])?,
        syn_data_acked: required(btf, "tcp_sock", &["syn_data_acked"])?,
        // Added in 6.x; older kernels fall back to syn_data_acked (see handlers.rs).
        syn_fastopen_child: optional(btf, "tcp_sock", &["syn_fastopen_child"]).unwrap_or_default(),
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
        net_tfo_active_disable_times: optional(btf, "net", &["ipv4", "tfo_active_disable_times"])
            .unwrap_or_default(),
        req_num_retrans: optional(btf, "request_sock", &["num_retrans"]).unwrap_or_default(),
    })
}
