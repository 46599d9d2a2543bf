//! Loading and attaching the kernel programs: BTF layout, backend choice, fallbacks.
pub mod btf;
mod cast;
#[cfg(feature = "fixtures")]
pub mod floor;
pub mod layout;
mod refusal;
mod verifier;

use std::{
    os::fd::AsFd as _,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context as _, Result};
use aya::{
    programs::{BtfTracePoint, FEntry, FExit, KProbe, RawTracePoint},
    Btf, Ebpf, EbpfLoader,
};
use tfo_trace_common::config;

pub use crate::backends::Backend;
pub(crate) use crate::backends::BackendChoice;
use crate::backends::{self, HookKind};
use cast::TcpSockCast;
pub(crate) use refusal::short_reason;
use refusal::{backend_refused, errno_of};
pub(crate) use verifier::Verified;
pub use verifier::VERIFIER_INSN_LIMIT;
use verifier::{largest_verification, prog_info, verified};

/// The eBPF object, built by build.rs and embedded: one binary is all a host needs.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tfo-trace"));

pub(crate) const DEFAULT_RING_BUFFER_BYTES: u32 = 1 << 20;
/// The largest `--ring-buffer-size`: about two million events, minutes of a busy host's
/// TFO connections unread. The kernel maps a ring buffer twice over into the reader's
/// memory and its pages are never swapped: 1 GiB took 4.7 s to attach and 2.1 GB of
/// resident memory, for a reader that falls that far behind anyway.
pub(crate) const MAX_RING_BUFFER_BYTES: u32 = 256 << 20;

#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub backend: BackendChoice,
    pub(crate) ring_buffer_bytes: u32,
    /// Count outcomes in the kernel, and send only refused SYN-data as events (an exporter
    /// without per-destination series needs only their causes).
    pub(crate) refusal_events_only: bool,
    /// Where the kernel's struct layouts come from: its own BTF by default.
    pub btf: Option<std::path::PathBuf>,
    /// What to trace, decided in the kernel.
    pub filter: tfo_trace_common::Filter,
    /// The cgroup directories `filter.n_cgroups` counts, for the kernel's cgroup array.
    pub cgroups: Vec<std::path::PathBuf>,
    /// `--names`: read every namespace's DNS answers and name destinations by them.
    pub names: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            backend: BackendChoice::Auto,
            ring_buffer_bytes: DEFAULT_RING_BUFFER_BYTES,
            refusal_events_only: false,
            btf: None,
            filter: tfo_trace_common::Filter::none(),
            cgroups: Vec::new(),
            names: false,
        }
    }
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
    /// Whether the cgroup hooks attached (containers named from their first event), or
    /// why not (named by walking the hierarchy, up to 2 s late).
    pub cgroup_hooks: Result<(), String>,
    /// From the start of `load` to the last program attached.
    pub(crate) attach_time: Duration,
    /// The backend's programs attached (of its table's hooks, those this kernel gets).
    pub(crate) programs_attached: usize,
    /// The key the programs hash cookies with (`tfo_trace_common::cookie_hash`), made for
    /// this run and never written anywhere: userspace hashes the cookie cache with it.
    pub(crate) cookie_key: [u64; 2],
}

/// The kernel's own statistics of the attached programs, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RunStats {
    /// Runs and their time, where kernel.bpf_stats_enabled is on (0 otherwise).
    pub runs: u64,
    pub(crate) run_time_ns: u64,
    /// Runs the kernel skipped because the same program was already running on that CPU
    /// (a tracepoint hit from an interrupt while the program ran): outcomes neither counted
    /// nor sent. Reported, never silent.
    pub(crate) missed: u64,
}

impl Tracer {
    pub(crate) fn run_stats(&self) -> RunStats {
        let mut total = RunStats::default();
        for (_, program) in self.ebpf.programs() {
            let Ok(fd) = program.fd() else { continue };
            if let Some(info) = prog_info(fd.as_fd()) {
                total.runs += info.run_cnt;
                total.run_time_ns += info.run_time_ns;
                total.missed += info.recursion_misses;
            }
        }
        total
    }
}

