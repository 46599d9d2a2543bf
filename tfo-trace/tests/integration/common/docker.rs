//! Container engines for tests, each private to the test process: a `dockerd` with its own
//! data root, exec root, pid file and socket under the test's scratch directory, and Podman
//! with its own storage; images made offline from a binary on this host (nothing can be
//! pulled). Everything an engine made is removed when it is dropped: its containers, the
//! daemon (stopped by its pid), its mounts, its directories and the parent cgroups its
//! runtime made. A test that cannot start an
//! engine here skips with the reason.
//!
//! ```ignore
//! let engine = Engine::docker(CgroupDriver::Cgroupfs);   // or Engine::podman()
//! let image = engine.import_binary(common::exe(), "tfo-test");
//! engine.run(&["-d", "--name", "x", "--network", "none", &image, "/tfo-trace", "--version"]);
//! ```
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use super::{skip, which, HANG_LIMIT};

/// How dockerd manages its containers' cgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupDriver {
    /// `/docker/<id>`: needs nothing but the cgroup mounts.
    Cgroupfs,
    /// `system.slice/docker-<id>.scope`: needs systemd as init (dockerd asks it over D-Bus).
    Systemd,
}

/// Which engine, and the process that serves it (dockerd; Podman has none).
enum Kind {
    Docker {
        daemon: Child,
        socket: PathBuf,
    },
    /// `conf`: a containers.conf of its own (CONTAINERS_CONF), read instead of the host's.
    Podman {
        conf: Option<PathBuf>,
    },
}

/// A private container engine; dropped, it removes everything it made.
pub struct Engine {
    kind: Kind,
    /// The scratch directory every file of the engine lives under.
    dir: PathBuf,
    /// The engine's command-line client (`docker`, `podman`).
    cli: PathBuf,
    /// The parent cgroups its runtime makes for containers (`docker`, `libpod_parent`) in
    /// each hierarchy, where they were not there before it: removed with it.
    parent_cgroups: Vec<PathBuf>,
}

/// `name` in every cgroup hierarchy (v1 and v2) where it is not there yet.
fn cgroups_not_there(name: &str) -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && matches!(f[2], "cgroup" | "cgroup2")).then(|| Path::new(f[1]).join(name))
        })
        .filter(|d| !d.exists())
        .collect()
}

