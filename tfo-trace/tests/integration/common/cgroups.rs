//! Cgroups a test makes under the cgroup v2 root (its processes join them at spawn, as a
//! runtime's do), removed when dropped.
use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use tfo_trace::kernel::cgroup;

/// Cgroups made for one test under the v2 root, removed (bounded retries: the kernel
/// frees a cgroup once its last process is gone) when dropped.
pub struct Cgroups {
    base: PathBuf,
    dirs: Vec<PathBuf>,
}

impl Cgroups {
    pub fn new() -> Cgroups {
        let Some(root) = cgroup::v2_mount() else { super::skip("no cgroup v2 hierarchy is mounted") };
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let base = root.join(format!("tfo-test-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&base)
            .unwrap_or_else(|e| super::skip(format!("cannot make cgroups here: {e}")));
        Cgroups { base, dirs: Vec::new() }
    }

    pub fn make(&mut self, name: &str) -> PathBuf {
        let dir = self.base.join(name);
        std::fs::create_dir(&dir).unwrap();
        self.dirs.push(dir.clone());
        dir
    }

    /// Removes `dir` now (made by [`Cgroups::make`], its processes gone), once the kernel
    /// has let go of its last process.
    pub fn remove(&mut self, dir: &Path) {
        removed(dir);
        self.dirs.retain(|d| d != dir);
    }
}

/// Removes an empty cgroup, waiting (by the common rule) for the kernel to free it; false
/// if it could not.
fn removed(dir: &Path) -> bool {
    let gone = || if std::fs::remove_dir(dir).is_ok() || !dir.exists() { Ok(()) } else { Err(()) };
    crate::common::wait::within(crate::common::HANG_LIMIT, gone).is_ok()
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        for dir in self.dirs.iter().rev().chain(std::iter::once(&self.base)) {
            removed(dir);
        }
    }
}

/// A cgroup's path below the v2 root, as events name it.
pub fn rel(dir: &Path) -> String {
    let root = cgroup::v2_mount().unwrap();
    format!("/{}", dir.strip_prefix(&root).unwrap().display())
}
