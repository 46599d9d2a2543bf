//! Loading and attaching the kernel programs: BTF layout, backend choice, fallbacks.
pub mod btf;
pub mod layout;
pub mod table;

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use aya::{
    programs::{FEntry, FExit, KProbe, RawTracePoint},
    Btf, Ebpf, EbpfLoader,
};
use tfo_trace_common::config;

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
    match backend {
        Backend::Kprobe if !crate::kernel::kallsyms::kprobes_available() => {
            Some("this kernel has no kprobes (CONFIG_KPROBES off)".into())
        }
        _ => None,
    }
}

pub fn load(opts: &LoadOptions) -> Result<Tracer> {
    let started = Instant::now();
    raise_memlock_rlimit();
    let kernel_layout = kernel_layout()?;
    let mut skipped = Vec::new();
    for &backend in opts.backend.candidates() {
        if let Some(reason) = unavailable(backend) {
            skipped.push(Skipped { backend, reason });
            continue;
        }
        match load_backend(backend, opts, &kernel_layout) {
            Ok(ebpf) => {
                return Ok(Tracer { ebpf, backend, skipped, attach_time: started.elapsed() });
            }
            Err(err) => {
                log::info!("{backend} backend: {err:#}"); // with the verifier log, for -v
                if opts.backend != BackendChoice::Auto {
                    bail!("the {backend} backend cannot load here: {}", short_reason(&err));
                }
                skipped.push(Skipped { backend, reason: short_reason(&err) });
            }
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

/// Where this kernel keeps the fields the programs read (parsed once per start).
fn kernel_layout() -> Result<tfo_trace_common::KernelLayout> {
    layout::from_btf(&btf::Btf::from_sys_fs()?)
}

/// The step that failed and the kernel's errno, without aya's verifier-log noise:
/// "loading/attaching tfo_try_fastopen_fentry (FEntry tcp_try_fastopen): EPERM".
pub fn short_reason(err: &anyhow::Error) -> String {
    let errno = err.chain().filter_map(|e| e.downcast_ref::<std::io::Error>()).find_map(|e| e.raw_os_error());
    match errno {
        Some(n) => format!("{err}: {} ({})", errno_name(n), std::io::Error::from_raw_os_error(n)),
        None => format!("{err:#}"),
    }
}

fn errno_name(n: i32) -> String {
    match n {
        libc::EPERM => "EPERM".into(),
        libc::ENOENT => "ENOENT".into(),
        libc::EACCES => "EACCES".into(),
        libc::EINVAL => "EINVAL".into(),
        libc::E2BIG => "E2BIG".into(),
        libc::EOPNOTSUPP => "EOPNOTSUPP".into(),
        524 => "ENOTSUPP".into(),
        other => format!("errno {other}"),
    }
}

fn load_backend(
    backend: Backend,
    opts: &LoadOptions,
    kernel_layout: &tfo_trace_common::KernelLayout,
) -> Result<Ebpf> {
    let mut flags = 0;
    if table::server_from_state(backend) {
        flags |= config::SERVER_FROM_STATE;
    }
    if table::hooks(backend).iter().any(|h| h.target == "tcp_fastopen_cache_set") {
        flags |= config::COOKIE_FROM_CACHE_SET;
    }
    let mut ebpf = EbpfLoader::new()
        .override_global("LAYOUT", kernel_layout, true)
        .override_global("CONFIG", &flags, true)
        .map_max_entries("EVENTS", opts.ring_buffer_bytes)
        .load(EBPF_OBJECT)
        .context("loading the eBPF object")?;
    // aya's own BTF, for the trampoline programs' target lookup.
    let aya_btf = match backend {
        Backend::Fentry => Some(Btf::from_sys_fs().context("reading kernel BTF for fentry")?),
        _ => None,
    };
    for hook in table::hooks(backend) {
        let what = format!("{} ({:?} {})", hook.program, hook.kind, hook.target);
        attach(&mut ebpf, hook, aya_btf.as_ref()).with_context(|| format!("loading/attaching {what}"))?;
    }
    Ok(ebpf)
}

fn attach(ebpf: &mut Ebpf, hook: &table::Hook, btf: Option<&Btf>) -> Result<()> {
    let program = ebpf
        .program_mut(hook.program)
        .ok_or_else(|| anyhow!("program {} missing from the eBPF object", hook.program))?;
    let btf = || btf.ok_or_else(|| anyhow!("kernel BTF not loaded"));
    match hook.kind {
        HookKind::RawTracepoint => {
            let p: &mut RawTracePoint = program.try_into()?;
            p.load()?;
            p.attach(hook.target)?;
        }
        HookKind::FEntry => {
            let p: &mut FEntry = program.try_into()?;
            p.load(hook.target, btf()?)?;
            p.attach()?;
        }
        HookKind::FExit => {
            let p: &mut FExit = program.try_into()?;
            p.load(hook.target, btf()?)?;
            p.attach()?;
        }
        HookKind::KProbe | HookKind::KRetProbe => {
            let p: &mut KProbe = program.try_into()?;
            p.load()?;
            p.attach(hook.target, 0)?;
        }
    }
    Ok(())
}

/// For `doctor`: whether each backend loads and attaches here, and what it sees.
/// Loads each one for real (then detaches it) when `try_load`, else only the static facts.
pub fn verdicts(try_load: bool) -> Vec<(Backend, Result<(), String>)> {
    let layout = kernel_layout().map_err(|e| format!("{e:#}"));
    Backend::ALL
        .iter()
        .map(|&backend| {
            let verdict = match unavailable(backend) {
                Some(reason) => Err(reason),
                None if !try_load => Err("not tried: loading needs CAP_BPF and CAP_PERFMON".into()),
                None => {
                    let opts = LoadOptions { backend: backend.into(), ring_buffer_bytes: 4096 };
                    layout.clone().and_then(|l| {
                        load_backend(backend, &opts, &l).map(drop).map_err(|e| short_reason(&e))
                    })
                }
            };
            (backend, verdict)
        })
        .collect()
}
