//! What `cargo xtask dist` ships (target/dist/), tried as the hosts that install it would:
//! the static binaries have no interpreter and need no library; the x86_64 one runs
//! `doctor` and traces the lab exactly (against the kernel's counters) inside a Debian 11
//! userspace (glibc 2.31), where the glibc build cannot start; the aarch64 one runs under
//! qemu-user; the .deb installs into a clean Debian 11, its man pages and `--version` work
//! there and `dpkg --purge` leaves nothing; lintian finds no error; the rpms pass rpmlint
//! without an error, and the x86_64 one installs into a scratch root with `rpm --root`,
//! runs from there, and `rpm -e` leaves nothing of its own; the image loads into Docker
//! and, run with the privileges the README names, traces the lab exactly, and serves
//! metrics on the exporter's default port.
//!
//! Nothing here builds: `cargo xtask test` runs `dist` once before the tests, and caches the
//! Debian 11 userspace (debootstrap) in target/userspace/ (xtask/src/userspace.rs); a test
//! whose artefact is missing skips, saying how to make it.
use crate::common;

use std::{
    collections::BTreeSet,
    fs,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use common::{
    artefact, count, dist_dir,
    docker::{CgroupDriver, Engine},
    netns_inode, Deltas, Tracer,
};
use tfo_trace::{
    events::{Outcome, Role},
    lab::{traffic::ClientArgs, Lab, LabConfig, Side},
};

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The userspace the static binary and the .deb are tried in (xtask's userspace::SUITE).
const SUITE: &str = "bullseye";

// ---- where things are --------------------------------------------------------------

fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target")
}

#[derive(Clone, Copy, Debug)]
enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    fn triple(self) -> String {
        format!("{}-unknown-linux-musl", self.name())
    }

    fn binary(self) -> PathBuf {
        artefact(&format!("tfo-trace-{VERSION}-{}-linux", self.name()))
    }

    /// Runs the binary here: directly, or under qemu-user for aarch64.
    fn run(self, args: &[&str]) -> Output {
        let exe = self.binary();
        let mut cmd = match self {
            Arch::X86_64 => Command::new(&exe),
            Arch::Aarch64 => {
                if Command::new("qemu-aarch64-static").arg("--version").output().is_err() {
                    common::skip("needs qemu-aarch64-static (`cargo xtask setup` installs qemu-user-static)");
                }
                let mut c = Command::new("qemu-aarch64-static");
                c.arg(&exe);
                c
            }
        };
        cmd.args(args).stdin(Stdio::null()).output().expect("running the dist binary")
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(out: Output, what: &str) -> String {
    assert!(out.status.success(), "{what}: {}\n{}{}", out.status, text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

// ---- a Debian userspace to chroot into -----------------------------------------------

/// An overlay on the cached userspace (which stays clean), with /proc, /sys and /dev of the
/// host bind-mounted: a chroot there sees the host's kernel, BTF and network namespaces
/// through the distribution's own files. Unmounted and removed on drop.
struct Root {
    dir: PathBuf,
    merged: PathBuf,
    mounts: Vec<PathBuf>,
}

impl Root {
    fn new(tag: &str) -> Root {
        let lower = target_dir().join("userspace").join(SUITE);
        if !lower.join(".tfo-trace-complete").exists() {
            let failed = target_dir().join("userspace").join(format!("{SUITE}.failed"));
            let why = fs::read_to_string(failed).unwrap_or_else(|_| "not made yet".to_string());
            common::skip(format!(
                "no Debian 11 userspace in {} ({}); `cargo xtask test` makes it with debootstrap",
                lower.display(),
                why.trim()
            ));
        }
        let dir = std::env::temp_dir().join(format!("tfo-dist-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (upper, work, merged) = (dir.join("upper"), dir.join("work"), dir.join("merged"));
        for d in [&upper, &work, &merged] {
            fs::create_dir_all(d).unwrap();
        }
        let mut root = Root { dir, merged: merged.clone(), mounts: Vec::new() };
        let opts =
            format!("lowerdir={},upperdir={},workdir={}", lower.display(), upper.display(), work.display());
        root.mount(&["-t", "overlay", "overlay", "-o", &opts], &merged);
        for host in ["/proc", "/sys", "/dev"] {
            root.mount(&["--bind", host], &merged.join(&host[1..]));
        }
        root
    }

    fn mount(&mut self, args: &[&str], at: &Path) {
        let out = Command::new("mount").args(args).arg(at).output().expect("mount");
        assert!(out.status.success(), "mount {args:?} {}: {}", at.display(), text(&out.stderr));
        self.mounts.push(at.to_path_buf());
    }

    /// A command run inside, with the distribution's PATH.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new("chroot");
        c.arg(&self.merged)
            .arg(program)
            .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LC_ALL", "C")
            .stdin(Stdio::null());
        c
    }

    fn run(&self, program: &str, args: &[&str]) -> Output {
        self.command(program).args(args).output().expect("chroot")
    }

    /// Copies a host file in, at `path` (absolute inside), with its permissions.
    fn copy_in(&self, from: &Path, path: &str) {
        let to = self.merged.join(&path[1..]);
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        fs::copy(from, &to).unwrap_or_else(|e| panic!("copying {} in: {e:?}", from.display()));
    }

    /// Every path inside (relative), except the host's mounts and what dpkg, man-db and
    /// the tests themselves write as they work.
    fn paths(&self) -> Vec<String> {
        const BOOKKEEPING: [&str; 7] = ["proc", "sys", "dev", "tmp", "var/lib/dpkg", "var/log", "var/cache"];
        let mut out = Vec::new();
        let mut todo = vec![self.merged.clone()];
        while let Some(d) = todo.pop() {
            for e in fs::read_dir(&d).unwrap().map_while(Result::ok) {
                let p = e.path();
                let rel = p.strip_prefix(&self.merged).unwrap().to_string_lossy().into_owned();
                if BOOKKEEPING.iter().any(|b| rel == *b || rel.starts_with(&format!("{b}/"))) {
                    continue;
                }
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    todo.push(p);
                }
                out.push(rel);
            }
        }
        out.sort();
        out
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        for m in self.mounts.iter().rev() {
            let _ = Command::new("umount").arg(m).status();
        }
        if self.mounts.iter().all(|m| !is_mountpoint(m)) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn is_mountpoint(p: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts.lines().any(|l| l.split_whitespace().nth(1) == Some(&*p.to_string_lossy()))
}

// ---- the lab, traced by a tracer started elsewhere ------------------------------------

/// Makes TFO traffic in a fresh lab while `start` runs a tracer (in a chroot, a container),
/// then checks what it printed against the kernel's counters: client accepted =
/// TcpExtTCPFastOpenActive, cookie requests = TcpExtTCPFastOpenCookieReqd, server accepted
/// = TcpExtTCPFastOpenPassive.
fn traces_the_lab_exactly(start: impl FnOnce() -> Tracer) {
    let lab = Lab::create(LabConfig::default()).unwrap();
    let _server = lab.start_server(common::exe(), 0, 8080, 16, false).unwrap();
    let (cli_ns, srv_ns) = (netns_inode(&lab, Side::Client), netns_inode(&lab, Side::Server));
    let before = Deltas::since(&lab);
    let tracer = start();
    let n = 4;
    let dst = SocketAddr::new(lab.server_addr(0, false).unwrap(), 8080);
    let run = lab.run_client(common::exe(), &ClientArgs { count: n + 1, ..ClientArgs::new(dst) }).unwrap();
    let (events, stderr) = tracer.stop();
    let (dc, ds) = before.both();
    assert_eq!(run.ok_count(), (n + 1) as usize, "client: {}", run.stderr);
    assert_eq!(dc.get("TcpExtTCPFastOpenActive"), u64::from(n), "client counters: {dc:?}");
    eprintln!("tracer: {stderr:?}");
    common::assert_traced_exactly(&events, &lab, &before, run.pid);
    eprintln!(
        "traced: {} client accepted (Active {}), {} server accepted (Passive {}); {}",
        count(&events, cli_ns, Role::Client, Outcome::Accepted),
        dc.get("TcpExtTCPFastOpenActive"),
        count(&events, srv_ns, Role::Server, Outcome::Accepted),
        ds.get("TcpExtTCPFastOpenPassive"),
        common::closing(&stderr).map_or_else(|| "no closing summary".into(), |c| c.to_string())
    );
}

// ---- the tests -----------------------------------------------------------------------

fn static_binaries_have_no_interpreter_and_no_library() {
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let exe = arch.binary();
        let headers = ok(Command::new("readelf").arg("-hlW").arg(&exe).output().unwrap(), "readelf -hl");
        let dynamic = ok(Command::new("readelf").arg("-dW").arg(&exe).output().unwrap(), "readelf -d");
        assert!(!headers.contains("INTERP"), "{arch:?} has a program interpreter:\n{headers}");
        assert!(!dynamic.contains("(NEEDED)"), "{arch:?} needs a library:\n{dynamic}");
        let machine = match arch {
            Arch::X86_64 => "X86-64",
            Arch::Aarch64 => "AArch64",
        };
        assert!(headers.lines().any(|l| l.contains("Machine:") && l.contains(machine)), "{headers}");
        let symbols = Command::new("readelf").arg("-sW").arg(&exe).output().unwrap();
        assert!(!text(&symbols.stdout).contains(".symtab"), "{arch:?} is stripped of its symbol table");
        eprintln!("{}: {} bytes", exe.display(), fs::metadata(&exe).unwrap().len());
    }
}

/// `--version` names the version, the commit, the target, and the SHA-256 of an eBPF
/// object that the build made and that is, byte for byte, inside the binary.
fn version_names_the_commit_target_and_embedded_ebpf_object() {
    let head = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok();
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let v = ok(arch.run(&["--version"]), "--version");
        let lines: Vec<&str> = v.lines().collect();
        assert_eq!(lines.first().copied(), Some(&*format!("tfo-trace {VERSION}")), "{v}");
        assert_eq!(lines.get(2).copied(), Some(&*format!("target: {}", arch.triple())), "{v}");
        let commit = lines.get(1).and_then(|l| l.strip_prefix("commit: ")).expect("a commit line");
        if let Some(h) = head.as_ref().filter(|h| h.status.success()) {
            let h = text(&h.stdout);
            assert!(
                commit.starts_with(h.trim()),
                "built from {commit}, HEAD is {h}: rerun `cargo xtask dist`"
            );
        }
        let hash = lines.get(3).and_then(|l| l.strip_prefix("ebpf:   sha256:")).expect("an ebpf line");
        assert_eq!(hash.len(), 64, "{v}");
        let object = built_object(arch, hash);
        let binary = fs::read(arch.binary()).unwrap();
        assert!(
            binary.windows(object.len()).any(|w| w == object),
            "the object is embedded in the {arch:?} binary"
        );
    }
}

/// The eBPF object the dist build of `arch` made whose SHA-256 is `hash`.
fn built_object(arch: Arch, hash: &str) -> Vec<u8> {
    let built = target_dir().join(arch.triple()).join("release-static/build");
    fs::read_dir(&built)
        .unwrap_or_else(|e| panic!("{}: {e:?}", built.display()))
        .map_while(Result::ok)
        .map(|e| e.path().join("out/tfo-trace"))
        .filter_map(|p| fs::read(p).ok())
        .find(|o| sha256(o) == hash)
        .unwrap_or_else(|| panic!("no eBPF object in {} hashes to {hash}", built.display()))
}

/// What ships carries only what users run: the eBPF object embedded in each binary has
/// the tracer's programs and none of the benchmark's floor, and the binary has no
/// `floor`, `lab-load` or `lab-soak` subcommand (the `fixtures` feature, off in `dist`),
/// while the demo's own `lab-server` and `lab-client` are there.
fn shipped_binaries_carry_no_fixture() {
    use object::{Object as _, ObjectSymbol as _};
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let v = ok(arch.run(&["--version"]), "--version");
        let hash = v.lines().find_map(|l| l.strip_prefix("ebpf:   sha256:")).expect("an ebpf line");
        let object = built_object(arch, hash);
        let elf = object::File::parse(&*object).expect("the embedded eBPF object parses");
        let programs: Vec<&str> = elf
            .symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text && s.is_global())
            .filter_map(|s| s.name().ok())
            .collect();
        assert!(programs.contains(&"tfo_state"), "{arch:?}: the tracer's programs: {programs:?}");
        let floor: Vec<&&str> = programs.iter().filter(|p| p.starts_with("floor")).collect();
        assert!(floor.is_empty(), "{arch:?} ships the floor's programs {floor:?}");
        for fixture in ["floor", "lab-load", "lab-soak"] {
            let out = arch.run(&[fixture, "--help"]);
            assert_eq!(out.status.code(), Some(2), "{arch:?} has `{fixture}`: {}", text(&out.stdout));
        }
        for demo_peer in ["lab-server", "lab-client"] {
            ok(arch.run(&[demo_peer, "--help"]), demo_peer);
        }
    }
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256sums_cover_and_match_every_artefact() {
    let sums = artefact("SHA256SUMS");
    let out =
        Command::new("sha256sum").args(["--check", "--strict"]).arg(&sums).current_dir(dist_dir()).output();
    let listed = ok(out.unwrap(), "sha256sum --check");
    let mut files: Vec<String> = fs::read_dir(dist_dir())
        .unwrap()
        .map_while(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "SHA256SUMS")
        .collect();
    files.sort();
    let mut checked: Vec<String> =
        listed.lines().filter_map(|l| l.strip_suffix(": OK")).map(str::to_string).collect();
    checked.sort();
    assert_eq!(checked, files, "every artefact is in SHA256SUMS, and checks");
    assert_eq!(files.len(), 8, "two binaries, two .debs, two .rpms, two images: {files:?}");
}

fn x86_64_binary_runs_doctor_and_traces_the_lab_in_debian_11() {
    require_kernel!();
    let exe = Arch::X86_64.binary();
    let root = Root::new("bullseye-static");
    let libc = text(&root.run("/lib/x86_64-linux-gnu/libc.so.6", &[]).stdout);
    assert!(libc.contains("version 2.31"), "a Debian 11 userspace has glibc 2.31: {libc}");
    // What the issue was about: the glibc build does not start there.
    root.copy_in(common::exe(), "/usr/local/bin/tfo-trace-glibc");
    let glibc = root.run("/usr/local/bin/tfo-trace-glibc", &["--version"]);
    eprintln!("the glibc build in Debian 11: {} {}", glibc.status, text(&glibc.stderr).trim());

    root.copy_in(&exe, "/usr/local/bin/tfo-trace");
    let doctor = ok(root.run("tfo-trace", &["doctor"]), "doctor in Debian 11");
    assert!(doctor.contains("BTF:     yes"), "{doctor}");
    assert!(doctor.lines().any(|l| l.contains("tracepoint:") && l.contains("loads")), "{doctor}");
    traces_the_lab_exactly(|| {
        Tracer::start_with(root.command("/usr/local/bin/tfo-trace"), &["trace", "--json"])
    });
}

/// Under qemu-user the kernel's bpf(2) is not reachable (qemu does not pass it on), so
/// `doctor` says each backend is refused; what it must do is run, read the host and exit 0.
fn aarch64_binary_runs_version_and_doctor_under_qemu_user() {
    let v = ok(Arch::Aarch64.run(&["--version"]), "aarch64 --version");
    assert!(v.contains("target: aarch64-unknown-linux-musl"), "{v}");
    let doctor = ok(Arch::Aarch64.run(&["doctor"]), "aarch64 doctor");
    assert!(doctor.contains("machine: aarch64"), "qemu-user runs it as aarch64: {doctor}");
    assert!(doctor.contains("BTF:     yes"), "{doctor}");
    assert!(doctor.contains("Backends"), "{doctor}");
}

fn deb_installs_works_and_purges_cleanly_in_debian_11() {
    require_kernel!(); // root: mount, chroot, dpkg
    let deb = artefact(&format!("tfo-trace_{VERSION}_amd64.deb"));
    let root = Root::new("bullseye-deb");
    let before = root.paths();
    root.copy_in(&deb, "/tmp/tfo-trace.deb");
    ok(root.run("dpkg", &["-i", "/tmp/tfo-trace.deb"]), "dpkg -i");

    let v = ok(root.run("tfo-trace", &["--version"]), "tfo-trace --version from PATH");
    assert!(
        v.starts_with(&format!("tfo-trace {VERSION}\n")) && v.contains("x86_64-unknown-linux-musl"),
        "{v}"
    );
    assert_eq!(ok(root.run("which", &["tfo-trace"]), "which").trim(), "/usr/bin/tfo-trace");
    let page = ok(root.run("man", &["-P", "cat", "tfo-trace"]), "man tfo-trace");
    for want in ["tfo-trace-top(1)", "EXIT STATUS", "FILES", "EXAMPLES"] {
        assert!(page.contains(want), "man tfo-trace has {want}:\n{page}");
    }
    let top = ok(root.run("man", &["-P", "cat", "tfo-trace-top"]), "man tfo-trace-top");
    assert!(top.contains("KEYS") && top.contains("Ctrl-C") && top.contains("--max-groups"), "{top}");
    // A page for every subcommand the binary documents.
    let pages = ok(
        Command::new(common::exe())
            .args(["man", "--dir", &root.dir.join("pages").to_string_lossy()])
            .output()
            .unwrap(),
        "man --dir",
    );
    for p in pages.lines() {
        let name = Path::new(p).file_name().unwrap().to_string_lossy().into_owned();
        let installed = root.merged.join("usr/share/man/man1").join(format!("{name}.gz"));
        assert!(installed.exists(), "{} is installed", installed.display());
    }
    for f in [
        "usr/share/bash-completion/completions/tfo-trace",
        "usr/share/zsh/vendor-completions/_tfo-trace",
        "usr/share/fish/vendor_completions.d/tfo-trace.fish",
        "usr/share/doc/tfo-trace/copyright",
    ] {
        assert!(root.merged.join(f).exists(), "{f} is installed");
    }
    let unit = fs::read_to_string(root.merged.join("lib/systemd/system/tfo-trace-exporter.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/tfo-trace export"), "{unit}");
    let enabled = root.run("find", &["/etc/systemd", "/lib/systemd", "-name", "tfo-trace*", "-type", "l"]);
    assert_eq!(text(&enabled.stdout).trim(), "", "the unit is installed, not enabled");

    ok(root.run("dpkg", &["--purge", "tfo-trace"]), "dpkg --purge");
    let status = root.run("dpkg", &["-s", "tfo-trace"]);
    assert!(!status.status.success(), "purged: {}", text(&status.stdout));
    let after = root.paths();
    let left: Vec<&String> = after.iter().filter(|p| !before.contains(p)).collect();
    let gone: Vec<&String> = before.iter().filter(|p| !after.contains(p)).collect();
    assert!(left.is_empty() && gone.is_empty(), "dpkg --purge left {left:?} and removed {gone:?}");
}

fn lintian_finds_no_error_in_either_deb() {
    if Command::new("lintian").arg("--version").output().is_err() {
        common::skip("needs lintian (`cargo xtask setup` installs it)");
    }
    for arch in ["amd64", "arm64"] {
        let deb = artefact(&format!("tfo-trace_{VERSION}_{arch}.deb"));
        let out = Command::new("lintian")
            .args(["--tag-display-limit", "0", "--show-overrides"])
            .arg(&deb)
            .output()
            .unwrap();
        let report = text(&out.stdout);
        eprintln!("lintian {}:\n{report}", deb.display());
        let errors: Vec<&str> = report.lines().filter(|l| l.starts_with("E:")).collect();
        assert!(errors.is_empty(), "lintian errors in {}: {errors:?}", deb.display());
        assert!(out.status.success() || errors.is_empty(), "lintian: {}", text(&out.stderr));
    }
}

/// rpmlint (Debian's 2.4, with its default checks) on both rpms: no error, with the two
/// filters of xtask/src/dist/tfo-trace.rpmlintrc (the packages are not signed, the binary
/// is static on purpose: that file says why). What it warns about is printed (docs/testing.md says which warnings stay and
/// why).
fn rpmlint_finds_no_error_in_either_rpm() {
    if Command::new("rpmlint").arg("--version").output().is_err() {
        common::skip("needs rpmlint (`cargo xtask setup` installs it)");
    }
    let filters = Path::new(env!("CARGO_MANIFEST_DIR")).join("../xtask/src/dist/tfo-trace.rpmlintrc");
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let rpm = artefact(&rpm_name(arch));
        let out = Command::new("rpmlint").arg("-r").arg(&filters).arg(&rpm).output().unwrap();
        let report = text(&out.stdout);
        eprintln!("rpmlint {}:\n{report}{}", rpm.display(), text(&out.stderr));
        let errors: Vec<&str> = report.lines().filter(|l| l.contains(": E: ")).collect();
        assert!(errors.is_empty(), "rpmlint errors in {}: {errors:?}", rpm.display());
        assert!(report.contains(" 0 errors"), "rpmlint's tally: {report}");
    }
}

fn rpm_name(arch: Arch) -> String {
    format!("tfo-trace-{VERSION}-1.{}.rpm", arch.name())
}

/// `rpm` with `args`, its root at `root`: its stdout, or a failure with what it said.
fn rpm_in(root: &Path, args: &[&str]) -> String {
    let out = Command::new("rpm").arg("--root").arg(root).args(args).output().expect("running rpm");
    ok(out, &format!("rpm {}", args.join(" ")))
}

/// Every path under `dir` (relative), directories with a trailing slash.
fn tree(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap().map_while(Result::ok) {
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(p);
                out.insert(format!("{rel}/"));
            } else {
                out.insert(rel);
            }
        }
    }
    out
}