/// Why `backend` cannot be used here, before trying to load anything (the kernel lacks
/// what it needs: a fact, not a refusal); None if it may.
pub fn unavailable(backend: Backend) -> Option<String> {
    match backend {
        Backend::Fentry | Backend::Tracepoint if !Path::new(btf::KERNEL_BTF).exists() => {
            Some(format!("BTF-typed hooks need kernel BTF ({})", btf::KERNEL_BTF))
        }
        Backend::Kprobe if !crate::kernel::kallsyms::kprobes_available() => {
            Some("this kernel has no kprobes (CONFIG_KPROBES off)".into())
        }
        _ => None,
    }
}

pub fn load(opts: &LoadOptions) -> Result<Tracer> {
    let started = Instant::now();
    raise_memlock_rlimit();
    let kernel = kernel_facts(opts.btf.as_deref())?;
    let cookie_key = random_key();
    let mut skipped = Vec::new();
    for &backend in opts.backend.candidates() {
        if let Some(reason) = unavailable(backend) {
            if opts.backend != BackendChoice::Auto {
                bail!("the {backend} backend cannot load here: {reason}");
            }
            skipped.push(Skipped { backend, reason });
            continue;
        }
        match load_backend(backend, opts, &kernel, cookie_key) {
            Ok((mut ebpf, _)) => {
                let l = &kernel.layout;
                let cgroup_hooks = if opts.refusal_events_only {
                    Err("not needed: only refused SYN-data is sent, and export names no container".into())
                } else if [l.cgroup_kn, l.cgroup_root, l.kernfs_node_id, l.cgroup_root_hierarchy_id]
                    .iter()
                    .any(|f| f.present == 0)
                {
                    Err("this kernel's BTF lacks struct cgroup's kn/root or their id fields".into())
                } else {
                    attach_cgroup_hooks(&mut ebpf)
                };
                return Ok(Tracer {
                    ebpf,
                    backend,
                    skipped,
                    cgroup_hooks,
                    attach_time: started.elapsed(),
                    programs_attached: kernel.hooks(backend).len(),
                    cookie_key,
                });
            }
            Err(err) => {
                log::info!("{backend} backend: {err:#}"); // with the verifier log, for -v
                if opts.backend != BackendChoice::Auto {
                    bail!("the {backend} backend cannot load here: {}", backend_refused(backend, &err));
                }
                skipped.push(Skipped { backend, reason: backend_refused(backend, &err) });
            }
        }
    }
    let reasons: Vec<String> = skipped.iter().map(|s| format!("{}: {}", s.backend, s.reason)).collect();
    bail!("no tracing backend could be loaded ({})", reasons.join("; "))
}

/// 128 random bits from the kernel (getrandom): the cookie-hash key of one run.
fn random_key() -> [u64; 2] {
    let mut key = [0u64; 2];
    // SAFETY: getrandom writes at most the 16 bytes of `key`, which it is given.
    let n = unsafe { libc::getrandom(key.as_mut_ptr().cast(), std::mem::size_of_val(&key), 0) };
    if n != std::mem::size_of_val(&key) as isize {
        // Without entropy (never on a booted kernel), a key from the clock still differs
        // per run: the hashes only have to be unguessable from a recording.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        key = [now.as_nanos() as u64, u64::from(std::process::id()) << 32 | now.subsec_nanos() as u64];
    }
    key
}

fn raise_memlock_rlimit() {
    let unlimited = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: setrlimit reads a valid struct; failure is harmless on kernels >= 5.11,
    // which account BPF memory to the cgroup instead.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
}

/// What the programs are told about this kernel before load, from one parse of its BTF.
#[derive(Clone)]
struct KernelFacts {
    /// Where this kernel keeps the fields the programs read.
    layout: tfo_trace_common::KernelLayout,
    cast: TcpSockCast,
    /// The functions hooks attach to that this kernel has (BTF FUNC), of any backend: which
    /// of [`backends::attached_here`]'s alternatives it gets.
    functions: Vec<&'static str>,
}

