//! cgroup v2: where its hierarchy is mounted, the path of a cgroup id (what
//! bpf_get_current_cgroup_id() returns: the inode of the cgroup's directory), the container
//! a path names (docker, containerd / CRI-O, podman, systemd scopes, Kubernetes pods), and
//! the table of every cgroup by id that names events.
use std::{
    collections::{HashMap, VecDeque},
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use serde::Serialize;

use super::containers::StateDirs;

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

/// A process's cgroup v2 path (the `0::PATH` line of /proc/PID/cgroup).
pub fn path_of_pid(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_string)
}

/// The cgroup v2 id (its directory's inode) process `pid` is in now.
pub fn id_of_pid(pid: u32) -> Option<u64> {
    let path = path_of_pid(pid)?;
    std::fs::metadata(v2_mount()?.join(path.trim_start_matches('/'))).ok().map(|m| m.ino())
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
/// `.../crio-<id>.scope`, `.../libpod-<id>.scope` (Podman, systemd; `/libpod_parent/
/// libpod-<id>` with cgroupfs), `/kubepods/.../pod<uid>/<id>`,
/// `.../kubepods-...-pod<uid_with_underscores>.slice/...`, and a plain systemd
/// `<unit>.service` or `<unit>.scope`. A bare id (cgroupfs under a pod) names no runtime:
/// containerd, CRI-O and cri-dockerd all make that form ([`NamedCgroup::of`] asks their state).
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
            c.id = Some(id.to_string());
            c.runtime = (i > 0 && parts[i - 1] == "docker").then(|| "docker".to_string());
        }
    }
    if c.id.is_none() && c.pod_uid.is_none() {
        if let Some(unit) = parts.last().filter(|p| p.ends_with(".service") || p.ends_with(".scope")) {
            c.runtime = Some(unit.to_string());
        }
    }
    c
}

/// What users call the container (or unit) of a process, from its cgroup's names: the
/// container's name (`namespace/pod/container` in Kubernetes), else [`plain_label`].
pub fn label_of<'a>(
    names: &ContainerNames<'a>,
    id: Option<&'a str>,
    runtime: Option<&'a str>,
    path: Option<&'a str>,
) -> Option<std::borrow::Cow<'a, str>> {
    use std::borrow::Cow;
    let pod = match (names.namespace, names.pod) {
        (Some(ns), Some(pod)) => Some(format!("{ns}/{pod}")),
        (None, Some(pod)) => Some(pod.to_string()),
        _ => None,
    };
    match (pod, names.name) {
        (Some(pod), Some(name)) => Some(Cow::Owned(format!("{pod}/{name}"))),
        (Some(pod), None) => Some(Cow::Owned(pod)),
        (None, Some(name)) => Some(Cow::Borrowed(name)),
        (None, None) => plain_label(id, runtime, path).map(Cow::Borrowed),
    }
}

/// A container without names: its id shortened as `docker ps` does, else the runtime's
/// unit, else the cgroup path; None for the root cgroup (the host).
pub fn plain_label<'a>(
    id: Option<&'a str>,
    runtime: Option<&'a str>,
    path: Option<&'a str>,
) -> Option<&'a str> {
    match (id, runtime) {
        (Some(id), _) => Some(id.char_indices().nth(12).map_or(id, |(end, _)| &id[..end])),
        (None, Some(unit)) => Some(unit),
        (None, None) => path.filter(|p| *p != "/"),
    }
}

/// The names a runtime gave a container (see [`super::containers::ContainerMeta`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct ContainerNames<'a> {
    pub name: Option<&'a str>,
    pub pod: Option<&'a str>,
    pub namespace: Option<&'a str>,
}

/// The label of a cgroup whose id no hook and no walk could name: never the host's.
pub const UNKNOWN: &str = "unknown";

/// A cgroup's path and the container it names, as events carry them: made once per
/// cgroup and shared by its events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedCgroup {
    pub path: Arc<str>,
    pub container_id: Option<Arc<str>>,
    /// The runtime whose state has the container (`docker`, `containerd`, `crio`,
    /// `podman`), the one its cgroup names where no state was found, `unknown` for a bare
    /// id no runtime here knows; or the systemd unit outside a container.
    pub container_runtime: Option<Arc<str>>,
    pub pod_uid: Option<Arc<str>>,
    /// Docker's or Podman's name; a Kubernetes container's name in its pod.
    pub container_name: Option<Arc<str>>,
    /// A Kubernetes pod's name and namespace.
    pub pod: Option<Arc<str>>,
    pub pod_namespace: Option<Arc<str>>,
    /// [`label_of`]: what the views show; None for the host.
    pub label: Option<Arc<str>>,
}

