//! Reading recordings back (`report --from`, `top --from`): every line read, bad ones
//! skipped and counted ([`BadLines`]), a header in the middle (recordings joined with
//! `cat a b`) passed on as the start of a new segment, and the filter flags applied as the
//! kernel applies them live ([`EventFilter`]): one reader for every view that replays.
use std::{fs::File, io::BufReader, path::Path};

use anyhow::Result;

use crate::{
    events::{
        record::{BadLines, Events, Header, Line},
        Event,
    },
    filter::{EventFilter, RecordedNetnsNames},
};

/// What a replay hands on: the events the filter selects, and the headers after line 1.
// Nearly every line is an event: boxing it would allocate once per event for the sake
// of the rare header.
#[allow(clippy::large_enum_variant)]
pub enum Replayed {
    Event(Event),
    Header(Header),
}

pub struct Replay {
    lines: Events<BufReader<File>>,
    filter: EventFilter,
    /// The bad lines skipped so far.
    pub bad: BadLines,
    /// The namespace names of every event read so far, selected or not.
    pub netns_names: RecordedNetnsNames,
}

impl Replay {
    /// Opens a recording: its first header, and the replay of the rest.
    pub fn open(path: &Path, filter: EventFilter) -> Result<(Header, Replay)> {
        let (header, lines) = Events::open(path)?;
        let (bad, netns_names) = (BadLines::default(), RecordedNetnsNames::default());
        Ok((header, Replay { lines, filter, bad, netns_names }))
    }

    /// The selected events alone (headers passed over), for views that merge segments.
    pub fn events(&mut self) -> impl Iterator<Item = Event> + '_ {
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
                    if self.filter.selects(&e) {
                        return Some(Replayed::Event(e));
                    }
                }
                Line::Header(h) => return Some(Replayed::Header(h)),
                Line::Bad(bad) => self.bad.add(bad),
            }
        }
    }
}
