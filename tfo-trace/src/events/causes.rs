//! Why a client's SYN-data was refused ([`Cause`]), told where the kernel left it to
//! userspace: what the reader does for each client event before any view sees it.
//!
//! - fentry/kprobe backends see the SYN-ACK (tcp_fastopen_cache_set): the kernel tells a
//!   missing TFO option, and a new or the same cookie while the socket still holds the one
//!   its SYN carried; where that is gone (a non-blocking sendto), it sends the keyed hash of
//!   the SYN-ACK's cookie, compared here with the last hash known for that destination.
//! - Tracepoint backends see no SYN-ACK option: here the client namespace's cookie cache is
//!   read when a refusal arrives (the kernel caches the SYN-ACK's cookie right after the
//!   event), and its hash compared with the last one known for that destination: changed,
//!   a new cookie; unchanged, no TFO option (a server that sent back the same cookie looks
//!   the same). Only refusals (and cookie requests, whose answer fills the cache) cost a
//!   read, at most [`READS_PER_SECOND`]; a namespace whose cache cannot be read (entering
//!   it needs CAP_SYS_ADMIN) leaves its causes `unknown`, and says why once.
//!
//! The last hash per (namespace, destination address) starts from every namespace's cache
//! as tracing starts, and follows each cookie the events show. Cookies themselves are never
//! held: only [`tfo_trace_common::cookie_hash`]es under this run's key.
use std::{
    collections::HashMap,
    net::IpAddr,
    time::{Duration, Instant},
};

use tfo_trace_common::Cause;

use super::{EventRef, Outcome, Role};
use crate::kernel::{
    cookie_cache::CookieCache,
    every_netns::{self, run_in_each, Netns},
};

/// At most this many reads of a cookie cache per second (each is a netlink round trip of a
/// few tens of µs): a storm of refusals costs the reader no more than that.
pub(crate) const READS_PER_SECOND: u32 = 50;

/// At most this many destinations remembered (then the memory starts over).
const MAX_REMEMBERED: usize = 65536;

/// How long after a refusal's time its cache is read at the earliest: the kernel caches the
/// SYN-ACK's cookie a few µs after the event, on another CPU than the reader's maybe.
const SETTLE: Duration = Duration::from_millis(2);

/// How long a namespace whose cache could not be opened is left alone before trying again.
const RETRY_OPEN: Duration = Duration::from_secs(10);

/// What was known of a destination's cached cookie: its hash, or known to hold none.
type Known = Option<u32>;

/// Telling refusals' causes: see the module's doc.
pub(crate) struct Causes {
    key: [u64; 2],
    /// A hook sees the SYN-ACK (the kernel tells, or hashes the SYN-ACK's cookie).
    kernel_sees_synack: bool,
    last: HashMap<(u32, IpAddr), Known>,
    caches: HashMap<u32, Opened>,
    budget: Budget,
    pub stats: CauseStats,
}

enum Opened {
    Ready(CookieCache),
    /// Could not be opened (said once, in [`CauseStats::unreadable`] and the log).
    Refused {
        at: Instant,
    },
}

/// What telling causes cost and where it could not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CauseStats {
    /// Reads of a namespace's cookie cache.
    pub reads: u64,
    /// Refusals left `unknown` because the reads' budget was spent.
    pub over_budget: u64,
    /// Namespaces whose cache could not be read, with why (the first such reason).
    pub unreadable: Option<String>,
}

/// A token bucket of [`READS_PER_SECOND`].
struct Budget {
    tokens: f64,
    at: Instant,
}

