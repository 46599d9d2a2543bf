//! `cargo xtask grafana`: writes deploy/grafana/tfo-trace.json from
//! deploy/grafana/dashboard.py, which builds it with Grafana Labs' foundation SDK (its
//! builders are generated from Grafana's dashboard schema), installed from PyPI at the
//! pinned version when missing. tests/integration/export/dashboard.rs checks that the
//! committed JSON is what the script makes, and runs every panel's query.
use std::fs;
use std::process::Command;

use anyhow::{Context, Result};

use crate::setup::{pip_install, Present};
use crate::util::{capture, workspace_root};

/// The SDK, pinned: the build for Grafana 10.1's dashboard schema, which Grafana 10.1 and
/// later import (each newer version migrates an older dashboard forward).
pub const SDK: &str = "grafana-foundation-sdk==1769699998!10.1.0";
/// What python3 imports of it.
pub const SDK_MODULE: &str = "grafana_foundation_sdk";

const SCRIPT: &str = "deploy/grafana/dashboard.py";
const DASHBOARD: &str = "deploy/grafana/tfo-trace.json";

pub fn grafana() -> Result<()> {
    pip_install(Present::Module(SDK_MODULE), SDK)?;
    let root = workspace_root();
    let json = capture(Command::new("python3").arg(root.join(SCRIPT)))
        .with_context(|| format!("python3 {SCRIPT}"))?;
    fs::write(root.join(DASHBOARD), &json).with_context(|| format!("writing {DASHBOARD}"))?;
    println!("grafana: wrote {DASHBOARD} ({} bytes)", json.len());
    Ok(())
}
