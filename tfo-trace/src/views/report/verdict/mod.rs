//! The report's verdicts in words: each row's verdict (`aggregation::report::verdict`: its
//! kind, strength and figures) said as one plain sentence, what is wrong and what to do,
//! and the evidence it rests on, one line each. One function per verdict kind, in
//! [`client`] (destinations), [`listener`] and [`namespace`] (a namespace's counters, the
//! kernel's TFO cache), [`refusal`] for refused SYN-data by cause; the listener and the
//! namespace share [`server_sentences`], every row [`said`]'s hosts line. Text, Markdown and
//! JSON all say them from here; this file gives the JSON its verdicts.
mod client;
mod listener;
mod namespace;
mod no_cookie;
mod refusal;
mod said;
mod server_sentences;

use serde::Serialize;

pub(super) use self::namespace::cached_sentence;
pub(super) use self::said::Said;
pub(super) use self::{
    client::said as said_client, listener::said as said_listener, namespace::said as said_finding,
};
use crate::aggregation::{
    blackhole::PauseSummary,
    report::verdict::{
        CachedDrops, DestinationReport, Kind, ListenerReport, NamespaceFinding, Strength, Support, Verdict,
    },
};

/// A verdict as the JSON gives it: its kind, what it says, and how strong it is.
#[derive(Serialize)]
pub(super) struct SaidVerdict<'a> {
    kind: Kind,
    sentence: String,
    evidence: Vec<String>,
    strength: Strength,
    support: &'a Support,
}

impl<'a> SaidVerdict<'a> {
    fn of<F>(v: &'a Verdict<F>, said: Said) -> SaidVerdict<'a> {
        SaidVerdict {
            kind: v.kind,
            sentence: said.sentence,
            evidence: said.evidence,
            strength: v.strength,
            support: &v.support,
        }
    }
}

/// A destination's or a listener's row with its verdict said, as the JSON gives it: the
/// row's figures, then the verdict.
#[derive(Serialize)]
pub(super) struct SaidRow<'a, R> {
    #[serde(flatten)]
    row: &'a R,
    verdict: SaidVerdict<'a>,
}

impl<'a> SaidRow<'a, DestinationReport> {
    pub(super) fn destination(row: &'a DestinationReport) -> Self {
        SaidRow { row, verdict: SaidVerdict::of(&row.verdict, said_client(row)) }
    }
}

impl<'a> SaidRow<'a, ListenerReport> {
    pub(super) fn listener(row: &'a ListenerReport) -> Self {
        SaidRow { row, verdict: SaidVerdict::of(&row.verdict, said_listener(row)) }
    }
}

/// A namespace's finding with its verdict said, as the JSON gives it.
#[derive(Serialize)]
pub(super) struct SaidFinding<'a> {
    netns: u32,
    verdict: SaidVerdict<'a>,
    source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pause: Option<&'a PauseSummary>,
}

impl<'a> SaidFinding<'a> {
    pub(super) fn of(n: &'a NamespaceFinding) -> SaidFinding<'a> {
        SaidFinding {
            netns: n.netns,
            verdict: SaidVerdict::of(&n.verdict, said_finding(n)),
            source: n.source,
            pause: n.pause.as_ref(),
        }
    }
}

/// What the kernel's TFO cache remembers, with its sentence, as the JSON gives it.
#[derive(Serialize)]
pub(super) struct SaidCached<'a> {
    #[serde(flatten)]
    drops: &'a CachedDrops,
    sentence: String,
}

impl<'a> SaidCached<'a> {
    pub(super) fn of(drops: &'a CachedDrops) -> SaidCached<'a> {
        SaidCached { drops, sentence: cached_sentence(drops) }
    }
}
