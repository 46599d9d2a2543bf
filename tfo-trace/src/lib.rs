//! tfo-trace: an eBPF tracer for TCP Fast Open (RFC 7413).
//!
//! The data's way through the crate, one module per stage:
//! `probes` (BTF layout, load, attach, fallbacks) -> `events` (ring buffer reader, decoding)
//! -> `aggregation` (pure counting, no I/O) -> `views` (trace, doctor, ...).
//! `lab` builds the network namespaces that the demo and the tests trace; `kernel` reads
//! the kernel's own state (sysctls, namespaces, counters).
pub mod aggregation;
pub mod cli;
pub mod events;
pub mod fuzz;
pub mod kernel;
pub mod lab;
pub mod probes;
pub mod views;
