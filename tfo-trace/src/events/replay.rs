//! Reading recordings back (`report --from`, `top --from`): every line read, bad ones
//! skipped and counted ([`BadLines`]), a header in the middle (recordings joined with
//! `cat a b`) passed on as the start of a new segment, and the caller's selection applied
//! (the filter flags, as the kernel applies them live: `EventFilter::selects`): one reader
//! for every view that replays.
use std::{fs::File, io::BufReader, path::Path};

use anyhow::Result;

use super::{
    record::{BadLines, Events, Header, Line},
    Event,
};

/// Which events a replay hands on (the rest are read and passed over).
pub(crate) type Select = Box<dyn Fn(&Event) -> bool>;

/// What a replay hands on: the events the filter selects, and the headers after line 1.
// Nearly every line is an event: boxing it would allocate once per event for the sake
// of the rare header.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Replayed {
    Event(Event),
    Header(Header),
}

pub(crate) struct Replay {
    lines: Events<BufReader<File>>,
    select: Select,
    /// The bad lines skipped so far.
    pub bad: BadLines,
    /// The namespace names of every event read so far, selected or not.
    pub netns_names: RecordedNetnsNames,
}

impl Replay {
    /// Opens a recording: its first header, and the replay of the rest.
    pub(crate) fn open(path: &Path, select: Select) -> Result<(Header, Replay)> {
        let (header, lines) = Events::open(path)?;
        let (bad, netns_names) = (BadLines::default(), RecordedNetnsNames::default());
        Ok((header, Replay { lines, select, bad, netns_names }))
    }

    /// The selected events alone (headers passed over), for views that merge segments.
    pub(crate) fn events(&mut self) -> impl Iterator<Item = Event> + '_ {
        self.filter_map(|r| match r {
            Replayed::Event(e) => Some(e),
            Replayed::Header(_) => None,
        })
    }
}

impl Iterator for Replay {
    type Item = Replayed;

    fn next(&mut self) -> Option<Replayed> {
        loop {
            match self.lines.next()? {
                Line::Event(e) => {
                    self.netns_names.add(e.netns_name.as_ref());
                    if (self.select)(&e) {
                        return Some(Replayed::Event(e));
                    }
                }
                Line::Header(h) => return Some(Replayed::Header(h)),
                Line::Bad(bad) => self.bad.add(bad),
            }
        }
    }
}

/// The `netns_name`s a replay's events were recorded with (before any filter), for
/// `EventFilter::netns_name_unrecorded`: up to [`RecordedNetnsNames::MAX`] of them.
#[derive(Clone, Debug, Default)]
pub(crate) struct RecordedNetnsNames {
    names: std::collections::BTreeSet<std::sync::Arc<str>>,
    /// More names came than are kept.
    full: bool,
}

impl RecordedNetnsNames {
    const MAX: usize = 4096;

    pub(crate) fn add(&mut self, name: Option<&std::sync::Arc<str>>) {
        let Some(name) = name else { return };
        if self.names.contains(name) {
            return;
        }
        if self.names.len() >= Self::MAX {
            self.full = true;
            return;
        }
        self.names.insert(name.clone());
    }

    pub(crate) fn extend(&mut self, other: &RecordedNetnsNames) {
        for n in &other.names {
            self.add(Some(n));
        }
        self.full |= other.full;
    }

    /// Whether an event was recorded with this name.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// Whether more names came than are kept (a name not kept may still have been recorded).
    pub(crate) fn is_full(&self) -> bool {
        self.full
    }

    /// The names kept, in order.
    pub(crate) fn names(&self) -> Vec<&str> {
        self.names.iter().map(|n| &**n).collect()
    }
}