/// The x86_64 rpm as a RHEL host takes it, into a scratch root (Debian's rpm 4.18, its own
/// database there): every file it lists lands, `rpm -V` finds each as packaged, the binary
/// runs from there (chroot: nothing of this host's), the man pages, completions and the
/// unit are where those distributions look and the unit is not enabled; `rpm -e` removes
/// every file and directory the package owns, leaving only the parent directories a
/// distribution's filesystem package owns.
fn rpm_installs_runs_and_erases_in_a_scratch_root() {
    require_kernel!(); // root: rpm --root chroots
    if Command::new("rpm").arg("--version").output().is_err() {
        common::skip("needs rpm (`cargo xtask setup` installs Debian's rpm)");
    }
    let rpm = artefact(&rpm_name(Arch::X86_64));
    let scratch = common::TempDir::new("rpm-root");
    let root = scratch.0.join("root");
    fs::create_dir_all(&root).unwrap();
    rpm_in(&root, &["--initdb"]);
    let empty = tree(&root);
    let pkg = rpm.to_string_lossy().into_owned();
    let listed = rpm_in(&root, &["-qp", "--qf", "[%{FILEMODES:perms} %{FILENAMES}\n]", &pkg]);
    rpm_in(&root, &["-i", &pkg]);
    let installed = tree(&root);

    let mut owned_dirs = BTreeSet::new();
    for line in listed.lines() {
        let (perms, path) = line.split_once(' ').expect("perms path");
        let rel = path.trim_start_matches('/');
        let want = if perms.starts_with('d') { format!("{rel}/") } else { rel.to_string() };
        assert!(installed.contains(&want), "{path} is listed by the rpm but not installed");
        if perms.starts_with('d') {
            owned_dirs.insert(want);
        }
    }
    assert_eq!(rpm_in(&root, &["-V", "tfo-trace"]).trim(), "", "rpm -V: every file as packaged");

    let mut chroot = Command::new("chroot");
    chroot.arg(&root).args(["/usr/bin/tfo-trace", "--version"]);
    let v = ok(chroot.output().unwrap(), "tfo-trace --version in the scratch root");
    assert!(
        v.starts_with(&format!("tfo-trace {VERSION}\n")) && v.contains("x86_64-unknown-linux-musl"),
        "{v}"
    );
    let pages = ok(
        Command::new(common::exe())
            .args(["man", "--dir", &scratch.0.join("pages").to_string_lossy()])
            .output()
            .unwrap(),
        "man --dir",
    );
    for p in pages.lines() {
        let name = Path::new(p).file_name().unwrap().to_string_lossy().into_owned();
        assert!(installed.contains(&format!("usr/share/man/man1/{name}.gz")), "{name} is installed");
    }
    let unit_path = "usr/lib/systemd/system/tfo-trace-exporter.service";
    for f in [
        "usr/bin/tfo-trace",
        "usr/share/bash-completion/completions/tfo-trace",
        "usr/share/zsh/site-functions/_tfo-trace",
        "usr/share/fish/vendor_completions.d/tfo-trace.fish",
        "usr/share/licenses/tfo-trace/COPYRIGHT",
        unit_path,
    ] {
        assert!(installed.contains(f), "{f} is installed");
    }
    let unit = fs::read_to_string(root.join(unit_path)).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/tfo-trace export"), "{unit}");
    let links: Vec<&String> = installed.iter().filter(|p| p.starts_with("etc/")).collect();
    assert!(links.is_empty(), "the unit is installed, not enabled: {links:?}");

    rpm_in(&root, &["-e", "tfo-trace"]);
    let query = Command::new("rpm").arg("--root").arg(&root).args(["-q", "tfo-trace"]).output().unwrap();
    assert!(!query.status.success(), "erased: {}", text(&query.stdout));
    // What rpm itself keeps (its database) changes; everything else must be as before, but
    // for the parent directories rpm made for the files (usr/, usr/bin/, ...), which the
    // package does not own: on a real system the filesystem package does.
    let db: BTreeSet<String> = empty
        .iter()
        .filter(|p| !p.ends_with('/'))
        .filter_map(|p| Some(format!("{}/", p.rsplit_once('/')?.0)))
        .collect();
    let left: Vec<String> = tree(&root)
        .into_iter()
        .filter(|p| !empty.contains(p) && !db.iter().any(|d| p.starts_with(d.as_str())))
        .filter(|p| !p.ends_with('/') || owned_dirs.contains(p))
        .collect();
    assert!(left.is_empty(), "rpm -e left {left:?}");
    eprintln!(
        "rpm: {} paths installed, {} files listed, none left after rpm -e",
        installed.len() - empty.len(),
        listed.lines().count()
    );
}

