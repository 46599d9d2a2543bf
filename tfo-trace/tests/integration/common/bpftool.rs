//! bpftool, the kernel's own list of BPF objects, for the tests that check what the tracer
//! loads and leaves behind. A bpftool that failed never reads as an empty list: at a
//! tracer's teardown it exits 255 when an object goes while it walks the list (objects of
//! other tests' tracers go at any time), and "nothing left" must not pass on that.
use std::{collections::BTreeSet, process::Command};

use serde_json::Value;

use super::skip;

/// Skips the test where bpftool does not run, saying what it was needed `for_what`.
/// `cargo xtask setup` installs it: xtask's list of skips allows this skip nowhere.
pub fn require(for_what: &str) {
    if !Command::new("bpftool").arg("version").output().is_ok_and(|o| o.status.success()) {
        skip(format!("needs bpftool (`apt-get install bpftool`) {for_what}"));
    }
}

/// `bpftool ARGS -j`, parsed; Err with bpftool's exit status and stderr when it failed, or
/// with what it printed when that is not JSON.
pub fn json(args: &[&str]) -> Result<Value, String> {
    let out = Command::new("bpftool").args(args).arg("-j").output().map_err(|e| format!("bpftool: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "bpftool {}: {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("bpftool {}: {e}: {}", args.join(" "), String::from_utf8_lossy(&out.stdout)))
}

/// `bpftool KIND show` (`prog`, `link`, `map`): every such object loaded on this host, or
/// Err as [`json`] says.
pub fn list(kind: &str) -> Result<Vec<Value>, String> {
    match json(&[kind, "show"])? {
        Value::Array(objects) => Ok(objects),
        other => Err(format!("bpftool {kind} show: not a list: {other}")),
    }
}

/// The ids of [`list`]`(kind)`; an object without one is an error, not left out.
pub fn ids(kind: &str) -> Result<BTreeSet<u64>, String> {
    list(kind)?
        .iter()
        .map(|o| o["id"].as_u64().ok_or_else(|| format!("bpftool {kind} show: no id: {o}")))
        .collect()
}
