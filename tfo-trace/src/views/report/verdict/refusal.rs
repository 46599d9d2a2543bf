//! The sentences of refused SYN-data (`data_not_acked`), one per cause its SYN-ACK showed
//! ([`Kind::of_refusals`] decides which): each names the likely cause, its owner and the
//! fix, with the figures to forward to the other side.
use crate::{
    aggregation::{
        refusals::{Refusals, Told},
        report::{connections::ConnAcc, facts::ServerSide, verdict::Kind},
    },
    events::{Cause, CookieChange, Outcome},
    units,
};

/// How the row's sentences name where its connections went.
pub(super) struct Subject<'a> {
    /// `198.18.0.2:8080`, `198.18.0.0/24`, ...
    pub name: &'a str,
    /// A group of destinations, not one.
    pub many: bool,
    /// ` (2 of 5 destinations), from 3 of 4 hosts`, or empty.
    pub spread: &'a str,
    /// ` in curl`, or empty.
    pub in_clients: &'a str,
    /// The destination's listener and namespace, where it is on this host.
    pub server: Option<&'a ServerSide>,
}

impl Subject<'_> {
    /// The destination's namespace answered SYNs with syncookies in the window: its
    /// listeners skipped TFO for those SYNs (a SYN flood, with tcp_syncookies=1).
    pub(super) fn flooded(&self) -> Option<&ServerSide> {
        self.server.filter(|srv| srv.sent_syncookies())
    }
}

/// The sentence of a refusal verdict, its evidence pushed onto `evidence`.
pub(super) fn sentence(kind: Kind, a: &ConnAcc, s: &Subject<'_>, evidence: &mut Vec<String>) -> String {
    let refused = a.count(Outcome::DataNotAcked);
    let sent = a.syn_data_sent();
    let each = units::duration_us(a.extra_round_trip_us / refused.max(1));
    let n_of_m = format!("{} of {}", units::count(refused), units::count(sent));
    // tcp_rcv_fastopen_synack(): the refused data is marked lost and resent at once on the
    // SYN-ACK, when plain TCP would first send it: a round trip slower than a working TFO,
    // not than no TFO.
    evidence.push(format!(
        "{} not acknowledged by the SYN-ACK (TcpExtTCPFastOpenActiveFail): the kernel resent the data at \
         once on the SYN-ACK, as plain TCP would first send it: no time lost against no TFO, +1 RTT \
         against a working TFO (gain forgone, ~{each} each)",
        units::plural(refused, "SYN-data", "SYN-data"),
    ));
    evidence.push(causes_line(&a.refusals));
    let r = Refused { a, s, refused, each, n_of_m };
    match kind {
        Kind::KeyRotatedWithoutBackup => key_rotated_without_backup(&r, evidence),
        Kind::CookieChurn => cookie_churn(&r, evidence),
        Kind::ServerStoppedTfo => server_stopped_tfo(&r, evidence),
        Kind::SynDataNotTaken => syn_data_not_taken(&r, evidence),
        Kind::ClientNoCookieMode => client_no_cookie_mode(&r, evidence),
        _ => syn_data_refused(&r, evidence),
    }
}

/// What every refusal's sentence draws on.
struct Refused<'a> {
    a: &'a ConnAcc,
    s: &'a Subject<'a>,
    refused: u64,
    /// The round trip each refusal forwent against a working TFO, printed.
    each: String,
    /// `4 of 5`: refused of sent.
    n_of_m: String,
}

impl Refused<'_> {
    /// `server 198.18.0.2:8080`, or `servers at 198.18.0.0/24`.
    fn who(&self) -> String {
        if self.s.many {
            format!("servers at {}", self.s.name)
        } else {
            format!("server {}", self.s.name)
        }
    }
}

fn key_rotated_without_backup(x: &Refused<'_>, evidence: &mut Vec<String>) -> String {
    let (n_of_m, spread) = (&x.n_of_m, x.s.spread);
    let r = &x.a.refusals;
    let (changes, in_flight) = (r.changed(CookieChange::First), r.changed(CookieChange::InFlight));
    if in_flight > 0 {
        evidence.push(format!(
            "the cookie changed {}; {} more SYN-data had left with the old cookie before the new one came \
             (in flight), each refused with the same new cookie",
            units::plural(changes, "time", "times"),
            units::count(in_flight),
        ));
    }
    let resumed = x.a.key.rotated(x.refused);
    evidence.push(if resumed {
        "SYN-data accepted again after the last refusal, no more refused than accepted since the first".into()
    } else {
        "no SYN-data accepted since the refusal (yet)".into()
    });
    let who = x.who();
    let then =
        if resumed { "once, then accepted again" } else { "with a new cookie, none accepted since the last" };
    format!(
        "{who} refused {n_of_m} SYN-data {then}{spread}: its TFO key was likely rotated without a \
         backup key, or the client's address as the server sees it changed (NAT): a one-off, not a \
         fault; when rotating, keep the old key as backup (`net.ipv4.tcp_fastopen_key=NEW,OLD`, or \
         TCP_FASTOPEN_KEY with two keys)"
    )
}

