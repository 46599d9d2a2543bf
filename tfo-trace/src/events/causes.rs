//! Why a client's SYN-data was refused ([`Cause`]), and how that stood to the destination's
//! cookie ([`CookieChange`]), told where the kernel left it to userspace: what the reader
//! does for each client event before any view sees it.
//!
//! A refusal is told by the cookie its SYN carried against the one its SYN-ACK brought
//! (tcp_send_syn_data() sends the cookie cached when the SYN leaves; every SYN-data that
//! leaves before the first new cookie is cached carries the old one, net/ipv4/tcp_output.c;
//! tcp_rcv_fastopen_synack() caches the SYN-ACK's, tcp_input.c):
//!
//! - fentry/kprobe backends: the programs hash the cookie as it leaves (the exit of
//!   tcp_fastopen_cookie_check) and the SYN-ACK's (tcp_fastopen_cache_set): the kernel
//!   tells the cause, here it is only passed on.
//! - Tracepoint backends see neither, but a blocking socket's TFO request still holds the
//!   cookie its SYN carried at the SYN-ACK. The rest is read from the client namespace's
//!   cookie cache (tcp_metrics, one entry per namespace, source and destination address)
//!   after the event, with the count the programs keep per destination of the SYN-ACKs
//!   that may write it (`tfo_trace_common::SynackSeq`): a read says what this SYN-ACK left
//!   only if no later one was counted before it; the count at the SYN says which of the
//!   cache's values the SYN read ([`Fact`]s: what the cache held after a given count).
//!   The cache changed by the SYN-ACK: a new cookie (or the same one back, where the
//!   cache had changed in between); unchanged and holding what the SYN carried: no TFO
//!   option (a SYN-ACK bringing back the same cookie looks the same, as before); unchanged
//!   but holding a cookie another SYN-ACK had already brought: no telling (a SYN in flight
//!   while the cookie changed, or no option), so `unknown`. A refusal whose SYN-ACK the
//!   read came too late for waits, briefly, for the next connection's SYN to say what the
//!   cache held ([`HOLD`]); what cannot be told is `unknown`, never guessed.
//!
//! An accepted SYN-data's SYN-ACK is not counted (it is nearly every TFO connection), yet
//! it writes the cache where the server took the cookie with its backup key
//! (tcp_try_fastopen sends the primary key's then; TcpExtTCPFastOpenPassiveAltKey): a
//! silent update. So a fact is believed across time only where every client event is seen
//! (not `export`'s refusals only, no event lost) and none was accepted at that destination
//! in between.
//!
//! The change ([`CookieChange`], every backend): a refusal whose SYN carried a cookie the
//! destination had handed out to an earlier refused SYN-data, none accepted since, shows
//! a cookie that does not hold (servers without a shared key, a NAT pool); one whose
//! SYN-ACK brought a cookie an earlier refusal had just brought left before it came (in
//! flight during one change); else the cookie changed here.
//!
//! Cookies themselves are never held: only [`tfo_trace_common::cookie_hash`]es under this
//! run's key.
use std::{
    collections::{HashMap, VecDeque},
    net::IpAddr,
    time::{Duration, Instant},
};

use aya::maps::{Array, MapData};
use serde::{Deserialize, Serialize};
use tfo_trace_common::{Cause, SynackSeq, TfoEvent, FAMILY_V4, FAMILY_V6};

use super::{EventRef, Outcome, Role};
use crate::kernel::{
    cookie_cache::CookieCache,
    every_netns::{self, run_in_each, Netns},
};

/// How a refused SYN-data stood to the destination's cookie: what tells one change of it
/// (a key rotated without a backup, with a round trip's worth of SYN-data in flight) from
/// a cookie that keeps changing. Told where the cookies its SYN carried and its SYN-ACK
/// brought are known (see the module's doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CookieChange {
    /// Its SYN-ACK brought a cookie the destination had not handed out to a refused
    /// SYN-data since the last one it accepted: the cookie changed here.
    First,
    /// Its SYN-ACK brought the cookie an earlier refusal's had just brought: it left with
    /// the old cookie before the new one came.
    InFlight,
    /// Its SYN carried a cookie the destination had handed out to an earlier refused
    /// SYN-data, none accepted since: the new cookie did not hold.
    Again,
}

