//! `cargo xtask bench-static`: the static binary `cargo xtask dist` ships against the
//! glibc release build, on this host (as root): size per architecture, start-up to
//! attached (`trace` until its "programs attached" line), and the two commands that
//! allocate the most, `report --from` and `top --batch --from` a recording of 1,000,000
//! destinations (wall time and peak RSS): musl's allocator is the usual suspect when a
//! static binary is slow. Binaries alternate run by run, so the host's drift hits both.
//! The figures replace the block between [`BEGIN`] and [`END`] in BENCHMARKS.md's hand-kept
//! part (`cargo xtask bench` keeps it).
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::{
    report::write_block,
    scale::{peak_of, write_million, Mix},
    stats::spread,
    tracer::Tracer,
};
use crate::cross::Arch;
use crate::dist;
use crate::util::{self, capture, is_root, run, workspace_root};

const BEGIN: &str = "<!-- cargo xtask bench-static: begin -->";
const END: &str = "<!-- cargo xtask bench-static: end -->";
/// Start-ups per binary.
const STARTS: usize = 15;
/// `report --from` / `top --from` runs per binary.
const REPLAYS: usize = 3;

pub fn bench_static() -> Result<()> {
    if !is_root() {
        bail!("bench-static attaches the tracer: run it as root");
    }
    let started = Instant::now();
    crate::setup::setup()?;
    run(util::cargo().current_dir(workspace_root()).args(["build", "--release", "-p", "tfo-trace"]))?;
    dist::build(&Arch::ALL)?;
    let glibc = util::target_dir().join("release/tfo-trace");
    let musl = dist::dist_dir().join(dist::binary_name(Arch::X86_64));
    let bins = [("static (musl)", musl.clone()), ("glibc", glibc.clone())];

    let mut text = format!(
        "{BEGIN}\n## Static binaries (`cargo xtask bench-static`, {})\n\n",
        capture(std::process::Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]))?.trim()
    );
    text.push_str(&sizes(&glibc)?);

    let mut starts: Vec<Vec<f64>> = vec![Vec::new(); bins.len()];
    for _ in 0..STARTS {
        for (i, (_, bin)) in bins.iter().enumerate() {
            let t = Tracer::tfo_trace_args(bin, &["trace"])?;
            starts[i].push(t.attach_wall_ms);
            t.stop()?;
        }
    }
    text.push_str(&format!(
        "\nStart-up to attached (`trace`, spawn to its \"programs attached\" line; {STARTS} runs each, alternating):\n\n\
         | binary | median | min | max |\n|---|---|---|---|\n"
    ));
    for (i, (name, _)) in bins.iter().enumerate() {
        let (m, lo, hi) = spread(starts[i].iter().copied()).context("no start-up")?;
        text.push_str(&format!("| {name} | {m:.0} ms | {lo:.0} ms | {hi:.0} ms |\n"));
    }

    let scratch = std::env::temp_dir().join(format!("tfobench-static-{}", std::process::id()));
    fs::create_dir_all(&scratch)?;
    let replays = replays(&bins, &scratch);
    let _ = fs::remove_dir_all(&scratch);
    text.push_str(&replays?);
    text.push_str(&format!("\nThe whole run took {:.0} s.\n{END}\n", started.elapsed().as_secs_f64()));
    println!("{text}");
    write_block(Path::new("BENCHMARKS.md"), BEGIN, END, &text, "bench-static")
}

/// Sizes of the shipped binaries, and of the glibc build as built and stripped.
fn sizes(glibc: &Path) -> Result<String> {
    let size = |p: &Path| fs::metadata(p).map(|m| m.len()).with_context(|| format!("{}", p.display()));
    let stripped = std::env::temp_dir().join(format!("tfobench-glibc-stripped-{}", std::process::id()));
    run(std::process::Command::new("strip").arg("-o").arg(&stripped).arg(glibc))?;
    let glibc_stripped = size(&stripped);
    let _ = fs::remove_file(&stripped);
    let mut t = String::from("| binary | bytes | MiB |\n|---|---|---|\n");
    let mut row = |name: &str, bytes: u64| {
        t.push_str(&format!("| {name} | {bytes} | {:.1} |\n", bytes as f64 / 1048576.0));
    };
    for arch in Arch::ALL {
        let name = dist::binary_name(arch);
        row(&format!("`{name}` (static, stripped)"), size(&dist::dist_dir().join(&name))?);
    }
    row("glibc release build, x86_64 (`target/release/tfo-trace`)", size(glibc)?);
    row("the same, stripped", glibc_stripped?);
    Ok(t)
}

/// `report --from` (text) and `top --batch --from` a million destinations, per binary.
fn replays(bins: &[(&str, PathBuf)], scratch: &Path) -> Result<String> {
    let report_in = scratch.join("report.jsonl");
    let top_in = scratch.join("top.jsonl");
    write_million(&report_in, Mix::Problems)?;
    write_million(&top_in, Mix::Accepted)?;
    let runs: [(&str, &[&str], &Path); 2] = [
        ("report --from (text)", &["report", "--format", "text", "--from"], &report_in),
        ("top --batch --from", &["top", "--batch", "--from"], &top_in),
    ];
    let mut t = format!(
        "\nReplays of 1,000,000 destinations (the recordings of `cargo xtask bench`'s section 5; {REPLAYS} runs \
         each, alternating): wall time and peak RSS (VmHWM).\n\n\
         | command | binary | median time | min | max | peak RSS |\n|---|---|---|---|---|---|\n"
    );
    for (what, args, input) in runs {
        let mut secs: Vec<Vec<f64>> = vec![Vec::new(); bins.len()];
        let mut rss = vec![0u64; bins.len()];
        for _ in 0..REPLAYS {
            for (i, (_, bin)) in bins.iter().enumerate() {
                let p = peak_of(bin, args, input)?;
                secs[i].push(p.seconds);
                rss[i] = rss[i].max(p.vm_hwm_kib);
            }
        }
        for (i, (name, _)) in bins.iter().enumerate() {
            let (m, lo, hi) = spread(secs[i].iter().copied()).context("no run")?;
            t.push_str(&format!(
                "| `{what}` | {name} | {m:.2} s | {lo:.2} s | {hi:.2} s | {:.1} MiB |\n",
                rss[i] as f64 / 1024.0
            ));
        }
    }
    Ok(t)
}