impl NamedCgroup {
    /// Parses `path` and asks the runtimes' state (`state`) for the container it names.
    pub fn of(path: &str, state: &StateDirs) -> Self {
        let c = container_of(path);
        let meta = c.id.as_deref().map(|id| state.lookup(id, c.runtime.as_deref())).unwrap_or_default();
        let runtime = match (meta.runtime, c.runtime, &c.id) {
            (Some(found), _, _) => Some(found.to_string()),
            (None, Some(claimed), _) => Some(claimed),
            (None, None, Some(_)) => Some(UNKNOWN.to_string()),
            (None, None, None) => None,
        };
        let names = ContainerNames {
            name: meta.name.as_deref(),
            pod: meta.pod.as_deref(),
            namespace: meta.namespace.as_deref(),
        };
        let label = label_of(&names, c.id.as_deref(), runtime.as_deref(), Some(path)).map(|l| l.into());
        NamedCgroup {
            path: path.into(),
            container_id: c.id.map(Into::into),
            container_runtime: runtime.map(Into::into),
            pod_uid: c.pod_uid.map(Into::into),
            container_name: meta.name.map(Into::into),
            pod: meta.pod.map(Into::into),
            pod_namespace: meta.namespace.map(Into::into),
            label,
        }
    }

    /// Whether the runtimes' state was asked for a container and said nothing (its state
    /// directory may be new: asked again once they are looked for again).
    fn unnamed_container(&self) -> bool {
        self.container_id.is_some() && self.container_name.is_none() && self.pod.is_none()
    }
}

/// Every cgroup v2 of the host by id, learnt as the kernel makes and removes them (the
/// cgroup hooks, `events::cgroups`) after one walk of the hierarchy at start, with the
/// container each names. A removed cgroup is kept until the events read since name it
/// (see [`CgroupNames::prune`]). Where the hooks could not attach, an id not known yet
/// makes the hierarchy be walked again (at most every [`REWALK`]).
pub struct CgroupNames {
    root: Option<PathBuf>,
    named: HashMap<u64, Known, foldhash::fast::RandomState>,
    /// Removed cgroups still kept, oldest first.
    removed: VecDeque<(u64, Instant)>,
    state: StateDirs,
    state_read_at: Instant,
    walked_at: Option<Instant>,
    /// When the event reader last read everything the kernel had written.
    events_read_at: Option<Instant>,
}

struct Known {
    cgroup: NamedCgroup,
    removed: bool,
}

/// The walk stops there: a host with more cgroups is named as far as this goes.
const MAX_CGROUPS: usize = 100_000;
const REWALK: Duration = Duration::from_secs(2);
/// A removed cgroup is kept at least this long, and until the events read since name it:
/// an event is read well within it unless the reader stalls.
const KEEP_REMOVED: Duration = Duration::from_secs(10);
/// Removed cgroups kept at most (a stalled reader, a storm of short-lived containers):
/// past it the oldest go first.
const MAX_REMOVED: usize = 16_384;
/// The runtimes' state directories are looked for again at most this often (a daemon
/// started after the tracer).
const STATE_REREAD: Duration = Duration::from_secs(1);

impl Default for CgroupNames {
    fn default() -> Self {
        CgroupNames {
            root: None,
            named: HashMap::default(),
            removed: VecDeque::new(),
            state: StateDirs::default(),
            state_read_at: Instant::now(),
            walked_at: None,
            events_read_at: None,
        }
    }
}

impl CgroupNames {
    pub fn new() -> Self {
        CgroupNames { root: v2_mount(), state: StateDirs::of_host(), ..CgroupNames::default() }
    }

    /// A cgroup the kernel has just made (`path` below the v2 root).
    pub fn made(&mut self, id: u64, path: &str) {
        let cgroup = self.name_path(path);
        self.named.insert(id, Known { cgroup, removed: false });
    }

    /// A cgroup the kernel has just removed: kept for the events still to be read.
    pub fn removed(&mut self, id: u64) {
        if let Some(k) = self.named.get_mut(&id).filter(|k| !k.removed) {
            k.removed = true;
            self.removed.push_back((id, Instant::now()));
        }
        self.prune();
    }

    /// The event reader has read everything the kernel had written by now.
    pub fn events_read(&mut self) {
        self.events_read_at = Some(Instant::now());
        self.prune();
    }

    /// Forgets the removed cgroups no event still to be read can name: removed before the
    /// reader last caught up and at least [`KEEP_REMOVED`] ago (the kernel writes an
    /// event before the process that caused it can leave its cgroup, so the cgroup's
    /// events precede its removal but for a socket that outlives every process of its
    /// cgroup); and the oldest past [`MAX_REMOVED`].
    fn prune(&mut self) {
        self.prune_at(Instant::now());
    }

