//! The command line as clap parses it: flags, subcommands, their help, and the checks
//! clap cannot make value by value. What the flags mean for the stages below is
//! `options.rs`.
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::{
    probes::{BackendChoice, DEFAULT_RING_BUFFER_BYTES, MAX_RING_BUFFER_BYTES},
    units::{parse_duration, parse_moment, parse_size},
};

/// Where `tfo-trace export` serves /metrics unless told otherwise. The port is outside
/// every port on Prometheus' list of default port allocations (its 9100-9999 range is full
/// and new exporters get 10000 upwards) and the defaults of the eBPF agents a node also
/// runs (the port used before is Cloudflare's ebpf_exporter's), and below the kernel's
/// ephemeral ports (net.ipv4.ip_local_port_range, 32768-60999), so no outgoing connection
/// holds it: docs/export.md, CHANGELOG.md.
pub const DEFAULT_EXPORT_LISTEN: &str = "127.0.0.1:17413";

#[derive(Parser, Debug)]
#[command(
    name = "tfo-trace",
    version,
    long_version = crate::build_info::LONG_VERSION,
    about = "eBPF tracer for TCP Fast Open (RFC 7413)"
)]
pub struct Cli {
    /// More diagnostics on stderr (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print one line per TFO connection outcome as it happens.
    Trace(TraceArgs),
    /// Only the connections that stalled (lost time to a SYN timeout), with the cause and a
    /// summary by destination at exit.
    Stalls(TraceArgs),
    /// Live tables per destination, listener, process and container (a terminal UI; plain
    /// rows or JSON lines when stdout is not a terminal or with --batch / --json).
    Top(TopArgs),
    /// A summary, then destinations (or networks, ports, processes, containers) ranked by
    /// time lost, and listeners, each with a verdict and its evidence; live (`--duration`)
    /// or from one or several hosts' recordings (`--from FILE|DIR`, repeatable).
    Report(ReportArgs),
    /// Check this kernel and host for TFO tracing: hooks, backends, sysctls, advice.
    Doctor(DoctorArgs),
    /// Serve TFO metrics for Prometheus on /metrics, and/or write them for node_exporter's
    /// textfile collector.
    Export(ExportArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print a manual page (roff): tfo-trace(1), or a subcommand's; `--dir` writes them all.
    Man(ManArgs),
    /// Run the built-in lab (namespaces, TFO server, clients, a middlebox) and trace it.
    Demo(DemoArgs),
    // The demo's lab peers: `tfo-trace demo` runs this binary as its own children in the
    // lab's namespaces, so the tracer sees their real pids (the tests run them the same way).
    /// The demo lab's TFO server.
    #[command(hide = true)]
    LabServer(crate::lab::traffic::ServerArgs),
    /// The demo lab's TFO clients.
    #[command(hide = true)]
    LabClient(crate::lab::traffic::ClientArgs),
    /// TFO connection-rate generator for `cargo xtask bench` (listener + clients, loopback).
    #[cfg(feature = "fixtures")]
    #[command(hide = true)]
    LabLoad(crate::lab::load::LoadArgs),
    /// Long mixed lab traffic under `top` and `export`, for `cargo xtask soak`.
    #[cfg(feature = "fixtures")]
    #[command(hide = true)]
    LabSoak(crate::lab::soak::SoakArgs),
    /// Empty programs on a backend's tracepoints, for `cargo xtask bench`: the cost of the
    /// attach points themselves, which the real programs are measured against.
    #[cfg(feature = "fixtures")]
    #[command(hide = true)]
    Floor(FloorArgs),
}

#[cfg(feature = "fixtures")]
#[derive(Args, Debug)]
pub struct FloorArgs {
    /// `tracepoint` (tp_btf) or `raw-tracepoint` attach points.
    #[arg(long, value_enum, default_value_t = BackendChoice::Tracepoint)]
    pub backend: BackendChoice,
    /// Stop after this long; default: until SIGINT, SIGTERM or SIGHUP.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
}

impl Cli {
    /// The probe flags of the subcommand, where it traces.
    pub(crate) fn probe_args(&self) -> Option<&ProbeArgs> {
        match &self.command {
            Command::Trace(a) | Command::Stalls(a) => Some(&a.probe),
            Command::Top(a) => Some(&a.probe),
            Command::Report(a) => Some(&a.probe),
            Command::Export(a) => Some(&a.probe),
            Command::Demo(a) => Some(&a.probe),
            _ => None,
        }
    }

