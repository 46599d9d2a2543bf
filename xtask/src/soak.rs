//! `cargo xtask soak [--minutes 30]`: a release build of tfo-trace runs `lab-soak` (mixed
//! lab traffic under `top --batch` and `export` for that long), and its report goes to
//! SOAK.md: memory and fds sampled every minute, counts against the kernel's counters.
//! Exits non-zero when a check fails.
use std::fs;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::util::{self, capture, is_root, workspace_root};

#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// How long the traffic runs.
    #[arg(long, default_value_t = 30)]
    pub minutes: u64,
    /// Where the report goes (relative to the workspace root).
    #[arg(long, default_value = "SOAK.md")]
    pub output: std::path::PathBuf,
}

pub fn soak(args: &SoakArgs) -> Result<()> {
    if !is_root() {
        bail!("the soak makes network namespaces and loads eBPF programs: run it as root");
    }
    let bin = util::build_release_with_fixtures()?;
    println!("soak: {} minutes of mixed lab traffic under top and export", args.minutes);
    let out = capture(Command::new(&bin).args(["lab-soak", "--minutes", &args.minutes.to_string()]))?;
    let r: Value = serde_json::from_str(out.trim()).with_context(|| format!("lab-soak printed {out:?}"))?;
    let text = render(&r, args.minutes);
    println!("{text}");
    let path = workspace_root().join(&args.output);
    fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    let failed: Vec<&str> = r["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c[1] != true)
        .filter_map(|c| c[0].as_str())
        .collect();
    if !failed.is_empty() {
        bail!("soak: {} check(s) failed:\n  {}", failed.len(), failed.join("\n  "));
    }
    Ok(())
}

fn render(r: &Value, minutes: u64) -> String {
    let date = capture(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M:%S UTC"])).unwrap_or_default();
    let kernel = capture(Command::new("uname").arg("-r")).unwrap_or_default();
    let mut s = format!(
        "# tfo-trace soak\n\n- date: {}\n- kernel: {}\n- command: `cargo xtask soak --minutes {minutes}`\n\
         - traffic: {} cycles over {:.1} min, each 20 accepted TFO connections, 1 whose SYN-data the \
         middlebox drops (a ~1 s stall), and 2 s of plain connections at 500/s; the server's TFO key \
         rotated {} times\n- tracers: `top --batch --json --delay 10` and `export`, both for the lab's \
         namespaces\n\n## Checks\n\n| check | result |\n|---|---|\n",
        date.trim(),
        kernel.trim(),
        r["cycles"],
        r["minutes"].as_f64().unwrap_or(0.0),
        r["key_rotations"],
    );
    for c in r["checks"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "| {} | {} |\n",
            c[0].as_str().unwrap_or("?"),
            if c[1] == true { "**pass**" } else { "**FAIL**" }
        ));
    }
    s.push_str(&format!(
        "\nKernel: TcpExtTCPFastOpenActive {}, Passive {}, client TcpExtTCPSynRetrans {}. Export: stall \
         seconds {:.2}, events lost {}.\n\n## Memory and fds\n\n| minute | export RSS KiB | export fds | top RSS KiB | top fds |\n|---|---|---|---|---|\n",
        r["kernel_client_active"],
        r["kernel_server_passive"],
        r["kernel_client_syn_retrans"],
        r["export_stall_seconds"].as_f64().unwrap_or(0.0),
        r["export_events_lost"],
    ));
    for x in r["samples"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "| {:.1} | {} | {} | {} | {} |\n",
            x["minute"].as_f64().unwrap_or(0.0),
            x["export_rss_kib"],
            x["export_fds"],
            x["top_rss_kib"],
            x["top_fds"]
        ));
    }
    s
}
