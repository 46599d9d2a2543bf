//! The Kubernetes manifests of deploy/kubernetes/ as the tests run them without a cluster:
//! read as Kubernetes reads YAML, a DaemonSet's pod template made a Pod (what the
//! DaemonSet controller does on each node), a Secret made from files, and what Podman 4.3
//! (Debian 12's) needs told differently from a kubelet (see [`for_podman_4_3`]).
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use base64::Engine as _;
use serde_json::{json, Value};

/// deploy/kubernetes/.
pub fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes")
}

/// Every `*.yaml` of deploy/kubernetes/, sorted.
pub fn manifests() -> Vec<PathBuf> {
    let dir = manifests_dir();
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map_while(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    found.sort();
    found
}

/// One manifest, read as Kubernetes reads YAML (1.1: `defaultMode: 0400` is octal).
pub fn read(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut options = serde_saphyr::Options::default();
    options.legacy_octal_numbers = true;
    serde_saphyr::from_str_with_options(&text, options).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Pod a DaemonSet makes on a node: its template's metadata and spec, named `name`.
pub fn pod_of_daemonset(daemonset: &Value, name: &str) -> Value {
    assert_eq!(daemonset["kind"], "DaemonSet", "{daemonset}");
    let template = &daemonset["spec"]["template"];
    let mut metadata = template["metadata"].clone();
    metadata["name"] = json!(name);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"].clone()})
}

/// A Secret named `name` holding `files` (key, content), as `kubectl create secret generic
/// --from-file` makes it.
pub fn secret(name: &str, files: &[(String, Vec<u8>)]) -> Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    let data: serde_json::Map<String, Value> =
        files.iter().map(|(key, bytes)| (key.clone(), json!(b64.encode(bytes)))).collect();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque", "data": data})
}

/// Linux's capabilities by number (include/uapi/linux/capability.h), without `CAP_`.
const CAPABILITIES: &str = "CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP \
     LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE \
     SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME \
     SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG \
     WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF CHECKPOINT_RESTORE";

/// The capabilities of a /proc/PID/status mask (`CapEff:` and the like, hex), by name as a
/// securityContext spells them.
pub fn capability_names(hex_mask: &str) -> BTreeSet<String> {
    let mask = u64::from_str_radix(hex_mask.trim(), 16).unwrap_or_else(|e| panic!("{hex_mask:?}: {e}"));
    let names: Vec<&str> = CAPABILITIES.split_whitespace().collect();
    (0..64)
        .filter(|bit| mask & (1 << bit) != 0)
        .map(|bit| names.get(bit).map_or_else(|| format!("bit {bit}"), |n| n.to_string()))
        .collect()
}

/// What the securityContext's `seccompProfile` becomes for Podman 4.3, whose kube play
/// ignores that field and reads only the `seccomp.security.alpha.kubernetes.io/pod`
/// annotation (pkg/specgen/generate/kube/seccomp.go, v4.3.1): the annotation's value, and
/// the profile to write under `--seccomp-profile-root` as `runtime-default.json` where
/// it names one.
pub struct Seccomp {
    pub annotation: String,
    pub profile: Option<Value>,
}

/// A pod spec's container, made runnable by Debian's Podman 4.3 offline, as a kubelet would
/// run it; what differs is named here, and everything else is run as written:
/// - `ports`: kube play publishes each containerPort on the host (getPodPorts, v4.3.1), which
///   a kubelet does not do and which needs a bridge network; the test runs the pod with
///   `--network none` and scrapes it inside its network namespace, so they are left out.
/// - `seccompProfile`: see [`Seccomp`] and [`runtime_default_seccomp`].
/// - `hostPID` is ignored before Podman 4.4 (kube.go: "TODO ... Host{IPC,Network,PID}"):
///   the caller gives it through containers.conf's `pidns` and checks the container's PID
///   namespace.
pub fn for_podman_4_3(container: &mut Value, installed_profile: &Path) -> Seccomp {
    container.as_object_mut().expect("a container").remove("ports");
    let profile = &container["securityContext"]["seccompProfile"];
    match profile["type"].as_str() {
        Some("Unconfined") => Seccomp { annotation: "unconfined".into(), profile: None },
        Some("RuntimeDefault") => {
            let text = std::fs::read_to_string(installed_profile)
                .unwrap_or_else(|e| panic!("{}: {e}", installed_profile.display()));
            let installed: Value = serde_json::from_str(&text).expect("the installed seccomp profile");
            Seccomp {
                annotation: "localhost/runtime-default.json".into(),
                profile: Some(runtime_default_seccomp(installed)),
            }
        }
        other => panic!("seccompProfile {other:?} is not translated for Podman 4.3: {profile}"),
    }
}

/// RuntimeDefault as Docker's and containerd's default profiles apply it to bpf(2), from
/// Debian 12's default profile (containers-common 0.50, /usr/share/containers/seccomp.json),
/// which lets bpf(2) through only with CAP_SYS_ADMIN: bpf(2) gated by CAP_BPF instead (an
/// EPERM rule excluding CAP_SYS_ADMIN and CAP_BPF, an allow rule including CAP_BPF, as
/// moby's default.json has them). perf_event_open is left as 0.50 has it (EPERM without
/// CAP_SYS_ADMIN), so the pod runs with no more than it needs.
pub fn runtime_default_seccomp(mut installed: Value) -> Value {
    let rules = installed["syscalls"].as_array_mut().expect("a seccomp profile's syscalls");
    for rule in rules.iter_mut().filter(|r| r["action"] == "SCMP_ACT_ERRNO") {
        if let Some(names) = rule["names"].as_array_mut() {
            names.retain(|n| n != "bpf");
        }
    }
    rules.push(json!({
        "names": ["bpf"], "action": "SCMP_ACT_ERRNO", "args": [], "errnoRet": 1,
        "includes": {}, "excludes": {"caps": ["CAP_SYS_ADMIN", "CAP_BPF"]},
    }));
    rules.push(json!({
        "names": ["bpf"], "action": "SCMP_ACT_ALLOW", "args": [],
        "includes": {"caps": ["CAP_BPF"]}, "excludes": {},
    }));
    installed
}

/// Podman before 4.4 writes a Secret's values into the volume it makes of it still
/// base64-encoded (VolumeFromSecret reads `data` as strings, v4.3.1; 4.4 decodes them):
/// decodes each such file of `dir` (the volume's mount point) in place, so the pod reads
/// what a kubelet would mount. Then every file there must be the Secret's.
pub fn secret_volume_as_a_kubelet_mounts_it(dir: &Path, files: &[(String, Vec<u8>)]) {
    let b64 = base64::engine::general_purpose::STANDARD;
    for (key, bytes) in files {
        let path = dir.join(key);
        let written = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if written != *bytes && written == b64.encode(bytes).into_bytes() {
            std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        let now = std::fs::read(&path).unwrap();
        assert!(now == *bytes, "{} is not the Secret's {key}", path.display());
    }
}