impl KernelFacts {
    /// The hooks of `backend` this kernel gets, in the table's order.
    fn hooks(&self, backend: Backend) -> Vec<backends::Hook> {
        let has = |f: &str| self.functions.contains(&f);
        backends::hooks(backend).iter().filter(|h| backends::attached_here(h, has)).copied().collect()
    }
}

/// From the kernel's own BTF, or from `--btf FILE`: the layout then comes from the file, and
/// the cast is the helper, since the kfunc needs type ids of the kernel's own BTF.
fn kernel_facts(file: Option<&Path>) -> Result<KernelFacts> {
    let (btf, own) = match file {
        Some(f) => (btf::Btf::from_file(f)?, false),
        None => (btf::Btf::from_sys_fs()?, true),
    };
    let cast = if own { TcpSockCast::for_kernel(&btf) } else { TcpSockCast::Helper };
    let functions = Backend::ALL
        .iter()
        .flat_map(|b| backends::hooks(*b))
        .map(|h| h.target)
        .filter(|f| btf.func_id(f).is_some())
        .collect();
    Ok(KernelFacts { layout: layout::from_btf(&btf)?, cast, functions })
}

/// Loads and attaches `backend` with the kernel's cheapest socket cast; with the helper
/// where the kfunc does not load (a kernel that has bpf_rdonly_cast but refuses it here),
/// unless the kernel refused the backend itself (EPERM: fentry on some kernels). Returns
/// the cast it loaded with.
fn load_backend(
    backend: Backend,
    opts: &LoadOptions,
    kernel: &KernelFacts,
    cookie_key: [u64; 2],
) -> Result<(Ebpf, TcpSockCast)> {
    let hooks = kernel.hooks(backend);
    match load_backend_with(backend, &hooks, opts, &kernel.layout, kernel.cast, cookie_key) {
        Err(err) if kernel.cast != TcpSockCast::Helper && errno_of(&err) != Some(libc::EPERM) => {
            log::info!("{backend} backend with the {}: {err:#}; trying the helper", kernel.cast.name());
            load_backend_with(backend, &hooks, opts, &kernel.layout, TcpSockCast::Helper, cookie_key)
                .map(|e| (e, TcpSockCast::Helper))
        }
        loaded => loaded.map(|e| (e, kernel.cast)),
    }
}

/// How a backend that loaded reads a `struct tcp_sock`, for `doctor`: the typed backends
/// cast a socket with the kfunc (6.2+) or fall back to the helper, and say why.
fn cast_note(backend: Backend, cast: TcpSockCast) -> String {
    if !backends::uses_btf(backend) {
        return "probe reads (bpf_probe_read_kernel): no socket cast".into();
    }
    match cast {
        TcpSockCast::Kfunc { .. } => format!("socket cast: {}", cast.name()),
        TcpSockCast::Helper => format!(
            "socket cast: {} (a helper call per state change a handler reads; the kfunc \
             bpf_rdonly_cast is 6.2+ and not usable here)",
            cast.name()
        ),
    }
}

