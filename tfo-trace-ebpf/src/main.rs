//! Kernel side of tfo-trace. One shared handler per TFO outcome (`handlers`, `server`;
//! `client` for the fentry backend, which hooks only TFO's own functions),
//! generic over how the hook reads the kernel (`kernel::Access`), called from the entry
//! points of each kind of hook: `btf_tracepoints` (typed, direct loads), `tracepoints`
//! (raw), `fentry`, `kprobes`. `floor` holds empty programs for the benchmark, built only with the `floor`
//! feature (tfo-trace's `fixtures`), never into the shipped object. See
//! tfo-trace/src/backends.rs for which hook serves which outcome on which backend.
//! `cgroups` learns cgroups as they are made, for the names of containers; `names` keeps
//! the DNS answers a namespace receives, for `--names`.
#![no_std]
#![feature(asm_experimental_arch)] // kernel::cast_to_tcp_sock
#![no_main]

mod btf_tracepoints;
mod cgroups;
mod client;
mod fentry;
mod filter;
#[cfg(feature = "floor")]
mod floor;
mod globals;
mod handlers;
mod kernel;
mod kprobes;
mod maps;
mod names;
mod record;
mod server;
mod tracepoints;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

// GPL: bpf_probe_read_kernel is a GPL-only helper.
#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 4] = *b"GPL\0";