    fn probe_args_mut(&mut self) -> Option<&mut ProbeArgs> {
        match &mut self.command {
            Command::Trace(a) | Command::Stalls(a) => Some(&mut a.probe),
            Command::Top(a) => Some(&mut a.probe),
            Command::Report(a) => Some(&mut a.probe),
            Command::Export(a) => Some(&mut a.probe),
            Command::Demo(a) => Some(&mut a.probe),
            _ => None,
        }
    }

    /// Whether the subcommand reads recordings (`--from`) rather than tracing.
    fn replays(&self) -> bool {
        match &self.command {
            Command::Top(a) => a.from.is_some(),
            Command::Report(a) => !a.from.is_empty(),
            Command::Trace(a) | Command::Stalls(a) => !a.from.is_empty(),
            _ => false,
        }
    }

    /// The recordings `--from` names and the window, where the subcommand replays.
    fn replayed(&self) -> Option<(&[std::path::PathBuf], &WindowArgs)> {
        match &self.command {
            Command::Report(a) => Some((&a.from, &a.window)),
            Command::Trace(a) | Command::Stalls(a) => Some((&a.from, &a.window)),
            _ => None,
        }
    }

    /// The visible subcommands' names, in the order `--help` lists them: the manual's
    /// pages (`views::man`).
    pub(crate) fn visible_subcommands() -> Vec<String> {
        use clap::CommandFactory as _;
        Cli::command()
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name().to_string())
            .collect()
    }

    /// The command line a user may type: the hidden helpers (the demo's lab-server and
    /// lab-client; with `fixtures`, lab-load, lab-soak and floor) left out, for the completion scripts (clap_complete lists hidden subcommands).
    pub fn visible_command() -> clap::Command {
        use clap::CommandFactory as _;
        let full = Cli::command();
        let mut visible = clap::Command::new("tfo-trace")
            .version(env!("CARGO_PKG_VERSION"))
            .args(full.get_arguments().filter(|a| !a.is_hide_set()).cloned())
            .subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        if let Some(about) = full.get_about() {
            visible = visible.about(about.clone());
        }
        visible
    }