/// Removes the cgroup tree at `dir`, deepest first (a cgroup still in use stays).
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
            remove_cgroup_tree(&e.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// The scratch directory of one engine of this test process (short: containerd's socket
/// paths live under it and a unix socket path has 108 bytes at most).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tfo-{name}-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

impl Engine {
    /// Starts a private `dockerd` (Debian's docker.io) with `driver`, without touching the
    /// host's networking (`--iptables=false --bridge=none`: containers use `--network none`
    /// or another container's namespace). Skips when it cannot run here.
    pub fn docker(driver: CgroupDriver) -> Engine {
        let Some(dockerd) = which("dockerd") else {
            skip("needs dockerd (Debian's docker.io; `cargo xtask setup` installs it)")
        };
        // The client of the docker.io package, which speaks the daemon's API version.
        let cli =
            ["/usr/bin/docker"].iter().map(PathBuf::from).find(|p| p.is_file()).or_else(|| which("docker"));
        let Some(cli) = cli else { skip("needs the docker client (Debian's docker.io)") };
        if driver == CgroupDriver::Systemd && !Path::new("/run/systemd/system").is_dir() {
            let init = std::fs::read_to_string("/proc/1/comm").unwrap_or_default();
            skip(format!(
                "dockerd's systemd cgroup driver needs systemd as init (here pid 1 is {})",
                init.trim()
            ));
        }
        let dir = scratch(if driver == CgroupDriver::Systemd { "dockerd-systemd" } else { "dockerd" });
        let parent_cgroups = cgroups_not_there("docker");
        let socket = dir.join("docker.sock");
        let log = std::fs::File::create(dir.join("dockerd.log")).expect("creating dockerd.log");
        let driver_opt = match driver {
            CgroupDriver::Cgroupfs => "native.cgroupdriver=cgroupfs",
            CgroupDriver::Systemd => "native.cgroupdriver=systemd",
        };
        let daemon = Command::new(dockerd)
            .args(["--iptables=false", "--ip6tables=false", "--bridge=none", "--exec-opt", driver_opt])
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("docker.pid"))
            .arg("-H")
            .arg(format!("unix://{}", socket.display()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dockerd.log"))
            .stderr(log)
            .spawn()
            .expect("spawning dockerd");
        let engine = Engine { kind: Kind::Docker { daemon, socket }, dir, cli, parent_cgroups };
        engine.wait_ready();
        engine
    }

    /// Podman (Debian's package, rootful), with its storage, run state and temporary files
    /// under the scratch directory and the cgroupfs manager (no systemd needed). Skips
    /// when it cannot run a container here.
    pub fn podman() -> Engine {
        Self::podman_in("podman", None)
    }

    /// [`Engine::podman`] in scratch directory `name` (apart from any other engine of this
    /// test process), reading its settings from a containers.conf of its own
    /// (CONTAINERS_CONF; no other is read then): `containers` are lines of its
    /// `[containers]` table, beside the limits this host lets a container have (Podman
    /// raises nofile and nproc by default, which needs CAP_SYS_RESOURCE).
    pub fn podman_configured(name: &str, containers: &[&str]) -> Engine {
        let dir = scratch(name);
        let conf = dir.join("containers.conf");
        let limits = r#"default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]"#;
        let text = format!("[containers]\n{limits}\n{}\n", containers.join("\n"));
        std::fs::write(&conf, text).expect("writing containers.conf");
        Self::podman_in(name, Some(conf))
    }

    fn podman_in(name: &str, conf: Option<PathBuf>) -> Engine {
        let Some(cli) = which("podman") else {
            skip("needs podman (Debian's package; `cargo xtask setup` installs it)")
        };
        let parent_cgroups = cgroups_not_there("libpod_parent");
        let engine = Engine { kind: Kind::Podman { conf }, dir: scratch(name), cli, parent_cgroups };
        let out =
            engine.command(&["info", "--format", "{{.Host.CgroupManager}}"]).output().expect("podman info");
        if !out.status.success() {
            skip(format!("podman cannot run here: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        engine
    }

    /// `docker` or `podman`, as the runtime names itself in events.
    pub fn runtime(&self) -> &'static str {
        match self.kind {
            Kind::Docker { .. } => "docker",
            Kind::Podman { .. } => "podman",
        }
    }

    /// The engine's client with its connection (or storage) options and `args`.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.cli);
        match &self.kind {
            Kind::Docker { socket, .. } => {
                c.arg("-H").arg(format!("unix://{}", socket.display()));
            }
            Kind::Podman { conf } => {
                if let Some(conf) = conf {
                    c.env("CONTAINERS_CONF", conf);
                }
                c.arg("--root").arg(self.dir.join("root"));
                c.arg("--runroot").arg(self.dir.join("run"));
                c.arg("--tmpdir").arg(self.dir.join("tmp"));
                c.args(["--cgroup-manager", "cgroupfs", "--events-backend", "file"]);
            }
        }
        c.args(args).stdin(Stdio::null());
        c
    }

    /// Runs the client with `args`; panics with its output if it fails.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.output(args);
        assert!(
            out.status.success(),
            "{} {args:?}: {}\n{}",
            self.runtime(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Runs the client with `args`, bounded by [`HANG_LIMIT`].
    pub fn output(&self, args: &[&str]) -> Output {
        let mut child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{} {args:?}: {e}", self.runtime()));
        crate::common::wait_exit(&mut child, &format!("{} {args:?}", self.runtime()));
        child.wait_with_output().expect("the client's output")
    }

    /// `docker run` / `podman run` with `args` (options, image, command): its stdout.
    /// Podman gets limits this host lets a container have (it raises nofile and nproc by
    /// default, which needs CAP_SYS_RESOURCE).
    pub fn run(&self, args: &[&str]) -> String {
        let mut all = vec!["run"];
        if matches!(self.kind, Kind::Podman { .. }) {
            all.extend(["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]);
        }
        all.extend(args);
        self.ok(&all)
    }

    /// Makes image `name:1` holding `binary` as `/<file name>`, with the shared libraries it
    /// links (as `ldd` lists them), from a tar on stdin: no registry needed.
    pub fn import_binary(&self, binary: &Path, name: &str) -> String {
        let rootfs = self.dir.join(format!("rootfs-{name}"));
        let _ = std::fs::remove_dir_all(&rootfs);
        std::fs::create_dir_all(&rootfs).expect("making the image's rootfs");
        let file = binary.file_name().expect("a binary's file name");
        std::fs::copy(binary, rootfs.join(file)).expect("copying the binary into the rootfs");
        let ldd = Command::new("ldd").arg(binary).output().expect("ldd");
        for lib in String::from_utf8_lossy(&ldd.stdout).split_whitespace().filter(|w| w.starts_with('/')) {
            let to = rootfs.join(lib.trim_start_matches('/'));
            std::fs::create_dir_all(to.parent().unwrap()).expect("making a library folder");
            std::fs::copy(lib, &to).unwrap_or_else(|e| panic!("copying {lib}: {e}"));
        }
        let tag = format!("{name}:1");
        let mut tar = Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .args(["-c", "."])
            .stdout(Stdio::piped())
            .spawn()
            .expect("tar");
        let status = self
            .command(&["import", "-", &tag])
            .stdin(tar.stdout.take().expect("tar's stdout"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("import");
        let tarred = tar.wait().expect("waiting for tar");
        assert!(tarred.success(), "tar of {}: {tarred}", rootfs.display());
        assert!(status.success(), "{} import {tag}: {status}", self.runtime());
        let _ = std::fs::remove_dir_all(&rootfs);
        tag
    }

    /// `inspect -f FORMAT name`.
    pub fn inspect(&self, name: &str, format: &str) -> String {
        self.ok(&["inspect", "-f", format, name])
    }

    /// The host pid of a running container's first process.
    pub fn pid_of(&self, name: &str) -> u32 {
        self.inspect(name, "{{.State.Pid}}").parse().expect("a pid")
    }

    /// Waits until the daemon answers (at most [`HANG_LIMIT`]); skips with its log's last
    /// lines if it exits first.
    fn wait_ready(&self) {
        let Kind::Docker { daemon, .. } = &self.kind else { return };
        let answers = || {
            let version = self.command(&["version"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
            match version {
                Ok(s) if s.success() => Ok(()),
                _ if !Path::new(&format!("/proc/{}", daemon.id())).exists() => Ok(()), // said below
                _ => Err(()),
            }
        };
        let up = crate::common::wait::within(HANG_LIMIT, answers).is_ok()
            && Path::new(&format!("/proc/{}", daemon.id())).exists();
        if !up {
            let log = std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(3).collect();
            skip(format!("dockerd did not start here: {}", tail.join(" | ")));
        }
    }

    /// Removes every pod, container, volume, secret and image this engine has.
    fn remove_all(&self) {
        if matches!(self.kind, Kind::Podman { .. }) {
            let _ = self.output(&["pod", "rm", "-af"]);
        }
        let ids = self.output(&["ps", "-aq"]);
        let ids: Vec<String> =
            String::from_utf8_lossy(&ids.stdout).split_whitespace().map(str::to_owned).collect();
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f"];
            args.extend(ids.iter().map(String::as_str));
            let _ = self.output(&args);
        }
        if matches!(self.kind, Kind::Podman { .. }) {
            let _ = self.output(&["volume", "rm", "-af"]);
            let _ = self.output(&["secret", "rm", "-a"]);
        }
        let images = self.output(&["images", "-q"]);
        let images: Vec<String> =
            String::from_utf8_lossy(&images.stdout).split_whitespace().map(str::to_owned).collect();
        if !images.is_empty() {
            let mut args = vec!["rmi", "-f"];
            args.extend(images.iter().map(String::as_str));
            let _ = self.output(&args);
        }
    }
}

/// Mount points at or under `dir` (deepest first), from /proc/self/mounts.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut found: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|m| PathBuf::from(m.replace("\\040", " ")))
        .filter(|m| m.starts_with(dir))
        .collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    found
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.remove_all();
        if let Kind::Docker { daemon, .. } = &mut self.kind {
            // SAFETY: kill on our own child's pid; dockerd stops its containerd with it.
            unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
            let _ = crate::common::wait::within(HANG_LIMIT, || daemon.try_wait().ok().flatten().ok_or(()));
            let _ = daemon.kill();
            let _ = daemon.wait();
        }
        for m in mounts_under(&self.dir) {
            if let Ok(c) = std::ffi::CString::new(m.as_os_str().as_encoded_bytes()) {
                // SAFETY: a NUL-terminated path; MNT_DETACH leaves nothing half-unmounted.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        for parent in &self.parent_cgroups {
            remove_cgroup_tree(parent);
        }
    }
}
