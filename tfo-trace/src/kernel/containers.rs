//! What the container runtimes on this host know of a container: the name users gave it
//! (Docker's, Podman's) and, for Kubernetes, its pod, the pod's namespace and the
//! container's name, read from each runtime's own on-disk state (never by running its CLI),
//! once per cgroup ([`super::cgroup::CgroupNames`] caches the answer).
//!
//! Where each runtime keeps it:
//! - Docker (and cri-dockerd): `<data-root>/containers/<id>/config.v2.json`: `Name`, and
//!   `Config.Labels` `io.kubernetes.pod.name` / `.pod.namespace` / `.container.name`.
//! - containerd (CRI): `<state>/io.containerd.runtime.v2.task/<namespace>/<id>/config.json`,
//!   the OCI bundle: annotations `io.kubernetes.cri.sandbox-name` / `.sandbox-namespace` /
//!   `.container-name`.
//! - CRI-O and Podman (containers/storage): `<root>/overlay-containers/<id>/userdata/
//!   config.json`: annotations `io.kubernetes.pod.name` / `.pod.namespace` /
//!   `.container.name` (CRI-O; Podman marks its own `io.container.manager: libpod`), and
//!   `<graphroot>/overlay-containers/containers.json`, whose `names` are Podman's names.
//!
//! The directories come from the defaults, the daemons' command lines (`dockerd
//! --data-root`, `containerd --state`, each `conmon -b <bundle>`) and their config files,
//! and are read through the daemon's own mount namespace (`/proc/<pid>/root`) when it is
//! not ours.
use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

use serde_json::Value;

/// What a runtime's state says of one container; None where it says nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerMeta {
    /// The runtime whose state has the container: `docker`, `containerd`, `crio`, `podman`.
    pub runtime: Option<&'static str>,
    /// Docker's or Podman's name; a Kubernetes container's name in its pod.
    pub name: Option<String>,
    /// A Kubernetes pod's name and namespace.
    pub pod: Option<String>,
    pub namespace: Option<String>,
}

/// The directories the runtimes keep their containers' state in, on this host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateDirs {
    /// Docker data roots (`/var/lib/docker`): `containers/<id>/config.v2.json`.
    pub docker: Vec<PathBuf>,
    /// containerd state directories (`/run/containerd`): `io.containerd.runtime.v2.task/`.
    pub containerd: Vec<PathBuf>,
    /// containers/storage roots, graph and run (`/var/lib/containers/storage`,
    /// `/run/containers/storage`): `overlay-containers/`.
    pub storage: Vec<PathBuf>,
}

const DOCKER_DEFAULT: &str = "/var/lib/docker";
const CONTAINERD_DEFAULT: &str = "/run/containerd";
const STORAGE_DEFAULTS: [&str; 2] = ["/var/lib/containers/storage", "/run/containers/storage"];
const STORAGE_CONF: &str = "/etc/containers/storage.conf";
const DOCKER_CONF: &str = "/etc/docker/daemon.json";