    /// What clap cannot check value by value (how often a filter is given), as clap's own
    /// usage error: its message format, exit 2.
    pub fn parse_checked() -> Cli {
        use clap::{CommandFactory as _, FromArgMatches as _};
        let matches = Cli::command().get_matches();
        let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        // A replay traces nothing: the kernel side's flags given with --from do nothing
        // (--names too: a recording carries the names its host learnt).
        if let Some((_, sub)) =
            matches.subcommand().filter(|(name, _)| ["report", "top", "trace", "stalls"].contains(name))
        {
            let given = |id: &str| sub.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
            if given("from") {
                if let Some(flag) =
                    ["backend", "ring_buffer_size", "btf", "names"].into_iter().find(|id| given(id))
                {
                    let msg = format!(
                        "--{} does nothing with --from: a recording is read, nothing is traced",
                        flag.replace('_', "-")
                    );
                    Cli::command().error(clap::error::ErrorKind::ArgumentConflict, msg).exit();
                }
            }
        }
        if let Some(msg) = cli.probe_args().and_then(|p| p.filter.too_many()) {
            Cli::command().error(clap::error::ErrorKind::TooManyValues, msg).exit();
        }
        // A live run's namespaces are today's: a name as /run/netns has it now, an inode
        // that some namespace has (a replay's are the recording's).
        if !cli.replays() {
            if let Some(p) = cli.probe_args_mut() {
                if let Err(msg) = p.filter.resolve_live() {
                    Cli::command().error(clap::error::ErrorKind::InvalidValue, msg).exit();
                }
            }
            if let Some(msg) = cli.probe_args().and_then(|p| p.filter.netns_gone()) {
                Cli::command().error(clap::error::ErrorKind::InvalidValue, msg).exit();
            }
        }
        if let Some((from, window)) = cli.replayed() {
            // A folder that cannot be read is the run's error (exit 1), said there.
            let named = crate::events::record::recordings_named(from).unwrap_or_default();
            if let Some(msg) = crate::events::record::given_twice(&named) {
                Cli::command().error(clap::error::ErrorKind::ArgumentConflict, msg).exit();
            }
            if let (Some(since), Some(until)) = (window.since, window.until) {
                if since >= until {
                    let msg = format!(
                        "--since {} is not before --until {}: the window holds nothing",
                        crate::events::rfc3339(since),
                        crate::events::rfc3339(until)
                    );
                    Cli::command().error(clap::error::ErrorKind::ArgumentConflict, msg).exit();
                }
            }
        }
        if let Command::Man(ManArgs { command: Some(name), .. }) = &cli.command {
            let pages = Cli::visible_subcommands();
            if !pages.contains(name) {
                let msg = format!("no manual page for `{name}`; pages: {}", pages.join(", "));
                Cli::command().error(clap::error::ErrorKind::InvalidValue, msg).exit();
            }
        }
        cli
    }
}

#[derive(Args, Debug, Clone)]
pub struct ProbeArgs {
    /// Which kernel hooks to use; `auto` picks the richest that loads and says why.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Size of the event ring buffer in bytes: a power of two (the kernel's rule), from 4096
    /// (one page) to 268435456 (256 MiB).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_RING_BUFFER_BYTES, value_parser = parse_ring_size)]
    pub(crate) ring_buffer_size: u32,
    /// Struct layouts from this BTF file instead of the kernel's own (a kernel without
    /// /sys/kernel/btf/vmlinux: BTFHub or `pahole -J`; only the raw-tracepoint and kprobe
    /// backends can run there).
    #[arg(long, value_name = "FILE")]
    pub btf: Option<std::path::PathBuf>,
    /// Name destinations by the DNS answers their namespace received (A and AAAA, the name
    /// asked for before any CNAME; kept for the TTL plus 5 s). Off by default: a socket
    /// filter then runs on every packet each namespace receives (see BENCHMARKS.md).
    #[arg(long)]
    pub names: bool,
    #[command(flatten)]
    pub filter: crate::filter::FilterArgs,
}

/// `--since` and `--until`: the window of a replay's events (`--from`).
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct WindowArgs {
    /// With --from: only the events since WHEN: a duration back from now (1h, 30m, 2d) or a
    /// time (2026-12-03T03:12:00Z, 2026-12-03T04:12:00+01:00, `2026-12-03 03:12`, or 03:12
    /// for its last occurrence; without an offset, UTC, as tfo-trace prints every time).
    #[arg(long, value_name = "WHEN", value_parser = parse_moment_now, requires = "from")]
    pub(crate) since: Option<u128>,
    /// With --from: only the events before WHEN (as --since).
    #[arg(long, value_name = "WHEN", value_parser = parse_moment_now, requires = "from")]
    pub(crate) until: Option<u128>,
}

/// [`parse_moment`] from now.
fn parse_moment_now(s: &str) -> Result<u128, String> {
    parse_moment(s, crate::units::now_unix_ns())
}

/// How a live view says, when it stops, what it saw and what went missing.
#[derive(Args, Debug, Clone, Copy)]
pub struct SummaryArgs {
    /// Say the closing summary (events, losses, what the kernel counted) on stderr as one
    /// JSON object instead of sentences, and keep the text output.
    #[arg(long)]
    pub(crate) json_summary: bool,
}

