//! `--names`: destinations by the DNS name a process of their namespace resolved. Every
//! namespace's DNS answers are read as they arrive ([`capture`]), their messages parsed
//! ([`wire`]), and each address kept under its name, per namespace, for the answer's TTL
//! plus [`GRACE`], at most [`MAX_ENTRIES`] addresses in all. The reader names each client
//! event from here ([`Names::name_of`]) after reading the answers queued before it: an
//! answer is queued on our socket before the process that asked can read it, so before it
//! can connect.
pub(crate) mod capture;
pub(crate) mod wire;

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    net::{IpAddr, SocketAddr},
    os::fd::{AsFd as _, AsRawFd as _, OwnedFd},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use crate::kernel::every_netns;

/// How long past its TTL an answer is kept: an answer with TTL 0 is used at once, and the
/// reader names the connection up to 100 ms after the answer came.
pub const GRACE: Duration = Duration::from_secs(5);
/// Addresses kept at most, over every namespace (about 100 bytes each): past it, the
/// answers that expire first are forgotten first.
pub(crate) const MAX_ENTRIES: usize = 65_536;
/// How often the namespaces are listed again, for those made since (a container started):
/// one stat per process. An event from a namespace we have no socket in asks sooner.
const RESCAN_EVERY: Duration = Duration::from_secs(1);
/// How often [`Names::catch_up`] may read again.
const CATCH_UP_EVERY: Duration = Duration::from_millis(1);
/// Packets read per socket per drain, at most (the rest wait for the next one).
const READ_LIMIT: usize = 4096;
/// TCP streams of DNS (zone transfers aside, a few at a time) followed at most, and the
/// bytes of one message kept while it arrives.
const MAX_STREAMS: usize = 1024;
const MAX_MESSAGE: usize = 65_535 + 2;

/// What `--names` did, for the closing summary (`names` in its JSON).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NamesStats {
    /// Addresses learnt from answers (each answer's addresses, each time).
    pub learnt: u64,
    /// Answers the kernel dropped because we did not read fast enough.
    pub dropped: u64,
    /// Namespaces whose answers are read.
    pub namespaces: usize,
    /// Namespaces we could not open sockets in (the last error is logged at -v).
    pub refused: usize,
}

pub(crate) struct Names {
    /// The `tfo_dns_answers` socket filter.
    filter: OwnedFd,
    sockets: BTreeMap<u32, capture::Sockets>,
    cache: Cache,
    streams: HashMap<(u32, SocketAddr, SocketAddr), Stream>,
    scanned_at: Option<Instant>,
    /// When the last read of every socket began (realtime ns, and as an Instant).
    read_from_ns: u128,
    read_at: Option<Instant>,
    buf: Vec<u8>,
    stats: NamesStats,
}

impl Names {
    /// Starts reading the answers of every namespace there is now (more as they appear).
    /// `filter`: the loaded `tfo_dns_answers` program.
    pub(crate) fn start(filter: OwnedFd) -> Result<Names> {
        let mut names = Names {
            filter,
            sockets: BTreeMap::new(),
            cache: Cache::default(),
            streams: HashMap::new(),
            scanned_at: None,
            read_from_ns: 0,
            read_at: None,
            buf: vec![0; capture::MAX_PACKET],
            stats: NamesStats::default(),
        };
        names.rescan();
        if names.sockets.is_empty() {
            anyhow::bail!("--names: no namespace would take a packet socket (see -v for why)");
        }
        Ok(names)
    }

    /// Reads every answer queued so far (and, at most once a second, opens sockets in
    /// namespaces made since). `now`: this process's clock, for forgetting what expired.
    pub(crate) fn learn(&mut self, now: Instant) {
        if self.scanned_at.is_none_or(|t| now.duration_since(t) >= RESCAN_EVERY) {
            self.rescan();
        }
        let read_from_ns = realtime_ns();
        self.cache.settle();
        let Names { sockets, cache, streams, buf, stats, .. } = self;
        for (&netns, socks) in sockets.iter() {
            socks.read(buf, READ_LIMIT, |packet, at_ns| {
                // A packet the kernel stamped only as we read it (stamps were being turned
                // on as it came): its arrival is unknown, and so before any connection.
                let at_ns = if at_ns >= read_from_ns { 0 } else { at_ns };
                learn_packet(cache, streams, stats, netns, packet, now, at_ns)
            });
        }
        self.read_from_ns = read_from_ns;
        self.read_at = Some(now);
        let streams = &mut self.streams;
        if streams.len() > MAX_STREAMS {
            streams.retain(|_, s| now.duration_since(s.seen) < Duration::from_secs(10));
            if streams.len() > MAX_STREAMS {
                streams.clear();
            }
        }
    }

