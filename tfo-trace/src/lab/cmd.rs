//! Running external commands (`ip`, `sysctl`, `nft`) with errors that name the command and
//! carry its stderr, and collecting a child's output without letting its pipe fill up.
use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::thread::JoinHandle;

use anyhow::{bail, Context as _, Result};

/// The command line as a human would type it, for error messages.
pub(crate) fn display(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` to completion (stdin closed); returns its stdout, or an error naming the
/// command, its exit status and its stderr.
pub(crate) fn run(cmd: &mut Command) -> Result<String> {
    let line = display(cmd);
    let Output { status, stdout, stderr } =
        cmd.stdin(Stdio::null()).output().with_context(|| format!("cannot run `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed ({status}): {}", String::from_utf8_lossy(&stderr).trim());
    }
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

/// `ip netns exec <ns> <program> <args...>`: ip execs the program, so the spawned child's
/// pid is the program's pid.
pub(crate) fn in_netns(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(program);
    c
}

/// Starts the child in a cgroup v2 directory: it joins between fork and exec, before
/// `ip netns exec` remounts /sys (where the cgroup mount would be out of its sight), and
/// what it execs stays there. For tests of container attribution, and of a tracer
/// filtered to a cgroup.
pub fn join_cgroup_at_spawn(c: &mut Command, dir: Option<&std::path::Path>) -> anyhow::Result<()> {
    use std::os::unix::{ffi::OsStrExt as _, process::CommandExt as _};
    let Some(dir) = dir else { return Ok(()) };
    let procs = std::ffi::CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())?;
    // SAFETY: between fork and exec only async-signal-safe calls are made (open, write,
    // close), on a path made before the fork.
    unsafe {
        c.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // "0": the writing process itself.
            let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if ok {
                Ok(())
            } else {
                Err(err)
            }
        });
    }
    Ok(())
}

/// `ip -n <ns> ...`: iproute2 enters the namespace itself, no exec needed.
pub(crate) fn ip_in(ns: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["-n", ns]);
    c
}

/// What a [`collect`] thread kept, once it ends (empty if it was taken already or panicked).
pub(super) fn join_text(h: &mut Option<JoinHandle<String>>) -> String {
    h.take().and_then(|h| h.join().ok()).unwrap_or_default()
}

/// Reads `r` to the end on a thread, keeping at most the last `cap` bytes, so a chatty
/// child never blocks on a full pipe.
pub(crate) fn collect<R: Read + Send + 'static>(mut r: R, cap: usize) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut kept: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    kept.extend_from_slice(&buf[..n]);
                    if kept.len() > cap {
                        kept.drain(..kept.len() - cap);
                    }
                }
            }
        }
        String::from_utf8_lossy(&kept).into_owned()
    })
}
