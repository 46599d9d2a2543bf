//! Why a destination's SYN-data was refused, and how its cookie changed: what tells a
//! server that stopped TFO from one whose cookie keeps changing (servers behind one address
//! without a shared key, a NAT pool) and from a one-off change (a key rotated without a
//! backup, the client's address changed once behind NAT), whatever the number of
//! connections in flight when it happened. Kept on every destination row of `report`
//! (beside [`super::report::key_change::KeyChange`]) and of `top`, and by `export`, so
//! small, fixed-size and mergeable.
use serde::Serialize;

use crate::events::{Cause, CookieChange, EventRef, Outcome, Role};

/// What a refused SYN-data's SYN-ACK said: a [`Cause`] the tracer told, or nothing told at
/// all (a recording made before causes were kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Told {
    Cause(Cause),
    NotRecorded,
}

impl Told {
    /// What `e` says, if it is a refused SYN-data (a client's `data_not_acked`).
    pub fn of(e: &EventRef<'_>) -> Option<Told> {
        (e.role == Role::Client && e.outcome == Outcome::DataNotAcked)
            .then(|| e.cause.map_or(Told::NotRecorded, Told::Cause))
    }

    fn index(self) -> usize {
        match self {
            Told::Cause(c) => c as usize,
            Told::NotRecorded => Cause::ALL.len(),
        }
    }
}

/// The client's refused SYN-data (`data_not_acked`) toward one destination (or a group of
/// them), by cause and by how the destination's cookie changed ([`CookieChange`]), and the
/// longest run of them in a row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// By [`Told::index`]: each [`Cause`] by its number, then the untold ones.
    by_cause: [u32; Cause::ALL.len() + 1],
    /// By [`CookieChange`] (its place in [`CookieChange::ALL`]).
    by_change: [u32; CookieChange::ALL.len()],
    /// Refusals since the last accepted SYN-data: the run still going.
    run: u32,
    longest_run: u32,
}

/// The refusals' figures, as `report`'s JSON gives them (`refusals` on a destination row).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RefusalFigures {
    /// The SYN-ACK brought a cookie other than the one the SYN carried.
    pub new_cookie: u64,
    pub no_tfo_option: u64,
    pub same_cookie: u64,
    /// The client sent its data without a cookie (no-cookie mode).
    pub no_cookie_sent: u64,
    /// Not told: the backend could not see it, or the recording predates causes.
    pub unknown: u64,
    /// The most refused SYN-data in a row, none accepted between.
    pub longest_run: u64,
    /// How the destination's cookie changed, where told ([`CookieChange`]): the times a
    /// SYN-ACK brought a new one (`cookie_changes`), the SYN-data that left with the old
    /// one before it arrived (`in_flight`), and those refused while carrying a cookie
    /// the destination had just handed out (`refused_again`: the new cookie did not hold).
    pub cookie_changes: u64,
    pub in_flight: u64,
    pub refused_again: u64,
}

impl Refusals {
    /// One client event, in the order they happened: a refusal with what its SYN-ACK said
    /// (`told`) and how it changed the destination's cookie (`change`, where told), or an
    /// accepted SYN-data, which ends a run.
    pub fn add(&mut self, outcome: Outcome, told: Told, change: Option<CookieChange>) {
        match outcome {
            Outcome::DataNotAcked => {
                let n = &mut self.by_cause[told.index()];
                *n = n.saturating_add(1);
                if let Some(c) = change {
                    let n = &mut self.by_change[c.index()];
                    *n = n.saturating_add(1);
                }
                self.run = self.run.saturating_add(1);
                self.longest_run = self.longest_run.max(self.run);
            }
            Outcome::Accepted => self.run = 0,
            _ => {}
        }
    }

    /// Both together (a group of destinations, a host's share). Runs are not joined across
    /// the two: the longest is the longer of theirs, a lower bound.
    pub fn merge(&mut self, o: &Refusals) {
        for (n, m) in self.by_cause.iter_mut().zip(o.by_cause) {
            *n = n.saturating_add(m);
        }
        for (n, m) in self.by_change.iter_mut().zip(o.by_change) {
            *n = n.saturating_add(m);
        }
        self.run = self.run.max(o.run);
        self.longest_run = self.longest_run.max(o.longest_run);
    }

    pub fn of(&self, told: Told) -> u64 {
        u64::from(self.by_cause[told.index()])
    }