impl CookieChange {
    pub const ALL: [CookieChange; 3] = [CookieChange::First, CookieChange::InFlight, CookieChange::Again];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            CookieChange::First => "first",
            CookieChange::InFlight => "in_flight",
            CookieChange::Again => "again",
        }
    }
}

/// At most this many reads of a cookie cache per second (each is a netlink round trip of a
/// few tens of µs): a storm of refusals costs the reader no more than that.
pub(crate) const READS_PER_SECOND: u32 = 50;

/// At most this many destinations remembered (then the memory starts over).
const MAX_REMEMBERED: usize = 65536;

/// How long after a SYN-ACK its cookie is surely cached: the kernel caches it a few µs
/// after the event (tcp_rcv_fastopen_synack, in the same softirq), maybe on another CPU
/// than the reader's.
const SETTLE: Duration = Duration::from_millis(2);

/// A SYN-ACK counted less than this after the previous one at its destination, its SYN
/// sent before that one came, may have had its cookie cached before that one's: a read does
/// not tell which ([`crowded`]).
const CROWDED_US: u32 = 1000;

/// Whether a SYN-ACK counted `t`th at its destination, whose SYN was sent at count `s`,
/// `gap_us` after the one before (0: counted while that one was), may have had its cookie
/// cached before the one counted before it: the count comes a few µs before the cache is
/// written (tcp_finish_connect's state change, then tcp_rcv_fastopen_synack), so two
/// SYN-ACKs of connections in flight together, close in time, may swap. Not where the SYN
/// left after the previous SYN-ACK was counted: its own SYN-ACK is a round trip later.
fn crowded(s: u32, t: u32, gap_us: u32) -> bool {
    gap_us == 0 || (gap_us < CROWDED_US && s.wrapping_add(1) != t)
}

/// How long a refusal waits for what tells it (the next connection's SYN), from when the
/// reader first sees it; and the longest one drain of the ring waits for all of them.
pub(crate) const HOLD: Duration = Duration::from_millis(20);
pub(crate) const HOLD_PER_DRAIN: Duration = Duration::from_millis(100);

/// How long a namespace whose cache could not be opened is left alone before trying again.
const RETRY_OPEN: Duration = Duration::from_secs(10);

/// Facts, accepted SYN-ACKs and handed-out cookies kept per destination.
const FACTS: usize = 32;
const ACCEPTS: usize = 8;
const FRESH: usize = 4;

/// What a destination's cache held: a cookie's hash, or none.
type Known = Option<u32>;

/// One entry of a namespace's cookie cache (tcp_metrics' key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Dest {
    netns: u32,
    saddr: IpAddr,
    daddr: IpAddr,
}

impl Dest {
    fn of(e: &EventRef<'_>) -> Dest {
        Dest { netns: e.netns, saddr: e.saddr.to_canonical(), daddr: e.daddr.to_canonical() }
    }

    /// Its slot of the programs' SYN-ACK counts (`tfo_trace_common::synack_slot`).
    fn slot(&self) -> u32 {
        match self.daddr {
            IpAddr::V4(a) => {
                tfo_trace_common::synack_slot(FAMILY_V4, [u32::from_le_bytes(a.octets()).into(), 0])
            }
            IpAddr::V6(a) => {
                let o = a.octets();
                let word = |i: usize| u64::from_le_bytes(o[i..i + 8].try_into().expect("8 bytes"));
                tfo_trace_common::synack_slot(FAMILY_V6, [word(0), word(8)])
            }
        }
    }
}