#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// One JSON object per line instead of text columns (and the closing summary as JSON).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub summary: SummaryArgs,
    /// Stop after this long (e.g. 30s, 5m); default: until Ctrl-C.
    #[arg(long, value_parser = parse_duration, conflicts_with = "from")]
    pub duration: Option<Duration>,
    /// Also write every event to FILE (JSON lines after a header, mode 0600) for
    /// `tfo-trace report --from FILE`.
    #[arg(long, value_name = "FILE", conflicts_with = "from")]
    pub record: Option<std::path::PathBuf>,
    /// With --record: replace FILE if it exists (a symbolic link is never followed).
    #[arg(long, requires = "record")]
    pub force: bool,
    /// Read recordings instead of tracing live: files made with `--record`, a flight
    /// recorder's directory (`export --flight-recorder DIR`), or a folder of them; repeat
    /// it for several, read one after another.
    #[arg(long, value_name = "FILE|DIR")]
    pub from: Vec<std::path::PathBuf>,
    #[command(flatten)]
    pub window: WindowArgs,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// Trace live for this long (e.g. 30s), then report; default: until Ctrl-C.
    #[arg(long, value_parser = parse_duration, conflicts_with = "from")]
    pub duration: Option<Duration>,
    /// Report on recordings made with `--record FILE`, or a flight recorder's directory
    /// (`export --flight-recorder DIR`: one recording), instead of tracing live. Repeat it,
    /// or name a folder (every recording in it), to merge several hosts' recordings into
    /// one report with a per-host breakdown of each verdict.
    #[arg(long, value_name = "FILE|DIR")]
    pub from: Vec<std::path::PathBuf>,
    #[command(flatten)]
    pub window: WindowArgs,
    /// Output: aligned text, JSON (the scripting contract), or Markdown for a ticket.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
    /// Client-side rows: one per destination, or per network prefix (a middlebox in front
    /// of a whole network is one verdict), destination port, process, container, or DNS name
    /// (`--names`, or a recording made with it: one verdict per name, its addresses as
    /// evidence; a connection without a name keeps its destination's row, none is dropped).
    #[arg(long, value_enum, default_value_t = crate::aggregation::report::grouping::GroupBy::Destination)]
    pub group_by: crate::aggregation::report::grouping::GroupBy,
    /// With `--group-by prefix`: the IPv4 prefix length.
    #[arg(long, value_name = "BITS", default_value_t = crate::aggregation::report::grouping::DEFAULT_PREFIX_V4,
          value_parser = clap::value_parser!(u8).range(0..=32))]
    pub(crate) prefix_v4: u8,
    /// With `--group-by prefix`: the IPv6 prefix length.
    #[arg(long, value_name = "BITS", default_value_t = crate::aggregation::report::grouping::DEFAULT_PREFIX_V6,
          value_parser = clap::value_parser!(u8).range(0..=128))]
    pub(crate) prefix_v6: u8,
    /// Show the N rows that lost the most time; the rest are summed in one line.
    #[arg(long, value_name = "N", default_value_t = crate::aggregation::report::DEFAULT_TOP,
          conflicts_with = "all")]
    pub top: usize,
    /// Show every row.
    #[arg(long)]
    pub all: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    Text,
    Json,
    Markdown,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// Refresh interval, like top's -d (e.g. 1, 0.5, 2s).
    #[arg(short = 'd', long = "delay", value_name = "SECS", default_value = "1", value_parser = parse_duration)]
    pub delay: Duration,
    /// Stop after N refreshes.
    #[arg(short = 'n', long, value_name = "N", value_parser = parse_count)]
    pub count: Option<u64>,
    /// Stop after this long (e.g. 30s, 5m).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Plain rows every interval, even on a terminal (the default when stdout is not one).
    #[arg(short = 'b', long)]
    pub batch: bool,
    /// One JSON snapshot per interval, one line each (and the closing summary as JSON).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub summary: SummaryArgs,
    /// Initial sort (the `s` key cycles it).
    #[arg(long, value_enum, default_value_t = Sort::Attempts)]
    pub sort: Sort,
    /// Only rows whose address, port, netns (inode or `ip netns` name), pid, process name or
    /// container contains TEXT (the `/` key).
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub filter: String,
    /// Groups kept per table; beyond it the least recently seen is evicted (and counted).
    #[arg(long, value_name = "N", default_value_t = crate::aggregation::top::DEFAULT_CAPACITY, value_parser = parse_max_groups)]
    pub(crate) max_groups: usize,
    /// Also write every event to FILE (JSON lines, mode 0600) for `top --from` / `report --from`.
    #[arg(long, value_name = "FILE", conflicts_with = "from")]
    pub record: Option<std::path::PathBuf>,
    /// With --record: replace FILE if it exists (a symbolic link is never followed).
    #[arg(long, requires = "record")]
    pub force: bool,
    /// Show the tables of a recording instead of tracing live.
    #[arg(long, value_name = "FILE")]
    pub from: Option<std::path::PathBuf>,
}