fn load_backend_with(
    backend: Backend,
    hooks: &[backends::Hook],
    opts: &LoadOptions,
    kernel_layout: &tfo_trace_common::KernelLayout,
    cast: TcpSockCast,
    cookie_key: [u64; 2],
) -> Result<Ebpf> {
    let mut flags = 0;
    if backends::server_from_state(backend) {
        flags |= config::SERVER_FROM_STATE;
    }
    if backends::sees_synack(backend) {
        flags |= config::COOKIE_FROM_CACHE_SET;
    }
    if opts.refusal_events_only {
        flags |= config::REFUSAL_EVENTS_ONLY;
    }
    // Refusals alone are rare, but come in bursts (a fleet without a shared key refuses
    // every SYN-data): room for some hundreds between two reads.
    let ring_bytes = if opts.refusal_events_only { 64 * 1024 } else { opts.ring_buffer_bytes };
    // The reader is woken once 1/4 of the ring holds unread events (maps::emit_with):
    // each wakeup costs the reader a context switch (measured on a 2-core VM: 1/16 put
    // `trace` at 0.61-0.65 CPU-s per million events, 1/4 at 0.43-0.49), and 3/4 of the
    // ring is still left for the time it takes to be scheduled. Lone events wait at most
    // the reader's 100 ms poll.
    let wakeup_bytes = u64::from(ring_bytes) / 4;
    let tcp_sock_btf_id = cast.tcp_sock_btf_id();
    // 0 where not found: the events of a blackhole pause then say its count, not its age.
    let hz = crate::kernel::jiffies::hz().unwrap_or(0);
    let mut loader = EbpfLoader::new();
    loader
        .override_global("LAYOUT", kernel_layout, true)
        .override_global("CONFIG", &flags, true)
        .override_global("FILTER", &opts.filter, true)
        .override_global("WAKEUP_BYTES", &wakeup_bytes, true)
        .override_global("TCP_SOCK_BTF_ID", &tcp_sock_btf_id, true)
        .override_global("COOKIE_KEY", &cookie_key, true)
        .override_global("HZ", &hz, true)
        .map_max_entries("EVENTS", ring_bytes);
    let (object, casts) = cast::patch(EBPF_OBJECT, cast)?;
    log::debug!("{backend} backend: {casts} socket casts as the {}", cast.name());
    let mut ebpf = loader.load(object.bytes()).context("loading the eBPF object")?;
    fill_cgroup_filter(&mut ebpf, &opts.cgroups)?;
    prefill_listeners(&mut ebpf, opts)?;
    attach_all(&mut ebpf, hooks)?;
    Ok(ebpf)
}

/// `--cgroup` directories into the programs' cgroup array, before anything attaches.
fn fill_cgroup_filter(ebpf: &mut Ebpf, dirs: &[std::path::PathBuf]) -> Result<()> {
    if dirs.is_empty() {
        return Ok(());
    }
    let map = ebpf.map_mut("CGROUP_FILTER").ok_or_else(|| anyhow!("CGROUP_FILTER map missing"))?;
    let mut array = aya::maps::CgroupArray::try_from(map).context("opening the CGROUP_FILTER map")?;
    for (i, dir) in dirs.iter().enumerate() {
        let f = std::fs::File::open(dir).with_context(|| format!("opening cgroup {}", dir.display()))?;
        array.set(i as u32, f, 0).with_context(|| format!("--cgroup {}", dir.display()))?;
    }
    Ok(())
}

/// The owners of listeners opened before we attach, into the kernel's LISTENERS table
/// (the programs learn the others at listen()): server events then name their process and
/// cgroup, and process filters can select them, from the first SYN.
fn prefill_listeners(ebpf: &mut Ebpf, opts: &LoadOptions) -> Result<()> {
    use tfo_trace_common::{ListenerKey, ProcInfo, TASK_COMM_LEN};
    let map = ebpf.map_mut("LISTENERS").ok_or_else(|| anyhow!("LISTENERS map missing"))?;
    let mut table: aya::maps::HashMap<_, ListenerKey, ProcInfo> =
        aya::maps::HashMap::try_from(map).context("opening the LISTENERS map")?;
    let root = crate::kernel::cgroup::v2_mount();
    // The process filters as the kernel decides them at listen().
    let filter = crate::filter::EventFilter::new(opts.filter, &opts.cgroups);
    for l in crate::kernel::listeners::every_listener_owner() {
        let cgroup_dir = root.as_ref().zip(l.cgroup.as_ref()).map(|(r, p)| r.join(p.trim_start_matches('/')));
        let cgroup_id = cgroup_dir.as_ref().and_then(|d| std::fs::metadata(d).ok()).map_or(0, |m| {
            use std::os::unix::fs::MetadataExt as _;
            m.ino()
        });
        let mut comm = [0u8; TASK_COMM_LEN];
        let n = l.comm.len().min(TASK_COMM_LEN - 1);
        comm[..n].copy_from_slice(&l.comm.as_bytes()[..n]);
        let name = String::from_utf8_lossy(&comm[..n]);
        // The thread that called listen() is not known here: the process's name stands for it.
        let selected = filter.process_selected(l.pid, &name, None, l.cgroup.as_deref());
        let family = if l.addr.is_ipv4() { tfo_trace_common::FAMILY_V4 } else { tfo_trace_common::FAMILY_V6 };
        let key = ListenerKey::new(l.netns, l.port, family);
        let owner = ProcInfo { pid: l.pid, selected: u32::from(selected), comm, cgroup_id, thread: comm };
        // A full table (16,384 listeners) keeps the first ones: the rest are named in
        // userspace, as before.
        let _ = table.insert(key, owner, 0);
    }
    Ok(())
}