    /// Reads the answers again if an event at `event_ns` came after the last read began
    /// (the reader takes events as they come, also those made while it reads: their answer
    /// may have come after the read); at most once a millisecond.
    pub(crate) fn catch_up(&mut self, event_ns: u128) {
        let now = Instant::now();
        if event_ns >= self.read_from_ns
            && self.read_at.is_none_or(|t| now.duration_since(t) >= CATCH_UP_EVERY)
        {
            self.learn(now);
        }
    }
}

/// One packet's DNS message, or its part of a TCP stream's, into the cache.
fn learn_packet(
    cache: &mut Cache,
    streams: &mut HashMap<(u32, SocketAddr, SocketAddr), Stream>,
    stats: &mut NamesStats,
    netns: u32,
    packet: &[u8],
    now: Instant,
    at_ns: u128,
) {
    match capture::dns_of(packet) {
        Some(capture::Dns::Udp(msg)) => stats.learnt += cache.learn(netns, msg, now, at_ns),
        Some(capture::Dns::Tcp(segment)) => {
            for msg in follow(streams, netns, &segment, now) {
                stats.learnt += cache.learn(netns, &msg, now, at_ns);
            }
        }
        None => {}
    }
}

/// CLOCK_REALTIME in ns: what packets are stamped with and events' `ts` is in.
fn realtime_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

impl Names {
    /// The name a process of namespace `netns` resolved to `addr` last before `at_unix_ns`
    /// (the connection's time), if that answer had not expired by then.
    pub(crate) fn name_of(&self, netns: u32, addr: IpAddr, at_unix_ns: u128) -> Option<&Arc<str>> {
        self.cache.get(netns, addr, at_unix_ns)
    }

    /// What is kept for `addr` in `netns`, for `-vv`: each name with when its answer came.
    pub(crate) fn kept(&self, netns: u32, addr: IpAddr) -> Vec<(Arc<str>, u128)> {
        let kept = self.cache.entries.get(&(netns, addr));
        kept.into_iter().flatten().map(|l| (l.name.clone(), l.at_ns)).collect()
    }

    /// Whether the answers of namespace `netns` are read.
    pub(crate) fn reads(&self, netns: u32) -> bool {
        self.sockets.contains_key(&netns)
    }

    /// An event came from namespace `netns`: if we have no socket there (made since the
    /// last scan), look again at the next [`Names::learn`].
    pub(crate) fn saw_namespace(&mut self, netns: u32) {
        if !self.sockets.contains_key(&netns) {
            self.scanned_at = None;
        }
    }

    pub(crate) fn stats(&self) -> NamesStats {
        let dropped = self.sockets.values().map(capture::Sockets::dropped).sum::<u64>();
        NamesStats { dropped: self.stats.dropped + dropped, namespaces: self.sockets.len(), ..self.stats }
    }

    /// Opens sockets in the namespaces made since the last scan (now: a caller that just
    /// made one need not wait for the next scan) and closes those of the ones gone: a socket holds its namespace, which must not outlive its last process
    /// because of us.
    pub(crate) fn rescan(&mut self) {
        self.scanned_at = Some(Instant::now());
        // A namespace without a name cannot be entered (its link is another user's).
        let mut all = every_netns::every_netns(&Default::default());
        all.retain(|n| !n.is_unnamed());
        let live: HashSet<u32> = all.iter().map(|n| n.inode).collect();
        let gone: Vec<u32> = self.sockets.keys().copied().filter(|i| !live.contains(i)).collect();
        for inode in gone {
            if let Some(s) = self.sockets.remove(&inode) {
                self.stats.dropped += s.dropped();
            }
            self.cache.forget_namespace(inode);
        }
        let new: Vec<every_netns::Netns> =
            all.into_iter().filter(|n| !self.sockets.contains_key(&n.inode)).collect();
        if new.is_empty() {
            return;
        }
        let filter = self.filter.as_fd().as_raw_fd();
        let mut refused = 0;
        for (inode, opened) in every_netns::run_in_each(&new, || capture::open_here(filter)) {
            match opened.map_err(|e| anyhow::anyhow!(e)).and_then(|r| r.context("a packet socket")) {
                Ok(socks) => {
                    self.sockets.insert(inode, socks);
                }
                Err(e) => {
                    refused += 1;
                    log::debug!("--names: netns {inode}: {e:#}");
                }
            }
        }
        self.stats.refused = refused;
    }
}

