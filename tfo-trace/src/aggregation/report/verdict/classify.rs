//! Which verdict a row gets, and how many connections show it: the rules, apart from the
//! figures ([`super::client`], [`super::listener`], [`super::namespace`]) and the
//! sentences that say them (`views/report/verdict`).
use serde::Serialize;

use crate::aggregation::refusals::{Refusals, Told};
use crate::{
    aggregation::{
        counting::OutcomeCounts,
        report::{connections::ConnAcc, key_change::KeyChange},
        stall::Cause,
    },
    events::{Cause as Refusal, Outcome},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// TFO works: every SYN-data accepted.
    Healthy,
    /// Nothing wrong, nothing to judge yet (cookie requests only, no traffic).
    Info,
    SynDataDropped,
    CookieRequestDropped,
    /// SYN-data refused, its SYN-ACK without a TFO option: the server does not do TFO (any
    /// more), or the option is stripped on the path.
    ServerStoppedTfo,
    /// SYN-data refused with a new cookie on most refusals, and the refusals go on: servers
    /// behind one address without a shared key, or a client address that changes (NAT pool).
    CookieChurn,
    /// SYN-data refused, its SYN-ACK bringing back the same cookie: the server took the
    /// cookie, not the data.
    SynDataNotTaken,
    /// SYN-data refused, why not told (backend, privileges, an old recording).
    SynDataRefused,
    /// SYN-data refused because the client sent it without a cookie (no-cookie mode) to a
    /// server that needs one.
    ClientNoCookieMode,
    /// SYN-data answered by a reset while SYNs without data were answered: a firewall or
    /// IPS that rejects SYNs with payload.
    SynDataReset,
    ConnectFailed,
    NotAttempted,
    QueueOverflow,
    CookieInvalid,
    KeyRotated,
    /// The key changed without a backup key: old cookies refused once, then new accepted.
    KeyRotatedWithoutBackup,
    /// Listeners answered SYNs with syncookies, so they took no SYN-data.
    Syncookies,
    ListenerDisabled,
    /// Blackhole detection paused active TFO in a client namespace.
    ActiveTfoPaused,
    /// The clients' SYNs carried a cookie but no data. No loss against no TFO (the same
    /// handshake); a round trip gained where the server writes first: a SYN with a valid
    /// cookie makes the server's child at once, allowed to send in SYN_RECV
    /// (tcp_try_fastopen()), so a banner leaves with the SYN-ACK's flight. Nothing gained
    /// where the client writes first.
    CookieWithoutData,
    /// Cookie requests, asked again and again, that no SYN-ACK answered with a cookie: the
    /// server does not give one (TFO off there, a listener without TCP_FASTOPEN, its TFO
    /// queue full, syncookies, no cookie needed) or the option is stripped on the way back.
    NoCookieGiven,
}