/// The cache of a destination held `known` after its slot counted `seq` SYN-ACKs, as seen
/// at `at_ns` (unix ns).
#[derive(Clone, Copy, Debug)]
struct Fact {
    seq: u32,
    known: Known,
    at_ns: u128,
}

/// What is remembered of one destination.
#[derive(Default)]
struct Trail {
    facts: VecDeque<Fact>,
    /// When its SYN-data was last accepted (the SYN-ACKs' times, unix ns), and the newest
    /// of those forgotten.
    accepts: VecDeque<u128>,
    forgot_accept: u128,
    /// Cookies its refusals' SYN-ACKs handed out since its last accepted SYN-data.
    fresh: VecDeque<u32>,
}

impl Trail {
    fn learn(&mut self, fact: Fact) {
        self.facts.retain(|f| f.seq != fact.seq || f.at_ns > fact.at_ns);
        if self.facts.iter().any(|f| f.seq == fact.seq) {
            return; // a later look at the same count is kept
        }
        if self.facts.len() == FACTS {
            self.facts.pop_front();
        }
        self.facts.push_back(fact);
    }

    /// An accepted SYN-data's SYN-ACK at `at_ns`, which may have written the cache.
    fn saw_accept(&mut self, at_ns: u128) {
        if self.accepts.len() == ACCEPTS {
            let gone = self.accepts.pop_front().unwrap_or(0);
            self.forgot_accept = self.forgot_accept.max(gone);
        }
        self.accepts.push_back(at_ns);
    }

    /// No SYN-data accepted here between `a` and `b` (either order), as far as is known.
    fn quiet(&self, a: u128, b: u128) -> bool {
        let (from, to) = (a.min(b), a.max(b));
        self.forgot_accept < from && !self.accepts.iter().any(|t| (from..=to).contains(t))
    }

    fn handed_out(&mut self, hash: u32) {
        if self.fresh.contains(&hash) {
            return;
        }
        if self.fresh.len() == FRESH {
            self.fresh.pop_front();
        }
        self.fresh.push_back(hash);
    }
}

/// What the tracer told of one event: applied to it before a view sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Telling {
    cause: Option<Cause>,
    sent: Option<u32>,
    brought: Option<u32>,
    change: Option<CookieChange>,
}

impl Telling {
    pub(crate) fn apply(self, e: &mut EventRef<'_>) {
        if let Some(c) = self.cause {
            e.cause = Some(c);
        }
        e.sent_cookie_hash = e.sent_cookie_hash.or(self.sent);
        e.cookie_hash = e.cookie_hash.or(self.brought);
        e.cookie_change = e.cookie_change.or(self.change);
    }
}

/// What [`Causes::tell`] decided for an event: told now, or later ([`Causes::take`]).
pub(crate) enum Tell {
    Now(Telling),
    Later(u64),
}

/// A client event in line behind a refusal that waits: what it changes is done in the
/// order the events came ([`Causes::conclude`]).
struct Queued {
    id: u64,
    what: Waiting,
}

enum Waiting {
    /// An accepted SYN-data: what its destination's refusals handed out held.
    Accepted(Dest),
    /// A refusal, told once `told` is set (its change is told in turn), or given up on at
    /// `deadline`.
    Refusal {
        dest: Dest,
        /// Its SYN-ACK's count and time (unix ns).
        synack_seq: u32,
        at_ns: u128,
        sent: Option<u32>,
        before: Option<Known>,
        deadline: Instant,
        told: Option<(Telling, Option<u32>)>,
    },
    /// Nothing to do in turn.
    Nothing,
}

impl Waiting {
    /// A refusal told at once.
    fn told(dest: Dest, told: Telling, handed_out: Option<u32>) -> Waiting {
        Waiting::Refusal {
            dest,
            synack_seq: 0,
            at_ns: 0,
            sent: told.sent,
            before: None,
            deadline: Instant::now(),
            told: Some((told, handed_out)),
        }
    }
}

