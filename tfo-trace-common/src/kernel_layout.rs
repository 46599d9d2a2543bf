//! The kernel struct members the programs read, declared once ([`kernel_structs!`]), and
//! what the table makes here: [`KernelLayout`], the offsets userspace finds in BTF and the
//! programs read, and each member's [`FieldSpec`].
/// Where a field lives inside a kernel struct, as found in the running kernel's BTF.
/// The programs load `size` bytes at `off`; for a bitfield, `bits` bits starting `shift`
/// bits into that load (`bits == 0`: the whole load is the value). `size` is the
/// smallest load that covers the field, so a BTF-typed program's direct load passes the
/// verifier's check against the kernel's own type.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Field {
    pub off: u32,
    pub shift: u8,
    pub bits: u8,
    /// 0 when this kernel has no such field (the program then treats it as absent).
    pub present: u8,
    /// Bytes to load: 1, 2, 4 or 8.
    pub size: u8,
}

/// Every kernel struct member the programs read, declared once, here. First the kernel
/// structs: the type that stands for a pointer to one in the programs, and its name in
/// BTF. Then each member: its name (a [`KernelLayout`] field, and the accessor the
/// programs read it with), its struct, how it is read, whether every supported kernel must
/// have it, and its path in BTF. `$then!` is called with the table:
///
/// - tfo-trace-common makes [`KernelLayout`] (its fields in this order) and its
///   [`FieldSpec`]s from it;
/// - tfo-trace (probes/layout.rs) finds each member in the running kernel's BTF, and
///   refuses a kernel where a `required` one is missing or shaped otherwise;
/// - tfo-trace-ebpf (kernel.rs) makes one pointer type per struct with one accessor per
///   member, so a member's width is its declared type's and a `tcp_sock` member cannot be
///   read off a `sock` (as kunai's co_re accessors do with CO-RE).
///
/// How a member is read (what its accessor returns, and the shape userspace checks):
/// - `u8` `u16` `u32` `u64` `i32`: one load of exactly that many bytes at a
///   verifier-known offset (every supported kernel has it at that size, or it is absent);
/// - `(ptr S)`: an 8-byte pointer to struct `S` of this table;
/// - `bit`: a one-bit bitfield: a byte load and a shift;
/// - `int`: any integer or bitfield, decoded at run time from its whole [`Field`]
///   (presence, size, bit range): for members some kernels size differently, read off the
///   paths every connection takes; 0 where this kernel has none, or with `(int or N)`, N;
/// - `addr16`: 16 bytes (an address, a task's comm), in two 8-byte loads;
/// - `(inner S)`: where struct `S` sits inside this one (an array member that holds it).
#[macro_export]
macro_rules! kernel_structs {
    ($then:ident) => {
        $then! {
            structs {
                // Both a full socket and a request sock start with it (struct sock's
                // __sk_common, struct request_sock's __req_common).
                SockCommon "sock_common",
                Sock "sock",
                Net "net",
                TcpSock "tcp_sock",
                FastopenCookie "tcp_fastopen_cookie",
                FastopenRequest "tcp_fastopen_request",
                SkBuff "sk_buff",
                TcpSkbCb "tcp_skb_cb",
                RequestSock "request_sock",
                TcpRequestSock "tcp_request_sock",
                Cgroup "cgroup",
                KernfsNode "kernfs_node",
                CgroupRoot "cgroup_root",
                TaskStruct "task_struct",
            }
            fields {
                skc_family: SockCommon u16 required ["skc_family"];
                skc_state: SockCommon u8 required ["skc_state"];
                skc_num: SockCommon u16 required ["skc_num"];
                skc_dport: SockCommon u16 required ["skc_dport"];
                skc_rcv_saddr: SockCommon u32 required ["skc_rcv_saddr"];
                skc_daddr: SockCommon u32 required ["skc_daddr"];
                skc_v6_rcv_saddr: SockCommon addr16 required ["skc_v6_rcv_saddr"];
                skc_v6_daddr: SockCommon addr16 required ["skc_v6_daddr"];
                // possible_net_t: one `struct net *`.
                skc_net: SockCommon (ptr Net) required ["skc_net"];
                // A u16 since 5.6 (a bitfield before: not a supported kernel).
                sk_protocol: Sock u16 required ["sk_protocol"];
                // The error a connection ends with: tcp_reset() / tcp_done_with_error() and
                // tcp_write_err() set it before tcp_done() moves the socket to CLOSE (an
                // ICMP error's is held in sk_err_soft until the SYNs time out). Read only
                // for a followed connect that failed.
                sk_err: Sock i32 optional ["sk_err"];
                sk_err_soft: Sock i32 optional ["sk_err_soft"];
                // The retransmit queue (an rb_root): 0 when it is empty.
                tcp_rtx_queue: Sock u64 required ["tcp_rtx_queue"];
                net_ns_inum: Net u32 required ["ns", "inum"];
                // Validates the per-CPU name cache; without it each outcome reads ns.inum.
                net_cookie: Net u64 optional ["net_cookie"];
                // Set from sendto(MSG_FASTOPEN) (or the first write of a TCP_FASTOPEN_CONNECT
                // socket) until it returns: a blocking one still has it at the SYN-ACK.
                fastopen_req: TcpSock (ptr FastopenRequest) required ["fastopen_req"];
                // The cookie the SYN carried: its bytes stay after the SYN (only its len
                // is set to -1, tcp_send_syn_data), read at the SYN-ACK where the
                // request is still there (tcp_fastopen_cache_set's hook).
                req_cookie: FastopenRequest (inner FastopenCookie) optional ["cookie"];
                total_retrans: TcpSock u32 required ["total_retrans"];
                bytes_sent: TcpSock u64 required ["bytes_sent"];
                bytes_received: TcpSock u64 required ["bytes_received"];
                // inet_sock's bound port (network order): still set when the socket
                // reaches CLOSE, where inet_put_port() has already cleared skc_num.
                inet_sport: TcpSock u16 required ["inet_conn", "icsk_inet", "inet_sport"];
                fastopen_connect: TcpSock bit required ["fastopen_connect"];
                syn_data: TcpSock bit required ["syn_data"];
                syn_fastopen: TcpSock bit required ["syn_fastopen"];
                syn_fastopen_exp: TcpSock bit required ["syn_fastopen_exp"];
                syn_data_acked: TcpSock bit required ["syn_data_acked"];
                // Two bits (5.6+): 1 when tcp_fastopen_cookie_check() found no cookie,
                // which tells a cookie request from a cookie-carrying SYN without data;
                // read only for a TFO SYN that carried no data.
                fastopen_client_fail: TcpSock int required ["fastopen_client_fail"];
                // Added in 6.x; older kernels fall back to syn_data_acked (handlers.rs).
                syn_fastopen_child: TcpSock bit optional ["syn_fastopen_child"];
                // TCP_FASTOPEN_NO_COOKIE on the socket: a listener that takes SYN-data
                // without a cookie (tcp_fastopen_no_cookie()); read at a SYN-data without
                // a TFO option only.
                fastopen_no_cookie: TcpSock bit optional ["fastopen_no_cookie"];
                // A TFO child's request sock until the client's ACK of its SYN-ACK
                // (reqsk_fastopen_remove()): a child the application closed before then
                // leaves SYN_RECV for FIN_WAIT1 with its handshake unfinished.
                fastopen_rsk: TcpSock (ptr RequestSock) optional ["fastopen_rsk"];
                // Smoothed RTT << 3, in us: for a server child leaving SYN_RECV, the
                // SYN-ACK's RTT (tcp_synack_rtt_meas), the child's handshake.
                srtt_us: TcpSock u32 required ["srtt_us"];
                // The time of the packet being processed (handlers.rs); without it,
                // outcomes read the clock.
                tcp_clock_cache: TcpSock u64 optional ["tcp_clock_cache"];
                // The cookie of tcp_try_fastopen(), whose hooks (fentry/kprobe backends)
                // read this and the SYN's sequence numbers: a kernel without one of these
                // loses that detail, not the tracer. len is an s8: -1 no option, 0 a
                // cookie request, > 0 a cookie.
                foc_len: FastopenCookie (int or -1) optional ["len"];
                foc_exp: FastopenCookie int optional ["exp"];
                // The cookie's bytes (__le64 val[2]), hashed or compared in the kernel,
                // never sent: read at a SYN-ACK of a TFO connection only.
                foc_val: FastopenCookie addr16 optional ["val"];
                // cb[], where struct tcp_skb_cb lives.
                skb_cb: SkBuff (inner TcpSkbCb) optional ["cb"];
                tcb_seq: TcpSkbCb int optional ["seq"];
                tcb_end_seq: TcpSkbCb int optional ["end_seq"];
                // The SYN's TCP header (skb->head + transport_header): its options say
                // which cookie it carried, where the fentry backend sees only the exit of
                // tcp_try_fastopen (server.rs), and the header, by then, is pulled off
                // skb->data of the child's clone only.
                skb_head: SkBuff u64 optional ["head"];
                skb_transport_header: SkBuff u16 optional ["transport_header"];
                // A listener's TFO queue.
                fastopenq_qlen: TcpSock int optional ["icsk_accept_queue", "fastopenq", "qlen"];
                fastopenq_max_qlen: TcpSock int optional ["icsk_accept_queue", "fastopenq", "max_qlen"];
                // The namespace's TFO bits, read at the SYN.
                net_sysctl_tcp_fastopen: Net int optional ["ipv4", "sysctl_tcp_fastopen"];
                // An atomic_t, bumped when active TFO is paused; read on every plain
                // client's handshake.
                net_tfo_active_disable_times: Net u32 optional ["ipv4", "tfo_active_disable_times"];
                // jiffies when the last pause began (tcp_fastopen_active_disable()): with
                // the times above, when the pause ends (tcp_fastopen_active_should_disable).
                // Read for the events of a pause only.
                net_tfo_active_disable_stamp: Net u64 optional ["ipv4", "tfo_active_disable_stamp"];
                // SYN timeouts so far (inet_connection_sock), and the namespace's blackhole
                // timeout (0: detection off): the condition on which
                // tcp_fastopen_active_detect_blackhole() pauses active TFO, for the fentry
                // backend that sees the call once, at its exit.
                icsk_retransmits: TcpSock int optional ["icsk_retransmits"];
                net_tfo_blackhole_timeout: Net int optional ["ipv4", "sysctl_tcp_fastopen_blackhole_timeout"];
                // SYN-ACKs retransmitted so far.
                req_num_retrans: RequestSock int optional ["num_retrans"];
                // When the first SYN-ACK went out (tcp_clock_us(), the clock of
                // bpf_ktime_get_ns in µs): the start of a TFO child whose SYN-ACK is
                // resent, read only then (probe read: past struct request_sock's end).
                snt_synack: TcpRequestSock u64 optional ["snt_synack"];
                // Read only by the cgroup tracepoints (a new or removed cgroup, never a
                // connection); without them containers are named by walking the
                // hierarchy. A cgroup's kernfs node's id is the cgroup id; its root's
                // hierarchy_id is 0 for the v2 hierarchy.
                cgroup_kn: Cgroup (ptr KernfsNode) optional ["kn"];
                cgroup_root: Cgroup (ptr CgroupRoot) optional ["root"];
                kernfs_node_id: KernfsNode u64 optional ["id"];
                cgroup_root_hierarchy_id: CgroupRoot i32 optional ["hierarchy_id"];
                // The process's name (its thread group leader's comm, as /proc/PID/comm
                // shows it), read at connect() and listen() of TFO sockets only: the
                // current thread's comm is bpf_get_current_comm's.
                task_group_leader: TaskStruct (ptr TaskStruct) required ["group_leader"];
                task_comm: TaskStruct addr16 required ["comm"];
            }
        }
    };
}