fn cookie_churn(x: &Refused<'_>, evidence: &mut Vec<String>) -> String {
    let (a, s, r) = (x.a, x.s, &x.a.refusals);
    let (subj, spread, n_of_m, each) = (s.name, s.spread, &x.n_of_m, &x.each);
    let new = r.of(Told::Cause(Cause::NewCookie));
    let again = r.changed(CookieChange::Again);
    evidence.push(if again > 0 {
        format!(
            "{} of {} refused SYN-data carried a cookie the server had just handed out to a refused one, \
             none accepted between: each new cookie was refused again at its next use; {} accepted",
            units::count(again),
            units::count(x.refused),
            units::count(a.count(Outcome::Accepted)),
        )
    } else {
        // A recording made before cookie changes were told: its runs.
        format!(
            "the cookie changed {} (a new one on {} of {} refusals); the longest run of refusals in a \
             row: {}; {} accepted",
            units::plural(new, "time", "times"),
            units::count(new),
            units::count(x.refused),
            units::count(r.longest_run()),
            units::count(a.count(Outcome::Accepted)),
        )
    });
    evidence.push(
        "the server checks each cookie against another key, or sees the client at another address, \
         than the one that issued it: the server side counts TcpExtTCPFastOpenPassiveFail"
            .into(),
    );
    let them = if s.many { "them" } else { subj };
    format!(
        "the servers behind {subj} do not share a TFO key (anycast, a load balancer), or the client's \
         address changes per connection (a NAT pool): {n_of_m} SYN-data refused{spread}, a new cookie \
         {} times: every SYN-data is refused and its data resent on the SYN-ACK, +1 RTT against a \
         working TFO ({each} each, a gain forgone, no loss against no TFO): share the key across \
         them (or pin the client's source address); turning TFO off toward {them}{} would win \
         nothing back",
        units::count(new),
        s.in_clients
    )
}

fn server_stopped_tfo(x: &Refused<'_>, evidence: &mut Vec<String>) -> String {
    if let Some(srv) = x.s.flooded() {
        return syncookies_skipped_tfo(x, srv, evidence);
    }
    let (a, s) = (x.a, x.s);
    let (subj, spread, n_of_m) = (s.name, s.spread, &x.n_of_m);
    let accepted_before = matches!(
        (a.first_accepted_ns, a.first_not_acked_ns), (Some(acc), Some(fail)) if acc < fail
    );
    let why = match (accepted_before, s.many) {
        (true, _) => "cookie accepted earlier",
        (false, false) => "the client sent a cookie it got from that server",
        (false, true) => "the clients sent cookies they got from those servers",
    };
    evidence.push(
        "a SYN-ACK without a TFO option: TFO turned off on the server (net.ipv4.tcp_fastopen bit \
         0x2), a listener without TCP_FASTOPEN, its TFO queue full (TcpExtTCPFastOpenListenOverflow), \
         syncookie mode (TcpExtSyncookiesSent), or the option stripped on the path"
            .into(),
    );
    let who = if s.many {
        format!("servers at {subj} no longer accept")
    } else {
        format!("server {subj} no longer accepts")
    };
    format!(
        "{who} TFO: {n_of_m} SYN-data not acknowledged{spread} ({why}), its SYN-ACKs without a TFO \
         option: the server's team turns TFO back on (or the path's owner stops stripping the option)"
    )
}

/// SYN-ACKs without a TFO option from a listener of this host whose namespace answered
/// SYNs with syncookies: tcp_conn_request() calls no tcp_try_fastopen() for a SYN it
/// answers with a syncookie (net/ipv4/tcp_input.c:7371-7373, 6.12), so the server did not
/// stop TFO, the flood did; it takes TFO again once its SYN queue drains.
fn syncookies_skipped_tfo(x: &Refused<'_>, srv: &ServerSide, evidence: &mut Vec<String>) -> String {
    let (spread, n_of_m) = (x.s.spread, &x.n_of_m);
    let ns = &srv.ns;
    evidence.push(format!(
        "the server's namespace {ns} (listener {}) counted TcpExtSyncookiesSent +{}, TcpExtListenOverflows \
         +{}, TcpExtListenDrops +{} in the window, tcp_syncookies={}: a SYN answered with a syncookie skips \
         TFO, its SYN-ACK carries no TFO option",
        srv.listener,
        srv.syncookies_sent,
        srv.listen_overflows,
        srv.listen_drops,
        srv.syncookies.map_or("unknown".into(), |v| v.to_string()),
    ));
    let why = if srv.syncookies == Some(2) {
        format!("tcp_syncookies=2 in {ns} answers every SYN with one: set it to 1 there")
    } else {
        "a SYN flood, or more handshakes in flight than its listen() backlog: keep \
         net.ipv4.tcp_syncookies=1, find the flood, or raise the listener's backlog (and \
         net.core.somaxconn, which caps it); TFO comes back by itself once syncookies stop"
            .to_string()
    };
    format!(
        "{} answered with syncookies (TcpExtSyncookiesSent +{} in {ns}), which skip TFO: {n_of_m} SYN-data \
         not acknowledged{spread}, the data resent at once on the SYN-ACK; TFO is not at fault: {why}",
        x.who(),
        srv.syncookies_sent,
    )
}