/// Telling refusals' causes: see the module's doc.
pub(crate) struct Causes {
    key: [u64; 2],
    /// A hook sees the SYN-ACK (the kernel tells, or hashes the SYN-ACK's cookie).
    kernel_sees_synack: bool,
    /// Every client outcome comes as an event (not `export`'s refusals only): what "none
    /// accepted in between" rests on.
    sees_every_outcome: bool,
    /// Events the kernel could not send, as last counted.
    lost: u64,
    trails: HashMap<Dest, Trail>,
    /// The programs' SYN-ACK counts (tracepoint backends).
    seqs: Option<Array<MapData, SynackSeq>>,
    caches: HashMap<u32, Opened>,
    budget: Budget,
    /// Client events behind a refusal that waits, in order, and those told since.
    queue: VecDeque<Queued>,
    done: VecDeque<(u64, Telling)>,
    next_id: u64,
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

fn unix_now_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos()
}

impl Causes {
    /// `key`: this run's cookie-hash key (the programs'); `kernel_sees_synack`: whether the
    /// backend hooks tcp_fastopen_cache_set; `sees_every_outcome`: whether every client
    /// outcome is sent as an event; `seqs`: the programs' SYN-ACK counts (where the kernel
    /// does not see the SYN-ACK). Takes the baseline of every namespace's cache there.
    pub(crate) fn new(
        key: [u64; 2],
        kernel_sees_synack: bool,
        sees_every_outcome: bool,
        seqs: Option<Array<MapData, SynackSeq>>,
    ) -> Causes {
        let mut causes = Causes {
            key,
            kernel_sees_synack,
            sees_every_outcome,
            lost: 0,
            trails: HashMap::new(),
            seqs,
            caches: HashMap::new(),
            budget: Budget { tokens: f64::from(READS_PER_SECOND), at: Instant::now() },
            queue: VecDeque::new(),
            done: VecDeque::new(),
            next_id: 0,
            stats: CauseStats::default(),
        };
        if !kernel_sees_synack {
            causes.baseline(&every_netns::every_netns(&Default::default()));
        }
        causes
    }

    /// Every cookie each namespace's cache holds now, as what it held at its slot's count.
    fn baseline(&mut self, namespaces: &[Netns]) {
        for ns in namespaces {
            self.open(ns.inode, Some(ns));
            let Some(Opened::Ready(cache)) = self.caches.get_mut(&ns.inode) else { continue };
            let counted: Vec<_> = match cache.cookies(self.key) {
                Ok(found) => found,
                Err(e) => {
                    log::debug!("cookie cache of netns {}: {e:#}", ns.inode);
                    continue;
                }
            }
            .into_iter()
            .map(|(saddr, daddr, hash)| {
                let dest = Dest { netns: ns.inode, saddr: saddr.to_canonical(), daddr: daddr.to_canonical() };
                (dest, hash)
            })
            .collect();
            let at_ns = unix_now_ns();
            log::debug!("cookie cache of netns {}: {} cookies at the start", ns.inode, counted.len());
            for (dest, hash) in counted {
                if let Some(seq) = self.seq(dest.slot()) {
                    self.remember(dest).learn(Fact { seq, known: Some(hash), at_ns });
                }
            }
        }
    }

    /// The kernel's count of events it could not send: a loss since the last look leaves
    /// nothing learnt believable (an accepted SYN-data may be among them).
    pub(crate) fn events_lost(&mut self, lost: u64) {
        if lost != self.lost {
            self.lost = lost;
            for trail in self.trails.values_mut() {
                trail.facts.clear();
                trail.fresh.clear();
            }
        }
    }