/// The image's default command serves metrics where the exporter listens by default,
/// and says so (ExposedPorts): read from the archive's own config, as a registry sees it.
fn image_exports_on_the_default_port() {
    let image = artefact(&format!("tfo-trace-{VERSION}-x86_64-linux-image.tar"));
    let member =
        |name: &str| ok(Command::new("tar").arg("-xOf").arg(&image).arg(name).output().unwrap(), name);
    let manifest: serde_json::Value = serde_json::from_str(&member("manifest.json")).unwrap();
    let config: serde_json::Value =
        serde_json::from_str(&member(manifest[0]["Config"].as_str().expect("Config"))).unwrap();
    let port = tfo_trace::cli::DEFAULT_EXPORT_LISTEN.parse::<SocketAddr>().unwrap().port();
    let cmd = &config["config"]["Cmd"];
    assert_eq!(cmd[1], format!("--web.listen-address=0.0.0.0:{port}").as_str(), "{cmd}");
    assert!(config["config"]["ExposedPorts"].get(format!("{port}/tcp")).is_some(), "{config}");
}

/// The privileges README's "Install" names for `docker run`: CAP_BPF and CAP_PERFMON, or
/// CAP_SYS_ADMIN where Docker is too old to know those two (before 23.0: Debian 12's).
fn privileges(docker: &Engine, image: &str) -> Vec<&'static str> {
    let new = ["--cap-drop", "ALL", "--cap-add", "BPF", "--cap-add", "PERFMON"];
    let out = docker
        .command(&["run", "--rm", "--network", "none"])
        .args(new)
        .args([image, "--version"])
        .output()
        .unwrap();
    if out.status.success() {
        return new.to_vec();
    }
    let err = text(&out.stderr);
    assert!(err.contains("unknown capability"), "docker run --cap-add BPF: {err}");
    eprintln!("this Docker does not know CAP_BPF ({}): --cap-add SYS_ADMIN", err.trim());
    vec!["--cap-drop", "ALL", "--cap-add", "SYS_ADMIN"]
}

