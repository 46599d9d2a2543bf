//! The one place where parsed flags become options: the loader's [`LoadOptions`] and each
//! view's options, every default and implication (`--json` also means a JSON closing
//! summary) said here once. The views take these, never clap's types.
use std::{net::SocketAddr, path::PathBuf, time::Duration};

#[cfg(feature = "fixtures")]
use super::args::FloorArgs;
use super::args::{
    DemoArgs, ExportArgs, ProbeArgs, ReportArgs, ReportFormat, Sort, TopArgs, TraceArgs, WindowArgs,
};
#[cfg(feature = "fixtures")]
use crate::probes::BackendChoice;
use crate::{
    aggregation::{metrics::Breakdown, report::GroupOptions},
    events::{flight::writer::Limits, record::RecordTo, replay::Window},
    filter::EventFilter,
    probes::LoadOptions,
};

/// What every live run that follows events until it stops shares (`trace`, `stalls`,
/// `top`, `export`): what to load, when to stop, how to say the closing summary, and where
/// to record.
pub struct LiveOptions {
    pub load: LoadOptions,
    /// Stop by itself after this long (scripts, tests); None: until a signal.
    pub duration: Option<Duration>,
    /// The closing summary as one JSON object on stderr.
    pub(crate) json_summary: bool,
    /// `--record FILE`: every event also goes there (see `events::record`).
    pub record: Option<RecordTo>,
}

/// `trace` and `stalls`: a live run printed line by line.
pub struct LinesOptions {
    pub live: LiveOptions,
    /// One JSON object per line instead of text columns.
    pub json: bool,
    /// `--from`: recordings instead of live events.
    pub from: Option<Replaying>,
}

/// What a view replays instead of tracing (`--from`): recordings (files, a flight
/// recorder's directory, folders of them), their events as the filter flags and the window
/// (`--since`, `--until`) select them.
pub struct Replaying {
    pub paths: Vec<PathBuf>,
    pub filter: EventFilter,
    pub window: Window,
}

pub struct TopOptions {
    pub live: LiveOptions,
    /// Refresh interval (`-d`).
    pub interval: Duration,
    /// Stop after this many refreshes (`--count`).
    pub count: Option<u64>,
    /// Plain rows even on a terminal.
    pub batch: bool,
    /// One JSON snapshot per interval (implies no terminal UI).
    pub json: bool,
    pub sort: Sort,
    pub filter: String,
    /// Groups kept per table (least recently seen evicted beyond it).
    pub(crate) max_groups: usize,
    /// `--from FILE`: the tables of a recording instead of live events, as the filter
    /// flags select them.
    pub from: Option<(PathBuf, EventFilter)>,
}

pub struct ExportOptions {
    /// Never records: `--record` is not one of export's flags.
    pub live: LiveOptions,
    /// None: no HTTP server (textfile only).
    pub listen: Option<SocketAddr>,
    pub textfile: Option<PathBuf>,
    /// How often the textfile is rewritten.
    pub interval: Duration,
    /// The one opt-in label of the connection and stall counters, and its cap.
    pub(crate) breakdown: Option<Breakdown>,
    /// `--web.config.file`: TLS and basic auth (exporter-toolkit's format).
    pub web_config: Option<PathBuf>,
    /// `--flight-recorder DIR` and its limits: every event also kept there.
    pub flight_recorder: Option<(PathBuf, Limits)>,
}

pub struct ReportOptions {
    pub source: ReportSource,
    pub format: ReportFormat,
    pub(crate) group: GroupOptions,
    /// The rows shown (the rest summed in one line); None: every row.
    pub top: Option<usize>,
}

/// What a report is made from.
pub enum ReportSource {
    /// Traced now, for `duration` (None: until Ctrl-C).
    Live { load: LoadOptions, duration: Option<Duration> },
    /// Recordings (files, flight recorders' directories, folders), their events as the
    /// filter flags and the window select them.
    Recordings { paths: Vec<PathBuf>, filter: EventFilter, window: Window },
}

pub struct DemoOptions {
    pub load: LoadOptions,
    /// How long the lab makes traffic.
    pub duration: Duration,
    /// `top`'s tables as JSON lines instead of the terminal UI.
    pub json: bool,
    /// The closing summary as one JSON object on stderr.
    pub(crate) json_summary: bool,
}