impl Kind {
    /// The JSON name (`syn_data_dropped`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Healthy => "healthy",
            Kind::Info => "info",
            Kind::SynDataDropped => "syn_data_dropped",
            Kind::CookieRequestDropped => "cookie_request_dropped",
            Kind::ServerStoppedTfo => "server_stopped_tfo",
            Kind::CookieChurn => "cookie_churn",
            Kind::SynDataNotTaken => "syn_data_not_taken",
            Kind::SynDataRefused => "syn_data_refused",
            Kind::ClientNoCookieMode => "client_no_cookie_mode",
            Kind::SynDataReset => "syn_data_reset",
            Kind::ConnectFailed => "connect_failed",
            Kind::NotAttempted => "not_attempted",
            Kind::QueueOverflow => "queue_overflow",
            Kind::CookieInvalid => "cookie_invalid",
            Kind::KeyRotated => "key_rotated",
            Kind::KeyRotatedWithoutBackup => "key_rotated_without_backup",
            Kind::Syncookies => "syncookies",
            Kind::ListenerDisabled => "listener_disabled",
            Kind::ActiveTfoPaused => "active_tfo_paused",
            Kind::CookieWithoutData => "cookie_without_data",
            Kind::NoCookieGiven => "no_cookie_given",
        }
    }

    /// Cookie requests before a destination's requests that got no cookie are a finding:
    /// fewer may be first contact, or a pool's connections opened together.
    pub const UNANSWERED_REQUESTS: u64 = 3;

    /// Cookie requests that no cookie answered: enough of them, one at least asked after
    /// an earlier one's answer, and nothing that shows the client ever held a cookie.
    fn no_cookie_given(a: &ConnAcc) -> bool {
        let c = |o| a.count(o);
        c(Outcome::CookieRequested) >= Kind::UNANSWERED_REQUESTS
            && a.asks.asked_again_after_an_answer()
            && a.syn_data_sent() == 0
            && c(Outcome::CookieSentNoData) == 0
            && c(Outcome::CookieReceived) == 0
    }

    /// The client-side verdict of a group of connections: the first that applies.
    pub fn of_clients(a: &ConnAcc) -> Kind {
        let c = |o| a.count(o);
        if a.syn_data_dropped() > 0 {
            Kind::SynDataDropped
        } else if c(Outcome::DataNotAcked) > 0 {
            Kind::of_refusals(&a.refusals, &a.key)
        } else if a.stalls_of(Cause::CookieRequestDropped) > 0 {
            Kind::CookieRequestDropped
        } else if a.syn_data_reset > 0 && a.answered_without_data() > 0 {
            Kind::SynDataReset
        } else if c(Outcome::ConnectFailed) > 0 {
            Kind::ConnectFailed
        } else if c(Outcome::NotAttempted) > 0 && c(Outcome::Accepted) == 0 {
            Kind::NotAttempted
        } else if Kind::no_cookie_given(a) {
            Kind::NoCookieGiven
        } else if c(Outcome::CookieSentNoData) > 0 && c(Outcome::Accepted) == 0 {
            Kind::CookieWithoutData
        } else if c(Outcome::Accepted) > 0 {
            Kind::Healthy
        } else {
            Kind::Info
        }
    }

    /// Refused SYN-data, by what most SYN-ACKs said. A cookie that keeps changing
    /// (servers without a shared key, a NAT pool) is told by new cookies refused again at
    /// their next use ([`Refusals::churns`]), not by how many were refused in a row: a key
    /// rotated without a backup refuses every SYN-data already in flight with the old
    /// cookie (a browser's, a pool's: a round trip's worth), each bringing the same new
    /// one, which then holds: one change. Where the cause was not told, the timing alone
    /// still tells a one-off.
    pub fn of_refusals(r: &Refusals, key: &KeyChange) -> Kind {
        if r.churns() {
            return Kind::CookieChurn;
        }
        let rotated = key.rotated(r.count());
        match r.main_cause() {
            Some(Refusal::NewCookie) => Kind::KeyRotatedWithoutBackup,
            Some(Refusal::NoTfoOption) => Kind::ServerStoppedTfo,
            Some(Refusal::SameCookie) => Kind::SynDataNotTaken,
            Some(Refusal::NoCookieSent) => Kind::ClientNoCookieMode,
            _ if rotated => Kind::KeyRotatedWithoutBackup,
            _ => Kind::SynDataRefused,
        }
    }

    /// For a client verdict: how many connections show it, of how many that could.
    pub fn shown_by(self, a: &ConnAcc) -> (u64, u64) {
        let c = |o| a.count(o);
        let cookie_dropped = a.stalls_of(Cause::CookieRequestDropped);
        match self {
            Kind::SynDataDropped => (a.syn_data_dropped(), a.syn_data_sent()),
            Kind::ServerStoppedTfo => (a.refusals.of(Told::Cause(Refusal::NoTfoOption)), a.syn_data_sent()),
            Kind::CookieChurn => (a.refusals.count(), a.syn_data_sent()),
            Kind::SynDataNotTaken => (a.refusals.of(Told::Cause(Refusal::SameCookie)), a.syn_data_sent()),
            Kind::ClientNoCookieMode => {
                (a.refusals.of(Told::Cause(Refusal::NoCookieSent)), a.syn_data_sent())
            }
            Kind::SynDataReset => (a.syn_data_reset, a.syn_data_sent()),
            Kind::KeyRotatedWithoutBackup | Kind::SynDataRefused => {
                (c(Outcome::DataNotAcked), a.syn_data_sent())
            }
            Kind::CookieRequestDropped => {
                (cookie_dropped, c(Outcome::CookieRequested).saturating_add(cookie_dropped))
            }
            Kind::ConnectFailed => (c(Outcome::ConnectFailed), a.connections()),
            Kind::NotAttempted => (c(Outcome::NotAttempted), a.connections()),
            Kind::Healthy => (c(Outcome::Accepted), a.syn_data_sent()),
            Kind::CookieWithoutData => (c(Outcome::CookieSentNoData), a.connections()),
            Kind::NoCookieGiven => (c(Outcome::CookieRequested), a.connections()),
            _ => (c(Outcome::CookieRequested), a.connections()),
        }
    }

    /// Problems before the rest, for rows that lost the same time.
    pub fn severity(self) -> u8 {
        match self {
            Kind::Healthy | Kind::Info => 0,
            Kind::NotAttempted
            | Kind::KeyRotated
            | Kind::KeyRotatedWithoutBackup
            | Kind::CookieWithoutData => 1,
            Kind::ConnectFailed | Kind::ActiveTfoPaused => 2,
            Kind::ServerStoppedTfo
            | Kind::CookieChurn
            | Kind::SynDataNotTaken
            | Kind::SynDataRefused
            | Kind::ClientNoCookieMode
            | Kind::CookieInvalid
            | Kind::ListenerDisabled
            | Kind::Syncookies
            | Kind::NoCookieGiven => 3,
            // Every TFO connect there fails outright (ECONNREFUSED to the application).
            Kind::QueueOverflow | Kind::SynDataReset => 4,
            Kind::CookieRequestDropped => 5,
            Kind::SynDataDropped => 6,
        }
    }
}

/// How much a verdict rests on: [`Strength::of`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strength {
    #[default]
    Weak,
    Moderate,
    Strong,
}