fn image_loads_into_docker_and_traces_the_lab_exactly() {
    require_kernel!();
    let amd64 = artefact(&format!("tfo-trace-{VERSION}-x86_64-linux-image.tar"));
    let arm64 = artefact(&format!("tfo-trace-{VERSION}-aarch64-linux-image.tar"));
    let docker = Engine::docker(CgroupDriver::Cgroupfs);
    let image = format!("tfo-trace:{VERSION}");

    // The arm64 image loads too (it cannot run here); then the amd64 one takes the tag.
    let loaded = ok(docker.output(&["load", "-i", &arm64.to_string_lossy()]), "docker load (arm64)");
    assert!(loaded.contains(&format!("Loaded image: {image}")), "{loaded}");
    let arch = ok(docker.output(&["image", "inspect", "-f", "{{.Architecture}}", &image]), "inspect");
    assert_eq!(arch.trim(), "arm64");
    let loaded = ok(docker.output(&["load", "-i", &amd64.to_string_lossy()]), "docker load (amd64)");
    assert!(loaded.contains(&format!("Loaded image: {image}")), "{loaded}");
    let config = ok(
        docker.output(&[
            "image",
            "inspect",
            "-f",
            "{{.Architecture}} {{json .Config.Entrypoint}} {{json .Config.Cmd}}",
            &image,
        ]),
        "inspect",
    );
    assert!(
        config.starts_with("amd64 [\"/usr/bin/tfo-trace\"] [\"export\""),
        "export is the default command: {config}"
    );
    let v =
        ok(docker.output(&["run", "--rm", "--network", "none", &image, "--version"]), "docker run --version");
    assert!(v.contains("x86_64-unknown-linux-musl"), "{v}");

    let privileges = privileges(&docker, &image);
    let name = format!("tfo-dist-{}", std::process::id());
    traces_the_lab_exactly(|| {
        let mut cmd = docker.command(&["run", "--rm", "--name", &name, "--network", "none"]);
        cmd.args(&privileges).arg(&image);
        Tracer::start_with(cmd, &["trace", "--json"])
    });
}

module_tests!(
    static_binaries_have_no_interpreter_and_no_library,
    version_names_the_commit_target_and_embedded_ebpf_object,
    shipped_binaries_carry_no_fixture,
    sha256sums_cover_and_match_every_artefact,
    x86_64_binary_runs_doctor_and_traces_the_lab_in_debian_11,
    aarch64_binary_runs_version_and_doctor_under_qemu_user,
    deb_installs_works_and_purges_cleanly_in_debian_11,
    lintian_finds_no_error_in_either_deb,
    rpmlint_finds_no_error_in_either_rpm,
    rpm_installs_runs_and_erases_in_a_scratch_root,
    image_exports_on_the_default_port,
    image_loads_into_docker_and_traces_the_lab_exactly,
);