#[cfg(feature = "fixtures")]
pub struct FloorOptions {
    pub backend: BackendChoice,
    pub duration: Option<Duration>,
}

impl ProbeArgs {
    /// What the loader needs from these flags.
    fn load_options(&self) -> LoadOptions {
        LoadOptions {
            backend: self.backend,
            ring_buffer_bytes: self.ring_buffer_size,
            refusal_events_only: false,
            btf: self.btf.clone(),
            filter: self.filter.kernel_filter(),
            cgroups: self.filter.cgroups().to_vec(),
            names: self.names,
        }
    }
}

/// Where `--record` writes (`--force`: replacing the file).
fn record_to(record: Option<PathBuf>, force: bool) -> Option<RecordTo> {
    record.map(|path| RecordTo { path, replace: force })
}

impl WindowArgs {
    fn window(&self) -> Window {
        Window { since_ns: self.since, until_ns: self.until }
    }
}

impl TraceArgs {
    /// `trace`'s and `stalls`' options.
    pub fn options(self) -> LinesOptions {
        let from = (!self.from.is_empty()).then(|| Replaying {
            filter: self.probe.filter.event_filter(),
            window: self.window.window(),
            paths: self.from,
        });
        LinesOptions {
            live: LiveOptions {
                load: self.probe.load_options(),
                duration: self.duration,
                json_summary: self.json || self.summary.json_summary,
                record: record_to(self.record, self.force),
            },
            json: self.json,
            from,
        }
    }
}

impl TopArgs {
    pub fn options(self) -> TopOptions {
        let from = self.from.map(|path| (path, self.probe.filter.event_filter()));
        TopOptions {
            live: LiveOptions {
                load: self.probe.load_options(),
                duration: self.duration,
                json_summary: self.json || self.summary.json_summary,
                record: record_to(self.record, self.force),
            },
            interval: self.delay,
            count: self.count,
            batch: self.batch,
            json: self.json,
            sort: self.sort,
            filter: self.filter,
            max_groups: self.max_groups,
            from,
        }
    }
}

impl ExportArgs {
    pub fn options(self) -> ExportOptions {
        let breakdown = match (self.top_destinations, self.top_containers) {
            (Some(k), _) => Some(Breakdown::Destinations(k.into())),
            (None, Some(k)) => Some(Breakdown::Containers(k.into())),
            (None, None) => None,
        };
        let flight_recorder = self.flight_recorder.map(|dir| {
            (dir, Limits { max_bytes: self.flight_recorder_size, max_age: self.flight_recorder_age })
        });
        // Without a per-destination label the kernel's counts are the metrics: only
        // refused SYN-data (their causes) need to come as events, unless the flight
        // recorder keeps them all.
        let refusal_events_only = breakdown.is_none() && flight_recorder.is_none();
        let load = LoadOptions { refusal_events_only, ..self.probe.load_options() };
        ExportOptions {
            live: LiveOptions {
                load,
                duration: self.duration,
                json_summary: self.summary.json_summary,
                record: None,
            },
            listen: (!self.web_disable).then_some(self.web_listen_address),
            textfile: self.textfile,
            interval: self.interval,
            breakdown,
            web_config: self.web_config_file,
            flight_recorder,
        }
    }
}

impl ReportArgs {
    pub fn options(self) -> ReportOptions {
        let source = if self.from.is_empty() {
            ReportSource::Live { load: self.probe.load_options(), duration: self.duration }
        } else {
            ReportSource::Recordings {
                filter: self.probe.filter.event_filter(),
                window: self.window.window(),
                paths: self.from,
            }
        };
        ReportOptions {
            source,
            format: self.format,
            group: GroupOptions { by: self.group_by, prefix_v4: self.prefix_v4, prefix_v6: self.prefix_v6 },
            top: (!self.all).then_some(self.top),
        }
    }
}

impl DemoArgs {
    pub fn options(self) -> DemoOptions {
        DemoOptions {
            // Names on: the demo's clients look their servers up by name (with dnsmasq).
            load: LoadOptions { names: true, ..self.probe.load_options() },
            duration: self.duration,
            json: self.json,
            json_summary: self.json || self.summary.json_summary,
        }
    }
}

#[cfg(feature = "fixtures")]
impl FloorArgs {
    pub fn options(self) -> FloorOptions {
        FloorOptions { backend: self.backend, duration: self.duration }
    }
}