/// (netns, pid) of each listener's owner the kernel's LISTENERS table knows (those the
/// programs saw call listen(), and those found before attach): processes the kernel itself
/// placed in a namespace, which names namespaces this user may not look into.
pub(crate) fn listener_owners(ebpf: &Ebpf) -> Vec<(u32, u32)> {
    use tfo_trace_common::{ListenerKey, ProcInfo};
    let Some(map) = ebpf.map("LISTENERS") else { return Vec::new() };
    let Ok(table) = aya::maps::HashMap::<_, ListenerKey, ProcInfo>::try_from(map) else { return Vec::new() };
    table.iter().filter_map(Result::ok).filter(|(_, o)| o.pid != 0).map(|(k, o)| (k.netns, o.pid)).collect()
}

/// aya's parse of the kernel's BTF, for the typed programs' target lookup: once per process.
/// A parse is about 145 million instructions (some 2 s in an emulated guest), and the
/// backend's hooks, the cgroup hooks and `doctor`'s loads of each backend all need it.
fn aya_kernel_btf() -> Result<&'static Btf> {
    static PARSED: std::sync::OnceLock<Btf> = std::sync::OnceLock::new();
    if let Some(btf) = PARSED.get() {
        return Ok(btf);
    }
    let btf = Btf::from_sys_fs().context("reading kernel BTF")?;
    Ok(PARSED.get_or_init(|| btf))
}

/// Loads and attaches `hooks` of an object already loaded, each step named on error.
fn attach_all(ebpf: &mut Ebpf, hooks: &[backends::Hook]) -> Result<()> {
    let needs_btf =
        hooks.iter().any(|h| matches!(h.kind, HookKind::BtfTracepoint | HookKind::FEntry | HookKind::FExit));
    let aya_btf = if needs_btf { Some(aya_kernel_btf()?) } else { None };
    for hook in hooks {
        let what = format!("{} ({:?} {})", hook.program, hook.kind, hook.target);
        let started = Instant::now();
        attach(ebpf, hook, aya_btf).with_context(|| format!("loading/attaching {what}"))?;
        // The verifier's time is most of a slow start (older kernels, emulated guests).
        let walked = verified(ebpf, hook.program)
            .map(|v| format!(", {} instructions verified", v.instructions))
            .unwrap_or_default();
        log::debug!("{what}: loaded and attached in {} ms{walked}", started.elapsed().as_millis());
    }
    Ok(())
}

/// The cgroup hooks ([`backends::cgroup_hooks`]), after the backend's: a kernel that refuses
/// them (or lacks the `struct cgroup` members they read) loses only the immediacy of
/// container names, so the reason is returned, not raised.
fn attach_cgroup_hooks(ebpf: &mut Ebpf) -> Result<(), String> {
    let attached = attach_all(ebpf, backends::cgroup_hooks()).map_err(|e| short_reason(&e));
    if let Err(why) = &attached {
        log::info!("cgroup hooks: {why}; containers are named by walking the cgroup hierarchy");
    }
    attached
}