impl StateDirs {
    /// The defaults, each running daemon's own (from its command line and config file), and
    /// the storage root of each running `conmon` (Podman's and CRI-O's per-container monitor).
    pub fn of_host() -> StateDirs {
        let mut dirs = StateDirs::default();
        let mut docker = BTreeSet::new();
        let mut containerd = BTreeSet::new();
        let mut storage = BTreeSet::new();
        let own_mounts = fs::read_link("/proc/self/ns/mnt").ok();
        for (pid, args) in daemons() {
            // The daemon's paths as we can read them: through its root where its mount
            // namespace is not ours (a tracer in a container with the host's pids).
            let seen = |p: PathBuf| -> PathBuf {
                let theirs = fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
                if theirs.is_some() && theirs != own_mounts {
                    Path::new(&format!("/proc/{pid}/root")).join(p.strip_prefix("/").unwrap_or(&p))
                } else {
                    p
                }
            };
            let program = args.first().map(|a| a.rsplit('/').next().unwrap_or(a)).unwrap_or("");
            match program {
                "dockerd" => {
                    let conf = flag(&args, &["--config-file"]).unwrap_or_else(|| DOCKER_CONF.into());
                    let root = flag(&args, &["--data-root", "-g", "--graph"])
                        .or_else(|| docker_conf_root(&seen(conf.into())))
                        .unwrap_or_else(|| DOCKER_DEFAULT.into());
                    docker.insert(seen(root.into()));
                }
                "containerd" => {
                    let state = flag(&args, &["--state"])
                        .or_else(|| {
                            flag(&args, &["--config", "-c"]).and_then(|c| toml_key(&seen(c.into()), "state"))
                        })
                        .unwrap_or_else(|| CONTAINERD_DEFAULT.into());
                    containerd.insert(seen(state.into()));
                }
                "conmon" => {
                    // `-b <root>/overlay-containers/<id>/userdata`
                    if let Some(root) = flag(&args, &["-b", "--bundle"])
                        .and_then(|b| Path::new(&b).ancestors().nth(3).map(Path::to_path_buf))
                    {
                        storage.insert(seen(root));
                    }
                }
                _ => {}
            }
        }
        docker
            .insert(docker_conf_root(Path::new(DOCKER_CONF)).unwrap_or_else(|| DOCKER_DEFAULT.into()).into());
        containerd.insert(CONTAINERD_DEFAULT.into());
        storage.extend(STORAGE_DEFAULTS.iter().map(PathBuf::from));
        for key in ["graphroot", "runroot"] {
            storage.extend(toml_key(Path::new(STORAGE_CONF), key).map(PathBuf::from));
        }
        dirs.docker = docker.into_iter().filter(|d| d.is_dir()).collect();
        dirs.containerd = containerd.into_iter().filter(|d| d.is_dir()).collect();
        dirs.storage = storage.into_iter().filter(|d| d.is_dir()).collect();
        dirs
    }

    /// What the runtimes' state says of container `id`. `claimed`: the runtime its cgroup
    /// path names (asked first); None for a bare id (every runtime is asked). `runtime`
    /// stays None when no state has the id.
    pub fn lookup(&self, id: &str, claimed: Option<&str>) -> ContainerMeta {
        let mut order = [Runtime::Docker, Runtime::Containerd, Runtime::Storage];
        let first = match claimed {
            Some("containerd") => 1,
            Some("crio" | "podman") => 2,
            _ => 0,
        };
        order.swap(0, first);
        order.iter().find_map(|r| r.lookup(self, id)).unwrap_or_default()
    }
}

#[derive(Clone, Copy)]
enum Runtime {
    Docker,
    Containerd,
    Storage,
}

impl Runtime {
    fn lookup(self, dirs: &StateDirs, id: &str) -> Option<ContainerMeta> {
        match self {
            Runtime::Docker => dirs.docker.iter().find_map(|d| docker(d, id)),
            Runtime::Containerd => dirs.containerd.iter().find_map(|d| containerd(d, id)),
            Runtime::Storage => dirs.storage.iter().find_map(|d| storage(d, id)),
        }
    }
}

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_slice(&fs::read(path).ok()?).ok()
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned)
}

/// Docker's `config.v2.json`; cri-dockerd's Kubernetes containers carry their pod in labels.
fn docker(root: &Path, id: &str) -> Option<ContainerMeta> {
    let config = read_json(&root.join("containers").join(id).join("config.v2.json"))?;
    let labels = &config["Config"]["Labels"];
    let name = text(&config, "Name").map(|n| n.trim_start_matches('/').to_owned());
    Some(ContainerMeta {
        runtime: Some("docker"),
        name: text(labels, "io.kubernetes.container.name").or(name),
        pod: text(labels, "io.kubernetes.pod.name"),
        namespace: text(labels, "io.kubernetes.pod.namespace"),
    })
}

/// containerd's OCI bundle of the task, in any containerd namespace (`k8s.io` for the CRI).
fn containerd(state: &Path, id: &str) -> Option<ContainerMeta> {
    let tasks = state.join("io.containerd.runtime.v2.task");
    let config = fs::read_dir(&tasks)
        .ok()?
        .flatten()
        .find_map(|ns| read_json(&ns.path().join(id).join("config.json")))?;
    let a = &config["annotations"];
    Some(ContainerMeta {
        runtime: Some("containerd"),
        name: text(a, "io.kubernetes.cri.container-name"),
        pod: text(a, "io.kubernetes.cri.sandbox-name"),
        namespace: text(a, "io.kubernetes.cri.sandbox-namespace"),
    })
}

