//! Reading the `CGROUP_EVENTS` ring buffer (the cgroup hooks, tfo-trace-ebpf/src/cgroups.rs)
//! into the table of cgroups that names events ([`CgroupNames`]), on a thread of its own:
//! the kernel wakes it on each cgroup made or removed, so a container's runtime state is
//! read while it exists, even for one that lives 70 ms and while the views are busy
//! elsewhere. The event reader also drains it before naming events
//! ([`CgroupLearner::names`]), and again at an event whose cgroup it does not know yet
//! ([`Learning::named`]): a cgroup is made before any process in it can connect, so its
//! record is in the ring before the process's first event is, but the reader holds the
//! table while it reads a batch of events, and a cgroup made meanwhile (a one-shot
//! container started while the reader named the previous one's events) is only in the
//! ring.
use std::{
    os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd},
    sync::{Arc, Mutex, MutexGuard},
    thread::JoinHandle,
};

use anyhow::{anyhow, Context as _, Result};
use aya::{
    maps::{MapData, RingBuf},
    Ebpf,
};
use tfo_trace_common::{cgroup_event, CgroupEvent};

use crate::kernel::cgroup::CgroupNames;

/// The cgroup table and the ring that feeds it, behind one lock.
pub(crate) struct Learning {
    ring: Option<RingBuf<MapData>>,
    pub names: CgroupNames,
    /// Records that did not decode (a kernel/userspace mismatch): counted, never silent.
    pub malformed: u64,
}

impl Learning {
    /// Cgroup `id`'s path and container: where the table does not know it yet, from the
    /// records written since the last drain first (see the module's doc), and only then
    /// from a walk of the hierarchy ([`CgroupNames::named`]), which finds no cgroup that
    /// is gone already.
    pub(crate) fn named(&mut self, id: u64) -> Option<&crate::kernel::cgroup::NamedCgroup> {
        if !self.names.knows(id) {
            self.drain();
        }
        self.names.named(id)
    }

    /// Every record the kernel has written so far, into the table.
    fn drain(&mut self) {
        let Some(ring) = &mut self.ring else { return };
        while let Some(item) = ring.next() {
            let Some(ev) = decode(&item) else {
                self.malformed += 1;
                continue;
            };
            let len = (ev.path_len as usize).min(ev.path.len());
            match ev.kind {
                cgroup_event::MADE => match std::str::from_utf8(&ev.path[..len]) {
                    // The path the kernel gives is the cgroup's in the v2 hierarchy; a cut one
                    // (longer than CGROUP_PATH_LEN) is left to the walk.
                    Ok(path) if len + 1 < ev.path.len() && path.starts_with('/') => {
                        self.names.made(ev.id, path)
                    }
                    _ => {}
                },
                cgroup_event::REMOVED => self.names.removed(ev.id),
                _ => self.malformed += 1,
            }
        }
    }
}

fn decode(bytes: &[u8]) -> Option<CgroupEvent> {
    if bytes.len() < std::mem::size_of::<CgroupEvent>() {
        return None;
    }
    // SAFETY: length checked above; CgroupEvent is plain old data (any bit pattern is
    // valid) and read_unaligned makes no alignment assumption.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const CgroupEvent) })
}

/// The cgroup table, kept current by a thread that reads the cgroup hooks' ring as the
/// kernel writes it; stopped and joined on drop.
pub(crate) struct CgroupLearner {
    shared: Arc<Mutex<Learning>>,
    /// Written to on drop: wakes the thread to stop.
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

/// How long the thread sleeps at most between looks (a lost wakeup costs no more).
const POLL_MS: i32 = 1000;

impl CgroupLearner {
    /// Walks the hierarchy once, then, where the cgroup hooks attached (`hooks`), learns
    /// each cgroup as it is made or removed.
    pub(crate) fn new(ebpf: &mut Ebpf, hooks: bool) -> Result<Self> {
        let ring = if hooks {
            let map = ebpf.take_map("CGROUP_EVENTS").ok_or_else(|| anyhow!("CGROUP_EVENTS map missing"))?;
            Some(RingBuf::try_from(map).context("opening the CGROUP_EVENTS ring buffer")?)
        } else {
            None
        };
        let ring_fd = match &ring {
            Some(r) => Some(r.as_fd().try_clone_to_owned().context("duplicating the CGROUP_EVENTS fd")?),
            None => None,
        };
        let mut names = CgroupNames::new();
        names.walk();
        let shared = Arc::new(Mutex::new(Learning { ring, names, malformed: 0 }));
        let Some(ring_fd) = ring_fd else {
            return Ok(CgroupLearner { shared, stop: None, thread: None });
        };
        // SAFETY: eventfd has no preconditions; a negative return is an error.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error()).context("eventfd for the cgroup reader");
        }
        // SAFETY: `raw` is a new fd that nothing else owns.
        let stop = unsafe { OwnedFd::from_raw_fd(raw) };
        let stop_fd = stop.try_clone().context("duplicating the cgroup reader's eventfd")?;
        let learning = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("tfo-cgroups".into())
            .spawn(move || learn(&learning, &ring_fd, &stop_fd))
            .context("starting the cgroup reader thread")?;
        Ok(CgroupLearner { shared, stop: Some(stop), thread: Some(thread) })
    }

    /// The table, with every cgroup record the kernel has written so far in it: events read
    /// after this call find the cgroups their processes ran in.
    pub(crate) fn names(&self) -> MutexGuard<'_, Learning> {
        let mut learning = lock(&self.shared);
        learning.drain();
        learning
    }
}

fn lock(shared: &Mutex<Learning>) -> MutexGuard<'_, Learning> {
    // A panic on the other side leaves a table that is still a table.
    shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The thread: waits for the kernel's wakeup (or the stop), then drains.
fn learn(shared: &Mutex<Learning>, ring: &OwnedFd, stop: &OwnedFd) {
    loop {
        let mut fds = [
            libc::pollfd { fd: ring.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: stop.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfd entries, as counted.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, POLL_MS) };
        if fds[1].revents != 0 {
            return;
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            log::warn!("cgroup reader: poll: {}", std::io::Error::last_os_error());
            return;
        }
        lock(shared).drain();
    }
}

impl Drop for CgroupLearner {
    fn drop(&mut self) {
        if let Some(stop) = &self.stop {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a valid u64 to an eventfd we own.
            unsafe { libc::write(stop.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
