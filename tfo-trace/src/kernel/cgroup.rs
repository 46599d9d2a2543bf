//! cgroup v2: where its hierarchy is mounted, the path of a cgroup id (what
//! bpf_get_current_cgroup_id() returns: the inode of the cgroup's directory), and the
//! container a path names (docker, containerd / CRI-O, podman, systemd scopes, Kubernetes
//! pods).
use std::{
    collections::HashMap,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use serde::Serialize;

/// The cgroup v2 mount (`/sys/fs/cgroup` on unified hosts, `/sys/fs/cgroup/unified` on
/// hybrid ones), from /proc/mounts: never assumed.
pub fn v2_mount() -> Option<PathBuf> {
    super::kallsyms::first_mount_of_type("cgroup2")
}

/// A cgroup as users name it: its path below the v2 root (`/system.slice/nginx.service`).
/// `arg` may also be the full path under the mount.
pub fn resolve(arg: &str) -> Result<PathBuf, String> {
    let root = v2_mount().ok_or("no cgroup v2 hierarchy is mounted (cgroup2 in /proc/mounts)")?;
    let p = Path::new(arg);
    let full = if p.starts_with(&root) { p.to_path_buf() } else { root.join(arg.trim_start_matches('/')) };
    if !full.is_dir() {
        return Err(format!("`{arg}` is not a cgroup ({} is not a directory)", full.display()));
    }
    Ok(full)
}

/// The container a cgroup path belongs to, as runtimes name their cgroups.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Container {
    /// The runtime's container id (64 hex digits for docker/containerd/CRI-O/podman).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `docker`, `containerd`, `crio`, `podman`, or the systemd unit (`nginx.service`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// A Kubernetes pod's UID (from `pod<uid>` in the path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
}

fn hex64(s: &str) -> Option<&str> {
    let s = s.get(..64)?;
    s.bytes().all(|b| b.is_ascii_hexdigit()).then_some(s)
}

/// Parses the container, if any, from a cgroup path. Forms (systemd and cgroupfs
/// drivers): `.../docker-<id>.scope`, `/docker/<id>`, `.../cri-containerd-<id>.scope`,
/// `.../crio-<id>.scope`, `.../libpod-<id>.scope`, `/kubepods/.../pod<uid>/<id>`,
/// `.../kubepods-...-pod<uid_with_underscores>.slice/...`, and a plain systemd
/// `<unit>.service` or `<unit>.scope`.
pub fn container_of(path: &str) -> Container {
    let mut c = Container::default();
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        // Kubernetes: `pod<uid>` (cgroupfs) or `...-pod<uid>.slice` (systemd, `_` for `-`).
        if let Some(rest) = part.rsplit_once("pod").map(|(_, r)| r) {
            let uid = rest.trim_end_matches(".slice").replace('_', "-");
            if uid.len() == 36 && uid.chars().all(|ch| ch.is_ascii_hexdigit() || ch == '-') {
                c.pod_uid = Some(uid);
            }
        }
        let scope = part.strip_suffix(".scope").unwrap_or(part);
        for (prefix, runtime) in [
            ("docker-", "docker"),
            ("cri-containerd-", "containerd"),
            ("crio-", "crio"),
            ("libpod-", "podman"),
        ] {
            if let Some(id) = scope.strip_prefix(prefix).and_then(hex64) {
                c.id = Some(id.to_string());
                c.runtime = Some(runtime.to_string());
            }
        }
        // cgroupfs driver: `/docker/<id>`, and a bare id under a pod.
        if let Some(id) = hex64(part).filter(|id| id.len() == part.len()) {
            let runtime = match i.checked_sub(1).map(|j| parts[j]) {
                Some("docker") => "docker",
                _ => "containerd",
            };
            c.id = Some(id.to_string());
            c.runtime = Some(runtime.to_string());
        }
    }
    if c.id.is_none() && c.pod_uid.is_none() {
        if let Some(unit) = parts.last().filter(|p| p.ends_with(".service") || p.ends_with(".scope")) {
            c.runtime = Some(unit.to_string());
        }
    }
    c
}

/// A cgroup's path and the container it names, as events carry them: made once per
/// cgroup and shared by its events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedCgroup {
    pub path: Arc<str>,
    pub container_id: Option<Arc<str>>,
    pub container_runtime: Option<Arc<str>>,
    pub pod_uid: Option<Arc<str>>,
}