/// One TCP stream of DNS messages, each after its 2-byte length (RFC 1035 4.2.2).
struct Stream {
    next_seq: u32,
    buf: Vec<u8>,
    seen: Instant,
}

/// The whole messages `segment` completes on its stream. A segment out of order (a
/// retransmission, a loss) drops what the stream had: that message goes unnamed.
fn follow(
    streams: &mut HashMap<(u32, SocketAddr, SocketAddr), Stream>,
    netns: u32,
    segment: &capture::Segment<'_>,
    now: Instant,
) -> Vec<Vec<u8>> {
    let key = (netns, segment.from, segment.to);
    if segment.end {
        streams.remove(&key);
        return Vec::new();
    }
    if segment.syn {
        streams.insert(key, Stream { next_seq: segment.seq.wrapping_add(1), buf: Vec::new(), seen: now });
        return Vec::new();
    }
    if segment.payload.is_empty() {
        return Vec::new();
    }
    // A stream whose SYN-ACK we missed (it began before we looked) starts here.
    let stream = streams.entry(key).or_insert(Stream { next_seq: segment.seq, buf: Vec::new(), seen: now });
    if stream.next_seq != segment.seq || stream.buf.len() + segment.payload.len() > MAX_MESSAGE {
        stream.buf.clear();
        stream.next_seq = segment.seq.wrapping_add(segment.payload.len() as u32);
        return Vec::new();
    }
    stream.next_seq = segment.seq.wrapping_add(segment.payload.len() as u32);
    stream.seen = now;
    stream.buf.extend_from_slice(segment.payload);
    let mut out = Vec::new();
    while stream.buf.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([stream.buf[0], stream.buf[1]]));
        if stream.buf.len() < 2 + len {
            break;
        }
        out.push(stream.buf[2..2 + len].to_vec());
        stream.buf.drain(..2 + len);
    }
    out
}

/// Addresses by namespace, each with the names its last few answers gave (two names may
/// share an address: a CDN's), when each came and when it expires; names shared.
#[derive(Default)]
struct Cache {
    entries: HashMap<(u32, IpAddr), Vec<Learnt>>,
    names: HashSet<Arc<str>>,
    /// Addresses that got more than [`ANSWERS_PER_ADDRESS`] answers in the last read: they
    /// keep them all until the next read ([`Cache::settle`]), because the events read in
    /// between (up to the reader's poll interval old) may have come before any of them.
    over: Vec<(u32, IpAddr)>,
}

struct Learnt {
    name: Arc<str>,
    /// When the answer arrived, ns since the epoch (0: unknown).
    at_ns: u128,
    /// Until when a connection may have used it (arrival + TTL + grace), ns since the epoch:
    /// judged at the connection's time, not at the reader's, which may lag.
    until_ns: u128,
    /// When it may be forgotten (the same, by this process's clock).
    expires: Instant,
}

/// Answers kept per address: the names of the last few lookups that gave it.
const ANSWERS_PER_ADDRESS: usize = 4;

/// Adds one answer to those kept for its address. The name of the newest answer, answered
/// again while that answer is still valid, extends it: a connection in between had that
/// name either way, and a lookup repeated in a loop takes one place, not all. Any other
/// answer is kept as its own, so a name answered again after another's answer is the
/// newest, and names the connections after it, while the older answer still names those
/// before. Returns whether the address now keeps more than [`ANSWERS_PER_ADDRESS`].
fn keep_answer(kept: &mut Vec<Learnt>, new: Learnt) -> bool {
    let newest = kept.iter_mut().max_by_key(|l| l.at_ns);
    if let Some(newest) =
        newest.filter(|l| l.name == new.name && l.at_ns <= new.at_ns && new.at_ns < l.until_ns)
    {
        newest.expires = newest.expires.max(new.expires);
        newest.until_ns = newest.until_ns.max(new.until_ns);
        return false;
    }
    kept.push(new);
    kept.len() == ANSWERS_PER_ADDRESS + 1
}

