//! The container image: the static binary alone on an empty base (`/usr/bin/tfo-trace`),
//! `tfo-trace` as its entrypoint and `export` on all of the container's addresses as its
//! default command. Nothing is pulled: the layer, the config and the manifests are written
//! here, as one archive that is both an OCI image layout (`oci-layout`, `index.json`,
//! `blobs/sha256/`; skopeo's `oci-archive:`, Docker 25+) and what `docker save` writes
//! (`manifest.json` naming the same blobs; every `docker load`).
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::{clamp_mtimes, quiet, sha256_file, sha256_hex, Source, VERSION};
use crate::cross::Arch;

/// What `docker load` tags it as: `tfo-trace:<version>`.
pub fn reference() -> String {
    format!("tfo-trace:{VERSION}")
}

/// The port `export` listens on in the container: tfo-trace's default
/// (`cli::DEFAULT_EXPORT_LISTEN`), as in deploy/kubernetes; tests/integration/dist.rs
/// checks the image's config against it.
const METRICS_PORT: u16 = 17413;

/// `tfo-trace-<version>-<arch>-linux-image.tar` in `out`, made in `work`.
pub fn build(arch: Arch, exe: &Path, source: &Source, work: &Path, out: &Path) -> Result<PathBuf> {
    let _ = fs::remove_dir_all(work);
    let rootfs = work.join("rootfs");
    let bin = rootfs.join("usr/bin/tfo-trace");
    fs::create_dir_all(bin.parent().context("usr/bin")?)?;
    fs::copy(exe, &bin).with_context(|| format!("copying {}", exe.display()))?;
    clamp_mtimes(&rootfs, source.epoch)?;

    let layout = work.join("layout");
    let blobs = layout.join("blobs/sha256");
    fs::create_dir_all(&blobs)?;
    // The layer, uncompressed: its digest is also its diff_id.
    let layer = work.join("layer.tar");
    quiet(tar(source.epoch).arg("-C").arg(&rootfs).arg("-cf").arg(&layer).arg("usr"))?;
    let layer_digest = sha256_file(&layer)?;
    let layer_size = fs::metadata(&layer)?.len();
    fs::rename(&layer, blobs.join(&layer_digest))?;

    let created = source.rfc3339()?;
    let config = config(arch, &layer_digest, &created, &source.commit);
    let (config_digest, config_size) = blob(&blobs, &config)?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{config_digest}"),
            "size": config_size,
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{layer_digest}"),
            "size": layer_size,
        }],
    });
    let (manifest_digest, manifest_size) = blob(&blobs, &manifest)?;
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest_size,
            "platform": platform(arch),
            "annotations": {
                "io.containerd.image.name": format!("docker.io/library/{}", reference()),
                "org.opencontainers.image.ref.name": VERSION,
            },
        }],
    });
    let docker_manifest = json!([{
        "Config": format!("blobs/sha256/{config_digest}"),
        "RepoTags": [reference()],
        "Layers": [format!("blobs/sha256/{layer_digest}")],
    }]);
    fs::write(layout.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)?;
    fs::write(layout.join("index.json"), index.to_string())?;
    fs::write(layout.join("manifest.json"), docker_manifest.to_string())?;
    clamp_mtimes(&layout, source.epoch)?;

    let archive = out.join(format!("tfo-trace-{VERSION}-{}-linux-image.tar", arch.name()));
    quiet(tar(source.epoch).arg("-C").arg(&layout).arg("-cf").arg(&archive).args([
        "oci-layout",
        "index.json",
        "manifest.json",
        "blobs",
    ]))?;
    Ok(archive)
}

/// GNU tar with nothing of this machine in it: sorted names, root owner, the commit's time.
fn tar(epoch: u64) -> Command {
    let mut c = Command::new("tar");
    c.args(["--sort=name", "--owner=0", "--group=0", "--numeric-owner", "--format=gnu"])
        .arg(format!("--mtime=@{epoch}"));
    c
}

/// Writes `value` as a blob; returns (hex digest, size).
fn blob(blobs: &Path, value: &Value) -> Result<(String, usize)> {
    let bytes = value.to_string().into_bytes();
    let digest = sha256_hex(&bytes);
    fs::write(blobs.join(&digest), &bytes)?;
    Ok((digest, bytes.len()))
}

fn platform(arch: Arch) -> Value {
    match arch {
        Arch::X86_64 => json!({"architecture": "amd64", "os": "linux"}),
        Arch::Aarch64 => json!({"architecture": "arm64", "os": "linux", "variant": "v8"}),
    }
}

/// The image configuration (OCI image spec, config.md).
fn config(arch: Arch, layer_digest: &str, created: &str, commit: &str) -> Value {
    let mut c = platform(arch);
    c["created"] = json!(created);
    c["config"] = json!({
        "Entrypoint": ["/usr/bin/tfo-trace"],
        // The container's own addresses: loopback there is unreachable from outside.
        "Cmd": ["export", format!("--web.listen-address=0.0.0.0:{METRICS_PORT}")],
        "ExposedPorts": {format!("{METRICS_PORT}/tcp"): {}},
        "Labels": {
            "org.opencontainers.image.title": "tfo-trace",
            "org.opencontainers.image.description": "eBPF tracer for TCP Fast Open (RFC 7413)",
            "org.opencontainers.image.version": VERSION,
            "org.opencontainers.image.revision": commit,
            "org.opencontainers.image.licenses": "MIT OR Apache-2.0",
        },
    });
    c["rootfs"] = json!({"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]});
    c["history"] = json!([{"created": created, "created_by": "cargo xtask dist"}]);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names_the_layer_the_entrypoint_and_export() {
        let c = config(Arch::Aarch64, "ab", "2026-12-03T00:00:00Z", "cdbb5da584e3");
        assert_eq!(c["architecture"], "arm64");
        assert_eq!(c["rootfs"]["diff_ids"][0], "sha256:ab");
        assert_eq!(c["config"]["Entrypoint"][0], "/usr/bin/tfo-trace");
        assert_eq!(c["config"]["Cmd"][0], "export");
    }
}