    /// Refusals whose cookie changed so.
    pub fn changed(&self, change: CookieChange) -> u64 {
        u64::from(self.by_change[change.index()])
    }

    pub fn count(&self) -> u64 {
        self.by_cause.iter().map(|n| u64::from(*n)).sum()
    }

    /// Refusals the tracer could not tell, or did not record a cause for.
    pub fn untold(&self) -> u64 {
        self.of(Told::Cause(Cause::Unknown)).saturating_add(self.of(Told::NotRecorded))
    }

    pub fn longest_run(&self) -> u64 {
        u64::from(self.longest_run)
    }

    /// Whether the destination's cookie keeps changing (servers behind it without a shared
    /// key, a NAT pool): two or more SYN-data refused while carrying a cookie the
    /// destination had handed out to an earlier refused one, none accepted between
    /// ([`CookieChange::Again`]). Not a run length: a key rotated without a backup
    /// refuses every SYN-data already in flight with the old cookie, one round trip's
    /// worth, and each of those brings the same new cookie, which then holds. A recording
    /// made before changes were told has only its runs: two new cookies in a row.
    pub fn churns(&self) -> bool {
        if self.by_change.iter().any(|n| *n > 0) {
            return self.changed(CookieChange::Again) >= 2;
        }
        self.main_cause() == Some(Cause::NewCookie) && self.longest_run >= 2
    }

    /// The cause most refusals had (ties: a new cookie, no option, the same cookie, no
    /// cookie sent); None where none was told, or fewer were told than not.
    pub fn main_cause(&self) -> Option<Cause> {
        let told = [Cause::NewCookie, Cause::NoTfoOption, Cause::SameCookie, Cause::NoCookieSent];
        let (cause, n) = told
            .iter()
            .map(|c| (*c, self.of(Told::Cause(*c))))
            .fold((None, 0), |best, (c, n)| if n > best.1 { (Some(c), n) } else { best });
        cause.filter(|_| n >= self.untold())
    }

    /// The cause a view names for these refusals: the main one, else `unknown`; None
    /// without refusals.
    pub fn named_cause(&self) -> Option<Cause> {
        (self.count() > 0).then(|| self.main_cause().unwrap_or(Cause::Unknown))
    }

    /// How many of them had `cause`, where `unknown` takes the untold ones too (what
    /// `export`'s `cause` label says).
    pub fn with_cause(&self, cause: Cause) -> u64 {
        match cause {
            Cause::Unknown => self.untold(),
            c => self.of(Told::Cause(c)),
        }
    }

    pub fn figures(&self) -> RefusalFigures {
        RefusalFigures {
            new_cookie: self.of(Told::Cause(Cause::NewCookie)),
            no_tfo_option: self.of(Told::Cause(Cause::NoTfoOption)),
            same_cookie: self.of(Told::Cause(Cause::SameCookie)),
            no_cookie_sent: self.of(Told::Cause(Cause::NoCookieSent)),
            unknown: self.untold(),
            longest_run: self.longest_run(),
            cookie_changes: self.changed(CookieChange::First),
            in_flight: self.changed(CookieChange::InFlight),
            refused_again: self.changed(CookieChange::Again),
        }
    }
}

impl super::packed::Words for Refusals {
    fn put(&self, out: &mut Vec<u64>) {
        let Refusals { by_cause, by_change, run, longest_run } = self;
        out.extend(by_cause.iter().chain(by_change).map(|n| u64::from(*n)));
        out.extend([u64::from(*run), u64::from(*longest_run)]);
    }