impl Cache {
    /// Keeps the addresses of one DNS message that arrived at `at_ns`; returns how many.
    fn learn(&mut self, netns: u32, msg: &[u8], now: Instant, at_ns: u128) -> u64 {
        let answers = wire::answers(msg);
        for a in &answers {
            if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(&(netns, a.addr)) {
                self.make_room(now);
            }
            let name = match self.names.get(a.name.as_str()) {
                Some(n) => n.clone(),
                None => {
                    let n: Arc<str> = a.name.as_str().into();
                    self.names.insert(n.clone());
                    n
                }
            };
            let kept_for = Duration::from_secs(u64::from(a.ttl)) + GRACE;
            let expires = now + kept_for;
            let until_ns = if at_ns != 0 { at_ns } else { realtime_ns() } + kept_for.as_nanos();
            let kept = self.entries.entry((netns, a.addr)).or_default();
            kept.retain(|l| now < l.expires);
            if keep_answer(kept, Learnt { name, at_ns, until_ns, expires }) {
                self.over.push((netns, a.addr));
            }
        }
        answers.len() as u64
    }

    /// Before a read: the events of the last one are named, so each address goes back to
    /// its newest [`ANSWERS_PER_ADDRESS`] answers (an event read from now on came after the
    /// older ones, and after the newest of them, which names it if no later one does).
    fn settle(&mut self) {
        for key in self.over.drain(..) {
            if let Some(kept) = self.entries.get_mut(&key) {
                kept.sort_unstable_by_key(|l| std::cmp::Reverse(l.at_ns));
                kept.truncate(ANSWERS_PER_ADDRESS);
            }
        }
    }

    /// The name of the last answer for `addr` that came before `at_ns` (a connection's
    /// time) and had not expired by then. An answer that came after the connection is not its
    /// (the reader may read both in one go): the connection used an older one, forgotten.
    fn get(&self, netns: u32, addr: IpAddr, at_ns: u128) -> Option<&Arc<str>> {
        let kept = self.entries.get(&(netns, addr))?;
        kept.iter()
            .filter(|l| l.at_ns <= at_ns && at_ns < l.until_ns)
            .max_by_key(|l| l.at_ns)
            .map(|l| &l.name)
    }

    /// Forgets what has expired; if that is not an eighth of the cap, the addresses whose
    /// answers expire first.
    fn make_room(&mut self, now: Instant) {
        let expiry = |kept: &Vec<Learnt>| kept.iter().map(|l| l.expires).max();
        self.entries.retain(|_, kept| {
            kept.retain(|l| now < l.expires);
            !kept.is_empty()
        });
        if self.entries.len() > MAX_ENTRIES - MAX_ENTRIES / 8 {
            let mut by_expiry: Vec<Instant> = self.entries.values().filter_map(expiry).collect();
            let cut = by_expiry.len() - (MAX_ENTRIES - MAX_ENTRIES / 8);
            let (_, nth, _) = by_expiry.select_nth_unstable(cut);
            let keep_after = *nth;
            self.entries.retain(|_, kept| expiry(kept).is_some_and(|e| e > keep_after));
        }
        self.names.retain(|n| Arc::strong_count(n) > 1);
    }