fn attach(ebpf: &mut Ebpf, hook: &backends::Hook, btf: Option<&Btf>) -> Result<()> {
    let program = ebpf
        .program_mut(hook.program)
        .ok_or_else(|| anyhow!("program {} missing from the eBPF object", hook.program))?;
    let btf = || btf.ok_or_else(|| anyhow!("kernel BTF not loaded"));
    match hook.kind {
        HookKind::BtfTracepoint => {
            let p: &mut BtfTracePoint = program.try_into()?;
            p.load(hook.target, btf()?)?;
            p.attach()?;
        }
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

/// A backend that loaded, for `doctor`.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// How it reads the kernel (its socket cast).
    pub how: String,
    /// Its program the verifier worked hardest on, where the kernel reports it (5.16+):
    /// how close this kernel came to refusing it.
    pub largest: Option<Verified>,
}

/// For `doctor`: whether each backend loads and attaches here (and how: its socket cast),
/// or why not. Loads each one for real (then detaches it) when `try_load`, else only the
/// static facts.
pub fn verdicts(try_load: bool) -> Vec<(Backend, Result<Loaded, String>)> {
    let kernel = kernel_facts(None).map_err(|e| format!("{e:#}"));
    Backend::ALL
        .iter()
        .map(|&backend| {
            let verdict = match unavailable(backend) {
                Some(reason) => Err(reason),
                None if !try_load => Err("not tried: loading needs CAP_BPF and CAP_PERFMON".into()),
                None => {
                    // With events, as `trace` loads it: what the verifier walks is the
                    // tracer's (counts only prunes the events' paths). A one-page ring,
                    // which nothing reads in the moment the programs are attached.
                    let opts = LoadOptions {
                        backend: backend.into(),
                        ring_buffer_bytes: 4096,
                        ..LoadOptions::default()
                    };
                    kernel.clone().and_then(|k| {
                        load_backend(backend, &opts, &k, random_key())
                            .map(|(ebpf, cast)| Loaded {
                                how: cast_note(backend, cast),
                                largest: largest_verification(&ebpf, backends::hooks(backend)),
                            })
                            .map_err(|e| backend_refused(backend, &e))
                    })
                }
            };
            (backend, verdict)
        })
        .collect()
}

/// Loads the `tfo_dns_answers` socket filter (`--names`): its fd, for the packet sockets
/// `names/` opens in each namespace.
pub(crate) fn load_dns_filter(ebpf: &mut Ebpf) -> Result<std::os::fd::OwnedFd> {
    let program: &mut aya::programs::SocketFilter = ebpf
        .program_mut("tfo_dns_answers")
        .ok_or_else(|| anyhow!("the tfo_dns_answers program is missing"))?
        .try_into()
        .context("tfo_dns_answers is not a socket filter")?;
    program.load().context("--names: loading the DNS answers' socket filter")?;
    let fd = program.fd().context("--names: the socket filter's fd")?;
    fd.as_fd().try_clone_to_owned().context("--names: duplicating the socket filter's fd")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every program the table names (and, with the `fixtures` feature, the floor's) is in
    /// the embedded object (a rename on one side only would otherwise show up as a load
    /// error on some backend).
    #[test]
    fn every_program_the_table_names_is_in_the_object() {
        let obj = aya_obj::Object::parse(EBPF_OBJECT).expect("the embedded eBPF object parses");
        let names = backends::all_programs();
        #[cfg(feature = "fixtures")]
        let names = names.chain(Backend::ALL.iter().flat_map(|b| floor::hooks(*b)).map(|h| h.program));
        for name in names {
            assert!(obj.programs.contains_key(name), "program {name} is not in the eBPF object");
        }
    }

    /// The object's `LAYOUT` (the programs' view of `KernelLayout`, as its BTF records it)
    /// has every field of userspace's, at the same place and nothing more: the table both
    /// are made from (`tfo_trace_common::kernel_structs!`) is the one the object was built
    /// from, so each field userspace finds in BTF is the one the programs read.
    #[test]
    fn the_object_reads_the_layout_userspace_writes() {
        use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
        let elf = object::File::parse(EBPF_OBJECT).expect("the embedded eBPF object parses");
        let layout = elf.symbols().find(|s| s.name() == Ok("LAYOUT")).expect("a LAYOUT symbol");
        assert_eq!(layout.size() as usize, std::mem::size_of::<tfo_trace_common::KernelLayout>());
        let section = elf.section_by_name(".BTF").expect("the object's BTF");
        let btf = btf::Btf::parse(section.data().unwrap()).expect("the object's BTF parses");
        for (i, spec) in tfo_trace_common::KernelLayout::FIELDS.iter().enumerate() {
            let member = btf.member("KernelLayout", spec.name);
            let at = member.map(|m| m.bit_offset / 8);
            assert_eq!(at, Some(i as u32 * 8), "{} in the object's KernelLayout", spec.name);
        }
    }
}