    /// Tells `e` (its record `raw`): a refused SYN-data's cause and change, now or later
    /// ([`Causes::take`]); learns what client events show of their destination's cookie.
    pub(crate) fn tell(&mut self, e: &EventRef<'_>, raw: &TfoEvent) -> Tell {
        if e.role != Role::Client {
            return Tell::Now(Telling::default());
        }
        let dest = Dest::of(e);
        let what = match e.outcome {
            Outcome::Accepted => {
                self.remember(dest).saw_accept(e.unix_ns);
                Waiting::Accepted(dest)
            }
            // No-cookie mode, told by the programs from the socket on every backend: the SYN
            // carried no TFO option, so there is no cookie to compare (tcp_rcv_fastopen_synack
            // ignores the SYN-ACK's); the cache says nothing of it.
            Outcome::DataNotAcked if e.cause == Some(Cause::NoCookieSent) => {
                Waiting::told(dest, Telling { cause: e.cause, ..Default::default() }, None)
            }
            Outcome::DataNotAcked if self.kernel_sees_synack => {
                let told = Telling {
                    cause: e.cause,
                    sent: e.sent_cookie_hash,
                    brought: e.cookie_hash,
                    change: None,
                };
                let handed_out = (e.cause == Some(Cause::NewCookie)).then_some(e.cookie_hash).flatten();
                Waiting::told(dest, told, handed_out)
            }
            Outcome::DataNotAcked => self.by_the_cache(e, raw, dest),
            // A cookie request's (or a cookie sent without data's) SYN-ACK may write the
            // cache: what it left, for the refusals after it.
            Outcome::CookieRequested | Outcome::CookieSentNoData if raw.synack_seq != 0 => {
                self.settle(e.unix_ns);
                let crowded = crowded(raw.syn_seq, raw.synack_seq, raw.synack_gap_us);
                if let Some(known) = self.read_after(dest, raw.synack_seq, crowded, e.unix_ns) {
                    let at_ns = unix_now_ns();
                    self.learnt(dest, Fact { seq: raw.synack_seq, known, at_ns });
                }
                Waiting::Nothing
            }
            _ => Waiting::Nothing,
        };
        self.next_id += 1;
        let id = self.next_id;
        self.queue.push_back(Queued { id, what });
        self.conclude();
        match self.done.back() {
            Some(&(last, told)) if last == id && self.queue.is_empty() && self.done.len() == 1 => {
                self.done.clear();
                Tell::Now(told)
            }
            _ => Tell::Later(id),
        }
    }

    /// A tracepoint backend's refusal, from what the cache held at its SYN, before its
    /// SYN-ACK and after it (the module's doc).
    fn by_the_cache(&mut self, e: &EventRef<'_>, raw: &TfoEvent, dest: Dest) -> Waiting {
        let unknown = |sent| Telling { cause: Some(Cause::Unknown), sent, ..Default::default() };
        let (t, at_ns) = (raw.synack_seq, e.unix_ns);
        // Its SYN's count is known where its state was (from the SYN on).
        let (Some(handshake_us), true) = (e.handshake_us, t != 0) else {
            return Waiting::told(dest, unknown(e.sent_cookie_hash), None);
        };
        let (s, syn_ns) = (raw.syn_seq, at_ns.saturating_sub(u128::from(handshake_us) * 1000));
        // A blocking socket's request held the cookie its SYN carried: what the cache held
        // at that count, which may tell a refusal waiting for it.
        if let Some(sent) = e.sent_cookie_hash {
            self.learnt(dest, Fact { seq: s, known: Some(sent), at_ns: syn_ns });
        }
        let sent = e.sent_cookie_hash.or_else(|| self.fact(dest, s, syn_ns).flatten());
        // Nothing counted between its SYN and its SYN-ACK: the cache held what the SYN
        // read, unless an accepted SYN-data's SYN-ACK wrote it meanwhile.
        let quiet = self.trails.get(&dest).is_none_or(|tr| tr.quiet(syn_ns, at_ns));
        let before = match sent {
            Some(sent) if t == s.wrapping_add(1) && quiet => Some(Some(sent)),
            _ => self.fact(dest, t.wrapping_sub(1), at_ns),
        };
        if crowded(s, t, raw.synack_gap_us) {
            // Its cookie and another's were cached too close together to tell apart.
            log::debug!(
                "refusal toward {} from {}: its SYN-ACK too close to another's",
                dest.daddr,
                dest.saddr
            );
            return Waiting::told(dest, unknown(sent), None);
        }
        self.settle(at_ns);
        let after = self.read_after(dest, t, false, at_ns);
        if let Some(known) = after {
            self.learnt(dest, Fact { seq: t, known, at_ns: unix_now_ns() });
        }
        let told = after.map(|known| told_of(sent, before, known));
        log::debug!(
            "refusal toward {} from {} (count {s} at its SYN, {t} at its SYN-ACK, {} µs after the last): \
             sent {sent:x?}, held before {before:x?}, after {after:x?}: {:?}",
            dest.daddr,
            dest.saddr,
            raw.synack_gap_us,
            told.map(|t| t.0.cause)
        );
        Waiting::Refusal { dest, synack_seq: t, at_ns, sent, before, deadline: Instant::now() + HOLD, told }
    }