/// containers/storage: Podman's containers (named in `containers.json`) and CRI-O's
/// (named by their Kubernetes annotations, or the labels CRI-O keeps as one JSON text).
fn storage(root: &Path, id: &str) -> Option<ContainerMeta> {
    let containers = root.join("overlay-containers");
    let config = read_json(&containers.join(id).join("userdata").join("config.json"))?;
    let a = &config["annotations"];
    if text(a, "io.container.manager").as_deref() == Some("libpod") {
        let names = read_json(&containers.join("containers.json"));
        let name = names.as_ref().and_then(Value::as_array).and_then(|all| {
            let c = all.iter().find(|c| c["id"].as_str() == Some(id))?;
            c["names"].get(0).and_then(Value::as_str).map(str::to_owned)
        });
        return Some(ContainerMeta { runtime: Some("podman"), name, ..ContainerMeta::default() });
    }
    let labels: Value =
        text(a, "io.kubernetes.cri-o.Labels").and_then(|l| serde_json::from_str(&l).ok()).unwrap_or_default();
    let k8s = |key: &str| text(a, key).or_else(|| text(&labels, key));
    Some(ContainerMeta {
        runtime: Some("crio"),
        name: k8s("io.kubernetes.container.name"),
        pod: k8s("io.kubernetes.pod.name"),
        namespace: k8s("io.kubernetes.pod.namespace"),
    })
}

/// Running container daemons and monitors: (pid, argv).
fn daemons() -> Vec<(u32, Vec<String>)> {
    let Ok(dir) = fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            if !matches!(comm.trim(), "dockerd" | "containerd" | "conmon") {
                return None;
            }
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args = cmdline
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            Some((pid, args))
        })
        .collect()
}

/// The value of the first of `names` in `args`: `--name value` or `--name=value`.
fn flag(args: &[String], names: &[&str]) -> Option<String> {
    args.iter().enumerate().find_map(|(i, a)| {
        names.iter().find_map(|n| {
            if a == n {
                args.get(i + 1).cloned()
            } else {
                a.strip_prefix(n).and_then(|rest| rest.strip_prefix('=')).map(str::to_owned)
            }
        })
    })
}

/// `data-root` (or the older `graph`) of a dockerd config file.
fn docker_conf_root(path: &Path) -> Option<String> {
    let conf = read_json(path)?;
    text(&conf, "data-root").or_else(|| text(&conf, "graph"))
}

