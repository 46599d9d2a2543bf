//! tfo-trace: an eBPF tracer for TCP Fast Open (RFC 7413).
//!
//! The data's way through the crate, one module per stage, each importing only from those
//! before it: `probes` (BTF layout, load, attach, fallbacks) -> `events` (ring buffer
//! reader, decoding, recordings and their replay; with `--names`, destinations named by
//! `names` from the DNS answers each namespace saw) -> `aggregation` (pure counting, no
//! I/O) -> `live` (the live run's plumbing: session, stop, the namespaces' counters, the
//! closing summary, the output streams) -> `views` (one module per command: trace, top,
//! report, doctor, ...).
//!
//! Beside them: `backends`, the probe table under them all (which hook sees which outcome
//! on which backend), pure data. `kernel` reads the host's facts (sysctls, namespaces,
//! counters, listeners, ...), each once; `diagnosis` judges them for `doctor` (pure). `lab`
//! builds the network namespaces that the demo and the tests trace. `cli` is the command
//! line; `units` prints every figure one way and parses the durations it and the lab's
//! helpers take; `filter` turns its filter flags into what the kernel programs decide
//! with. With the `fixtures` feature (tests, bench, fuzzing, never a user's build): `fuzz`,
//! the fuzz targets' bodies.
// stdout and stderr are written through `live::output`, where a closed pipe ends the
// command quietly instead of panicking as `println!`/`eprintln!` do.
#![deny(clippy::print_stdout, clippy::print_stderr)]
// What is `pub` is what the binary, the integration tests and the fuzz targets use; the
// rest is `pub(crate)`, so that rustc names what nothing calls.
#![warn(unreachable_pub)]
pub mod aggregation;
pub mod alloc;
pub mod backends;
pub mod build_info;
pub mod cli;
pub mod diagnosis;
pub mod events;
pub mod filter;
#[cfg(feature = "fixtures")]
pub mod fuzz;
pub mod kernel;
pub mod lab;
pub mod live;
pub mod names;
pub mod probes;
pub mod units;
pub mod views;