    /// Learns a fact, which may tell refusals waiting for it.
    fn learnt(&mut self, dest: Dest, fact: Fact) {
        self.remember(dest).learn(fact);
        let mut told = Vec::new();
        for (i, q) in self.queue.iter().enumerate() {
            if let Waiting::Refusal { dest, synack_seq, at_ns, sent, before, told: None, .. } = q.what {
                if let Some(after) = self.fact(dest, synack_seq, at_ns) {
                    told.push((i, told_of(sent, before, after)));
                }
            }
        }
        for (i, now) in told {
            log::debug!("a held refusal told by a later fact ({fact:x?}): {:?}", now.0.cause);
            if let Waiting::Refusal { told, .. } = &mut self.queue[i].what {
                *told = Some(now);
            }
        }
    }

    /// What the cache of `dest` held after its slot counted `seq` SYN-ACKs, believable at
    /// `at_ns` (None: not known; Some(None): no cookie).
    fn fact(&self, dest: Dest, seq: u32, at_ns: u128) -> Option<Known> {
        let trail = self.trails.get(&dest)?;
        let holds = |f: &&Fact| f.seq == seq && self.sees_every_outcome && trail.quiet(f.at_ns, at_ns);
        trail.facts.iter().rev().find(holds).map(|f| f.known)
    }

    /// Does in order what the events at the head of the queue change, up to a refusal
    /// that waits.
    fn conclude(&mut self) {
        while let Some(q) = self.queue.front() {
            if matches!(q.what, Waiting::Refusal { told: None, .. }) {
                break;
            }
            let Some(q) = self.queue.pop_front() else { break };
            let told = match q.what {
                Waiting::Accepted(dest) => {
                    self.remember(dest).fresh.clear();
                    Telling::default()
                }
                Waiting::Refusal { dest, told: Some((told, handed_out)), .. } => {
                    self.changed(dest, told, handed_out)
                }
                Waiting::Refusal { told: None, .. } | Waiting::Nothing => Telling::default(),
            };
            self.done.push_back((q.id, told));
        }
    }

    /// What an event held back was told, once it is (then forgotten); None while it waits.
    pub(crate) fn take(&mut self, id: u64) -> Option<Telling> {
        let at = self.done.iter().position(|(i, _)| *i == id)?;
        self.done.remove(at).map(|(_, told)| told)
    }

    /// When the first refusal that waits is given up on (None: none waits).
    pub(crate) fn waits_until(&self) -> Option<Instant> {
        self.queue.iter().find_map(|q| match q.what {
            Waiting::Refusal { told: None, deadline, .. } => Some(deadline),
            _ => None,
        })
    }

    /// Gives up on refusals that waited past their time (all of them with `all`): `unknown`.
    pub(crate) fn give_up(&mut self, all: bool) {
        let now = Instant::now();
        for q in &mut self.queue {
            if let Waiting::Refusal { told: told @ None, deadline, sent, .. } = &mut q.what {
                if all || *deadline <= now {
                    log::debug!("a held refusal given up on");
                    *told = Some((
                        Telling { cause: Some(Cause::Unknown), sent: *sent, ..Default::default() },
                        None,
                    ));
                }
            }
        }
        self.conclude();
    }