impl Budget {
    fn take(&mut self) -> bool {
        let now = Instant::now();
        let rate = f64::from(READS_PER_SECOND);
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * rate).min(rate);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl Causes {
    /// `key`: this run's cookie-hash key (the programs'); `kernel_sees_synack`: whether the
    /// backend hooks tcp_fastopen_cache_set. Takes the baseline of every namespace's cache.
    pub(crate) fn new(key: [u64; 2], kernel_sees_synack: bool) -> Causes {
        let mut causes = Causes {
            key,
            kernel_sees_synack,
            last: HashMap::new(),
            caches: HashMap::new(),
            budget: Budget { tokens: f64::from(READS_PER_SECOND), at: Instant::now() },
            stats: CauseStats::default(),
        };
        causes.baseline(&every_netns::every_netns(&Default::default()));
        causes
    }

    /// Every cookie each namespace's cache holds now, as the last known.
    fn baseline(&mut self, namespaces: &[Netns]) {
        for ns in namespaces {
            self.open(ns.inode, Some(ns));
            let Some(Opened::Ready(cache)) = self.caches.get_mut(&ns.inode) else { continue };
            match cache.cookies(self.key) {
                Ok(found) => {
                    for (addr, hash) in found {
                        self.last.insert((ns.inode, addr), Some(hash));
                    }
                }
                Err(e) => log::debug!("cookie cache of netns {}: {e:#}", ns.inode),
            }
        }
    }

    /// Tells `e`'s cause where it is a refusal the kernel left to us, and learns the
    /// cookies client events show.
    pub(crate) fn tell(&mut self, e: &mut EventRef<'_>) {
        if e.role != Role::Client {
            return;
        }
        let at = (e.netns, e.daddr);
        match (e.outcome, e.cause, e.cookie_hash) {
            (Outcome::CookieReceived, _, Some(hash)) => self.remember(at, Some(hash)),
            (_, Some(Cause::Unknown), Some(hash)) => {
                // The kernel saw the SYN-ACK's cookie but not what the SYN carried.
                e.cause = Some(match self.last.get(&at) {
                    Some(&Some(before)) if before == hash => Cause::SameCookie,
                    Some(_) => Cause::NewCookie,
                    None => Cause::Unknown,
                });
                self.remember(at, Some(hash));
            }
            (_, Some(_), Some(hash)) => self.remember(at, Some(hash)),
            (_, Some(Cause::Unknown), None) if !self.kernel_sees_synack => {
                let Some(now) = self.read(e.netns, e.daddr, e.unix_ns) else { return };
                let before = self.last.get(&at).copied();
                e.cause = Some(match (before, now) {
                    (Some(before), now) if before == now => Cause::NoTfoOption,
                    (Some(_), Some(hash)) => {
                        e.cookie_hash = Some(hash);
                        Cause::NewCookie
                    }
                    // The cache lost the entry, or nothing was known before: no telling.
                    _ => Cause::Unknown,
                });
                self.remember(at, now);
            }
            // A cookie request's SYN-ACK fills the cache: where no event shows the cookie,
            // read it, so that the next refusal compares with it.
            (Outcome::CookieRequested, _, _) if !self.kernel_sees_synack => {
                if let Some(now) = self.read(e.netns, e.daddr, e.unix_ns) {
                    self.remember(at, now);
                }
            }
            _ => {}
        }
    }

    fn remember(&mut self, at: (u32, IpAddr), known: Known) {
        if self.last.len() >= MAX_REMEMBERED && !self.last.contains_key(&at) {
            self.last.clear();
        }
        self.last.insert(at, known);
    }

    /// The hash of the cookie `netns` caches for `addr` now (`Some(None)`: none), once the
    /// kernel has had time to cache it after the event at `event_unix_ns`; None where it
    /// cannot be read (counted).
    fn read(&mut self, netns: u32, addr: IpAddr, event_unix_ns: u128) -> Option<Known> {
        if !self.budget.take() {
            self.stats.over_budget += 1;
            return None;
        }
        self.open(netns, None);
        let Some(Opened::Ready(cache)) = self.caches.get_mut(&netns) else { return None };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let since =
            Duration::from_nanos(now.as_nanos().saturating_sub(event_unix_ns).min(u64::MAX.into()) as u64);
        if let Some(wait) = SETTLE.checked_sub(since) {
            std::thread::sleep(wait);
        }
        self.stats.reads += 1;
        match cache.cookie(addr, self.key) {
            Ok(known) => Some(known),
            Err(e) => {
                log::debug!("cookie cache of netns {netns}: {e:#}");
                self.caches.remove(&netns);
                None
            }
        }
    }

    /// A socket into `netns`'s cookie cache, made once (in it: from a helper thread that
    /// enters it, unless it is ours), or why not; tried again after [`RETRY_OPEN`].
    fn open(&mut self, netns: u32, way: Option<&Netns>) {
        match self.caches.get(&netns) {
            Some(Opened::Ready(_)) => return,
            Some(Opened::Refused { at, .. }) if at.elapsed() < RETRY_OPEN => return,
            _ => {}
        }
        let found;
        let ns = match way {
            Some(ns) => ns,
            None => {
                found = every_netns::find(&[netns]);
                match found.first() {
                    Some(ns) => ns,
                    None => {
                        self.refused(netns, "the namespace is gone".into());
                        return;
                    }
                }
            }
        };
        let opened = run_in_each(std::slice::from_ref(ns), CookieCache::open).pop();
        match opened {
            Some((_, Ok(Ok(cache)))) => {
                self.caches.insert(netns, Opened::Ready(cache));
            }
            Some((_, Ok(Err(e)))) => self.refused(netns, format!("{e:#}")),
            Some((_, Err(e))) => self.refused(netns, e),
            None => self.refused(netns, "no way into it".into()),
        }
    }

    fn refused(&mut self, netns: u32, why: String) {
        log::info!("cookie cache of netns {netns} unreadable: {why}");
        self.stats.unreadable.get_or_insert_with(|| format!("netns {netns}: {why}"));
        self.caches.insert(netns, Opened::Refused { at: Instant::now() });
    }
}
