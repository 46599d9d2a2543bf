//! Loading and attaching the kernel programs: BTF layout, backend choice, fallbacks.
pub mod btf;
pub mod layout;
pub mod table;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context as _, Result};
use aya::{programs::RawTracePoint, Ebpf, EbpfLoader};

use table::HookKind;
pub use table::{Backend, BackendChoice};

/// The eBPF object, built by build.rs and embedded: one binary is all a host needs.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tfo-trace"));

pub const DEFAULT_RING_BUFFER_BYTES: u32 = 1 << 20;

pub struct LoadOptions {
    pub backend: BackendChoice,
    pub ring_buffer_bytes: u32,
}

/// A backend `auto` passed over, and why.
pub struct Skipped {
    pub backend: Backend,
    pub reason: String,
}

pub struct Tracer {
    pub ebpf: Ebpf,
    pub backend: Backend,
    pub skipped: Vec<Skipped>,
    /// From the start of `load` to the last program attached.
    pub attach_time: Duration,
}

/// Why `backend` cannot be used here, before trying to load anything; None if it may.
fn unavailable(backend: Backend) -> Option<String> {
    if table::hooks(backend).is_empty() {
        let kernel = match backend {
            Backend::Kprobe if !Path::new("/sys/bus/event_source/devices/kprobe").exists() => {
                "; this kernel has no kprobes either (CONFIG_KPROBES off)"
            }
            _ => "",
        };
        return Some(format!("no {backend} programs in this build yet{kernel}"));
    }
    None
}

pub fn load(opts: &LoadOptions) -> Result<Tracer> {
    let started = Instant::now();
    let mut skipped = Vec::new();
    for &backend in opts.backend.candidates() {
        if let Some(reason) = unavailable(backend) {
            skipped.push(Skipped { backend, reason });
            continue;
        }
        match load_backend(backend, opts) {
            Ok(ebpf) => {
                return Ok(Tracer { ebpf, backend, skipped, attach_time: started.elapsed() });
            }
            Err(err) if opts.backend == BackendChoice::Auto => {
                skipped.push(Skipped { backend, reason: format!("{err:#}") });
            }
            Err(err) => return Err(err),
        }
    }
    let reasons: Vec<String> = skipped.iter().map(|s| format!("{}: {}", s.backend, s.reason)).collect();
    bail!("no tracing backend could be loaded ({})", reasons.join("; "))
}

fn raise_memlock_rlimit() {
    let unlimited = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: setrlimit reads a valid struct; failure is harmless on kernels >= 5.11,
    // which account BPF memory to the cgroup instead.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
}

fn load_backend(backend: Backend, opts: &LoadOptions) -> Result<Ebpf> {
    raise_memlock_rlimit();
    let btf = btf::Btf::from_sys_fs()?;
    let kernel_layout = layout::from_btf(&btf)?;
    let mut ebpf = EbpfLoader::new()
        .override_global("LAYOUT", &kernel_layout, true)
        .map_max_entries("EVENTS", opts.ring_buffer_bytes)
        .load(EBPF_OBJECT)
        .context("loading the eBPF object")?;
    for hook in table::hooks(backend) {
        let program = ebpf
            .program_mut(hook.program)
            .ok_or_else(|| anyhow!("program {} missing from the eBPF object", hook.program))?;
        match hook.kind {
            HookKind::RawTracepoint => {
                let tp: &mut RawTracePoint = program.try_into()?;
                tp.load()
                    .with_context(|| format!("loading {} (raw tracepoint {})", hook.program, hook.target))?;
                tp.attach(hook.target).with_context(|| {
                    format!("attaching {} to raw tracepoint {}", hook.program, hook.target)
                })?;
            }
        }
    }
    Ok(ebpf)
}

/// For `doctor`: whether each backend loads and attaches here, and what it sees.
/// Loads each one for real (then detaches it) when `try_load`, else only the static facts.
pub fn verdicts(try_load: bool) -> Vec<(Backend, Result<(), String>)> {
    Backend::ALL
        .iter()
        .map(|&backend| {
            let verdict = match unavailable(backend) {
                Some(reason) => Err(reason),
                None if !try_load => Err("not tried: loading needs CAP_BPF and CAP_PERFMON".into()),
                None => {
                    let opts = LoadOptions { backend: backend.into(), ring_buffer_bytes: 4096 };
                    load_backend(backend, &opts).map(drop).map_err(|e| format!("{e:#}"))
                }
            };
            (backend, verdict)
        })
        .collect()
}