impl NamedCgroup {
    fn of(path: &str) -> Self {
        let c = container_of(path);
        NamedCgroup {
            path: path.into(),
            container_id: c.id.map(Into::into),
            container_runtime: c.runtime.map(Into::into),
            pod_uid: c.pod_uid.map(Into::into),
        }
    }
}

/// Paths of cgroup ids, found by walking the v2 hierarchy, cached; walked again (at most
/// every few seconds) when an id is not known yet: cgroups come and go while we trace.
#[derive(Default)]
pub struct CgroupNames {
    root: Option<PathBuf>,
    paths: HashMap<u64, String>,
    /// Each cgroup named so far, with its container: every event names one, so it is
    /// parsed once per cgroup, not once per event.
    named: HashMap<u64, NamedCgroup, foldhash::fast::RandomState>,
    walked_at: Option<Instant>,
}

/// The walk stops there: a host with more cgroups is named as far as this goes.
const MAX_CGROUPS: usize = 100_000;
const REWALK: Duration = Duration::from_secs(2);

impl CgroupNames {
    pub fn new() -> Self {
        CgroupNames { root: v2_mount(), ..CgroupNames::default() }
    }

    /// The path below the v2 root of cgroup `id` (`/` for the root), if it exists.
    fn path(&mut self, id: u64) -> Option<&str> {
        if id == 0 {
            return None;
        }
        if !self.paths.contains_key(&id) {
            if self.walked_at.is_some_and(|t| t.elapsed() < REWALK) {
                return None;
            }
            self.walk();
        }
        self.paths.get(&id).map(String::as_str)
    }

    /// Cgroup `id`'s path and the container it names, if the cgroup exists.
    pub fn named(&mut self, id: u64) -> Option<&NamedCgroup> {
        if !self.named.contains_key(&id) {
            let named = NamedCgroup::of(self.path(id)?);
            self.named.insert(id, named);
        }
        self.named.get(&id)
    }

    fn walk(&mut self) {
        self.walked_at = Some(Instant::now());
        let Some(root) = self.root.clone() else { return };
        self.paths.clear();
        self.named.clear();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            if self.paths.len() >= MAX_CGROUPS {
                break;
            }
            let Ok(meta) = std::fs::metadata(&dir) else { continue };
            let rel = dir.strip_prefix(&root).map(|r| format!("/{}", r.display())).unwrap_or_default();
            self.paths.insert(meta.ino(), rel);
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f1e6d9a0c2b3a4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5";

    #[test]
    fn container_ids_of_every_runtime() {
        let c = container_of(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!((c.id.as_deref(), c.runtime.as_deref()), (Some(ID), Some("docker")));
        let c = container_of(&format!("/docker/{ID}"));
        assert_eq!((c.id.as_deref(), c.runtime.as_deref()), (Some(ID), Some("docker")));
        let c = container_of(&format!("/machine.slice/libpod-{ID}.scope/container"));
        assert_eq!((c.id.as_deref(), c.runtime.as_deref()), (Some(ID), Some("podman")));
        let c = container_of(&format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_5e6f_7081_92a3_b4c5d6e7f809.slice/cri-containerd-{ID}.scope"
        ));
        assert_eq!(c.id.as_deref(), Some(ID));
        assert_eq!(c.runtime.as_deref(), Some("containerd"));
        assert_eq!(c.pod_uid.as_deref(), Some("1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809"));
        let c = container_of(&format!("/kubepods/besteffort/pod1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809/{ID}"));
        assert_eq!((c.id.as_deref(), c.runtime.as_deref()), (Some(ID), Some("containerd")));
        assert_eq!(c.pod_uid.as_deref(), Some("1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809"));
        let c = container_of(&format!("/system.slice/crio-{ID}.scope"));
        assert_eq!(c.runtime.as_deref(), Some("crio"));
        // A plain systemd service: its unit, no container id.
        let c = container_of("/system.slice/nginx.service");
        assert_eq!((c.id, c.runtime.as_deref()), (None, Some("nginx.service")));
        assert_eq!(container_of("/"), Container::default());
        assert_eq!(container_of("/user.slice/docker-notanid.scope").id, None);
    }
}