/// A top-level `key = "value"` of a TOML file (containerd's config, storage.conf's
/// `[storage]` table): the only form these files give these keys in.
fn toml_key(path: &Path, key: &str) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let (k, v) = line.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned()).filter(|v| !v.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f1e6d9a0c2b3a4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5";

    /// A scratch directory, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("tfo-runtime-state-{}-{name}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn write(&self, rel: &str, json: Value) -> PathBuf {
            let path = self.0.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, json.to_string()).unwrap();
            path
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn meta(runtime: &'static str, name: &str, pod: Option<&str>, ns: Option<&str>) -> ContainerMeta {
        ContainerMeta {
            runtime: Some(runtime),
            name: Some(name.into()),
            pod: pod.map(Into::into),
            namespace: ns.map(Into::into),
        }
    }

    #[test]
    fn docker_names_and_cri_dockerd_pods() {
        let s = Scratch::new("docker");
        s.write(
            &format!("containers/{ID}/config.v2.json"),
            serde_json::json!({"ID": ID, "Name": "/web", "Config": {"Labels": {}}}),
        );
        let dirs = StateDirs { docker: vec![s.0.clone()], ..StateDirs::default() };
        assert_eq!(dirs.lookup(ID, Some("docker")), meta("docker", "web", None, None));
        // cri-dockerd: a Kubernetes container is a Docker container with the pod in labels,
        // under a cgroup that names only a bare id: the runtime is Docker, not containerd.
        let other = "0".repeat(64);
        s.write(
            &format!("containers/{other}/config.v2.json"),
            serde_json::json!({"Name": "/k8s_app_web-7d9f_shop_1a2b_0", "Config": {"Labels": {
                "io.kubernetes.pod.name": "web-7d9f",
                "io.kubernetes.pod.namespace": "shop",
                "io.kubernetes.container.name": "app",
                "io.kubernetes.docker.type": "container"}}}),
        );
        assert_eq!(dirs.lookup(&other, None), meta("docker", "app", Some("web-7d9f"), Some("shop")));
        assert_eq!(dirs.lookup(&"1".repeat(64), None), ContainerMeta::default(), "no state: nothing said");
    }

    #[test]
    fn containerd_cri_annotations() {
        let s = Scratch::new("containerd");
        s.write(
            &format!("io.containerd.runtime.v2.task/k8s.io/{ID}/config.json"),
            serde_json::json!({"annotations": {
                "io.kubernetes.cri.container-type": "container",
                "io.kubernetes.cri.container-name": "nginx",
                "io.kubernetes.cri.sandbox-name": "web-0",
                "io.kubernetes.cri.sandbox-namespace": "default",
                "io.kubernetes.cri.sandbox-uid": "1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809"}}),
        );
        let dirs = StateDirs { containerd: vec![s.0.clone()], ..StateDirs::default() };
        assert_eq!(dirs.lookup(ID, None), meta("containerd", "nginx", Some("web-0"), Some("default")));
    }

    #[test]
    fn crio_annotations_and_podman_names() {
        let s = Scratch::new("storage");
        s.write(
            &format!("overlay-containers/{ID}/userdata/config.json"),
            serde_json::json!({"annotations": {
                "io.kubernetes.cri-o.ContainerType": "container",
                "io.kubernetes.cri-o.Labels":
                    "{\"io.kubernetes.container.name\":\"redis\",\"io.kubernetes.pod.name\":\"cache-1\",\"io.kubernetes.pod.namespace\":\"infra\"}",
                "io.kubernetes.pod.name": "cache-1"}}),
        );
        let podman = "2".repeat(64);
        s.write(
            &format!("overlay-containers/{podman}/userdata/config.json"),
            // Podman's own containers carry some CRI-O keys too: its manager says whose it is.
            serde_json::json!({"annotations": {"io.container.manager": "libpod",
                "io.kubernetes.cri-o.TTY": "false"}}),
        );
        s.write("overlay-containers/containers.json", serde_json::json!([{"id": podman, "names": ["ppod"]}]));
        let dirs = StateDirs { storage: vec![s.0.clone()], ..StateDirs::default() };
        assert_eq!(dirs.lookup(ID, Some("crio")), meta("crio", "redis", Some("cache-1"), Some("infra")));
        assert_eq!(dirs.lookup(&podman, Some("podman")), meta("podman", "ppod", None, None));
    }

    #[test]
    fn daemon_flags_and_config_keys() {
        let args: Vec<String> = ["dockerd", "--data-root=/srv/docker", "-H", "unix:///x.sock"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(flag(&args, &["--data-root", "-g"]).as_deref(), Some("/srv/docker"));
        assert_eq!(flag(&args, &["-H"]).as_deref(), Some("unix:///x.sock"));
        assert_eq!(flag(&args, &["--exec-root"]), None);
        let s = Scratch::new("conf");
        let conf = s.0.join("storage.conf");
        fs::write(&conf, "[storage]\ndriver = \"overlay\"\nrunroot = \"/run/x\"\ngraphroot = \"/srv/c\"\n")
            .unwrap();
        assert_eq!(toml_key(&conf, "graphroot").as_deref(), Some("/srv/c"));
        assert_eq!(toml_key(&conf, "nope"), None);
        let daemon = s.write("daemon.json", serde_json::json!({"data-root": "/srv/d"}));
        assert_eq!(docker_conf_root(&daemon).as_deref(), Some("/srv/d"));
    }
}
