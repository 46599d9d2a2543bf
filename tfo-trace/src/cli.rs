//! Command-line interface: flags and subcommands, nothing else.
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::probes::{BackendChoice, DEFAULT_RING_BUFFER_BYTES};

#[derive(Parser, Debug)]
#[command(name = "tfo-trace", version, about = "eBPF tracer for TCP Fast Open (RFC 7413)")]
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
    /// Only the connections that lost time to TFO (SYN timeouts, data resent), with a
    /// summary by destination at exit.
    Stalls(TraceArgs),
    /// Check this kernel and host for TFO tracing: hooks, backends, sysctls, advice.
    Doctor(DoctorArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) for tfo-trace.
    Man,
    /// Run the built-in lab (namespaces, TFO server, clients, a middlebox) and trace it.
    Demo(DemoArgs),
    #[command(hide = true)]
    LabServer(crate::lab::traffic::ServerArgs),
    #[command(hide = true)]
    LabClient(crate::lab::traffic::ClientArgs),
}

#[derive(Args, Debug, Clone)]
pub struct ProbeArgs {
    /// Which kernel hooks to use; `auto` picks the richest that loads and says why.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Size of the event ring buffer in bytes (a power of two, at least one page).
    #[arg(long, default_value_t = DEFAULT_RING_BUFFER_BYTES, value_parser = parse_ring_size)]
    pub ring_buffer_size: u32,
}

#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// One JSON object per line instead of text columns.
    #[arg(long)]
    pub json: bool,
    /// Stop after this long (e.g. 30s, 5m); default: until Ctrl-C.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// How long the lab makes traffic before it cleans up and exits.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Print the events as JSON lines.
    #[arg(long)]
    pub json: bool,
}

/// `30s`, `5m`, `1h`, `250ms`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("`{s}` is not a duration like 30s or 5m"))?;
    let secs = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("unknown unit `{unit}` in `{s}` (use ms, s, m or h)")),
    };
    if !secs.is_finite() || secs <= 0.0 || secs > 366.0 * 86400.0 {
        return Err(format!("`{s}` is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_ring_size(s: &str) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|_| format!("`{s}` is not a number of bytes"))?;
    if v < 4096 || !v.is_power_of_two() {
        return Err(format!("{v} must be a power of two and at least 4096"));
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
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn ring_sizes() {
        assert!(parse_ring_size("4096").is_ok());
        assert!(parse_ring_size("5000").is_err());
        assert!(parse_ring_size("1024").is_err());
    }
}
