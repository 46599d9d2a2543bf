//! Kernel side of tfo-trace. One shared handler per TFO outcome (`handlers`), called from
//! the hook entry points of each backend (`tracepoints`; fentry/kprobe twins share the
//! same handlers). See tfo-trace/src/probes/table.rs for which hook serves which outcome.
#![no_std]
#![no_main]

mod fentry;
mod handlers;
mod kernel;
mod kprobes;
mod maps;
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
