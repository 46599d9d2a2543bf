//! Network namespaces: the current one, the named ones (`ip netns`), and running code inside one.
//!
//! A namespace is identified by the inode of its nsfs file (`stat -L /proc/self/ns/net`), which is
//! also what the kernel exposes as `net->ns.inum`, so eBPF events carrying that number can be
//! mapped back to an `ip netns` name with [`netns_names`].

use std::{
    collections::BTreeMap,
    fs::File,
    io,
    os::{fd::AsRawFd, unix::fs::MetadataExt},
    path::{Path, PathBuf},
};

use anyhow::{anyhow, Context as _};

/// The calling thread's network namespace. Note: `/proc/self` names the thread-group leader, so
/// from a thread that called setns() this still shows the *leader's* namespace; use
/// [`THREAD_SELF_NETNS`] there.
pub const SELF_NETNS: &str = "/proc/self/ns/net";
/// The calling thread's own network namespace (correct inside [`with_netns`]).
pub const THREAD_SELF_NETNS: &str = "/proc/thread-self/ns/net";
/// pid 1's namespace: the host's (initial) one unless we run in a container.
pub const INIT_NETNS: &str = "/proc/1/ns/net";
/// Where `ip netns add NAME` bind-mounts the namespace file.
pub const NAMED_NETNS_DIR: &str = "/run/netns";

/// Inode of the namespace file at `path` (symlinks such as /proc/PID/ns/net are followed).
pub fn netns_inode_of(path: impl AsRef<Path>) -> io::Result<u64> {
    let path = path.as_ref();
    std::fs::metadata(path)
        .map(|m| m.ino())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Inode of the calling thread's network namespace.
pub fn current_netns_inode() -> io::Result<u64> {
    netns_inode_of(THREAD_SELF_NETNS).or_else(|_| netns_inode_of(SELF_NETNS))
}

/// Device number of nsfs, taken from our own namespace file; a /run/netns entry whose device
/// differs is not a namespace (a stale file left after its bind mount went away).
fn nsfs_dev() -> Option<u64> {
    std::fs::metadata(SELF_NETNS).ok().map(|m| m.dev())
}

/// A namespace created with `ip netns add NAME`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NamedNetns {
    pub name: String,
    pub path: PathBuf,
    /// nsfs inode; None when the entry is stale (the file exists but no namespace is mounted on it).
    pub inode: Option<u64>,
}

/// The named namespaces in [`NAMED_NETNS_DIR`], sorted by name. Missing directory: empty list.
pub fn named_netns() -> Vec<NamedNetns> {
    named_netns_in(NAMED_NETNS_DIR).unwrap_or_default()
}

/// Same as [`named_netns`] for another directory. Missing directory: Ok(empty).
pub fn named_netns_in(dir: impl AsRef<Path>) -> io::Result<Vec<NamedNetns>> {
    let entries = match std::fs::read_dir(dir.as_ref()) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let dev = nsfs_dev();
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let inode =
            std::fs::metadata(&path).ok().filter(|m| dev.is_none_or(|d| d == m.dev())).map(|m| m.ino());
        out.push(NamedNetns { name, path, inode });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// nsfs inode -> `ip netns` name, for the named namespaces (stale entries skipped). When two
/// names point at one namespace, the names are joined with ','.
pub fn netns_names() -> BTreeMap<u64, String> {
    names_by_inode(&named_netns())
}

/// Pure part of [`netns_names`].
pub fn names_by_inode(named: &[NamedNetns]) -> BTreeMap<u64, String> {
    let mut map: BTreeMap<u64, String> = BTreeMap::new();
    for n in named {
        if let Some(ino) = n.inode {
            map.entry(ino)
                .and_modify(|s| {
                    s.push(',');
                    s.push_str(&n.name)
                })
                .or_insert_with(|| n.name.clone());
        }
    }
    map
}

/// Runs `f` on a fresh thread that first joins the network namespace at `path`
/// (`/run/netns/NAME`, `/proc/PID/ns/net`, ...) with `setns(fd, CLONE_NEWNET)`. Reads of
/// /proc/sys/net and new sockets inside `f` then belong to that namespace; the calling thread
/// is left alone. Inside `f`, use /proc/thread-self/net rather than /proc/self/net (or /proc/net),
/// which follow the thread-group leader. Needs CAP_SYS_ADMIN.
pub fn with_netns<T: Send>(path: impl AsRef<Path>, f: impl FnOnce() -> T + Send) -> anyhow::Result<T> {
    let path = path.as_ref();
    let file = File::open(path).with_context(|| format!("open {}", path.display()))?;
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("tfo-netns".into())
            .spawn_scoped(scope, move || -> anyhow::Result<T> {
                // SAFETY: plain syscall on an fd we own for the duration of the call.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                if rc != 0 {
                    let err = io::Error::last_os_error();
                    return Err(anyhow!(err))
                        .with_context(|| format!("setns({}, CLONE_NEWNET)", path.display()));
                }
                drop(file);
                Ok(f())
            })
            .context("spawn netns thread")?;
        match handle.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_inode_matches_stat() {
        let a = current_netns_inode().unwrap();
        let b = netns_inode_of(SELF_NETNS).unwrap();
        assert_eq!(a, b);
        assert!(netns_inode_of("/nonexistent/ns").is_err());
    }

    #[test]
    fn missing_dir_is_empty() {
        assert!(named_netns_in("/nonexistent/run/netns").unwrap().is_empty());
    }

    #[test]
    fn stale_and_regular_entries() {
        let dir = std::env::temp_dir().join(format!("tfo-netns-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("b-stale"), b"").unwrap();
        std::os::unix::fs::symlink(SELF_NETNS, dir.join("a-self")).unwrap();
        let list = named_netns_in(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].name, "a-self");
        assert_eq!(list[0].inode, Some(current_netns_inode().unwrap()));
        assert_eq!(list[1].name, "b-stale");
        assert_eq!(list[1].inode, None);
    }

    #[test]
    fn names_join_on_same_inode() {
        let n = |name: &str, ino| NamedNetns {
            name: name.into(),
            path: PathBuf::from(format!("/run/netns/{name}")),
            inode: ino,
        };
        let map = names_by_inode(&[n("a", Some(7)), n("b", Some(7)), n("c", Some(9)), n("d", None)]);
        assert_eq!(map.len(), 2);
        assert_eq!(map[&7], "a,b");
        assert_eq!(map[&9], "c");
    }
}