impl Strength {
    /// `showing` connections show the verdict, of `of` that could: strong from 30 of them
    /// and at least half; moderate from 3 (or a minority of many); weak below 3: one
    /// connection in one is an anecdote, 900 in 1,000 a pattern.
    pub fn of(showing: u64, of: u64) -> Strength {
        if showing >= 30 && showing.saturating_mul(2) >= of {
            Strength::Strong
        } else if showing >= 3 {
            Strength::Moderate
        } else {
            Strength::Weak
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Strength::Weak => "weak",
            Strength::Moderate => "moderate",
            Strength::Strong => "strong",
        }
    }
}

/// The verdict on a listener's server events: the first that applies.
pub(crate) fn of_listener(t: &OutcomeCounts, key: &KeyChange) -> Kind {
    if t[Outcome::QueueOverflow] > 0 {
        Kind::QueueOverflow
    } else if t[Outcome::CookieInvalid] > 0 && key.rotated(t[Outcome::CookieInvalid]) {
        Kind::KeyRotatedWithoutBackup
    } else if t[Outcome::CookieInvalid] > 0 {
        Kind::CookieInvalid
    } else if t[Outcome::AcceptedAltKey] > 0 {
        Kind::KeyRotated
    } else if t[Outcome::ListenerDisabled] > 0 {
        Kind::ListenerDisabled
    } else if t[Outcome::Accepted] > 0 {
        Kind::Healthy
    } else {
        Kind::Info
    }
}

/// For a listener verdict: the events that show it, of the SYN-data (or cookie requests)
/// it got.
pub(crate) fn listener_shown_by(kind: Kind, t: &OutcomeCounts) -> (u64, u64) {
    let c = |o| t[o];
    let alt = c(Outcome::AcceptedAltKey);
    let accepted = c(Outcome::Accepted) + alt;
    let syn_data =
        accepted + c(Outcome::CookieInvalid) + c(Outcome::QueueOverflow) + c(Outcome::ListenerDisabled);
    match kind {
        Kind::QueueOverflow => (c(Outcome::QueueOverflow), syn_data),
        Kind::CookieInvalid | Kind::KeyRotatedWithoutBackup => (c(Outcome::CookieInvalid), syn_data),
        Kind::KeyRotated => (alt, syn_data),
        Kind::ListenerDisabled => (c(Outcome::ListenerDisabled), syn_data),
        Kind::Healthy => (accepted, syn_data),
        _ => (c(Outcome::CookieRequested), c(Outcome::CookieRequested)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strength_follows_the_counts() {
        assert_eq!(Strength::of(1, 1), Strength::Weak, "one connection is an anecdote");
        assert_eq!(Strength::of(2, 2), Strength::Weak);
        assert_eq!(Strength::of(3, 3), Strength::Moderate);
        assert_eq!(Strength::of(900, 1000), Strength::Strong);
        assert_eq!(Strength::of(30, 60), Strength::Strong);
        assert_eq!(Strength::of(30, 61), Strength::Moderate, "a minority of many");
        assert_eq!(Strength::of(0, 1000), Strength::Weak);
    }

    #[test]
    fn a_listener_gets_the_first_verdict_that_applies() {
        let of = |outcomes: &[Outcome]| {
            let mut t = OutcomeCounts::default();
            outcomes.iter().for_each(|o| t.add(*o));
            of_listener(&t, &KeyChange::default())
        };
        assert_eq!(
            of(&[Outcome::Accepted, Outcome::QueueOverflow, Outcome::CookieInvalid]),
            Kind::QueueOverflow
        );
        assert_eq!(of(&[Outcome::AcceptedAltKey, Outcome::CookieInvalid]), Kind::CookieInvalid);
        assert_eq!(of(&[Outcome::Accepted, Outcome::AcceptedAltKey]), Kind::KeyRotated);
        assert_eq!(of(&[Outcome::ListenerDisabled]), Kind::ListenerDisabled);
        assert_eq!(of(&[Outcome::Accepted]), Kind::Healthy);
        assert_eq!(of(&[Outcome::CookieRequested]), Kind::Info);
    }

    #[test]
    fn refusals_then_acceptance_are_a_rotation_and_refusals_that_go_on_are_not() {
        let judge = |seq: &[(Outcome, u64)]| {
            let (mut t, mut k) = (OutcomeCounts::default(), KeyChange::default());
            for &(o, at) in seq {
                t.add(o);
                k.add(o, at);
            }
            of_listener(&t, &k)
        };
        use Outcome::{Accepted, CookieInvalid};
        let rotation = [(Accepted, 1), (CookieInvalid, 2), (CookieInvalid, 3), (Accepted, 4), (Accepted, 5)];
        assert_eq!(judge(&rotation), Kind::KeyRotatedWithoutBackup);
        assert_eq!(judge(&rotation[..3]), Kind::CookieInvalid, "not accepted again (yet)");
        let fleet =
            [(CookieInvalid, 1), (Accepted, 2), (CookieInvalid, 3), (CookieInvalid, 4), (Accepted, 5)];
        assert_eq!(judge(&fleet), Kind::CookieInvalid, "refused more than accepted since: no one-off");
    }
}