    fn forget_namespace(&mut self, netns: u32) {
        self.entries.retain(|(ns, _), _| *ns != netns);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(name: &str, addr: [u8; 4], ttl: u32) -> Vec<u8> {
        wire::response(name, &[(name, 1, ttl, addr.to_vec())])
    }

    #[test]
    fn an_address_is_named_per_namespace_until_its_ttl_and_grace_pass() {
        let t0 = Instant::now();
        let mut cache = Cache::default();
        assert_eq!(cache.learn(1, &answer("api.example", [198, 18, 0, 3], 30), t0, 100), 1);
        let addr: IpAddr = "198.18.0.3".parse().unwrap();
        assert_eq!(cache.get(1, addr, 200).map(|n| &**n), Some("api.example"));
        assert_eq!(cache.get(2, addr, 200), None, "another namespace resolved nothing");
        let until = 100 + (Duration::from_secs(30) + GRACE).as_nanos();
        assert!(cache.get(1, addr, until - 1).is_some(), "a connection within the TTL and grace");
        assert_eq!(cache.get(1, addr, until), None, "a connection after: expired, however late it is read");
    }

    #[test]
    fn a_connection_takes_the_name_of_the_last_answer_before_it() {
        let t0 = Instant::now();
        let mut cache = Cache::default();
        let addr: IpAddr = "203.0.113.7".parse().unwrap();
        cache.learn(1, &answer("shop.example", [203, 0, 113, 7], 60), t0, 1_000);
        cache.learn(1, &answer("blog.example", [203, 0, 113, 7], 60), t0, 2_000);
        let at = |cache: &Cache, ns| cache.get(1, addr, ns).map(|n| n.to_string());
        assert_eq!(at(&cache, 1_500).as_deref(), Some("shop.example"), "connected between the two answers");
        assert_eq!(at(&cache, 2_500).as_deref(), Some("blog.example"));
        assert_eq!(at(&cache, 500), None, "before both: an answer of before we looked");
        cache.learn(1, &answer("shop.example", [203, 0, 113, 7], 60), t0, 3_000);
        assert_eq!(at(&cache, 1_500).as_deref(), Some("shop.example"), "named so since its first answer");
    }

    /// The name `cache` gives `addr` in namespace 1 at `at_ns`.
    fn named(cache: &Cache, addr: [u8; 4], at_ns: u128) -> Option<String> {
        cache.get(1, IpAddr::from(addr), at_ns).map(|n| n.to_string())
    }

    const SHARED: [u8; 4] = [203, 0, 113, 9];

    #[test]
    fn a_name_answered_again_after_another_names_the_connections_after_it() {
        let t0 = Instant::now();
        let mut cache = Cache::default();
        for (name, at) in [("good.example", 1_000), ("other.example", 2_000), ("good.example", 3_000)] {
            cache.learn(1, &answer(name, SHARED, 60), t0, at);
        }
        let at = |ns| named(&cache, SHARED, ns);
        assert_eq!(at(1_500).as_deref(), Some("good.example"));
        assert_eq!(at(2_500).as_deref(), Some("other.example"));
        assert_eq!(at(3_500).as_deref(), Some("good.example"), "the repeated answer is the last one");
    }

    #[test]
    fn a_name_answered_again_after_its_alias_names_the_connections_after_it() {
        let t0 = Instant::now();
        let mut cache = Cache::default();
        let through_alias = wire::response(
            "alias.example",
            &[
                ("alias.example", 5, 60, wire::encode_name("good.example")),
                ("good.example", 1, 60, SHARED.to_vec()),
            ],
        );
        cache.learn(1, &answer("good.example", SHARED, 60), t0, 1_000);
        cache.learn(1, &through_alias, t0, 2_000);
        cache.learn(1, &answer("good.example", SHARED, 60), t0, 3_000);
        assert_eq!(named(&cache, SHARED, 2_500).as_deref(), Some("alias.example"));
        assert_eq!(named(&cache, SHARED, 3_500).as_deref(), Some("good.example"));
    }

    #[test]
    fn a_name_answered_over_and_over_takes_one_place() {
        let t0 = Instant::now();
        let mut cache = Cache::default();
        cache.learn(1, &answer("other.example", SHARED, 60), t0, 500);
        for i in 1..=10 {
            cache.learn(1, &answer("good.example", SHARED, 60), t0, i * 1_000);
        }
        cache.settle();
        assert_eq!(cache.entries[&(1, IpAddr::from(SHARED))].len(), 2, "one answer each");
        assert_eq!(named(&cache, SHARED, 700).as_deref(), Some("other.example"));
        assert_eq!(named(&cache, SHARED, 1_500).as_deref(), Some("good.example"), "since its first answer");
        assert_eq!(named(&cache, SHARED, 10_500).as_deref(), Some("good.example"));
    }

    #[test]
    fn a_name_answered_again_after_its_answer_expired_names_nothing_in_between() {
        let t0 = Instant::now();
        let mut cache = Cache::default();
        let ttl0 = GRACE.as_nanos();
        cache.learn(1, &answer("good.example", SHARED, 0), t0, 1_000);
        cache.learn(1, &answer("good.example", SHARED, 0), t0, 1_000 + 2 * ttl0);
        assert_eq!(named(&cache, SHARED, 1_000 + ttl0 / 2).as_deref(), Some("good.example"));
        assert_eq!(named(&cache, SHARED, 1_000 + ttl0 + 1), None, "between the two answers' lives");
        assert_eq!(named(&cache, SHARED, 1_000 + 2 * ttl0 + 1).as_deref(), Some("good.example"));
    }

    #[test]
    fn an_answer_read_late_names_only_the_connections_of_its_time() {
        let t0 = Instant::now();
        let mut cache = Cache::default();
        // Two namespaces' sockets, or the IPv4 and IPv6 ones, read one after the other.
        cache.learn(1, &answer("other.example", SHARED, 60), t0, 2_000);
        cache.learn(1, &answer("good.example", SHARED, 60), t0, 1_000);
        assert_eq!(named(&cache, SHARED, 1_500).as_deref(), Some("good.example"));
        assert_eq!(named(&cache, SHARED, 2_500).as_deref(), Some("other.example"));
    }

    #[test]
    fn a_read_keeps_every_answer_until_the_next_then_the_last_few() {
        let t0 = Instant::now();
        let mut cache = Cache::default();
        // One read: more answers than an address keeps, alternating two names, before the
        // reader names the connections made between them (it polls every 100 ms).
        let names = ["good.example", "other.example"];
        let answers = 2 * ANSWERS_PER_ADDRESS as u128 + 1;
        for i in 0..answers {
            cache.learn(1, &answer(names[i as usize % 2], SHARED, 60), t0, (i + 1) * 1_000);
        }
        for i in 0..answers {
            let between = (i + 1) * 1_000 + 500;
            assert_eq!(
                named(&cache, SHARED, between).as_deref(),
                Some(names[i as usize % 2]),
                "at {between}"
            );
        }
        // The next read: only the newest few are kept, and what they no longer name is
        // unnamed, never named otherwise.
        cache.settle();
        assert_eq!(cache.entries[&(1, IpAddr::from(SHARED))].len(), ANSWERS_PER_ADDRESS);
        assert_eq!(named(&cache, SHARED, answers * 1_000 + 500).as_deref(), Some(names[0]));
        assert_eq!(named(&cache, SHARED, 1_500), None, "the first answer is forgotten");
    }

    #[test]
    fn the_cache_stays_under_its_cap_forgetting_what_expires_first() {
        let t0 = Instant::now();
        let mut cache = Cache::default();
        for i in 0..MAX_ENTRIES as u32 + 100 {
            let [_, b, c, d] = i.to_be_bytes();
            // The earlier an address, the sooner it expires.
            cache.learn(1, &answer("n.example", [10, b, c, d], i), t0, 1);
        }
        assert!(cache.len() <= MAX_ENTRIES, "{}", cache.len());
        let last: IpAddr = std::net::Ipv4Addr::from((MAX_ENTRIES as u32 + 99) | (10 << 24)).into();
        assert!(cache.get(1, last, 2).is_some(), "the newest, latest to expire, is kept");
        assert!(cache.get(1, "10.0.0.0".parse().unwrap(), 2).is_none(), "the first to expire went first");
        assert_eq!(cache.names.len(), 1, "one name, shared");
    }

    #[test]
    fn a_tcp_stream_gives_each_message_once_whole() {
        let t0 = Instant::now();
        let mut streams = HashMap::new();
        let msg = answer("tcp.example", [192, 0, 2, 53], 60);
        let mut stream = (msg.len() as u16).to_be_bytes().to_vec();
        stream.extend(&msg);
        stream.extend(&stream.clone()); // two messages back to back
        let seg = |seq: u32, payload: &[u8]| capture::Segment {
            from: "10.0.0.53:53".parse().unwrap(),
            to: "10.0.0.7:40000".parse().unwrap(),
            seq,
            syn: seq == 99,
            end: false,
            payload: payload.to_vec().leak(),
        };
        assert!(follow(&mut streams, 1, &seg(99, &[]), t0).is_empty());
        let cut = 7;
        assert!(follow(&mut streams, 1, &seg(100, &stream[..cut]), t0).is_empty());
        let got = follow(&mut streams, 1, &seg(100 + cut as u32, &stream[cut..]), t0);
        assert_eq!(got, vec![msg.clone(), msg.clone()]);
        // A retransmission of what was already read is out of order: nothing twice.
        assert!(follow(&mut streams, 1, &seg(100, &stream[..cut]), t0).is_empty());
    }
}