    /// The change a refusal shows (the module's doc), `handed_out`: the cookie its
    /// SYN-ACK brought where it was another than the one its SYN carried.
    fn changed(&mut self, dest: Dest, mut told: Telling, handed_out: Option<u32>) -> Telling {
        let trail = self.remember(dest);
        let again = told.sent.is_some_and(|s| trail.fresh.contains(&s));
        told.change = if again {
            Some(CookieChange::Again)
        } else {
            handed_out.map(|h| {
                if trail.fresh.contains(&h) {
                    CookieChange::InFlight
                } else {
                    CookieChange::First
                }
            })
        };
        if let Some(h) = handed_out {
            trail.handed_out(h);
        }
        told
    }

    fn remember(&mut self, dest: Dest) -> &mut Trail {
        if self.trails.len() >= MAX_REMEMBERED && !self.trails.contains_key(&dest) {
            self.trails.clear();
        }
        self.trails.entry(dest).or_default()
    }

    /// The programs' count of SYN-ACKs at `slot` now.
    fn seq(&self, slot: u32) -> Option<u32> {
        self.seqs.as_ref()?.get(&slot, 0).ok().map(|s| s.seq as u32)
    }

    /// Waits until a SYN-ACK at `at_ns` has surely had its cookie cached.
    fn settle(&self, at_ns: u128) {
        let since = Duration::from_nanos(unix_now_ns().saturating_sub(at_ns).min(u64::MAX.into()) as u64);
        if let Some(wait) = SETTLE.checked_sub(since) {
            std::thread::sleep(wait);
        }
    }