    fn prune_at(&mut self, now: Instant) {
        let caught_up = self.events_read_at;
        let mut forgotten = 0;
        while let Some(&(id, at)) = self.removed.front() {
            let read = caught_up.is_some_and(|r| r > at) && now.saturating_duration_since(at) >= KEEP_REMOVED;
            if !read && self.removed.len() <= MAX_REMOVED {
                break;
            }
            self.removed.pop_front();
            if self.named.get(&id).is_some_and(|k| k.removed) {
                self.named.remove(&id);
            }
            forgotten += 1;
        }
        if forgotten > 0 {
            // What tests/containers.rs waits for before it measures the tracer's memory.
            log::debug!("cgroups: {forgotten} removed cgroup(s) forgotten, {} known", self.named.len());
        }
        // A burst of containers leaves the table as small as it was.
        if self.named.capacity() > 4 * self.named.len().max(1024) {
            self.named.shrink_to_fit();
            self.removed.shrink_to_fit();
        }
    }

    /// Cgroups known now (live and kept), for the tests of its bound.
    pub fn len(&self) -> usize {
        self.named.len()
    }

    pub fn is_empty(&self) -> bool {
        self.named.is_empty()
    }

    /// Whether the table has cgroup `id` (the root's 0 needs none).
    pub fn knows(&self, id: u64) -> bool {
        id == 0 || self.named.contains_key(&id)
    }

    /// Cgroup `id`'s path and the container it names; None when neither the hooks nor a
    /// walk of the hierarchy knows it (the views say [`UNKNOWN`]).
    pub fn named(&mut self, id: u64) -> Option<&NamedCgroup> {
        if id == 0 {
            return None;
        }
        if !self.named.contains_key(&id) && self.walked_at.is_none_or(|t| t.elapsed() >= REWALK) {
            self.walk();
        }
        self.named.get(&id).map(|k| &k.cgroup)
    }

    /// `path` named, with the runtimes' state looked for again where it has no name for
    /// the container (a daemon started after the tracer).
    fn name_path(&mut self, path: &str) -> NamedCgroup {
        let named = NamedCgroup::of(path, &self.state);
        if named.unnamed_container() && self.state_read_at.elapsed() >= STATE_REREAD {
            self.state = StateDirs::of_host();
            self.state_read_at = Instant::now();
            return NamedCgroup::of(path, &self.state);
        }
        named
    }

    /// Walks the v2 hierarchy for the cgroups not known yet (at start, and where the hooks
    /// did not attach).
    pub fn walk(&mut self) {
        self.walked_at = Some(Instant::now());
        let Some(root) = self.root.clone() else { return };
        let mut stack = vec![root.clone()];
        let mut seen = 0;
        while let Some(dir) = stack.pop() {
            seen += 1;
            if seen > MAX_CGROUPS {
                break;
            }
            let Ok(meta) = std::fs::metadata(&dir) else { continue };
            if !self.named.contains_key(&meta.ino()) {
                let rel = dir.strip_prefix(&root).map(|r| format!("/{}", r.display())).unwrap_or_default();
                let cgroup = self.name_path(&rel);
                self.named.insert(meta.ino(), Known { cgroup, removed: false });
            }
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
    const UID: &str = "1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809";

    fn parsed(path: &str) -> (Option<String>, Option<String>, Option<String>) {
        let c = container_of(path);
        (c.id, c.runtime, c.pod_uid)
    }

    fn some(s: &str) -> Option<String> {
        Some(s.to_string())
    }

    #[test]
    fn container_ids_of_every_runtime_and_driver() {
        // Docker: systemd and cgroupfs drivers.
        assert_eq!(parsed(&format!("/system.slice/docker-{ID}.scope")), (some(ID), some("docker"), None));
        assert_eq!(parsed(&format!("/docker/{ID}")), (some(ID), some("docker"), None));
        // Podman: systemd (with its nested `container` cgroup on v2) and cgroupfs; its
        // conmon's cgroup is no container.
        assert_eq!(
            parsed(&format!("/machine.slice/libpod-{ID}.scope/container")),
            (some(ID), some("podman"), None)
        );
        assert_eq!(parsed(&format!("/libpod_parent/libpod-{ID}")), (some(ID), some("podman"), None));
        assert_eq!(parsed(&format!("/machine.slice/libpod-conmon-{ID}.scope")).0, None);
        // CRI-O outside Kubernetes' slices, and its conmon.
        assert_eq!(parsed(&format!("/system.slice/crio-{ID}.scope")), (some(ID), some("crio"), None));
        assert_eq!(parsed(&format!("/system.slice/crio-conmon-{ID}.scope")).0, None);
        // A plain systemd service: its unit, no container id.
        assert_eq!(parsed("/system.slice/nginx.service"), (None, some("nginx.service"), None));
        assert_eq!(container_of("/"), Container::default());
        assert_eq!(container_of("/user.slice/docker-notanid.scope").id, None);
    }

    #[test]
    fn kubernetes_pods_in_every_qos_class_and_driver() {
        let systemd_uid = UID.replace('-', "_");
        // systemd driver: Guaranteed pods sit right under kubepods.slice, the other two
        // classes in a slice of their own; the runtime is in the scope's name.
        for (class_slices, runtime_scope, runtime) in [
            (
                format!("/kubepods.slice/kubepods-pod{systemd_uid}.slice"),
                format!("cri-containerd-{ID}.scope"),
                "containerd",
            ),
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{systemd_uid}.slice"),
                format!("crio-{ID}.scope"),
                "crio",
            ),
            (
                format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{systemd_uid}.slice"
                ),
                format!("docker-{ID}.scope"),
                "docker",
            ),
        ] {
            let path = format!("{class_slices}/{runtime_scope}");
            assert_eq!(parsed(&path), (some(ID), some(runtime), some(UID)), "{path}");
        }
        // cgroupfs driver: a bare id under the pod, whichever runtime made it (containerd,
        // CRI-O, cri-dockerd): none is named from the path.
        for class in ["", "/burstable", "/besteffort"] {
            let path = format!("/kubepods{class}/pod{UID}/{ID}");
            assert_eq!(parsed(&path), (some(ID), None, some(UID)), "{path}");
        }
        // The pod's own cgroup: a pod, no container.
        assert_eq!(parsed(&format!("/kubepods/besteffort/pod{UID}")), (None, None, some(UID)));
    }

