//! What the bench measures against what: the configurations of each round (no tracer,
//! the floor, tfo-trace's views, bpftrace) and the two kinds of connection; and the flags
//! that choose them ([`BenchArgs`]).
use std::path::PathBuf;

/// The bpftrace one-liner a user would write to count connections: one counter, bumped on
/// every TCP state change.
pub const BPFTRACE_COUNT: &str = "tracepoint:sock:inet_sock_set_state { @c = count(); }\n";
/// The bpftrace script that keeps what tfo-trace keeps, roughly: counts by state and
/// destination, and SYN retransmits by destination.
pub const BPFTRACE_KEYED: &str = "\
tracepoint:sock:inet_sock_set_state { @conns[args->newstate, ntop(args->daddr), args->dport] = count(); }
tracepoint:tcp:tcp_retransmit_skb { @rtx[ntop(args->daddr), args->dport] = count(); }
";
/// Server-side sockets' "destination" is the client's ephemeral port: room for all of them,
/// so bpftrace never pays for (or skips) a full map.
pub(super) const BPFTRACE_MAP_KEYS: &str = "262144";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Config {
    Untraced,
    Floor,
    Trace,
    /// `trace --backend tracepoint`: the state-hook path beside another backend's `trace`
    /// (the VM mode; on the host it is what `auto` picks).
    TraceStateHook,
    Top,
    Export,
    /// `top` with `--names` (off by default: its cost is shown apart from the targets').
    TopNames,
    /// No tracer, a second time in the round: what the CPU measure reads for no change.
    UntracedAgain,
    BpftraceCount,
    BpftraceKeyed,
}

impl Config {
    pub(super) const ALL: [Config; 9] = [
        Config::Untraced,
        Config::Floor,
        Config::Trace,
        Config::Top,
        Config::Export,
        Config::TopNames,
        Config::UntracedAgain,
        Config::BpftraceCount,
        Config::BpftraceKeyed,
    ];
    pub(super) const TFO_TRACE: [Config; 3] = [Config::Trace, Config::Top, Config::Export];

    pub(super) fn name(self) -> &'static str {
        match self {
            Config::Untraced => "no tracer",
            Config::Floor => "floor: empty programs on tfo-trace's tracepoints",
            Config::Trace => "tfo-trace trace > /dev/null",
            Config::TraceStateHook => "tfo-trace trace --backend tracepoint > /dev/null",
            Config::Top => "tfo-trace top --batch > /dev/null",
            Config::Export => "tfo-trace export (127.0.0.1:0)",
            Config::TopNames => "tfo-trace top --batch --names > /dev/null",
            Config::UntracedAgain => "no tracer, again (the measure against itself)",
            Config::BpftraceCount => "bpftrace `@c = count()` one-liner",
            Config::BpftraceKeyed => "bpftrace, keyed by state and destination",
        }
    }

    pub(super) fn short(self) -> &'static str {
        match self {
            Config::Untraced => "untraced",
            Config::Floor => "floor",
            Config::Trace => "trace",
            Config::TraceStateHook => "trace-tp",
            Config::Top => "top",
            Config::Export => "export",
            Config::TopNames => "top-names",
            Config::UntracedAgain => "again",
            Config::BpftraceCount => "bt-count",
            Config::BpftraceKeyed => "bt-keyed",
        }
    }

    pub(super) fn is_traced(self) -> bool {
        !matches!(self, Config::Untraced | Config::UntracedAgain)
    }

    pub(super) fn is_tfo_trace(self) -> bool {
        Config::TFO_TRACE.contains(&self) || matches!(self, Config::TopNames | Config::TraceStateHook)
    }

    pub(super) fn bpftrace_script(self) -> Option<(&'static str, usize)> {
        match self {
            Config::BpftraceCount => Some((BPFTRACE_COUNT, 1)),
            Config::BpftraceKeyed => Some((BPFTRACE_KEYED, 2)),
            _ => None,
        }
    }
}

/// What kind of connection the generator makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Mode {
    /// Closed by the client's RST (SO_LINGER 0), as every mode but [`Mode::PlainFin`].
    Plain,
    Tfo,
    /// Plain, closed by a FIN at both ends (`lab-load --fin`): `bench --vm` only.
    PlainFin,
}

impl Mode {
    pub(super) const ALL: [Mode; 2] = [Mode::Plain, Mode::Tfo];

    pub(super) fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Tfo => "TFO",
            Mode::PlainFin => "plain-fin",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Rounds of the interleaved runs (default 11, as issue 9 asks; 3 with --vm).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub rounds: Option<u32>,
    /// Seconds of load per run.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub seconds: u64,
    /// Generator threads; default: the fastest of 1, 2 and 4 on this machine.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub threads: Option<u32>,
    /// Do not wait for other engineers' qemu VMs to finish first.
    #[arg(long)]
    pub no_wait: bool,
    /// Where the Markdown report goes (relative to the workspace root).
    #[arg(long, default_value = "BENCHMARKS.md")]
    pub output: PathBuf,
    /// Measure the fentry backend in a Debian 6.12 guest under qemu instead (issue 41):
    /// run counts and BPF time beside the floor and bpftrace in the same guest; writes
    /// its own section of the --output file
    #[arg(long)]
    pub vm: bool,
    /// Measure `top` beside a namespace of 10,000 and of 100,000 TIME_WAIT sockets while
    /// 1,000 new listeners take connections (issue 55) instead: its snapshots, CPU, events
    /// lost and exit after SIGTERM; writes its own section of the --output file
    #[arg(long, conflicts_with = "vm")]
    pub busy: bool,
    /// qemu accelerator of --vm
    #[arg(long, value_enum, default_value = "tcg", requires = "vm")]
    pub accel: crate::vm::Accel,
}