    fn take(w: &mut super::packed::Taker<'_>) -> Self {
        let by_cause = std::array::from_fn(|_| w.u32());
        let by_change = std::array::from_fn(|_| w.u32());
        Refusals { by_cause, by_change, run: w.u32(), longest_run: w.u32() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEW: Told = Told::Cause(Cause::NewCookie);
    const NONE: Told = Told::Cause(Cause::NoTfoOption);

    fn of(seq: &[(Outcome, Told)]) -> Refusals {
        let mut r = Refusals::default();
        seq.iter().for_each(|(o, t)| r.add(*o, *t, None));
        r
    }

    #[test]
    fn counts_by_cause_and_the_longest_run() {
        use Outcome::{Accepted, DataNotAcked as Refused, SynRetransmitted};
        let r = of(&[
            (Refused, NEW),
            (Accepted, NEW),
            (Refused, NEW),
            (SynRetransmitted, NEW),
            (Refused, NONE),
            (Refused, Told::NotRecorded),
            (Accepted, NEW),
            (Refused, NEW),
        ]);
        assert_eq!(
            r.figures(),
            RefusalFigures {
                new_cookie: 3,
                no_tfo_option: 1,
                same_cookie: 0,
                no_cookie_sent: 0,
                unknown: 1,
                longest_run: 3,
                ..RefusalFigures::default()
            }
        );
        assert_eq!((r.count(), r.main_cause()), (5, Some(Cause::NewCookie)));
        let mut m = r;
        m.merge(&of(&[(Refused, NONE); 4]));
        assert_eq!((m.count(), m.longest_run(), m.main_cause()), (9, 4, Some(Cause::NoTfoOption)));
    }

    #[test]
    fn only_a_refused_syn_data_tells_and_views_name_its_main_cause() {
        use crate::events::{sample_event, Event, Role};
        let refused = |cause| Event { cause, ..sample_event(Role::Client, Outcome::DataNotAcked) };
        let told = |e: &Event| Told::of(&e.view());
        assert_eq!(told(&refused(Some(Cause::NewCookie))), Some(NEW));
        assert_eq!(told(&refused(None)), Some(Told::NotRecorded), "a recording from before causes");
        assert_eq!(told(&sample_event(Role::Client, Outcome::Accepted)), None);
        assert_eq!(told(&sample_event(Role::Server, Outcome::CookieInvalid)), None);

        assert_eq!(Refusals::default().named_cause(), None);
        let r = of(&[(Outcome::DataNotAcked, Told::NotRecorded), (Outcome::DataNotAcked, NONE)]);
        assert_eq!(r.named_cause(), Some(Cause::NoTfoOption));
        assert_eq!((r.with_cause(Cause::Unknown), r.with_cause(Cause::NoTfoOption)), (1, 1));
        let r = of(&[(Outcome::DataNotAcked, Told::NotRecorded)]);
        assert_eq!(r.named_cause(), Some(Cause::Unknown), "refused, cause not told");
    }

    #[test]
    fn no_main_cause_where_most_were_not_told() {
        let r = of(&[
            (Outcome::DataNotAcked, NEW),
            (Outcome::DataNotAcked, Told::Cause(Cause::Unknown)),
            (Outcome::DataNotAcked, Told::NotRecorded),
        ]);
        assert_eq!(r.main_cause(), None);
        assert_eq!(Refusals::default().main_cause(), None);
    }

    /// A rotation seen with 16 SYN-data in flight: one new cookie, the other 15 left with
    /// the old one before it came, all refused in a row; then the new cookie holds. A
    /// fleet without a shared key: every new cookie is refused again at its next use.
    #[test]
    fn churn_is_a_cookie_refused_again_not_a_run() {
        use CookieChange::{Again, First, InFlight};
        let mut rotation = Refusals::default();
        rotation.add(Outcome::DataNotAcked, NEW, Some(First));
        for _ in 0..15 {
            rotation.add(Outcome::DataNotAcked, NEW, Some(InFlight));
        }
        rotation.add(Outcome::Accepted, NEW, None);
        assert_eq!((rotation.longest_run(), rotation.churns()), (16, false));
        let f = rotation.figures();
        assert_eq!((f.new_cookie, f.cookie_changes, f.in_flight, f.refused_again), (16, 1, 15, 0));

        let mut fleet = Refusals::default();
        fleet.add(Outcome::DataNotAcked, NEW, Some(First));
        fleet.add(Outcome::DataNotAcked, NEW, Some(Again));
        assert!(!fleet.churns(), "once is not yet alternating");
        fleet.add(Outcome::DataNotAcked, NEW, Some(Again));
        assert!(fleet.churns());

        // Untold causes, but SYN-data that carried a cookie handed out just before.
        let mut untold = Refusals::default();
        for change in [None, Some(Again), Some(Again)] {
            untold.add(Outcome::DataNotAcked, Told::Cause(Cause::Unknown), change);
        }
        assert!(untold.churns());

        // A recording from before changes were told: its runs.
        let old = of(&[(Outcome::DataNotAcked, NEW), (Outcome::DataNotAcked, NEW)]);
        assert!(old.churns());
        assert!(!of(&[(Outcome::DataNotAcked, NEW)]).churns());
    }
}