    fn named(path: &str) -> NamedCgroup {
        NamedCgroup::of(path, &StateDirs::default())
    }

    #[test]
    fn labels_name_pods_containers_units_and_never_the_host_for_the_unknown() {
        let names = ContainerNames { name: Some("app"), pod: Some("web-7d9f"), namespace: Some("shop") };
        assert_eq!(
            label_of(&names, Some(ID), Some("containerd"), None).as_deref(),
            Some("shop/web-7d9f/app")
        );
        let docker = ContainerNames { name: Some("web"), ..ContainerNames::default() };
        assert_eq!(label_of(&docker, Some(ID), Some("docker"), None).as_deref(), Some("web"));
        let sandbox = ContainerNames { pod: Some("web-7d9f"), namespace: Some("shop"), name: None };
        assert_eq!(label_of(&sandbox, Some(ID), None, None).as_deref(), Some("shop/web-7d9f"));
        // No state found: the short id, and the runtime is the path's, or `unknown`.
        let docker_id = named(&format!("/docker/{ID}"));
        assert_eq!(
            (docker_id.label.as_deref(), docker_id.container_runtime.as_deref()),
            (Some(&ID[..12]), Some("docker"))
        );
        let bare = named(&format!("/kubepods/pod{UID}/{ID}"));
        assert_eq!(bare.container_runtime.as_deref(), Some(UNKNOWN), "a bare id no runtime here knows");
        assert_eq!(named("/system.slice/nginx.service").label.as_deref(), Some("nginx.service"));
        assert_eq!(named("/tfo-test/plain").label.as_deref(), Some("/tfo-test/plain"));
        assert_eq!(named("/").label, None, "the root cgroup is the host");
    }

    #[test]
    fn removed_cgroups_are_kept_until_the_events_before_them_are_read() {
        // No walk of this host's hierarchy.
        let mut t = CgroupNames { walked_at: Some(Instant::now()), ..CgroupNames::default() };
        t.made(10, &format!("/docker/{ID}"));
        t.made(11, "/system.slice/a.service");
        t.removed(10);
        let later = Instant::now() + KEEP_REMOVED * 2;
        t.prune_at(later);
        assert!(t.named(10).is_some(), "kept: the reader has not caught up since");
        t.events_read();
        t.prune_at(Instant::now());
        assert!(t.named(10).is_some(), "kept: removed only just now");
        t.prune_at(later);
        assert_eq!(t.named(10), None, "read and old: forgotten");
        assert!(t.named(11).is_some(), "a live cgroup stays");
        // A storm of removals with a stalled reader: bounded, oldest first.
        for id in 100..100 + MAX_REMOVED as u64 + 10 {
            t.made(id, "/burst");
            t.removed(id);
        }
        assert!(t.len() <= MAX_REMOVED + 1, "{} kept", t.len());
        assert!(t.named(100).is_none() && t.named(100 + MAX_REMOVED as u64).is_some());
    }
}