    /// What `dest`'s cache holds after the SYN-ACK its slot counted `seq`th (at `at_ns`; not
    /// [`crowded`]): read, where no later one was counted before or while it is read and
    /// none was accepted since; None where it cannot be known.
    fn read_after(&mut self, dest: Dest, seq: u32, crowded: bool, at_ns: u128) -> Option<Known> {
        if crowded || self.seq(dest.slot()) != Some(seq) {
            return None;
        }
        if !self.budget.take() {
            self.stats.over_budget += 1;
            return None;
        }
        self.open(dest.netns, None);
        let Some(Opened::Ready(cache)) = self.caches.get_mut(&dest.netns) else { return None };
        self.stats.reads += 1;
        let known = match cache.cookie(dest.saddr, dest.daddr, self.key) {
            Ok(known) => known,
            Err(e) => {
                log::debug!("cookie cache of netns {}: {e:#}", dest.netns);
                self.caches.remove(&dest.netns);
                return None;
            }
        };
        let unchanged = self.seq(dest.slot()) == Some(seq);
        let quiet = self.trails.get(&dest).is_none_or(|t| t.quiet(at_ns, unix_now_ns()));
        (unchanged && quiet).then_some(known)
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

/// A refusal told from what the cache held before its SYN-ACK (`before`) and after it
/// (`after`), and the cookie its SYN carried (`sent`), with the cookie the SYN-ACK handed
/// out where it brought another (the module's doc).
fn told_of(sent: Option<u32>, before: Option<Known>, after: Known) -> (Telling, Option<u32>) {
    let unknown = Telling { cause: Some(Cause::Unknown), sent, ..Default::default() };
    let Some(before) = before else { return (unknown, None) };
    match (after, sent) {
        // The SYN-ACK wrote another cookie: it brought that one.
        (Some(got), Some(sent)) if after != before => {
            let cause = if got == sent { Cause::SameCookie } else { Cause::NewCookie };
            let told = Telling { cause: Some(cause), sent: Some(sent), brought: Some(got), change: None };
            (told, (cause == Cause::NewCookie).then_some(got))
        }
        // Unchanged, and what the SYN carried: the SYN-ACK brought no cookie (or the same
        // one back, which looks the same).
        (_, Some(sent)) if after == before && before == Some(sent) => {
            (Telling { cause: Some(Cause::NoTfoOption), sent: Some(sent), ..Default::default() }, None)
        }
        _ => (unknown, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const O: u32 = 0x0101;
    const N: u32 = 0x0202;

    #[test]
    fn a_refusal_is_told_by_what_the_cache_held_around_its_synack() {
        let cause = |sent, before, after| told_of(sent, before, after).0.cause;
        // The cookie changed: a new one, or the same back where it had changed between.
        assert_eq!(cause(Some(O), Some(Some(O)), Some(N)), Some(Cause::NewCookie));
        assert_eq!(cause(Some(O), Some(Some(N)), Some(O)), Some(Cause::SameCookie));
        // Unchanged, holding what the SYN carried: no option.
        assert_eq!(cause(Some(O), Some(Some(O)), Some(O)), Some(Cause::NoTfoOption));
        // Unchanged, holding the new cookie already: in flight or no option, no telling.
        assert_eq!(cause(Some(O), Some(Some(N)), Some(N)), Some(Cause::Unknown));
        // What the SYN carried, or the cache before, not known: no telling.
        assert_eq!(cause(None, Some(Some(O)), Some(N)), Some(Cause::Unknown));
        assert_eq!(cause(Some(O), None, Some(N)), Some(Cause::Unknown));
        assert_eq!(told_of(Some(O), Some(Some(O)), Some(N)).1, Some(N), "N handed out");
    }

    fn dest() -> Dest {
        Dest { netns: 1, saddr: "198.18.0.1".parse().unwrap(), daddr: "198.18.0.2".parse().unwrap() }
    }

    fn causes(every_outcome: bool) -> Causes {
        Causes::new([1, 2], true, every_outcome, None)
    }

    fn refused(c: &mut Causes, sent: u32, brought: u32) -> Option<CookieChange> {
        let told =
            Telling { cause: Some(Cause::NewCookie), sent: Some(sent), brought: Some(brought), change: None };
        c.changed(dest(), told, Some(brought)).change
    }

    /// A rotation with 16 SYN-data in flight, then the new cookie holds; then a fleet
    /// whose two keys hand out their cookies in turn.
    #[test]
    fn one_change_in_flight_is_not_a_cookie_refused_again() {
        use CookieChange::{Again, First, InFlight};
        let mut c = causes(true);
        assert_eq!(refused(&mut c, O, N), Some(First));
        for _ in 0..15 {
            assert_eq!(refused(&mut c, O, N), Some(InFlight));
        }
        c.remember(dest()).fresh.clear(); // accepted
        let (a, b) = (0x0a0a, 0x0b0b);
        assert_eq!(refused(&mut c, N, a), Some(First), "another rotation, after N held");
        assert_eq!(refused(&mut c, a, b), Some(Again));
        assert_eq!(refused(&mut c, b, a), Some(Again));
    }

    #[test]
    fn facts_hold_only_while_nothing_was_accepted_between() {
        let mut c = causes(true);
        c.remember(dest()).learn(Fact { seq: 3, known: Some(O), at_ns: 100 });
        assert_eq!(c.fact(dest(), 3, 200), Some(Some(O)));
        assert_eq!(c.fact(dest(), 4, 200), None, "another count");
        c.remember(dest()).saw_accept(150);
        assert_eq!(c.fact(dest(), 3, 200), None, "an accepted SYN-data may have written it");
        assert_eq!(c.fact(dest(), 3, 120), Some(Some(O)));
        let mut refusals_only = causes(false);
        refusals_only.remember(dest()).learn(Fact { seq: 3, known: Some(O), at_ns: 100 });
        assert_eq!(refusals_only.fact(dest(), 3, 200), None, "accepted ones unseen");
    }
}
