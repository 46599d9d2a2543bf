//! `tfo-trace floor` (hidden, for `cargo xtask bench`): empty programs on the attach
//! points of a tracepoint backend, attached until stopped. What they cost per connection
//! is the floor the real programs are measured against.
use anyhow::{bail, Result};

use crate::{cli::FloorOptions, live::stop::Stop, probes};

pub async fn run(opts: FloorOptions) -> Result<()> {
    let [backend] = opts.backend.candidates() else {
        bail!("--backend must name one backend (tracepoint or raw-tracepoint)");
    };
    if let Err(line) = crate::kernel::privileges::check_tracing_privileges() {
        bail!(crate::live::session::PrivilegeError(line));
    }
    let _ebpf = probes::floor::load(*backend)?;
    crate::note!(
        "tfo-trace: {} floor programs attached with the {backend} backend's attach points",
        probes::floor::hooks(*backend).len()
    )?;
    Stop::new(opts.duration)?.requested().await;
    Ok(())
}