/// `top`'s sort orders, biggest first (`views::top::rows` orders by them; the `s` key
/// cycles through them).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    Attempts,
    Stalls,
    /// Stalls per second over the last refresh: what is stalling now.
    StallRate,
    Lost,
    P99,
    Accepted,
    Name,
}

fn parse_count(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("`{s}`: the number of refreshes is a whole number, at least 1")),
    }
}

fn parse_max_groups(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=10_000_000).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` must be a number from 1 to 10000000")),
    }
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// Address to serve /metrics on; binding beyond loopback is your explicit choice.
    #[arg(long = "web.listen-address", value_name = "ADDR:PORT", default_value = DEFAULT_EXPORT_LISTEN)]
    pub(crate) web_listen_address: std::net::SocketAddr,
    /// Do not serve HTTP (with --textfile: only write the file).
    #[arg(long = "web.disable", requires = "textfile")]
    pub(crate) web_disable: bool,
    /// TLS and basic auth for /metrics from a Prometheus exporter-toolkit web-config file
    /// (tls_server_config, basic_auth_users with bcrypt hashes; docs/export.md).
    #[arg(long = "web.config.file", value_name = "FILE", conflicts_with = "web_disable")]
    pub(crate) web_config_file: Option<std::path::PathBuf>,
    /// Also write the metrics to this file for node_exporter's textfile collector
    /// (e.g. /var/lib/prometheus/node-exporter/tfo_trace.prom), replaced atomically.
    #[arg(long, value_name = "PATH")]
    pub textfile: Option<std::path::PathBuf>,
    /// How often --textfile is rewritten.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Add a `destination` label (server address:port): per role (client destinations,
    /// server listeners) the first K seen, then up to K more at their first failure; all
    /// later ones are counted under destination="other" (docs/export.md).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub(crate) top_destinations: Option<u16>,
    /// Add a `container` label (container id, else systemd unit or cgroup path, else
    /// "none"): per role the first K containers seen, then up to K more at their first
    /// failure; later ones count as "other".
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u16).range(1..=1000),
          conflicts_with = "top_destinations")]
    pub(crate) top_containers: Option<u16>,
    /// Keep a rolling recording of every TFO event in DIR, for `tfo-trace report --from
    /// DIR` (and `stalls`, `trace`, `top --from`, `GET /recording?since=1h`): what happened
    /// in a past window. Segments, the oldest removed first; made (mode 0700) where missing;
    /// refused where it is a symbolic link, another user's, or holds other files.
    #[arg(long = "flight-recorder", value_name = "DIR")]
    pub(crate) flight_recorder: Option<std::path::PathBuf>,
    /// With --flight-recorder: the most its segments may hold together (e.g. 256MiB, 1GiB).
    #[arg(long = "flight-recorder-size", value_name = "SIZE", default_value = "256MiB",
          value_parser = parse_recorder_size, requires = "flight_recorder")]
    pub(crate) flight_recorder_size: u64,
    /// With --flight-recorder: how far back it keeps events (e.g. 24h, 7d).
    #[arg(long = "flight-recorder-age", value_name = "DURATION", default_value = "24h",
          value_parser = parse_duration, requires = "flight_recorder")]
    pub(crate) flight_recorder_age: Duration,
    /// Stop after this long (e.g. 30s, 5m); default: until SIGINT, SIGTERM or SIGHUP.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    #[command(flatten)]
    pub summary: SummaryArgs,
}