fn syn_data_not_taken(x: &Refused<'_>, evidence: &mut Vec<String>) -> String {
    let (spread, n_of_m) = (x.s.spread, &x.n_of_m);
    // tcp_try_fastopen(): a valid cookie whose tcp_fastopen_create_child() returns NULL
    // counts PassiveFail and answers with that same cookie. The child fails in
    // syn_recv_sock(): out of memory, no route back, a bind bucket or key copy failing (it
    // counts ListenDrops); a full accept queue drops the SYN before TFO is tried
    // (tcp_conn_request()), which the client sees as `syn_data_dropped`, not this.
    evidence.push(
        "the SYN-ACK brought back the cookie the SYN carried: the server found the cookie good, then \
         could not make the connection's socket (tcp_fastopen_create_child failed: out of memory, no \
         route back to the client, a local port or key copy failing); it counts \
         TcpExtTCPFastOpenPassiveFail and TcpExtListenDrops. Not a full accept queue: that drops the \
         SYN before TFO is tried, and the client would see syn_data_dropped"
            .into(),
    );
    let who = x.who();
    format!(
        "{who} accepted the cookie but not the data in {n_of_m} SYN-data{spread}: its kernel could not \
         make the connection's socket, not a key or path problem: its team looks at its memory (the \
         kernel log, TcpExtTCPFastOpenPassiveFail and TcpExtListenDrops) and its routes back to the \
         clients"
    )
}

fn client_no_cookie_mode(x: &Refused<'_>, evidence: &mut Vec<String>) -> String {
    let (spread, n_of_m, in_clients) = (x.s.spread, &x.n_of_m, x.s.in_clients);
    evidence.push(
        "the SYN carried its data without a TFO option: the client is in no-cookie mode \
         (tcp_fastopen_cookie_check(): net.ipv4.tcp_fastopen bit 0x4, the route's fastopen_no_cookie, or \
         TCP_FASTOPEN_NO_COOKIE on the socket), and the server takes SYN-data only with a cookie \
         (without its own bit 0x200); such a SYN never asks for one, so every connection is refused"
            .into(),
    );
    let them = if x.s.many { "them" } else { x.s.name };
    let who = x.who();
    format!(
        "{who} needs a TFO cookie and the client sends none (no-cookie mode): {n_of_m} SYN-data \
         refused{spread}, each sent again after the handshake: keep no-cookie mode for servers that take \
         data without a cookie (their bit 0x200), and let the client ask {them} for a cookie (clear bit \
         0x4, the route's fastopen_no_cookie, or TCP_FASTOPEN_NO_COOKIE{in_clients})"
    )
}

fn syn_data_refused(x: &Refused<'_>, evidence: &mut Vec<String>) -> String {
    let r = &x.a.refusals;
    let (spread, n_of_m) = (x.s.spread, &x.n_of_m);
    evidence.push(
        "likely: TFO turned off on the server (tcp_fastopen bit 0x2 or TCP_FASTOPEN), its key \
         changed without keeping the old one as backup, its TFO queue full, servers behind it \
         without a shared key, or its kernel failing to make the connection's socket"
            .into(),
    );
    let why = if r.of(Told::NotRecorded) > r.of(Told::Cause(Cause::Unknown)) {
        "the recording was made before tfo-trace kept causes"
    } else {
        "the backend does not see the SYN-ACK's option and the client's cookie cache could not be read \
         (reading another namespace's needs CAP_SYS_ADMIN; reads are limited to 50 a second): trace \
         as root, or on the fentry backend, to tell"
    };
    let who = x.who();
    format!("{who} refused {n_of_m} SYN-data{spread}; why could not be told: {why}")
}

/// What each refusal's SYN-ACK said, by cause.
fn causes_line(r: &Refusals) -> String {
    let mut parts: Vec<String> =
        [Cause::NewCookie, Cause::NoTfoOption, Cause::SameCookie, Cause::NoCookieSent]
            .iter()
            .map(|c| (c.name(), r.of(Told::Cause(*c))))
            .chain([("unknown", r.untold())])
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| format!("{name}={n}"))
            .collect();
    if parts.is_empty() {
        parts.push("none".into());
    }
    format!("what the SYN-ACKs said: {}", parts.join(" "))
}