/// What userspace checks of a member in BTF before load, from how [`kernel_structs!`]
/// says the programs read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A whole member of exactly this many bytes.
    Bytes(u32),
    /// A one-bit bitfield.
    OneBit,
    /// Any shape: the programs decode the whole [`Field`] at run time.
    Any,
}

/// One member of [`kernel_structs!`], as userspace looks it up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    /// The [`KernelLayout`] field (and the programs' accessor).
    pub name: &'static str,
    /// The kernel struct, as BTF names it.
    pub strukt: &'static str,
    /// The member's path inside it.
    pub path: &'static [&'static str],
    pub shape: Shape,
    /// Every supported kernel has it: its absence (or another shape) refuses the kernel.
    pub required: bool,
}

#[doc(hidden)]
#[macro_export]
macro_rules! __field_shape {
    (bit) => {
        $crate::Shape::OneBit
    };
    (int) => {
        $crate::Shape::Any
    };
    ((int or $absent:literal)) => {
        $crate::Shape::Any
    };
    (addr16) => {
        $crate::Shape::Bytes(16)
    };
    ((ptr $to:ident)) => {
        $crate::Shape::Bytes(8)
    };
    ((inner $to:ident)) => {
        $crate::Shape::Any
    };
    ($int:ty) => {
        $crate::Shape::Bytes(core::mem::size_of::<$int>() as u32)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __field_required {
    (required) => {
        true
    };
    (optional) => {
        false
    };
}

macro_rules! kernel_layout {
    (
        structs { $( $strukt:ident $btf:literal, )* }
        fields { $( $name:ident : $owner:ident $read:tt $req:ident [$($path:literal),+]; )* }
    ) => {
        /// The BTF name of each struct of [`kernel_structs!`].
        #[allow(non_upper_case_globals)]
        mod btf_name {
            $( pub const $strukt: &str = $btf; )*
        }

        /// Offsets of every kernel field the programs read ([`kernel_structs!`], in its
        /// order). Filled in by userspace from /sys/kernel/btf/vmlinux before load: Rust
        /// eBPF cannot emit CO-RE relocations, and offsets generated for one kernel would be
        /// wrong on the next. It lives in the object's read-only data, frozen before the
        /// programs load, so the verifier knows every offset as a constant: that is what
        /// lets a BTF-typed program load a field directly.
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct KernelLayout {
            $( pub $name: Field, )*
        }

        impl KernelLayout {
            /// Each field's spec, in the order of the struct's fields.
            pub const FIELDS: &'static [FieldSpec] = &[
                $( FieldSpec {
                    name: stringify!($name),
                    strukt: btf_name::$owner,
                    path: &[$($path),+],
                    shape: $crate::__field_shape!($read),
                    required: $crate::__field_required!($req),
                }, )*
            ];

            /// Each field with its spec, in order.
            pub fn with_specs(&self) -> impl Iterator<Item = (&'static FieldSpec, Field)> {
                Self::FIELDS.iter().zip([ $( self.$name, )* ])
            }

            /// A layout with each field made by `field` from its spec, in order.
            pub fn try_from_specs<E>(
                mut field: impl FnMut(&FieldSpec) -> Result<Field, E>,
            ) -> Result<Self, E> {
                let mut specs = Self::FIELDS.iter();
                let mut next = || field(specs.next().expect("one spec per field"));
                Ok(KernelLayout { $( $name: next()?, )* })
            }
        }
    };
}
kernel_structs!(kernel_layout);

impl KernelLayout {
    /// All fields absent; userspace overwrites this before load.
    pub const fn zeroed() -> Self {
        // SAFETY: KernelLayout is plain integers, for which all-zero is a valid value.
        unsafe { core::mem::zeroed() }
    }
}