/// `--flight-recorder-size`: a size of at least [`Limits::MIN_BYTES`].
fn parse_recorder_size(s: &str) -> Result<u64, String> {
    use crate::events::flight::writer::Limits;
    let bytes = parse_size(s)?;
    if bytes < Limits::MIN_BYTES {
        return Err(format!(
            "`{s}`: the flight recorder needs at least {}",
            crate::units::size(Limits::MIN_BYTES)
        ));
    }
    Ok(bytes)
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// The subcommand whose page to print (e.g. `top`); default: tfo-trace(1).
    #[arg(value_name = "COMMAND")]
    pub command: Option<String>,
    /// Write every page (tfo-trace.1, tfo-trace-trace.1, ...) into DIR instead.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub dir: Option<std::path::PathBuf>,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// How long the lab makes traffic before it cleans up and exits.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Print `top`'s tables as JSON lines (one snapshot every 5 s and at the end, as
    /// `top --json`) instead of the terminal UI, and the closing summary as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub summary: SummaryArgs,
}

/// A ring buffer size: one rule broken, one line saying which.
fn parse_ring_size(s: &str) -> Result<u32, String> {
    const MIN: u32 = 4096;
    let max = MAX_RING_BUFFER_BYTES;
    let too_large = || format!("{s} bytes: the ring buffer is at most {max} (256 MiB)");
    let v: u128 = match s.parse() {
        Ok(v) => v,
        // Digits alone are a number, however long.
        Err(_) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => return Err(too_large()),
        Err(_) => return Err(format!("`{s}` is not a number of bytes")),
    };
    if v > u128::from(max) {
        return Err(too_large());
    }
    let v = v as u32;
    if v < MIN {
        return Err(format!("{v} bytes: the ring buffer is at least {MIN} (one page)"));
    }
    if !v.is_power_of_two() {
        return Err(format!("{v} bytes: the ring buffer's size is a power of two (the kernel's rule)"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
        Cli::visible_command().debug_assert();
    }

    /// A help text names `--json` only in a command that has it (`export` has none).
    #[test]
    fn helps_name_json_only_where_the_command_has_it() {
        for sub in Cli::command().get_subcommands() {
            let has_json = sub.get_arguments().any(|a| a.get_long() == Some("json"));
            for arg in sub.get_arguments() {
                let help = arg.get_long_help().or(arg.get_help()).map(|h| h.to_string()).unwrap_or_default();
                let names_json = help.match_indices("--json").any(|(at, _)| {
                    !help[at + "--json".len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
                });
                assert!(
                    has_json || !names_json,
                    "`{} --{}` says {help:?}, but {} has no --json",
                    sub.get_name(),
                    arg.get_long().unwrap_or_default(),
                    sub.get_name()
                );
            }
        }
    }

    #[test]
    fn ring_sizes() {
        assert!(parse_ring_size("4096").is_ok());
        assert_eq!(parse_ring_size("268435456"), Ok(MAX_RING_BUFFER_BYTES));
        assert!(parse_ring_size("536870912").unwrap_err().contains("at most"));
        assert!(parse_ring_size("5000").is_err());
        assert!(parse_ring_size("1024").is_err());
    }
}
